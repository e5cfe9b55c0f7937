// libp2ptrace.so seen from outside: shim_workload (linked to the real libcudart, never to the shim)
// runs on the simulated node with and without LD_PRELOAD of the shim; the program must behave
// byte for byte the same, and the trace it leaves (read with core's ReadTrace) must hold exactly
// the pairs, paths, bytes and timings the workload and the topology say.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/trace_reader.h"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"

namespace {

using p2ptrace::Trace;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using p2ptrace::testing::WriteFile;
using Env = std::map<std::string, std::optional<std::string>>;

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
const std::string kDemo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";

// The environment a run starts from: nothing inherited that the shim or the sim would read.
Env Clean() {
  Env env;
  for (const char* name :
       {"LD_PRELOAD", "P2PTRACE_DIR", "P2PTRACE_SAMPLE", "P2PTRACE_MAX_MB", "P2PTRACE_DISABLE", "P2PTRACE_SYSROOT",
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
        "PMI_RANK", "PMI_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID",
        "CUDA_VISIBLE_DEVICES", "P2PSIM_HOST", "P2PSIM_TOPOLOGY", "LD_LIBRARY_PATH"})
    env[name] = std::nullopt;
  return env;
}

// On the simulated node (demo-8gpu unless said).
Env Sim(const std::string& topo = kDemo) {
  Env env = Clean();
  env["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  env["P2PSIM_TOPOLOGY"] = topo;
  return env;
}

// The same, with the shim preloaded and tracing into `dir`. Job-start warnings off: these tests
// compare the program's stderr with its bare run (the warnings have their own, preflight_test).
Env Traced(Env env, const std::string& dir) {
  env["LD_PRELOAD"] = SHIM_LIB;
  env["P2PTRACE_DIR"] = dir;
  env["P2PTRACE_WARN"] = "off";
  return env;
}

// A fresh, not yet existing directory for one run's traces (the shim creates it).
std::string NewTraceDir(const std::string& name) {
  std::string dir = TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<std::string> TraceFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".p2ptrace") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// Reads every trace in `dir`; a file ReadTrace rejects fails the test.
std::vector<Trace> ReadAll(const std::string& dir) {
  std::vector<Trace> traces;
  for (const std::string& f : TraceFiles(dir)) {
    auto t = p2ptrace::ReadTrace(f);
    if (!t) {
      ADD_FAILURE() << t.error().message;
      continue;
    }
    traces.push_back(std::move(*t));
  }
  return traces;
}

std::vector<p2ptrace_copy_record> Copies(const Trace& t) {
  std::vector<p2ptrace_copy_record> out;
  for (const auto& r : t.records)
    if (const auto* c = std::get_if<p2ptrace_copy_record>(&r.body)) out.push_back(*c);
  return out;
}

template <typename R>
std::vector<R> RecordsOf(const Trace& t) {
  std::vector<R> out;
  for (const auto& r : t.records)
    if (const auto* c = std::get_if<R>(&r.body)) out.push_back(*c);
  return out;
}

// Every nonzero counter cell, "src->dst/path: calls=… bytes=… errors=…", for messages and checks.
std::map<std::tuple<int, int, int>, p2ptrace_pair_counters> NonZeroCounters(const Trace& t) {
  std::map<std::tuple<int, int, int>, p2ptrace_pair_counters> out;
  int n = static_cast<int>(t.header.max_devices);
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d)
      for (int p = 0; p < 2; ++p) {
        const p2ptrace_pair_counters& c = t.Counter(s, d, p);
        if (c.calls || c.bytes || c.errors || c.timed_calls || c.timed_bytes || c.timed_ns) out[{s, d, p}] = c;
      }
  return out;
}

std::string Describe(const Trace& t) {
  std::ostringstream os;
  os << t.path << ": state " << t.header.state << " signal " << t.header.fatal_signal << " flags 0x" << std::hex
     << t.header.capture_flags << std::dec << " records " << t.records.size() << " dropped "
     << t.header.dropped_records << "\n";
  for (const auto& [k, c] : NonZeroCounters(t))
    os << "  " << std::get<0>(k) << "->" << std::get<1>(k) << "/" << std::get<2>(k) << ": calls=" << c.calls
       << " bytes=" << c.bytes << " errors=" << c.errors << " timed_calls=" << c.timed_calls
       << " timed_bytes=" << c.timed_bytes << " timed_ns=" << c.timed_ns << "\n";
  return os.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// stderr split into the shim's warning lines and everything else.
struct SplitErr {
  std::vector<std::string> warnings;
  std::string rest;
};
SplitErr SplitWarnings(const std::string& err) {
  SplitErr s;
  for (const std::string& line : Lines(err)) {
    if (line.rfind("p2ptrace: warning:", 0) == 0) s.warnings.push_back(line);
    else s.rest += line + "\n";
  }
  return s;
}

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// ================================================================================================
// 1. Transparency: the script of every wrapped function and error path prints the same with the shim.

// Runs `script` bare and traced in `env`; both must agree byte for byte (stdout, stderr, exit).
// Returns the traced run's trace directory.
std::string ExpectScriptTransparent(const Env& env, const std::string& name, RunResult* bare_out = nullptr) {
  RunResult bare = RunProgram({SHIM_WORKLOAD, "script"}, env);
  std::string dir = NewTraceDir(name);
  RunResult traced = RunProgram({SHIM_WORKLOAD, "script"}, Traced(env, dir));
  EXPECT_EQ(bare.signal, 0) << bare.err;
  EXPECT_EQ(traced.signal, bare.signal) << traced.err;
  EXPECT_EQ(traced.exit_code, bare.exit_code) << traced.err;
  EXPECT_EQ(traced.out, bare.out);
  EXPECT_EQ(traced.err, bare.err);
  // Not vacuous: the script made its calls and reported them all.
  EXPECT_GE(std::count(bare.out.begin(), bare.out.end(), '\n'), 100) << bare.out;
  EXPECT_NE(bare.out.find("final cudaGetLastError="), std::string::npos) << bare.out;
  if (bare_out) *bare_out = bare;
  return dir;
}

TEST(Transparency, ScriptIdenticalOnSimulatedNode) {
  RunResult bare;
  std::string dir = ExpectScriptTransparent(Sim(), "script-sim", &bare);
  EXPECT_EQ(bare.exit_code, 0);
  // Spot checks that the script reached the error paths it claims (the sim's codes).
  for (const char* expected :
       {"cudaDeviceEnablePeerAccess(1) again rc=704", "cudaDeviceEnablePeerAccess(4)    rc=217",
        "cudaDeviceEnablePeerAccess(self) rc=101", "cudaDeviceEnablePeerAccess(2,f=1) rc=1 ",
        "cudaDeviceDisablePeerAccess(2)   rc=705", "cudaMemcpyPeerAsync(bogus)       rc=400",
        "cudaMemcpyPeer(past end)         rc=1 ", "cudaMemcpy(bad kind)             rc=21",
        "cudaMemcpy2D(width>pitch)        rc=12", "cudaMemcpy3DPeer(bad dev)        rc=101",
        "cudaIpcOpenMemHandle(own)        rc=201", "cudaStreamBeginCapture(legacy)   rc=900",
        "cudaMemcpyPeerAsync(invalidated) rc=901", "cudaMemPoolSetAccess             rc=1 ",
        "cudaStreamEndCapture(s3)         rc=0 nodes_rc=0 nodes=2 ",
        "cudaStreamEndCapture_ptsz(s2)    rc=0 nodes_rc=0 nodes=1 ", "final cudaGetLastError=1 peek=0"})
    EXPECT_NE(bare.out.find(expected), std::string::npos) << expected << "\n" << bare.out;

  // The calls reached the shim: one trace, with every kind of record the script can produce.
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  const Trace& t = traces[0];
  std::set<int> copy_apis, peer_apis, ipc_apis;
  for (const auto& c : Copies(t)) copy_apis.insert(c.api);
  for (const auto& p : RecordsOf<p2ptrace_peer_record>(t)) peer_apis.insert(p.api);
  for (const auto& i : RecordsOf<p2ptrace_ipc_record>(t)) ipc_apis.insert(i.api);
  EXPECT_EQ(copy_apis, (std::set<int>{P2PTRACE_API_cudaMemcpyPeer, P2PTRACE_API_cudaMemcpyPeerAsync,
                                      P2PTRACE_API_cudaMemcpy, P2PTRACE_API_cudaMemcpyAsync, P2PTRACE_API_cudaMemcpy2D,
                                      P2PTRACE_API_cudaMemcpy2DAsync, P2PTRACE_API_cudaMemcpy3DPeer,
                                      P2PTRACE_API_cudaMemcpy3DPeerAsync}))
      << Describe(t);
  EXPECT_EQ(peer_apis, (std::set<int>{P2PTRACE_API_cudaDeviceCanAccessPeer, P2PTRACE_API_cudaDeviceGetP2PAttribute,
                                      P2PTRACE_API_cudaDeviceEnablePeerAccess, P2PTRACE_API_cudaDeviceDisablePeerAccess,
                                      P2PTRACE_API_cudaMemPoolSetAccess}));
  EXPECT_EQ(ipc_apis, (std::set<int>{P2PTRACE_API_cudaIpcGetMemHandle, P2PTRACE_API_cudaIpcOpenMemHandle,
                                     P2PTRACE_API_cudaIpcCloseMemHandle}));
  // The peer-access results the shim recorded are the runtime's own.
  std::multiset<int> enable_results;
  for (const auto& p : RecordsOf<p2ptrace_peer_record>(t))
    if (p.api == P2PTRACE_API_cudaDeviceEnablePeerAccess) enable_results.insert(p.result);
  EXPECT_EQ(enable_results, (std::multiset<int>{0, 704, 217, 101, 1}));
  EXPECT_EQ(t.header.state, static_cast<uint32_t>(P2PTRACE_STATE_EXITED));
}

// Every call of the script returned `code` and left it as the sticky error (a runtime with no
// usable driver answers everything that way).
void ExpectEveryCallReturned(const RunResult& run, int code) {
  const std::string rc = " rc=" + std::to_string(code), peek = " peek=" + std::to_string(code);
  int calls = 0;
  for (const std::string& line : Lines(run.out)) {
    if (line.rfind("final ", 0) == 0) {
      EXPECT_EQ(line, "final cudaGetLastError=" + std::to_string(code) + peek);
      continue;
    }
    ++calls;
    EXPECT_NE(line.find(rc), std::string::npos) << line;
    EXPECT_NE(line.find(peek), std::string::npos) << line;
  }
  EXPECT_GE(calls, 100);
}

TEST(Transparency, RealRuntimeWithoutDriverEveryCallReturns35) {
  RunResult bare;
  ExpectScriptTransparent(Clean(), "script-nodriver", &bare);  // the real libcudart: no LD_LIBRARY_PATH
  ExpectEveryCallReturned(bare, 35);
}

TEST(Transparency, RealRuntimeWithStubDriverEveryCallReturns34) {
  // cudart loads the driver as libcuda.so.1; the toolkit's stub directory has only libcuda.so (soname
  // libcuda.so.1), which cudart would not find there, so it is offered under that name from a
  // directory of ours.
  std::string stub_dir = TempDir() + "/stub-driver";
  std::filesystem::create_directories(stub_dir);
  std::string link = stub_dir + "/libcuda.so.1";
  std::filesystem::remove(link);
  ASSERT_EQ(symlink(CUDA_STUBS_DIR "/libcuda.so", link.c_str()), 0) << std::strerror(errno);
  Env env = Clean();
  env["LD_LIBRARY_PATH"] = stub_dir;
  RunResult bare;
  ExpectScriptTransparent(env, "script-stub", &bare);
  ExpectEveryCallReturned(bare, 34);
}

// ================================================================================================
// 2. Pair accounting of a known workload (shim_workload `pairs`, demo-8gpu).

TEST(Pairs, ExactPairsPathsBytesAndMeasuredBandwidth) {
  std::string dir = NewTraceDir("pairs");
  RunResult bare = RunProgram({SHIM_WORKLOAD, "pairs"}, Sim());
  RunResult r = RunProgram({SHIM_WORKLOAD, "pairs"}, Traced(Sim(), dir));
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  const Trace& t = traces[0];
  SCOPED_TRACE(Describe(t));

  // Exactly these cells are nonzero: three directional pairs with their path. The five same-device
  // copies are not peer traffic: the shim passes them straight on and counts nothing.
  auto cells = NonZeroCounters(t);
  std::set<std::tuple<int, int, int>> keys;
  for (const auto& [k, c] : cells) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::tuple<int, int, int>>{{0, 1, 0}, {0, 4, 1}, {2, 3, 1}}));
  struct Expect {
    int src, dst, path;
    uint64_t calls, bytes;
  };
  for (const Expect& e : {Expect{0, 1, 0, 4, 3 * MiB + 64 * MiB}, Expect{0, 4, 1, 3, 8 * MiB + 64 * MiB},
                          Expect{2, 3, 1, 1, 2 * MiB}}) {
    const p2ptrace_pair_counters& c = t.Counter(e.src, e.dst, e.path);
    EXPECT_EQ(c.calls, e.calls) << e.src << "->" << e.dst;
    EXPECT_EQ(c.bytes, e.bytes) << e.src << "->" << e.dst;
    EXPECT_EQ(c.errors, 0u) << e.src << "->" << e.dst;
  }

