// What the node probes found (probe/probe.cc gathers it, in the traced process or in `p2ptrace
// doctor`), the pure parsers of the files they read, the step from probes to the predictor's facts
// (core/predict.h), and the preflight block the shim writes into the trace for `report`.
// Everything here is pure: no file is opened, so tests and fuzzers feed it text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/predict.h"
#include "core/status.h"
#include "core/topo_matrix.h"
#include "core/topology.h"

namespace p2ptrace {

// --- parsers of what the probes read ------------------------------------------------------------

struct KernelCmdline {
  IommuMode iommu = IommuMode::kUnknown;  // kUnknown: the line says nothing (the kernel's default)
  std::string iommu_tokens;               // the tokens that decided it, space-separated
  std::string acs_override;               // pcie_acs_override=… value, "" when absent
};
// /proc/cmdline: intel_iommu=on|off, amd_iommu=on|off, iommu=pt|off|nopt, pcie_acs_override=….
KernelCmdline ParseKernelCmdline(std::string_view cmdline);

struct NvidiaRegkeys {
  bool p2p_disabled_all = false;          // RegistryDwords turns PCIe P2P off for every GPU
  std::vector<std::string> p2p_disabled;  // bus ids (lower case) RegistryDwordsPerDevice turns off
  std::string evidence;                   // the setting as written, "" when none applies
};
// /proc/driver/nvidia/params: RegistryDwords / RegistryDwordsPerDevice ("ForceP2P=0x0",
// "RMForceP2PType=…", "pci=0000:1a:00.0;ForceP2P=0x0;").
NvidiaRegkeys ParseNvidiaParams(std::string_view params);

// sysfs current_link_speed / max_link_speed ("32.0 GT/s PCIe", "16 GT/s", "8.0 GT/s") → PCIe
// generation 1-6; 0 when unknown.
int PcieGenFromLinkSpeed(std::string_view text);

struct AcsControl {
  bool present = false;  // the bridge has an ACS capability
  bool request_redirect = false, completion_redirect = false;
  uint16_t control = 0;  // the ACS Control register
  bool Redirects() const { return request_redirect || completion_redirect; }
};
// A bridge's PCI config space as sysfs `config` returns it. nullopt when the extended space (past
// 256 bytes) is not there: an unprivileged read returns only the first 64 bytes.
std::optional<AcsControl> ParseAcsFromConfig(std::span<const uint8_t> config);

// "0000:1A:00.0", "00000000:1a:00.0" (NVML) → "0000:1a:00.0"; "" when it is not a PCI address.
std::string NormalizeBusId(std::string_view text);

// "a; b; c": the evidence of a cause, the ids of others, as warning lines write them.
std::string Join(const std::vector<std::string>& v, std::string_view sep);

// --- the probe's result ---------------------------------------------------------------------------

// One probe step, as `doctor` and the trace show it.
struct ProbeStep {
  std::string name;    // "kernel cmdline", "NVML", …
  std::string source;  // the file or API read
  std::string status;  // "ok", "missing", "failed", "timed out", "unknown"
  std::string detail;  // what it found or why it failed, one line
};

struct ProbedGpu {
  int index = -1;          // NVML index (the host's numbering), else PCI order
  int cuda = -1;           // CUDA ordinal in the probing process; -1 not visible there
  std::string name, bus_id, uuid;
  int numa_node = -1, iommu_group = -1;
  std::string iommu_group_type;  // "DMA-FQ", "identity", … "" unknown
  PcieLink pcie;
  std::vector<std::string> bridges;  // upstream PCI bridges, nearest first
  std::string root;                  // the root complex ("pci0000:00"); "" unknown
  std::optional<bool> mig, regkey_disabled;
  int nvml_virtualization = -1;      // nvmlGpuVirtualizationMode_t, -1 unknown
  // The process driving this GPU, when another rank said so (identity exchange): else this one.
  std::optional<std::string> hostname, boot_id;
  std::optional<uint64_t> shm_dev, shm_bytes;
  int rank = -1;
};

struct ProbedPair {
  int a = 0, b = 0;  // ProbedGpu::index
  std::string link;  // "NV12", "PIX", …; "" unknown
  std::string link_source;  // "NVML", "sysfs"
  P2pStatus nvml_read = P2pStatus::kUnknown, nvml_write = P2pStatus::kUnknown;
  std::optional<int> nvlinks_present, nvlinks_active;
  std::optional<bool> cuda_can_access;          // both directions
  std::optional<int> cuda_perf_rank, cuda_access_supported, cuda_native_atomics;
  std::optional<bool> acs_redirect;             // read from a bridge's config space
  std::vector<std::string> acs_bridges;         // bridges on the path that redirect
  std::optional<bool> split_iommu_groups;
};

struct NodeProbe {
  std::string sysroot;  // "" for /
  std::string hostname, boot_id;
  KernelCmdline cmdline;
  std::string cmdline_text;
  IommuMode iommu = IommuMode::kUnknown;  // the cmdline and the groups together
  int iommu_groups = -1;                  // entries of /sys/kernel/iommu_groups; -1 unreadable
  NvidiaRegkeys regkeys;
  std::optional<uint64_t> shm_dev, shm_bytes;
  std::string container;   // "docker", "kubernetes", "podman", "" none seen
  std::optional<Virtualization> virtualization;
  std::string virtualization_evidence;
  CpuVendor cpu_vendor = CpuVendor::kUnknown;
  std::optional<bool> rdma_nics, gdr;
  bool nvml = false, cuda = false;  // whether each answered
  std::string driver_version;
  std::map<std::string, std::string> env;  // the allow-listed variables that were set
  std::vector<ProbedGpu> gpus;
  std::vector<ProbedPair> pairs;
  std::vector<ProbeStep> steps;
  std::vector<int> communicator;  // GPU indices the job uses on this node; empty = all
  // The NCCL whose rules apply (the shim: the loaded one's ncclGetVersion); unset: the newest
  // rules, and `nccl_version_note` (when set) says why the version is not known.
  std::optional<NcclVersion> nccl_version;
  std::string nccl_version_note;

