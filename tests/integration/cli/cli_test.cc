// The CLI end to end: `p2ptrace run` of a real CUDA program on the simulated node, then the report
// (text and JSON), dump, and what happens when nothing can be traced.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <set>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "p2ptrace/trace_format.h"
#include "tests/support/subprocess.h"

namespace {

using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

std::map<std::string, std::optional<std::string>> SimEnv() {
  return {{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR},
          {"P2PSIM_TOPOLOGY", std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json"},
          {"P2PSIM_HOST", std::nullopt}, {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"P2PTRACE_SAMPLE", std::nullopt},
          {"NO_COLOR", "1"}};
}

// Where `p2ptrace run --json`'s report starts in stdout, after the program's own output: the line
// that is only "{" (the report's nested objects are indented; its first key may change).
size_t ReportStart(const std::string& out) {
  if (out.rfind("{\n", 0) == 0) return 0;  // the program printed nothing
  size_t at = out.find("\n{\n");
  return at == std::string::npos ? at : at + 1;
}

const nlohmann::json* FindPair(const nlohmann::json& report, int src, int dst, const std::string& transport) {
  for (const auto& p : report["pairs"])
    if (p["src"]["gpu"] == src && p["dst"]["gpu"] == dst && p["transport"] == transport) return &p;
  return nullptr;
}

// peer_copy --size 1M --iters 1: per cell one warm-up and one timed copy, first with peer access
// off (every pair host-staged), then with it on (islands of four over NVLink, the rest staged).
class PeerCopyTraced : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = TempDir() + "/peer_copy";
    run_ = RunProgram({P2PTRACE_CLI, "run", "--dir", dir_, "--json", "--", PEER_COPY, "--size", "1M", "--iters", "1"},
                      SimEnv());
  }
  static std::string dir_;
  static RunResult run_;
};
std::string PeerCopyTraced::dir_;
RunResult PeerCopyTraced::run_;

TEST_F(PeerCopyTraced, ReportListsEveryDirectionalPairWithItsPath) {
  ASSERT_EQ(run_.exit_code, 0) << run_.err;
  // stdout holds peer_copy's own output, then the JSON report.
  size_t start = ReportStart(run_.out);
  ASSERT_NE(start, std::string::npos) << run_.out;
  nlohmann::json j = nlohmann::json::parse(run_.out.substr(start));
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["pairs"].size(), 24u * 2 + 32u);  // in-island pairs both ways, cross-island staged only
  const nlohmann::json* direct = FindPair(j, 0, 1, "nvlink");
  ASSERT_NE(direct, nullptr);
  EXPECT_EQ((*direct)["calls"], 2);
  EXPECT_EQ((*direct)["bytes"], 2 << 20);
  EXPECT_EQ((*direct)["fallback"], false);
  EXPECT_NEAR((*direct)["gbps"].get<double>(), 123, 0.5);
  EXPECT_EQ((*direct)["src"]["bus_id"], "0000:18:00.0");
  const nlohmann::json* staged = FindPair(j, 0, 1, "host_staged");
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ((*staged)["calls"], 2);
  EXPECT_EQ((*staged)["expected"], "nvlink");
  EXPECT_EQ((*staged)["fallback"], true);
  EXPECT_NEAR((*staged)["gbps"].get<double>(), 20, 0.2);
  EXPECT_EQ((*staged)["causes"][0]["id"], "peer-access-not-enabled");
  const nlohmann::json* cross = FindPair(j, 6, 1, "host_staged");
  ASSERT_NE(cross, nullptr);
  EXPECT_EQ((*cross)["calls"], 4);
  EXPECT_EQ((*cross)["expected"], "host_staged");
  EXPECT_EQ((*cross)["fallback"], false);
  EXPECT_EQ((*cross)["causes"][0]["id"], "nvml-p2p-status");
  EXPECT_EQ(FindPair(j, 6, 1, "nvlink"), nullptr);
  EXPECT_EQ(j["capture"]["cudart_13"], true);
  EXPECT_EQ(j["capture"]["nvml_link_types"], true);
  EXPECT_EQ(j["capture"]["abnormal_exits"], 0);
}