  // One COPY record per cross-device copy, with the path it took at that moment.
  std::map<std::pair<int, int>, std::vector<p2ptrace_copy_record>> by_pair;
  for (const auto& c : Copies(t)) by_pair[{c.src_device, c.dst_device}].push_back(c);
  ASSERT_EQ(by_pair.size(), 3u);
  const auto& p01 = by_pair[{0, 1}];
  const auto& p04 = by_pair[{0, 4}];
  const auto& p23 = by_pair[{2, 3}];
  ASSERT_EQ(p01.size(), 4u);
  ASSERT_EQ(p04.size(), 3u);
  ASSERT_EQ(p23.size(), 1u);
  for (const auto& c : p01) {
    EXPECT_EQ(c.transport, P2PTRACE_TRANSPORT_NVLINK);  // from the simulated NVML
    EXPECT_EQ(c.api, P2PTRACE_API_cudaMemcpyPeer);
  }
  for (const auto* v : {&p04, &p23})
    for (const auto& c : *v) EXPECT_EQ(c.transport, P2PTRACE_TRANSPORT_HOST_STAGED);
  std::multiset<int> apis04;
  for (const auto& c : p04) apis04.insert(c.api);
  EXPECT_EQ(apis04, (std::multiset<int>{P2PTRACE_API_cudaMemcpyPeerAsync, P2PTRACE_API_cudaMemcpyPeerAsync,
                                        P2PTRACE_API_cudaMemcpyPeer}));
  EXPECT_EQ(p23[0].api, P2PTRACE_API_cudaMemcpy);
  EXPECT_EQ(p23[0].bytes, 2 * MiB);
  for (const auto& [k, v] : by_pair)
    for (const auto& c : v) EXPECT_EQ(c.result, 0);
  EXPECT_EQ(t.header.direct_transport[0][1], P2PTRACE_TRANSPORT_NVLINK);
  EXPECT_TRUE(t.header.capture_flags & P2PTRACE_CAPTURE_CUDART_13);
  EXPECT_TRUE(t.header.capture_flags & P2PTRACE_CAPTURE_NVML_LINKS);
  EXPECT_EQ(t.header.device_count, 8);
  EXPECT_EQ(t.BusId(0), "0000:18:00.0");
  EXPECT_EQ(t.BusId(4), "0000:9a:00.0");
  EXPECT_EQ(t.header.state, static_cast<uint32_t>(P2PTRACE_STATE_EXITED));

