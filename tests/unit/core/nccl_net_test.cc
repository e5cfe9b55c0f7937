// core/nccl_net: NCCL's network lines in the format of each release that printed them
// (docs/research/nccl-net-lines.md names the source line of each), and lines that only look alike.
#include "core/nccl_net.h"

#include <gtest/gtest.h>

namespace {

using p2ptrace::GdrDecision;
using p2ptrace::NetDevice;
using p2ptrace::NetPath;
using p2ptrace::ParseGdrDecision;
using p2ptrace::ParseNetDevices;
using p2ptrace::ParseNetPath;

TEST(NetPath, EveryReleasesTransportText) {
  // 2.4–2.11: NIC, then /GDRDMA; 2.8+ /Shared; 2.12+ a PXN proxy rank; 2.27+ (PCI).
  EXPECT_EQ(*ParseNetPath("NET/IB/0"), (NetPath{"IB", 0, -1, false, false, false}));
  EXPECT_EQ(*ParseNetPath("NET/IB/3/GDRDMA"), (NetPath{"IB", 3, -1, true, false, false}));
  EXPECT_EQ(*ParseNetPath("NET/IB/1/Shared"), (NetPath{"IB", 1, -1, false, false, true}));
  EXPECT_EQ(*ParseNetPath("NET/IB/0(8)/GDRDMA"), (NetPath{"IB", 0, 8, true, false, false}));
  EXPECT_EQ(*ParseNetPath("NET/IB/2(17)/GDRDMA(PCI)/Shared"), (NetPath{"IB", 2, 17, true, true, true}));
  EXPECT_EQ(*ParseNetPath("NET/Socket/0"), (NetPath{"Socket", 0, -1, false, false, false}));
  EXPECT_EQ(*ParseNetPath("NET/AWS Libfabric/0/GDRDMA"), (NetPath{"AWS Libfabric", 0, -1, true, false, false}));
  EXPECT_EQ(*ParseNetPath("NET/IBext_v8/5/GDRDMA"), (NetPath{"IBext_v8", 5, -1, true, false, false}));
}

TEST(NetPath, OtherTransportsAndBrokenTextAreNoNetPath) {
  for (const char* t : {"P2P/IPC", "SHM/direct/direct", "NET/", "NET/IB", "NET/IB/x", "NET//0", "NET/IB/0(", "NET/IB/0(x)",
                        "NET/IB/-1", "CollNet/0"})
    EXPECT_FALSE(ParseNetPath(t)) << t;
}

TEST(NetDevices, IbRoceAndSocketLines) {
  auto ib = ParseNetDevices("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>");
  ASSERT_TRUE(ib);
  ASSERT_EQ(ib->size(), 2u);  // "[RO]" (relaxed ordering) is no device
  EXPECT_EQ((*ib)[0], (NetDevice{"IB", 0, "mlx5_0", 1, "IB", {}, "", ""}));
  EXPECT_EQ((*ib)[1], (NetDevice{"IB", 1, "mlx5_1", 1, "RoCE", {}, "", ""}));
  auto sharp = ParseNetDevices("NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_4:1/IB/SHARP ; OOB bond0:10.1.1.2<0>");
  ASSERT_TRUE(sharp);
  ASSERT_EQ(sharp->size(), 2u);
  EXPECT_EQ((*sharp)[1].flags, std::vector<std::string>{"SHARP"});
  auto sock = ParseNetDevices("NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:fe80::1%eth1<0>");
  ASSERT_TRUE(sock);
  ASSERT_EQ(sock->size(), 2u);
  EXPECT_EQ((*sock)[0], (NetDevice{"Socket", 0, "", -1, "", {}, "eth0", "10.0.0.1<0>"}));
  EXPECT_EQ((*sock)[1].address, "fe80::1%eth1<0>");
  EXPECT_FALSE(ParseNetDevices("NET/IB : No device found."));
  EXPECT_FALSE(ParseNetDevices("Using network IB"));
}

TEST(GdrDecision, PerGpuWithTheDistanceRuleAndPerNic) {
  GdrDecision off = *ParseGdrDecision("GPU Direct RDMA Disabled for GPU ca000 / HCA 0 (distance 7 > 4)");
  EXPECT_FALSE(off.enabled);
  EXPECT_EQ(off.gpu, "ca000");
  EXPECT_EQ(off.hca, 0);
  EXPECT_EQ(off.distance, 7);
  EXPECT_EQ(off.level, 4);
  GdrDecision on = *ParseGdrDecision("GPU Direct RDMA Enabled for GPU 81000 / HCA 1 (distance 6 <= 7), read 1");
  EXPECT_TRUE(on.enabled);
  EXPECT_EQ(on.distance, 6);
  EXPECT_EQ(on.level, 7);
  EXPECT_EQ(on.read, 1);
  GdrDecision v24 = *ParseGdrDecision("NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)");
  EXPECT_EQ(v24.gpu, "2[2]");
  EXPECT_EQ(v24.distance, 3);
  EXPECT_EQ(v24.level, 2);
  GdrDecision module = *ParseGdrDecision("NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)");
  EXPECT_TRUE(module.no_module);
  EXPECT_EQ(module.hca, 1);
  EXPECT_EQ(module.hca_name, "mlx5_1");
  EXPECT_EQ(module.distance, -1);
  GdrDecision nic = *ParseGdrDecision("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'");
  EXPECT_FALSE(nic.no_module);  // 2.13+: neither peer memory nor DMA-BUF, the line does not say which
  EXPECT_EQ(nic.hca_name, "mlx5_0");
  GdrDecision hex = *ParseGdrDecision("GPU Direct RDMA Enabled for GPU 3 / HCA 8f000 (distance 4 <= 5), read 1 mode Default");
  EXPECT_EQ(hex.hca, -1);  // 2.21+: the NIC's topology node id, not its index
  EXPECT_EQ(hex.gpu, "3");
  EXPECT_FALSE(ParseGdrDecision("GPU Direct RDMA is on"));
  EXPECT_FALSE(ParseGdrDecision("Channel 00/0 : 0[0] -> 1[1] via NET/IB/0/GDRDMA"));
}

TEST(NetFailures, TheLinesThatSendNcclToSockets) {
  EXPECT_EQ(p2ptrace::NetFailureKind("NET/IB : No device found."), "net-no-ib-device");
  EXPECT_EQ(p2ptrace::NetFailureKind("Failed to open libibverbs.so[.1]"), "net-no-verbs");
  EXPECT_EQ(p2ptrace::NetFailureKind("NET/Socket : Using [0]eth0:10.0.0.1<0>"), "");
  auto ring = p2ptrace::ParseRingNetUse("Connected all rings, use ring PXN 1 GDR 0");
  ASSERT_TRUE(ring);
  EXPECT_TRUE(ring->pxn);
  EXPECT_FALSE(ring->gdr);
  EXPECT_FALSE(p2ptrace::ParseRingNetUse("Connected all rings"));
}

}  // namespace

