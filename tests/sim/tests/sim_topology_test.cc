// core/topology: path types by nvidia-smi's rules, and the simulated node's peer rules built on them.
#include "core/topology.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/sim/common/sim_links.h"
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

// ---------------------------------------------------------------------------------------------
// Link health (sim_links.h)

std::string WithLinkFaults(const std::string& faults, std::string text = kTopo) {
  text.insert(text.rfind('}'), R"(, "link_faults": )" + faults);
  return text;
}

std::string ParseError(const std::string& text) {
  p2psim::Topology t;
  std::string error;
  EXPECT_FALSE(p2psim::ParseTopology(text, "t.json", &t, &error));
  return error;
}

// kTopo with GPU 1's entry extended by `fields`.
std::string WithGpu1(const std::string& fields) {
  std::string text = kTopo;
  std::string from = R"({"index": 1, "bus_id": "0000:11:00.0", "parent": "swA")";
  text.replace(text.find(from), from.size(), from + ", " + fields);
  return text;
}

TEST(LinkHealth, LanesNumberEachGpusLinksInFileOrder) {
  p2psim::Topology t = Load();
  const p2ptrace::Host& h = t.hosts[0];
  std::vector<p2psim::Lane> five = p2psim::Lanes(h, 5);  // 4-5 (2 of 4 up), then 0-5
  ASSERT_EQ(five.size(), 8u);
  EXPECT_EQ(five[1].peer, 4);
  EXPECT_TRUE(five[1].active);
  EXPECT_FALSE(five[2].active);
  EXPECT_EQ(five[5].peer, 0);
  EXPECT_EQ(five[5].remote_link, 1);  // GPU 0 has only the 0-5 links: the same link is its link 1
  EXPECT_EQ(five[2].remote_link, 2);
  EXPECT_TRUE(p2psim::Lanes(h, 3).empty());
}

TEST(LinkHealth, GenerationByNameUnlessTheFileSays) {
  EXPECT_EQ(p2psim::NvLinkGenerationOf("NVIDIA H100 80GB HBM3"), 4);
  EXPECT_EQ(p2psim::NvLinkGenerationOf("NVIDIA GH200 480GB"), 4);
  EXPECT_EQ(p2psim::NvLinkGenerationOf("NVIDIA A100-SXM4-80GB"), 3);
  EXPECT_EQ(p2psim::NvLinkGenerationOf("NVIDIA B200"), 5);
  EXPECT_EQ(p2psim::NvLinkGenerationOf("NVIDIA GB200"), 5);
  EXPECT_EQ(p2psim::NvmlNvLinkVersion(3), 4u);
  EXPECT_EQ(p2psim::NvmlNvLinkVersion(4), 6u);
  EXPECT_EQ(p2psim::NvmlNvLinkVersion(5), 7u);
  p2psim::Topology t = Load(WithGpu1(R"("name": "NVIDIA B200")"));
  EXPECT_EQ(t.LinksOf(t.hosts[0], 1).nvlink_version, 5);
  EXPECT_EQ(t.LinksOf(t.hosts[0], 0).nvlink_version, 4);
  t = Load(WithGpu1(R"("name": "NVIDIA B200", "nvlink_version": 4)"));
  EXPECT_EQ(t.LinksOf(t.hosts[0], 1).nvlink_version, 4);
  EXPECT_TRUE(p2psim::CounterServed(t, t.hosts[0], 1, p2psim::LinkCounter::kReplay));
  EXPECT_FALSE(p2psim::CounterServed(t, t.hosts[0], 1, p2psim::LinkCounter::kEffectiveErrors));
}

