// The simulated NVML, loaded the way NCCL and PyTorch load the real one: dlopen("libnvidia-ml.so.1").
// Runs on the demo topology with CUDA_VISIBLE_DEVICES=5,2 set, which NVML must ignore. Link health on
// other topologies runs in a child: this program again, given steps to take (NvmlSteps.DISABLED_Run), since a
// process reads its topology once.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace {

using nvmlDevice_t = void*;
struct PciInfo { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; };

// nvml.h's nvmlFieldValue_t, written out here so that the sim's layout is checked against it.
struct FieldValue {
  unsigned fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType, nvmlReturn;
  union { double dVal; unsigned uiVal; unsigned long ulVal; unsigned long long ullVal; long long sllVal; } value;
};
static_assert(offsetof(FieldValue, fieldId) == 0 && offsetof(FieldValue, scopeId) == 4);
static_assert(offsetof(FieldValue, timestamp) == 8 && offsetof(FieldValue, latencyUsec) == 16);
static_assert(offsetof(FieldValue, valueType) == 24 && offsetof(FieldValue, nvmlReturn) == 28);
static_assert(offsetof(FieldValue, value) == 32 && sizeof(FieldValue) == 40);

enum { kDlReplay = 0, kDlRecovery = 1, kDlCrcFlit = 2, kDlCrcData = 3, kDlEccData = 4 };
enum { kFiPcieReplay = 94, kFiSpeed = 164, kFiRcvErrors = 208, kFiEffectiveErrors = 219 };

