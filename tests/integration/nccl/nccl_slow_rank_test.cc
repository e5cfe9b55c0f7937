// A job that runs slow, on the simulated node: 4 ranks of an allreduce loop, one thing wrong at a
// time — rank 2 8 ms late before every collective (P2PSIM_FAULT=late), rank 1 with NCCL_P2P_DISABLE in
// its environment alone, one NVLink of GPU1-GPU2 at half speed with its error counter growing, one
// host of two without GPUDirect RDMA — and healthy. The report must name the late rank, or the slow
// hop with its transport and cause, in at least 95% of runs, and nothing in a healthy run; and say it
// in JSON, text, HTML, the Perfetto track and `watch`.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::testing::Env;
using p2ptrace::testing::ReadFile;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using p2ptrace::testing::WriteFile;

std::string Topology(const std::string& name) { return std::string(P2PTRACE_TOPOLOGY_DIR) + "/" + name; }

struct Case {
  std::string name;
  std::string topology = "demo-8gpu.json";
  std::string hosts = "node0:4";
  std::string fault;               // P2PSIM_FAULT
  std::string rank_env;            // "1 NCCL_P2P_DISABLE=1": that rank's process alone gets it
  std::function<void(json&)> edit;  // changes to the topology
};

// Runs the case's job under the shim into DIR/t (a fresh DIR). The job's exit code.
int RunJob(const Case& c, const std::string& dir, int iterations) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string topology = Topology(c.topology);
  if (c.edit) {
    json topo = json::parse(ReadFile(topology));
    c.edit(topo);
    topology = dir + "/topology.json";
    WriteFile(topology, topo.dump(1));
  }
  std::vector<std::string> argv = {P2PSIM, "launch", "--topology", topology, "--hosts", c.hosts, "--",
                                   "env", std::string("LD_PRELOAD=") + P2PTRACE_SHIM};
  if (!c.rank_env.empty()) {  // p2psim launch gives every rank one environment: a wrapper gives one rank its own
    std::string rank = c.rank_env.substr(0, c.rank_env.find(' ')), var = c.rank_env.substr(c.rank_env.find(' ') + 1);
    WriteFile(dir + "/rank-env.sh", "#!/bin/sh\nif [ \"$RANK\" = " + rank + " ]; then export " + var + "; fi\nexec \"$@\"\n");
    fs::permissions(dir + "/rank-env.sh", fs::perms::owner_all);
    argv.push_back(dir + "/rank-env.sh");
  }
  for (std::string a : {NCCL_RING, "-o", "allreduce", "-n", "", "-b", "1M", "-e", "1M"}) argv.push_back(a);
  argv[argv.size() - 5] = std::to_string(iterations);
  argv.push_back(dir);
  Env env{{"P2PTRACE_DIR", dir + "/t"}, {"P2PSIM_NCCL_DIR", dir}, {"P2PTRACE_WARN", "off"},
          {"P2PSIM_FAULT", c.fault.empty() ? std::nullopt : std::optional<std::string>(c.fault)},
          {"P2PTRACE_SAMPLE", std::nullopt}, {"NCCL_P2P_DISABLE", std::nullopt}, {"CUDA_VISIBLE_DEVICES", std::nullopt},
          {"LD_PRELOAD", std::nullopt}, {"NO_COLOR", "1"}};
  RunResult r = RunProgram(argv, env);
  EXPECT_EQ(r.exit_code, 0) << c.name << "\n" << r.out << r.err;
  return r.exit_code;
}

json Report(const std::string& dir) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir + "/t", "--json"}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j.is_discarded() ? json::object() : j;
}

const Case kLate{"late", "demo-8gpu.json", "node0:4", "late@2:8", "", nullptr};  // 8 ms more compute each step
const Case kP2pOff{"p2p-off-on-rank-1", "demo-8gpu.json", "node0:4", "", "1 NCCL_P2P_DISABLE=1", nullptr};
// GPU1's NVLinks 6-11 join it to GPU2 on the demo node; a storm on one halves the pair's NVLink rate.
const Case kNvlinkHalf{"nvlink-half", "demo-8gpu.json", "node0:4", "", "", [](json& t) {
                         t["link_faults"] = json::array({{{"host", "node0"}, {"gpu", 1}, {"nvlink", 6}, {"counter", "replay"},
                                                          {"per_gb", 1000}, {"slowdown", 0.5}}});
                         t.erase("copy_faults");
                       }};
const Case kNoGdr{"net-without-gdr", "two-node-ib.json", "node0:2,node1:2", "", "",
                  [](json& t) { t["hosts"][1]["gdr"] = false; }};
const Case kHealthy{"healthy", "demo-8gpu.json", "node0:4", "", "", nullptr};

// Whether the report names what the case broke: the class, and the rank or the pair.
bool Named(const Case& c, const json& report, std::string* got) {
  const json& s = report.value("slow_rank", json::object());
  *got = s.dump().substr(0, 600);
  bool present = s.value("present", false);
  if (&c == &kHealthy) return !present;
  if (!present) return false;
  std::string kind = s.value("kind", ""), pair = s["pair"].is_string() ? s["pair"].get<std::string>() : "";
  if (&c == &kLate) return kind == "late-rank" && s["rank"] == 2 && s["gpu"] == "GPU2";
  if (&c == &kP2pOff) return kind == "host-staged-hop" && pair == "node0 GPU1 -> GPU2" && s["transport"] == "shm";
  if (&c == &kNvlinkHalf)
    return kind == "slow-hop" && pair == "node0 GPU1 -> GPU2" && s["transport"] == "nvlink" &&
           s["causes"].dump().find("link-errors") != std::string::npos;
  // node1 lacks GPUDirect RDMA: both cross-host hops run without it.
  return kind == "slow-hop" && s["transport"] == "net_ib" &&
         (pair == "node0 GPU1 -> node1 GPU0" || pair == "node1 GPU1 -> node0 GPU0");
}

