// Link health (core/link_health.h): a reading's text and back, what changed between two readings,
// and which GPU pairs' traffic crosses a changed link.
#include "core/link_health.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "p2ptrace/vocabulary.h"

namespace p2ptrace {
namespace {

// Four GPUs: 0 and 1 under the bridge 0000:17:00.0, 2 and 3 under 0000:39:00.0. GPU0's NVLink 0
// leads to GPU1, its NVLink 1 to GPU2; GPU3's NVLink 0 to an NVSwitch (a bus id that is no GPU's).
constexpr const char* kGpuBus[] = {"0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:3b:00.0"};
constexpr const char* kBridge01 = "0000:17:00.0";
constexpr const char* kBridge23 = "0000:39:00.0";
constexpr const char* kNvSwitch = "0000:c0:00.0";

NvLinkHealth NvLink(int gpu, int link, std::string remote, std::vector<LinkCounter> counters = {}, int speed = 25000,
                    bool up = true) {
  NvLinkHealth l;
  l.gpu = gpu;
  l.link = link;
  l.up = up;
  l.remote = std::move(remote);
  l.version = 4;
  l.speed_mbps = speed;
  l.counters = std::move(counters);
  return l;
}

PciePortHealth Port(std::string bus, int gpu, std::vector<int> below, int gen = 5, int width = 16,
                    std::vector<LinkCounter> counters = {}) {
  PciePortHealth p;
  p.bus_id = std::move(bus);
  p.gpu = gpu;
  p.below = std::move(below);
  p.gen = gen;
  p.max_gen = 5;
  p.width = width;
  p.max_width = 16;
  p.counters = std::move(counters);
  return p;
}

LinkHealth Node() {
  LinkHealth h;
  h.host = "node7";
  h.when = "start";
  for (int g = 0; g < 4; ++g) h.pcie.push_back(Port(kGpuBus[g], g, {g}));
  h.pcie.push_back(Port(kBridge01, -1, {0, 1}));
  h.pcie.push_back(Port(kBridge23, -1, {2, 3}));
  h.nvlinks.push_back(NvLink(0, 0, kGpuBus[1]));
  h.nvlinks.push_back(NvLink(0, 1, kGpuBus[2]));
  h.nvlinks.push_back(NvLink(3, 0, kNvSwitch));
  return h;
}

PciePortHealth& PortOf(LinkHealth& h, const std::string& bus) {
  for (PciePortHealth& p : h.pcie)
    if (p.bus_id == bus) return p;
  ADD_FAILURE() << "no port " << bus;
  return h.pcie.front();
}

// --- text ----------------------------------------------------------------------------------------

TEST(LinkHealth, RoundTripKeepsUnsupportedCountersUnsupported) {
  LinkHealth h;
  h.host = "node7";
  h.when = "before GPU0 -> GPU1";
  h.read_ms = 12.5;
  h.notes = {"NVML: no field values"};
  h.nvlinks.push_back(NvLink(0, 3, kGpuBus[1], {{"replay", 0}, {"crc_flit", std::nullopt}, {"recovery", 7}}));
  h.nvlinks.push_back(NvLink(0, 4, "", {}, -1, /*up=*/false));
  h.pcie.push_back(Port(kBridge01, -1, {0, 1}, 4, 8, {{"aer_correctable", std::nullopt}, {"aer_fatal", 2}}));

  std::string text = SerializeLinkHealth(h);
  EXPECT_EQ(text.rfind("p2ptrace-links 1\n", 0), 0u) << text;
  EXPECT_NE(text.find("crc_flit=-"), std::string::npos) << text;
  EXPECT_NE(text.find("aer_correctable=-"), std::string::npos) << text;

  Expected<LinkHealth> back = ParseLinkHealth(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->host, "node7");
  EXPECT_EQ(back->when, "before GPU0 -> GPU1");
  EXPECT_DOUBLE_EQ(back->read_ms, 12.5);
  EXPECT_EQ(back->notes, h.notes);
  ASSERT_EQ(back->nvlinks.size(), 2u);
  const NvLinkHealth& l = back->nvlinks[0];
  EXPECT_EQ(l.gpu, 0);
  EXPECT_EQ(l.link, 3);
  EXPECT_TRUE(l.up);
  EXPECT_EQ(l.remote, kGpuBus[1]);
  EXPECT_EQ(l.version, 4);
  EXPECT_EQ(l.speed_mbps, 25000);
  ASSERT_EQ(l.counters.size(), 3u);
  EXPECT_EQ(l.counters[0].name, "replay");
  ASSERT_TRUE(l.counters[0].value.has_value());  // a real 0 stays a 0
  EXPECT_EQ(*l.counters[0].value, 0u);
  EXPECT_EQ(l.counters[1].name, "crc_flit");
  EXPECT_FALSE(l.counters[1].value.has_value());  // unsupported stays unsupported, never 0
  EXPECT_EQ(l.counters[2].value, std::optional<uint64_t>(7));
  EXPECT_FALSE(back->nvlinks[1].up);
  EXPECT_EQ(back->nvlinks[1].remote, "");
  EXPECT_EQ(back->nvlinks[1].speed_mbps, -1);
  ASSERT_EQ(back->pcie.size(), 1u);
  const PciePortHealth& p = back->pcie[0];
  EXPECT_EQ(p.bus_id, kBridge01);
  EXPECT_EQ(p.gpu, -1);
  EXPECT_EQ(p.below, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.gen, 4);
  EXPECT_EQ(p.max_gen, 5);
  EXPECT_EQ(p.width, 8);
  EXPECT_EQ(p.max_width, 16);
  ASSERT_EQ(p.counters.size(), 2u);
  EXPECT_FALSE(p.counters[0].value.has_value());
  EXPECT_EQ(p.counters[1].value, std::optional<uint64_t>(2));
  EXPECT_EQ(SerializeLinkHealth(*back), text);
}

TEST(LinkHealth, ARecordOfAnUnknownKindIsSkipped) {
  Expected<LinkHealth> h = ParseLinkHealth(
      "p2ptrace-links 1\n"
      "host\tnode7\n"
      "nvswitch\t0\tport 3\tup\n"            // a kind a later writer may add
      "nvlink\t0\t1\tup\n"                    // too few fields: skipped, not half read
      "nvlink\t0\t2\tup\t0000:19:00.0\t4\t25000\treplay=3\n"
      "pcie\t0000:18:00.0\t0\t0\t5\t5\t16\t16\tpcie_replay=1\textra field\n");
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(h->host, "node7");
  ASSERT_EQ(h->nvlinks.size(), 1u);
  EXPECT_EQ(h->nvlinks[0].link, 2);
  EXPECT_EQ(h->nvlinks[0].counters[0].value, std::optional<uint64_t>(3));
  ASSERT_EQ(h->pcie.size(), 1u);
  EXPECT_EQ(h->pcie[0].below, (std::vector<int>{0}));
}

TEST(LinkHealth, ABadMagicOrVersionIsAnError) {
  for (const char* text : {"", "p2ptrace-link 1\n", "P2PTRACE-LINKS 1\n", "host\tnode7\n"}) {
    Expected<LinkHealth> h = ParseLinkHealth(text);
    ASSERT_FALSE(h.ok()) << text;
    EXPECT_NE(h.error().message.find("p2ptrace-links"), std::string::npos) << h.error().message;
  }
  for (const char* text : {"p2ptrace-links 2\nhost\tn\n", "p2ptrace-links \n", "p2ptrace-links 1x\n"}) {
    Expected<LinkHealth> h = ParseLinkHealth(text);
    ASSERT_FALSE(h.ok()) << text;
    EXPECT_NE(h.error().message.find("version"), std::string::npos) << h.error().message;
  }
  EXPECT_TRUE(ParseLinkHealth("p2ptrace-links 1").ok());  // the header alone: an empty reading
}

// --- counters ------------------------------------------------------------------------------------

TEST(LinkHealth, ACounterThatGrewIsOneChangeWithBothValues) {
  LinkHealth before = Node(), after = Node();
  before.nvlinks[0].counters = {{"replay", 10}, {"crc_flit", 4}};
  after.nvlinks[0].counters = {{"replay", 61}, {"crc_flit", 4}};
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 1u);
  const LinkChange& c = changes[0];
  EXPECT_EQ(c.kind, LinkChange::Kind::kErrors);
  EXPECT_TRUE(c.nvlink);
  EXPECT_EQ(c.gpu, 0);
  EXPECT_EQ(c.link, 0);
  EXPECT_EQ(c.counter, "replay");
  EXPECT_EQ(c.before, 10u);
  EXPECT_EQ(c.after, 61u);
  EXPECT_EQ(c.Where(), "GPU0 NVLink 0");
  EXPECT_EQ(c.What(), "replay +51 (10 -> 61)");
}

TEST(LinkHealth, APcieCounterThatGrewNamesItsPort) {
  LinkHealth before = Node(), after = Node();
  PortOf(before, kBridge01).counters = {{"aer_correctable", 0}};
  PortOf(after, kBridge01).counters = {{"aer_correctable", 3}};
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].nvlink);
  EXPECT_EQ(changes[0].bus_id, kBridge01);
  EXPECT_EQ(changes[0].below, (std::vector<int>{0, 1}));
  EXPECT_EQ(changes[0].Where(), "PCIe bridge 0000:17:00.0 (above GPU0, GPU1)");
  EXPECT_EQ(changes[0].What(), "aer_correctable +3 (0 -> 3)");
}

