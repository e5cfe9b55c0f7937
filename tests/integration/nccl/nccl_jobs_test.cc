// NCCL jobs shaped like the ones people run: nccl-tests' single-process
// multi-GPU (-g), one thread per GPU (-t), alltoall, gather/scatter and send/recv in groups, a
// split, communicators destroyed and re-created — examples/nccl_ring on the simulated node, bare and
// under `p2ptrace run`, judged by what the program itself printed (nccl-tests' figures), by the
// traces' own timing records, and by `report --json` and `export --perfetto`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace_reader.h"
#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"
#include "p2ptrace/trace_format.h"
#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::testing::Env;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

const std::string kDemo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";

Env SimEnv(const std::string& rendezvous) {
  fs::create_directories(rendezvous);
  return {{"P2PSIM_NCCL_TIMEOUT", "30"}, {"P2PSIM_NCCL_DIR", rendezvous}, {"NCCL_DEBUG", std::nullopt},
          {"NCCL_DEBUG_FILE", std::nullopt}, {"NCCL_DEBUG_SUBSYS", std::nullopt}, {"P2PTRACE_NCCL_TAP", std::nullopt},
          {"P2PTRACE_NCCL_TAP_FILE", std::nullopt}, {"P2PTRACE_NCCL_FORWARD", std::nullopt},
          {"P2PTRACE_NCCL_LOG", std::nullopt}, {"P2PTRACE_SAMPLE", std::nullopt}, {"P2PTRACE_DIR", std::nullopt},
          {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"LD_PRELOAD", std::nullopt}, {"NO_COLOR", "1"}};
}

// nccl_ring with `args` on `hosts` of the demo node, in a directory of its own; under `p2ptrace
// run` (traces in DIR/trace) when `traced`.
RunResult Job(const std::string& dir, const std::string& hosts, const std::vector<std::string>& args, bool traced,
              Env extra = {}) {
  fs::create_directories(dir + "/id");
  Env env = SimEnv(dir + "/rendezvous");
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> cmd;
  if (traced) cmd = {P2PTRACE_CLI, "run", "--dir", dir + "/trace", "--"};
  for (const std::string& a : {std::string(P2PSIM), std::string("launch"), std::string("--topology"), kDemo,
                               std::string("--hosts"), hosts, std::string("--"), std::string(NCCL_RING)})
    cmd.push_back(a);
  cmd.insert(cmd.end(), args.begin(), args.end());
  cmd.push_back(dir + "/id");
  return RunProgram(cmd, env);
}

json ReportJson(const std::string& dir) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

std::vector<p2ptrace::Trace> ReadDir(const std::string& dir) {
  std::vector<p2ptrace::Trace> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".p2ptrace") continue;
    auto t = p2ptrace::ReadTrace(e.path().string());
    if (!t.ok()) ADD_FAILURE() << t.error().message;
    else out.push_back(std::move(t.value()));
  }
  return out;
}

// The program's own figures, one per line it printed: "allreduce size 1048576 B time … algbw … busbw …".
struct Printed {
  std::string op;
  uint64_t size;
  double us, algbw, busbw;
};
std::vector<Printed> ProgramLines(const std::string& out) {
  static const std::regex kLine(R"((\S+)\s+size\s+(\d+) B\s+time\s+([0-9.]+) us\s+algbw\s+([0-9.]+) GB/s\s+busbw\s+([0-9.]+) GB/s)");
  std::vector<Printed> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, kLine))
      lines.push_back({m[1], std::stoull(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5])});
  }
  return lines;
}

// The operations nccl_ring can run, all of them.
const char* kAllOps =
    "allreduce,broadcast,reduce,allgather,reducescatter,alltoall,alltoallp2p,gather,scatter,gatherp2p,scatterp2p,sendrecv";

// ---- the examples: every shape runs on the simulated node, and the shim changes nothing -----------

struct Shape {
  const char* name;
  const char* hosts;
  std::vector<std::string> args;
  // The simulated clock of one thread's streams is its own; threads of one process share the host
  // clock, so what one waits for another varies from run to run: only their sizes are compared.
  bool same_times = true;
};

class NcclJobShape : public ::testing::TestWithParam<Shape> {};

TEST_P(NcclJobShape, RunsCorrectlyAndTheShimChangesNothing) {
  const Shape& s = GetParam();
  std::string dir = TempDir() + "/shape-" + s.name;
  RunResult bare = Job(dir + "/bare", s.hosts, s.args, false);
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  EXPECT_NE(bare.out.find("all results correct"), std::string::npos) << bare.out;
  EXPECT_EQ(bare.err.find("not simulated"), std::string::npos) << bare.err;  // nothing the sim lacks
  RunResult traced = Job(dir + "/traced", s.hosts, s.args, true);
  ASSERT_EQ(traced.exit_code, 0) << traced.out << traced.err;
  // The program's lines (results, and times measured on the simulated clock) are the bare run's.
  // Ranks and threads print in whatever order they finish: compared as sets of lines.
  std::vector<Printed> a = ProgramLines(bare.out), b = ProgramLines(traced.out);
  auto order = [&](const Printed& x, const Printed& y) {
    return s.same_times ? std::tie(x.op, x.size, x.us) < std::tie(y.op, y.size, y.us) : std::tie(x.op, x.size) < std::tie(y.op, y.size);
  };
  std::sort(a.begin(), a.end(), order);
  std::sort(b.begin(), b.end(), order);
  ASSERT_FALSE(a.empty()) << bare.out;
  ASSERT_EQ(a.size(), b.size()) << traced.out;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].op, b[i].op);
    EXPECT_EQ(a[i].size, b[i].size);
    if (s.same_times) {
      EXPECT_DOUBLE_EQ(a[i].us, b[i].us) << a[i].op;
    }
  }
  EXPECT_NE(traced.out.find("all results correct"), std::string::npos) << traced.out;
}

INSTANTIATE_TEST_SUITE_P(
    Sim, NcclJobShape,
    ::testing::Values(
        // nccl-tests' single process, 8 GPUs: communicators made in one group, every operation,
        // a size sweep, iterations, a split and a re-created communicator.
        Shape{"g8", "node0:1", {"-g", "8", "-o", kAllOps, "-b", "8K", "-e", "64K", "-f", "8", "-n", "2", "-s", "-r", "1"}},
        Shape{"initall", "node0:1", {"-g", "4", "-i", "all", "-o", kAllOps, "-b", "16K", "-e", "16K"}},
        // one thread per GPU, and threads of two GPUs each in two processes
        Shape{"t4", "node0:1", {"-t", "4", "-o", kAllOps, "-b", "16K", "-e", "16K", "-s"}, false},
        Shape{"p2t2g2", "node0:2", {"-t", "2", "-g", "2", "-o", kAllOps, "-b", "32K", "-e", "32K", "-s", "-r", "1"}, false},
        // one process per GPU, as torchrun: the split and the re-creation
        Shape{"p4", "node0:4", {"-o", kAllOps, "-b", "16K", "-e", "16K", "-s", "-r", "1"}}),
    [](const ::testing::TestParamInfo<Shape>& i) { return std::string(i.param.name); });

// ---- point 6: the ranks are NCCL's, each with its GPU, and each has its own timeline -----------

// The export's process names ("rank 3 · node0 GPU3 (pid 77)") by timeline pid, and how many NCCL
// slices each timeline process holds.
struct Timeline {
  std::map<int64_t, std::string> names;
  std::map<int64_t, int> nccl_slices;
};
Timeline Export(const std::string& trace_dir, const std::string& out) {
  RunResult r = RunProgram({P2PTRACE_CLI, "export", trace_dir, "--perfetto", out}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  json j = json::parse(in, nullptr, false);
  Timeline t;
  if (j.is_discarded()) {
    ADD_FAILURE() << out << " is not JSON";
    return t;
  }
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") t.names[e["pid"].get<int64_t>()] = e["args"]["name"];
    if (e["ph"] == "b" && e["cat"] == "p2ptrace.nccl") ++t.nccl_slices[e["pid"].get<int64_t>()];
  }
  return t;
}

