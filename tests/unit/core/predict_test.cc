// core/predict and core/causes: NCCL's P2P rules by version, CPU vendor and GPU count, the
// environment's precedence, the node facts that close P2P or SHM, and the causes named per pair.
#include "core/predict.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/causes.h"
#include "core/vocabulary.h"

namespace {

using namespace p2ptrace;

// A node of `n` GPUs where every pair has the link `link` (pairs in `links` override it).
NodeFacts Node(int n, const std::string& link, std::map<std::pair<int, int>, std::string> links = {}) {
  NodeFacts f;
  f.sources.push_back("test");
  for (int i = 0; i < n; ++i) f.gpus.push_back(GpuFacts{.index = i});
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      PairFacts p;
      p.a = a;
      p.b = b;
      auto it = links.find({a, b});
      p.link = it == links.end() ? link : it->second;
      f.pairs.push_back(p);
    }
  return f;
}

const PairPrediction& PairOf(const Prediction& p, int a, int b) {
  for (const auto& q : p.pairs)
    if (q.a == a && q.b == b) return q;
  static PairPrediction none;
  ADD_FAILURE() << "no pair " << a << "-" << b;
  return none;
}

std::string Class(const Prediction& p, int a, int b) { return std::string(TransportName(PairOf(p, a, b).transport)); }

std::vector<std::string> Ids(const PairPrediction& p) {
  std::vector<std::string> ids;
  for (const auto& c : p.causes) ids.push_back(c.id);
  return ids;
}

NodeFacts With(NodeFacts f, std::string v, CpuVendor vendor) {
  f.nccl_version = ParseNcclVersion(v);
  f.cpu_vendor = vendor;
  return f;
}

TEST(Predict, ParsesVersionsVendorsAndLevels) {
  EXPECT_EQ(ParseNcclVersion("2.21.5+cuda12.4"), (NcclVersion{2, 21, 5}));
  EXPECT_EQ(ParseNcclVersion("2.7.8-1"), (NcclVersion{2, 7, 8}));
  EXPECT_EQ(ParseNcclVersion("2.18"), (NcclVersion{2, 18, 0}));
  EXPECT_FALSE(ParseNcclVersion("two"));
  EXPECT_FALSE(ParseNcclVersion("3.0.0"));
  EXPECT_EQ(ParseCpuVendor("AuthenticAMD"), CpuVendor::kAmd);
  EXPECT_FALSE(ParseCpuVendor("sparc"));
  EXPECT_EQ(ParseNcclLevel("NODE"), NcclLevel::kPHB);
  EXPECT_EQ(ParseNcclLevel("0"), NcclLevel::kLOC);
  EXPECT_EQ(ParseNcclLevel("2"), NcclLevel::kPXB);
  EXPECT_EQ(ParseNcclLevel("7"), NcclLevel::kSYS);
  EXPECT_FALSE(ParseNcclLevel("FAST"));
}