  // Timing: the sampled subset exists (the 64 MiB copies are above any threshold) and reads the
  // topology's rates: NVLink NV6 = 6 x 20.5 = 123 GB/s, host-staged 20 GB/s.
  for (auto [src, dst, path] : {std::tuple{0, 1, 0}, std::tuple{0, 4, 1}}) {
    const p2ptrace_pair_counters& c = t.Counter(src, dst, path);
    EXPECT_GE(c.timed_calls, 1u) << src << "->" << dst;
    EXPECT_LE(c.timed_calls, c.calls);
    EXPECT_GE(c.timed_bytes, 64 * MiB) << src << "->" << dst;
  }
  std::set<uint32_t> timed_seqs;
  for (const auto& [k, v] : by_pair)
    for (const auto& c : v)
      if (c.bytes >= 64 * MiB) {
        EXPECT_TRUE(c.flags & P2PTRACE_COPY_TIMED) << k.first << "->" << k.second;
      }
  for (const auto& c : Copies(t))
    if (c.flags & P2PTRACE_COPY_TIMED) timed_seqs.insert(c.h.seq);
  std::set<uint32_t> timing_seqs;
  for (const auto& tr : RecordsOf<p2ptrace_timing_record>(t)) timing_seqs.insert(tr.h.seq);
  EXPECT_EQ(timing_seqs, timed_seqs) << "a TIMING record for each copy flagged timed";
  auto gbps = [&](int src, int dst, int path) {
    const p2ptrace_pair_counters& c = t.Counter(src, dst, path);
    return c.timed_ns ? static_cast<double>(c.timed_bytes) / static_cast<double>(c.timed_ns) : 0.0;
  };
  EXPECT_NEAR(gbps(0, 1, 0), 123.0, 123.0 * 0.02);
  EXPECT_NEAR(gbps(0, 4, 1), 20.0, 20.0 * 0.02);
  EXPECT_LT(gbps(0, 4, 1), gbps(0, 1, 0)) << "host-staged must measure slower than NVLink";
}