namespace p2ptrace {
namespace {

// NCCL_IB_HCA as NCCL's matchIfList reads it.
TEST(IbHca, PrefixExactPortsAndExclusion) {
  EXPECT_TRUE(IbHcaSelects("", "mlx5_0"));
  EXPECT_TRUE(IbHcaSelects("mlx5", "mlx5_10"));
  EXPECT_FALSE(IbHcaSelects("mlx5_1", "mlx5_0"));
  EXPECT_TRUE(IbHcaSelects("mlx5_1", "mlx5_10")) << "a prefix: mlx5_1 also selects mlx5_10";
  EXPECT_FALSE(IbHcaSelects("=mlx5_1", "mlx5_10"));
  EXPECT_TRUE(IbHcaSelects("=mlx5_1,mlx5_3", "mlx5_3"));
  EXPECT_TRUE(IbHcaSelects("mlx5_0:1", "mlx5_0", 1));
  EXPECT_FALSE(IbHcaSelects("mlx5_0:2", "mlx5_0", 1));
  EXPECT_FALSE(IbHcaSelects("^mlx5_0", "mlx5_0"));
  EXPECT_TRUE(IbHcaSelects("^mlx5_0", "mlx5_1"));
  EXPECT_FALSE(IbHcaSelects("^=mlx5_1", "mlx5_1"));
  EXPECT_TRUE(IbHcaSelects("^=mlx5_1", "mlx5_10"));
  EXPECT_FALSE(IbHcaSelects("^", "mlx5_0")) << "an empty list matches all, so ^ alone excludes all";
}

}  // namespace
}  // namespace p2ptrace