class Nvml : public ::testing::Test {
 protected:
  static void* lib_;
  template <typename Fn>
  static Fn Get(const char* name) {
    void* f = dlsym(lib_, name);
    EXPECT_NE(f, nullptr) << name;
    return reinterpret_cast<Fn>(f);
  }
  static void SetUpTestSuite() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
  }
  nvmlDevice_t Dev(unsigned i) {
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(Get<int (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2")(i, &d), 0);
    return d;
  }
};
void* Nvml::lib_ = nullptr;

TEST_F(Nvml, AnswersFromTheTopology) {
  auto count = Get<int (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  unsigned n = 0;
  EXPECT_EQ(count(&n), 1);  // NVML_ERROR_UNINITIALIZED before init
  ASSERT_EQ(Get<int (*)()>("nvmlInit_v2")(), 0);
  ASSERT_EQ(count(&n), 0);
  EXPECT_EQ(n, 8u);  // every GPU of the host, whatever CUDA_VISIBLE_DEVICES says

  PciInfo pci{};
  ASSERT_EQ(Get<int (*)(nvmlDevice_t, PciInfo*)>("nvmlDeviceGetPciInfo_v3")(Dev(5), &pci), 0);
  EXPECT_STREQ(pci.busId, "00000000:AB:00.0");
  EXPECT_STREQ(pci.busIdLegacy, "0000:AB:00.0");
  nvmlDevice_t by_bus = nullptr;
  ASSERT_EQ(Get<int (*)(const char*, nvmlDevice_t*)>("nvmlDeviceGetHandleByPciBusId_v2")("0000:ab:00.0", &by_bus), 0);
  EXPECT_EQ(by_bus, Dev(5));

  auto p2p = Get<int (*)(nvmlDevice_t, nvmlDevice_t, int, int*)>("nvmlDeviceGetP2PStatus");
  int status = -1;
  ASSERT_EQ(p2p(Dev(0), Dev(1), 0, &status), 0);
  EXPECT_EQ(status, 0);  // OK
  ASSERT_EQ(p2p(Dev(0), Dev(1), 2, &status), 0);
  EXPECT_EQ(status, 0);  // NVLINK OK
  ASSERT_EQ(p2p(Dev(0), Dev(4), 0, &status), 0);
  EXPECT_EQ(status, 3);  // IOH topology not supported: across sockets
  EXPECT_EQ(p2p(Dev(0), Dev(4), 9, &status), 2);

  auto ancestor = Get<int (*)(nvmlDevice_t, nvmlDevice_t, int*)>("nvmlDeviceGetTopologyCommonAncestor");
  int level = -1;
  ASSERT_EQ(ancestor(Dev(0), Dev(1), &level), 0);
  EXPECT_EQ(level, 10);  // SINGLE: same switch (NVLink does not change the PCIe answer)
  ASSERT_EQ(ancestor(Dev(0), Dev(2), &level), 0);
  EXPECT_EQ(level, 30);  // HOSTBRIDGE
  ASSERT_EQ(ancestor(Dev(3), Dev(4), &level), 0);
  EXPECT_EQ(level, 50);  // SYSTEM

  auto link_state = Get<int (*)(nvmlDevice_t, unsigned, int*)>("nvmlDeviceGetNvLinkState");
  int active = -1;
  ASSERT_EQ(link_state(Dev(0), 17, &active), 0);  // 3 peers x 6 links
  EXPECT_EQ(active, 1);
  EXPECT_EQ(link_state(Dev(0), 18, &active), 3);  // no such link: not supported
  unsigned mig = 9, pending = 9, gen = 0;
  ASSERT_EQ(Get<int (*)(nvmlDevice_t, unsigned*, unsigned*)>("nvmlDeviceGetMigMode")(Dev(0), &mig, &pending), 0);
  EXPECT_EQ(mig, 0u);
  ASSERT_EQ(Get<int (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetMaxPcieLinkGeneration")(Dev(0), &gen), 0);
  EXPECT_EQ(gen, 5u);
  char name[96];
  ASSERT_EQ(Get<int (*)(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetName")(Dev(2), name, sizeof name), 0);
  EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(Get<int (*)(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetName")(Dev(2), name, 4), 7);
  // Not modelled: not supported.
  EXPECT_EQ(Get<int (*)()>("nvmlDeviceGetPowerUsage")(), 3);
  EXPECT_EQ(Get<int (*)()>("nvmlShutdown")(), 0);
}

TEST_F(Nvml, LinkHealthOfAnNvLink4Gpu) {
  ASSERT_EQ(Get<int (*)()>("nvmlInit_v2")(), 0);
  auto legacy = Get<int (*)(nvmlDevice_t, unsigned, int, unsigned long long*)>("nvmlDeviceGetNvLinkErrorCounter");
  unsigned long long v = 99;
  for (int c : {kDlReplay, kDlRecovery, kDlCrcFlit, kDlCrcData}) {
    v = 99;
    EXPECT_EQ(legacy(Dev(0), 17, c, &v), 0) << c;  // H100: the legacy counters, 0 on a healthy node
    EXPECT_EQ(v, 0u) << c;
  }
  EXPECT_EQ(legacy(Dev(0), 0, kDlEccData, &v), 3);
  EXPECT_EQ(legacy(Dev(0), 0, 5, &v), 2);
  EXPECT_EQ(legacy(Dev(0), 18, kDlReplay, &v), 3);  // beyond GPU 0's 18 links
  EXPECT_EQ(legacy(Dev(0), 36, kDlReplay, &v), 2);  // beyond any GPU's
  unsigned version = 0;
  ASSERT_EQ(Get<int (*)(nvmlDevice_t, unsigned, unsigned*)>("nvmlDeviceGetNvLinkVersion")(Dev(3), 5, &version), 0);
  EXPECT_EQ(version, 6u);  // NVML_NVLINK_VERSION_4_0
  unsigned replays = 99;
  ASSERT_EQ(Get<int (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetPcieReplayCounter")(Dev(1), &replays), 0);
  EXPECT_EQ(replays, 0u);

  FieldValue f[6] = {};
  f[0].fieldId = kFiSpeed, f[0].scopeId = 4;
  f[1].fieldId = kFiRcvErrors, f[1].scopeId = 0;    // an NVLink 5 field
  f[2].fieldId = kFiEffectiveErrors, f[2].scopeId = 0;
  f[3].fieldId = kFiPcieReplay;
  f[4].fieldId = 1, f[4].scopeId = 0;                // NVML_FI_DEV_ECC_CURRENT: not modelled
  f[5].fieldId = kFiSpeed, f[5].scopeId = 40;
  f[3].value.ullVal = 77;
  ASSERT_EQ(Get<int (*)(nvmlDevice_t, int, FieldValue*)>("nvmlDeviceGetFieldValues")(Dev(0), 6, f), 0);
  EXPECT_EQ(f[0].nvmlReturn, 0);
  EXPECT_EQ(f[0].valueType, 1);  // unsigned int
  EXPECT_EQ(f[0].value.uiVal, 26562u);
  EXPECT_GT(f[0].timestamp, 0);
  EXPECT_EQ(f[1].nvmlReturn, 3);
  EXPECT_EQ(f[2].nvmlReturn, 3);
  EXPECT_EQ(f[3].nvmlReturn, 0);
  EXPECT_EQ(f[3].valueType, 3);  // unsigned long long
  EXPECT_EQ(f[3].value.ullVal, 0u);
  EXPECT_EQ(f[4].nvmlReturn, 3);
  EXPECT_EQ(f[5].nvmlReturn, 2);
  EXPECT_EQ(f[5].fieldId, unsigned(kFiSpeed));  // the caller's ids stay
  EXPECT_EQ(f[5].scopeId, 40u);
  EXPECT_EQ(Get<int (*)()>("nvmlShutdown")(), 0);
}

// ---------------------------------------------------------------------------------------------
// Other topologies, in a child

// The child: each step of P2PSIM_NVML_STEPS (";" between steps) printed as "@@ <step> => <answer>";
// a step may carry a label ("after=legacy 2 3 0") to tell it from the same question asked earlier.
//   legacy G L C     rc value         nvmlDeviceGetNvLinkErrorCounter
//   field G F S      rc type value    nvmlDeviceGetFieldValues, one field
//   version G L      rc version
//   replay G         rc value         nvmlDeviceGetPcieReplayCounter
//   width G | gen G  rc value         current PCIe link
//   copy A B N       rc               N bytes from GPU A to GPU B with peer access on (cudaMemcpyPeer)
//   staged A B N     rc               the same without peer access (host-staged)
//   h2d G N          rc               N bytes from host memory to GPU G
//   ms A B N         milliseconds     a peer copy's simulated time (events around it)
// Disabled: not a test of its own, but what the tests below run in their child.
TEST(NvmlSteps, DISABLED_Run) {
  const char* steps = std::getenv("P2PSIM_NVML_STEPS");
  ASSERT_NE(steps, nullptr) << "the child of the NvmlLinks tests: P2PSIM_NVML_STEPS names its steps";
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  void* rt = dlopen("libcudart.so.13", RTLD_NOW);
  ASSERT_NE(nvml, nullptr);
  ASSERT_NE(rt, nullptr);
  auto fn = [](void* lib, const char* name) {
    void* f = dlsym(lib, name);
    if (f == nullptr) ADD_FAILURE() << name;
    return f;
  };
  ASSERT_EQ(reinterpret_cast<int (*)()>(fn(nvml, "nvmlInit_v2"))(), 0);
  auto dev = [&](unsigned i) {
    nvmlDevice_t d = nullptr;
    reinterpret_cast<int (*)(unsigned, nvmlDevice_t*)>(fn(nvml, "nvmlDeviceGetHandleByIndex_v2"))(i, &d);
    return d;
  };
  auto set_device = reinterpret_cast<int (*)(int)>(fn(rt, "cudaSetDevice"));
  auto malloc_dev = reinterpret_cast<int (*)(void**, size_t)>(fn(rt, "cudaMalloc"));
  auto enable_peer = reinterpret_cast<int (*)(int, unsigned)>(fn(rt, "cudaDeviceEnablePeerAccess"));
  auto copy_peer = reinterpret_cast<int (*)(void*, int, const void*, int, size_t)>(fn(rt, "cudaMemcpyPeer"));
  auto copy_peer_async = reinterpret_cast<int (*)(void*, int, const void*, int, size_t, void*)>(fn(rt, "cudaMemcpyPeerAsync"));
  auto copy = reinterpret_cast<int (*)(void*, const void*, size_t, int)>(fn(rt, "cudaMemcpy"));
  auto event_create = reinterpret_cast<int (*)(void**)>(fn(rt, "cudaEventCreate"));
  auto event_record = reinterpret_cast<int (*)(void*, void*)>(fn(rt, "cudaEventRecord"));
  auto event_sync = reinterpret_cast<int (*)(void*)>(fn(rt, "cudaEventSynchronize"));
  auto elapsed = reinterpret_cast<int (*)(float*, void*, void*)>(fn(rt, "cudaEventElapsedTime"));
  auto buffer = [&](int gpu, size_t n) {
    void* p = nullptr;
    set_device(gpu);
    malloc_dev(&p, n);
    return p;
  };
  std::stringstream all(steps);
  for (std::string step; std::getline(all, step, ';');) {
    std::istringstream in(step.substr(step.find('=') + 1));  // npos + 1: the whole step
    std::string op;
    in >> op;
    unsigned long long a = 0, b = 0, c = 0;
    in >> a >> b >> c;
    std::string answer;
    if (op == "legacy") {
      unsigned long long v = 0;
      int rc = reinterpret_cast<int (*)(nvmlDevice_t, unsigned, int, unsigned long long*)>(
          fn(nvml, "nvmlDeviceGetNvLinkErrorCounter"))(dev(unsigned(a)), unsigned(b), int(c), &v);
      answer = std::to_string(rc) + " " + std::to_string(v);
    } else if (op == "field") {
      FieldValue f{};
      f.fieldId = unsigned(b), f.scopeId = unsigned(c);
      int rc = reinterpret_cast<int (*)(nvmlDevice_t, int, FieldValue*)>(fn(nvml, "nvmlDeviceGetFieldValues"))(dev(unsigned(a)), 1, &f);
      answer = std::to_string(rc) + " " + std::to_string(f.nvmlReturn) + " " + std::to_string(f.valueType) + " " +
               std::to_string(f.valueType == 1 ? f.value.uiVal : f.value.ullVal);
    } else if (op == "version") {
      unsigned v = 0;
      int rc = reinterpret_cast<int (*)(nvmlDevice_t, unsigned, unsigned*)>(fn(nvml, "nvmlDeviceGetNvLinkVersion"))(dev(unsigned(a)), unsigned(b), &v);
      answer = std::to_string(rc) + " " + std::to_string(v);
    } else if (op == "replay" || op == "width" || op == "gen") {
      const char* name = op == "replay" ? "nvmlDeviceGetPcieReplayCounter"
                         : op == "width" ? "nvmlDeviceGetCurrPcieLinkWidth" : "nvmlDeviceGetCurrPcieLinkGeneration";
      unsigned v = 0;
      int rc = reinterpret_cast<int (*)(nvmlDevice_t, unsigned*)>(fn(nvml, name))(dev(unsigned(a)), &v);
      answer = std::to_string(rc) + " " + std::to_string(v);
    } else if (op == "copy" || op == "staged" || op == "ms") {
      void* src = buffer(int(a), c);
      void* dst = buffer(int(b), c);
      if (op != "staged") {
        set_device(int(a)), enable_peer(int(b), 0);
        set_device(int(b)), enable_peer(int(a), 0);
      }
      set_device(int(a));
      if (op == "ms") {
        void *start = nullptr, *stop = nullptr;
        event_create(&start), event_create(&stop);
        event_record(start, nullptr);
        int rc = copy_peer_async(dst, int(b), src, int(a), c, nullptr);
        event_record(stop, nullptr);
        event_sync(stop);
        float ms = -1;
        elapsed(&ms, start, stop);
        answer = rc != 0 ? "error " + std::to_string(rc) : std::to_string(ms);
      } else {
        answer = std::to_string(copy_peer(dst, int(b), src, int(a), c));
      }
    } else if (op == "h2d") {
      void* dst = buffer(int(a), b);
      std::vector<char> host(b);
      answer = std::to_string(copy(dst, host.data(), b, 1));
    } else {
      answer = "unknown step";
    }
    std::printf("@@ %s => %s\n", step.c_str(), answer.c_str());
  }
  std::fflush(stdout);
}

// Runs the steps in a child on `topology` (written to its own directory, where the sim keeps the
// link counters of its faults): step → answer.
class NvmlLinks : public ::testing::Test {
 protected:
  std::string WriteTopology(const std::string& name, const std::string& json) {
    std::string dir = p2ptrace::testing::TempDir() + "/" + name;
    std::filesystem::create_directories(dir);
    std::string path = dir + "/topo.json";
    p2ptrace::testing::WriteFile(path, json);
    return path;
  }
  std::map<std::string, std::string> Run(const std::string& topology, const std::vector<std::string>& steps) {
    std::string joined;
    for (const std::string& s : steps) joined += (joined.empty() ? "" : ";") + s;
    p2ptrace::testing::RunResult r = p2ptrace::testing::RunProgram(
        {"/proc/self/exe", "--gtest_also_run_disabled_tests", "--gtest_filter=NvmlSteps.DISABLED_Run"},
        {{"P2PSIM_NVML_STEPS", joined}, {"P2PSIM_TOPOLOGY", topology}, {"P2PSIM_HOST", std::nullopt},
         {"CUDA_VISIBLE_DEVICES", std::nullopt}});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::map<std::string, std::string> answers;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      size_t arrow = line.find(" => ");
      if (line.rfind("@@ ", 0) == 0 && arrow != std::string::npos) answers[line.substr(3, arrow - 3)] = line.substr(arrow + 4);
    }
    for (const std::string& s : steps) EXPECT_TRUE(answers.count(s)) << "no answer to " << s << "\n" << r.out << r.err;
    return answers;
  }
};

// Two B200s (NVLink 5) with 4 links, 3 of them up, and an H100 beside them on PCIe.
std::string Nv5Topology(const std::string& host_extra, const std::string& b200_extra) {
  return R"({"version": 1, "hosts": [{"name": "n5", )" + host_extra + R"( "gpus": [
    {"index": 0, "name": "NVIDIA B200", "bus_id": "0000:10:00.0")" + b200_extra + R"(},
    {"index": 1, "name": "NVIDIA B200", "bus_id": "0000:11:00.0"},
    {"index": 2, "bus_id": "0000:12:00.0"}],
    "nvlinks": [{"a": 0, "b": 1, "links": 4, "active": 3}]}]})";
}

TEST_F(NvmlLinks, Nvlink5ServesFieldsNotTheLegacyCounters) {
  std::string topo = WriteTopology("nv5", Nv5Topology("", R"(, "counters": {"nvlink": [{"link": 1, "symbol_errors": 12}]})"));
  auto a = Run(topo, {"legacy 0 0 0", "legacy 0 0 3", "legacy 2 0 0", "version 0 3", "version 2 0", "field 0 219 0",
                      "field 0 221 1", "field 0 208 3", "field 0 164 0", "field 0 164 3", "field 0 219 4",
                      "field 0 219 36", "field 2 219 0", "replay 0"});
  EXPECT_EQ(a["legacy 0 0 0"], "3 0");  // NVLink 5: every legacy counter not supported
  EXPECT_EQ(a["legacy 0 0 3"], "3 0");
  EXPECT_EQ(a["legacy 2 0 0"], "3 0");  // the H100 has no NVLink
  EXPECT_EQ(a["version 0 3"], "0 7");   // NVML_NVLINK_VERSION_5_0, on a link that is down too
  EXPECT_EQ(a["version 2 0"], "3 0");
  EXPECT_EQ(a["field 0 219 0"], "0 0 3 0");  // effective errors, unsigned long long
  EXPECT_EQ(a["field 0 221 1"], "0 0 3 12");  // the file's base value
  EXPECT_EQ(a["field 0 208 3"], "0 0 3 0");   // a down link still counts
  EXPECT_EQ(a["field 0 164 0"], "0 0 1 53125");
  EXPECT_EQ(a["field 0 164 3"], "0 0 1 0");   // down: no speed
  EXPECT_EQ(a["field 0 219 4"], "0 3 0 0");   // no such link on this GPU
  EXPECT_EQ(a["field 0 219 36"], "0 2 0 0");  // no such link on any GPU
  EXPECT_EQ(a["field 2 219 0"], "0 3 0 0");   // an H100's counters are the legacy ones
  EXPECT_EQ(a["replay 0"], "0 0");
}

TEST_F(NvmlLinks, AVgpuHidesEveryCounterPassthroughDoesNot) {
  std::vector<std::string> steps = {"legacy 2 0 0", "field 0 219 0", "field 0 94 0", "replay 2", "field 0 164 0",
                                    "version 0 0"};
  // The H100 gets an NVLink of its own (to B200 1, an odd pair, so one host shows both generations).
  auto with = [](const std::string& virt) {
    std::string t = Nv5Topology(R"("virtualization": ")" + virt + R"(",)", "");
    t.replace(t.find(R"({"a": 0, "b": 1)"), 0, R"({"a": 2, "b": 1, "links": 2}, )");
    return t;
  };
  auto vm = Run(WriteTopology("vgpu", with("vgpu")), steps);
  EXPECT_EQ(vm["legacy 2 0 0"], "3 0");
  EXPECT_EQ(vm["field 0 219 0"], "0 3 0 0");
  EXPECT_EQ(vm["field 0 94 0"], "0 3 0 0");
  EXPECT_EQ(vm["replay 2"], "3 0");
  EXPECT_EQ(vm["field 0 164 0"], "0 0 1 53125");  // not an error counter: still there
  EXPECT_EQ(vm["version 0 0"], "0 7");
  auto pt = Run(WriteTopology("passthrough", with("passthrough")), steps);
  EXPECT_EQ(pt["legacy 2 0 0"], "0 0");
  EXPECT_EQ(pt["field 0 219 0"], "0 0 3 0");
  EXPECT_EQ(pt["field 0 94 0"], "0 0 3 0");
  EXPECT_EQ(pt["replay 2"], "0 0");
}

TEST_F(NvmlLinks, UnsupportedCountersAndBaseValues) {
  std::string topo = WriteTopology("unsupported", R"({"version": 1, "hosts": [{"name": "h", "gpus": [
    {"index": 0, "bus_id": "0000:10:00.0", "unsupported_counters": ["replay", "pcie_replay"]},
    {"index": 1, "bus_id": "0000:11:00.0", "name": "NVIDIA A100-SXM4-80GB",
     "counters": {"pcie_replay": 3, "nvlink": [{"link": 1, "replay": 10, "crc_data": 4}]}}],
    "nvlinks": [{"a": 0, "b": 1, "links": 2}]}]})");
  auto a = Run(topo, {"legacy 0 0 0", "legacy 0 0 1", "replay 0", "field 0 94 0", "legacy 1 1 0", "legacy 1 1 3",
                      "legacy 1 0 0", "replay 1", "field 1 94 0", "version 1 0"});
  EXPECT_EQ(a["legacy 0 0 0"], "3 0");
  EXPECT_EQ(a["legacy 0 0 1"], "0 0");  // recovery is not listed
  EXPECT_EQ(a["replay 0"], "3 0");
  EXPECT_EQ(a["field 0 94 0"], "0 3 0 0");
  EXPECT_EQ(a["legacy 1 1 0"], "0 10");
  EXPECT_EQ(a["legacy 1 1 3"], "0 4");
  EXPECT_EQ(a["legacy 1 0 0"], "0 0");
  EXPECT_EQ(a["replay 1"], "0 3");
  EXPECT_EQ(a["field 1 94 0"], "0 0 3 3");
  EXPECT_EQ(a["version 1 0"], "0 4");  // A100: NVML_NVLINK_VERSION_3_0
}

