// core/net_diagnosis: the cause of every degraded NET connection in real logs (tests/fixtures/nccl-logs),
// read by hand from each log's own lines, and the rules on logs made for the cases no fixture holds.
#include "core/net_diagnosis.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace fs = std::filesystem;
using p2ptrace::NetFinding;
using p2ptrace::NetShortfall;

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path Fixture(const std::string& prefix) {
  for (const auto& e : fs::directory_iterator(NCCL_FIXTURE_DIR))
    if (e.path().extension() == ".log" && e.path().filename().string().starts_with(prefix)) return e.path();
  ADD_FAILURE() << "no fixture " << prefix;
  return {};
}

using Row = std::tuple<std::string, NetShortfall, std::string>;  // host, shortfall, cause

std::vector<Row> Diagnose(const std::vector<std::string>& prefixes) {
  std::vector<p2ptrace::NcclLog> logs;
  for (const std::string& p : prefixes) logs.push_back(p2ptrace::ParseNcclLog(Read(Fixture(p))));
  std::vector<p2ptrace::NamedNcclLog> named;
  for (size_t i = 0; i < logs.size(); ++i) named.push_back({prefixes[i], &logs[i]});
  std::vector<Row> rows;
  for (const NetFinding& f : p2ptrace::DiagnoseNet(named)) rows.emplace_back(f.host, f.shortfall, f.cause);
  return rows;
}

constexpr NetShortfall kSockets = NetShortfall::kSockets, kNoGdr = NetShortfall::kNoGdr;

TEST(NetDiagnosis, RealLogsNameTheCauseTheirLinesShow) {
  // Sockets after `Failed to open libibverbs.so` (2.4, 2.7) or `NET/IB : No device found.` (2.14+).
  EXPECT_EQ(Diagnose({"02-"}), (std::vector<Row>{{"tesla-105", kSockets, "net-no-verbs"}}));
  EXPECT_EQ(Diagnose({"10-"}), (std::vector<Row>{{"node01", kSockets, "net-no-verbs"}, {"node02", kSockets, "net-no-verbs"}}));
  EXPECT_EQ(Diagnose({"06-"}), (std::vector<Row>{{"VM-16-64-ubuntu", kSockets, "net-no-rdma-device"}}));
  EXPECT_EQ(Diagnose({"08-"}), (std::vector<Row>{{"lsp-ws1", kSockets, "net-no-rdma-device"}}));
  // GPUDirect RDMA refused by the distance rule (2.4: `distance 3 >= 2`), on both hosts.
  EXPECT_EQ(Diagnose({"41-"}), (std::vector<Row>{{"master_node", kNoGdr, "gdr-distance"},
                                                 {"secondary_node", kNoGdr, "gdr-distance"}}));
  // `(no module)` printed by one host: its connections are explained, the other host's are not.
  EXPECT_EQ(Diagnose({"47-"}), (std::vector<Row>{{"21346d5cefce", kNoGdr, "gdr-no-module"},
                                                 {"6a5a91752e39", kNoGdr, "gdr-off-unexplained"}}));
  // No GDR and no line that says why (2.22 IB, 2.21 IBext, EFA): said to be unexplained.
  EXPECT_EQ(Diagnose({"49-"}), (std::vector<Row>{{"swat1-04", kNoGdr, "gdr-off-unexplained"}}));
  EXPECT_EQ(Diagnose({"05-"}), (std::vector<Row>{{"bigo", kNoGdr, "gdr-off-unexplained"}}));
  EXPECT_EQ(Diagnose({"28-"}), (std::vector<Row>{{"ubuntu", kSockets, "net-socket-unexplained"}}));
  // GPUDirect RDMA on every connection, PXN relays included: nothing to say.
  EXPECT_TRUE(Diagnose({"48-"}).empty());
  EXPECT_TRUE(Diagnose({"52-"}).empty());
  EXPECT_TRUE(Diagnose({"20-"}).empty());
}

