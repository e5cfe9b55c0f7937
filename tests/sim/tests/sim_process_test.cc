// The simulated node seen from outside: real programs run in child processes with the sim's
// libraries swapped in through LD_LIBRARY_PATH, and the libraries' ELF identity checked with readelf.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using p2ptrace::testing::WriteFile;

const std::string kTopo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";

std::map<std::string, std::optional<std::string>> SimEnv(const std::string& topo = kTopo) {
  return {{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR}, {"P2PSIM_TOPOLOGY", topo}, {"P2PSIM_HOST", std::nullopt},
          {"CUDA_VISIBLE_DEVICES", std::nullopt}};
}

int CountLines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// A minimal valid host; tests break one thing at a time.
std::string HostJson(const std::string& extra_fields, const std::string& gpus, const std::string& links = "[]") {
  return R"({"version": 1, "hosts": [{"name": "n0", "cpus": [{"id": "cpu0"}], )" + extra_fields +
         R"("gpus": )" + gpus + R"(, "nvlinks": )" + links + "}]}";
}
const std::string kTwoGpus =
    R"([{"index": 0, "bus_id": "0000:01:00.0"}, {"index": 1, "bus_id": "0000:02:00.0"}])";

struct BadTopology {
  const char* name;
  std::string content;  // empty: the file does not exist
  std::string expected;  // what the one stderr line must say (after the file name)
};

class BadTopologyTest : public ::testing::TestWithParam<BadTopology> {};