TEST(LinkHealth, GpuAndSwitchFieldsAreRead) {
  std::string text = WithGpu1(R"("unsupported_counters": ["crc_flit"], "aer": {"correctable": 5, "fatal": 1},
    "counters": {"pcie_replay": 3, "nvlink": []})");
  text.replace(text.find(R"({"id": "swC", "parent": "cpu1"})"), 31,
               R"({"id": "swC", "parent": "cpu1", "aer": {"nonfatal": 2}, "pcie": {"gen": 4, "width": 8}})");
  text.replace(text.find(R"({"index": 4, "bus_id": "0000:80:00.0", "parent": "swC")"), 54,
               R"({"index": 4, "bus_id": "0000:80:00.0", "parent": "swC", "counters": {"nvlink": [{"link": 1, "replay": 9, "crc_data": 2}]})");
  p2psim::Topology t = Load(text);
  const p2ptrace::Host& h = t.hosts[0];
  const p2psim::GpuLinks& g1 = t.LinksOf(h, 1);
  EXPECT_EQ(g1.aer.correctable, 5u);
  EXPECT_EQ(g1.aer.fatal, 1u);
  EXPECT_EQ(p2psim::CounterValue(t, h, 1, -1, p2psim::LinkCounter::kPcieReplay), 3u);
  EXPECT_FALSE(p2psim::CounterServed(t, h, 1, p2psim::LinkCounter::kCrcFlit));
  EXPECT_TRUE(p2psim::CounterServed(t, h, 1, p2psim::LinkCounter::kCrcData));
  EXPECT_TRUE(p2psim::CounterServed(t, h, 0, p2psim::LinkCounter::kCrcFlit));
  EXPECT_EQ(p2psim::CounterValue(t, h, 4, 1, p2psim::LinkCounter::kReplay), 9u);
  EXPECT_EQ(p2psim::CounterValue(t, h, 4, 1, p2psim::LinkCounter::kCrcData), 2u);
  EXPECT_EQ(p2psim::CounterValue(t, h, 4, 0, p2psim::LinkCounter::kReplay), 0u);
  const p2psim::SwitchLinks* sw = t.SwitchLinksOf(h, "swC");
  ASSERT_NE(sw, nullptr);
  EXPECT_EQ(sw->aer.nonfatal, 2u);
  EXPECT_TRUE(sw->has_pcie);
  EXPECT_EQ(sw->pcie.width, 8);
  EXPECT_FALSE(t.SwitchLinksOf(h, "swA")->has_pcie);
  std::string vgpu = kTopo;
  vgpu.replace(vgpu.find(R"("name": "h",)"), 12, R"("name": "h", "virtualization": "vgpu",)");
  p2psim::Topology v = Load(vgpu);
  EXPECT_FALSE(p2psim::CounterServed(v, v.hosts[0], 0, p2psim::LinkCounter::kPcieReplay));
  EXPECT_FALSE(p2psim::CounterServed(v, v.hosts[0], 0, p2psim::LinkCounter::kReplay));
}

TEST(LinkHealth, BadFieldsNameFileAndField) {
  EXPECT_EQ(ParseError(WithGpu1(R"("unsupported_counters": ["replays"])")),
            "t.json: hosts[0].gpus[1].unsupported_counters[0]: unknown counter \"replays\" (expected replay, recovery, "
            "crc_flit, crc_data, rcv_errors, recovery_failed, recovery_events, effective_errors, symbol_errors or pcie_replay)");
  EXPECT_EQ(ParseError(WithGpu1(R"("nvlink_version": 7)")),
            "t.json: hosts[0].gpus[1].nvlink_version: unknown NVLink generation 7 (1..5)");
  EXPECT_EQ(ParseError(WithGpu1(R"("aer": {"fatal": -1})")), "t.json: hosts[0].gpus[1].aer.fatal: must be a non-negative integer");
  EXPECT_EQ(ParseError(WithGpu1(R"("counters": {"nvlink": [{"link": 0}]})")),
            "t.json: hosts[0].gpus[1].counters.nvlink[0].link: no link 0: GPU 1 has no NVLink");
  EXPECT_EQ(ParseError(WithGpu1(R"("counters": {"replay": 1})")),
            "t.json: hosts[0].gpus[1].counters.replay: unknown key (expected pcie_replay or nvlink)");
}