TEST(LinkHealth, ACounterUnsupportedInOneReadingIsNoChange) {
  LinkHealth before = Node(), after = Node();
  before.nvlinks[0].counters = {{"replay", std::nullopt}, {"crc_data", 5}};
  after.nvlinks[0].counters = {{"replay", 900}, {"crc_data", std::nullopt}, {"recovery", 4}};  // recovery: only after
  EXPECT_TRUE(CompareLinkHealth(before, after).empty());
}

TEST(LinkHealth, ACounterThatWentDownIsAResetNotAChange) {
  LinkHealth before = Node(), after = Node();
  before.nvlinks[1].counters = {{"replay", 100}};
  after.nvlinks[1].counters = {{"replay", 5}};
  PortOf(before, kGpuBus[2]).counters = {{"pcie_replay", 40}};
  PortOf(after, kGpuBus[2]).counters = {{"pcie_replay", 0}};
  EXPECT_TRUE(CompareLinkHealth(before, after).empty());
}

// --- training ------------------------------------------------------------------------------------

TEST(LinkHealth, PcieWidthNarrowedBetweenTheReadings) {
  LinkHealth before = Node(), after = Node();
  PortOf(after, kGpuBus[1]).width = 8;
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 1u);
  const LinkChange& c = changes[0];
  EXPECT_EQ(c.kind, LinkChange::Kind::kDowntrained);
  EXPECT_FALSE(c.nvlink);
  EXPECT_EQ(c.gpu, 1);
  EXPECT_EQ(c.bus_id, kGpuBus[1]);
  EXPECT_EQ(c.trained, "x8 of x16");
  EXPECT_TRUE(c.narrowed_between);
  EXPECT_FALSE(c.gen_only);
  EXPECT_EQ(c.What(), "x8 of x16 (narrowed during the job)");
}

