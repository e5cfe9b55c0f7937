// `nvidia-smi topo -m` and `nvidia-smi topo -p2p r|w` as users paste them (the real pastes in
// tests/fixtures/topo, each with its source): tabs or spaces, NIC rows and columns (`NIC0` with a `NIC Legend:`
// block, or `mlx5_0` headers), CPU/NUMA/GPU NUMA ID affinity columns (empty, ranges, fused), the
// legend present, absent or cut, a prompt or `GPU Topology:` line before, ANSI escapes, rows cut
// mid-token, author annotations after a row. One text may hold several matrices (a `topo -m`
// pasted next to a `topo -p2p r`); each is returned.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace p2ptrace {

enum class TopoMatrixKind {
  kLinks,      // topo -m: X, NV#, PIX, PXB, PHB, NODE, SYS (SOC)
  kP2pStatus,  // topo -p2p r|w|n|a|p: X, OK, CNS, GNS, TNS, NS, DR, U
};

enum class TopoLegend { kAbsent, kComplete, kCut };

// NVML's nvmlGpuP2PStatus_t as `topo -p2p` prints it (kUnknown: not known to us, not NVML's "U").
enum class P2pStatus { kUnknown, kOk, kChipsetNotSupported, kGpuNotSupported, kTopologyNotSupported,
                       kDisabledByRegkey, kNotSupported, kNvmlUnknown };
P2pStatus ParseP2pStatus(std::string_view code);          // "OK", "CNS", …; kUnknown otherwise
std::string_view P2pStatusCode(P2pStatus status);         // "OK", "CNS", …, "?" for kUnknown
std::string_view P2pStatusMeaning(P2pStatus status);      // "chipset not supported", …

struct TopoAffinity {
  std::string cpu, numa, gpu_numa;  // verbatim; "" when the column is absent or the cell empty
};

struct TopoMatrix {
  TopoMatrixKind kind = TopoMatrixKind::kLinks;
  std::string p2p_mode;          // "r", "w", … from an echoed `topo -p2p X` line; "" when not stated
  std::vector<int> gpus;         // GPU numbers in column order (GPU0 → 0)
  std::vector<std::string> nics; // NIC column names as printed ("NIC0", "mlx5_0")
  std::map<std::string, std::string> nic_names;  // from `NIC Legend:` ("NIC0" → "mlx5_0")
  std::vector<std::string> affinity_columns;      // "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
  // Cells over the devices (GPUs then NICs), row-major; "" where the paste has no cell (truncated).
  std::vector<std::vector<std::string>> cells;
  std::vector<TopoAffinity> affinity;  // per GPU row
  std::vector<std::string> annotations;  // text after a row's cells that no column explains
  TopoLegend legend = TopoLegend::kAbsent;
  bool truncated = false;          // rows or cells missing, or a cell cut mid-token
  std::vector<std::string> notes;  // what was odd (fused tokens, short rows), one line each
  size_t first_line = 0;           // 1-based line of the header

  size_t devices() const { return gpus.size() + nics.size(); }
  int GpuColumn(int gpu) const;  // -1 when the matrix has no such GPU
  // The cell between two GPUs by number ("NV12", "PIX", "OK", …); "" when unknown. Reads the
  // (a, b) cell, or (b, a) when (a, b) was cut off.
  std::string Cell(int gpu_a, int gpu_b) const;
  // The cell between a GPU and a NIC column; "" when unknown.
  std::string NicCell(int gpu, size_t nic) const;
  std::string NicName(size_t nic) const;  // the legend's device name, else the column name
};

struct TopoText {
  std::vector<TopoMatrix> matrices;
  const TopoMatrix* Links() const;      // the first `topo -m` matrix, or nullptr
  const TopoMatrix* P2p(std::string_view mode) const;  // the first p2p matrix of that mode ("" any)
};

// Errors: no matrix in the text (with what was looked for), or a header without a single row.
Expected<TopoText> ParseTopoText(std::string_view text);

}  // namespace p2ptrace
