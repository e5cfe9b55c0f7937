// The CUDA driver API: a program that copies between GPUs through libcuda — linked
// calls, cuGetProcAddress, cudaGetDriverEntryPointByVersion, dlsym on an RTLD_LOCAL libcuda — is
// traced exactly on the simulated node, prints what it prints bare, and a runtime copy (which the
// runtime carries out through the driver) is counted once. The real CUDA runtime never reaches the
// shim's driver wrappers for its own driver calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/trace_reader.h"
#include "core/vocabulary.h"
#include "nlohmann/json.hpp"
#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"
#include "tests/support/trace_files.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::testing::CounterCells;
using p2ptrace::testing::Env;
using p2ptrace::testing::ReadTraceDir;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

const std::string kMixed = std::string(P2PTRACE_TOPOLOGY_DIR) + "/mixed-8gpu.json";
const std::string kShim = std::string(P2PTRACE_LIB_DIR) + "/libp2ptrace.so";

enum class Mode { kBare, kRun, kPreloadOnly };

RunResult Job(const std::string& dir, Mode mode, const char* arg = nullptr, const char* program = DRIVER_WORKLOAD) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  Env env{{"P2PTRACE_SAMPLE", std::nullopt}, {"P2PTRACE_DIR", std::nullopt}, {"CUDA_VISIBLE_DEVICES", std::nullopt},
          {"LD_PRELOAD", std::nullopt},      {"LD_AUDIT", std::nullopt},     {"P2PTRACE_LIB", std::nullopt},
          {"P2PTRACE_WARN", "off"},          {"NO_COLOR", "1"}};
  std::vector<std::string> cmd;
  if (mode == Mode::kRun) cmd = {P2PTRACE_CLI, "run", "--dir", dir + "/trace", "--"};
  if (mode == Mode::kPreloadOnly) {
    env["LD_PRELOAD"] = kShim;
    env["P2PTRACE_DIR"] = dir + "/trace";
  }
  for (const char* a : {P2PSIM, "launch", "--topology", kMixed.c_str(), "--hosts", "node0:1", "--", program})
    cmd.push_back(a);
  if (arg != nullptr) cmd.push_back(arg);
  return RunProgram(cmd, env);
}

p2ptrace::Trace OnlyTrace(const std::string& dir) {
  std::vector<p2ptrace::Trace> out = ReadTraceDir(dir);
  EXPECT_EQ(out.size(), 1u);
  return out.empty() ? p2ptrace::Trace{} : std::move(out[0]);
}

std::map<std::string, int> CopyApis(const p2ptrace::Trace& t) {
  std::map<std::string, int> n;
  for (const auto& r : t.records)
    if (const auto* c = std::get_if<p2ptrace_copy_record>(&r.body)) ++n[std::string(p2ptrace::ApiName(c->api))];
  return n;
}

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

class Driver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = TempDir() + "/driver";
    bare_ = Job(dir_ + "/bare", Mode::kBare);
    run_ = Job(dir_ + "/run", Mode::kRun);
    preload_ = Job(dir_ + "/preload", Mode::kPreloadOnly);
  }
  static inline std::string dir_;
  static inline RunResult bare_, run_, preload_;
};

// What the program printed (p2ptrace run prints its report after it).
std::string Printed(const std::string& out) {
  std::string lines;
  for (size_t at = 0; at < out.size();) {
    size_t end = out.find('\n', at);
    end = end == std::string::npos ? out.size() : end + 1;
    if (out.compare(at, 9, "[rank 0] ") == 0) lines += out.substr(at, end - at);
    at = end;
  }
  return lines;
}

// The program ran to its end, every destination equal to its source, and the traced run printed
// exactly what the bare one did.
void ExpectSameBareAndTraced(const RunResult& bare, const RunResult& traced) {
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  EXPECT_NE(bare.out.find("[rank 0] done\n"), std::string::npos) << bare.out;
  EXPECT_EQ(bare.out.find("DIFFERENT"), std::string::npos) << bare.out;
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(Printed(traced.out), Printed(bare.out));
}

// One run of `driver_workload MODE`, bare and under `p2ptrace run`, for a whole suite.
template <const char* kMode>
class ModeJobs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = TempDir() + "/driver-" + kMode;
    bare_ = Job(dir_ + "/bare", Mode::kBare, kMode);
    run_ = Job(dir_ + "/run", Mode::kRun, kMode);
  }
  static inline std::string dir_;
  static inline RunResult bare_, run_;
};

