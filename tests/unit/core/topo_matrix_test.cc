// core/topo_matrix: every `nvidia-smi topo` paste in tests/fixtures/topo parses to what was read off
// it by hand (each case's expect.json `parse`) and to the links its case.json names; plus the
// variants seen in public pastes that no fixture holds.
#include "core/topo_matrix.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::ParseTopoText;
using p2ptrace::TopoLegend;
using p2ptrace::TopoMatrix;
using p2ptrace::TopoMatrixKind;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Cases() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(TOPO_FIXTURE_DIR))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = "case" + info.param.substr(0, info.param.find('-'));
  return n;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w == "?" ? "" : w);
  return out;
}

std::string LegendName(TopoLegend l) {
  return l == TopoLegend::kAbsent ? "absent" : l == TopoLegend::kCut ? "cut" : "complete";
}

const TopoMatrix& Only(const p2ptrace::TopoText& t) { return t.matrices.front(); }

class TopoFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TopoFixture, ParsesToWhatWasReadByHand) {
  fs::path dir = fs::path(TOPO_FIXTURE_DIR) / GetParam();
  ASSERT_TRUE(fs::exists(dir / "case.json")) << dir;
  ASSERT_TRUE(fs::exists(dir / "expect.json")) << dir << ": write expect.json (see tests/fixtures/topo/README.md)";
  json expect = json::parse(Slurp(dir / "expect.json"));
  ASSERT_TRUE(expect.contains("parse"));
  for (const auto& [file, want] : expect["parse"].items()) {
    SCOPED_TRACE(file);
    auto parsed = ParseTopoText(Slurp(dir / file));
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    ASSERT_EQ(parsed->matrices.size(), 1u);
    const TopoMatrix& m = Only(*parsed);
    EXPECT_EQ(m.kind == TopoMatrixKind::kP2pStatus ? "p2p" : "links", want.value("kind", "links"));
    EXPECT_EQ(m.p2p_mode, want.value("p2p_mode", ""));
    ASSERT_EQ(m.gpus.size(), want["gpus"].get<size_t>());
    for (size_t i = 0; i < m.gpus.size(); ++i) EXPECT_EQ(m.gpus[i], static_cast<int>(i));
    EXPECT_EQ(m.nics, want["nics"].get<std::vector<std::string>>());
    EXPECT_EQ(m.affinity_columns, want["affinity_columns"].get<std::vector<std::string>>());
    EXPECT_EQ(LegendName(m.legend), want["legend"].get<std::string>());
    EXPECT_EQ(m.truncated, want["truncated"].get<bool>());
    for (const auto& [label, row] : want["rows"].items()) {
      size_t r = label.starts_with("GPU") ? static_cast<size_t>(m.GpuColumn(std::stoi(label.substr(3))))
                                          : m.gpus.size() + static_cast<size_t>(std::find(m.nics.begin(), m.nics.end(), label) -
                                                                                m.nics.begin());
      ASSERT_LT(r, m.devices()) << label;
      EXPECT_EQ(m.cells[r], Split(row.get<std::string>())) << "row " << label;
    }
    if (want.contains("affinity"))
      for (const auto& [label, a] : want["affinity"].items()) {
        int col = m.GpuColumn(std::stoi(label.substr(3)));
        ASSERT_GE(col, 0);
        const auto& got = m.affinity[static_cast<size_t>(col)];
        EXPECT_EQ((std::vector<std::string>{got.cpu, got.numa, got.gpu_numa}), a.get<std::vector<std::string>>()) << label;
      }
    if (want.contains("annotations")) {
      EXPECT_EQ(m.annotations, want["annotations"].get<std::vector<std::string>>());
    }
    // Every row of a symmetric link matrix agrees with its column where both are known.
    for (size_t r = 0; r < m.gpus.size(); ++r)
      for (size_t c = 0; c < m.gpus.size(); ++c)
        if (!m.cells[r][c].empty() && !m.cells[c][r].empty()) {
          EXPECT_EQ(m.cells[r][c], m.cells[c][r]) << r << "," << c;
        }
  }
}

