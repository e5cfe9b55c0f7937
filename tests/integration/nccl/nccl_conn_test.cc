// The shim's NCCL connection records (P2PTRACE_RECORD_NCCL_CONN) on the simulated NCCL: every
// connection NCCL logged for a rank is in that rank's trace exactly once, field for field as core's
// parser reads the tap log file; and those logged before a SIGKILL are in the trace of the killed
// process.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/nccl_log.h"
#include "core/node_probe.h"
#include "core/preflight_block.h"
#include "core/trace_reader.h"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"

namespace {

using p2ptrace::testing::Env;
using p2ptrace::testing::ReadFile;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

using Key = std::tuple<std::string, std::string, std::string, int, int, int, int, std::string, std::string,
                       std::string, std::string, int, uint32_t>;

std::string Field(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

Key Of(const p2ptrace_nccl_conn_record& c) {
  static const char* kDirection[] = {"", "send", "receive"};
  return {Field(c.comm, sizeof c.comm), Field(c.comm_id, sizeof c.comm_id), Field(c.keyword, sizeof c.keyword),
          c.channel, c.conn_index, c.src_rank, c.dst_rank, c.direction < 3 ? kDirection[c.direction] : "?",
          Field(c.transport, sizeof c.transport), Field(c.src_dev, sizeof c.src_dev), Field(c.dst_dev, sizeof c.dst_dev),
          c.transport_class, c.line};
}

Key Of(const p2ptrace::NcclLog& log, const p2ptrace::Connection& c) {
  const p2ptrace::RankIdentity* r = log.FindRank(c.logger.host, c.logger.pid, c.comm);
  return {c.comm, r ? r->comm_id : "", c.keyword, c.channel, c.conn_index, c.src_rank, c.dst_rank, c.direction,
          c.transport, c.src_dev, c.dst_dev, c.transport_class, static_cast<uint32_t>(c.line)};
}

std::string Show(const Key& k) {
  return std::get<0>(k) + " ch" + std::to_string(std::get<3>(k)) + "/" + std::to_string(std::get<4>(k)) + " " +
         std::to_string(std::get<5>(k)) + "->" + std::to_string(std::get<6>(k)) + " " + std::get<7>(k) + " via " +
         std::get<8>(k) + " line " + std::to_string(std::get<12>(k));
}

struct Checked {
  int traces = 0;
  size_t connections = 0;
};

// Each trace of `dir` against the tap log of its process (nccl.<host>.<pid>.log in the same dir).
Checked CheckTraces(const std::string& dir) {
  Checked out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".p2ptrace") continue;
    auto t = p2ptrace::ReadTrace(e.path().string());
    if (!t.ok()) {
      ADD_FAILURE() << e.path();
      continue;
    }
    if (t->header.nccl_version == 0) continue;  // a process that made no NCCL call (the launcher)
    std::string log_path;
    for (const auto& f : std::filesystem::directory_iterator(dir)) {
      std::string name = f.path().filename().string();
      if (name.starts_with("nccl.") && name.ends_with("." + std::to_string(t->header.pid) + ".log"))
        log_path = f.path().string();
    }
    if (log_path.empty()) {
      ADD_FAILURE() << "no tap log for pid " << t->header.pid;
      continue;
    }
    p2ptrace::NcclLog log = p2ptrace::ParseNcclLog(ReadFile(log_path));
    std::multiset<Key> want, got;
    for (const p2ptrace::Connection& c : log.connections)
      if (c.logger.pid == t->header.pid) want.insert(Of(log, c));
    for (const p2ptrace_nccl_conn_record& c : t->nccl_connections) got.insert(Of(c));
    EXPECT_FALSE(want.empty()) << log_path;
    std::string missing, extra;
    for (const Key& k : want)
      if (!got.count(k)) missing += "\n  " + Show(k);
    for (const Key& k : got)
      if (!want.count(k)) extra += "\n  " + Show(k);
    EXPECT_EQ(got, want) << e.path() << "\nmissing:" << missing << "\nextra:" << extra;
    for (const Key& k : got) EXPECT_FALSE(std::get<0>(k).empty()) << "no comm: " << Show(k);
    ++out.traces;
    out.connections += got.size();
  }
  return out;
}