// The JSON report of a trace directory, and its pairs as "src->dst" -> "transport calls bytes graph
// graph_calls graph_bytes {apis}".
json ReportJson(const std::string& trace) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", trace, "--json"}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json rep = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(rep.is_discarded()) << r.out;
  return rep;
}
std::map<std::string, std::string> PairCells(const json& rep) {
  std::map<std::string, std::string> got;
  if (!rep.contains("pairs")) return got;
  for (const json& p : rep["pairs"])
    got[p["src"]["gpu"].dump() + "->" + p["dst"]["gpu"].dump()] =
        p["transport"].get<std::string>() + " " + std::to_string(p["calls"].get<uint64_t>()) + " " +
        std::to_string(p["bytes"].get<uint64_t>()) + " graph " + std::to_string(p["graph_calls"].get<uint64_t>()) +
        " " + std::to_string(p["graph_bytes"].get<uint64_t>()) + " " + p["apis"].dump();
  return got;
}
// A pair moved only by graph replays of copies made through one API.
std::string ReplayedCell(uint64_t calls, uint64_t bytes, const char* api) {
  std::string n = std::to_string(calls) + " " + std::to_string(bytes);
  return "host_staged " + n + " graph " + n + " {\"" + api + "\":{\"bytes\":" + std::to_string(bytes) +
         ",\"calls\":" + std::to_string(calls) + "}}";
}

TEST_F(Driver, RunsAndPrintsTheSameBareAndTraced) {
  ExpectSameBareAndTraced(bare_, run_);
  ExpectSameBareAndTraced(bare_, preload_);
  // The simulated driver refuses a null context as the real one does.
  EXPECT_NE(bare_.out.find("cuMemcpyPeer bad context 201\n"), std::string::npos) << bare_.out;
}

// The program's copies (driver_workload.c's table), each once: the runtime's cudaMemcpyPeer 1->2
// is one call, not also a driver call.
TEST_F(Driver, EveryPairHasExactlyItsCallsAndBytes) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/run/trace");
  std::vector<std::string> want = {
      "0->1/0 3 " + std::to_string(1 * MiB + 256 * KiB) + " 1",  // peer access on: direct; 1 refused
      "0->2/1 1 " + std::to_string(512 * KiB) + " 0",
      "1->0/0 1 " + std::to_string(16 * KiB) + " 0",  // through dlsym: seen with LD_AUDIT
      "1->2/1 2 " + std::to_string(96 * KiB) + " 0",
      "2->0/1 1 " + std::to_string(256 * KiB) + " 0",
      "2->1/1 1 " + std::to_string(8 * KiB) + " 0"};
  EXPECT_EQ(CounterCells(t), want);
  std::map<std::string, int> apis = CopyApis(t);
  EXPECT_EQ(apis["cuMemcpyPeer"], 2);  // one refused
  EXPECT_EQ(apis["cuMemcpyPeerAsync"], 2);
  EXPECT_EQ(apis["cuMemcpyDtoD"], 2);
  EXPECT_EQ(apis["cuMemcpyAsync"], 1);
  EXPECT_EQ(apis["cuMemcpy3DPeer"], 1);
  EXPECT_EQ(apis["cuMemcpyDtoDAsync"], 1);
  EXPECT_EQ(apis["cudaMemcpyPeer"], 1);
  uint32_t want_flags = P2PTRACE_CAPTURE_DRIVER | P2PTRACE_CAPTURE_DRIVER_ENTRY_POINT | P2PTRACE_CAPTURE_DRIVER_DLSYM |
                        P2PTRACE_CAPTURE_CUDART_13;
  EXPECT_EQ(t.header.capture_flags & want_flags, want_flags) << std::hex << t.header.capture_flags;
  EXPECT_EQ(t.header.minor, P2PTRACE_FORMAT_MINOR);
  EXPECT_EQ(std::string(t.header.bus_id[0]), "0000:18:00.0");
}

TEST_F(Driver, PeerCallsAreRecordedWithTheDriversResults) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/run/trace");
  std::vector<std::string> peers;
  for (const auto& r : t.records)
    if (const auto* p = std::get_if<p2ptrace_peer_record>(&r.body))
      peers.push_back(std::string(p2ptrace::ApiName(p->api)) + " " + std::to_string(p->device) + "->" +
                      std::to_string(p->peer) + " r" + std::to_string(p->result) + " v" + std::to_string(p->value));
  std::vector<std::string> want = {"cuDeviceCanAccessPeer 0->1 r0 v1", "cuCtxEnablePeerAccess 0->1 r0 v0",
                                   "cuCtxEnablePeerAccess 0->1 r704 v0"};
  EXPECT_EQ(peers, want);
}