struct RanksCase {
  const char* name;
  const char* hosts;
  std::vector<std::string> args;
  int processes, ranks;
};

class NcclJobRanks : public ::testing::TestWithParam<RanksCase> {};

TEST_P(NcclJobRanks, EveryNcclRankWithItsGpuAndTimeline) {
  const RanksCase& c = GetParam();
  std::string dir = TempDir() + "/ranks-" + c.name;
  RunResult r = Job(dir, c.hosts, c.args, true);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The header counts NCCL's ranks, not processes or launcher ranks.
  std::string header = "job trace: " + std::to_string(c.ranks) + " ranks (" + std::to_string(c.processes) +
                       (c.processes == 1 ? " process)" : " processes)");
  EXPECT_NE(r.out.find(header), std::string::npos) << r.out.substr(0, 2000);
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  std::set<int> ranks, gpus, pids;
  std::set<std::string> buses;
  for (const json& rank : j["ranks"]) {
    if (rank["nccl_version"].is_null()) continue;  // the launcher
    ASSERT_TRUE(rank["rank"].is_number()) << rank.dump();
    EXPECT_TRUE(ranks.insert(rank["rank"].get<int>()).second) << "rank twice: " << j["ranks"].dump();
    ASSERT_TRUE(rank["gpu"].is_number()) << rank.dump();
    gpus.insert(rank["gpu"].get<int>());
    ASSERT_TRUE(rank["bus_id"].is_string()) << rank.dump();
    buses.insert(rank["bus_id"].get<std::string>());
    pids.insert(rank["pid"].get<int>());
    // nccl_ring's numbering: rank (process × threads + thread) × GPUs + i on device LOCAL_RANK ×
    // threads × GPUs + thread × GPUs + i: on one host's node0, rank r is on CUDA device r.
    EXPECT_EQ(rank["cuda_device"], rank["rank"]) << rank.dump();
    EXPECT_EQ(rank["ranks_in_process"], c.ranks / c.processes) << rank.dump();
    EXPECT_FALSE(rank["nccl_ranks"].empty()) << rank.dump();
  }
  std::set<int> want;
  for (int i = 0; i < c.ranks; ++i) want.insert(i);
  EXPECT_EQ(ranks, want) << j["ranks"].dump();
  EXPECT_EQ(gpus.size(), static_cast<size_t>(c.ranks)) << j["ranks"].dump();
  EXPECT_EQ(buses.size(), static_cast<size_t>(c.ranks));
  EXPECT_EQ(pids.size(), static_cast<size_t>(c.processes));
  // Every NCCL operation counts each rank that called it.
  for (const json& o : j["nccl_ops"])
    if (o["nranks"] == c.ranks) {
      EXPECT_EQ(o["ranks"].size(), static_cast<size_t>(c.ranks)) << o.dump();
    }
  // The timeline: a process per rank, named with its rank and GPU, each holding its own NCCL calls.
  Timeline t = Export(dir + "/trace", dir + "/timeline.json");
  std::set<int> named;
  for (const auto& [pid, name] : t.names) {
    std::smatch m;
    static const std::regex kRank(R"(^rank (\d+) · node0 GPU(\d+) \(pid \d+\)$)");
    if (!std::regex_match(name, m, kRank)) continue;
    named.insert(std::stoi(m[1]));
    EXPECT_GT(t.nccl_slices[pid], 0) << name;
  }
  EXPECT_EQ(named, want);
}

INSTANTIATE_TEST_SUITE_P(
    Sim, NcclJobRanks,
    ::testing::Values(RanksCase{"g8", "node0:1", {"-g", "8", "-o", "allreduce,sendrecv", "-s"}, 1, 8},
                      RanksCase{"initall", "node0:1", {"-g", "4", "-i", "all", "-o", "allreduce,alltoall"}, 1, 4},
                      RanksCase{"t4", "node0:1", {"-t", "4", "-o", "allreduce,sendrecv"}, 1, 4},
                      // two processes of four ranks: the launcher's RANK (0, 1) is not NCCL's rank
                      RanksCase{"p2g4", "node0:2", {"-g", "4", "-o", "allreduce,sendrecv", "-s"}, 2, 8}),
    [](const ::testing::TestParamInfo<RanksCase>& i) { return std::string(i.param.name); });

// ---- point 4: every time and rate the report prints was measured -------------------------------

// Per process: the sum of its NCCL timing records (what its operations' times may add up to).
std::map<int, double> TimedSecondsByPid(const std::string& trace_dir) {
  std::map<int, double> by_pid;
  for (const p2ptrace::Trace& t : ReadDir(trace_dir))
    for (const p2ptrace::TraceRecord& rec : t.records)
      if (const auto* tr = std::get_if<p2ptrace_timing_record>(&rec.body); tr && tr->src_device < 0)
        by_pid[t.header.pid] += static_cast<double>(tr->duration_ns) * 1e-9;
      else if (const auto* k = std::get_if<p2ptrace_nccl_kernel_record>(&rec.body))
        by_pid[t.header.pid] += static_cast<double>(k->duration_ns) * 1e-9;
  return by_pid;
}

struct RatesCase {
  const char* name;
  const char* hosts;
  std::vector<std::string> args;
  const char* sample;  // P2PTRACE_SAMPLE; nullptr for the default
  // NCCL's kernel timers (the shim as its profiler plugin) on; off, the shim times calls and groups
  bool kernel_timers = false;
};

class NcclJobRates : public ::testing::TestWithParam<RatesCase> {};