TEST_F(PeerCopyTraced, TextReportShowsTheMatrixAndTheFindings) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir_}, {{"NO_COLOR", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU0       X  NVL*  NVL*  NVL*   HST   HST   HST   HST\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning [peer-access-not-enabled] host_staged instead of nvlink on 24 pairs"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("info [nvml-p2p-status] host_staged on 32 pairs"), std::string::npos) << r.out;
}

TEST_F(PeerCopyTraced, DumpPrintsHeaderCountersAndRecordsAsJsonLines) {
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(dir_))  // the trace, not a marker file beside it
    if (e.path().extension() == ".p2ptrace") file = e.path().string();
  ASSERT_FALSE(file.empty());
  RunResult r = RunProgram({P2PTRACE_CLI, "dump", file, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int copies = 0, timed_copies = 0, timings = 0, counters = 0, peers = 0;
  std::getline(lines, line);
  nlohmann::json header = nlohmann::json::parse(line);
  EXPECT_EQ(header["kind"], "header");
  EXPECT_EQ(header["device_count"], 8);
  EXPECT_EQ(header["bus_ids"][7], "0000:db:00.0");
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    copies += j["kind"] == "copy";
    timed_copies += j["kind"] == "copy" && (j["flags"].get<uint32_t>() & P2PTRACE_COPY_TIMED) != 0;
    timings += j["kind"] == "timing";
    counters += j["kind"] == "counter";
    peers += j["kind"] == "peer";
  }
  EXPECT_EQ(copies, 24 * 4 + 32 * 4);  // every cross-device copy, none of the same-device ones
  // All are within the first 8 of their pair, so all are sampled; a sampled copy goes untimed only
  // when the capped event pool is used up (a loaded machine), and a timing may miss the exit's
  // bounded drain. So: most are timed, and every TIMING belongs to a copy flagged timed.
  EXPECT_GE(timed_copies * 2, copies);
  EXPECT_LE(timings, timed_copies);
  EXPECT_GE(timings * 2, copies);
  EXPECT_EQ(counters, 24 * 2 + 32);  // the pairs' cells; same-device copies are not counted
  EXPECT_GT(peers, 56);                  // capability queries and enable/disable calls
}

TEST(Cli, StaticCudartIsReportedUntraced) {
#ifdef P2PTRACE_SANITIZED
  GTEST_SKIP() << "a sanitizer-built shim cannot be preloaded into nvcc's uninstrumented binary";
#endif
  std::string dir = TempDir() + "/static";
  RunResult bare = RunProgram({STATIC_CUDART_PROGRAM}, SimEnv());
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", STATIC_CUDART_PROGRAM}, SimEnv());
  EXPECT_EQ(r.exit_code, bare.exit_code) << r.out << r.err;  // the program's own status: untraced is said, not returned
  EXPECT_NE(r.err.find("untraced: " STATIC_CUDART_PROGRAM " carries a statically linked CUDA runtime"),
            std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir));  // created by run, left empty: removed
}

// A wrapper never changes the job's status (`p2ptrace run -- /bin/true` exited 1 because
// nothing was recorded): the job's code whatever was recorded, 128+N when signal N ended it.
TEST(Cli, RunExitsWithTheJobsStatus) {
  std::string dir = TempDir() + "/status";
  struct Case { std::vector<std::string> cmd; int code; };
  for (const Case& c : {Case{{"/bin/true"}, 0}, Case{{"/bin/false"}, 1}, Case{{"sh", "-c", "exit 7"}, 7},
                        Case{{"sh", "-c", "kill -TERM $$"}, 128 + SIGTERM},
                        Case{{"sh", "-c", "kill -KILL $$"}, 128 + SIGKILL}}) {
    std::vector<std::string> argv = {P2PTRACE_CLI, "run", "--dir", dir, "--"};
    argv.insert(argv.end(), c.cmd.begin(), c.cmd.end());
    RunResult r = RunProgram(argv, SimEnv());
    EXPECT_EQ(r.exit_code, c.code) << c.cmd.back() << "\n" << r.err;
    EXPECT_NE(r.err.find("untraced"), std::string::npos) << r.err;  // said, on stderr
  }
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", PEER_COPY, "--size", "1M", "--bogus-option"}, SimEnv());
  RunResult bare = RunProgram({PEER_COPY, "--size", "1M", "--bogus-option"}, SimEnv());
  EXPECT_NE(bare.exit_code, 0);
  EXPECT_EQ(r.exit_code, bare.exit_code) << r.err;
}