TEST(LinkHealth, BadLinkFaultsNameFileAndField) {
  const char* storm = R"([{"host": "h", "gpu": 4, "nvlink": 1, "per_gb": 10}])";
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 4, "nvlink": 4, "per_gb": 10}])")),
            "t.json: link_faults[0].nvlink: no link 4: GPU 4 has 4 NVLinks (0..3)");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 9, "nvlink": 0, "per_gb": 10}])")),
            "t.json: link_faults[0].gpu: no GPU 9 on host h");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "x", "gpu": 4, "nvlink": 0}])")),
            "t.json: link_faults[0].host: unknown host \"x\"");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 4, "nvlink": 1}])")), "t.json: link_faults[0].per_gb: missing");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 4, "nvlink": 1, "per_gb": 1, "slowdown": 2}])")),
            "t.json: link_faults[0].slowdown: must be > 0 and <= 1");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 4, "nvlink": 1, "per_gb": 1, "counter": "effective_errors"}])")),
            "t.json: link_faults[0].counter: \"effective_errors\" is not an NVLink 4 counter (GPU 4's: replay, recovery, "
            "crc_flit or crc_data)");
  std::string b200 = kTopo;
  b200.replace(b200.find(R"({"index": 4,)"), 12, R"({"index": 4, "name": "NVIDIA B200",)");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 4, "nvlink": 1, "per_gb": 1, "counter": "replay"}])", b200)),
            "t.json: link_faults[0].counter: \"replay\" is not an NVLink 5 counter (GPU 4's: rcv_errors, recovery_failed, "
            "recovery_events, effective_errors or symbol_errors)");
  p2psim::Topology t = Load(WithLinkFaults(storm, b200));  // NVLink 5's default counter
  EXPECT_EQ(t.link_faults[0].counter, int(p2psim::LinkCounter::kEffectiveErrors));
  t = Load(WithLinkFaults(storm));
  EXPECT_EQ(t.link_faults[0].counter, int(p2psim::LinkCounter::kReplay));
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 4, "nvlink": 1, "per_gb": 1, "pcie_width": 4}])")),
            "t.json: link_faults[0].pcie_width: an NVLink storm (nvlink) cannot also be a PCIe fault; give it its own entry");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 1, "pcie_width": 32}])")),
            "t.json: link_faults[0].pcie_width: must be a PCIe width up to 16 (a downtrain from GPU 1's x16)");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 1, "pcie_gen": 6}])")),
            "t.json: link_faults[0].pcie_gen: must be 1..5 (a downtrain from GPU 1's Gen5)");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 1, "counter": "replay", "per_gb": 1}])")),
            "t.json: link_faults[0].counter: \"replay\" is an NVLink counter: give the link as \"nvlink\"");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 1, "counter": "pcie_replay"}])")),
            "t.json: link_faults[0].per_gb: missing");
  EXPECT_EQ(ParseError(WithLinkFaults(R"([{"host": "h", "gpu": 1}])")),
            "t.json: link_faults[0]: names no fault (expected nvlink, pcie_gen, pcie_width or counter)");
  EXPECT_EQ(ParseError(WithLinkFaults(R"({"host": "h"})")), "t.json: (top level).link_faults: must be an array");
}

// A faulted topology keeps its counters beside its file: each test its own directory.
class LinkFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = std::filesystem::temp_directory_path().string() + "/sim_links-XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    unsetenv("P2PTRACE_SYSROOT");
  }
  p2psim::Topology LoadHere(const std::string& text) {
    p2psim::Topology t;
    std::string error;
    EXPECT_TRUE(p2psim::ParseTopology(text, dir_ + "/t.json", &t, &error)) << error;
    return t;
  }
  std::string dir_;
};

