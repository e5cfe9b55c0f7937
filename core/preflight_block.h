// The preflight block the shim writes into the trace (what the job-start check probed, predicted and
// printed), read back by `report`: line-oriented text, one record per line.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/node_probe.h"
#include "core/predict.h"
#include "core/status.h"

namespace p2ptrace {

// A pair's prediction as the block records it (a, b, link, transport, best, fallback, impact and
// causes; the rest stays empty when read back), with both GPUs' bus ids and ranks.
struct PreflightPair : PairPrediction {
  std::string bus_a, bus_b;
  int rank_a = -1, rank_b = -1;
};

// One GPU of the node as the probe numbered it: the report names GPUs by this index (nvidia-smi's),
// whatever CUDA ordinal a process gave it.
struct PreflightGpu {
  int index = -1;    // NVML index (PCI order when NVML did not answer)
  std::string bus_id, name;
  int cuda = -1;     // the writing process's CUDA ordinal for it; -1 not visible there
  // nvidia-smi's label between it and each RDMA NIC of the node whose place is known (whatever
  // NCCL_IB_HCA selects), in the node's NIC order: ("mlx5_0", "PIX"), …
  std::vector<std::pair<std::string, std::string>> nic_paths;
};

// The link between two GPUs of the node as `nvidia-smi topo -m` names it ("NV18", "PIX", "SYS"),
// for every pair the probe could name, whichever GPUs the job uses.
struct PreflightLink {
  int a = -1, b = -1;  // PreflightGpu::index
  std::string link;
};

struct PreflightBlock {
  std::string host, boot_id;
  std::vector<ProbeStep> steps;
  std::vector<PreflightLink> links;  // "link" lines
  std::vector<PreflightGpu> gpus;  // every GPU of this host the probe saw (from block format 1, "gpu" lines)
  std::vector<NodeProbe::Nic> nics;  // its RDMA NICs with their first port's state and line rate ("nic" lines)
  std::vector<PreflightPair> pairs;
  std::vector<std::string> warnings;  // the lines printed (or that would have been)
};

PreflightBlock MakePreflightBlock(const NodeProbe& probe, const Prediction& prediction,
                                  const std::vector<std::string>& warnings);
// Line-oriented text ("p2ptrace-preflight 1", then tab-separated records) and back. The parser
// skips lines it does not know and fails only on text that is not a preflight block.
std::string SerializePreflight(const PreflightBlock& block);
Expected<PreflightBlock> ParsePreflight(std::string_view text);

}  // namespace p2ptrace