TEST_P(BadTopologyTest, EveryCallFailsWithOneClearLine) {
  const BadTopology& c = GetParam();
  std::string path = TempDir() + "/" + c.name + ".json";
  if (!c.content.empty()) WriteFile(path, c.content);
  RunResult r = RunProgram({SIM_PROBE}, SimEnv(path));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string call;
  int code = -1, calls = 0;
  while (lines >> call >> code) {
    EXPECT_EQ(code, 3) << call << " should return cudaErrorInitializationError";
    ++calls;
  }
  EXPECT_EQ(calls, 8);
  EXPECT_EQ(CountLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(path + ": " + c.expected), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Sim, BadTopologyTest,
    ::testing::Values(
        BadTopology{"missing", "", "cannot open the topology file"},
        BadTopology{"bad_json", R"({"version": 1, "hosts": [)", "not valid JSON"},
        BadTopology{"unknown_gpu_in_link", HostJson("", kTwoGpus, R"([{"a": 0, "b": 9, "links": 4}])"),
                    "hosts[0].nvlinks[0].b: no GPU 9 on host n0"},
        BadTopology{"duplicate_bus_id",
                    HostJson("", R"([{"index": 0, "bus_id": "0000:01:00.0"}, {"index": 1, "bus_id": "0000:01:00.0"}])"),
                    "hosts[0].gpus[1].bus_id: duplicate bus id 0000:01:00.0 (also hosts[0].gpus[0])"},
        BadTopology{"unknown_value", HostJson(R"("virtualization": "kvm", )", kTwoGpus),
                    "hosts[0].virtualization: unknown value \"kvm\" (expected none|passthrough|vgpu)"},
        BadTopology{"unknown_parent", HostJson("", R"([{"index": 0, "bus_id": "0000:01:00.0", "parent": "sw9"}])"),
                    "hosts[0].gpus[0].parent: unknown CPU or switch \"sw9\""},
        BadTopology{"wrong_type", HostJson("", R"([{"index": "zero", "bus_id": "0000:01:00.0"}])"),
                    "hosts[0].gpus[0].index: must be an integer"},
        BadTopology{"newer_version", R"({"version": 2, "hosts": []})", "version: unsupported version 2"}),
    [](const ::testing::TestParamInfo<BadTopology>& p) { return std::string(p.param.name); });

TEST(Sim, TopologyVariableUnsetOrHostUnknown) {
  auto env = SimEnv();
  env["P2PSIM_TOPOLOGY"] = std::nullopt;
  RunResult r = RunProgram({SIM_PROBE}, env);
  EXPECT_NE(r.out.find("cudaGetDeviceCount 3\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("P2PSIM_TOPOLOGY is not set"), std::string::npos) << r.err;
  env = SimEnv();
  env["P2PSIM_HOST"] = "nosuch";
  r = RunProgram({SIM_PROBE}, env);
  EXPECT_NE(r.out.find("cudaMalloc 3\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("P2PSIM_HOST=nosuch names no host"), std::string::npos) << r.err;
  EXPECT_EQ(CountLines(r.err), 1);
}

TEST(Sim, GoodTopologyAnswersAndUnmodelledCallsSaySoOnce) {
  RunResult r = RunProgram({SIM_PROBE, "--unsupported"}, SimEnv());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cudaGetDeviceCount 0\ncudaSetDevice 0\ncudaGetDevice 0\ncudaMalloc 0\n"
                       "cudaDeviceCanAccessPeer 0\ncudaDeviceEnablePeerAccess 0\ncudaStreamCreate 0\n"
                       "cudaGetLastError 0\ncudaMemcpyToSymbol 801\ncudaMemcpyToSymbol 801\n"
                       "cudaGetErrorName cudaErrorNotSupported\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.err, "p2psim: cudaMemcpyToSymbol is not simulated; it returns cudaErrorNotSupported (801)\n");
}

TEST(Sim, RealRuntimeWithoutDriverReturns35) {
  // Baseline the shim must pass through unchanged: the real libcudart here has no driver.
  RunResult r = RunProgram({SIM_PROBE}, {{"LD_LIBRARY_PATH", std::nullopt}});
  EXPECT_NE(r.out.find("cudaGetDeviceCount 35\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cudaMalloc 35\n"), std::string::npos) << r.out;
}

TEST(Sim, IpcSharesBytesBetweenProcesses) {
  RunResult r = RunProgram({SIM_IPC, "1"}, SimEnv());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("open in the same process: 201\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("child read the parent's bytes\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("child pointer type 2 device 0\n"), std::string::npos) << r.out;  // memory of GPU 0
  EXPECT_NE(r.out.find("parent sees the child's bytes\n"), std::string::npos) << r.out;
  // GPU 4 sits on the other socket: it cannot map GPU 0's memory.
  r = RunProgram({SIM_IPC, "4"}, SimEnv());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("FAIL cudaIpcOpenMemHandle: 217 (cudaErrorPeerAccessUnsupported)"), std::string::npos) << r.out;
}

TEST(Sim, NvccBuiltProgramLaunchesKernels) {
  RunResult r = RunProgram({KERNEL_LAUNCH}, SimEnv());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "malloc 0 launch 0 sync 0\n");
  EXPECT_EQ(r.err, "");
}

TEST(Sim, Cudart12FlavourUsesCuda12Abi) {
  RunResult r = RunProgram({CUDART12_PROGRAM}, SimEnv());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "runtime 12080 props 0 name NVIDIA H100 80GB HBM3 bus 2a warp 32 clock 1980000\n");
}

TEST(PeerCopy, RealRuntimeWithoutDriverReportsError35Cleanly) {
  RunResult r = RunProgram({PEER_COPY}, {{"LD_LIBRARY_PATH", std::nullopt}});
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "peer_copy: CUDA error 35 (cudaErrorInsufficientDriver): CUDA driver version is insufficient for "
            "CUDA runtime version at cudaGetDeviceCount(&count)\n");
}

TEST(PeerCopy, MeasuresTheSimulatedNode) {
  // 2 MiB: the simulated clock gives the same GB/s at any size, and under ThreadSanitizer every
  // byte the sim copies is instrumented (16 MiB took ~30 s there, the subprocess limit).
  RunResult r = RunProgram({PEER_COPY, "--size", "2M", "--iters", "2", "--json"}, SimEnv());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["devices"].size(), 8u);
  EXPECT_EQ(j["devices"][5]["pci_bus_id"], "0000:AB:00.0");
  EXPECT_EQ(j["can_access"][0][3], 1);
  EXPECT_EQ(j["can_access"][3][4], 0);
  // Off: every pair staged through the host; on: NV6 inside an island, still staged across sockets.
  EXPECT_NEAR(j["gbps_p2p_off"][0][1].get<double>(), 20, 0.01);
  EXPECT_NEAR(j["gbps_p2p_on"][0][1].get<double>(), 123, 0.01);
  EXPECT_NEAR(j["gbps_p2p_on"][7][4].get<double>(), 123, 0.01);
  EXPECT_NEAR(j["gbps_p2p_on"][0][4].get<double>(), 20, 0.01);
  RunResult bad = RunProgram({PEER_COPY, "--size", "zero"}, SimEnv());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(CountLines(bad.err), 1) << bad.err;
}

std::set<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::set<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.insert(l);
  return out;
}