TEST(Pairs, HostDeviceCopiesAreNotPairsWhereverTheHostMemoryLies) {
  // cudaMemcpyDefault between pageable host memory and devices 1 and 4, the host page lying in the
  // same aligned 2 MiB block as device 4's allocation: no pair, nothing on the diagonal.
  std::string dir = NewTraceDir("hostcopies");
  RunResult bare = RunProgram({SHIM_WORKLOAD, "hostcopies"}, Sim());
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  RunResult r = RunProgram({SHIM_WORKLOAD, "hostcopies"}, Traced(Sim(), dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, bare.out);
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  const Trace& t = traces[0];
  EXPECT_TRUE(NonZeroCounters(t).empty()) << Describe(t);
  EXPECT_TRUE(Copies(t).empty()) << Describe(t);
}

// ================================================================================================
// 3. Interposition of versioned references.

TEST(Loader, VersionedReferencesAreInterposed) {
  // The workload binds its CUDA calls to the runtime's version node, as every CUDA program does: a
  // shim whose exports sat under any other node would never see them.
  RunResult w = RunProgram({"readelf", "--dyn-syms", "-W", SHIM_WORKLOAD});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  for (const char* ref : {"cudaMemcpyPeer@libcudart.so.13", "cudaMemcpyPeerAsync@libcudart.so.13",
                          "cudaDeviceEnablePeerAccess@libcudart.so.13", "cudaMalloc@libcudart.so.13"})
    EXPECT_NE(w.out.find(ref), std::string::npos) << ref << "\n" << w.out;
  RunResult s = RunProgram({"readelf", "--dyn-syms", "-W", SHIM_LIB});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  for (const char* def : {"cudaMemcpyPeer@@libcudart.so.13", "cudaMemcpyPeer@libcudart.so.12",
                          "cudaMemcpyPeer@libcudart.so.11.0"})
    EXPECT_NE(s.out.find(def), std::string::npos) << def;
  // …and the calls did reach it: a run leaves their copies in the trace.
  std::string dir = NewTraceDir("versioned");
  RunResult r = RunProgram({SHIM_WORKLOAD, "crash", "3", "_exit"}, Traced(Sim(), dir));
  EXPECT_EQ(r.exit_code, 7) << r.err;
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0].Counter(0, 1, 0).calls, 3u) << Describe(traces[0]);
}