// NCCL's default P2P level table (src/graph/paths.cc by release), one row per era.
TEST(Predict, DefaultP2pLevelByVersionVendorAndGpuCount) {
  struct Row {
    std::string version;
    CpuVendor vendor;
    bool bdw;
    int gpus;
    std::string link, want;
  };
  const Row rows[] = {
      {"2.6.4", CpuVendor::kIntel, false, 4, "SYS", "pcie_p2p"},  // 2.6: SYS except Broadwell/ARM
      {"2.6.4", CpuVendor::kIntel, true, 4, "PHB", "shm"},
      {"2.6.4", CpuVendor::kArm, false, 4, "PXB", "pcie_p2p"},
      {"2.7.8", CpuVendor::kIntel, false, 4, "NODE", "pcie_p2p"},  // Skylake+: PHB (NODE is PHB)
      {"2.7.8", CpuVendor::kIntel, false, 4, "SYS", "shm"},
      {"2.7.8", CpuVendor::kIntel, true, 4, "PHB", "shm"},  // Broadwell: PXB
      {"2.8.3", CpuVendor::kAmd, false, 8, "SYS", "pcie_p2p"},
      {"2.10.3", CpuVendor::kIntel, false, 4, "PXB", "pcie_p2p"},
      {"2.10.3", CpuVendor::kIntel, false, 4, "PHB", "shm"},
      {"2.21.5", CpuVendor::kAmd, false, 8, "SYS", "pcie_p2p"},
      {"2.21.5", CpuVendor::kUnknown, false, 8, "SYS", "pcie_p2p"},
      {"2.23.4", CpuVendor::kAmd, false, 2, "SYS", "pcie_p2p"},  // AMD with <= 2 GPUs: SYS
      {"2.23.4", CpuVendor::kAmd, false, 3, "SYS", "shm"},
      {"2.27.5", CpuVendor::kUnknown, false, 2, "PHB", "shm"},
      {"2.27.5", CpuVendor::kIntel, false, 2, "NV12", "nvlink"},
  };
  for (const Row& r : rows) {
    NodeFacts f = With(Node(r.gpus, r.link), r.version, r.vendor);
    if (r.bdw) f.intel_pre_skylake = true;
    Prediction p = Predict(f);
    EXPECT_EQ(Class(p, 0, 1), r.want) << r.version << " " << CpuVendorName(r.vendor) << (r.bdw ? " bdw " : " ") << r.gpus
                                      << " GPUs " << r.link;
    EXPECT_TRUE(p.assumptions.empty() || r.vendor == CpuVendor::kUnknown || (r.vendor == CpuVendor::kIntel && !r.bdw))
        << r.version;
  }
  // Every release counts the communicator's GPUs on the node, not the node's (paths.cc counts the
  // nodes of the communicator's topology): 2 GPUs of a 4-GPU AMD node use P2P across sockets, in
  // 2.27, 2.30.7 and 2.31 (the dev branch) alike.
  NodeFacts f = With(Node(4, "SYS"), "2.27.5", CpuVendor::kAmd);
  f.communicator = {0, 1};
  for (NcclVersion v : {NcclVersion{2, 27, 5}, NcclVersion{2, 30, 7}, NcclVersion{2, 31, 0}}) {
    f.nccl_version = v;
    Prediction p = Predict(f);
    EXPECT_EQ(Class(p, 0, 1), "pcie_p2p") << v.major << "." << v.minor << "." << v.patch;
    EXPECT_EQ(p.gpu_count, 2);
  }
  // From 2.30.3 ranks may share a GPU (NCCL_MULTI_RANK_GPU_ENABLE=1): paths.cc counts devices
  // (nodes[DEV]), so 4 ranks on GPUs 0 and 1 are still "2 GPUs"; before, it counted one per rank.
  f.communicator = {0, 0, 1, 1};
  f.nccl_version = NcclVersion{2, 31, 0};
  EXPECT_EQ(Class(Predict(f), 0, 1), "pcie_p2p");
  f.nccl_version = NcclVersion{2, 30, 2};
  EXPECT_EQ(Class(Predict(f), 0, 1), "shm");
  // More than 2 GPUs in the communicator: PXB, so SYS is beyond it.
  f.communicator = {0, 1, 2};
  f.nccl_version = NcclVersion{2, 31, 0};
  EXPECT_EQ(Class(Predict(f), 0, 1), "shm");
}

TEST(Predict, P2pDisableWinsOverLevelAndOnlyTheValueOneDisables) {
  NodeFacts f = With(Node(2, "NV12"), "2.21.5", CpuVendor::kIntel);
  f.env = {{"NCCL_P2P_DISABLE", "1"}, {"NCCL_P2P_LEVEL", "NVL"}};
  Prediction p = Predict(f);
  const PairPrediction& q = PairOf(p, 0, 1);
  EXPECT_EQ(Class(p, 0, 1), "shm");
  EXPECT_TRUE(q.fallback);
  EXPECT_EQ(TransportName(q.best), "nvlink");
  ASSERT_EQ(Ids(q), std::vector<std::string>{"env-p2p-disabled"});
  EXPECT_EQ(q.causes[0].role, "decided");
  EXPECT_NE(q.causes[0].evidence.back().find("NCCL_P2P_LEVEL=NVL is ignored"), std::string::npos);
  EXPECT_NE(q.impact.find("~6-40x"), std::string::npos) << q.impact;
  f.env = {{"NCCL_P2P_DISABLE", "0"}};
  EXPECT_EQ(Class(Predict(f), 0, 1), "nvlink");
  f.env = {{"NCCL_P2P_LEVEL", "LOC"}};
  EXPECT_EQ(Ids(PairOf(Predict(f), 0, 1)), std::vector<std::string>{"env-p2p-level"});
}