TEST(LinkHealth, PcieWidthNarrowAtBothReadingsWasSoFromTheStart) {
  LinkHealth before = Node(), after = Node();
  PortOf(before, kBridge23).width = 4;
  PortOf(after, kBridge23).width = 4;
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].trained, "x4 of x16");
  EXPECT_FALSE(changes[0].narrowed_between);
  EXPECT_EQ(changes[0].below, (std::vector<int>{2, 3}));
  EXPECT_EQ(changes[0].What(), "x4 of x16");
}

TEST(LinkHealth, APortNarrowAtTheStartStaysEvidenceWhenItCameBackOrWasNotReadAgain) {
  LinkHealth before = Node(), after = Node();
  PortOf(before, kGpuBus[0]).width = 8;  // back at x16 at exit
  PortOf(before, kBridge23).width = 2;   // the exit reading lacks it
  std::erase_if(after.pcie, [](const PciePortHealth& p) { return p.bus_id == kBridge23; });
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].bus_id, kGpuBus[0]);
  EXPECT_EQ(changes[0].trained, "x8 of x16");
  EXPECT_EQ(changes[1].bus_id, kBridge23);
  EXPECT_EQ(changes[1].trained, "x2 of x16");
  EXPECT_EQ(changes[1].below, (std::vector<int>{2, 3}));
}