// GPU 2's links: 0-1 to GPU 0, 2-5 to GPU 3 (GPU 3 numbers them 0-3). The storm is on GPU 2's
// link 3, GPU 3's link 1.
const char* kFaulted = R"({"version": 1, "hosts": [{"name": "node0", "switches": [{"id": "sw0", "parent": "cpu0"}],
  "gpus": [{"index": 0, "bus_id": "0000:10:00.0", "parent": "sw0"}, {"index": 1, "bus_id": "0000:11:00.0", "parent": "sw0"},
           {"index": 2, "bus_id": "0000:12:00.0", "parent": "sw0", "counters": {"nvlink": [{"link": 2, "replay": 10}]}},
           {"index": 3, "bus_id": "0000:13:00.0", "parent": "sw0"}],
  "nvlinks": [{"a": 0, "b": 1, "links": 2}, {"a": 2, "b": 0, "links": 2}, {"a": 2, "b": 3, "links": 4}]}],
  "bandwidth_gbps": {"nvlink_per_link": 20, "pcie_p2p": 40},
  "link_faults": [{"host": "node0", "gpu": 2, "nvlink": 3, "counter": "replay", "per_gb": 100000, "slowdown": 0.5},
                  {"host": "node0", "gpu": 1, "pcie_width": 4},
                  {"host": "node0", "gpu": 1, "counter": "pcie_replay", "per_gb": 1000}]})";

