// Calls through dlsym (ctypes, vLLM's PyNcclCommunicator): programs that reach libcudart and
// libnccl only through dlopen + dlsym, 2 ranks under `p2psim launch`, are traced exactly under
// `p2ptrace run` (which sets LD_AUDIT to libp2ptrace_audit.so), print exactly what they print bare,
// and stay unseen with LD_PRELOAD alone (the audit module is what sees them). With LD_AUDIT alone
// (no shim) nothing changes.
#include <elf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/trace_reader.h"
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

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
const std::string kDemo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";
const std::string kShim = std::string(P2PTRACE_LIB_DIR) + "/libp2ptrace.so";
const std::string kAudit = std::string(P2PTRACE_LIB_DIR) + "/libp2ptrace_audit.so";
const std::string kNccl = std::string(P2PTRACE_SIM_LIB_DIR) + "/libnccl.so.2";

// How a run is set up: bare, under `p2ptrace run`, or with one of the two libraries by hand.
enum class Mode { kBare, kRun, kPreloadOnly, kAuditOnly };

Env JobEnv(const std::string& dir) {
  fs::create_directories(dir + "/rendezvous");
  Env env{{"P2PSIM_NCCL_TIMEOUT", "30"}, {"P2PSIM_NCCL_DIR", dir + "/rendezvous"}, {"NCCL_DEBUG", std::nullopt},
          {"NCCL_DEBUG_FILE", std::nullopt}, {"NCCL_DEBUG_SUBSYS", std::nullopt}, {"P2PTRACE_NCCL_LOG", std::nullopt},
          {"P2PTRACE_SAMPLE", std::nullopt}, {"P2PTRACE_DIR", std::nullopt}, {"CUDA_VISIBLE_DEVICES", std::nullopt},
          {"LD_PRELOAD", std::nullopt}, {"LD_AUDIT", std::nullopt}, {"P2PTRACE_LIB", std::nullopt},
          {"P2PTRACE_WARN", "off"}, {"NO_COLOR", "1"}};
  return env;
}

// The program (argv, the id directory appended) as 2 ranks of node0, in `dir` (traces in dir/trace).
RunResult Job(const std::string& dir, const std::vector<std::string>& program, Mode mode) {
  fs::remove_all(dir);
  fs::create_directories(dir + "/id");
  Env env = JobEnv(dir);
  std::vector<std::string> cmd;
  if (mode == Mode::kRun) cmd = {P2PTRACE_CLI, "run", "--dir", dir + "/trace", "--"};
  if (mode == Mode::kPreloadOnly) {
    env["LD_PRELOAD"] = kShim;
    env["P2PTRACE_DIR"] = dir + "/trace";
  }
  if (mode == Mode::kAuditOnly) env["LD_AUDIT"] = kAudit;
  for (const std::string& a : {std::string(P2PSIM), std::string("launch"), std::string("--topology"), kDemo,
                               std::string("--hosts"), std::string("node0:2"), std::string("--")})
    cmd.push_back(a);
  cmd.insert(cmd.end(), program.begin(), program.end());
  cmd.push_back(dir + "/id");
  return RunProgram(cmd, env);
}

// What each rank printed, in its order ("[rank N] " lines; the ranks interleave differently per run).
std::map<std::string, std::string> ByRank(const std::string& out) {
  std::map<std::string, std::string> ranks;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[rank ", 0) != 0) continue;
    size_t close = line.find(']');
    ranks[line.substr(0, close + 1)] += line.substr(close + 1) + "\n";
  }
  return ranks;
}

template <typename R>
std::vector<R> Records(const p2ptrace::Trace& t) {
  std::vector<R> out;
  for (const auto& r : t.records)
    if (const auto* c = std::get_if<R>(&r.body)) out.push_back(*c);
  return out;
}

json ReportJson(const std::string& dir) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