struct FakeLib {
  const char* file;
  const char* node;  // "" when the real library has no version node
  const char* syms;
};

class FakeLibTest : public ::testing::TestWithParam<FakeLib> {};

TEST_P(FakeLibTest, SonameVersionNodeAndExportsMatchTheRealLibrary) {
  const FakeLib& lib = GetParam();
  std::string path = std::string(P2PTRACE_SIM_LIB_DIR) + "/" + lib.file;
  RunResult d = RunProgram({"readelf", "-d", path});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find(std::string("Library soname: [") + lib.file + "]"), std::string::npos) << d.out;
  RunResult v = RunProgram({"readelf", "-V", path});
  if (*lib.node) {
    EXPECT_NE(v.out.find(std::string("Flags: BASE  Index: 1  Cnt: 1  Name: ") + lib.node), std::string::npos) << v.out;
    EXPECT_NE(v.out.find(std::string("Flags: none  Index: 2  Cnt: 1  Name: ") + lib.node), std::string::npos) << v.out;
  } else {
    EXPECT_EQ(v.out.find("Version definition"), std::string::npos) << v.out;
  }
  RunResult syms = RunProgram({"readelf", "--dyn-syms", "-W", path});
  std::set<std::string> exported;
  std::istringstream in(syms.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string num, value, size, type, bind, vis, ndx, name;
    if (!(f >> num >> value >> size >> type >> bind >> vis >> ndx >> name) || ndx == "UND" || type != "FUNC") continue;
    std::string bare = name.substr(0, name.find('@'));
    exported.insert(bare);
    if (*lib.node) {
      EXPECT_EQ(name, bare + "@@" + lib.node);
    }
  }
  std::set<std::string> expected = ReadLines(std::string(P2PTRACE_SYMBOLS_DIR) + "/" + lib.syms);
  // The fake cudart's additions: the hooks the fake NCCL advances (or hangs) stream clocks with.
  if (std::string(lib.file).rfind("libcudart", 0) == 0) {
    expected.insert("p2psim_stream_advance");
    expected.insert("p2psim_stream_hang");
    expected.insert("p2psim_capture_replay");
  }
  // The fake driver's additions: the shared simulated state the fake runtimes reach it for, and the
  // question which kernels it runs.
  if (std::string(lib.file) == "libcuda.so.1") {
    expected.insert("p2psim_driver");
    expected.insert("p2psim_kernel_runs");
  }
  EXPECT_EQ(exported, expected);
}

INSTANTIATE_TEST_SUITE_P(Sim, FakeLibTest,
                         ::testing::Values(FakeLib{"libcuda.so.1", "", "cuda.syms"},
                                           FakeLib{"libcudart.so.13", "libcudart.so.13", "cudart13.syms"},
                                           FakeLib{"libcudart.so.12", "libcudart.so.12", "cudart12.syms"},
                                           FakeLib{"libnvidia-ml.so.1", "", "nvml.syms"}),
                         [](const ::testing::TestParamInfo<FakeLib>& p) {
                           std::string n = p.param.file;
                           std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

}  // namespace