// ================================================================================================
// 4. Crash safety: every copy made before the process died is in the trace.

struct CrashCase {
  const char* name;
  const char* how;
  int signal;          // the signal that ends the process, 0 for an exit
  int exit_code;
  uint32_t state;      // what the header says
  int fatal_signal;    // header.fatal_signal
};

class CrashTest : public ::testing::TestWithParam<CrashCase> {};

TEST_P(CrashTest, AllCopiesBeforeDeathAreInTheTrace) {
  const CrashCase& c = GetParam();
#ifdef P2PTRACE_SANITIZED
  // The sanitizer runtime owns fatal signals in these builds; the default build checks them.
  if (std::string(c.how) == "segv" || std::string(c.how) == "abort") GTEST_SKIP() << "sanitizer build";
#endif
  constexpr int kCopies = 100;
  std::string dir = NewTraceDir(std::string("crash-") + c.name);
  RunResult r = RunProgram({SHIM_WORKLOAD, "crash", std::to_string(kCopies), c.how}, Traced(Sim(), dir));
  EXPECT_EQ(r.out, "copied 100\n") << r.err;
  EXPECT_EQ(r.signal, c.signal) << r.err;
  if (c.signal == 0) {
    EXPECT_EQ(r.exit_code, c.exit_code);
  }
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  const Trace& t = traces[0];
  SCOPED_TRACE(Describe(t));
  EXPECT_EQ(t.Counter(0, 1, 0).calls, static_cast<uint64_t>(kCopies));
  EXPECT_EQ(t.Counter(0, 1, 0).bytes, kCopies * 4 * KiB);
  EXPECT_EQ(Copies(t).size(), static_cast<size_t>(kCopies));
  EXPECT_EQ(t.header.dropped_records, 0u);
  EXPECT_EQ(t.header.state, c.state);
  EXPECT_EQ(t.header.fatal_signal, c.fatal_signal);
}

INSTANTIATE_TEST_SUITE_P(
    Shim, CrashTest,
    ::testing::Values(CrashCase{"kill", "kill", SIGKILL, 0, P2PTRACE_STATE_RUNNING, 0},
                      CrashCase{"segv", "segv", SIGSEGV, 0, P2PTRACE_STATE_FATAL_SIGNAL, SIGSEGV},
                      CrashCase{"abort", "abort", SIGABRT, 0, P2PTRACE_STATE_FATAL_SIGNAL, SIGABRT},
                      CrashCase{"exit", "_exit", 0, 7, P2PTRACE_STATE_RUNNING, 0}),
    [](const ::testing::TestParamInfo<CrashCase>& p) { return std::string(p.param.name); });

// ================================================================================================
// 5. fork and fork+exec: each process its own file with its own counts.

// "parent=P child=C child_status=S"
std::pair<int, int> ParentAndChild(const std::string& out) {
  std::smatch m;
  std::regex re("parent=([0-9]+) child=([0-9]+) child_status=0");
  if (!std::regex_search(out, m, re)) return {-1, -1};
  return {std::stoi(m[1]), std::stoi(m[2])};
}