// What both programs do per rank r (GPU r of 2): ncclCommInitRank (2 ranks), one ncclAllReduce of
// 1 MiB, one cudaIpcGetMemHandle; `peer_copy`: one 256 KiB cudaMemcpyPeer to the other GPU, host
// staged (no peer access enabled); `replays`: the allreduce captured into a graph (through dlsym'd
// cudaStreamBeginCapture … cudaGraphLaunch) and launched that many times.
void ExpectTracedExactly(const std::string& dir, bool peer_copy, int replays) {
  std::vector<p2ptrace::Trace> traces = ReadTraceDir(dir + "/trace");
  ASSERT_EQ(traces.size(), 2u) << "one trace per rank (the launcher makes no CUDA call)";
  for (int r = 0; r < 2; ++r) {
    const p2ptrace::Trace& t = traces[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(t.header.rank, r);
    EXPECT_EQ(t.header.minor, P2PTRACE_FORMAT_MINOR);
    uint32_t want = P2PTRACE_CAPTURE_CUDART_13 | P2PTRACE_CAPTURE_CUDART_DLSYM | P2PTRACE_CAPTURE_NCCL_DLSYM;
    EXPECT_EQ(t.header.capture_flags & want, want) << std::hex << t.header.capture_flags;
    auto ops = Records<p2ptrace_nccl_op_record>(t);
    ASSERT_EQ(ops.size(), replays ? 2u : 1u);  // the eager one, and the captured one (recorded once)
    for (const auto& op : ops) {
      EXPECT_EQ(op.api, P2PTRACE_NCCL_AllReduce);
      EXPECT_EQ(op.bytes, 1 * MiB);
      EXPECT_EQ(op.result, 0);
    }
    if (replays) {
      EXPECT_TRUE(ops[1].flags & P2PTRACE_NCCL_CAPTURED);
    }
    int launches = 0;
    for (const auto& g : Records<p2ptrace_graph_record>(t)) launches += g.event == P2PTRACE_GRAPH_LAUNCH && g.result == 0;
    EXPECT_EQ(launches, replays);
    auto comms = Records<p2ptrace_nccl_comm_record>(t);
    ASSERT_EQ(comms.size(), 2u);  // the init, and the destroy
    EXPECT_EQ(comms[0].api, P2PTRACE_NCCL_CommInitRank);
    EXPECT_EQ(comms[0].rank, r);
    EXPECT_EQ(comms[0].nranks, 2);
    EXPECT_EQ(comms[0].cuda_device, r);
    EXPECT_EQ(comms[0].id_hash, Records<p2ptrace_nccl_comm_record>(traces[1 - r])[0].id_hash);
    auto ipc = Records<p2ptrace_ipc_record>(t);
    ASSERT_EQ(ipc.size(), 1u);
    EXPECT_EQ(ipc[0].api, P2PTRACE_API_cudaIpcGetMemHandle);
    EXPECT_EQ(ipc[0].result, 0);
    EXPECT_EQ(ipc[0].owner_device, r);
    std::vector<std::string> cells = CounterCells(t);
    if (peer_copy) {
      ASSERT_EQ(cells.size(), 1u);
      EXPECT_EQ(cells[0], std::to_string(r) + "->" + std::to_string(1 - r) + "/1 1 " + std::to_string(256 * KiB) + " 0");
    } else {
      EXPECT_TRUE(cells.empty());
    }
  }
  json rep = ReportJson(dir + "/trace");
  ASSERT_FALSE(rep.is_discarded());
  EXPECT_TRUE(rep["capture"]["nccl_via_dlsym"].get<bool>());
  EXPECT_TRUE(rep["capture"]["cudart_via_dlsym"].get<bool>());
  ASSERT_EQ(rep["ranks"].size(), 2u);
  for (const json& rank : rep["ranks"]) {
    std::string mode = rank["capture_mode"].get<std::string>();
    EXPECT_NE(mode.find("NCCL via dlsym (LD_AUDIT)"), std::string::npos) << mode;
    EXPECT_NE(mode.find("CUDA runtime via dlsym (LD_AUDIT)"), std::string::npos) << mode;
  }
  ASSERT_EQ(rep["nccl_ops"].size(), 1u);
  EXPECT_EQ(rep["nccl_ops"][0]["op"], "ncclAllReduce");
  EXPECT_EQ(rep["nccl_ops"][0]["calls"], 2 * (1 + replays));
  EXPECT_EQ(rep["nccl_ops"][0]["bytes"], 2 * (1 + replays) * MiB);
  EXPECT_EQ(rep["nccl_ops"][0]["graph_calls"], 2 * replays);
  EXPECT_EQ(rep["nccl_ops"][0]["errors"], 0);
  uint64_t staged_calls = 0, staged_bytes = 0;
  for (const json& p : rep["pairs"])
    if (p["transport"] == "host_staged") {
      staged_calls += p["calls"].get<uint64_t>();
      staged_bytes += p["bytes"].get<uint64_t>();
    }
  EXPECT_EQ(staged_calls, peer_copy ? 2u : 0u);
  EXPECT_EQ(staged_bytes, peer_copy ? 512 * KiB : 0u);
}

constexpr int kPyGraphReplays = 3;  // dlsym_pynccl.py's GRAPH_REPLAYS

void CheckProgram(const std::string& name, const std::vector<std::string>& program, bool peer_copy, int replays) {
  std::string dir = TempDir() + "/" + name;
  RunResult bare = Job(dir + "/bare", program, Mode::kBare);
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  std::map<std::string, std::string> want = ByRank(bare.out);
  ASSERT_EQ(want.size(), 2u) << bare.out;
  EXPECT_NE(want["[rank 0]"].find("ncclAllReduce 0\n"), std::string::npos) << bare.out;

  // p2ptrace run: every call seen, the program's output unchanged.
  RunResult traced = Job(dir + "/run", program, Mode::kRun);
  ASSERT_EQ(traced.exit_code, 0) << traced.out << traced.err;
  EXPECT_EQ(ByRank(traced.out), want);
  EXPECT_EQ(traced.err.find("p2ptrace: audit"), std::string::npos) << traced.err;
  ExpectTracedExactly(dir + "/run", peer_copy, replays);

  // LD_PRELOAD alone: the calls never reach the shim (no trace at all), the output is the same.
  RunResult preload = Job(dir + "/preload", program, Mode::kPreloadOnly);
  ASSERT_EQ(preload.exit_code, 0) << preload.err;
  EXPECT_EQ(ByRank(preload.out), want);
  EXPECT_TRUE(ReadTraceDir(dir + "/preload/trace").empty());

  // LD_AUDIT alone (no shim): the module changes nothing and says nothing.
  RunResult audit_only = Job(dir + "/audit", program, Mode::kAuditOnly);
  ASSERT_EQ(audit_only.exit_code, 0) << audit_only.err;
  EXPECT_EQ(ByRank(audit_only.out), want);
  EXPECT_EQ(audit_only.err.find("p2ptrace"), std::string::npos) << audit_only.err;
}

TEST(Dlsym, CProgramWithLocalNcclAndCudartByNameIsTracedExactly) {
  // libnccl.so.2 by path, RTLD_LOCAL; libcudart.so.13 by name: neither is in the global scope, so
  // the wrappers find them with dl_iterate_phdr (shim/base/bind.cc).
  CheckProgram("c", {DLSYM_WORKLOAD, kNccl}, true, 0);
}

TEST(Dlsym, PythonCtypesNcclLikeVllmIsTracedExactly) {
#ifdef P2PTRACE_SANITIZED
  GTEST_SKIP() << "python3 is not instrumented: it cannot load a sanitizer-built shim";
#endif
  ASSERT_EQ(std::string(PYTHON3).find("NOTFOUND"), std::string::npos) << "python3 was not found at configure time";
  CheckProgram("py", {PYTHON3, DLSYM_PYNCCL, "libnccl.so.2"}, false, kPyGraphReplays);
}

TEST(Dlsym, PythonCtypesUnversionedCudartLinkIsTraced) {
#ifdef P2PTRACE_SANITIZED
  GTEST_SKIP() << "python3 is not instrumented: it cannot load a sanitizer-built shim";
#endif
  // ctypes.CDLL(".../libcudart.so"), a link to libcudart.so.13: the audit module and the wrappers'
  // fallback both go by the file the link names.
  std::string links = TempDir() + "/unversioned";
  fs::create_directories(links);
  fs::remove(links + "/libcudart.so");
  fs::create_symlink(std::string(P2PTRACE_SIM_LIB_DIR) + "/libcudart.so.13", links + "/libcudart.so");
  CheckProgram("py-unversioned", {PYTHON3, DLSYM_PYNCCL, "libnccl.so.2", links + "/libcudart.so"}, false,
               kPyGraphReplays);
}

// Real NCCL releases (the cache of scripts/fetch-nccl-releases.py, and the toolkit's), opened
// RTLD_LOCAL by path, without a GPU: ncclGetVersion and ncclGetUniqueId through dlsym reach the
// shim. 2.13 has no pnccl names: the shim then finds the real functions by dlsym(handle, "ncclX")
// itself, which the audit module must leave alone (else the wrapper would call itself).
class RealNccl : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> RealNcclLibraries() {
  std::vector<std::string> libs;
  const char* cache = std::getenv("P2PTRACE_CACHE");
  const char* home = std::getenv("HOME");
  std::string root = cache && *cache ? cache : std::string(home ? home : "") + "/.cache/p2ptrace";
  std::istringstream in(NCCL_RELEASES);
  for (std::string v; std::getline(in, v, ',');)
    if (!v.empty()) libs.push_back(root + "/nccl/" + v + "/libnccl.so.2");
  libs.push_back(NCCL_TOOLKIT_LIBRARY);
  return libs;
}

TEST_P(RealNccl, UniqueIdThroughDlsymIsTraced) {
  const std::string lib = GetParam();
  // As nccl_releases_test: a release missing is a failure to see, never a silent skip.
  if (const char* skip = std::getenv("P2PTRACE_SKIP_NCCL_RELEASES"); skip && std::string(skip) == "1")
    GTEST_SKIP() << "P2PTRACE_SKIP_NCCL_RELEASES=1";
  ASSERT_TRUE(fs::exists(lib)) << lib << " is missing: run scripts/fetch-nccl-releases.py (scripts/test.sh does), "
                               << "or set P2PTRACE_SKIP_NCCL_RELEASES=1 to skip the real releases";
  std::string dir = TempDir() + "/real-" + std::to_string(std::hash<std::string>()(lib));
  fs::remove_all(dir);
  Env env = JobEnv(dir);
  env["CUDA_VISIBLE_DEVICES"] = "";
  RunResult bare = RunProgram({DLSYM_WORKLOAD, lib}, env);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_NE(bare.out.find("ncclGetUniqueId 0\n"), std::string::npos) << bare.out;
  RunResult traced = RunProgram({P2PTRACE_CLI, "run", "--dir", dir + "/trace", "--", DLSYM_WORKLOAD, lib}, env);
  EXPECT_EQ(traced.out.substr(0, bare.out.size()), bare.out) << traced.err;
  std::vector<p2ptrace::Trace> traces = ReadTraceDir(dir + "/trace");
  ASSERT_EQ(traces.size(), 1u) << traced.out << traced.err;
  EXPECT_TRUE(traces[0].header.capture_flags & P2PTRACE_CAPTURE_NCCL_DLSYM);
  EXPECT_FALSE(traces[0].header.capture_flags & P2PTRACE_CAPTURE_CUDART_DLSYM);
  EXPECT_GT(traces[0].header.nccl_version, 0);  // the wrapper's first call asked the real ncclGetVersion
}

INSTANTIATE_TEST_SUITE_P(Releases, RealNccl, ::testing::ValuesIn(RealNcclLibraries()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = fs::path(param.param).parent_path().filename().string();
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return "lib_" + name + "_" + std::to_string(param.index);
                         });

// Under LD_AUDIT glibc lays out static TLS before the program's libraries load; a preloaded
// library's initial-exec TLS then comes from a surplus of about 1.5 KiB (glibc 2.36): the shim
// must stay far below it, or the job cannot start (DESIGN.md §4).
TEST(Dlsym, ShimStaticTlsFitsTheAuditSurplus) {
  std::ifstream f(kShim, std::ios::binary);
  Elf64_Ehdr eh{};
  ASSERT_TRUE(f.read(reinterpret_cast<char*>(&eh), sizeof eh));
  uint64_t tls = 0;
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    f.seekg(static_cast<std::streamoff>(eh.e_phoff + static_cast<uint64_t>(i) * eh.e_phentsize));
    ASSERT_TRUE(f.read(reinterpret_cast<char*>(&ph), sizeof ph));
    if (ph.p_type == PT_TLS) tls = ph.p_memsz;
  }
  EXPECT_LE(tls, 256u);
}

// p2ptrace run puts the audit module before the user's own auditors, once.
TEST(Dlsym, RunPrependsTheAuditModuleToTheUsersLdAudit) {
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", TempDir() + "/env", "--", "sh", "-c", "echo \"$LD_AUDIT\""},
                           {{"LD_AUDIT", kAudit + ":" + std::string(P2PTRACE_LIB_DIR) + "/no-such-auditor.so"},
                            {"LD_PRELOAD", std::nullopt}, {"P2PTRACE_LIB", std::nullopt}});
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), kAudit + ":" + std::string(P2PTRACE_LIB_DIR) + "/no-such-auditor.so");
  RunResult mine = RunProgram({P2PTRACE_CLI, "run", "--dir", TempDir() + "/env2", "--", "sh", "-c", "echo \"$LD_AUDIT\""},
                              {{"LD_AUDIT", std::nullopt}, {"LD_PRELOAD", std::nullopt}, {"P2PTRACE_LIB", std::nullopt}});
  EXPECT_EQ(mine.out.substr(0, mine.out.find('\n')), kAudit);
}

}  // namespace