TEST(LinkHealth, GenerationOnlyIsAWeakSignOnAGpuButNotOnABridge) {
  LinkHealth before = Node(), after = Node();
  PortOf(after, kGpuBus[2]).gen = 1;  // an idle GPU lowers its generation
  PortOf(after, kBridge01).gen = 3;   // a bridge does not
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].gpu, 2);
  EXPECT_EQ(changes[0].trained, "Gen1 of Gen5");
  EXPECT_TRUE(changes[0].gen_only);
  EXPECT_NE(changes[0].What().find("lowers its PCIe generation when idle"), std::string::npos) << changes[0].What();
  EXPECT_EQ(changes[1].gpu, -1);
  EXPECT_EQ(changes[1].trained, "Gen3 of Gen5");
  EXPECT_FALSE(changes[1].gen_only);
}

TEST(LinkHealth, WidthAndGenerationLowTogetherIsNotGenerationOnly) {
  LinkHealth before = Node(), after = Node();
  PortOf(after, kGpuBus[3]).gen = 3;
  PortOf(after, kGpuBus[3]).width = 4;
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].trained, "x4 of x16, Gen3 of Gen5");
  EXPECT_FALSE(changes[0].gen_only);
}

TEST(LinkHealth, AnNvLinkThatWentDown) {
  LinkHealth before = Node(), after = Node();
  after.nvlinks[1].up = false;
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, LinkChange::Kind::kDowntrained);
  EXPECT_TRUE(changes[0].nvlink);
  EXPECT_EQ(changes[0].gpu, 0);
  EXPECT_EQ(changes[0].link, 1);
  EXPECT_EQ(changes[0].trained, "down");
  EXPECT_TRUE(changes[0].narrowed_between);
}

TEST(LinkHealth, AnNvLinkDownAtBothReadingsIsNoChange) {
  // A GPU lists links it has but no cable or peer uses: down from the start says nothing of the job.
  LinkHealth before = Node(), after = Node();
  before.nvlinks.push_back(NvLink(0, 5, "", {}, -1, /*up=*/false));
  after.nvlinks.push_back(NvLink(0, 5, "", {}, -1, /*up=*/false));
  EXPECT_TRUE(CompareLinkHealth(before, after).empty());
}

TEST(LinkHealth, AnNvLinkSlowerThanItsGpusOthers) {
  LinkHealth before = Node(), after = Node();
  for (LinkHealth* h : {&before, &after}) {
    h->nvlinks.push_back(NvLink(0, 2, kGpuBus[1]));
    h->nvlinks.push_back(NvLink(0, 3, kGpuBus[1], {}, 12500));
  }
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].gpu, 0);
  EXPECT_EQ(changes[0].link, 3);
  EXPECT_EQ(changes[0].trained, "12500 MB/s of the 25000 its other links run at");
  EXPECT_FALSE(changes[0].narrowed_between);

  before.nvlinks[4].speed_mbps = 25000;  // it was at full speed at the start
  changes = CompareLinkHealth(before, after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].narrowed_between);
}

