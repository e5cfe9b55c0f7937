// The step from a probe to the predictor's facts for the network: each GPU's nearest NIC by the
// PCI chains, DMA-BUF from the kernel's release and the driver's flavour, and which of GPUDirect
// RDMA's means NCCL takes by release.
#include "core/node_probe.h"

#include "core/vocabulary.h"
#include "gtest/gtest.h"

namespace p2ptrace {
namespace {

ProbedGpu GpuAt(int index, std::vector<std::string> bridges, std::string root, int numa) {
  ProbedGpu g;
  g.index = index;
  g.bridges = std::move(bridges);
  g.root = std::move(root);
  g.numa_node = numa;
  return g;
}

NodeProbe::Nic NicAt(std::string name, std::vector<std::string> bridges, std::string root, int numa,
                     std::string state = "ACTIVE") {
  NodeProbe::Nic n;
  n.name = std::move(name);
  n.state = std::move(state);
  n.pci = {std::move(bridges), std::move(root), numa};
  return n;
}

// Two sockets: GPU0 shares a switch (02:00.0) with mlx5_0; GPU1 sits under another switch of the
// same root; GPU2 is on the other socket, where mlx5_1 is.
NodeProbe TwoSockets() {
  NodeProbe p;
  p.hostname = "h";
  p.rdma_nics = true;
  p.gpus = {GpuAt(0, {"0000:02:00.0", "0000:01:00.0"}, "pci0000:00", 0),
            GpuAt(1, {"0000:04:00.0", "0000:03:00.0"}, "pci0000:00", 0),
            GpuAt(2, {"0000:42:00.0", "0000:41:00.0"}, "pci0000:40", 1)};
  p.nics = {NicAt("mlx5_0", {"0000:02:00.0", "0000:01:00.0"}, "pci0000:00", 0),
            NicAt("mlx5_1", {"0000:43:00.0", "0000:41:00.0"}, "pci0000:40", 1)};
  return p;
}

TEST(NodeProbe, EachGpuPairsWithItsNearestActiveNic) {
  NodeProbe p = TwoSockets();
  std::vector<GpuNic> n = NearestNics(p);
  ASSERT_EQ(n.size(), 3u);
  EXPECT_EQ(n[0].nic, 0);
  EXPECT_EQ(n[0].path, "PIX");
  EXPECT_EQ(n[1].nic, 0);
  EXPECT_EQ(n[1].path, "PHB");
  EXPECT_EQ(n[2].nic, 1);
  EXPECT_EQ(n[2].path, "PXB");
  // A port that is down is not NCCL's: GPU2 then crosses the sockets.
  p.nics[1].state = "DOWN";
  n = NearestNics(p);
  EXPECT_EQ(n[2].nic, 0);
  EXPECT_EQ(n[2].path, "SYS");
  // Another host's GPU (told by its rank) has no NIC here.
  p.gpus[2].hostname = "elsewhere";
  EXPECT_EQ(NearestNics(p).size(), 2u);
  // The facts carry it for the predictor.
  NodeFacts f = FactsFromProbe(TwoSockets());
  EXPECT_EQ(f.Gpu(1)->nic, "mlx5_0");
  EXPECT_EQ(f.Gpu(1)->nic_path, PathType::kPHB);
}

TEST(NodeProbe, DmaBufNeedsLinux512AndTheOpenModules) {
  NodeProbe p;
  EXPECT_FALSE(DmaBufSupport(p).possible.has_value());
  p.kernel_release = "6.8.0-45-generic";
  EXPECT_FALSE(DmaBufSupport(p).possible.has_value()) << "the driver's flavour is not known";
  p.open_kernel_module = true;
  EXPECT_EQ(DmaBufSupport(p).possible, true);
  EXPECT_EQ(DmaBufSupport(p).why, "Linux 6.8.0 and the open GPU kernel modules");
  p.open_kernel_module = false;
  EXPECT_EQ(DmaBufSupport(p).possible, false);
  p.kernel_release = "5.4.0-150-generic";
  EXPECT_EQ(DmaBufSupport(p).possible, false);
  EXPECT_EQ(DmaBufSupport(p).why, "Linux 5.4.0 is older than 5.12");
  p.kernel_release = "5.12.0";
  p.open_kernel_module = true;
  EXPECT_EQ(DmaBufSupport(p).possible, true);
}

TEST(NodeProbe, GpuDirectRdmaAsEachReleaseTakesItsMeans) {
  NodeProbe p = TwoSockets();
  p.kernel_release = "5.15.0-1";
  p.open_kernel_module = true;  // DMA-BUF possible
  p.nccl_version = NcclVersion{2, 21, 5};
  EXPECT_EQ(FactsFromProbe(p).gdr, true) << "DMA-BUF from 2.13";
  p.env["NCCL_DMABUF_ENABLE"] = "0";
  NodeFacts f = FactsFromProbe(p);
  EXPECT_EQ(f.gdr, false);
  EXPECT_EQ(f.gdr_cause, "gdr-no-module");
  EXPECT_NE(f.gdr_evidence.find("NCCL_DMABUF_ENABLE=0"), std::string::npos) << f.gdr_evidence;
  p.env.clear();
  p.nccl_version = NcclVersion{2, 12, 12};
  f = FactsFromProbe(p);
  EXPECT_EQ(f.gdr, false);
  EXPECT_NE(f.gdr_evidence.find("NCCL 2.12.12 predates DMA-BUF (2.13)"), std::string::npos) << f.gdr_evidence;
  // nvidia_peermem loaded but not registered: before 2.23 not taken, from 2.23 taken.
  p.peermem_loaded = true;
  EXPECT_EQ(FactsFromProbe(p).gdr_cause, "peermem-not-registered");
  p.nccl_version = NcclVersion{2, 23, 4};
  p.open_kernel_module = false;
  EXPECT_EQ(FactsFromProbe(p).gdr, true);
  p.peermem_registered = true;
  p.nccl_version = NcclVersion{2, 8, 4};
  EXPECT_EQ(FactsFromProbe(p).gdr, true);
  // No RDMA NIC: GPUDirect RDMA is not a question.
  p.rdma_nics = false;
  EXPECT_FALSE(FactsFromProbe(p).gdr.has_value());
}

}  // namespace
}  // namespace p2ptrace