// LD_PRELOAD alone: the linked calls and the entry points are seen, the dlsym one is not.
TEST_F(Driver, PreloadAloneSeesAllButTheDlsymCall) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/preload/trace");
  std::vector<std::string> cells = CounterCells(t);
  EXPECT_EQ(std::count_if(cells.begin(), cells.end(), [](const std::string& c) { return c.rfind("1->0/", 0) == 0; }), 0);
  EXPECT_NE(std::find(cells.begin(), cells.end(), "1->2/1 2 " + std::to_string(96 * KiB) + " 0"), cells.end());
  EXPECT_EQ(cells.size(), 5u);
  EXPECT_TRUE(t.header.capture_flags & P2PTRACE_CAPTURE_DRIVER_ENTRY_POINT);
  EXPECT_FALSE(t.header.capture_flags & P2PTRACE_CAPTURE_DRIVER_DLSYM);
}

TEST_F(Driver, ReportNamesTheDriverPathAndThePairsClasses) {
  json rep = ReportJson(dir_ + "/run/trace");
  ASSERT_TRUE(rep.is_object());
  EXPECT_TRUE(rep["capture"]["driver"].get<bool>());
  EXPECT_TRUE(rep["capture"]["driver_via_dlsym"].get<bool>());
  EXPECT_TRUE(rep["capture"]["driver_via_entry_point"].get<bool>());
  std::map<std::string, std::string> transport;
  std::map<std::string, uint64_t> bytes;
  std::map<std::string, json> apis;
  for (const json& p : rep["pairs"]) {
    std::string key = p["src"]["gpu"].dump() + "->" + p["dst"]["gpu"].dump();
    transport[key] = p["transport"].get<std::string>();
    bytes[key] += p["bytes"].get<uint64_t>();
    apis[key] = p["apis"];
  }
  // Which API moved each pair's bytes: the driver's (each entry point counted as its function) and
  // the runtime's side by side on 1->2.
  EXPECT_EQ(apis["0->1"], json::parse(R"({"cuMemcpyPeer": {"calls": 1, "bytes": 1048576},
                                          "cuMemcpyPeerAsync": {"calls": 2, "bytes": 262144}})"));
  EXPECT_EQ(apis["1->2"], json::parse(R"({"cuMemcpyDtoD": {"calls": 1, "bytes": 65536},
                                          "cudaMemcpyPeer": {"calls": 1, "bytes": 32768}})"));
  EXPECT_EQ(apis["1->0"], json::parse(R"({"cuMemcpyDtoDAsync": {"calls": 1, "bytes": 16384}})"));
  EXPECT_EQ(transport["0->1"], "nvlink");
  EXPECT_EQ(transport["1->0"], "nvlink");
  EXPECT_EQ(transport["0->2"], "host_staged");
  EXPECT_EQ(bytes["0->1"], 1 * MiB + 256 * KiB);
  EXPECT_EQ(bytes["1->2"], 96 * KiB);
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir_ + "/run/trace"}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("CUDA driver via cuGetProcAddress/cudaGetDriverEntryPoint"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("3 copies (3 by the driver API)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("2 copies (1 by the driver API)"), std::string::npos) << text.out;
}

// Graphs through the driver (driver_workload.c's Graphs()): captures begun with
// cuStreamBeginCapture and with cudaStreamBeginCapture, each holding driver and runtime copies,
// instantiated by the three-argument, legacy five-argument and runtime forms, launched by
// cuGraphLaunch, through cuGetProcAddress and by cudaGraphLaunch, one exec updated, one capture
// invalidated. Each captured copy counts once per launch, under the API that captured it.
constexpr char kGraphMode[] = "graph", kNodesMode[] = "nodes";
class DriverGraphs : public ModeJobs<kGraphMode> {};

TEST_F(DriverGraphs, RunsAndPrintsTheSameBareAndTraced) {
  ExpectSameBareAndTraced(bare_, run_);
  // The simulated driver's answers, as the real driver's: a query invalidates the capture, which
  // then ends with 901 and no graph; the legacy instantiate clears its error node and log.
  EXPECT_NE(bare_.out.find("cuStreamQuery while capturing 900\n"), std::string::npos) << bare_.out;
  EXPECT_NE(bare_.out.find("cuStreamEndCapture invalidated 901 null\n"), std::string::npos) << bare_.out;
  EXPECT_NE(bare_.out.find("instantiate error node null log ''\n"), std::string::npos) << bare_.out;
}

TEST_F(DriverGraphs, EachCapturedCopyCountsOncePerLaunch) {
  json rep = ReportJson(dir_ + "/run/trace");
  std::map<std::string, std::string> want = {
      {"0->1", ReplayedCell(5, 5 * 64 * KiB, "cuMemcpyPeerAsync")},  // A: 4 linked launches + 1 through cuGetProcAddress
      {"1->2", ReplayedCell(5, 5 * 32 * KiB, "cuMemcpyDtoDAsync")},  // A
      {"2->0", ReplayedCell(3, 3 * 16 * KiB, "cuMemcpyAsync")},      // B: a driver copy in a runtime capture
      {"0->2", ReplayedCell(3, 3 * 8 * KiB, "cudaMemcpyPeerAsync")}, // B
      {"1->0", ReplayedCell(3, 2 * 4 * KiB + 2 * KiB, "cudaMemcpyPeerAsync")}};  // C: 2 launches, then 1 of the update
  EXPECT_EQ(PairCells(rep), want) << rep["pairs"].dump();
  // A pair only the driver copied is told in the driver's terms, its fix included.
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir_ + "/run/trace"}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("5 cuMemcpy* calls (320.0 KiB) from GPU 0000:18:00.0 to GPU 0000:2a:00.0 went through host "
                          "memory; cuCtxEnablePeerAccess was never called"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("3 cudaMemcpy* calls (24.0 KiB) from GPU 0000:18:00.0 to GPU 0000:3a:00.0"), std::string::npos);
  EXPECT_NE(text.out.find("fix: enable peer access before copying: with each device's context current, "
                          "cuCtxEnablePeerAccess(ctx_b, 0)"),
            std::string::npos);
  EXPECT_NE(text.out.find("5 copies (5 by the driver API)"), std::string::npos);
  EXPECT_TRUE(rep["capture"]["driver"].get<bool>());
  EXPECT_TRUE(rep["capture"]["driver_via_entry_point"].get<bool>());
}