TEST(Predict, LevelBelowThePathNamesTheVariableElseTheTopology) {
  NodeFacts f = With(Node(3, "PIX", {{{0, 2}, "SYS"}, {{1, 2}, "SYS"}}), "2.21.5", CpuVendor::kIntel);
  Prediction p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "pcie_p2p");
  EXPECT_EQ(Ids(PairOf(p, 0, 2)), (std::vector<std::string>{"topology-beyond-p2p-level", "no-nvlink"}));
  f.env = {{"NCCL_P2P_LEVEL", "NVL"}};
  p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "shm");
  EXPECT_EQ(Ids(PairOf(p, 0, 1)).front(), "env-p2p-level");
  f.env = {{"NCCL_P2P_LEVEL", "SYS"}};
  EXPECT_EQ(Class(Predict(f), 0, 2), "pcie_p2p");
}

TEST(Predict, NvmlStatusAndCudaClosePeerAccess) {
  NodeFacts f = With(Node(2, "PHB"), "2.27.5", CpuVendor::kAmd);
  f.pairs[0].nvml_read = P2pStatus::kChipsetNotSupported;
  f.virtualization = Virtualization::kPassthrough;
  Prediction p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "shm");
  EXPECT_EQ(Ids(PairOf(p, 0, 1)), (std::vector<std::string>{"nvml-p2p-status", "virtualized", "no-nvlink"}));
  EXPECT_NE(PairOf(p, 0, 1).causes[0].evidence[0].find("CNS"), std::string::npos);
  f.env["NCCL_IGNORE_DISABLED_P2P"] = "1";
  EXPECT_EQ(Class(Predict(f), 0, 1), "pcie_p2p");
  // NVLink pair with P2P disabled by the driver: NCCL >= 2.12 stops.
  NodeFacts nv = With(Node(2, "NV4"), "2.21.5", CpuVendor::kIntel);
  nv.pairs[0].nvml_write = P2pStatus::kDisabledByRegkey;
  EXPECT_TRUE(PairOf(Predict(nv), 0, 1).init_error);
  nv.pairs[0].nvml_write = P2pStatus::kOk;
  nv.pairs[0].cuda_can_access = false;
  EXPECT_EQ(Ids(PairOf(Predict(nv), 0, 1)), std::vector<std::string>{"cuda-no-peer-access"});
}

TEST(Predict, ConsumerGpusMigAndIommu) {
  NodeFacts f = With(Node(2, "PIX"), "2.27.5", CpuVendor::kIntel);
  f.gpus[0].name = f.gpus[1].name = "NVIDIA GeForce RTX 4090";
  Prediction p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "shm");
  EXPECT_EQ(Ids(PairOf(p, 0, 1)).front(), "consumer-gpu");
  f.pairs[0].nvml_read = P2pStatus::kOk;  // a patched driver
  f.pairs[0].cuda_can_access = true;
  f.iommu = IommuMode::kTranslating;
  f.pairs[0].split_iommu_groups = true;
  p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "pcie_p2p");
  EXPECT_FALSE(PairOf(p, 0, 1).fallback);
  EXPECT_EQ(Ids(PairOf(p, 0, 1)), (std::vector<std::string>{"acs-suspected", "iommu-enabled", "no-nvlink"}));
  EXPECT_EQ(PairOf(p, 0, 1).causes[0].role, "risk");
  f.pairs[0].acs_redirect = true;
  EXPECT_EQ(Ids(PairOf(Predict(f), 0, 1)).front(), "acs-redirect");
  f.gpus[1].mig = true;
  EXPECT_EQ(Ids(PairOf(Predict(f), 0, 1)).front(), "mig-enabled");
}