TEST(Fork, ChildWithoutExecGetsItsOwnTrace) {
#ifdef P2PTRACE_TSAN
  // TSan does not support a multi-threaded process forking without exec (its runtime can deadlock
  // in the child); the default and ASan builds run this test.
  GTEST_SKIP() << "ThreadSanitizer build";
#endif
  std::string dir = NewTraceDir("fork");
  RunResult r = RunProgram({SHIM_WORKLOAD, "fork"}, Traced(Sim(), dir));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto [parent, child] = ParentAndChild(r.out);
  ASSERT_GT(parent, 0) << r.out;
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 2u);
  std::map<int, const Trace*> by_pid;
  for (const Trace& t : traces) by_pid[t.header.pid] = &t;
  ASSERT_TRUE(by_pid.count(parent) && by_pid.count(child));
  const Trace& p = *by_pid[parent];
  const Trace& c = *by_pid[child];
  // The parent: 3 copies before the fork, 7 after; none of the child's.
  EXPECT_EQ(p.Counter(0, 1, 0).calls, 10u) << Describe(p);
  EXPECT_EQ(Copies(p).size(), 10u);
  EXPECT_FALSE(p.header.capture_flags & P2PTRACE_CAPTURE_FORK_CHILD);
  EXPECT_EQ(p.header.state, static_cast<uint32_t>(P2PTRACE_STATE_EXITED));
  // The child: its own 5, nothing inherited from the parent's file.
  EXPECT_EQ(c.Counter(0, 1, 0).calls, 5u) << Describe(c);
  EXPECT_EQ(Copies(c).size(), 5u);
  EXPECT_EQ(c.header.ppid, parent);
  EXPECT_TRUE(c.header.capture_flags & P2PTRACE_CAPTURE_FORK_CHILD);
  for (const Trace* t : {&p, &c}) {
    auto cells = NonZeroCounters(*t);
    EXPECT_EQ(cells.size(), 1u) << Describe(*t);
  }
}

TEST(Fork, ExecedChildTracesItsOwnWorkload) {
  std::string dir = NewTraceDir("forkexec");
  RunResult r = RunProgram({SHIM_WORKLOAD, "forkexec"}, Traced(Sim(), dir));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto [parent, child] = ParentAndChild(r.out);
  ASSERT_GT(parent, 0) << r.out;
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 2u);
  std::map<int, const Trace*> by_pid;
  for (const Trace& t : traces) by_pid[t.header.pid] = &t;
  ASSERT_TRUE(by_pid.count(parent) && by_pid.count(child));
  const Trace& p = *by_pid[parent];
  const Trace& c = *by_pid[child];
  EXPECT_EQ(p.Counter(0, 1, 0).calls, 2u) << Describe(p);
  EXPECT_EQ(NonZeroCounters(p).size(), 1u) << Describe(p);
  // The exec'd child ran `pairs`: its counts, exactly.
  EXPECT_EQ(c.Counter(0, 1, 0).calls, 4u) << Describe(c);
  EXPECT_EQ(c.Counter(0, 4, 1).calls, 3u) << Describe(c);
  EXPECT_EQ(c.Counter(2, 3, 1).calls, 1u) << Describe(c);
  EXPECT_EQ(c.Counter(0, 0, 0).calls, 0u) << Describe(c);  // same-device copies: not counted
  EXPECT_EQ(Copies(c).size(), 8u);
  EXPECT_EQ(c.header.ppid, parent);
  EXPECT_EQ(c.header.state, static_cast<uint32_t>(P2PTRACE_STATE_EXITED));
}

// ================================================================================================
// 6. Threads: exact counts, no record lost.