TEST(Cli, VersionIsPrinted) {
  for (const char* flag : {"--version", "-V"}) {
    RunResult r = RunProgram({P2PTRACE_CLI, flag});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "p2ptrace " P2PTRACE_VERSION_TEXT "\n");
  }
}

TEST(Cli, BadInputGivesOneLineAndExit2) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", TempDir() + "/nonexistent"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  std::string junk = TempDir() + "/junk.p2ptrace";
  p2ptrace::testing::WriteFile(junk, "not a trace at all, but long enough to hold a header? no.");
  r = RunProgram({P2PTRACE_CLI, "dump", junk});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("junk.p2ptrace: truncated before the end of its header"), std::string::npos) << r.err;
  r = RunProgram({P2PTRACE_CLI, "run"});
  EXPECT_EQ(r.exit_code, 2);
  r = RunProgram({P2PTRACE_CLI, "frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(Shim, OnlyDependsOnTheCRuntime) {
#ifdef P2PTRACE_SANITIZED
  GTEST_SKIP() << "sanitizer builds link their runtimes";
#endif
  RunResult r = RunProgram({"readelf", "-d", P2PTRACE_SHIM});
  ASSERT_EQ(r.exit_code, 0);
  std::istringstream lines(r.out);
  std::vector<std::string> needed;
  for (std::string l; std::getline(lines, l);)
    if (l.find("(NEEDED)") != std::string::npos) needed.push_back(l.substr(l.find('[') + 1, l.find(']') - l.find('[') - 1));
  for (const std::string& n : needed)
    EXPECT_TRUE(n.rfind("libc.so", 0) == 0 || n.rfind("libdl.so", 0) == 0 || n.rfind("libpthread.so", 0) == 0 ||
                n.rfind("libm.so", 0) == 0 || n.rfind("ld-linux", 0) == 0)
        << n;
  r = RunProgram({"readelf", "-V", P2PTRACE_SHIM});
  for (const char* node : {"libcudart.so.11.0", "libcudart.so.12", "libcudart.so.13"})
    EXPECT_NE(r.out.find(std::string("Name: ") + node), std::string::npos) << node;
}

}  // namespace

namespace {

// A 4-rank NCCL job on the simulated node under `p2ptrace run`: the shim taps NCCL's log (the user
// set no NCCL_DEBUG) and the report carries, per GPU pair, the transport NCCL printed.
nlohmann::json NcclJob(const std::string& name, std::map<std::string, std::optional<std::string>> extra,
                       const std::string& topology = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json",
                       const std::string& hosts = "node0:4") {
  std::string dir = TempDir() + "/" + name, rendezvous = TempDir() + "/" + name + "-id";
  std::filesystem::create_directories(rendezvous);
  auto env = SimEnv();
  env["NCCL_DEBUG"] = std::nullopt;
  env["NCCL_DEBUG_FILE"] = std::nullopt;
  env["P2PTRACE_NCCL_TAP"] = std::nullopt;
  for (auto& [k, v] : extra) env[k] = v;
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--json", "--", P2PSIM, "launch", "--topology", topology,
                            "--hosts", hosts, "--", NCCL_RING, rendezvous},
                           env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("NCCL INFO"), std::string::npos) << "NCCL's lines must not reach the user";
  size_t start = ReportStart(r.out);
  if (start == std::string::npos) {
    ADD_FAILURE() << r.out;
    return {};
  }
  return nlohmann::json::parse(r.out.substr(start));
}

