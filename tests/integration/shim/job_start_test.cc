// Job-start warnings a person reads: real NCCL jobs (examples/nccl_ring,
// one process per rank under `p2psim launch`) and CUDA programs on simulated nodes under the shim.
// At most one line per cause, the pairs named compactly by their physical GPUs, only the GPUs the
// job uses, NVLink pairs never warned for their PCIe path, the NCCL that ran named, CUDA-only
// programs judged by the driver's rules.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace {

using p2ptrace::testing::Env;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

const std::string kDemo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";
const std::string kNvswitch = std::string(P2PTRACE_TOPOLOGY_DIR) + "/nvswitch-8gpu.json";

Env BaseEnv(const std::string& dir) {
  return {{"P2PSIM_NCCL_TIMEOUT", "30"}, {"P2PSIM_NCCL_DIR", dir + "/rendezvous"}, {"NCCL_DEBUG", std::nullopt},
          {"NCCL_DEBUG_FILE", std::nullopt}, {"NCCL_P2P_LEVEL", std::nullopt}, {"NCCL_P2P_DISABLE", std::nullopt},
          {"P2PTRACE_NCCL_TAP", std::nullopt}, {"P2PTRACE_NCCL_TAP_FILE", std::nullopt},
          {"P2PTRACE_NCCL_FORWARD", std::nullopt}, {"P2PTRACE_WARN", std::nullopt},
          {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"LD_PRELOAD", P2PTRACE_SHIM}, {"P2PTRACE_DIR", dir + "/trace"},
          {"P2PTRACE_NVML_TIMEOUT_MS", "20000"}, {"P2PTRACE_RANK_WAIT_MS", "20000"}};
}

// nccl_ring with one rank per GPU of `hosts` (e.g. "node0:8"), the shim preloaded into each rank.
RunResult Ring(const std::string& name, const std::string& topology, const std::string& hosts, Env extra = {}) {
  std::string dir = TempDir() + "/" + name;
  std::filesystem::create_directories(dir + "/rendezvous");
  std::filesystem::create_directories(dir + "/id");
  Env env = BaseEnv(dir);
  for (const auto& [k, v] : extra) env[k] = v;
  return RunProgram({P2PSIM, "launch", "--topology", topology, "--hosts", hosts, "--", NCCL_RING, dir + "/id", "4096"},
                    env);
}

// The shim's lines on stderr (launch prefixes each rank's output).
std::vector<std::string> ShimLines(const std::string& err) {
  std::vector<std::string> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (size_t at = line.find("p2ptrace: "); at != std::string::npos) out.push_back(line.substr(at));
  return out;
}

std::vector<std::string> Warnings(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (const std::string& l : lines)
    if (l.rfind("p2ptrace: warning: ", 0) == 0) out.push_back(l);
  return out;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

// The cause id a line names ("[topology-beyond-p2p-level]").
std::string CauseOf(const std::string& line) {
  size_t open = line.find(" ["), close = line.find("] ", open);
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 2, close - open - 2);
}

TEST(JobStart, DemoNodeOneLinePerCauseWithPairsCostFixAndWhereTheRestIs) {
  RunResult r = Ring("demo", kDemo, "node0:8");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = ShimLines(r.err);
  std::vector<std::string> warnings = Warnings(lines);
  ASSERT_FALSE(warnings.empty()) << r.err;
  std::set<std::string> causes;
  for (const std::string& w : warnings) EXPECT_TRUE(causes.insert(CauseOf(w)).second) << "two lines for one cause:\n" << Joined(warnings);
  ASSERT_EQ(warnings.size(), 1u) << Joined(warnings);
  const std::string& w = warnings.front();
  EXPECT_EQ(w.rfind("p2ptrace: warning: node0 GPU0-3 <-> GPU4-7, 32 pairs: shm instead of pcie_p2p "
                    "[topology-beyond-p2p-level] path SYS is beyond the P2P level PXB",
                    0),
            0u)
      << w;
  EXPECT_NE(w.find("less bandwidth"), std::string::npos) << w;
  EXPECT_NE(w.find("; fix: "), std::string::npos) << w;
  // The NCCL that ran (the simulated libnccl.so.2 is 2.28.9), never the newest rules' version.
  EXPECT_NE(w.find("NCCL 2.28.9's default"), std::string::npos) << w;
  EXPECT_EQ(r.err.find("2.30.7"), std::string::npos) << r.err;
  std::string details = "p2ptrace: every pair, cause and its evidence: p2ptrace report " + TempDir() + "/demo/trace";
  EXPECT_NE(std::find(lines.begin(), lines.end(), details), lines.end()) << Joined(lines);
  // Once per node: one process printed.
  size_t printed = 0;
  for (const std::string& l : lines) printed += l == details;
  EXPECT_EQ(printed, 1u);
}