// The trace: every launch recorded against its capture, the invalidated capture's copy never
// replayed, driver launches on driver streams sampled for timing (P2PTRACE_SAMPLE's first 8).
TEST_F(DriverGraphs, TraceHoldsEveryLaunchAndTimesTheFirst) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/run/trace");
  std::map<int, int> launches;  // graph id -> successful launches
  int timed = 0, failed_captures = 0, captured_copies = 0;
  for (const auto& rec : t.records) {
    if (const auto* g = std::get_if<p2ptrace_graph_record>(&rec.body)) {
      if (g->event == P2PTRACE_GRAPH_LAUNCH && g->result == 0) ++launches[static_cast<int>(g->graph_id)];
      if (g->event == P2PTRACE_GRAPH_LAUNCH && (g->flags & P2PTRACE_GRAPH_TIMED)) ++timed;
      if (g->event == P2PTRACE_GRAPH_END_CAPTURE && g->result != 0) ++failed_captures;
    }
    if (const auto* c = std::get_if<p2ptrace_copy_record>(&rec.body))
      if (c->flags & P2PTRACE_COPY_CAPTURED) ++captured_copies;
  }
  EXPECT_EQ(launches, (std::map<int, int>{{1, 5}, {2, 3}, {3, 2}, {4, 1}}));
  // The first 8 launches are sampled: A's 5 (the driver's, on a driver stream) are timed; B's 3
  // (cudaGraphLaunch on a driver stream) are not: the runtime's events cannot be trusted to record
  // on a stream of a context the program may have made itself.
  EXPECT_EQ(timed, 5);
  EXPECT_EQ(failed_captures, 1);
  EXPECT_EQ(captured_copies, 7);  // A 2, B 2, C 1, C' 1, the invalidated capture's 1
  // Nothing of the graphs reached the pair counters: replays are the readers' work.
  EXPECT_EQ(CounterCells(t), std::vector<std::string>{});
}

// Graphs built node by node (driver_workload.c's Nodes()): copy nodes through both APIs, a graph
// that grows after an exec was made of it (the exec keeps what it had), a clone and a clone of it,
// a child graph added twice, an exec launched into a capture.
class DriverNodes : public ModeJobs<kNodesMode> {};

TEST_F(DriverNodes, RunsAndPrintsTheSameBareAndTraced) { ExpectSameBareAndTraced(bare_, run_); }