TEST(Threads, SixteenThreadsExactCounts) {
  // 16 x 100000 copies take under a second on the simulated node (with and without the shim).
  constexpr int kThreads = 16, kCopies = 100000;
  std::string dir = NewTraceDir("threads");
  Env env = Traced(Sim(), dir);
  env["P2PTRACE_MAX_MB"] = "160";  // 1.6M copy records of 48 bytes, plus the sampled timings
  RunResult r = RunProgram({SHIM_WORKLOAD, "threads", std::to_string(kThreads), std::to_string(kCopies)}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  const Trace& t = traces[0];
  SCOPED_TRACE(Describe(t));
  constexpr uint64_t kTotal = uint64_t{kThreads} * kCopies;
  EXPECT_EQ(t.header.dropped_records, 0u);
  EXPECT_EQ(t.bad_chunks, 0u);
  EXPECT_EQ(t.skipped_records, 0u);
  EXPECT_EQ(t.Counter(0, 1, 0).calls, kTotal);
  EXPECT_EQ(t.Counter(0, 1, 0).bytes, kTotal * 4 * KiB);
  EXPECT_EQ(t.Counter(0, 1, 0).errors, 0u);
  EXPECT_EQ(Copies(t).size(), kTotal);
  // Every record is whole; the timed ones carry a seq unique in the process (their TIMING record's
  // key), the others none (the fast path draws no seq); times run forward within each thread, to
  // within the ~2 us that a time converted from CPU ticks may be off.
  std::set<uint32_t> seqs;
  uint64_t timed = 0, bad = 0, backwards = 0;
  std::map<uint32_t, uint64_t> last_time;
  uint64_t max_back = 0;
  for (const auto& rec : t.records) {
    const auto* c = std::get_if<p2ptrace_copy_record>(&rec.body);
    if (c == nullptr) continue;
    bad += c->bytes != 4 * KiB || c->result != 0 || c->h.time_ns == 0;
    if (c->flags & P2PTRACE_COPY_TIMED) {
      ++timed;
      seqs.insert(c->h.seq);
    } else {
      bad += c->h.seq != 0;
    }
    if (c->h.time_ns < last_time[rec.tid]) max_back = std::max(max_back, last_time[rec.tid] - c->h.time_ns);
    backwards += c->h.time_ns + 2000 < last_time[rec.tid];
    last_time[rec.tid] = c->h.time_ns;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(backwards, 0u) << "largest step back " << max_back << " ns";
  EXPECT_GT(timed, 0u);
  EXPECT_EQ(seqs.size(), timed);
  EXPECT_EQ(seqs.count(0), 0u);
}

TEST(Threads, SizeCapCountsEveryDroppedRecord) {
  // 1 MiB holds about 19000 records: the rest are dropped, counted, and the counters stay exact.
  constexpr int kCopies = 30000;
  std::string dir = NewTraceDir("capped");
  Env env = Traced(Sim(), dir);
  env["P2PTRACE_MAX_MB"] = "1";
  RunResult r = RunProgram({SHIM_WORKLOAD, "threads", "1", std::to_string(kCopies)}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  const Trace& t = traces[0];
  SCOPED_TRACE(Describe(t));
  EXPECT_EQ(t.header.file_size, 1 * MiB);
  const p2ptrace_pair_counters& c = t.Counter(0, 1, 0);
  EXPECT_EQ(c.calls, static_cast<uint64_t>(kCopies));
  EXPECT_GT(t.header.dropped_records, 0u);
  // Every record appended is either in the file or counted as dropped: one COPY per copy, one
  // TIMING per timed copy.
  uint64_t in_file = Copies(t).size() + RecordsOf<p2ptrace_timing_record>(t).size();
  EXPECT_EQ(in_file + t.header.dropped_records, kCopies + c.timed_calls);
}

// ================================================================================================
// 7. Bad settings: one warning line, the job's output and exit code unchanged.

void ExpectOneWarningOtherwiseUnchanged(const Env& traced, const std::string& must_mention) {
  RunResult bare = RunProgram({SHIM_WORKLOAD, "script"}, Sim());
  RunResult r = RunProgram({SHIM_WORKLOAD, "script"}, traced);
  EXPECT_EQ(r.signal, bare.signal);
  EXPECT_EQ(r.exit_code, bare.exit_code);
  EXPECT_EQ(r.out, bare.out);
  SplitErr e = SplitWarnings(r.err);
  ASSERT_EQ(e.warnings.size(), 1u) << r.err;
  EXPECT_NE(e.warnings[0].find(must_mention), std::string::npos) << e.warnings[0];
  EXPECT_EQ(e.rest, bare.err);
}

TEST(BadSettings, UnwritableTraceDirectoryWarnsOnceAndRunsUntraced) {
  // Tests may run as root, so "unwritable" is a directory below a regular file.
  std::string file = TempDir() + "/not-a-directory";
  WriteFile(file, "x");
  std::string dir = file + "/traces";
  ExpectOneWarningOtherwiseUnchanged(Traced(Sim(), dir), dir);
  struct stat st {};
  EXPECT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST(BadSettings, MalformedSampleWarnsOnceAndStillTraces) {
  std::string dir = NewTraceDir("bad-sample");
  Env env = Traced(Sim(), dir);
  env["P2PTRACE_SAMPLE"] = "abc";
  ExpectOneWarningOtherwiseUnchanged(env, "P2PTRACE_SAMPLE=abc");
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_GT(traces[0].Counter(0, 1, 0).calls, 0u) << Describe(traces[0]);
  // The default policy is in force.
  EXPECT_EQ(traces[0].header.sample_first, 8u);
  EXPECT_EQ(traces[0].header.sample_every, 64u);
  EXPECT_EQ(traces[0].header.sample_min_bytes, 16 * MiB);
}

TEST(BadSettings, MalformedMaxMbWarnsOnceAndStillTraces) {
  std::string dir = NewTraceDir("bad-max-mb");
  Env env = Traced(Sim(), dir);
  env["P2PTRACE_MAX_MB"] = "-3";
  ExpectOneWarningOtherwiseUnchanged(env, "P2PTRACE_MAX_MB=-3");
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_GT(traces[0].Counter(0, 1, 0).calls, 0u) << Describe(traces[0]);
  EXPECT_EQ(traces[0].header.file_size, 64 * MiB);  // the default cap
}

// ================================================================================================
// 8. The file: mode 0600, named <host>.r<rank>.p<pid>.p2ptrace.

void ExpectFileNamed(const Env& env, const std::string& rank_part, int rank) {
  std::string dir = env.at("P2PTRACE_DIR").value();
  RunResult r = RunProgram({SHIM_WORKLOAD, "pairs"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("pid=([0-9]+)"))) << r.out;
  std::string pid = m[1];
  std::vector<std::string> files = TraceFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(std::filesystem::path(files[0]).filename().string(),
            Hostname() + ".r" + rank_part + ".p" + pid + ".p2ptrace");
  struct stat st {};
  ASSERT_EQ(lstat(files[0].c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0].header.rank, rank);
  EXPECT_EQ(traces[0].header.pid, std::stoi(pid));
  EXPECT_EQ(traces[0].Host(), Hostname());
}

TEST(TraceFile, Mode0600AndNamedByHostRankPid) {
  ExpectFileNamed(Traced(Sim(), NewTraceDir("name-norank")), "x", -1);
}

TEST(TraceFile, RankFromEnvironment) {
  Env env = Traced(Sim(), NewTraceDir("name-rank3"));
  env["RANK"] = "3";
  ExpectFileNamed(env, "3", 3);
}

// ================================================================================================
// Loader cases: a Python ctypes (RTLD_LOCAL) load; cudart 12 and 13 in one process.

TEST(Loader, PythonCtypesLocalLoadIsTraced) {
#ifdef P2PTRACE_SANITIZED
  GTEST_SKIP() << "python3 is not instrumented: it cannot dlopen a sanitizer-built library";
#endif
  // ctypes.CDLL loads with RTLD_LOCAL: the library's libcudart is not in the global scope, so
  // dlsym(RTLD_NEXT) cannot find it and the shim's dl_iterate_phdr fallback must.
  const std::string code =
      "import ctypes, sys\n"
      "lib = ctypes.CDLL(sys.argv[1])\n"
      "lib.shim_copy_lib_run.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t]\n"
      "sys.exit(lib.shim_copy_lib_run(0, 1, 1 << 20))\n";
  ASSERT_EQ(std::string(PYTHON3).find("NOTFOUND"), std::string::npos) << "python3 was not found at configure time";
  std::string dir = NewTraceDir("ctypes");
  RunResult bare = RunProgram({PYTHON3, "-c", code, SHIM_COPY_LIB13}, Sim());
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  RunResult r = RunProgram({PYTHON3, "-c", code, SHIM_COPY_LIB13}, Traced(Sim(), dir));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, bare.out);
  EXPECT_EQ(r.err, bare.err);
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  const Trace& t = traces[0];
  EXPECT_EQ(t.Counter(0, 1, 0).calls, 1u) << Describe(t);
  EXPECT_EQ(t.Counter(0, 1, 0).bytes, 1 * MiB);
  std::vector<p2ptrace_copy_record> copies = Copies(t);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].transport, P2PTRACE_TRANSPORT_NVLINK);
  EXPECT_TRUE(t.header.capture_flags & P2PTRACE_CAPTURE_CUDART_13);
}

TEST(Loader, Cudart12And13InOneProcessEachRoutedToItsOwnRuntime) {
  std::string dir = NewTraceDir("mixed");
  RunResult bare = RunProgram({SHIM_MIXED_RUNTIMES}, Sim());
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  EXPECT_EQ(bare.out,
            "main: runtime 13000 copy 0->1: 0\nshim_copy_lib: runtime 12080 copied 1048576 bytes 2->3\n"
            "main: library returned 0\n");
  RunResult r = RunProgram({SHIM_MIXED_RUNTIMES}, Traced(Sim(), dir));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, bare.out);  // includes the library's check that its allocation is its runtime's
  EXPECT_EQ(r.err, bare.err);
  std::vector<Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  const Trace& t = traces[0];
  SCOPED_TRACE(Describe(t));
  EXPECT_EQ(t.Counter(0, 1, 0).calls, 1u);
  EXPECT_EQ(t.Counter(0, 1, 0).bytes, 2 * MiB);
  EXPECT_EQ(t.Counter(2, 3, 0).calls, 1u);
  EXPECT_EQ(t.Counter(2, 3, 0).bytes, 1 * MiB);
  EXPECT_EQ(Copies(t).size(), 2u);
  EXPECT_TRUE(t.header.capture_flags & P2PTRACE_CAPTURE_CUDART_12);
  EXPECT_TRUE(t.header.capture_flags & P2PTRACE_CAPTURE_CUDART_13);
}

}  // namespace
