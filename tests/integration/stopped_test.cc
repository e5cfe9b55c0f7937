// A job that stops (issue 27): on the simulated node, a 4-rank allreduce loop whose rank 2 stops
// (SIGSTOP) or dies (SIGKILL) mid-loop. While it hangs, the live report and `watch` name rank 2 as
// the one that stopped and the operation the others wait in, and the shim's P2PTRACE_HANG_S line
// says the same on their stderr; after kill -9 of the whole job the post-mortem report still does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

const std::string kDemo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The job's command line: 4 ranks of the demo node, each traced into DIR/t.
std::string JobCommand(const std::string& dir, const std::string& fault, int timeout_s, int iters) {
  return "env P2PTRACE_DIR=" + dir + "/t P2PSIM_NCCL_DIR=" + dir + " P2PSIM_NCCL_TIMEOUT=" + std::to_string(timeout_s) +
         " P2PTRACE_HANG_S=2 P2PSIM_FAULT=" + fault + " " + P2PSIM + " launch --topology " + kDemo +
         " --hosts node0:4 -- env LD_PRELOAD=" + P2PTRACE_SHIM + " " + NCCL_RING + " -o allreduce -n " +
         std::to_string(iters) + " -b 1M -e 1M " + dir;
}

json Stopped(const std::string& report_json) {
  json j = json::parse(report_json, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << report_json;
  return j.is_discarded() ? json{} : j["stopped"];
}

// The finding names rank 2 first, in ncclAllReduce #5 of the world, and ranks 0, 1, 3 waiting there.
void ExpectRankTwoFirst(const json& st, const std::string& when) {
  SCOPED_TRACE(when);
  ASSERT_TRUE(st.value("present", false)) << st.dump(1);
  int first = st.value("first_process", -1);
  ASSERT_GE(first, 0) << st.dump(1);
  EXPECT_EQ(st["processes"][first]["rank"], 2) << st.dump(1);
  EXPECT_NE(st["verdict"].get<std::string>().find("rank 2 "), std::string::npos) << st["verdict"];
  EXPECT_NE(st["first_doing"].get<std::string>().find("ncclAllReduce #5"), std::string::npos) << st["first_doing"];
  ASSERT_EQ(st["comms"].size(), 1u) << st.dump(1);
  EXPECT_NE(st["comms"][0]["waits"].get<std::string>().find("ranks 0-1, 3 wait in ncclAllReduce #5"), std::string::npos)
      << st["comms"][0]["waits"];
  for (const json& m : st["comms"][0]["members"]) EXPECT_EQ(m["collectives"], 5) << m.dump();
}

TEST(Stopped, ARankThatStopsIsNamedLiveAndPostMortem) {
  std::string dir = TempDir() + "/stop";
  fs::create_directories(dir);
  std::string cli = P2PTRACE_CLI;
  // The job in a session of its own, so that one kill -9 takes all of it; looked at while it hangs.
  std::string script = "setsid " + JobCommand(dir, "stop@2:5", 120, 50) + " >" + dir + "/job.out 2>" + dir +
                       "/job.err & pid=$!\n"
                       "sleep 7\n" +
                       cli + " report --stall 2 --json " + dir + "/t >" + dir + "/live.json\n" + cli +
                       " watch --once --stall 2 " + dir + "/t >" + dir + "/watch.txt\n"
                       "kill -9 -$pid; wait $pid; sleep 1\n" +
                       cli + " report --stall 2 --json " + dir + "/t >" + dir + "/post.json\n" + cli +
                       " report --stall 2 " + dir + "/t >" + dir + "/post.txt\n";
  RunResult r = RunProgram({"sh", "-c", script}, {{"NO_COLOR", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectRankTwoFirst(Stopped(Slurp(dir + "/live.json")), "live");
  ExpectRankTwoFirst(Stopped(Slurp(dir + "/post.json")), "post mortem");
  // The text leads with it, before the capture lines.
  std::string text = Slurp(dir + "/post.txt");
  EXPECT_LT(text.find("STOPPED: rank 2 "), text.find("capture (what the shim saw")) << text;
  EXPECT_NE(Slurp(dir + "/watch.txt").find("STOPPED: rank 2 "), std::string::npos) << Slurp(dir + "/watch.txt");
  // Each waiting rank said it once on its stderr, naming the operation; rank 2 (stopped) could not.
  std::string err = Slurp(dir + "/job.err");
  for (int rank : {0, 1, 3})
    EXPECT_NE(err.find("rank " + std::to_string(rank) + " of 4 (GPU" + std::to_string(rank) +
                       "): ncclAllReduce #5 of communicator"),
              std::string::npos)
        << err;
  EXPECT_EQ(err.find("rank 2 of 4 (GPU2): ncclAllReduce"), std::string::npos) << err;
}

TEST(Stopped, ARankKilledMidCollectiveIsNamedFirstAndTheOthersErrorsAreCollateral) {
  std::string dir = TempDir() + "/die";
  fs::create_directories(dir);
  // The others time out after 4 s and exit with NCCL errors; the job ends by itself.
  RunResult r = RunProgram({"sh", "-c", JobCommand(dir, "die@1:3", 4, 10)}, {{"NO_COLOR", "1"}});
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  RunResult rep = RunProgram({P2PTRACE_CLI, "report", "--stall", "2", "--json", dir + "/t"}, {{"NO_COLOR", "1"}});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  json st = Stopped(rep.out);
  ASSERT_TRUE(st.value("present", false)) << st.dump(1);
  int first = st.value("first_process", -1);
  ASSERT_GE(first, 0) << st.dump(1);
  EXPECT_EQ(st["processes"][first]["rank"], 1) << st.dump(1);
  EXPECT_NE(st["first_doing"].get<std::string>().find("ncclAllReduce #3"), std::string::npos) << st["first_doing"];
  // The others ran on to their timeout: their errors are after rank 1's last sign of life.
  uint64_t died = st["processes"][first]["last_seen_realtime_ns"];
  int errors = 0;
  for (const json& p : st["processes"]) {
    if (p["rank"] == 1) continue;
    EXPECT_GT(p["last_seen_realtime_ns"].get<uint64_t>(), died + 2000000000ull) << p.dump();
    errors += !p["nccl_errors"].empty();
  }
  EXPECT_EQ(errors, 3) << st.dump(1);
}

}  // namespace