Env SimEnv(const std::string& dir) {
  return {{"P2PSIM_NCCL_TIMEOUT", "30"}, {"P2PSIM_NCCL_DIR", dir}, {"NCCL_DEBUG", std::nullopt},
          {"NCCL_DEBUG_FILE", std::nullopt}, {"NCCL_DEBUG_SUBSYS", std::nullopt}, {"P2PTRACE_NCCL_TAP", std::nullopt},
          {"P2PTRACE_NCCL_TAP_FILE", std::nullopt}, {"P2PTRACE_NCCL_FORWARD", std::nullopt},
          {"P2PTRACE_NCCL_LOG", std::nullopt}, {"P2PTRACE_SAMPLE", std::nullopt}, {"CUDA_VISIBLE_DEVICES", std::nullopt},
          {"NCCL_RUNTIME_CONNECT", std::nullopt}, {"P2PTRACE_WARN", "off"}, {"NO_COLOR", "1"}};
}

// One process under the shim on the simulated demo node, its rendezvous and trace in `dir`.
Env ShimmedProcess(const std::string& dir) {
  std::filesystem::create_directories(dir + "/rendezvous");
  Env env = SimEnv(dir + "/rendezvous");
  env["P2PTRACE_DIR"] = dir + "/trace";
  env["LD_PRELOAD"] = P2PTRACE_SHIM;
  env["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  env["P2PSIM_TOPOLOGY"] = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";
  return env;
}

struct RingCase {
  const char* name;
  int ranks;
  const char* runtime_connect;  // null: NCCL's default (lazy: lines at the first collective)
};
class NcclConnRecords : public ::testing::TestWithParam<RingCase> {};

TEST_P(NcclConnRecords, MatchTheTapLogExactly) {
  const RingCase& c = GetParam();
  std::string dir = TempDir() + "/conn-" + c.name;
  std::filesystem::create_directories(dir + "/rendezvous");
  std::filesystem::create_directories(dir + "/id");
  Env env = SimEnv(dir + "/rendezvous");
  if (c.runtime_connect) env["NCCL_RUNTIME_CONNECT"] = c.runtime_connect;
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir + "/trace", "--", P2PSIM, "launch", "--topology",
                            std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json", "--hosts",
                            "node0:" + std::to_string(c.ranks), "--", NCCL_RING, dir + "/id", "4096"},
                           env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Checked k = CheckTraces(dir + "/trace");
  EXPECT_EQ(k.traces, c.ranks);
  // nccl_ring runs rings (a connection each way per channel) and a send/recv ring: several per rank.
  EXPECT_GE(k.connections, static_cast<size_t>(2 * c.ranks));
  // `p2ptrace dump --json` prints them.
  for (const auto& e : std::filesystem::directory_iterator(dir + "/trace")) {
    if (e.path().extension() != ".p2ptrace") continue;
    RunResult d = RunProgram({P2PTRACE_CLI, "dump", e.path().string(), "--json"});
    ASSERT_EQ(d.exit_code, 0) << d.err;
    auto t = p2ptrace::ReadTrace(e.path().string());
    ASSERT_TRUE(t.ok());
    size_t lines = 0;
    for (size_t pos = d.out.find("\"kind\":\"nccl_conn\""); pos != std::string::npos;
         pos = d.out.find("\"kind\":\"nccl_conn\"", pos + 1))
      ++lines;
    EXPECT_EQ(lines, t->nccl_connections.size()) << e.path();
    if (!t->nccl_connections.empty()) {
      EXPECT_NE(d.out.find("\"transport\":\"P2P/CUMEM"), std::string::npos);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sim, NcclConnRecords,
                         ::testing::Values(RingCase{"two_ranks_lazy", 2, nullptr}, RingCase{"four_ranks_lazy", 4, nullptr},
                                           RingCase{"four_ranks_at_init", 4, "0"}),
                         [](const ::testing::TestParamInfo<RingCase>& p) { return std::string(p.param.name); });

// A process killed right after its first collective: the connections NCCL logged during it (lazy
// connect) are in its trace, which never saw exit.
TEST(NcclConnCrash, ConnectionsLoggedBeforeSigkillAreInTheTrace) {
  std::string dir = TempDir() + "/conn-kill";
  RunResult r = RunProgram({NCCL_INIT_ALL, "2", "kill"}, ShimmedProcess(dir));
  ASSERT_NE(r.exit_code, 0) << r.out << r.err;  // killed
  Checked k = CheckTraces(dir + "/trace");
  EXPECT_EQ(k.traces, 1);
  EXPECT_GE(k.connections, 2u);
  for (const auto& e : std::filesystem::directory_iterator(dir + "/trace"))
    if (e.path().extension() == ".p2ptrace") {
      auto t = p2ptrace::ReadTrace(e.path().string());
      ASSERT_TRUE(t.ok());
      EXPECT_EQ(t->header.state, static_cast<uint32_t>(P2PTRACE_STATE_RUNNING));  // no exit ran
    }
}

// After the first operation, what NCCL did is compared with the job-start prediction. The
// program sets NCCL_P2P_DISABLE=1 after its first allocation (where the check ran, predicting NVLink)
// and before ncclCommInitAll: every ring pair turns out SHM, each warned once, with the cause and the
// evidence that the setting came after the check; the same in the trace for the report. A run
// without the late setting observes what was predicted and warns nothing more.
TEST(NcclObserved, PathsWorseThanPredictedAreWarnedWithTheirCause) {
  std::string dir = TempDir() + "/observed";
  auto run = [&](const std::string& name, std::vector<std::string> args) {
    Env env = ShimmedProcess(dir + "/" + name);
    env["P2PTRACE_WARN"] = "rank";
    env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3";  // one NVLink island
    args.insert(args.begin(), NCCL_INIT_ALL);
    return RunProgram(args, env);
  };
  RunResult late = run("late", {"4", "late-env", "NCCL_P2P_DISABLE=1"});
  ASSERT_EQ(late.exit_code, 0) << late.out << late.err;
  EXPECT_NE(late.err.find("p2ptrace: all 6 GPU pairs on"), std::string::npos) << late.err;  // at the allocation
  for (const char* pair : {"GPU0 -> GPU1 (ranks 0->1)", "GPU1 -> GPU2 (ranks 1->2)", "GPU2 -> GPU3 (ranks 2->3)",
                           "GPU3 -> GPU0 (ranks 3->0)"}) {
    std::string want = std::string(pair) + ": shm instead of nvlink (observed after the first NCCL operation) "
                       "[env-p2p-disabled] NCCL_P2P_DISABLE=1; set after the job-start check: NCCL_P2P_DISABLE=1";
    size_t at = late.err.find(want);
    EXPECT_NE(at, std::string::npos) << want << "\n" << late.err;
    if (at != std::string::npos) {
      EXPECT_EQ(late.err.find(want, at + 1), std::string::npos) << "warned twice: " << pair;
    }
    EXPECT_NE(late.err.find("fix: unset NCCL_P2P_DISABLE"), std::string::npos);
  }
  // The trace holds the observed pairs with their cause.
  int observed = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/late/trace"))
    if (e.path().extension() == ".p2ptrace") {
      auto t = p2ptrace::ReadTrace(e.path().string());
      ASSERT_TRUE(t.ok());
      for (const auto& [kind, text] : t->text_blocks) {
        if (kind != P2PTRACE_TEXT_PREFLIGHT) continue;
        auto b = p2ptrace::ParsePreflight(text);
        ASSERT_TRUE(b.ok());
        for (const auto& pp : b->pairs)
          if (pp.transport == P2PTRACE_TRANSPORT_SHM && !pp.causes.empty() && pp.causes.front().id == "env-p2p-disabled")
            ++observed;
      }
    }
  EXPECT_EQ(observed, 4);

  RunResult plain = run("plain", {"4"});
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_EQ(plain.err.find("observed after the first NCCL operation"), std::string::npos) << plain.err;
  // There the check ran at ncclCommInitAll, the process's first call: it judged the communicator's
  // four GPUs (CUDA_VISIBLE_DEVICES), not all eight of the node.
  EXPECT_NE(plain.err.find("p2ptrace: all 6 GPU pairs on"), std::string::npos) << plain.err;
  EXPECT_EQ(plain.err.find("GPU4"), std::string::npos) << plain.err;
}

}  // namespace

// NCCL before 2.18.3 connects its rings inside the init and names the communicator only in the
// `Init COMPLETE` after those lines: with two communicators in one process (ncclCommInitAll), each
// connection record still carries its own, and a report from the traces alone (the logs gone) has
// the job's pairs. The same with a release that prints `Init START`.
TEST(NcclConnOldRelease, ConnectionsNamedBeforeTheirInitCompletesKeepTheirCommunicator) {
  for (std::string version : {"2.17.1", "2.28.9"}) {
    SCOPED_TRACE(version);
    std::string dir = TempDir() + "/old-init-all-" + version;
    Env env = ShimmedProcess(dir);
    env["P2PSIM_NCCL_VERSION"] = version;
    env["NCCL_RUNTIME_CONNECT"] = "0";  // 2.28: its rings at init too
    RunResult r = RunProgram({NCCL_INIT_ALL, "2"}, env);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::set<std::string> comms;
    int records = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/trace")) {
      if (e.path().extension() != ".p2ptrace") {
        std::filesystem::remove(e.path());  // the logs: the report has the traces alone
        continue;
      }
      auto t = p2ptrace::ReadTrace(e.path().string());
      ASSERT_TRUE(t.ok());
      for (const p2ptrace_nccl_conn_record& c : t->nccl_connections) {
        ++records;
        std::string comm(c.comm, strnlen(c.comm, sizeof c.comm));
        EXPECT_FALSE(comm.empty()) << "line " << c.line;
        comms.insert(comm);
      }
    }
    EXPECT_EQ(records, 4);  // 2 channels, each way
    EXPECT_EQ(comms.size(), 2u);
    RunResult rep = RunProgram({P2PTRACE_CLI, "report", dir + "/trace", "--json"});
    ASSERT_EQ(rep.exit_code, 0) << rep.err;
    auto j = nlohmann::json::parse(rep.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    std::set<std::pair<int, int>> pairs;
    for (const auto& p : j["pairs"])
      if (p["source"] == "nccl") pairs.insert({p["src"]["gpu"].get<int>(), p["dst"]["gpu"].get<int>()});
    EXPECT_EQ(pairs, (std::set<std::pair<int, int>>{{0, 1}, {1, 0}})) << j["pairs"].dump();
  }
}

// The shim's thread costs an idle job nothing but its heartbeat: with the tap's own log (read as
// NCCL writes it) it wakes once a second, not 20 times. A process whose allreduce never finishes
// on the GPU (the simulated node's hang fault) waits in cudaStreamSynchronize; its "p2ptrace"
// thread's voluntary context switches are counted over two seconds.
TEST(NcclWatchdog, AnIdleJobsThreadWakesOnlyToBeat) {
  Env env = ShimmedProcess(TempDir() + "/idle");
  env["P2PSIM_FAULT"] = "hang@0-1";
  p2ptrace::testing::ChildProcess child({NCCL_INIT_ALL, "2"}, env);
  auto switches = [&]() -> long {  // the shim's thread's, -1 while it is not there
    for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(child.pid()) + "/task")) {
      if (ReadFile(t.path().string() + "/comm") != "p2ptrace\n") continue;
      std::string status = ReadFile(t.path().string() + "/status");
      size_t at = status.find("voluntary_ctxt_switches:");
      if (at != std::string::npos) return std::stol(status.substr(at + 24));
    }
    return -1;
  };
  long before = -1;
  for (int i = 0; i < 100 && before < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    before = switches();
  }
  ASSERT_GE(before, 0) << "no p2ptrace thread";
  std::this_thread::sleep_for(std::chrono::seconds(2));
  long after = switches();
  kill(child.pid(), SIGKILL);
  child.Finish();
  EXPECT_LE(after - before, 6) << "wake-ups in 2 s of an idle job (1 s heartbeat)";
  EXPECT_GE(after - before, 1) << "the heartbeat goes on";
}