  const ProbedGpu* Gpu(int index) const;
  const ProbedPair* Pair(int a, int b) const;
};

// nvidia-smi's link label for a pair from the sysfs PCI chains (no NVML): PIX when the nearest
// common bridge is both GPUs' parent, PXB for another common bridge, PHB for one root complex,
// NODE for one NUMA node, else SYS.
std::string PathFromChains(const ProbedGpu& a, const ProbedGpu& b);

// The predictor's facts from a probe.
NodeFacts FactsFromProbe(const NodeProbe& probe);

// The prediction with the probe's evidence added where a cause needs it (regkey text, IOMMU
// groups, the ACS command to run as root, the rank of each GPU). `cuda_copies`: for a process
// that moves data with CUDA copies, not NCCL (NodeFacts::cuda_copies).
Prediction PredictNode(const NodeProbe& probe, bool cuda_copies = false);

// The exact command that shows a bridge's ACS control (needs root).
std::string AcsCommand(const std::vector<std::string>& bridges);

// --- job-start warnings (DESIGN.md §2) --------------------------------------------------------------

// Whether a pair deserves a warning line: it falls back, or a warning/error-severity risk holds.
bool PairWarns(const PairPrediction& p);
// "GPU0-3,6" for {0, 1, 2, 3, 6}: GPU indices as ranges, ascending.
std::string GpuSetText(std::vector<int> gpus);
// Compact names for a set of GPU pairs (either order; duplicates ignored), per connected group of
// GPUs: "GPU0 <-> GPU1", "GPU0-3 <-> GPU4-7" (every pair between two sets, the smaller set first,
// else the one with the lower GPUs), "every pair of GPU0-3"
// (every pair within a set), else rows "GPU0 <-> GPU2-3" of GPUs with the same partners; parts joined
// by "; ", at most `max_parts` of them, then "; …".
std::string PairSetText(std::vector<std::pair<int, int>> pairs, size_t max_parts = 4);
// One line per cause (DESIGN.md §2): the pairs that warn, grouped by their headline cause, each
// group as `p2ptrace: warning: <host> <pairs>[, N pairs][ (ranks r<->s)]: <class> instead of
// <expected>[ (<pairs>), instead of <expected2> (<pairs2>)…] [<cause-id>] <evidence>[ (also: …)];
// <impact>[; <impact2>…]; fix: <fix>` (a path change per distinct change, with its pairs when
// there are several), N counting both directions (as the report lists pairs) when more than one
// GPU pair; groups in the order of their first pair. Or the single `p2ptrace: all N GPU pairs on
// <host> can use NVLink/P2P` line. No trailing newlines.
std::vector<std::string> WarningLines(const NodeProbe& probe, const Prediction& prediction);
// One pair's line, as in WarningLines (ranks left out when either is -1), with `note` in
// parentheses after the classes when not empty: the one format every warning of a pair uses.
std::string WarningLine(std::string_view host, std::string_view gpu_a, std::string_view gpu_b, int rank_a, int rank_b,
                        const PairPrediction& p, std::string_view note = "");
// The cause a pair's warning names: the most specific of the ones that decided or contributed.
const CauseHit* HeadlineCause(const PairPrediction& p);

// --- the preflight block in the trace ---------------------------------------------------------------

struct PreflightPair {
  int a = 0, b = 0;
  std::string bus_a, bus_b, link;
  int rank_a = -1, rank_b = -1;
  int transport = 0, best = 0;
  bool fallback = false;
  std::string impact;
  std::vector<CauseHit> causes;
};

// One GPU of the node as the probe numbered it: the report names GPUs by this index (nvidia-smi's),
// whatever CUDA ordinal a process gave it.
struct PreflightGpu {
  int index = -1;    // NVML index (PCI order when NVML did not answer)
  std::string bus_id, name;
  int cuda = -1;     // the writing process's CUDA ordinal for it; -1 not visible there
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
