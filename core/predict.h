// The path predictor: which transport NCCL (and CUDA) will use between two GPUs of a node, and the
// causes when that is worse than the topology allows. NCCL's rules (src/graph/paths.cc
// ncclTopoCheckP2p, transport/p2p.cc, transport/shm.cc, read in each release's tag): the P2P level (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, else a default by NCCL version,
// CPU vendor and GPU count) against the pair's path; NVML's P2P status (NCCL >= 2.12);
// cudaDeviceCanAccessPeer; then SHM (same host, same /dev/shm, not disabled); else the network.
//
// Input is a plain struct of facts, each optional: `explain` fills it from `nvidia-smi topo -m` and
// flags, the node probes (probe/, in the shim and `doctor`) from sysfs/NVML/CUDA. What is unknown stays unknown;
// the prediction then says what it assumed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/causes.h"
#include "core/topo_matrix.h"
#include "core/topology.h"

namespace p2ptrace {

struct NcclVersion {
  int major = 0, minor = 0, patch = 0;
  auto operator<=>(const NcclVersion&) const = default;
};
// "2.21.5", "2.21.5+cuda12.4", "2.7.8-1", "2.18"; nullopt for anything else.
std::optional<NcclVersion> ParseNcclVersion(std::string_view text);
std::string VersionText(const NcclVersion& v);  // "2.21.5"
// The rules `explain` assumes when not told: the newest NCCL's.
inline constexpr NcclVersion kNewestNcclRules{2, 30, 7};

enum class CpuVendor { kUnknown, kIntel, kAmd, kArm, kZhaoxin };
std::string_view CpuVendorName(CpuVendor v);  // "intel", …, "unknown"
// "intel", "amd", "arm" (aarch64), "zhaoxin"; nullopt otherwise.
std::optional<CpuVendor> ParseCpuVendor(std::string_view text);

enum class IommuMode { kUnknown, kOff, kPassthrough, kTranslating };

// NCCL's path levels for P2P decisions, closest first (nvidia-smi's NODE is NCCL's PHB).
enum class NcclLevel { kLOC, kNVL, kPIX, kPXB, kPHB, kSYS };
std::string_view NcclLevelName(NcclLevel l);
// NCCL_P2P_LEVEL's value: LOC, NVL, NVB (as NVL), PIX, PXB, PHB, NODE (as PHB), SYS, or the legacy
// integers 0 (LOC) … 4 (SYS), larger as SYS. nullopt when NCCL would ignore it.
std::optional<NcclLevel> ParseNcclLevel(std::string_view value);
NcclLevel LevelOfPath(PathType t);

struct GpuFacts {
  int index = 0;                    // the matrix/NVML index
  std::string name, bus_id;         // "" unknown
  std::optional<bool> consumer;     // GeForce/TITAN (from the name when known)
  std::optional<bool> mig;          // MIG mode on
  PcieLink pcie;                    // 0 = unknown
  // The process driving this GPU, as NCCL compares ranks: host identity and /dev/shm.
  std::optional<std::string> hostname, boot_id;
  std::optional<uint64_t> shm_dev;  // stat("/dev/shm").st_dev
  std::optional<uint64_t> shm_bytes;
  // The RDMA NIC NCCL pairs this GPU with (the nearest with an active port) and the PCIe path
  // between them, for GPUDirect RDMA's distance rule; unset where not known.
  std::string nic;
  std::optional<PathType> nic_path;
};

struct PairFacts {
  int a = 0, b = 0;                    // GPU indices
  std::string link;                    // topo -m cell ("NV12", "PIX", …); "" unknown
  std::optional<int> nvlinks_present;  // NVLinks the pair should have (from the board/NVML)
  std::optional<int> nvlinks_active;
  P2pStatus nvml_read = P2pStatus::kUnknown, nvml_write = P2pStatus::kUnknown;
  std::optional<bool> cuda_can_access;    // cudaDeviceCanAccessPeer(a, b) and (b, a)
  std::optional<bool> acs_redirect;       // a bridge between them redirects (known from config space)
  std::optional<bool> split_iommu_groups; // the GPUs sit in different IOMMU groups (ACS is on above them)
  std::optional<bool> peer_access_enabled;  // for CUDA copies: the app enabled peer access
  std::optional<double> measured_gbps;    // P2P bandwidth measured on the pair
};

struct NodeFacts {
  std::optional<NcclVersion> nccl_version;
  std::string nccl_version_note;  // why it is not known, when told (the shim's words); "" not told
  CpuVendor cpu_vendor = CpuVendor::kUnknown;
  std::optional<bool> intel_pre_skylake;  // family 6 model < 0x55 ("BDW" in NCCL 2.6-2.8)
  std::map<std::string, std::string> env;  // NCCL_* as the ranks see them
  IommuMode iommu = IommuMode::kUnknown;
  std::optional<Virtualization> virtualization;
  std::optional<bool> gdr;             // nvidia_peermem / dmabuf GPUDirect RDMA available
  std::optional<bool> rdma_nics;       // IB/RoCE HCAs present
  std::optional<bool> rdma_usable;     // one of them has an active port (unset: states not known)
  std::string rdma_evidence;           // why none is usable (the ports' states, NCCL_IB_HCA)
  std::string gdr_cause, gdr_evidence; // why GPUDirect RDMA is off, when the probe can tell
  // A driver setting that makes NCCL's RDMA network unusable here (grdma-topo-check), with its evidence.
  std::string net_blocker, net_blocker_evidence;
  std::vector<GpuFacts> gpus;          // all GPUs of the node
  std::vector<PairFacts> pairs;        // pairs that have facts; either order
  std::vector<int> communicator;       // GPUs in the communicator; empty = all
  // Predict CUDA peer copies (cudaMemcpyPeer, cross-device cudaMemcpy) instead of NCCL: only the
  // driver's answer matters (NVML status, cudaDeviceCanAccessPeer, what stands behind a refusal);
  // NCCL's P2P level, SHM and network rules do not apply, and a refused pair is host-staged.
  bool cuda_copies = false;
  std::vector<std::string> sources;    // what the facts came from ("nvidia-smi topo -m", "NVML", …)