TEST(Predict, ContainersShmAndTheNetwork) {
  NodeFacts f = With(Node(2, "NV12"), "2.27.5", CpuVendor::kIntel);
  f.gpus[0].hostname = "pod-a";
  f.gpus[1].hostname = "pod-b";
  f.gpus[0].shm_dev = 10;
  f.gpus[1].shm_dev = 11;
  f.rdma_nics = false;
  Prediction p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "net_socket");
  EXPECT_EQ(Ids(PairOf(p, 0, 1)), (std::vector<std::string>{"container-separate-host", "container-separate-shm"}));
  f.env["NCCL_HOSTID"] = "node7";  // same host hash; /dev/shm still differs
  EXPECT_EQ(Ids(PairOf(Predict(f), 0, 1)).front(), "container-separate-shm");
  f.gpus[1].shm_dev = 10;
  EXPECT_EQ(Class(Predict(f), 0, 1), "nvlink");
  // SHM off and no P2P: the network, GPUDirect RDMA decides net_gdr vs net_ib.
  f.env = {{"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}};
  f.gpus[0].hostname = f.gpus[1].hostname = "node";
  f.rdma_nics = true;
  f.gdr = false;
  p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "net_ib");
  EXPECT_EQ(Ids(PairOf(p, 0, 1)), (std::vector<std::string>{"env-p2p-disabled", "env-shm-disabled", "no-gdr"}));
  f.gdr = true;
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_gdr");
  f.env["NCCL_IB_DISABLE"] = "1";
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_socket");
  // SHM taken on a container with Docker's default /dev/shm.
  NodeFacts s = With(Node(2, "SYS"), "2.27.5", CpuVendor::kIntel);
  s.gpus[0].shm_bytes = 64ull << 20;
  p = Predict(s);
  EXPECT_EQ(Class(p, 0, 1), "shm");
  EXPECT_EQ(Ids(PairOf(p, 0, 1)), (std::vector<std::string>{"topology-beyond-p2p-level", "shm-too-small", "no-nvlink"}));
}

// GPUDirect RDMA's distance rule on a GPU's side of a cross-node pair: NCCL_NET_GDR_LEVEL (2.6+:
// the path at most the level, default PXB; 2.4-2.5: closer than it, default PHB).
TEST(Predict, GdrNeedsTheGpuNearItsNic) {
  NodeFacts f = With(Node(2, "NV12"), "2.27.5", CpuVendor::kIntel);
  f.gpus[0].hostname = "node0";
  f.gpus[1].hostname = "node1";
  f.gpus[0].boot_id = "a";
  f.gpus[1].boot_id = "b";
  f.rdma_nics = true;
  f.gdr = true;
  f.gpus[0].nic = "mlx5_0";
  f.gpus[0].nic_path = PathType::kPXB;
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_gdr");
  f.gpus[0].nic_path = PathType::kPHB;
  Prediction p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "net_ib");
  ASSERT_EQ(Ids(PairOf(p, 0, 1)).front(), "gdr-distance");
  EXPECT_EQ(PairOf(p, 0, 1).causes[0].evidence[0],
            "GPU0 and mlx5_0, the RDMA NIC NCCL pairs it with, are PHB apart, beyond NCCL_NET_GDR_LEVEL PXB (NCCL 2.27.5's "
            "default); NVLinks not known (NVML did not answer): an NVLink peer near a NIC would relay it (PXN) and keep GDR");
  f.sources.push_back("NVML");  // the NVLinks are known: none to relay through
  EXPECT_EQ(PairOf(Predict(f), 0, 1).causes[0].evidence[0],
            "GPU0 and mlx5_0, the RDMA NIC NCCL pairs it with, are PHB apart, beyond NCCL_NET_GDR_LEVEL PXB (NCCL 2.27.5's default)");
  f.env["NCCL_NET_GDR_LEVEL"] = "NODE";  // NODE is NCCL's PHB
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_gdr");
  f.gpus[0].nic_path = PathType::kSYS;
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_ib");
  f.env["NCCL_NET_GDR_LEVEL"] = "SYS";
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_gdr");
  // 2.5: the level excludes itself; the default PHB lets PXB through, not PHB.
  f = With(f, "2.5.6", CpuVendor::kIntel);
  f.env.clear();
  f.gpus[0].nic_path = PathType::kPXB;
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_gdr");
  f.gpus[0].nic_path = PathType::kPHB;
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_ib");
  f.env["NCCL_NET_GDR_LEVEL"] = "PHB";
  EXPECT_EQ(Class(Predict(f), 0, 1), "net_ib") << "2.5 wants the path closer than the level";
  // No GPUDirect RDMA at all is said first; the distance only matters where it exists.
  f.gdr = false;
  EXPECT_EQ(Ids(PairOf(Predict(f), 0, 1)).front(), "no-gdr");
}