TEST(JobStart, RanksOnGpus0To3AreNotWarnedAboutGpus4To7) {
  RunResult r = Ring("four", kDemo, "node0:4");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = ShimLines(r.err);
  EXPECT_TRUE(Warnings(lines).empty()) << Joined(lines);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "p2ptrace: all 6 GPU pairs on node0 can use NVLink/P2P"), lines.end())
      << Joined(lines);
}

TEST(JobStart, VisibleDevicesNamePhysicalGpusAndOnlyThose) {
  // Ranks 0-3 on CUDA devices 0-3, which are the node's GPUs 0, 1, 4 and 5.
  RunResult r = Ring("visible", kDemo, "node0:4", {{"CUDA_VISIBLE_DEVICES", "0,1,4,5"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> warnings = Warnings(ShimLines(r.err));
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_EQ(warnings[0].rfind("p2ptrace: warning: node0 GPU0,1 <-> GPU4,5, 8 pairs: shm instead of pcie_p2p "
                              "[topology-beyond-p2p-level]",
                              0),
            0u)
      << warnings[0];
  for (const char* other : {"GPU2", "GPU3", "GPU6", "GPU7"}) EXPECT_EQ(warnings[0].find(other), std::string::npos) << other;
}

// One process driving 4 GPUs, its communicators made inside ncclGroupStart/End as nccl-tests does:
// NCCL says their devices only at the group's end, so the check runs there, over all four.
TEST(JobStart, CommunicatorsMadeInAGroupAreCheckedOverAllTheirGpus) {
  std::string dir = TempDir() + "/group-init";
  std::filesystem::create_directories(dir + "/rendezvous");
  std::filesystem::create_directories(dir + "/id");
  Env env = BaseEnv(dir);
  env["CUDA_VISIBLE_DEVICES"] = "0,1,4,5";
  RunResult r = RunProgram({P2PSIM, "launch", "--topology", kDemo, "--hosts", "node0:1", "--", NCCL_RING, "-g", "4",
                            "-i", "group", dir + "/id", "4096"},
                           env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> warnings = Warnings(ShimLines(r.err));
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_EQ(warnings[0].rfind("p2ptrace: warning: node0 GPU0,1 <-> GPU4,5, 8 pairs: shm instead of pcie_p2p "
                              "[topology-beyond-p2p-level]",
                              0),
            0u)
      << warnings[0];
}

TEST(JobStart, AllNvlinkAcrossTwoSocketsIsNotWarned) {
  RunResult r = Ring("nvswitch", kNvswitch, "nvs0:8");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = ShimLines(r.err);
  EXPECT_TRUE(Warnings(lines).empty()) << Joined(lines);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "p2ptrace: all 28 GPU pairs on nvs0 can use NVLink/P2P"), lines.end())
      << Joined(lines);
}

TEST(JobStart, DoctorNamesNvlinkOnEveryPairOfTheAllNvlinkNode) {
  std::string root = TempDir() + "/nvswitch-root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kNvswitch, "nvs0", root}).exit_code, 0);
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor"}, {{"P2PTRACE_SYSROOT", root}, {"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR},
                                                     {"P2PSIM_TOPOLOGY", kNvswitch}, {"P2PSIM_HOST", "nvs0"}, {"NO_COLOR", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("FALLBACK"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("topology-beyond-p2p-level"), std::string::npos) << r.out;
  size_t nv18 = 0;
  for (size_t p = r.out.find("  NV18  nvlink"); p != std::string::npos; p = r.out.find("  NV18  nvlink", p + 1)) ++nv18;
  EXPECT_EQ(nv18, 28u) << r.out;
}

// A CUDA program that loads libnccl.so.2 (as PyTorch does) but never calls NCCL: the driver's rules.
TEST(JobStart, CudaOnlyProcessWithNcclLoadedIsJudgedByTheDriversRules) {
  std::string dir = TempDir() + "/cuda-only";
  std::string root = dir + "-root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kDemo, "node0", root}).exit_code, 0);
  Env env = BaseEnv(dir);
  env["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  env["P2PSIM_TOPOLOGY"] = kDemo;
  env["P2PSIM_HOST"] = "node0";
  env["P2PTRACE_SYSROOT"] = root;
  RunResult r = RunProgram({PREFLIGHT_WORKLOAD, "nccl-loaded-cuda-query"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> warnings = Warnings(ShimLines(r.err));
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_EQ(warnings[0].rfind("p2ptrace: warning: node0 GPU0-3 <-> GPU4-7, 32 pairs: host_staged instead of pcie_p2p "
                              "[nvml-p2p-status] e.g. NVML P2P status TNS",
                              0),
            0u)
      << warnings[0];
  for (const char* nccl : {"shm instead", "NCCL_P2P_LEVEL", "topology-beyond-p2p-level", "NCCL 2."})
    EXPECT_EQ(r.err.find(nccl), std::string::npos) << nccl << "\n" << r.err;
  // The same program seeing four GPUs: only their pairs, named by the node's (physical) numbers.
  env["CUDA_VISIBLE_DEVICES"] = "0,1,4,5";
  env["P2PTRACE_DIR"] = dir + "/trace-visible";
  r = RunProgram({PREFLIGHT_WORKLOAD, "nccl-loaded-cuda-query"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  warnings = Warnings(ShimLines(r.err));
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_EQ(warnings[0].rfind("p2ptrace: warning: node0 GPU0,1 <-> GPU4,5, 8 pairs: host_staged instead of pcie_p2p", 0), 0u)
      << warnings[0];
}

}  // namespace

namespace {

// A process's tapped NCCL log and its trace name the same host (the simulated
// host node0 here, which the shim reads from the sysroot; the machine's own name is another).
TEST(JobStart, TapLogAndTraceOfAProcessNameTheSameHost) {
  RunResult r = Ring("same-host", kDemo, "node0:2");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::map<std::string, std::string> trace_host, log_host;  // pid → host
  for (const auto& e : std::filesystem::directory_iterator(TempDir() + "/same-host/trace")) {
    std::string name = e.path().filename().string();
    if (name.size() > 9 && name.ends_with(".p2ptrace")) {  // <host>.r<rank>.p<pid>.p2ptrace
      size_t r_at = name.rfind(".r"), p_at = name.rfind(".p", name.size() - 10);
      trace_host[name.substr(p_at + 2, name.size() - 9 - p_at - 2)] = name.substr(0, r_at);
    } else if (name.rfind("nccl.", 0) == 0 && name.ends_with(".log")) {  // nccl.<host>.<pid>.log
      std::string rest = name.substr(5, name.size() - 9);
      size_t dot = rest.rfind('.');
      log_host[rest.substr(dot + 1)] = rest.substr(0, dot);
    }
  }
  ASSERT_EQ(trace_host.size(), 2u);
  EXPECT_EQ(log_host, trace_host);
  for (const auto& [pid, host] : trace_host) EXPECT_EQ(host, "node0") << pid;
}

}  // namespace