TEST_F(DriverNodes, EachCopyNodeCountsOncePerLaunchOfEveryGraphHoldingIt) {
  json rep = ReportJson(dir_ + "/run/trace");
  // G1's first exec: 3 launches of its first two copies; the grown G1: 3 launches of three; the
  // clone: 1; G3 (one node of its own and G1 as a child twice): 2 launches; the clone of the clone:
  // 1; the capture holding a launch of the clone's exec: 1. The host-to-device node is no pair.
  std::map<std::string, std::string> want = {
      {"0->1", ReplayedCell(13, 13 * 8 * KiB, "cudaGraphAddMemcpyNode1D")},
      {"2->1", ReplayedCell(13, 13 * 4 * KiB, "cudaGraphAddMemcpyNode")},
      {"0->2", ReplayedCell(10, 10 * 2 * KiB, "cudaGraphAddMemcpyNode1D")},
      {"1->0", ReplayedCell(2, 2 * 16 * KiB, "cuGraphAddMemcpyNode")}};
  EXPECT_EQ(PairCells(rep), want) << rep["pairs"].dump();
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir_ + "/run/trace"}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("13 calls (104.0 KiB) from graph replays"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("2 copies (2 by the driver API)"), std::string::npos) << text.out;
}

// The trace says how the graphs were made: a new id for the grown G1 that includes the old one,
// the clone's and G3's includes (G3's of the grown G1, which the child node copied).
TEST_F(DriverNodes, TraceRecordsWhichGraphHoldsWhich) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/run/trace");
  std::vector<std::string> includes;
  int node_copies = 0;
  for (const auto& rec : t.records) {
    if (const auto* g = std::get_if<p2ptrace_graph_record>(&rec.body); g && g->event == P2PTRACE_GRAPH_INCLUDE)
      includes.push_back(std::to_string(g->graph_id) + "<" + std::to_string(g->included_id));
    if (const auto* c = std::get_if<p2ptrace_copy_record>(&rec.body); c && (c->flags & P2PTRACE_COPY_CAPTURED)) {
      ++node_copies;
      EXPECT_EQ(c->stream, 0u);
    }
  }
  // The grown G1, the clone, G3's two child nodes, the clone of the clone, the capture's launch.
  EXPECT_EQ(includes, (std::vector<std::string>{"2<1", "3<2", "4<2", "4<2", "5<3", "6<3"}));
  EXPECT_EQ(node_copies, 4);
  EXPECT_EQ(CounterCells(t), std::vector<std::string>{});
}

// Captures that append to the program's own graph (driver_workload.c's ToGraph()): each captured
// copy joins the graph's work, an exec keeps what the graph held when it was made, and a capture
// that was invalidated adds nothing.
constexpr char kToGraphMode[] = "tograph";
class DriverToGraph : public ModeJobs<kToGraphMode> {};

TEST_F(DriverToGraph, RunsAndPrintsTheSameBareAndTraced) {
  ExpectSameBareAndTraced(bare_, run_);
  EXPECT_NE(bare_.out.find("end capture returned the program's graph\n"), std::string::npos) << bare_.out;
  for (const char* line : {"cudaStreamEndCapture invalidated 901 null\n", "H keeps 0 nodes\n", "done\n"})
    EXPECT_NE(bare_.out.find(line), std::string::npos) << line << bare_.out;
}

TEST_F(DriverToGraph, EachCapturedCopyCountsOncePerLaunchOfTheGraphItJoined) {
  json rep = ReportJson(dir_ + "/run/trace");
  // x1 (the node and the first capture): 4 launches; x2 (and the second capture): 2.
  std::map<std::string, std::string> want = {
      {"0->1", ReplayedCell(6, 6 * 8 * KiB, "cudaGraphAddMemcpyNode1D")},
      {"1->2", ReplayedCell(6, 6 * 4 * KiB, "cudaMemcpyAsync")},
      {"2->0", ReplayedCell(2, 2 * 2 * KiB, "cuMemcpyAsync")}};
  EXPECT_EQ(PairCells(rep), want) << rep["pairs"].dump();
}

// The graph's id includes each capture's: the first capture joins the graph's own id (1), the
// second a new id (4) made when x1 had taken id 1, which includes 1 too; the invalidated one nothing.
TEST_F(DriverToGraph, TraceRecordsEachCaptureAsPartOfTheGraph) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/run/trace");
  std::vector<std::string> includes;
  for (const auto& rec : t.records)
    if (const auto* g = std::get_if<p2ptrace_graph_record>(&rec.body); g && g->event == P2PTRACE_GRAPH_INCLUDE)
      includes.push_back(std::to_string(g->graph_id) + "<" + std::to_string(g->included_id));
  EXPECT_EQ(includes, (std::vector<std::string>{"1<2", "4<1", "4<3"}));
  EXPECT_EQ(CounterCells(t), std::vector<std::string>{});
}