TEST(LinkHealth, IdenticalReadingsHaveNoChange) {
  LinkHealth h = Node();
  h.nvlinks[0].counters = {{"replay", 5}, {"crc_flit", std::nullopt}};
  EXPECT_TRUE(CompareLinkHealth(h, h).empty());
}

// --- which pairs a change is charged to ------------------------------------------------------------

LinkChange Changed(const LinkHealth& h, int gpu, int link) {
  LinkHealth after = h;
  for (NvLinkHealth& l : after.nvlinks)
    if (l.gpu == gpu && l.link == link) l.counters = {{"replay", 1}};
  LinkHealth before = h;
  for (NvLinkHealth& l : before.nvlinks)
    if (l.gpu == gpu && l.link == link) l.counters = {{"replay", 0}};
  std::vector<LinkChange> changes = CompareLinkHealth(before, after);
  EXPECT_EQ(changes.size(), 1u);
  return changes.empty() ? LinkChange{} : changes[0];
}

LinkChange PortChange(const LinkHealth& h, const std::string& bus) {
  LinkHealth after = h;
  PortOf(after, bus).width = 8;
  std::vector<LinkChange> changes = CompareLinkHealth(h, after);
  EXPECT_EQ(changes.size(), 1u);
  return changes.empty() ? LinkChange{} : changes[0];
}

TEST(LinkHealth, AnNvLinkToAGpuCarriesThatPairOnly) {
  LinkHealth h = Node();
  LinkChange c = Changed(h, 0, 0);  // GPU0 -> GPU1
  ASSERT_TRUE(c.nvlink);
  EXPECT_TRUE(PairCrosses(c, 0, 1, LinkRoute::kNvLink, h));
  EXPECT_TRUE(PairCrosses(c, 1, 0, LinkRoute::kNvLink, h));
  EXPECT_FALSE(PairCrosses(c, 0, 2, LinkRoute::kNvLink, h));  // GPU0's other link carries that one
  EXPECT_FALSE(PairCrosses(c, 2, 0, LinkRoute::kNvLink, h));
  EXPECT_FALSE(PairCrosses(c, 1, 2, LinkRoute::kNvLink, h));
  EXPECT_FALSE(PairCrosses(c, 0, -1, LinkRoute::kNvLink, h));
  EXPECT_FALSE(PairCrosses(c, 0, 1, LinkRoute::kPcieP2p, h));
  EXPECT_FALSE(PairCrosses(c, 0, 1, LinkRoute::kThroughHost, h));
}

TEST(LinkHealth, AnNvLinkToAnNvSwitchCarriesEveryNvLinkPairOfItsGpu) {
  LinkHealth h = Node();
  LinkChange c = Changed(h, 3, 0);
  for (int peer : {0, 1, 2}) {
    EXPECT_TRUE(PairCrosses(c, 3, peer, LinkRoute::kNvLink, h)) << peer;
    EXPECT_TRUE(PairCrosses(c, peer, 3, LinkRoute::kNvLink, h)) << peer;
    EXPECT_FALSE(PairCrosses(c, 3, peer, LinkRoute::kPcieP2p, h)) << peer;
    EXPECT_FALSE(PairCrosses(c, 3, peer, LinkRoute::kThroughHost, h)) << peer;
  }
  EXPECT_FALSE(PairCrosses(c, 0, 1, LinkRoute::kNvLink, h));   // not GPU3's traffic
  EXPECT_FALSE(PairCrosses(c, 3, -1, LinkRoute::kNvLink, h));  // a peer on another node: no NVLink of this one
}