TEST(NcclReport, PairsCarryTheTransportNcclPrinted) {
  nlohmann::json j = NcclJob("nccl-p2p", {});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["capture"]["nccl_logs"], 4);
  int nccl_pairs = 0;
  for (const auto& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    ++nccl_pairs;
    // NCCL's log says only P2P; the node's NVML names the link (demo-8gpu: NV6 within an island).
    EXPECT_EQ(p["transport"], "nvlink");
    EXPECT_EQ(p["link"], "NV6");
    EXPECT_EQ(p["nccl_transports"], nlohmann::json::array({"P2P/CUMEM"}));
    EXPECT_EQ(p["src"]["host"], "node0");
    EXPECT_EQ(p["fallback"], false);
  }
  EXPECT_EQ(nccl_pairs, 4);  // the ring 0→1→2→3→0
  // Operations of all four ranks, with the timed ones' bandwidth.
  bool allreduce = false;
  for (const auto& o : j["nccl_ops"]) {
    if (o["op"] != "ncclAllReduce") continue;
    allreduce = true;
    EXPECT_EQ(o["nranks"], 4);
    EXPECT_EQ(o["calls"], 4);  // one per rank
    EXPECT_EQ(o["timed_calls"], 4);
    EXPECT_GT(o["busbw_gbps"].get<double>(), 0);
    EXPECT_EQ(o["ranks"].size(), 4u);
  }
  EXPECT_TRUE(allreduce) << j["nccl_ops"].dump();
}