namespace p2ptrace {
namespace {

// GB200 before R595: DMA-BUF through a PCIe NIC needs GrdmaPciTopoCheckOverride=1 (NVIDIA AICR's NET
// preflight), else NCCL's network takes sockets.
TEST(NodeProbe, GraceBlackwellWithoutTheTopologyOverrideTakesSockets) {
  NodeProbe p = TwoSockets();
  for (ProbedGpu& g : p.gpus) g.name = "NVIDIA GB200";
  p.kernel_release = "6.8.0-1";
  p.open_kernel_module = true;
  p.driver_version = "570.133.20";
  p.regkeys = ParseNvidiaParams("ModifyDeviceFiles: 1\nEnablePCIeGen3: 0\n");
  EXPECT_FALSE(p.regkeys.grdma_topo_check_override.has_value());
  NodeFacts f = FactsFromProbe(p);
  EXPECT_EQ(f.net_blocker, "grdma-topo-check");
  EXPECT_NE(f.net_blocker_evidence.find("GPU0 is an NVIDIA GB200 on driver 570.133.20"), std::string::npos)
      << f.net_blocker_evidence;
  PairPrediction to = PredictToOtherNode(f, 0);
  EXPECT_EQ(TransportName(to.transport), "net_socket");
  ASSERT_FALSE(to.causes.empty());
  EXPECT_EQ(to.causes[0].id, "grdma-topo-check");

  // The knob set, as its own line or in RegistryDwords: nothing to say.
  p.regkeys = ParseNvidiaParams("GrdmaPciTopoCheckOverride: 1\n");
  EXPECT_EQ(FactsFromProbe(p).net_blocker, "");
  p.regkeys = ParseNvidiaParams("RegistryDwords: \"ForceP2P=0x11;GrdmaPciTopoCheckOverride=1\"\n");
  EXPECT_EQ(p.regkeys.grdma_topo_check_override, 1);
  EXPECT_EQ(FactsFromProbe(p).net_blocker, "");
  // R595 dropped the knob; nvidia_peermem does not go through DMA-BUF; an H100 is no Grace Blackwell.
  p.regkeys = {};
  p.driver_version = "595.10";
  EXPECT_EQ(FactsFromProbe(p).net_blocker, "");
  p.driver_version = "570.133.20";
  p.peermem_loaded = p.peermem_registered = true;
  EXPECT_EQ(FactsFromProbe(p).net_blocker, "");
  p.peermem_loaded = p.peermem_registered = false;
  for (ProbedGpu& g : p.gpus) g.name = "NVIDIA H100 80GB HBM3";
  EXPECT_EQ(FactsFromProbe(p).net_blocker, "");
}

}  // namespace
}  // namespace p2ptrace