TEST_F(NvmlLinks, AReplayStormGrowsWithTheBytesOverItsLink) {
  std::string topo = WriteTopology("storm", kFaulted);
  auto a = Run(topo, {"legacy 2 3 0", "copy 0 1 1000000", "copy 2 0 1000000", "others=legacy 2 3 0", "legacy 0 2 0",
                      "copy 2 3 1000000", "after=legacy 2 3 0", "legacy 3 1 0", "legacy 2 2 0", "legacy 2 3 1",
                      "copy 3 2 2000000", "back=legacy 2 3 0", "ms 2 3 10000000", "ms 2 0 10000000"});
  EXPECT_EQ(a["legacy 2 3 0"], "0 0");  // nothing before any copy
  EXPECT_EQ(a["copy 2 3 1000000"], "0");
  EXPECT_EQ(a["others=legacy 2 3 0"], "0 0");  // copies over other NVLinks do not reach it
  EXPECT_EQ(a["legacy 0 2 0"], "0 0");
  EXPECT_EQ(a["after=legacy 2 3 0"], "0 100");  // 1 MB at 100000 a GB
  EXPECT_EQ(a["legacy 3 1 0"], "0 100");        // the other end of the same link
  EXPECT_EQ(a["legacy 2 2 0"], "0 10");         // its neighbour keeps its base value
  EXPECT_EQ(a["legacy 2 3 1"], "0 0");          // and the storm grows one counter
  EXPECT_EQ(a["back=legacy 2 3 0"], "0 300");   // the other way counts too
  // 4 links × 20 GB/s at half speed: 10 MB in 0.25 ms (GPU 2 → 0: 2 links, no storm, as long).
  EXPECT_NEAR(std::stod(a["ms 2 3 10000000"]), 0.25, 0.01);
  EXPECT_NEAR(std::stod(a["ms 2 0 10000000"]), 0.25, 0.01);

  // Another process sees the same counters (the timed copy added 1000).
  auto b = Run(topo, {"legacy 2 3 0", "legacy 3 1 0"});
  EXPECT_EQ(b["legacy 2 3 0"], "0 1300");
  EXPECT_EQ(b["legacy 3 1 0"], "0 1300");
  EXPECT_TRUE(std::filesystem::exists(topo + ".links-node0"));
}