// A one-rank communicator moves nothing across a link (an in-place one-rank allreduce showed
// algbw 17185.3 GB/s): no rate in JSON or text, and the reason said.
TEST(NcclReport, OneRankCommunicatorsGiveNoRate) {
  nlohmann::json j = NcclJob("nccl-one-rank", {}, std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json", "node0:1");
  ASSERT_FALSE(j.is_null());
  int ops = 0;
  for (const auto& o : j["nccl_ops"]) {
    ++ops;
    EXPECT_EQ(o["nranks"], 1) << o.dump();
    EXPECT_GT(o["calls"].get<int>(), 0) << o.dump();
    EXPECT_TRUE(o["algbw_gbps"].is_null()) << o.dump();
    EXPECT_TRUE(o["busbw_gbps"].is_null()) << o.dump();
    EXPECT_EQ(o["rate_note"], "one rank: nothing crossed a link") << o.dump();
  }
  EXPECT_GT(ops, 0);
  RunResult r = RunProgram({P2PTRACE_CLI, "report", TempDir() + "/nccl-one-rank"});
  EXPECT_NE(r.out.find("one rank: nothing crossed a link"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("algbw"), r.out.find("algbw/busbw")) << r.out;  // only the heading's
}

// Cluster host names: `gpu01.cluster.local`. NCCL names its log's host by the first label
// (%h and the lines' prefix); traces carry the whole name. Logs, traces and identities must agree:
// the logs are found, the host keeps its name, GPUs their index, NVLink its name, connections once.
nlohmann::json DottedHostJob(const std::string& name, const std::vector<std::string>& hosts, const std::string& ranks) {
  std::ifstream in(std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json");
  nlohmann::json topo = nlohmann::json::parse(in);
  nlohmann::json first = topo["hosts"][0];
  topo["hosts"] = nlohmann::json::array();
  for (size_t i = 0; i < hosts.size(); ++i) {
    nlohmann::json h = first;
    h["name"] = hosts[i];
    h["boot_id"] = "8c2f4d1e-0b7a-4c55-9e61-3f1a2b3c4d5" + std::to_string(i);
    topo["hosts"].push_back(h);
  }
  std::string path = TempDir() + "/" + name + ".json";
  p2ptrace::testing::WriteFile(path, topo.dump(1));
  return NcclJob(name, {}, path, ranks);
}

TEST(NcclReport, HostNamesWithDotsKeepTheirLogsGpusAndLinks) {
  for (const std::string host : {"gpu01.cluster.local", "7node-a.rack-3.example.org"}) {
    nlohmann::json j = DottedHostJob("dotted-" + host.substr(0, 4), {host}, host + ":4");
    ASSERT_FALSE(j.is_null()) << host;
    EXPECT_EQ(j["capture"]["nccl_logs"], 4) << host;
    EXPECT_EQ(j["capture"]["nccl_from_traces"], 0) << host;
    int nccl_pairs = 0;
    for (const auto& p : j["pairs"]) {
      if (p["source"] != "nccl") continue;
      ++nccl_pairs;
      EXPECT_EQ(p["src"]["host"], host) << p.dump();
      EXPECT_TRUE(p["src"]["gpu"].is_number()) << p.dump();  // GPUn, not the bus id
      EXPECT_EQ(p["transport"], "nvlink") << p.dump();
      EXPECT_EQ(p["nccl_from"], "log") << p.dump();
    }
    EXPECT_EQ(nccl_pairs, 4) << host;  // the ring, each connection once
    for (const auto& r : j["ranks"]) EXPECT_EQ(r["host"], host) << r.dump();
  }
}

// Two hosts whose names share their first label stay two hosts.
TEST(NcclReport, HostsSharingTheirFirstLabelDoNotMerge) {
  nlohmann::json j = DottedHostJob("twin-hosts", {"gpu01.a.example", "gpu01.b.example"}, "gpu01.a.example:2,gpu01.b.example:2");
  ASSERT_FALSE(j.is_null());
  std::map<std::string, int> ranks_per_host;
  for (const auto& r : j["ranks"]) ++ranks_per_host[r["host"].get<std::string>()];
  EXPECT_EQ(ranks_per_host, (std::map<std::string, int>{{"gpu01.a.example", 2}, {"gpu01.b.example", 2}}));
  EXPECT_EQ(j["capture"]["nccl_logs"], 4);
  std::set<std::pair<std::string, std::string>> host_pairs;
  for (const auto& p : j["pairs"])
    if (p["source"] == "nccl") host_pairs.insert({p["src"]["host"].get<std::string>(), p["dst"]["host"].get<std::string>()});
  EXPECT_EQ(host_pairs, (std::set<std::pair<std::string, std::string>>{{"gpu01.a.example", "gpu01.a.example"},
                                                                        {"gpu01.a.example", "gpu01.b.example"},
                                                                        {"gpu01.b.example", "gpu01.b.example"},
                                                                        {"gpu01.b.example", "gpu01.a.example"}}))
      << j["pairs"].dump();
}

// Two ranks on one GPU (torchrun's two ranks on one GPU): NCCL's init fails after the
// process's first CUDA calls (cudaSetDevice, streams, events: none the shim records). The capture
// line says so and names the failed call, never "a static runtime" or "ended before any CUDA call";
// the finding is NCCL's duplicate-gpu with its WARN line; the job's status is its own.
TEST(NcclReport, InitFailureIsSaidInTheCaptureLine) {
  std::string dir = TempDir() + "/dup-gpu", rendezvous = TempDir() + "/dup-gpu-id";
  std::filesystem::create_directories(rendezvous);
  auto env = SimEnv();
  env["NCCL_DEBUG"] = std::nullopt;
  env["NCCL_DEBUG_FILE"] = std::nullopt;
  env["P2PTRACE_NCCL_TAP"] = std::nullopt;
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--json", "--", P2PSIM, "launch", "--topology",
                            std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json", "--hosts", "node0:2", "--",
                            NCCL_RING, "-D", "0", rendezvous},
                           env);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ncclCommInitRank(&g.comm, g_opt.WorldSize(), id, g.rank) failed"), std::string::npos) << r.err;
  size_t start = ReportStart(r.out);
  ASSERT_NE(start, std::string::npos) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out.substr(start));
  ASSERT_EQ(j["ranks"].size(), 2u);
  for (const auto& rank : j["ranks"]) {
    std::string mode = rank["capture_mode"], trust = rank["trust"];
    EXPECT_NE(mode.find("no CUDA copy or peer call reached the shim before NCCL's init failed"), std::string::npos) << mode;
    EXPECT_NE(trust.find("ncclCommInitRank returned 5 (ncclInvalidUsage)"), std::string::npos) << trust;
    EXPECT_EQ(trust.find("static"), std::string::npos) << trust;
  }
  bool duplicate = false;
  for (const auto& f : j["findings"])
    if (f.value("cause", "") == "duplicate-gpu" || f["id"] == "duplicate-gpu") duplicate = true;
  EXPECT_TRUE(duplicate) << j["findings"].dump();
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir});
  EXPECT_EQ(text.out.find("CUDA runtime ?"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Duplicate GPU detected : rank"), std::string::npos) << text.out;
}

// NCCL's log files gone from the trace directory (not copied off the node, deleted): the report
// takes each such process's connections from the lines its shim recorded in the trace, and the
// pairs, transports, connection counts and bytes come out as they did from the logs; the report
// says per pair and per rank where they came from.
TEST(NcclReport, WithoutItsLogFilesTheTracesConnectionRecordsGiveTheSamePairs) {
  nlohmann::json from_logs = NcclJob("nccl-logs-lost", {});
  ASSERT_FALSE(from_logs.is_null());
  std::string dir = TempDir() + "/nccl-logs-lost";
  using Pair = std::tuple<int, int, std::string, nlohmann::json, int, uint64_t, bool, std::string>;
  auto nccl_pairs = [](const nlohmann::json& j, std::map<std::pair<int, int>, std::string>* from) {
    std::vector<Pair> out;
    for (const auto& p : j["pairs"]) {
      if (p["source"] != "nccl") continue;
      out.emplace_back(p["src"]["gpu"], p["dst"]["gpu"], p["transport"], p["nccl_transports"], p["channels"],
                       p["bytes"], p["fallback"], p["expected"]);
      (*from)[{p["src"]["gpu"], p["dst"]["gpu"]}] = p["nccl_from"];
    }
    return out;
  };
  std::map<std::pair<int, int>, std::string> from;
  std::vector<Pair> expected = nccl_pairs(from_logs, &from);
  ASSERT_EQ(expected.size(), 4u);  // the ring 0→1→2→3→0
  for (const auto& [gpus, where] : from) EXPECT_EQ(where, "log");
  EXPECT_EQ(from_logs["capture"]["nccl_from_traces"], 0);
  std::map<int, std::string> log_of_rank;  // the tap's file: nccl.<host>.<pid>.log
  for (const auto& e : std::filesystem::directory_iterator(dir))
    for (const auto& r : from_logs["ranks"])
      if (e.path().filename().string().rfind("nccl.", 0) == 0 &&
          e.path().filename().string().find("." + std::to_string(r["pid"].get<int>()) + ".log") != std::string::npos)
        log_of_rank[r["rank"]] = e.path().string();
  ASSERT_EQ(log_of_rank.size(), 4u);

  // Ranks 0 and 1 lose their logs: the pairs they logged (0→1, 1→2) come from their traces.
  std::filesystem::remove(log_of_rank[0]);
  std::filesystem::remove(log_of_rank[1]);
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json half = nlohmann::json::parse(r.out);
  from.clear();
  EXPECT_EQ(nccl_pairs(half, &from), expected);
  EXPECT_EQ(from, (std::map<std::pair<int, int>, std::string>{
                      {{0, 1}, "trace"}, {{1, 2}, "trace"}, {{2, 3}, "log"}, {{3, 0}, "log"}}));
  EXPECT_EQ(half["capture"]["nccl_logs"], 2);
  EXPECT_EQ(half["capture"]["nccl_from_traces"], 2);

  // Every log gone.
  std::filesystem::remove(log_of_rank[2]);
  std::filesystem::remove(log_of_rank[3]);
  r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json none = nlohmann::json::parse(r.out);
  from.clear();
  EXPECT_EQ(nccl_pairs(none, &from), expected);
  for (const auto& [gpus, where] : from) EXPECT_EQ(where, "trace");
  EXPECT_EQ(none["capture"]["nccl_logs"], 0);
  EXPECT_EQ(none["capture"]["nccl_from_traces"], 4);
  for (const auto& rank : none["ranks"])
    EXPECT_EQ(rank["nccl_log"], "trace records: the tapped log is not in the trace directory") << rank.dump();
  r = RunProgram({P2PTRACE_CLI, "report", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("note: the NCCL connections of 4 processes come from the connection lines their traces "
                       "recorded: their NCCL log files are not in " + dir),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("NCCL, 4 connections: P2P/CUMEM (from trace)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NCCL connections from the trace (log file missing)"), std::string::npos) << r.out;
}

TEST(NcclReport, TheUsersOwnDebugFileIsReadWhereItIs) {
  std::string user_dir = TempDir() + "/user-nccl-logs";
  std::filesystem::create_directories(user_dir);
  nlohmann::json j = NcclJob("nccl-user-file", {{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", user_dir + "/mine.%h.%p"}});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["capture"]["nccl_logs"], 4);
  EXPECT_EQ(j["ranks"][0]["nccl_log"], "user file");
  int nccl_pairs = 0;
  for (const auto& p : j["pairs"]) nccl_pairs += p["source"] == "nccl";
  EXPECT_EQ(nccl_pairs, 4);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(user_dir)) files += e.path().filename().string().rfind("mine.node0.", 0) == 0;
  EXPECT_EQ(files, 4);  // untouched, where the user wanted them
}

TEST(NcclReport, P2pDisabledShowsShmWithNcclsOwnReason) {
  nlohmann::json j = NcclJob("nccl-shm", {{"NCCL_P2P_DISABLE", "1"}});
  ASSERT_FALSE(j.is_null());
  int shm = 0;
  for (const auto& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    EXPECT_EQ(p["transport"], "shm");
    EXPECT_EQ(p["nccl_transports"], nlohmann::json::array({"SHM/direct/direct"}));
    EXPECT_EQ(p["fallback"], true);
    ASSERT_FALSE(p["causes"].empty());
    EXPECT_EQ(p["causes"][0]["id"], "env-p2p-disabled");
    ++shm;
  }
  EXPECT_EQ(shm, 4);
}

// Two GPUs on two sockets: NCCL's default P2P level (PXB) sends their traffic through host memory
// and NCCL prints no reason. The shim's job-start prediction knew it: the report marks the pairs as
// fallbacks from pcie_p2p and gives the predicted cause with its evidence and fix.
TEST(NcclReport, PathBeyondTheP2pLevelIsAFallbackWithThePredictedCause) {
  std::string topo = TempDir() + "/cross-socket.json";
  p2ptrace::testing::WriteFile(topo, R"({"version": 1, "hosts": [{"name": "node0",
      "cpus": [{"id": "cpu0"}, {"id": "cpu1"}],
      "gpus": [{"index": 0, "bus_id": "0000:1a:00.0", "parent": "cpu0"},
               {"index": 1, "bus_id": "0000:9a:00.0", "parent": "cpu1"}]}]})");
  nlohmann::json j = NcclJob("nccl-cross-socket", {}, topo, "node0:2");
  ASSERT_FALSE(j.is_null());
  int shm = 0;
  for (const auto& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    ++shm;
    EXPECT_EQ(p["transport"], "shm") << p.dump();
    EXPECT_EQ(p["fallback"], true) << p.dump();
    EXPECT_EQ(p["expected"], "pcie_p2p") << p.dump();
    ASSERT_EQ(p["causes"].size(), 1u) << p.dump();
    const auto& c = p["causes"][0];
    EXPECT_EQ(c["id"], "topology-beyond-p2p-level");
    EXPECT_EQ(c["origin"], "preflight");
    ASSERT_FALSE(c["evidence"].empty());
    EXPECT_NE(c["evidence"][0].get<std::string>().find("SYS"), std::string::npos) << c.dump();
    EXPECT_FALSE(c["fix"].get<std::string>().empty());
  }
  EXPECT_EQ(shm, 2);  // 0 -> 1 and back
  ASSERT_EQ(j["preflight"].size(), 1u);
  EXPECT_EQ(j["preflight"][0]["host"], "node0");
}

}  // namespace