TEST_F(LinkFaults, AStormCountsBytesOverItsLinkAndSlowsThePair) {
  // GPU 5's link 5 is GPU 0's link 1 (the 0-5 set, all up); GPU 4's link 3 is down.
  p2psim::Topology t = LoadHere(WithLinkFaults(R"([{"host": "h", "gpu": 5, "nvlink": 5, "per_gb": 1000, "slowdown": 0.25},
                                                   {"host": "h", "gpu": 4, "nvlink": 3, "per_gb": 1000, "slowdown": 0.5}])"));
  const p2ptrace::Host& h = t.hosts[0];
  using p2psim::LinkCounter;
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(t, h, 0, 5), 4 * 25 * 0.25);
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(t, h, 4, 5), 50);  // the storm's link is down: no effect
  p2psim::ChargeTransfer(t, h, 0, 5, true, 2'000'000'000);
  EXPECT_EQ(p2psim::CounterValue(t, h, 5, 5, LinkCounter::kReplay), 2000u);
  EXPECT_EQ(p2psim::CounterValue(t, h, 0, 1, LinkCounter::kReplay), 2000u);  // the receiving end too
  EXPECT_EQ(p2psim::CounterValue(t, h, 5, 4, LinkCounter::kReplay), 0u);
  p2psim::ChargeTransfer(t, h, 5, 0, true, 10);  // at least one a transfer
  EXPECT_EQ(p2psim::CounterValue(t, h, 5, 5, LinkCounter::kReplay), 2001u);
  p2psim::ChargeTransfer(t, h, 5, 0, false, 1'000'000'000);  // host-staged: not over NVLink
  p2psim::ChargeTransfer(t, h, 4, 5, true, 1'000'000'000);   // the down link carries nothing
  EXPECT_EQ(p2psim::CounterValue(t, h, 5, 5, LinkCounter::kReplay), 2001u);
  EXPECT_EQ(p2psim::CounterValue(t, h, 4, 3, LinkCounter::kReplay), 0u);
  // Another reader of the same file (another process's view) sees it.
  p2psim::Topology again = LoadHere(WithLinkFaults(R"([{"host": "h", "gpu": 5, "nvlink": 5, "per_gb": 1000}])"));
  EXPECT_EQ(p2psim::CounterValue(again, again.hosts[0], 0, 1, LinkCounter::kReplay), 2001u);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/t.json.links-h"));
}

TEST_F(LinkFaults, ADowntrainFiresAtTheFirstBytesOverPcie) {
  std::filesystem::create_directories(dir_ + "/root/sys/bus/pci/devices/0000:11:00.0");
  std::ofstream(dir_ + "/root/sys/bus/pci/devices/0000:11:00.0/current_link_width") << "16\n";
  setenv("P2PTRACE_SYSROOT", (dir_ + "/root").c_str(), 1);
  p2psim::Topology t = LoadHere(WithLinkFaults(R"([{"host": "h", "gpu": 1, "pcie_width": 4, "pcie_gen": 4},
                                                   {"host": "h", "gpu": 1, "counter": "pcie_replay", "per_gb": 100}])"));
  const p2ptrace::Host& h = t.hosts[0];
  EXPECT_DOUBLE_EQ(p2psim::DirectBandwidth(t, h, 0, 1), 40);
  EXPECT_EQ(p2psim::CurrentPcie(t, h, 1).width, 16);
  p2psim::ChargeTransfer(t, h, 0, 2, true, 1000);  // not GPU 1's
  p2psim::ChargeTransfer(t, h, 1, 1, false, 1000);  // within GPU 1
  EXPECT_EQ(p2psim::CurrentPcie(t, h, 1).width, 16);
  EXPECT_EQ(p2psim::CounterValue(t, h, 1, -1, p2psim::LinkCounter::kPcieReplay), 0u);
  p2psim::ChargeTransfer(t, h, -1, 1, false, 3'000'000'000);  // host to device
  p2ptrace::PcieLink now = p2psim::CurrentPcie(t, h, 1);
  EXPECT_EQ(now.width, 4);
  EXPECT_EQ(now.gen, 4);
  EXPECT_EQ(now.max_width, 16);
  EXPECT_EQ(p2psim::CounterValue(t, h, 1, -1, p2psim::LinkCounter::kPcieReplay), 300u);
  EXPECT_NEAR(p2psim::DirectBandwidth(t, h, 0, 1), 40 * (1.969 * 4) / (3.938 * 16), 1e-9);
  EXPECT_NEAR(p2psim::HostDeviceBandwidth(t, h, 1), 1.969 * 4 * 0.85, 1e-9);
  EXPECT_NEAR(p2psim::HostDeviceBandwidth(t, h, 0), 3.938 * 16 * 0.85, 1e-9);
  std::ifstream width(dir_ + "/root/sys/bus/pci/devices/0000:11:00.0/current_link_width");
  std::stringstream text;
  text << width.rdbuf();
  EXPECT_EQ(text.str(), "4\n");
}

TEST_F(LinkFaults, ATopologyWithoutFaultsTouchesNoFile) {
  p2psim::Topology t = LoadHere(kTopo);
  p2psim::ChargeTransfer(t, t.hosts[0], 0, 5, true, 1 << 20);
  p2psim::ChargeTransfer(t, t.hosts[0], -1, 1, false, 1 << 20);
  EXPECT_EQ(p2psim::CounterValue(t, t.hosts[0], 0, 0, p2psim::LinkCounter::kReplay), 0u);
  EXPECT_EQ(p2psim::CurrentPcie(t, t.hosts[0], 1).width, 16);
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

}  // namespace