// The matrix: each case run again and again; once under a sanitizer, which checks the code a run
// takes, not the odds.
TEST(NcclSlowRank, EachFaultIsNamedWithItsClassAndPairInAtLeast95PercentOfRunsAndHealthyRunsHaveNone) {
#ifdef P2PTRACE_SANITIZED
  constexpr int kRuns = 1;
#else
  constexpr int kRuns = 20;
#endif
  for (const Case* c : {&kLate, &kP2pOff, &kNvlinkHalf, &kNoGdr, &kHealthy}) {
    int named = 0;
    std::string misses;
    for (int run = 0; run < kRuns; ++run) {
      std::string dir = TempDir() + "/slow-" + c->name;
      if (RunJob(*c, dir, 20) != 0) continue;
      std::string got;
      if (Named(*c, Report(dir), &got)) ++named;
      else misses += "\n  run " + std::to_string(run) + ": " + got;
    }
    std::cout << c->name << (c == &kHealthy ? ": no finding in " : ": named in ") << named << " of " << kRuns << " runs\n";
    if (c == &kHealthy) EXPECT_EQ(named, kRuns) << "a healthy run had a slow-rank finding:" << misses;
    else EXPECT_GE(named * 100, kRuns * 95) << c->name << ": named in " << named << " of " << kRuns << misses;
  }
}

// One late run, read every way: the figures, the finding, the text, HTML, Perfetto and watch.
TEST(NcclSlowRank, TheLateRankHowLateAndWhatTheOthersWaitInEveryOutput) {
  std::string dir = TempDir() + "/slow-late-outputs";
  Case late = kLate;
  late.fault = "late@2:20";
  ASSERT_EQ(RunJob(late, dir, 30), 0);
  json j = Report(dir);
  const json& s = j["slow_rank"];
  ASSERT_TRUE(s.value("present", false)) << s.dump(1);
  EXPECT_EQ(s["kind"], "late-rank");
  EXPECT_EQ(s["rank"], 2);
  EXPECT_EQ(s["host"], "node0");
  EXPECT_EQ(s["nranks"], 4);
  EXPECT_EQ(s["compared"], 30) << s.dump(1);
  EXPECT_GE(s["last"].get<int>(), 28) << s.dump(1);
  // It sleeps 20 ms after each collective: it calls the next one about 20 ms after the others.
  EXPECT_GE(s["late_median_ms"].get<double>(), 18) << s.dump(1);
  EXPECT_LE(s["late_median_ms"].get<double>(), 60) << s.dump(1);
  EXPECT_GE(s["late_p90_ms"].get<double>(), s["late_median_ms"].get<double>());
  // One allreduce a step; three ranks wait about 20 ms each in it.
  EXPECT_EQ(s["step_collectives"], 1) << s.dump(1);
  EXPECT_GE(s["wait_per_step_ms"].get<double>(), 3 * 18) << s.dump(1);
  EXPECT_LE(s["wait_per_step_ms"].get<double>(), 3 * 60) << s.dump(1);
  EXPECT_NEAR(s["wait_seconds"].get<double>(), s["wait_per_step_ms"].get<double>() * 30 / 1000, 0.05) << s.dump(1);
  ASSERT_EQ(s["comms"].size(), 1u);
  EXPECT_EQ(s["comms"][0]["clock"], "CLOCK_MONOTONIC of one boot");
  EXPECT_EQ(s["comms"][0]["last_by_rank"][2], s["last"]);
  bool found = false;
  for (const json& f : j["findings"])
    if (f["id"] == "slow-rank") {
      found = true;
      EXPECT_EQ(f["cause"], "late-rank");
      EXPECT_EQ(f["ranks"], json::array({2}));
      EXPECT_EQ(f["severity"], "warning");
      EXPECT_NE(f["fix"].get<std::string>().find("profile rank 2"), std::string::npos) << f.dump();
    }
  EXPECT_TRUE(found) << j["findings"].dump(1);

  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir + "/t"}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("warning [slow-rank] late-rank: rank 2 (node0 GPU2"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("last most often: rank 2"), std::string::npos) << text.out;

  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "html", dir + "/t", "-o", dir + "/r.html"}).exit_code, 0);
  std::string html = ReadFile(dir + "/r.html");
  EXPECT_NE(html.find("<h2>Slow rank</h2>"), std::string::npos);
  EXPECT_NE(html.find("late-rank: rank 2"), std::string::npos);

  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "export", dir + "/t", "--perfetto", dir + "/p.json"}).exit_code, 0);
  json pf = json::parse(ReadFile(dir + "/p.json"), nullptr, false);
  ASSERT_FALSE(pf.is_discarded());
  int points = 0, rank2_behind = 0;
  for (const json& e : pf["traceEvents"])
    if (e["ph"] == "C" && e["name"].get<std::string>().rfind("arrival lag", 0) == 0) {
      ++points;
      ASSERT_EQ(e["args"].size(), 4u) << e.dump();
      if (e["args"]["rank 2"].get<double>() >= 15) ++rank2_behind;
    }
  EXPECT_EQ(points, 30);
  EXPECT_GE(rank2_behind, 28);

  RunResult watch = RunProgram({P2PTRACE_CLI, "watch", "--once", dir + "/t"}, {{"NO_COLOR", "1"}});
  EXPECT_NE(watch.out.find("SLOW: late-rank: rank 2"), std::string::npos) << watch.out;
}

}  // namespace