// export --rows of a real traced program: the shim recorded who started it (core/scheduler.h), and
// every row carries it — a SLURM job step, then a Kubernetes pod (downward API variables).
TEST(Rows, CarryTheSchedulersIdsTheShimRecorded) {
  struct Case {
    std::string name;
    std::map<std::string, std::optional<std::string>> env;
    std::string scheduler, job_id;
    nlohmann::json node, pod, ns;
    int rank;
  };
  std::vector<Case> cases = {
      {"slurm", {{"SLURM_JOB_ID", "918273"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"},
                 {"SLURMD_NODENAME", "gpu-a17"}},
       "slurm", "918273", "gpu-a17", nullptr, nullptr, 3},
      {"k8s", {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"POD_NAME", "train-worker-2"}, {"POD_NAMESPACE", "ml"},
               {"NODE_NAME", "gke-a3-7"}, {"TORCHELASTIC_RUN_ID", "train-7f3"}, {"RANK", "2"}, {"WORLD_SIZE", "4"}},
       "kubernetes", "train-7f3", "gke-a3-7", "train-worker-2", "ml", 2},
  };
  for (const Case& c : cases) {
    std::string dir = TempDir() + "/rows_" + c.name, rows = dir + ".ndjson";
    auto env = SimEnv();
    for (const char* n : {"SLURM_JOB_ID", "SLURM_PROCID", "RANK", "TORCHELASTIC_RUN_ID", "KUBERNETES_SERVICE_HOST",
                          "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMIX_NAMESPACE"})
      env[n] = std::nullopt;
    for (const auto& [k, v] : c.env) env[k] = v;
    RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", PEER_COPY, "--size", "1M", "--iters", "1"}, env);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    r = RunProgram({P2PTRACE_CLI, "export", dir, "--rows", rows});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string text = p2ptrace::testing::ReadFile(rows);
    size_t pairs = 0;
    for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
      nlohmann::json row = nlohmann::json::parse(text.substr(at, nl - at));
      EXPECT_EQ(row["schema"], "p2ptrace.rows/1");
      if (row["kind"] != "pair") continue;
      ++pairs;
      EXPECT_EQ(row["scheduler"], c.scheduler) << c.name;
      EXPECT_EQ(row["job_id"], c.job_id) << c.name;
      EXPECT_EQ(row["scheduler_job_id"], c.job_id) << c.name;
      EXPECT_EQ(row["node"], c.node) << c.name;
      EXPECT_EQ(row["k8s_pod"], c.pod) << c.name;
      EXPECT_EQ(row["k8s_namespace"], c.ns) << c.name;
      EXPECT_EQ(row["src_rank"], c.rank) << c.name;
      EXPECT_EQ(row["trace_job_id"], "rows_" + c.name) << c.name;  // the trace directory's name
      EXPECT_TRUE(row["class_used"] == "nvlink" || row["class_used"] == "host_staged") << row.dump();
      EXPECT_EQ(row["source"], "cuda");
      EXPECT_EQ(row["src_model"], "NVIDIA H100 80GB HBM3");  // the job-start probe's NVML names
      EXPECT_EQ(row["gpu_models"], nlohmann::json::array({"NVIDIA H100 80GB HBM3"}));
      EXPECT_FALSE(row["seconds"].is_null());  // --iters 1: the timed copy of each cell
    }
    EXPECT_EQ(pairs, 24u * 2 + 32u) << c.name;  // as the report: in-island pairs both ways, cross-island staged only
  }
  // Timing off: the same pairs, but no time, rate or cost was measured — null, never 0.
  std::string dir = TempDir() + "/rows_untimed", rows = dir + ".ndjson";
  auto env = SimEnv();
  env["P2PTRACE_SAMPLE"] = "off";
  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", PEER_COPY, "--size", "1M", "--iters", "1"}, env)
                .exit_code, 0);
  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "export", dir, "--rows", rows}).exit_code, 0);
  std::string text = p2ptrace::testing::ReadFile(rows);
  size_t pairs = 0;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    nlohmann::json row = nlohmann::json::parse(text.substr(at, nl - at));
    ++pairs;
    EXPECT_GT(row["bytes"].get<uint64_t>(), 0u);  // counted exactly…
    EXPECT_EQ(row["timed_calls"], 0);
    EXPECT_TRUE(row["seconds"].is_null()) << row.dump();  // …but never timed
    EXPECT_TRUE(row["gbps"].is_null()) << row.dump();
    EXPECT_TRUE(row["lost_seconds"].is_null()) << row.dump();
  }
  EXPECT_EQ(pairs, 24u * 2 + 32u);
}