// The links case.json names for its pairs are the parsed cells (cut-off cells aside).
TEST_P(TopoFixture, CellsMatchTheCaseLinks) {
  fs::path dir = fs::path(TOPO_FIXTURE_DIR) / GetParam();
  json c = json::parse(Slurp(dir / "case.json"));
  json expect = json::parse(Slurp(dir / "expect.json"));
  json pair_topo = expect["explain"].value("pair_topo", json::object());
  size_t checked = 0;
  for (const json& p : c["expected"]["pairs"]) {
    std::string link = p.value("topo_link", "");
    std::string code = link.substr(0, link.find(' '));
    if (code.empty() || code == "n/a") continue;
    int a = p["a"], b = p["b"];
    std::string key = std::to_string(a) + "-" + std::to_string(b);
    std::string file = pair_topo.value(key, "topo.txt");
    auto parsed = ParseTopoText(Slurp(dir / file));
    ASSERT_TRUE(parsed.ok());
    const TopoMatrix& m = Only(*parsed);
    std::string cell = m.Cell(a, b);
    if (cell.empty()) {
      EXPECT_TRUE(m.truncated && c.value("truncated", false)) << key << " has no cell";
    } else {
      EXPECT_EQ(cell, code) << GetParam() << " pair " << key;
    }
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TopoFixture, ::testing::ValuesIn(Cases()), TestName);

TEST(TopoMatrix, FixturesAreThere) { EXPECT_GE(Cases().size(), 12u) << TOPO_FIXTURE_DIR; }

// 2016: `topo --matrix`, single spaces in the header, SOC, a tab-separated body, the old legend.
TEST(TopoMatrix, OldDriverSocAndSingleSpaceHeader) {
  auto t = ParseTopoText(
      "        GPU0 GPU1 GPU2 CPU Affinity\nGPU0\t X \tPIX\tSOC\t0-7,16-23\nGPU1\tPIX\t X \tSOC\t0-7,16-23\n"
      "GPU2\tSOC\tSOC\t X \t8-15,24-31\n\nLegend:\n\n  X   = Self\n  SOC = Path traverses a socket-level link (e.g. QPI)\n"
      "  PHB = Path traverses a PCIe host bridge\n  PXB = Path traverses multiple PCIe internal switches\n"
      "  PIX = Path traverses a PCIe internal switch\n");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const TopoMatrix& m = Only(*t);
  EXPECT_EQ(m.Cell(0, 2), "SOC");
  EXPECT_EQ(m.Cell(0, 1), "PIX");
  EXPECT_EQ(m.affinity[2].cpu, "8-15,24-31");
  EXPECT_EQ(m.legend, TopoLegend::kComplete);
  EXPECT_FALSE(m.truncated);
}

// NIC columns with a NIC legend, NIC rows without affinity, vLLM's header at column 0 after a title.
TEST(TopoMatrix, NicColumnsRowsAndLegend) {
  auto t = ParseTopoText(
      "GPU Topology:\nGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \tNV18\tPIX\tSYS\t0-55\t0\t\tN/A\nGPU1\tNV18\t X \tSYS\tPIX\t56-111\t1\t\tN/A\n"
      "NIC0\tPIX\tSYS\t X \tSYS\nNIC1\tSYS\tPIX\tSYS\t X \n\nLegend:\n\n  X    = Self\n  NV#  = bonded\n\n"
      "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_bond_1\n");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const TopoMatrix& m = Only(*t);
  EXPECT_EQ(m.nics, (std::vector<std::string>{"NIC0", "NIC1"}));
  EXPECT_EQ(m.NicName(1), "mlx5_bond_1");
  EXPECT_EQ(m.NicCell(1, 1), "PIX");
  EXPECT_EQ(m.NicCell(0, 1), "SYS");
  EXPECT_EQ(m.Cell(0, 1), "NV18");
  EXPECT_EQ(m.affinity[1].cpu, "56-111");
  EXPECT_EQ(m.affinity[1].numa, "1");
  EXPECT_EQ(m.affinity[1].gpu_numa, "N/A");
  EXPECT_EQ(m.legend, TopoLegend::kCut);  // no PIX line
  EXPECT_FALSE(m.truncated);
}

// An empty CPU Affinity keeps its place when the paste has tabs; fused tokens are split and noted.
TEST(TopoMatrix, EmptyAffinityAndFusedTokens) {
  auto t = ParseTopoText(
      "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV4\t\t3\t\tN/A\nGPU1\tNV4\t X \t0,64\t0\t\tN/A\n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Only(*t).affinity[0].cpu, "");
  EXPECT_EQ(Only(*t).affinity[0].numa, "3");
  EXPECT_EQ(Only(*t).affinity[1].cpu, "0,64");
  auto fused = ParseTopoText("   GPU0   GPU1   GPU2   CPU Affinity   NUMA Affinity   GPU NUMA ID\r\n"
                             "GPU0   X   NODENODE   0-55,112-167 0N/A\r\nGPU1   NODE   X   NODE   0-55\r\n"
                             "GPU2   NODE   NODE   X   0-55\r\n");
  ASSERT_TRUE(fused.ok());
  const TopoMatrix& m = Only(*fused);
  EXPECT_EQ(m.Cell(0, 2), "NODE");
  EXPECT_EQ(m.affinity[0].numa, "0");
  EXPECT_EQ(m.affinity[0].gpu_numa, "N/A");
  EXPECT_GE(m.notes.size(), 2u);
}

// `topo -p2p w` echoed, then a `topo -m` in the same paste: two matrices, told apart by their cells.
TEST(TopoMatrix, P2pMatrixNextToTheLinkMatrix) {
  auto t = ParseTopoText(
      "$ nvidia-smi topo -p2p w\n \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n\n"
      "\x1b[4m\tGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tPHB\t0-31\nGPU1\tPHB\t X \t0-31\n");
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->matrices.size(), 2u);
  ASSERT_NE(t->P2p("w"), nullptr);
  EXPECT_EQ(t->P2p("w")->Cell(1, 0), "GNS");
  EXPECT_EQ(p2ptrace::ParseP2pStatus(t->P2p("")->Cell(0, 1)), p2ptrace::P2pStatus::kGpuNotSupported);
  ASSERT_NE(t->Links(), nullptr);
  EXPECT_EQ(t->Links()->Cell(0, 1), "PHB");
  EXPECT_EQ(t->Links()->affinity[0].cpu, "0-31");
}

TEST(TopoMatrix, TextWithoutAMatrixIsAnError) {
  for (std::string_view bad : {"", "hello\nworld\n", "GPU0 is the first GPU\n", "\tGPU0\tGPU1\n\nnothing\n"}) {
    auto t = ParseTopoText(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.error().message.find("no `nvidia-smi topo -m`"), std::string::npos);
  }
}

}  // namespace
