// The simulated NVML, loaded the way NCCL and PyTorch load the real one: dlopen("libnvidia-ml.so.1").
// Runs on the demo topology with CUDA_VISIBLE_DEVICES=5,2 set, which NVML must ignore.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>

namespace {

using nvmlDevice_t = void*;
struct PciInfo { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; };

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

}  // namespace