TEST(NetDiagnosis, OneHostsLinesExplainItsConnectionsInAnotherFile) {
  // nccl#226's two windows: receives over sockets on 15 hosts (46) and, earlier, each host's
  // network lines (45). Alone, 46 cannot say why; read together, the one host of 46 that printed
  // `NET/IB : No device found.` in 45 is explained by its own line, and only that host: another
  // host's line says nothing of this one's devices.
  std::vector<Row> alone = Diagnose({"46-"});
  ASSERT_EQ(alone.size(), 15u);
  for (const Row& r : alone) EXPECT_EQ(std::get<2>(r), "net-socket-unexplained");
  std::map<std::string, std::string> cause;
  for (const Row& r : Diagnose({"45-", "46-"})) cause[std::get<0>(r)] = std::get<2>(r);
  ASSERT_EQ(cause.size(), 15u);
  for (const auto& [host, c] : cause)
    EXPECT_EQ(c, host == "ip-172-31-1-93" ? "net-no-rdma-device" : "net-socket-unexplained") << host;
}

std::vector<NetFinding> DiagnoseText(const std::string& text) {
  static std::vector<p2ptrace::NcclLog> keep;  // findings point at nothing, but keep the log alive anyway
  keep.push_back(p2ptrace::ParseNcclLog(text));
  return p2ptrace::DiagnoseNet({{"made.log", &keep.back()}});
}

TEST(NetDiagnosis, SettingsDecideBeforeWhatNcclFound) {
  std::vector<NetFinding> f = DiagnoseText(
      "a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
      "a:1:1 [0] NCCL INFO NET/IB : No device found.\n"
      "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "env-ib-disabled");
  EXPECT_TRUE(f[0].settled);
  EXPECT_EQ(f[0].evidence.front(), "made.log:1: NCCL_IB_DISABLE set by environment to 1");
  EXPECT_EQ(f[0].pairs, (std::vector<std::pair<int, int>>{{0, 1}}));
  f = DiagnoseText(
      "b:1:1 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to LOC\n"
      "b:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 1a000 / HCA 0 (distance 7 > 0)\n"
      "b:1:1 [0] NCCL INFO Channel 00/0 : 1[1a000] -> 0[1a000] [receive] via NET/IB/0\n");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "env-gdr-disabled");
}

TEST(NetDiagnosis, PerNicLinesAndGdrReadBySendsOnly) {
  // 2.13+: the per-NIC line says neither peer memory nor DMA-BUF worked.
  std::vector<NetFinding> f = DiagnoseText(
      "c:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n"
      "c:1:1 [0] NCCL INFO Channel 00/0 : 0[1a000] -> 1[1a000] [send] via NET/IB/0\n"
      "c:1:1 [0] NCCL INFO Channel 00/0 : 1[1a000] -> 0[1a000] [receive] via NET/IB/0\n");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "no-gdr");
  EXPECT_EQ(f[0].lines, 2u);
  // The GPU's side offered DMA-BUF: its line stands beside the NIC's refusal.
  f = DiagnoseText(
      "c:1:1 [0] NCCL INFO DMA-BUF is available on GPU device 0\n"
      "c:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n"
      "c:1:1 [0] NCCL INFO Channel 00/0 : 0[1a000] -> 1[1a000] [send] via NET/IB/0\n");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "no-gdr");
  ASSERT_GE(f[0].evidence.size(), 2u);
  EXPECT_EQ(f[0].evidence[0], "made.log:2: NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'");
  EXPECT_EQ(f[0].evidence[1], "made.log:1: DMA-BUF is available on GPU device 0");
  // Receives with GDR, sends without: GDR read is off, NCCL's default unless the user said so.
  const std::string lines =
      "d:1:1 [0] NCCL INFO Channel 00/0 : 0[1a000] -> 1[1a000] [send] via NET/IB/0\n"
      "d:1:1 [0] NCCL INFO Channel 00/0 : 1[1a000] -> 0[1a000] [receive] via NET/IB/0/GDRDMA\n";
  f = DiagnoseText(lines);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].shortfall, NetShortfall::kNoGdrSends);
  EXPECT_EQ(f[0].cause, "gdr-read-off");
  f = DiagnoseText("d:1:1 [0] NCCL INFO NCCL_NET_GDR_READ set by environment to 0.\n" + lines);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "env-gdr-read-off");
  // A GDR line of another host explains nothing here.
  f = DiagnoseText(
      "e:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)\n"
      "f:2:2 [0] NCCL INFO Channel 00/0 : 1[1a000] -> 0[1a000] [receive] via NET/IB/0\n");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].host, "f");
  EXPECT_EQ(f[0].cause, "gdr-off-unexplained");
  EXPECT_FALSE(f[0].settled);
}

}  // namespace