TEST_P(NcclJobRates, NoTimeBeyondItsTimingRecordsAndEveryRateSaysHow) {
  const RatesCase& c = GetParam();
  std::string dir = TempDir() + "/rates-" + c.name;
  Env env;
  if (c.sample) env["P2PTRACE_SAMPLE"] = c.sample;
  if (!c.kernel_timers) env["P2PTRACE_NCCL_PROFILER"] = "off";
  RunResult r = Job(dir, c.hosts, c.args, true, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  std::map<int, double> timed = TimedSecondsByPid(dir + "/trace");
  std::map<int, double> life;
  for (const json& rank : j["ranks"])
    if (rank["seconds"].is_number()) life[rank["pid"].get<int>()] = rank["seconds"].get<double>();
  // Each process's pairs: which pid holds a pair's source rank.
  std::map<int, int> pid_of_rank;
  for (const json& rank : j["ranks"])
    if (rank["rank"].is_number()) pid_of_rank[rank["rank"].get<int>()] = rank["pid"].get<int>();
  std::map<int, double> pair_seconds;  // by pid
  int rated = 0, group_rated = 0, unrated_shared = 0, kernel_rated = 0;
  double lost = 0;
  for (const json& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    ASSERT_TRUE(p["src"]["rank"].is_number()) << p.dump();
    int pid = pid_of_rank.at(p["src"]["rank"].get<int>());
    if (!p["seconds"].is_null()) {
      double s = p["seconds"].get<double>();
      pair_seconds[pid] += s;
      EXPECT_LE(s, timed[pid] * (1 + 1e-9)) << "more than the process's timing records: " << p.dump();
      EXPECT_LE(s, life[pid]) << "longer than the process lived: " << p.dump();
    }
    if (!p["gbps"].is_null()) {
      ++rated;
      ASSERT_TRUE(p["rate_basis"].is_string()) << p.dump();
      if (c.kernel_timers) EXPECT_EQ(p["rate_basis"], "NCCL kernel timers") << p.dump();
      else EXPECT_TRUE(p["rate_basis"] == "own events" || p["rate_basis"] == "group" || p["rate_basis"] == "own events and group")
          << p.dump();
      group_rated += p["rate_basis"] == "group";
      kernel_rated += p["rate_basis"] == "NCCL kernel timers";
      EXPECT_GT(p["timed_calls"].get<uint64_t>(), 0u) << p.dump();
      // The rate is the timed calls' bytes over their time, no more.
      EXPECT_NEAR(p["gbps"].get<double>(), p["timed_bytes"].get<double>() / p["seconds"].get<double>() / 1e9,
                  1e-6 * p["gbps"].get<double>())
          << p.dump();
    } else {
      EXPECT_TRUE(p["rate_basis"].is_null()) << p.dump();
      EXPECT_TRUE(p["seconds"].is_null()) << p.dump();
      unrated_shared += p["shared_group_calls"].get<uint64_t>() > 0;
    }
    if (p["lost_seconds"].is_number()) {
      EXPECT_LE(p["lost_seconds"].get<double>(), p["seconds"].get<double>()) << p.dump();
      lost += p["lost_seconds"].get<double>();
    }
  }
  for (const auto& [pid, s] : pair_seconds) {
    EXPECT_LE(s, timed[pid] * (1 + 1e-9)) << "pid " << pid;
    EXPECT_LE(s, life[pid]) << "pid " << pid;
  }
  double total_life = 0;
  for (const auto& [pid, s] : life) total_life += s;
  EXPECT_LE(j["lost_seconds"].get<double>(), total_life);
  EXPECT_NEAR(j["lost_seconds"].get<double>(), lost, 1e-12);
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir + "/trace"}, {{"NO_COLOR", "1"}});
  if (c.kernel_timers) {
    // Every send of the alltoall's groups was timed on its own channels: every pair that sent has a
    // rate of its own, none is left to the group.
    EXPECT_EQ(kernel_rated, rated) << j["pairs"].size() << " pairs";
    EXPECT_EQ(group_rated + unrated_shared, 0) << j["pairs"].size() << " pairs";
    EXPECT_EQ(text.out.find("no per-pair rate"), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("GB/s (group)"), std::string::npos) << text.out;
  } else {
    // The ring's sends were timed as groups that sent to one peer (sendrecv); the alltoall's groups
    // sent to every peer: those pairs have no rate of their own, and say so.
    EXPECT_GT(group_rated, 0) << j["pairs"].size() << " pairs";
    EXPECT_GT(unrated_shared, 0) << j["pairs"].size() << " pairs";
    EXPECT_NE(text.out.find("no per-pair rate"), std::string::npos) << text.out;
  }
  // Operations: a mean time per call no longer than the process lived.
  double longest = 0;
  for (const auto& [pid, s] : life) longest = std::max(longest, s);
  for (const json& o : j["nccl_ops"]) {
    if (o["seconds"].is_number()) {
      EXPECT_LE(o["seconds"].get<double>(), longest) << o.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sim, NcclJobRates,
    ::testing::Values(
        // nccl-tests' sweep from 8 B: the default sample times the first (smallest) calls only
        RatesCase{"g8_sweep", "node0:1", {"-g", "8", "-o", "sendrecv,alltoallp2p", "-b", "8", "-e", "1M", "-f", "4"}, nullptr},
        RatesCase{"g8_all", "node0:1", {"-g", "8", "-o", "sendrecv,alltoallp2p", "-b", "64K", "-e", "1M", "-f", "4", "-n", "2"}, "all"},
        // one thread per GPU: every group timed (the default's first calls go to whichever threads come first)
        RatesCase{"t8", "node0:1", {"-t", "8", "-o", "sendrecv,alltoallp2p", "-b", "8", "-e", "1M", "-f", "8"}, "all"},
        RatesCase{"p4", "node0:4", {"-o", "sendrecv,alltoallp2p", "-b", "8", "-e", "1M", "-f", "8"}, "all"},
        // NCCL's kernel timers: each send of a group on its own
        RatesCase{"t8_kernel", "node0:1", {"-t", "8", "-o", "sendrecv,alltoallp2p", "-b", "8", "-e", "1M", "-f", "8"}, "all", true},
        RatesCase{"p4_kernel", "node0:4", {"-o", "sendrecv,alltoallp2p", "-b", "8", "-e", "1M", "-f", "8"}, "all", true}),
    [](const ::testing::TestParamInfo<RatesCase>& i) { return std::string(i.param.name); });

// ---- NCCL's kernel timers: a speed for every pair -------------------------------------

// The demo's ring (8 processes): GPU0-3 and GPU4-7 on NVLink, the two hops between them (3->4, 7->0)
// through host memory. Its grouped sends take, as a group, the time of the slow receive: with the
// kernel timers every pair has its own.
TEST(NcclKernelTimers, EachGroupedSendHasItsOwnPairsRate) {
  std::string dir = TempDir() + "/kernel-sendrecv";
  RunResult r = Job(dir, "node0:8", {"-o", "sendrecv", "-b", "16M", "-e", "16M"}, true, {{"P2PTRACE_SAMPLE", "all"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  std::vector<double> nvlink, shm;
  for (const json& p : j["pairs"]) {
    if (p["source"] != "nccl" || p["gbps"].is_null()) continue;
    EXPECT_EQ(p["rate_basis"], "NCCL kernel timers") << p.dump();
    EXPECT_EQ(p["group_timed_calls"], 0) << p.dump();
    (p["transport"] == "nvlink" ? nvlink : shm).push_back(p["gbps"].get<double>());
    if (p["transport"] == "shm") {
      EXPECT_TRUE(p["lost_seconds"].is_number()) << "a fallback's cost, measured: " << p.dump();
    }
  }
  EXPECT_EQ(j["capture"]["nccl_kernel_timers"], true);
  EXPECT_EQ(j["capture"]["nccl_profiler_left_to_program"], false);
  for (const json& rank : j["ranks"])
    EXPECT_NE(rank["capture_mode"].get<std::string>().find("NCCL kernel timers"), std::string::npos) << rank.dump();
  ASSERT_EQ(nvlink.size(), 6u);
  ASSERT_EQ(shm.size(), 2u);
  for (double n : nvlink)
    for (double s : shm) EXPECT_GE(n, 5 * s) << "NVLink " << n << " GB/s vs SHM " << s;
  // Perfetto: every send and receive of every rank as a slice of its own, with the rate it carried.
  RunResult exported = RunProgram({P2PTRACE_CLI, "export", "--perfetto", dir + "/p.json", dir + "/trace"}, {});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  json perfetto = json::parse(std::ifstream(dir + "/p.json"), nullptr, false);
  ASSERT_FALSE(perfetto.is_discarded());
  int kernel_slices = 0, fast = 0;
  for (const json& e : perfetto["traceEvents"])
    if (e.value("cat", "") == "p2ptrace.nccl_kernel" && e["ph"] == "b") {
      ++kernel_slices;
      fast += e["args"].value("gbps", 0.0) > 100;
    }
  EXPECT_EQ(kernel_slices, 16);  // 8 sends, 8 receives
  EXPECT_EQ(fast, 12);           // the NVLink hops' send and receive
  // The same job timed per group: the NVLink sends of the ranks that also receive over SHM (0->1,
  // 4->5) show the slow hop's time (the issue's symptom).
  std::string group_dir = TempDir() + "/kernel-sendrecv-off";
  r = Job(group_dir, "node0:8", {"-o", "sendrecv", "-b", "16M", "-e", "16M"}, true,
          {{"P2PTRACE_SAMPLE", "all"}, {"P2PTRACE_NCCL_PROFILER", "off"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json g = ReportJson(group_dir + "/trace");
  int held_back = 0;
  for (const json& p : g["pairs"])
    held_back += p["source"] == "nccl" && p["transport"] == "nvlink" && p["gbps"].is_number() &&
                 p["gbps"].get<double>() < 2 * shm[0];
  EXPECT_EQ(held_back, 2) << g["pairs"].dump();
}

// MoE's all-to-all: NCCL runs it as a send and a receive per peer, each on its own channel, so every
// pair it used has a rate of its own (timed per group, none had: "no per-pair rate").
TEST(NcclKernelTimers, AnAlltoallRatesEveryPairItUsed) {
  std::string dir = TempDir() + "/kernel-alltoall";
  RunResult r = Job(dir, "node0:8", {"-o", "alltoall", "-b", "32M", "-e", "32M"}, true, {{"P2PTRACE_SAMPLE", "all"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  double slowest_nvlink = 1e9, fastest_other = 0;
  int rated = 0;
  for (const json& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    ASSERT_EQ(p["rate_basis"], "NCCL kernel timers") << p.dump();
    ++rated;
    double gbps = p["gbps"].get<double>();
    if (p["transport"] == "nvlink") slowest_nvlink = std::min(slowest_nvlink, gbps);
    else fastest_other = std::max(fastest_other, gbps);
  }
  EXPECT_EQ(rated, 8 * 7);
  EXPECT_GE(slowest_nvlink, 5 * fastest_other);
}

// NCCL before 2.16 printed no commId (ranks tie to their communicator only
// through the traces), and before 2.13 called SHM "direct shared memory" with bus ids in brackets.
// A traced job on such a release still has its pairs, the two host-memory hops as the fallbacks.
TEST(NcclOldReleases, TheirLinesMakeTheJobsPairs) {
  for (std::string version : {"2.8.4", "2.14.3"}) {
    SCOPED_TRACE(version);
    std::string dir = TempDir() + "/old-" + version;
    RunResult r = Job(dir, "node0:8", {"-o", "allreduce", "-n", "5"}, true, {{"P2PSIM_NCCL_VERSION", version}});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    json j = ReportJson(dir + "/trace");
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["job"]["nccl_versions"], json::array({version})) << j["job"].dump();
    std::map<std::string, json> nccl;
    for (const json& p : j["pairs"])
      if (p["source"] == "nccl") nccl[p["src"]["name"].get<std::string>() + "->" + p["dst"]["name"].get<std::string>()] = p;
    ASSERT_GE(nccl.size(), 8u) << j["pairs"].dump();
    for (const char* hop : {"GPU3->GPU4", "GPU7->GPU0"}) {
      ASSERT_TRUE(nccl.count(hop)) << hop;
      const json& p = nccl[hop];
      EXPECT_EQ(p["transport"], "shm") << p.dump();
      EXPECT_EQ(p["fallback"], true) << p.dump();
      EXPECT_EQ(p["nccl_transports"], json::array({version == "2.8.4" ? "direct shared memory" : "SHM/direct/direct"}))
          << p.dump();
    }
    ASSERT_TRUE(nccl.count("GPU0->GPU1"));
    EXPECT_EQ(nccl["GPU0->GPU1"]["transport"], "nvlink") << nccl["GPU0->GPU1"].dump();
    EXPECT_EQ(nccl["GPU0->GPU1"]["nccl_transports"], json::array({"P2P/IPC"})) << nccl["GPU0->GPU1"].dump();
  }
}

// The same allreduce-only job as a user starts it, with the default sample, under
// `p2ptrace run` and under a bare LD_PRELOAD: every NCCL pair's `gbps` is the rate it carried, and
// each hop that was not the slowest names the one that bounded it.
TEST(NcclKernelTimers, EveryRingPairHasItsRateHoweverTheJobWasStarted) {
  for (bool run : {true, false}) {
    std::string dir = TempDir() + (run ? "/allreduce-run" : "/allreduce-preload");
    RunResult r;
    if (run) {
      r = Job(dir, "node0:8", {"-o", "allreduce", "-n", "20"}, true);
    } else {
      fs::create_directories(dir + "/id");
      Env env = SimEnv(dir + "/rendezvous");
      env["P2PTRACE_DIR"] = dir + "/trace";
      env["P2PTRACE_WARN"] = "off";
      r = RunProgram({P2PSIM, "launch", "--topology", kDemo, "--hosts", "node0:8", "--", "env",
                      std::string("LD_PRELOAD=") + P2PTRACE_SHIM, NCCL_RING, "-o", "allreduce", "-n", "20", dir + "/id"},
                     env);
    }
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    json j = ReportJson(dir + "/trace");
    ASSERT_FALSE(j.is_discarded());
    int rated = 0, bounded = 0;
    for (const json& p : j["pairs"]) {
      if (p["source"] != "nccl") continue;
      ++rated;
      ASSERT_TRUE(p["gbps"].is_number()) << (run ? "run: " : "LD_PRELOAD: ") << p.dump();
      ASSERT_TRUE(p["seconds"].is_number()) << p.dump();
      EXPECT_EQ(p["rate_basis"], "collectives, NCCL kernel timers") << p.dump();
      EXPECT_DOUBLE_EQ(p["gbps"].get<double>(), p["collectives"]["gbps"].get<double>()) << p.dump();
      EXPECT_NEAR(p["gbps"].get<double>(), 12.0, 1.0) << p.dump();
      if (p["transport"] == "nvlink") {
        ASSERT_TRUE(p["bounded_by"].is_string()) << p.dump();
        EXPECT_NE(p["bounded_by"].get<std::string>().find("(shm)"), std::string::npos) << p.dump();
        ++bounded;
      } else {
        EXPECT_TRUE(p["bounded_by"].is_null()) << p.dump();
        EXPECT_GT(p["lost_seconds"].get<double>(), 0) << p.dump();
      }
    }
    EXPECT_EQ(rated, 8);
    EXPECT_EQ(bounded, 6);
    ASSERT_FALSE(j["rings"].empty());
    for (const json& ring : j["rings"]) EXPECT_TRUE(ring["bounded_by"].is_string()) << ring.dump();
    // The fallback's cost line gives the rate it was costed at, not the pair's (absent) own sends.
    RunResult text = RunProgram({P2PTRACE_CLI, "report", dir + "/trace"}, {{"NO_COLOR", "1"}});
    EXPECT_NE(text.out.find("timed at 11."), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("timed at -1"), std::string::npos) << text.out;
  }
}

// An allreduce-only job: no send/recv at all, yet every ring hop gets the rate it carried, and the
// ring names the host-memory hop that bounds it; the NVLink hops are bounded, not slow.
TEST(NcclKernelTimers, AnAllreduceOnlyJobRatesEveryHopAndNamesTheBound) {
  std::string dir = TempDir() + "/kernel-allreduce";
  RunResult r = Job(dir, "node0:8", {"-o", "allreduce", "-b", "16M", "-e", "16M"}, true, {{"P2PTRACE_SAMPLE", "all"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  int rated = 0;
  for (const json& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    ASSERT_TRUE(p["collectives"].is_object()) << p.dump();
    ++rated;
    EXPECT_EQ(p["rate_basis"], "collectives, NCCL kernel timers") << p.dump();
    double gbps = p["collectives"]["gbps"].get<double>();
    // The ring's pace is the SHM hop's (the sim's host-memory rate, 12 GB/s on the demo).
    EXPECT_NEAR(gbps, 12.0, 1.0) << p.dump();
    if (p["transport"] == "nvlink") {
      ASSERT_TRUE(p["collectives"]["bounded_by"].is_string()) << p.dump();
      EXPECT_NE(p["collectives"]["bounded_by"].get<std::string>().find("(shm)"), std::string::npos) << p.dump();
    } else {
      EXPECT_TRUE(p["collectives"]["bounded_by"].is_null()) << p.dump();
      EXPECT_TRUE(p["lost_seconds"].is_number()) << p.dump();
    }
  }
  EXPECT_EQ(rated, 8);
  ASSERT_FALSE(j["rings"].empty());
  ASSERT_EQ(j["nccl_ops"].size(), 1u);
  for (const json& ring : j["rings"]) {
    // The communicator as the operations name it, with NCCL's own id beside it.
    EXPECT_EQ(ring["comm"], j["nccl_ops"][0]["comm"]) << ring.dump();
    EXPECT_EQ(ring["nccl_comm_id"].get<std::string>().rfind("0x", 0), 0u) << ring.dump();
    EXPECT_EQ(ring["hops"].size(), 8u) << ring.dump();
    ASSERT_TRUE(ring["bounded_by"].is_string()) << ring.dump();
    EXPECT_NE(ring["bounded_by"].get<std::string>().find("(shm)"), std::string::npos) << ring.dump();
  }
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir + "/trace"}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("bounded by GPU3 -> GPU4 (shm)"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("no send/recv to measure"), std::string::npos) << text.out;
  // Fleet rows and Prometheus carry the same: each hop's rate in collectives, the bounded ones marked.
  RunResult rows = RunProgram({P2PTRACE_CLI, "export", dir + "/trace", "--rows", "-"}, {});
  ASSERT_EQ(rows.exit_code, 0) << rows.err;
  int rows_rated = 0, rows_bounded = 0;
  std::istringstream in(rows.out);
  for (std::string line; std::getline(in, line);) {
    json row = json::parse(line, nullptr, false);
    if (row.is_discarded() || row["kind"] != "pair" || row["source"] != "nccl") continue;
    rows_rated += row["coll_gbps"].is_number() && row["rate_basis"] == "collectives, NCCL kernel timers";
    rows_bounded += row["bounded_by"].is_string();
  }
  EXPECT_EQ(rows_rated, 8) << rows.out;
  EXPECT_EQ(rows_bounded, 6) << rows.out;
  RunResult prom = RunProgram({P2PTRACE_CLI, "export", dir + "/trace", "--prometheus", dir + "/p2p.prom"}, {});
  ASSERT_EQ(prom.exit_code, 0) << prom.err;
  size_t bounded = 0, unbounded = 0;
  std::ifstream pin(dir + "/p2p.prom");
  for (std::string line; std::getline(pin, line);) {
    if (line.rfind("p2ptrace_pair_collective_bandwidth_bytes_per_second{", 0) != 0) continue;
    (line.find("bounded=\"1\"") != std::string::npos ? bounded : unbounded)++;
  }
  EXPECT_EQ(bounded, 6u);
  EXPECT_EQ(unbounded, 2u);
}

// P2PTRACE_SAMPLE=K:N:SIZE for NCCL's kernel timers, per communicator: its first K operations, then
// 1 in N, and every one of SIZE bytes or more, so that a long job's trace grows with the sample.
TEST(NcclKernelTimers, SampledPerCommunicatorAsTheCopiesAre) {
  for (const auto& [sample, all_large] : {std::pair{"3:4:1G", false}, std::pair{"3:4:32K", true}}) {
    SCOPED_TRACE(sample);
    std::string dir = TempDir() + "/kernel-sample-" + std::string(sample).substr(4);
    RunResult r = Job(dir, "node0:2", {"-o", "allreduce", "-b", "64K", "-e", "64K", "-n", "23"}, true,
                      {{"P2PTRACE_SAMPLE", sample}, {"P2PSIM_KERNELCH_FILE", dir + "/kernelch.txt"}});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::vector<p2ptrace::Trace> traces = ReadDir(dir + "/trace");
    ASSERT_EQ(traces.size(), 2u);
    // NCCL's own timer work (KernelCh in an operation's mask: device timestamps, proxy work per
    // channel) for the sampled operations only, as the simulated NCCL counted it.
    std::map<int, uint64_t> kernel_ch_ops;
    std::ifstream counted(dir + "/kernelch.txt");
    for (int pid = 0, n = 0; counted >> pid >> n;) kernel_ch_ops[pid] = std::max<uint64_t>(kernel_ch_ops[pid], n);
    for (const p2ptrace::Trace& t : traces) {
      uint64_t calls = 0, timed = 0;
      for (const p2ptrace::TraceRecord& rec : t.records) {
        if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&rec.body); o && o->api == P2PTRACE_NCCL_AllReduce) ++calls;
        if (const auto* k = std::get_if<p2ptrace_nccl_kernel_record>(&rec.body); k && k->api == P2PTRACE_NCCL_AllReduce) ++timed;
      }
      uint64_t want = 0;
      for (uint64_t i = 0; i < calls; ++i) want += all_large || i < 3 || i % 4 == 0;
      EXPECT_GE(calls, 23u);
      EXPECT_EQ(timed, want) << calls << " allreduces";
      EXPECT_EQ(kernel_ch_ops[static_cast<int>(t.header.pid)], want) << "operations NCCL ran with KernelCh";
    }
  }
}

// The program's own profiler plugin (the recording one: every call it gets, one line, into a file the
// ranks share): each process's lines, without their pid, in the order it wrote them; the processes
// sorted, since they interleave.
std::vector<std::vector<std::string>> PluginCalls(const std::string& path) {
  std::map<std::string, std::vector<std::string>> by_pid;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    size_t space = line.find(' ');
    // The communicator's hash is new in every run (its unique id is random).
    by_pid[line.substr(0, space)].push_back(std::regex_replace(line.substr(space + 1), std::regex("hash=[0-9a-f]+"), "hash=H"));
  }
  std::vector<std::vector<std::string>> out;
  for (auto& [pid, calls] : by_pid) out.push_back(std::move(calls));
  std::sort(out.begin(), out.end());
  return out;
}

std::string RecordingPlugin(const std::string& name) { return std::string(P2PTRACE_SIM_LIB_DIR) + "/" + name + ".so"; }

// The 2-rank job bare and then under `p2ptrace run`, the recording plugin writing each run's calls:
// what it saw alone, and behind the shim. `traced`: the traced run (an exit other than 0 fails).
std::pair<std::vector<std::vector<std::string>>, std::vector<std::vector<std::string>>> AloneAndBehindTheShim(
    const std::string& dir, const std::vector<std::string>& args, Env env, RunResult* traced) {
  env["RECORDING_PROFILER_OUT"] = dir + "-bare.txt";
  RunResult bare = Job(dir + "-bare", "node0:2", args, false, env);
  EXPECT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  env["RECORDING_PROFILER_OUT"] = dir + "-traced.txt";
  *traced = Job(dir, "node0:2", args, true, env);
  EXPECT_EQ(traced->exit_code, 0) << traced->out << traced->err;
  return {PluginCalls(dir + "-bare.txt"), PluginCalls(dir + "-traced.txt")};
}

// The recording plugin where NCCL finds it by itself (DIR/lib/FILE on the library path, with
// NCCL_PROFILER_PLUGIN unset), the 2-rank job with a split alone and behind the shim: what the plugin
// saw each time, and the traced report's pairs rated by NCCL's kernel timers.
struct FoundPlugin {
  std::vector<std::vector<std::string>> alone, forwarded;
  int kernel_rated = 0;
  std::string why;  // the pairs and the traced run's stderr, for a failure's message
};
FoundPlugin PluginNcclFinds(const std::string& dir, const std::string& file, Env env) {
  const std::vector<std::string> args = {"-o", "allreduce,sendrecv", "-b", "64K", "-e", "64K", "-n", "2", "-s"};
  fs::create_directories(dir + "/lib");
  fs::create_symlink(RecordingPlugin("librecording-profiler-v5"), dir + "/lib/" + file);
  for (auto [k, v] : Env{{"NCCL_PROFILER_PLUGIN", std::nullopt}, {"RECORDING_PROFILER_MASK", "2"}, {"P2PTRACE_SAMPLE", "all"},
                         {"LD_LIBRARY_PATH", dir + "/lib:" + std::string(P2PTRACE_SIM_LIB_DIR)}})
    env[k] = v;
  FoundPlugin found;
  RunResult traced;
  std::tie(found.alone, found.forwarded) = AloneAndBehindTheShim(dir, args, env, &traced);
  json j = ReportJson(dir + "/trace");
  for (const json& p : j["pairs"]) found.kernel_rated += p["rate_basis"] == "NCCL kernel timers";
  found.why = j["pairs"].dump() + "\n" + traced.err;
  return found;
}

// NCCL_PROFILER_PLUGIN set by the program: p2ptrace takes its place and forwards, and the program's
// plugin sees, call by call, what it sees alone, whatever its mask (NCCL then starts more events
// for the shim's bits: none of them may reach it), while every pair is still timed.
TEST(NcclKernelTimers, TheProgramsOwnPluginSeesExactlyWhatItSeesAlone) {
  const std::vector<std::string> args = {"-o", "allreduce,sendrecv", "-b", "64K", "-e", "64K", "-n", "2", "-s"};
  // Coll; P2p + KernelCh; Group; everything through NetPlugin; nothing
  for (int mask : {2, 4 | 64, 1, 255, 0}) {
    SCOPED_TRACE("mask " + std::to_string(mask));
    std::string dir = TempDir() + "/forward-" + std::to_string(mask);
    Env env = {{"NCCL_PROFILER_PLUGIN", RecordingPlugin("librecording-profiler-v5")},
               {"RECORDING_PROFILER_MASK", std::to_string(mask)}, {"P2PTRACE_SAMPLE", "all"}};
    RunResult traced;
    auto [alone, forwarded] = AloneAndBehindTheShim(dir, args, env, &traced);
    EXPECT_EQ(traced.err.find("warning"), std::string::npos) << traced.err;
    ASSERT_EQ(alone.size(), 2u);
    EXPECT_GE(alone[0].size(), 4u);  // two inits (the world and its split), events, two finalizes
    ASSERT_EQ(forwarded.size(), alone.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      size_t at = 0;
      while (at < alone[i].size() && at < forwarded[i].size() && alone[i][at] == forwarded[i][at]) ++at;
      EXPECT_EQ(at, alone[i].size()) << "first difference at call " << at << ": alone "
                                     << (at < alone[i].size() ? alone[i][at] : "(end)") << ", forwarded "
                                     << (at < forwarded[i].size() ? forwarded[i][at] : "(end)");
      EXPECT_EQ(forwarded[i].size(), alone[i].size());
    }
    json j = ReportJson(dir + "/trace");
    int kernel_rated = 0;
    for (const json& p : j["pairs"]) kernel_rated += p["rate_basis"] == "NCCL kernel timers";
    EXPECT_EQ(kernel_rated, 2) << "both send pairs of the 2-rank ring, timed while forwarding";
  }
}

// NCCL's default plugin (libnccl-profiler.so on the library path, NCCL_PROFILER_PLUGIN
// unset) is the program's too: forwarded exactly as one it named, never replaced.
TEST(NcclKernelTimers, NcclsDefaultPluginIsTheProgramsToo) {
  FoundPlugin found = PluginNcclFinds(TempDir() + "/default-plugin", "libnccl-profiler.so", {});
  ASSERT_EQ(found.alone.size(), 2u) << "the sim's NCCL loads libnccl-profiler.so by default";
  EXPECT_EQ(found.forwarded, found.alone);
  EXPECT_EQ(found.kernel_rated, 2) << found.why;
}

// NCCL unloads its profiler with its last communicator and loads it again, by
// NCCL_PROFILER_PLUGIN, for the next one: communicators destroyed and re-created keep their kernel
// timers (and no event goes on NCCL's stream meanwhile).
TEST(NcclKernelTimers, ContinueAfterCommunicatorsAreDestroyedAndRecreated) {
  std::string dir = TempDir() + "/kernel-recreate";
  RunResult r = Job(dir, "node0:2", {"-o", "allreduce", "-b", "64K", "-e", "64K", "-n", "2", "-r", "2"}, true,
                    {{"P2PTRACE_SAMPLE", "all"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const p2ptrace::Trace& t : ReadDir(dir + "/trace")) {
    if (t.header.nccl_version == 0) continue;
    std::set<uint64_t> comms;
    size_t evented = 0;
    for (const p2ptrace::TraceRecord& rec : t.records) {
      if (const auto* k = std::get_if<p2ptrace_nccl_kernel_record>(&rec.body)) comms.insert(k->comm_hash);
      if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&rec.body)) evented += (o->flags & P2PTRACE_NCCL_TIMED) != 0;
    }
    EXPECT_EQ(comms.size(), 3u) << "each generation's communicator, timed by its kernels";
    EXPECT_EQ(evented, 0u);
  }
}

// A plugin the shim cannot stand in for (it exports only v1; this NCCL, 2.28, calls v5): it stays
// in place, exactly as alone, and the shim says so once.
TEST(NcclKernelTimers, APluginThatCannotBeForwardedIsLeftInPlace) {
  const std::vector<std::string> args = {"-o", "sendrecv", "-b", "64K", "-e", "64K"};
  std::string dir = TempDir() + "/forward-v1";
  Env env = {{"NCCL_PROFILER_PLUGIN", RecordingPlugin("librecording-profiler-v1")},
             {"RECORDING_PROFILER_MASK", "7"}, {"P2PTRACE_SAMPLE", "all"}};
  env["RECORDING_PROFILER_OUT"] = dir + "-bare.txt";
  ASSERT_EQ(Job(dir + "-bare", "node0:2", args, false, env).exit_code, 0);
  env["RECORDING_PROFILER_OUT"] = dir + "-traced.txt";
  RunResult traced = Job(dir, "node0:2", args, true, env);
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(PluginCalls(dir + "-traced.txt"), PluginCalls(dir + "-bare.txt"));
  EXPECT_FALSE(PluginCalls(dir + "-bare.txt").empty());
  // One warning per process (the job has two), naming the plugin and why.
  size_t warnings = 0;
  for (size_t at = traced.err.find("cannot forward to it"); at != std::string::npos;
       at = traced.err.find("cannot forward to it", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 2u) << traced.err;
  EXPECT_NE(traced.err.find("has no ncclProfiler_v5"), std::string::npos) << traced.err;
  json j = ReportJson(dir + "/trace");
  for (const json& p : j["pairs"]) EXPECT_NE(p["rate_basis"], "NCCL kernel timers") << p.dump();
  EXPECT_EQ(j["capture"]["nccl_kernel_timers"], false);
  EXPECT_EQ(j["capture"]["nccl_profiler_left_to_program"], true);
  for (const json& rank : j["ranks"])
    EXPECT_NE(rank["trust"].get<std::string>().find("profiler plugin (NCCL_PROFILER_PLUGIN) could not be forwarded"),
              std::string::npos)
        << rank.dump();
}

// ---- point 5: bytes, algbw and busbw as nccl-tests defines them ---------------------------------

// Every collective of one size, every call timed: the report's bytes per call are the size
// nccl-tests prints for it, and its algbw/busbw are what the program measured with nccl-tests'
// formulas (the same simulated clock: the shim's events and the program's bracket the same work).
class NcclJobBytes : public ::testing::TestWithParam<RanksCase> {};

// Timed with events (P2PTRACE_NCCL_PROFILER=off): every operation kind.
TEST_P(NcclJobBytes, AsNcclTestsCountsThem) {
  const RanksCase& c = GetParam();
  std::string dir = TempDir() + "/bytes-" + c.name;
  RunResult r = Job(dir, c.hosts, c.args, true, {{"P2PTRACE_SAMPLE", "all"}, {"P2PTRACE_NCCL_PROFILER", "off"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::map<std::string, Printed> printed;  // by nccl_ring's name
  for (const Printed& p : ProgramLines(r.out)) printed[p.op] = p;
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  const std::map<std::string, std::string> kOps = {
      {"allreduce", "ncclAllReduce"}, {"broadcast", "ncclBroadcast"},         {"reduce", "ncclReduce"},
      {"allgather", "ncclAllGather"}, {"reducescatter", "ncclReduceScatter"}, {"alltoall", "ncclAlltoAll"},
      {"gather", "ncclGather"},       {"scatter", "ncclScatter"}};
  int iters = 2, checked = 0;
  for (const auto& [name, api] : kOps) {
    auto p = printed.find(name);
    ASSERT_NE(p, printed.end()) << name << " not printed: " << r.out;
    const json* op = nullptr;
    for (const json& o : j["nccl_ops"])
      if (o["op"] == api && o["nranks"] == c.ranks) op = &o;
    ASSERT_NE(op, nullptr) << api << ": " << j["nccl_ops"].dump();
    const json& o = *op;
    uint64_t calls = static_cast<uint64_t>(c.ranks * iters);
    EXPECT_EQ(o["calls"], calls) << o.dump();
    EXPECT_EQ(o["timed_calls"], calls) << o.dump();
    EXPECT_EQ(o["bytes"].get<uint64_t>(), calls * p->second.size) << api << ": nccl-tests' size is " << p->second.size;
    EXPECT_NEAR(o["algbw_gbps"].get<double>(), p->second.algbw, 0.01 * p->second.algbw + 0.01) << api;
    EXPECT_NEAR(o["busbw_gbps"].get<double>(), p->second.busbw, 0.01 * p->second.busbw + 0.01) << api;
    ++checked;
  }
  // alltoall as grouped send/recv (nccl-tests before NCCL 2.28): the sends of a rank's group are
  // its alltoall's size over the group's time, nccl-tests' algbw for it.
  auto a2a = printed.find("alltoallp2p");
  ASSERT_NE(a2a, printed.end()) << r.out;
  for (const json& o : j["nccl_ops"])
    if (o["op"] == "ncclSend" && o["nranks"] == c.ranks) {
      EXPECT_EQ(o["bytes"].get<uint64_t>(), static_cast<uint64_t>(c.ranks * iters) * a2a->second.size) << o.dump();
      EXPECT_EQ(o["timings"], c.ranks * iters) << "one duration per rank and group: " << o.dump();
      EXPECT_NEAR(o["algbw_gbps"].get<double>(), a2a->second.algbw, 0.01 * a2a->second.algbw + 0.01) << o.dump();
      ++checked;
    }
  EXPECT_EQ(checked, 9);
  // The text says the same figures.
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir + "/trace"}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("ncclAlltoAll"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Sim, NcclJobBytes,
    ::testing::Values(
        RanksCase{"g4", "node0:1", {"-g", "4", "-o", "allreduce,broadcast,reduce,allgather,reducescatter,alltoall,gather,scatter,alltoallp2p", "-b", "1M", "-e", "1M", "-n", "2"}, 1, 4},
        RanksCase{"p8", "node0:8", {"-o", "allreduce,broadcast,reduce,allgather,reducescatter,alltoall,gather,scatter,alltoallp2p", "-b", "1M", "-e", "1M", "-n", "2"}, 8, 8}),
    [](const ::testing::TestParamInfo<RanksCase>& i) { return std::string(i.param.name); });

// Where NCCL's kernel timers measure (the default on NCCL 2.27.3+), the shim puts no event on NCCL's
// stream: each collective NCCL runs as one kernel is timed by its channels on the GPU, as
// nccl-tests times it, and says so; the calls NCCL runs as sends and receives (alltoall, gather,
// scatter) are timed per pair instead.
TEST_P(NcclJobBytes, KernelTimersTimeTheCollectivesWithoutAnEvent) {
  const RanksCase& c = GetParam();
  std::string dir = TempDir() + "/bytes-kernel-" + c.name;
  RunResult r = Job(dir, c.hosts, c.args, true, {{"P2PTRACE_SAMPLE", "all"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::map<std::string, Printed> printed;
  for (const Printed& p : ProgramLines(r.out)) printed[p.op] = p;
  for (const p2ptrace::Trace& t : ReadDir(dir + "/trace")) {
    for (const p2ptrace::TraceRecord& rec : t.records) {
      const auto* o = std::get_if<p2ptrace_nccl_op_record>(&rec.body);
      if (o == nullptr) continue;
      EXPECT_EQ(o->flags & P2PTRACE_NCCL_TIMED, 0) << "an event on NCCL's stream: " << p2ptrace::NcclApiName(o->api);
    }
  }
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  const std::map<std::string, std::string> kOps = {{"allreduce", "ncclAllReduce"}, {"broadcast", "ncclBroadcast"},
                                                   {"reduce", "ncclReduce"}, {"allgather", "ncclAllGather"},
                                                   {"reducescatter", "ncclReduceScatter"}};
  uint64_t calls = static_cast<uint64_t>(c.ranks * 2);
  for (const auto& [name, api] : kOps) {
    auto p = printed.find(name);
    ASSERT_NE(p, printed.end()) << name;
    for (const json& o : j["nccl_ops"]) {
      if (o["op"] != api || o["nranks"] != c.ranks) continue;
      EXPECT_EQ(o["kernel_timed_calls"], calls) << o.dump();
      EXPECT_EQ(o["timed_calls"], calls) << o.dump();
      ASSERT_TRUE(o["algbw_gbps"].is_number()) << o.dump();
      EXPECT_NEAR(o["algbw_gbps"].get<double>(), p->second.algbw, 0.05 * p->second.algbw + 0.01) << o.dump();
    }
  }
  int rated = 0;
  for (const json& p : j["pairs"]) rated += p["source"] == "nccl" && p["rate_basis"] == "NCCL kernel timers";
  EXPECT_GT(rated, 0) << "alltoall's and the sends' pairs, timed per pair";
}

// AlltoAll, Gather and Scatter (NCCL 2.28's calls) put their blocks on the same pairs, with the same
// bytes and calls, as the grouped send/recv they replace (nccl-tests before 2.28, PyTorch 2.10's
// all_to_all_single): each rank to every other, every rank to the root, the root to every other.
TEST(NcclJobPairs, CollectiveBlocksLandOnTheirPairsLikeSends) {
  auto pairs = [](const std::string& name, const std::string& ops) {
    std::string dir = TempDir() + "/fanout-" + name;
    RunResult r = Job(dir, "node0:4", {"-o", ops, "-b", "64K", "-e", "64K", "-n", "3"}, true, {});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::map<std::pair<int, int>, std::pair<uint64_t, uint64_t>> out;  // (src, dst GPU) -> calls, bytes
    json j = ReportJson(dir + "/trace");
    for (const json& p : j["pairs"])
      if (p["bytes"].get<uint64_t>() > 0)
        out[{p["src"]["gpu"].get<int>(), p["dst"]["gpu"].get<int>()}] = {p["calls"], p["bytes"]};
    return out;
  };
  for (const auto& [collective, p2p] : {std::pair{"alltoall", "alltoallp2p"}, {"gather", "gatherp2p"},
                                        {"scatter", "scatterp2p"}}) {
    auto got = pairs(collective, collective), want = pairs(p2p, p2p);
    EXPECT_FALSE(want.empty()) << p2p;
    EXPECT_EQ(got, want) << collective;
    size_t n = std::string(collective) == "alltoall" ? 12 : 3;  // 4 ranks: every ordered pair, or the root's 3
    EXPECT_EQ(got.size(), n) << collective;
    for (const auto& [k, v] : got) EXPECT_EQ(v.first, 3u) << collective << " " << k.first << "->" << k.second;
  }
}

}  // namespace

// Nonblocking communicators (ncclConfig_t blocking = 0): their inits and their groups' ends return
// ncclInProgress, which is no failure (a later one comes through ncclCommGetAsyncError). The job's
// report is the blocking job's: no failed call, every operation with its bytes, the ring's pairs.
TEST(NcclNonblocking, InProgressIsNoFailureAndTheJobIsReportedAsABlockingOne) {
  std::string dir = TempDir() + "/nonblocking";
  RunResult r = Job(dir, "node0:4", {"-B", "-o", "allreduce,sendrecv", "-n", "3"}, true);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The simulated NCCL answered as the real one does: ncclInProgress from the inits and group ends,
  // then ncclSuccess from ncclCommGetAsyncError, which the shim recorded as the communicator's init.
  for (const p2ptrace::Trace& t : ReadDir(dir + "/trace")) {
    int in_progress_inits = 0, ready = 0, in_progress_ops = 0;
    for (const p2ptrace::TraceRecord& rec : t.records) {
      if (const auto* c = std::get_if<p2ptrace_nccl_comm_record>(&rec.body); c && c->api == P2PTRACE_NCCL_CommInitRankConfig) {
        in_progress_inits += c->result == 7;
        if (c->result == 0) {
          ++ready;
          EXPECT_EQ(c->nranks, 4);
          EXPECT_GE(c->rank, 0);
        }
      }
      if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&rec.body)) in_progress_ops += o->result == 7;
    }
    EXPECT_EQ(in_progress_inits, 1) << t.path;
    EXPECT_EQ(ready, 1) << t.path;
    EXPECT_EQ(in_progress_ops, 9) << t.path;  // 3 allreduces, 3 sends, 3 receives: each group's end
  }
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  for (const json& f : j["findings"]) EXPECT_NE(f["id"], "nccl-call-failed") << f.dump();
  ASSERT_EQ(j["nccl_ops"].size(), 3u) << j["nccl_ops"].dump();
  for (const json& op : j["nccl_ops"]) {
    EXPECT_EQ(op["calls"], 12) << op.dump();
    EXPECT_EQ(op["errors"], 0) << op.dump();
    EXPECT_EQ(op["bytes"], 12u * (4u << 20)) << op.dump();
    EXPECT_EQ(op["nranks"], 4) << op.dump();
  }
  int ring = 0;
  for (const json& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    ++ring;
    EXPECT_EQ((p["src"]["gpu"].get<int>() + 1) % 4, p["dst"]["gpu"].get<int>()) << p.dump();
    EXPECT_EQ(p["bytes"], 3u * (4u << 20)) << p.dump();  // the ring's sends
  }
  EXPECT_EQ(ring, 4) << j["pairs"].dump();
}

// NCCL's kernel timers (NCCL's own work: device timestamps, proxy work per channel) for the
// sample only, whoever calls: one process whose four threads drive four GPUs costs NCCL no more
// timer work than the same job as four processes (the sample window closes at each sampled call's
// launch, so another thread's unsampled call does not take the shim's bits). And with every call in
// the sample, eight threads at once: each operation has its record (no window loses its bits).
TEST(NcclKernelTimers, ThreadsOfOneProcessTimeTheSampleOnly) {
  auto timer_ops = [](const std::string& name, const std::string& hosts, const std::vector<std::string>& args,
                      const std::string& sample) {
    std::string dir = TempDir() + "/threads-" + name;
    RunResult r = Job(dir, hosts, args, true, {{"P2PSIM_KERNELCH_FILE", dir + "/kernelch.txt"}, {"P2PTRACE_SAMPLE", sample}});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::map<int, uint64_t> by_pid;  // the file gets each process's running count
    std::ifstream counted(dir + "/kernelch.txt");
    for (int pid = 0, n = 0; counted >> pid >> n;) by_pid[pid] = std::max<uint64_t>(by_pid[pid], n);
    uint64_t ops = 0, records = 0, calls = 0;
    for (const auto& [pid, n] : by_pid) ops += n;
    for (const p2ptrace::Trace& t : ReadDir(dir + "/trace"))
      for (const p2ptrace::TraceRecord& rec : t.records) {
        records += std::holds_alternative<p2ptrace_nccl_kernel_record>(rec.body);
        calls += std::holds_alternative<p2ptrace_nccl_op_record>(rec.body);
      }
    EXPECT_EQ(records, ops) << name << ": every operation NCCL timed has its record";
    return std::pair{ops, calls};
  };
  std::vector<std::string> loop = {"-n", "256", "-b", "64K", "-e", "64K"};
  std::vector<std::string> threaded = {"-t", "4"};
  threaded.insert(threaded.end(), loop.begin(), loop.end());
  auto [processes, calls] = timer_ops("processes", "node0:4", loop, "8:64:16M");
  auto [threads, thread_calls] = timer_ops("threads", "node0:1", threaded, "8:64:16M");
  EXPECT_EQ(thread_calls, calls);
  EXPECT_GT(processes, 0u);
  // The sample (per communicator: its first 8 operations, then 1 in 64), and a few strays called in
  // another thread's window (up to 3 of 126 seen under ASan's slower threads; timing every other
  // thread's calls gave 171).
  EXPECT_LE(threads, processes + processes / 20) << "timer work beyond the sample, threads vs processes";
  auto [all, all_calls] = timer_ops("all", "node0:1", {"-t", "8", "-o", "allreduce", "-n", "300", "-b", "4K", "-e", "4K"}, "all");
  EXPECT_EQ(all, all_calls) << "every call sampled: every one timed";
}

// Elastic jobs, sweeps and fault recovery destroy and re-create their communicators for days: the
// shim keeps nothing per generation, whatever the environment's size (the profiler's variable is
// set and given back at each one; the log's lines of the communicators gone are forgotten). Heap in
// use after the first generation and after the 500th, as nccl_ring reads it (mallinfo2), with a
// 180-variable environment as under SLURM or Kubernetes.
TEST(NcclLongJobs, RecreatedCommunicatorsKeepNoMemoryPerGeneration) {
#ifdef P2PTRACE_SANITIZED
  GTEST_SKIP() << "sanitizer build";  // their allocators keep freed memory: the default build measures
#endif
  Env env;
  for (int i = 0; i < 180; ++i) env["P2PTRACE_TEST_VARIABLE_" + std::to_string(i)] = "a value as long as a path /" + std::to_string(i);
  std::string dir = TempDir() + "/generations";
  RunResult r = Job(dir, "node0:2", {"-H", "-r", "500", "-o", "allreduce", "-n", "1", "-b", "4K", "-e", "4K"}, true, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  static const std::regex kHeap(R"(\[rank (\d)\] heap in use after generation (\d+): (\d+) B)");
  std::map<int, std::map<int, long>> heap;  // rank -> generation -> bytes
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), kHeap), end; it != end; ++it)
    heap[std::stoi((*it)[1])][std::stoi((*it)[2])] = std::stol((*it)[3]);
  ASSERT_EQ(heap.size(), 2u) << r.out.substr(0, 2000);
  for (auto& [rank, at] : heap) {
    ASSERT_TRUE(at.count(0) && at.count(500)) << rank;
    EXPECT_LE(at[500] - at[0], 64 << 10) << "rank " << rank << ": heap grew over 500 generations";
  }
  // Every generation is still in the report: 501 communicators, every allreduce counted.
  json j = ReportJson(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  uint64_t allreduces = 0;
  for (const json& op : j["nccl_ops"])
    if (op["op"] == "ncclAllReduce") allreduces += op["calls"].get<uint64_t>();
  EXPECT_EQ(allreduces, 2u * 501u);
}

// From 2.28.3, with no profiler library found, NCCL takes the profiler of its network plugin
// (libnccl-net.so, or NCCL_NET_PLUGIN's): that plugin is the program's too, forwarded exactly as one
// it named, never hidden by the shim's name; a network plugin without one changes nothing.
TEST(NcclKernelTimers, TheNetworkPluginsProfilerIsTheProgramsToo) {
  for (std::string net : {"libnccl-net.so", "libnccl-net-mine.so"}) {
    SCOPED_TRACE(net);
    Env env;
    if (net != "libnccl-net.so") env["NCCL_NET_PLUGIN"] = "mine";
    FoundPlugin found = PluginNcclFinds(TempDir() + "/net-plugin-" + net, net, env);
    ASSERT_EQ(found.alone.size(), 2u) << "the sim's NCCL 2.28.9 takes the network plugin's profiler";
    EXPECT_EQ(found.forwarded, found.alone);
    EXPECT_EQ(found.kernel_rated, 2) << found.why;
  }
  // Before 2.28.3 NCCL never looks there: nothing to forward, the shim times alone.
  FoundPlugin old = PluginNcclFinds(TempDir() + "/net-plugin-old", "libnccl-net.so", {{"P2PSIM_NCCL_VERSION", "2.27.7"}});
  EXPECT_TRUE(old.alone.empty());
  EXPECT_TRUE(old.forwarded.empty());
}