  const GpuFacts* Gpu(int index) const;
  const PairFacts* Pair(int a, int b) const;
};

// One cause that holds for a pair, with what fired it.
struct CauseHit {
  std::string id;
  std::string role;  // "decided" (the gate that chose the path), "contributes" (why that gate
                     // closed), "risk" (the path is taken but may hang or crawl), "context"
  std::vector<std::string> evidence;
};

struct Alternative {
  std::string assumption;  // "CPU vendor amd", "NCCL 2.8 on an Intel Broadwell", …
  int transport = 0;
};

struct PairPrediction {
  int a = 0, b = 0;
  std::string link;
  int transport = 0;  // p2ptrace_transport NCCL will use
  int best = 0;       // the best class the topology allows
  bool fallback = false;
  bool init_error = false;  // NCCL stops with an error (NVLink pair with P2P disabled by NVML)
  std::string level;        // the P2P level applied and where it came from
  std::vector<CauseHit> causes;  // most direct first
  std::vector<Alternative> alternatives;  // where an assumption changes the answer
  std::string impact;       // bandwidth of the path taken vs the best one
};

struct Prediction {
  std::vector<PairPrediction> pairs;   // a < b, every pair of the communicator
  std::vector<std::string> assumptions;  // what was not told and what was assumed
  NcclVersion rules;                   // NCCL rules applied
  int gpu_count = 0;                   // as NCCL counts them for its default level

  const PairPrediction* Pair(int a, int b) const;  // either order; null when not predicted
};

// Facts from a `topo -m` matrix (GPUs, links, NICs as RDMA HCAs) and optionally a `topo -p2p`
// matrix (NVML status; mode "r"/"w", or unknown and then taken as both).
NodeFacts FactsFromTopo(const TopoMatrix& links, const TopoMatrix* p2p);

Prediction Predict(const NodeFacts& facts);

// From NCCL 2.12 (unless NCCL_PXN_DISABLE=1) a GPU farther than PXB from its NIC reaches the network
// through an NVLink peer of its host, in the communicator, within PXB of a NIC (PXN), and that peer's
// distance decides GPUDirect RDMA both ways (graph/paths.cc ncclTopoComputePaths, ncclTopoCheckGdr):
// the peer's index, -1 for none.
int PxnRelay(const NodeFacts& facts, int gpu, NcclVersion version);

// The path NCCL would take from `gpu` to a GPU on another node (its network transport and this
// side's causes): the pair's `b` is that remote GPU, numbered kOtherNodeGpu.
inline constexpr int kOtherNodeGpu = 1 << 20;
PairPrediction PredictToOtherNode(const NodeFacts& facts, int gpu);

}  // namespace p2ptrace