// Nodes of a recorded graph changed afterwards (driver_workload.c's Altered()): replays still count
// the recorded copies, each change is in the trace, and the report says the replays may be off.
constexpr char kAlteredMode[] = "altered";
class DriverAltered : public ModeJobs<kAlteredMode> {};

TEST_F(DriverAltered, RunsAndPrintsTheSameBareAndTraced) {
  ExpectSameBareAndTraced(bare_, run_);
  for (const char* line : {"n1 is a memcpy node\n", "x 0->1 (16 KiB) same\n", "G holds 2 nodes\n"})
    EXPECT_NE(bare_.out.find(line), std::string::npos) << line << bare_.out;
}

TEST_F(DriverAltered, EachChangeIsRecordedAndReplaysStayAsRecorded) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/run/trace");
  std::vector<std::string> altered;
  for (const auto& rec : t.records)
    if (const auto* g = std::get_if<p2ptrace_graph_record>(&rec.body); g && g->event == P2PTRACE_GRAPH_ALTERED)
      altered.push_back(std::string(p2ptrace::ApiName(g->api)) + " " + std::to_string(g->graph_id));
  // The exec's changes carry its graph id (1); a graph's node is named without one. The untracked
  // exec's disabled host-to-device node is not there.
  EXPECT_EQ(altered, (std::vector<std::string>{"cudaGraphExecMemcpyNodeSetParams1D 1", "cudaGraphNodeSetEnabled 1",
                                               "cuGraphExecMemcpyNodeSetParams 1", "cuGraphNodeSetEnabled 1",
                                               "cudaGraphMemcpyNodeSetParams1D 0", "cuGraphMemcpyNodeSetParams 0",
                                               "cudaGraphDestroyNode 0"}));
  json rep = ReportJson(dir_ + "/run/trace");
  ASSERT_TRUE(rep.is_object());
  std::map<std::string, std::string> want = {
      {"0->1", ReplayedCell(7, 7 * 8 * KiB, "cudaGraphAddMemcpyNode1D")},
      {"1->2", ReplayedCell(7, 7 * 4 * KiB, "cudaGraphAddMemcpyNode1D")},
      {"2->0", ReplayedCell(7, 7 * 2 * KiB, "cuGraphAddMemcpyNode")}};
  EXPECT_EQ(PairCells(rep), want) << rep["pairs"].dump();
  ASSERT_EQ(rep["ranks"].size(), 1u);
  const json& rank = rep["ranks"][0];
  EXPECT_EQ(rank["graph_nodes_altered"],
            json({{"cudaGraphExecMemcpyNodeSetParams1D", 1}, {"cudaGraphNodeSetEnabled", 1},
                  {"cuGraphExecMemcpyNodeSetParams", 1}, {"cuGraphNodeSetEnabled", 1},
                  {"cudaGraphMemcpyNodeSetParams1D", 1}, {"cuGraphMemcpyNodeSetParams", 1},
                  {"cudaGraphDestroyNode", 1}}));
  EXPECT_NE(rank["trust"].get<std::string>().find("graph replays counted as the copies were recorded"),
            std::string::npos)
      << rank["trust"];
}

// The generic calls that change nodes (driver_workload.c's SetParams(), their success
// paths): each change is in the trace with its exec's graph or none, the program's output and what
// its copies moved are the same bare and traced, and the replays keep counting the copies as they
// were recorded (the report says they may be off).
constexpr char kSetParamsMode[] = "setparams";
class DriverSetParams : public ModeJobs<kSetParamsMode> {};

TEST_F(DriverSetParams, RunsAndPrintsTheSameBareAndTraced) {
  ExpectSameBareAndTraced(bare_, run_);
  for (const char* line : {"x 0->1 (16 KiB, set in the exec) same\n", "x 1->2 (child2) same\n",
                           "x 0->1 (4 KiB, set by the driver) same\n", "y 0->1 (2 KiB, set in the graph) same\n", "done\n"})
    EXPECT_NE(bare_.out.find(line), std::string::npos) << line << bare_.out;
}

