// The simulated node's topology file (DESIGN.md §9, version 1) and the rules the fakes follow.
// Shared by the fake libcudart, the fake NVML and `p2psim`.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/topology.h"

namespace p2psim {

struct Bandwidths {  // GB/s
  double nvlink_per_link = 20.5, pcie_p2p = 50, host_staged = 20, shm = 12;
  double net_gdr = 45, net_ib = 12, net_socket = 2;
};

struct PairOverride { std::string host; int a = 0, b = 0; double gbps = 0; };
struct PeerAccessOverride { std::string host; int a = 0, b = 0; bool supported = false; };
// A broken direct path, one direction (a: the source GPU, b: the destination), for `doctor --test`:
// "corrupt" — the bytes that land differ from those sent (a word in every 64 KiB flipped), as
// reported under ACS/IOMMU misconfiguration; "hang" — the copy never completes (its stream stops);
// "sm-lost" — stores by a's own kernels into b's memory never land, while copy-engine copies do
// (nccl#2335: what NCCL's kernels write is lost).
struct CopyFault { std::string host; int a = 0, b = 0; std::string fault; };

// Link-health counters, in the topology file's names (sim_links.h serves them). NVML splits them
// by NVLink generation: the first four through nvmlDeviceGetNvLinkErrorCounter up to NVLink 4,
// the next five as field values from NVLink 5; pcie_replay is the GPU's PCIe replay counter.
enum class LinkCounter : int {
  kReplay, kRecovery, kCrcFlit, kCrcData,                                     // legacy NVLink
  kRcvErrors, kRecoveryFailed, kRecoveryEvents, kEffectiveErrors, kSymbolErrors,  // NVLink 5 fields
  kPcieReplay
};
inline constexpr int kLinkCounters = 10;
inline constexpr int kNvLinkCounters = 9;  // every counter but pcie_replay
inline constexpr int kMaxNvLinks = 36;     // NVML_NVLINK_MAX_LINKS

// A PCIe port's AER totals, as sysfs's aer_dev_{correctable,nonfatal,fatal} give them.
struct Aer { uint64_t correctable = 0, nonfatal = 0, fatal = 0; };

// What a GPU entry says about its links beyond core's model.
struct GpuLinks {
  int nvlink_version = 4;     // the generation (1..5): by the GPU's name unless "nvlink_version"
  unsigned unsupported = 0;   // bit (1 << LinkCounter) per counter listed in "unsupported_counters"
  uint64_t pcie_replay = 0;   // base values ("counters")
  std::map<int, std::array<uint64_t, kNvLinkCounters>> nvlink;  // by NVML link number
  Aer aer;
};
// A switch entry's upstream port: its AER totals and, when "pcie" is given, its link.
struct SwitchLinks {
  Aer aer;
  bool has_pcie = false;
  p2ptrace::PcieLink pcie;
};

// A fault of a GPU's links that shows while the job runs (top-level "link_faults"), one of:
// an NVLink storm (nvlink >= 0): `counter` grows by per_gb per GB moved over that link and copies
// over the pair's NVLinks run at `slowdown` of their rate; a PCIe fault (nvlink < 0): from the
// GPU's first bytes over PCIe its link reads pcie_gen/pcie_width (0: unchanged) and carries that
// rate, and/or `counter` (pcie_replay) grows by per_gb per GB over the link.
struct LinkFault {
  std::string host;
  int gpu = 0;
  int nvlink = -1;
  int counter = -1;  // a LinkCounter; -1 none
  double per_gb = 0, slowdown = 1;
  int pcie_gen = 0, pcie_width = 0;
};

struct Topology {
  std::string path;  // the file it came from, for messages
  std::vector<p2ptrace::Host> hosts;
  Bandwidths bandwidth;
  std::vector<PairOverride> pair_overrides;
  std::vector<PeerAccessOverride> peer_access;
  std::vector<CopyFault> copy_faults;
  double time_scale = 0;
  std::map<std::pair<std::string, int>, GpuLinks> gpu_links;             // (host, GPU index)
  std::map<std::pair<std::string, std::string>, SwitchLinks> switch_links;  // (host, switch id)
  std::vector<LinkFault> link_faults;

  const p2ptrace::Host* FindHost(const std::string& name) const;
  // A GPU's link facts; defaults for a GPU the file does not have.
  const GpuLinks& LinksOf(const p2ptrace::Host& host, int gpu) const;
  const SwitchLinks* SwitchLinksOf(const p2ptrace::Host& host, const std::string& id) const;
};

// Parses and validates a topology file. On failure returns false and sets `error` to one line
// naming the file and the field ("topo.json: hosts[0].nvlinks[1].b: no GPU 9 on host node0").
bool LoadTopology(const std::string& path, Topology* out, std::string* error);
bool ParseTopology(const std::string& text, const std::string& path, Topology* out, std::string* error);

// NVML's nvmlGpuP2PStatus_t values.
enum class P2PStatus { kOk = 0, kChipsetNotSupported = 1, kGpuNotSupported = 2,
                       kIohTopologyNotSupported = 3, kDisabledByRegkey = 4, kNotSupported = 5 };

// Whether the driver would let GPU a access GPU b (host indices), and if not, why (§9's rules,
// then `peer_access` overrides).
P2PStatus PeerStatus(const Topology& topo, const p2ptrace::Host& host, int a, int b);
inline bool PeerCapable(const Topology& t, const p2ptrace::Host& h, int a, int b) {
  return PeerStatus(t, h, a, b) == P2PStatus::kOk;
}

// Bandwidth of a direct peer copy a→b: NVLink active links × per-link rate; PCIe P2P, unless an
// IOMMU in translating mode or ACS redirect sends it through the root complex (host-staged rate),
// scaled down when either GPU's link trained below its maximum speed or width (its current link:
// a PCIe fault of link_faults may have narrowed it); a pair override wins. An NVLink storm on one
// of the pair's active NVLinks multiplies the NVLink rate by its slowdown.
double DirectBandwidth(const Topology& topo, const p2ptrace::Host& host, int a, int b);
// Host↔device copies: the GPU's PCIe link (per-lane rate × width × 0.85); the topology's link, or
// with the host, its current one (CurrentPcie).
double HostDeviceBandwidth(const p2ptrace::Gpu& gpu);
double HostDeviceBandwidth(const Topology& topo, const p2ptrace::Host& host, int gpu);
// The fault of a direct copy a→b (host indices) on `host`, or null.
const CopyFault* FindCopyFault(const Topology& topo, const p2ptrace::Host& host, int a, int b);
// Copies inside one GPU's memory.
inline constexpr double kDeviceLocalGbps = 1000;

// Which host this process is on: P2PSIM_HOST, else the only host of the file. Null with `error`
// set when neither settles it.
const p2ptrace::Host* SelectHost(const Topology& topo, std::string* error);

}  // namespace p2psim
