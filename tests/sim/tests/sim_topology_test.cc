// core/topology: path types by nvidia-smi's rules, and the simulated node's peer rules built on them.
#include "core/topology.h"

#include <gtest/gtest.h>

#include "tests/sim/common/sim_topology.h"

namespace {

using p2ptrace::PathType;

// cpu0 ─ top ─┬ swA ─ GPU0, GPU1
//             └ swB ─ GPU2
// cpu0 ─ GPU3 (directly on the root complex); cpu1 ─ swC ─ GPU4, GPU5 (NVLink 4/4 and 0..5: 2 of 4 active)
const char* kTopo = R"({"version": 1, "hosts": [{"name": "h", "cpus": [{"id": "cpu0"}, {"id": "cpu1"}],
  "switches": [{"id": "top", "parent": "cpu0"}, {"id": "swA", "parent": "top"}, {"id": "swB", "parent": "top", "acs_redirect": true},
               {"id": "swC", "parent": "cpu1"}],
  "gpus": [{"index": 0, "bus_id": "0000:10:00.0", "parent": "swA"}, {"index": 1, "bus_id": "0000:11:00.0", "parent": "swA"},
           {"index": 2, "bus_id": "0000:20:00.0", "parent": "swB"}, {"index": 3, "bus_id": "0000:30:00.0", "parent": "cpu0"},
           {"index": 4, "bus_id": "0000:80:00.0", "parent": "swC"}, {"index": 5, "bus_id": "0000:81:00.0", "parent": "swC"}],
  "nvlinks": [{"a": 4, "b": 5, "links": 4, "active": 2}, {"a": 0, "b": 5, "links": 4}]}],
  "bandwidth_gbps": {"nvlink_per_link": 25, "pcie_p2p": 40, "host_staged": 15},
  "pair_overrides": [{"host": "h", "a": 1, "b": 3, "gbps": 3.5}],
  "peer_access": [{"host": "h", "a": 2, "b": 3, "supported": false}]})";

p2psim::Topology Load(const std::string& text = kTopo) {
  p2psim::Topology t;
  std::string error;
  EXPECT_TRUE(p2psim::ParseTopology(text, "t.json", &t, &error)) << error;
  return t;
}

TEST(Topology, PathTypesFollowNvidiaSmi) {
  p2psim::Topology t = Load();
  const p2ptrace::Host& h = t.hosts[0];
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(h, 0, 1).Label(), "PIX");
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(h, 0, 2).Label(), "PXB");
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(h, 0, 3).Label(), "PHB");
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(h, 3, 4).Label(), "SYS");
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(h, 4, 5).Label(), "NV4");
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(h, 4, 5).pcie, PathType::kPIX);
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(h, 0, 5).Label(), "NV4");
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(h, 0, 5).pcie, PathType::kSYS);
  EXPECT_TRUE(p2ptrace::ClassifyGpuPath(h, 0, 2).acs_redirect);
  EXPECT_FALSE(p2ptrace::ClassifyGpuPath(h, 0, 1).acs_redirect);
}

TEST(Topology, ParsePathTypeAcceptsEveryCell) {
  EXPECT_EQ(p2ptrace::ParsePathType("NV12"), PathType::kNVLink);
  EXPECT_EQ(p2ptrace::ParsePathType("SOC"), PathType::kSYS);
  EXPECT_EQ(p2ptrace::ParsePathType("NODE"), PathType::kNODE);
  EXPECT_FALSE(p2ptrace::ParsePathType("NV"));
  EXPECT_FALSE(p2ptrace::ParsePathType("NVx"));
  EXPECT_FALSE(p2ptrace::ParsePathType("X"));
}

TEST(Topology, IommuTranslatingNeedsOnWithoutPassthrough) {
  EXPECT_TRUE(p2ptrace::IommuTranslating("ro intel_iommu=on quiet"));
  EXPECT_TRUE(p2ptrace::IommuTranslating("amd_iommu=on"));
  EXPECT_FALSE(p2ptrace::IommuTranslating("intel_iommu=on iommu=pt"));
  EXPECT_FALSE(p2ptrace::IommuTranslating("xintel_iommu=on"));
  EXPECT_FALSE(p2ptrace::IommuTranslating(""));
}

TEST(SimRules, PeerStatusSaysWhy) {
  p2psim::Topology t = Load();
  const p2ptrace::Host& h = t.hosts[0];
  EXPECT_EQ(p2psim::PeerStatus(t, h, 0, 1), p2psim::P2PStatus::kOk);
  EXPECT_EQ(p2psim::PeerStatus(t, h, 3, 4), p2psim::P2PStatus::kIohTopologyNotSupported);
  EXPECT_EQ(p2psim::PeerStatus(t, h, 0, 5), p2psim::P2PStatus::kOk);  // NVLink beats the socket gap
  EXPECT_EQ(p2psim::PeerStatus(t, h, 3, 2), p2psim::P2PStatus::kNotSupported);  // peer_access override
  for (auto [field, status] : {std::pair{R"("mig": true)", p2psim::P2PStatus::kNotSupported},
                               {R"("p2p_regkey_disabled": true)", p2psim::P2PStatus::kDisabledByRegkey},
                               {R"("name": "NVIDIA GeForce RTX 3090")", p2psim::P2PStatus::kGpuNotSupported}}) {
    std::string text = kTopo;
    text.replace(text.find(R"("index": 1,)"), 11, std::string(R"("index": 1, )") + field + ",");
    p2psim::Topology m = Load(text);
    EXPECT_EQ(p2psim::PeerStatus(m, m.hosts[0], 0, 1), status) << field;
  }
  std::string vm = kTopo;
  vm.replace(vm.find(R"("name": "h",)"), 12, R"("name": "h", "virtualization": "passthrough",)");
  p2psim::Topology v = Load(vm);
  EXPECT_EQ(p2psim::PeerStatus(v, v.hosts[0], 0, 1), p2psim::P2PStatus::kChipsetNotSupported);
}