// From 2.12 a GPU far from the NICs reaches one through an NVLink peer near it (PXN): the peer's
// distance is the one NCCL checks.
TEST(Predict, PxnRelaysAFarGpuThroughAnNvlinkPeer) {
  NodeFacts f = With(Node(3, "NV12"), "2.27.5", CpuVendor::kIntel);
  f.rdma_nics = true;
  f.gdr = true;
  for (GpuFacts& g : f.gpus) g.hostname = "node0", g.nic = "mlx5_0";
  f.gpus[0].nic_path = PathType::kPIX;
  f.gpus[1].nic_path = PathType::kSYS;
  f.gpus[2].nic_path = PathType::kSYS;
  PairPrediction relayed = PredictToOtherNode(f, 1);
  EXPECT_EQ(TransportName(relayed.transport), "net_gdr") << "GPU0 relays GPU1's traffic";
  f.env["NCCL_PXN_DISABLE"] = "1";
  PairPrediction direct = PredictToOtherNode(f, 1);
  EXPECT_EQ(TransportName(direct.transport), "net_ib");
  EXPECT_EQ(Ids(direct).front(), "gdr-distance");
  f.env.clear();
  f = With(f, "2.11.4", CpuVendor::kIntel);  // before PXN
  EXPECT_EQ(TransportName(PredictToOtherNode(f, 1).transport), "net_ib");
  // The relay must be in the communicator.
  f = With(f, "2.27.5", CpuVendor::kIntel);
  f.communicator = {1, 2};
  EXPECT_EQ(TransportName(PredictToOtherNode(f, 1).transport), "net_ib");
}

// doctor's question: from a GPU here to one on another node set up like this one.
TEST(Predict, ToAnotherNodeUsesThisSidesNetwork) {
  NodeFacts f = With(Node(2, "NV12"), "2.27.5", CpuVendor::kIntel);
  f.rdma_nics = true;
  f.gdr = true;
  f.gpus[1].nic = "mlx5_0";
  f.gpus[1].nic_path = PathType::kSYS;
  PairPrediction near = PredictToOtherNode(f, 0);
  EXPECT_EQ(near.b, kOtherNodeGpu);
  EXPECT_EQ(TransportName(near.transport), "net_gdr");
  EXPECT_FALSE(near.fallback);
  PairPrediction far = PredictToOtherNode(f, 1);
  EXPECT_EQ(TransportName(far.transport), "net_ib");
  EXPECT_TRUE(far.fallback);
  EXPECT_EQ(Ids(far).front(), "gdr-distance");
  f.rdma_nics = false;
  EXPECT_EQ(TransportName(PredictToOtherNode(f, 0).transport), "net_socket");
}

TEST(Predict, LinkHealthRisks) {
  NodeFacts f = With(Node(2, "NV12"), "2.27.5", CpuVendor::kIntel);
  f.pairs[0].nvlinks_present = 12;
  f.pairs[0].nvlinks_active = 8;
  f.pairs[0].measured_gbps = 40;
  Prediction p = Predict(f);
  EXPECT_EQ(Ids(PairOf(p, 0, 1)), (std::vector<std::string>{"nvlink-down", "p2p-degraded"}));
  NodeFacts g = With(Node(2, "PIX"), "2.27.5", CpuVendor::kIntel);
  g.gpus[1].pcie = PcieLink{3, 16, 4, 16};
  EXPECT_EQ(Ids(PairOf(Predict(g), 0, 1)).front(), "pcie-downtrained");
}