TEST(LinkHealth, AnNvLinkWhoseRemoteIsUnknownIsChargedToNobody) {
  LinkHealth h = Node();
  h.nvlinks[0].remote = "";
  LinkChange c = Changed(h, 0, 0);
  EXPECT_FALSE(PairCrosses(c, 0, 1, LinkRoute::kNvLink, h));
  EXPECT_FALSE(PairCrosses(c, 0, 2, LinkRoute::kNvLink, h));
}

TEST(LinkHealth, ABridgeIsCrossedByPcieP2pLeavingItsGpusAndByHostTrafficOfEither) {
  LinkHealth h = Node();
  LinkChange c = PortChange(h, kBridge01);  // above GPUs 0 and 1
  ASSERT_EQ(c.below, (std::vector<int>{0, 1}));
  // P2P goes up to the pair's nearest common bridge: 0->1 turns below this one, 0->2 goes through it.
  EXPECT_TRUE(PairCrosses(c, 0, 2, LinkRoute::kPcieP2p, h));
  EXPECT_TRUE(PairCrosses(c, 3, 1, LinkRoute::kPcieP2p, h));
  EXPECT_FALSE(PairCrosses(c, 0, 1, LinkRoute::kPcieP2p, h));
  EXPECT_FALSE(PairCrosses(c, 2, 3, LinkRoute::kPcieP2p, h));
  // Staged in host memory: each GPU's whole way to the root.
  EXPECT_TRUE(PairCrosses(c, 0, 1, LinkRoute::kThroughHost, h));
  EXPECT_TRUE(PairCrosses(c, 2, 1, LinkRoute::kThroughHost, h));
  EXPECT_FALSE(PairCrosses(c, 2, 3, LinkRoute::kThroughHost, h));
  EXPECT_FALSE(PairCrosses(c, 0, 1, LinkRoute::kNvLink, h));
  EXPECT_FALSE(PairCrosses(c, 0, 2, LinkRoute::kNvLink, h));
}

TEST(LinkHealth, APeerOnAnotherNodeChargesOnlyThisNodesGpusWay) {
  LinkHealth h = Node();
  LinkChange bridge = PortChange(h, kBridge01);
  EXPECT_TRUE(PairCrosses(bridge, 1, -1, LinkRoute::kThroughHost, h));
  EXPECT_FALSE(PairCrosses(bridge, 2, -1, LinkRoute::kThroughHost, h));
  LinkChange gpu = PortChange(h, kGpuBus[2]);
  EXPECT_TRUE(PairCrosses(gpu, 2, -1, LinkRoute::kThroughHost, h));
  EXPECT_FALSE(PairCrosses(gpu, 3, -1, LinkRoute::kThroughHost, h));
}

TEST(LinkHealth, AGpusOwnPortIsCrossedByEveryPcieWayOfThatGpu) {
  LinkHealth h = Node();
  LinkChange c = PortChange(h, kGpuBus[0]);
  EXPECT_TRUE(PairCrosses(c, 0, 1, LinkRoute::kPcieP2p, h));
  EXPECT_TRUE(PairCrosses(c, 2, 0, LinkRoute::kPcieP2p, h));
  EXPECT_TRUE(PairCrosses(c, 0, 3, LinkRoute::kThroughHost, h));
  EXPECT_FALSE(PairCrosses(c, 1, 2, LinkRoute::kPcieP2p, h));
  EXPECT_FALSE(PairCrosses(c, 1, 2, LinkRoute::kThroughHost, h));
  EXPECT_FALSE(PairCrosses(c, 0, 1, LinkRoute::kNvLink, h));
}

// --- routes --------------------------------------------------------------------------------------