TEST_F(DriverSetParams, EachChangeIsRecorded) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/run/trace");
  std::vector<std::string> altered;
  for (const auto& rec : t.records)
    if (const auto* g = std::get_if<p2ptrace_graph_record>(&rec.body); g && g->event == P2PTRACE_GRAPH_ALTERED)
      altered.push_back(std::string(p2ptrace::ApiName(g->api)) + " " + std::to_string(g->graph_id));
  EXPECT_EQ(altered, (std::vector<std::string>{"cudaGraphExecNodeSetParams 1", "cudaGraphExecChildGraphNodeSetParams 1",
                                               "cuGraphExecNodeSetParams 1", "cuGraphExecChildGraphNodeSetParams 1",
                                               "cudaGraphNodeSetParams 0", "cuGraphNodeSetParams 0"}));
  json rep = ReportJson(dir_ + "/run/trace");
  ASSERT_TRUE(rep.is_object());
  ASSERT_EQ(rep["ranks"].size(), 1u);
  EXPECT_NE(rep["ranks"][0]["trust"].get<std::string>().find("graph replays counted as the copies were recorded"),
            std::string::npos)
      << rep["ranks"][0]["trust"];
}

// The generic node calls of every ABI (driver_workload.c's AddNodes()): CUDA 12.2's and 12.3's
// forms of the driver's and cudart 12's, cudart 13's; copy nodes and a child graph node.
constexpr char kAddNodeMode[] = "addnode";
class DriverAddNode : public ModeJobs<kAddNodeMode> {};

TEST_F(DriverAddNode, RunsAndPrintsTheSameBareAndTraced) { ExpectSameBareAndTraced(bare_, run_); }

TEST_F(DriverAddNode, EachCopyNodeCountsOncePerLaunchWhicheverFormAddedIt) {
  json rep = ReportJson(dir_ + "/run/trace");
  std::map<std::string, std::string> want = {
      {"0->1", ReplayedCell(3, 3 * 8 * KiB, "cudaGraphAddNode")},          // cudart 13
      {"1->2", ReplayedCell(3, 3 * 4 * KiB, "cudaGraphAddMemcpyNode1D")},  // the child graph's node
      {"2->0", ReplayedCell(3, 3 * 2 * KiB, "cuGraphAddNode")},            // cuGraphAddNode_v2
      {"1->0", ReplayedCell(3, 3 * KiB, "cuGraphAddNode")},                // 12.2's cuGraphAddNode
      {"0->2", ReplayedCell(2, 2 * 512, "cudaGraphAddNode")},              // cudart 12's (12.2 form), via dlsym
      {"2->1", ReplayedCell(2, 2 * 256, "cudaGraphAddNode")}};             // cudart 12's _v2, via dlsym
  EXPECT_EQ(PairCells(rep), want) << rep["pairs"].dump();
  EXPECT_TRUE(rep["capture"]["cudart_via_dlsym"].get<bool>());
}

// The toolkit's stub libcuda (a real NVIDIA library) answers every call with
// CUDA_ERROR_STUB_LIBRARY: through the shim each wrapped function (copies, streams, captures,
// graphs) returns exactly that, and writes
// nothing the stub did not (the program prints every result and out-parameter).
TEST(DriverStub, ErrorsPassThroughExactly) {
  std::string dir = TempDir() + "/driver-stub";
  fs::create_directories(dir + "/lib");
  fs::remove(dir + "/lib/libcuda.so.1");
  fs::create_symlink(CUDA_STUB_LIBCUDA, dir + "/lib/libcuda.so.1");
  Env env{{"LD_LIBRARY_PATH", dir + "/lib"}, {"LD_PRELOAD", std::nullopt}, {"P2PTRACE_DIR", std::nullopt},
          {"P2PTRACE_WARN", "off"}};
  RunResult bare = RunProgram({DRIVER_WORKLOAD, "errors"}, env);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_NE(bare.out.find("cuMemcpyPeer 34\n"), std::string::npos) << bare.out;
  EXPECT_NE(bare.out.find("cuMemcpyDtoDAsync 34\n"), std::string::npos) << bare.out;
  EXPECT_NE(bare.out.find("cuGraphLaunch 34\n"), std::string::npos) << bare.out;
  EXPECT_NE(bare.out.find("cuStreamEndCapture 34 untouched\n"), std::string::npos) << bare.out;
  env["LD_PRELOAD"] = kShim;
  env["P2PTRACE_DIR"] = dir + "/trace";
  RunResult traced = RunProgram({DRIVER_WORKLOAD, "errors"}, env);
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, bare.out);
}