TEST_F(NvmlLinks, ADowntrainShowsFromTheFirstCopyOverPcie) {
  std::string topo = WriteTopology("downtrain", kFaulted);
  auto a = Run(topo, {"width 1", "gen 1", "replay 1", "copy 0 1 1000000", "nvlink=width 1", "h2d 1 10000000",
                      "after=width 1", "after=gen 1", "after=replay 1", "width 0"});
  EXPECT_EQ(a["width 1"], "0 16");
  EXPECT_EQ(a["nvlink=width 1"], "0 16");  // NVLink does not use the PCIe link
  EXPECT_EQ(a["replay 1"], "0 0");
  EXPECT_EQ(a["after=width 1"], "0 4");
  EXPECT_EQ(a["after=gen 1"], "0 5");      // the width only
  EXPECT_EQ(a["after=replay 1"], "0 10");  // 10 MB at 1000 a GB
  EXPECT_EQ(a["width 0"], "0 16");
  // The next process finds the link narrowed.
  auto b = Run(topo, {"width 1"});
  EXPECT_EQ(b["width 1"], "0 4");
}

TEST_F(NvmlLinks, ATopologyWithoutFaultsWritesNoFile) {
  std::string topo = WriteTopology("clean", Nv5Topology("", ""));
  Run(topo, {"copy 0 1 4096", "h2d 2 4096", "legacy 2 0 0"});
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(std::filesystem::path(topo).parent_path()),
                          std::filesystem::directory_iterator{}), 1);
}

}  // namespace