TEST(LinkHealth, RouteOfEachTransport) {
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_NVLINK, ""), LinkRoute::kNvLink);
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_NVLS, ""), LinkRoute::kNvLink);
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_PCIE_P2P, ""), LinkRoute::kPcieP2p);
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_PCIE_P2P, "NV6"), LinkRoute::kPcieP2p);  // the class wins over the label
  // Direct, class unknown: nvidia-smi's label says which links.
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_P2P, "NV6"), LinkRoute::kNvLink);
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_P2P, "NV18"), LinkRoute::kNvLink);
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_P2P, "PIX"), LinkRoute::kPcieP2p);
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_P2P, "PXB"), LinkRoute::kPcieP2p);
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_P2P, ""), std::nullopt);
  for (int t : {P2PTRACE_TRANSPORT_SHM, P2PTRACE_TRANSPORT_HOST_STAGED, P2PTRACE_TRANSPORT_NET_GDR,
                P2PTRACE_TRANSPORT_NET_IB, P2PTRACE_TRANSPORT_NET_SOCKET, P2PTRACE_TRANSPORT_COLLNET})
    EXPECT_EQ(RouteOf(t, "NV6"), LinkRoute::kThroughHost) << t;
  for (int t : {P2PTRACE_TRANSPORT_UNKNOWN, P2PTRACE_TRANSPORT_P2P_INDIRECT, P2PTRACE_TRANSPORT_SAME_DEVICE})
    EXPECT_EQ(RouteOf(t, "NV6"), std::nullopt) << t;
  EXPECT_EQ(RouteOf(P2PTRACE_TRANSPORT_COUNT_, "PIX"), std::nullopt);
}

// --- unsupported counters, fixes -----------------------------------------------------------------

TEST(LinkHealth, UnsupportedCountersAreGroupedByHowManyLinksLackedThem) {
  LinkHealth h = Node();
  for (NvLinkHealth& l : h.nvlinks) l.counters = {{"replay", 0}, {"crc_flit", std::nullopt}, {"crc_data", std::nullopt}};
  h.nvlinks[2].counters.push_back({"recovery", std::nullopt});
  h.nvlinks[0].counters.push_back({"recovery", 3});
  h.nvlinks[1].counters.push_back({"recovery", 3});
  for (PciePortHealth& p : h.pcie) p.counters = {{"aer_correctable", 0}};
  h.pcie[4].counters[0].value = std::nullopt;
  h.pcie[5].counters[0].value = std::nullopt;
  EXPECT_EQ(UnsupportedCounters(h), (std::vector<std::string>{"NVLink, 1 of 3 links: recovery",
                                                              "NVLink, all 3 links: crc_data, crc_flit",
                                                              "PCIe, 2 of 6 ports: aer_correctable"}));
  for (NvLinkHealth& l : h.nvlinks) l.counters = {{"replay", 0}};
  for (PciePortHealth& p : h.pcie) p.counters = {{"aer_correctable", 0}};
  EXPECT_TRUE(UnsupportedCounters(h).empty());
}

TEST(LinkHealth, TheFixDependsOnTheChangesKindAndLink) {
  LinkChange nv_errors, pcie_errors, nv_down, pcie_narrow;
  nv_errors.nvlink = nv_down.nvlink = true;
  nv_down.kind = pcie_narrow.kind = LinkChange::Kind::kDowntrained;
  pcie_errors.bus_id = pcie_narrow.bus_id = kBridge01;
  std::vector<std::string> fixes = {LinkChangeFix(nv_errors), LinkChangeFix(pcie_errors), LinkChangeFix(nv_down),
                                    LinkChangeFix(pcie_narrow)};
  for (size_t i = 0; i < fixes.size(); ++i)
    for (size_t j = i + 1; j < fixes.size(); ++j) EXPECT_NE(fixes[i], fixes[j]) << i << " " << j;
  EXPECT_NE(fixes[0].find("dcgmi diag"), std::string::npos) << fixes[0];
  EXPECT_NE(fixes[1].find("lspci -vvv -s 0000:17:00.0"), std::string::npos) << fixes[1];
  EXPECT_NE(fixes[3].find("lspci -vvv -s 0000:17:00.0"), std::string::npos) << fixes[3];
}

}  // namespace
}  // namespace p2ptrace