// Memory as JAX/XLA 0.11+ and PyTorch's expandable segments and cudaMallocAsync backend make it
// (vmm_workload.c): the virtual memory API and pools, every driver call through dlsym on
// an RTLD_LOCAL libcuda, no context peer access. The grants (cuMemSetAccess, cuMemPoolSetAccess)
// open their pairs; what nothing grants goes through the host.
class Vmm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = TempDir() + "/vmm";
    bare_ = Job(dir_ + "/bare", Mode::kBare, nullptr, VMM_WORKLOAD);
    run_ = Job(dir_ + "/run", Mode::kRun, nullptr, VMM_WORKLOAD);
    one_bare_ = Job(dir_ + "/one-bare", Mode::kBare, "onegpu", VMM_WORKLOAD);
    one_run_ = Job(dir_ + "/one-run", Mode::kRun, "onegpu", VMM_WORKLOAD);
    alloc_run_ = Job(dir_ + "/alloc-run", Mode::kRun, "alloc", VMM_WORKLOAD);
  }
  static inline std::string dir_;
  static inline RunResult bare_, run_, one_bare_, one_run_, alloc_run_;
};

TEST_F(Vmm, RunsAndPrintsTheSameBareAndTraced) {
  ExpectSameBareAndTraced(bare_, run_);
  ExpectSameBareAndTraced(one_bare_, one_run_);
}

TEST_F(Vmm, EveryPairHasItsCallsAndTheClassItsGrantsGive) {
  p2ptrace::Trace t = OnlyTrace(dir_ + "/run/trace");
  std::vector<std::string> want = {"0->1/0 1 " + std::to_string(256 * KiB) + " 0",   // granted both ways
                                   "0->2/1 1 " + std::to_string(64 * KiB) + " 0",    // nothing granted
                                   "1->0/0 1 " + std::to_string(128 * KiB) + " 0",
                                   "1->2/0 1 " + std::to_string(32 * KiB) + " 0"};   // GPU 1's pool granted to 2
  EXPECT_EQ(CounterCells(t), want);
  uint32_t want_flags = P2PTRACE_CAPTURE_DRIVER | P2PTRACE_CAPTURE_DRIVER_DLSYM;
  EXPECT_EQ(t.header.capture_flags & want_flags, want_flags) << std::hex << t.header.capture_flags;
  std::vector<std::string> grants;
  for (const auto& r : t.records)
    if (const auto* p = std::get_if<p2ptrace_peer_record>(&r.body))
      grants.push_back(std::string(p2ptrace::ApiName(p->api)) + " " + std::to_string(p->device) + "->" +
                       std::to_string(p->peer) + " r" + std::to_string(p->result) + " v" + std::to_string(p->value));
  EXPECT_EQ(grants, (std::vector<std::string>{"cuMemSetAccess 1->0 r0 v3", "cuMemSetAccess 0->1 r0 v3",
                                               "cuMemPoolSetAccess 2->1 r0 v3"}));
  json rep = ReportJson(dir_ + "/run/trace");
  std::map<std::string, std::string> transport;
  for (const json& p : rep["pairs"]) transport[p["src"]["gpu"].dump() + "->" + p["dst"]["gpu"].dump()] = p["transport"];
  EXPECT_EQ(transport, (std::map<std::string, std::string>{
                           {"0->1", "nvlink"}, {"1->0", "nvlink"}, {"0->2", "host_staged"}, {"1->2", "pcie_p2p"}}));
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir_ + "/run/trace"}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("CUDA driver via dlsym (LD_AUDIT)"), std::string::npos) << text.out;
}

// One GPU and no peer traffic (JAX on one GPU): traced, its header written, and said so, never
// "untraced".
TEST_F(Vmm, OneGpuIsTracedWithNoPair) {
  EXPECT_EQ(one_run_.err.find("untraced"), std::string::npos) << one_run_.err;
  p2ptrace::Trace t = OnlyTrace(dir_ + "/one-run/trace");
  EXPECT_TRUE(t.header.capture_flags & P2PTRACE_CAPTURE_DRIVER_DLSYM) << std::hex << t.header.capture_flags;
  EXPECT_GT(t.header.device_count, 0);
  EXPECT_TRUE(CounterCells(t).empty());
  EXPECT_NE(one_run_.out.find("no GPU pair exchanged data"), std::string::npos) << one_run_.out;
  // cuMemAlloc alone (CuPy's static runtime through the driver, seen on the H200): traced too.
  EXPECT_EQ(alloc_run_.exit_code, 0) << alloc_run_.err;
  EXPECT_EQ(alloc_run_.err.find("untraced"), std::string::npos) << alloc_run_.err;
  EXPECT_TRUE(OnlyTrace(dir_ + "/alloc-run/trace").header.capture_flags & P2PTRACE_CAPTURE_DRIVER_DLSYM);
}

}  // namespace
