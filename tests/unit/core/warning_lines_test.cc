// core/warning_lines' job-start lines (DESIGN.md §2): pairs named compactly, one line per cause, the
// pairs of the GPUs the job uses only, NCCL's version named as loaded or as assumed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/node_probe.h"
#include "core/warning_lines.h"

namespace {

using namespace p2ptrace;

TEST(PairNames, GpuSetsAsRanges) {
  EXPECT_EQ(GpuSetText({3, 0, 1, 2}), "GPU0-3");
  EXPECT_EQ(GpuSetText({0, 1, 3, 5, 6, 7}), "GPU0,1,3,5-7");
  EXPECT_EQ(GpuSetText({4}), "GPU4");
  EXPECT_EQ(GpuSetText({2, 2, 3}), "GPU2,3");
}

TEST(PairNames, BipartiteCliquesRowsAndTheCap) {
  std::vector<std::pair<int, int>> cross;
  for (int a = 0; a < 4; ++a)
    for (int b = 4; b < 8; ++b) cross.push_back({b, a});  // either order
  EXPECT_EQ(PairSetText(cross), "GPU0-3 <-> GPU4-7");
  EXPECT_EQ(PairSetText({{0, 1}}), "GPU0 <-> GPU1");
  EXPECT_EQ(PairSetText({{0, 1}, {1, 0}, {0, 1}}), "GPU0 <-> GPU1");
  // Within two sets: each is a clique.
  std::vector<std::pair<int, int>> islands;
  for (int base : {0, 4})
    for (int a = base; a < base + 4; ++a)
      for (int b = a + 1; b < base + 4; ++b) islands.push_back({a, b});
  EXPECT_EQ(PairSetText(islands), "every pair of GPU0-3; every pair of GPU4-7");
  // One GPU against the rest: bipartite with a set of one.
  EXPECT_EQ(PairSetText({{2, 0}, {2, 1}, {2, 3}}), "GPU2 <-> GPU0,1,3");
  // A path is neither: rows of equal partners.
  EXPECT_EQ(PairSetText({{0, 1}, {1, 2}, {2, 3}}), "GPU0 <-> GPU1; GPU1 <-> GPU2; GPU2 <-> GPU3");
  // Separate pairs, capped.
  EXPECT_EQ(PairSetText({{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}}, 3), "GPU0 <-> GPU1; GPU2 <-> GPU3; GPU4 <-> GPU5; …");
}

// The demo's node: two NVLink islands of four GPUs on two sockets, every GPU under its own switch.
NodeProbe TwoIslands() {
  NodeProbe p;
  p.hostname = "node0";
  p.cpu_vendor = CpuVendor::kIntel;
  p.steps.push_back({"NVML", "libnvidia-ml.so.1", "ok", ""});
  for (int i = 0; i < 8; ++i) {
    ProbedGpu g;
    g.index = i;
    g.bus_id = "0000:" + std::to_string(10 + i) + ":00.0";
    g.name = "NVIDIA H100 80GB HBM3";
    g.pcie = {5, 16, 5, 16};
    p.gpus.push_back(g);
  }
  for (int a = 0; a < 8; ++a)
    for (int b = a + 1; b < 8; ++b) {
      ProbedPair q;
      q.a = a;
      q.b = b;
      bool island = a / 4 == b / 4;
      q.link = island ? "NV6" : "SYS";
      if (island) q.nvlinks_present = q.nvlinks_active = 6;
      p.pairs.push_back(q);
    }
  return p;
}

size_t Count(const std::vector<std::string>& lines, const std::string& what) {
  size_t n = 0;
  for (const std::string& l : lines) n += l.find(what) != std::string::npos;
  return n;
}

TEST(WarningLines, OneLinePerCauseNamingThePairsCompactly) {
  NodeProbe p = TwoIslands();
  p.nccl_version = NcclVersion{2, 28, 9};
  std::vector<std::string> lines = WarningLines(p, PredictNode(p));
  ASSERT_EQ(lines.size(), 1u) << lines.size() << " lines, first: " << lines.front();
  const std::string& l = lines.front();
  EXPECT_EQ(l.rfind("p2ptrace: warning: node0 GPU0-3 <-> GPU4-7, 32 pairs: shm instead of pcie_p2p "
                    "[topology-beyond-p2p-level] path SYS is beyond the P2P level PXB (NCCL 2.28.9's default on Intel)",
                    0),
            0u)
      << l;
  EXPECT_NE(l.find("less bandwidth"), std::string::npos) << l;  // the cost
  EXPECT_NE(l.find("; fix: "), std::string::npos) << l;
  EXPECT_EQ(l.find("2.30"), std::string::npos) << l;
}

// The user's own setting leads: NCCL_SHM_DISABLE=1 sends the pairs NCCL deliberately kept
// on SHM to TCP sockets; the line names that setting, its fix unsets it, and NCCL's choice is "also".
TEST(WarningLines, TheUsersOwnSettingLeads) {
  NodeProbe p = TwoIslands();
  p.nccl_version = NcclVersion{2, 28, 9};
  p.env = {{"NCCL_SHM_DISABLE", "1"}};
  std::vector<std::string> lines = WarningLines(p, PredictNode(p));
  ASSERT_EQ(lines.size(), 1u) << lines.front();
  const std::string& l = lines.front();
  EXPECT_EQ(l.rfind("p2ptrace: warning: node0 GPU0-3 <-> GPU4-7, 32 pairs: net_socket instead of pcie_p2p "
                    "[env-shm-disabled] NCCL_SHM_DISABLE=1 (also: topology-beyond-p2p-level)",
                    0),
            0u)
      << l;
  EXPECT_NE(l.find("; fix: unset NCCL_SHM_DISABLE"), std::string::npos) << l;
  EXPECT_EQ(l.find("NCCL_P2P_LEVEL"), std::string::npos) << l;  // not the first step any more
  // Without the setting NCCL's deliberate choice is the headline again.
  p.env.clear();
  EXPECT_NE(WarningLines(p, PredictNode(p)).front().find("[topology-beyond-p2p-level]"), std::string::npos);
}

TEST(WarningLines, OnlyTheGpusTheJobUses) {
  NodeProbe p = TwoIslands();
  p.communicator = {0, 1, 2, 3};
  std::vector<std::string> lines = WarningLines(p, PredictNode(p));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines.front(), "p2ptrace: all 6 GPU pairs on node0 can use NVLink/P2P");
  p.communicator = {2, 5};
  lines = WarningLines(p, PredictNode(p));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines.front().rfind("p2ptrace: warning: node0 GPU2 <-> GPU5: shm instead of pcie_p2p", 0), 0u) << lines.front();
  EXPECT_EQ(Count(lines, "GPU4"), 0u);
}