TEST(SimRules, DefaultsNeedNoCpusOrParents) {
  p2psim::Topology t = Load(R"({"version": 1, "hosts": [{"name": "m", "gpus": [{"index": 0, "bus_id": "0000:01:00.0"},
    {"index": 1, "bus_id": "0000:02:00.0"}]}]})");
  ASSERT_EQ(t.hosts.size(), 1u);
  EXPECT_EQ(t.hosts[0].gpus[0].parent, "cpu0");
  EXPECT_EQ(p2ptrace::ClassifyGpuPath(t.hosts[0], 0, 1).Label(), "PHB");
  EXPECT_EQ(t.hosts[0].gpus[1].name, "NVIDIA H100 80GB HBM3");
}

TEST(SimRules, Bandwidths) {
  p2psim::Topology t = Load();
  const p2ptrace::Host& h = t.hosts[0];
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(t, h, 0, 1), 40);
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(t, h, 0, 2), 15);  // ACS redirect on swB
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(t, h, 4, 5), 50);  // 2 of 4 links active
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(t, h, 3, 1), 3.5);  // override, either order
  std::string iommu = kTopo;
  iommu.replace(iommu.find(R"("name": "h",)"), 12, R"("name": "h", "kernel_cmdline": "intel_iommu=on",)");
  p2psim::Topology i = Load(iommu);
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(i, i.hosts[0], 0, 1), 15);
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(i, i.hosts[0], 4, 5), 50);  // NVLink does not cross the IOMMU
}

TEST(SimRules, ADowntrainedLinkCarriesItsShare) {
  // GPU1 at Gen3 x8 of Gen5 x16: an eighth of the rate over PCIe; GPU0's own link is whole.
  std::string slow = kTopo;
  std::string from = R"({"index": 1, "bus_id": "0000:11:00.0", "parent": "swA"})";
  slow.replace(slow.find(from), from.size(),
               R"({"index": 1, "bus_id": "0000:11:00.0", "parent": "swA", "pcie": {"gen": 3, "width": 8, "max_gen": 5, "max_width": 16}})");
  p2psim::Topology t = Load(slow);
  EXPECT_NEAR(p2psim::DirectBandwidth(t, t.hosts[0], 0, 1), 40 * (0.985 * 8) / (3.938 * 16), 1e-9);  // Gen5: 3.938 GB/s a lane
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(t, t.hosts[0], 0, 2), 15);  // not through GPU1
  EXPECT_NEAR(p2psim::HostDeviceBandwidth(t.hosts[0].gpus[1]), 0.985 * 8 * 0.85, 1e-9);
}

TEST(SimRules, CopyFaultsAreOneWay) {
  std::string faulty = kTopo;
  faulty.insert(faulty.rfind('}'), R"(, "copy_faults": [{"host": "h", "a": 0, "b": 1, "fault": "corrupt"},
                                                      {"host": "h", "a": 2, "b": 0, "fault": "hang"}])");
  p2psim::Topology t = Load(faulty);
  const p2ptrace::Host& h = t.hosts[0];
  ASSERT_NE(p2psim::FindCopyFault(t, h, 0, 1), nullptr);
  EXPECT_EQ(p2psim::FindCopyFault(t, h, 0, 1)->fault, "corrupt");
  EXPECT_EQ(p2psim::FindCopyFault(t, h, 1, 0), nullptr);  // the other direction is sound
  EXPECT_EQ(p2psim::FindCopyFault(t, h, 2, 0)->fault, "hang");
  std::string error;
  std::string bad = faulty;
  bad.replace(bad.find(R"("corrupt")"), 9, R"("slow")");
  EXPECT_FALSE(p2psim::ParseTopology(bad, "t.json", &t, &error));
  EXPECT_EQ(error, "t.json: copy_faults[0].fault: \"slow\": expected corrupt, hang or sm-lost");
  bad = faulty;
  bad.replace(bad.find(R"("a": 2, "b": 0)"), 14, R"("a": 2, "b": 2)");
  EXPECT_FALSE(p2psim::ParseTopology(bad, "t.json", &t, &error));
  EXPECT_EQ(error, "t.json: copy_faults[1].b: must differ from a");
}

TEST(SimRules, OverridesAndReferencesAreChecked) {
  p2psim::Topology t;
  std::string error;
  std::string bad = kTopo;
  bad.replace(bad.find(R"("b": 3, "gbps")"), 6, R"("b": 7)");
  EXPECT_FALSE(p2psim::ParseTopology(bad, "t.json", &t, &error));
  EXPECT_EQ(error, "t.json: pair_overrides[0].b: no GPU 7 on host h");
  bad = kTopo;
  bad.replace(bad.find(R"("parent": "top", "acs)"), 15, R"("parent": "swB")");
  EXPECT_FALSE(p2psim::ParseTopology(bad, "t.json", &t, &error));
  EXPECT_EQ(error, "t.json: hosts[0].switches[2].parent: a switch cannot be its own parent");
  bad = kTopo;
  std::string from = R"("id": "swA", "parent": "top")";
  bad.replace(bad.find(from), from.size(), R"("id": "swA", "parent": "nope")");
  EXPECT_FALSE(p2psim::ParseTopology(bad, "t.json", &t, &error));
  EXPECT_EQ(error, "t.json: hosts[0].switches[1].parent: unknown CPU or switch \"nope\"");
}

}  // namespace