// NVSwitch boards: NVML's links end at the switches, the PCIe path between the sockets is SYS;
// NCCL and CUDA still use P2P over NVLink, beyond any P2P level but LOC.
TEST(Predict, NvlinkWhateverThePciePathSays) {
  NodeFacts f = With(Node(2, "SYS"), "2.28.9", CpuVendor::kIntel);
  f.pairs[0].nvlinks_active = 18;
  Prediction p = Predict(f);
  EXPECT_EQ(Class(p, 0, 1), "nvlink");
  EXPECT_FALSE(PairOf(p, 0, 1).fallback);
  EXPECT_EQ(PairOf(p, 0, 1).link, "NV18");
  EXPECT_TRUE(PairOf(p, 0, 1).causes.empty()) << Ids(PairOf(p, 0, 1)).front();
  f.cuda_copies = true;
  EXPECT_EQ(Class(Predict(f), 0, 1), "nvlink");
  f.cuda_copies = false;
  f.env["NCCL_P2P_LEVEL"] = "PIX";  // NVL is within PIX
  EXPECT_EQ(Class(Predict(f), 0, 1), "nvlink");
  f.env["NCCL_P2P_LEVEL"] = "LOC";
  EXPECT_EQ(Class(Predict(f), 0, 1), "shm");
  NodeFacts down = With(Node(2, "SYS"), "2.28.9", CpuVendor::kIntel);
  down.pairs[0].nvlinks_present = 18;
  down.pairs[0].nvlinks_active = 0;  // every link down: PCIe's rules again
  EXPECT_EQ(Class(Predict(down), 0, 1), "shm");
}

TEST(Predict, UnknownsAreStatedAndAlternativesShown) {
  Prediction p = Predict(Node(2, "PHB"));
  ASSERT_EQ(p.assumptions.size(), 2u);
  const PairPrediction& q = PairOf(p, 0, 1);
  EXPECT_EQ(TransportName(q.transport), "shm");
  std::set<std::string> alts;
  for (const auto& a : q.alternatives) alts.insert(a.assumption + "=" + std::string(TransportName(a.transport)));
  EXPECT_TRUE(alts.count("CPU vendor amd=pcie_p2p")) << *alts.begin();
  EXPECT_FALSE(alts.count("CPU vendor intel=shm"));  // the same answer is no alternative
  // A cut-off cell: the level decides by the path, so the class is unknown unless the level is SYS.
  NodeFacts cut = With(Node(2, ""), "2.21.5", CpuVendor::kIntel);
  p = Predict(cut);
  EXPECT_EQ(Class(p, 0, 1), "unknown");
  EXPECT_EQ(Ids(PairOf(p, 0, 1)), std::vector<std::string>{"unknown"});
  EXPECT_NE(PairOf(p, 0, 1).causes[0].evidence.back().find("checked: test;"), std::string::npos);
  cut.env["NCCL_P2P_LEVEL"] = "SYS";
  EXPECT_EQ(Class(Predict(cut), 0, 1), "p2p");
}

TEST(Causes, CatalogCoversDesignIdsWithFixes) {
  for (std::string_view id :
       {"env-p2p-disabled", "env-p2p-level", "env-shm-disabled", "env-ib-disabled", "topology-beyond-p2p-level", "no-nvlink",
        "nvlink-down", "cuda-no-peer-access", "nvml-p2p-status", "consumer-gpu", "mig-enabled", "virtualized",
        "iommu-enabled", "acs-redirect", "acs-suspected", "peer-access-not-enabled", "container-separate-shm",
        "container-separate-host", "shm-too-small", "no-gdr", "pcie-downtrained", "p2p-degraded", "unknown"}) {
    const CauseInfo* c = FindCause(id);
    ASSERT_NE(c, nullptr) << id;
    EXPECT_FALSE(c->fix.empty()) << id;
    EXPECT_FALSE(c->title.empty()) << id;
  }
  std::set<std::string_view> ids;
  for (const CauseInfo& c : AllCauses()) EXPECT_TRUE(ids.insert(c.id).second) << "twice: " << c.id;
  // The seeds: disabling P2P is a diagnostic, never the fix.
  EXPECT_NE(FindCause("acs-redirect")->confirm.find("diagnostic"), std::string_view::npos);
  EXPECT_EQ(CauseForNcclRefusal("nvml-p2p-disabled-nvlink"), "nvml-p2p-status");
  EXPECT_NE(FindCause(CauseForNcclRefusal("no-gdr")), nullptr);
  EXPECT_EQ(ImpactText(P2PTRACE_TRANSPORT_NVLINK, P2PTRACE_TRANSPORT_SHM, "NV12", 0), "");
}

}  // namespace