TEST(WarningLines, CausesApartAndEvidenceThatNamesGpusMarkedAsAnExample) {
  NodeProbe p = TwoIslands();
  p.env["NCCL_P2P_DISABLE"] = "1";  // every pair: NVLink ones and PCIe ones differ in their line
  std::vector<std::string> lines = WarningLines(p, PredictNode(p));
  ASSERT_EQ(lines.size(), 1u) << lines[1];  // one cause, one line: its two path changes inside it
  EXPECT_EQ(lines[0].rfind("p2ptrace: warning: node0 every pair of GPU0-7, 56 pairs: shm instead of nvlink (every pair "
                           "of GPU0-3; every pair of GPU4-7), instead of pcie_p2p (GPU0-3 <-> GPU4-7) [env-p2p-disabled] "
                           "NCCL_P2P_DISABLE=1; ",
                           0),
            0u)
      << lines[0];
  EXPECT_EQ(Count(lines, "fix: unset NCCL_P2P_DISABLE"), 1u) << lines[0];
  // Two causes: two lines, each with its own pairs.
  NodeProbe two = TwoIslands();
  two.gpus[5].mig = true;
  lines = WarningLines(two, PredictNode(two));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(Count(lines, "node0 GPU4,6,7 <-> GPU0-3, 24 pairs: shm instead of pcie_p2p [topology-beyond-p2p-level]"), 1u)
      << lines[0] << "\n" << lines[1];
  EXPECT_EQ(Count(lines, "node0 GPU5 <-> GPU0-4,6,7, 14 pairs: shm instead of pcie_p2p (GPU5 <-> GPU0-3), instead of "
                         "nvlink (GPU5 <-> GPU4,6,7) [mig-enabled] GPU5 has MIG mode on"),
            1u)
      << lines[0] << "\n" << lines[1];
  // CUDA copies where the driver refuses the cross-socket pairs: evidence names one pair.
  NodeProbe c = TwoIslands();
  for (ProbedPair& q : c.pairs)
    if (q.link == "SYS") q.nvml_read = q.nvml_write = P2pStatus::kTopologyNotSupported, q.cuda_can_access = false;
  lines = WarningLines(c, PredictNode(c, true));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("GPU0-3 <-> GPU4-7, 32 pairs: host_staged instead of pcie_p2p [nvml-p2p-status] e.g. NVML P2P "
                          "status TNS"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[0].find("NCCL_P2P_LEVEL"), std::string::npos) << lines[0];
}

TEST(WarningLines, NcclVersionAssumedSaysWhy) {
  NodeProbe p = TwoIslands();
  p.nccl_version_note = "NCCL's version unknown (ncclGetVersion did not answer), its newest rules assumed";
  std::vector<std::string> lines = WarningLines(p, PredictNode(p));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("PXB (NCCL 2.30.7's default on Intel; NCCL's version unknown (ncclGetVersion did not answer), "
                          "its newest rules assumed)"),
            std::string::npos)
      << lines[0];
}

}  // namespace
