// The simulated node's topology file (DESIGN.md §9, version 1) and the rules the fakes follow.
// Shared by the fake libcudart, the fake NVML and `p2psim`.
#pragma once

#include <string>
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

struct Topology {
  std::string path;  // the file it came from, for messages
  std::vector<p2ptrace::Host> hosts;
  Bandwidths bandwidth;
  std::vector<PairOverride> pair_overrides;
  std::vector<PeerAccessOverride> peer_access;
  std::vector<CopyFault> copy_faults;
  double time_scale = 0;

  const p2ptrace::Host* FindHost(const std::string& name) const;
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
// scaled down when either GPU's link trained below its maximum speed or width; a pair override wins.
double DirectBandwidth(const Topology& topo, const p2ptrace::Host& host, int a, int b);
// Host↔device copies: the GPU's current PCIe link (per-lane rate × width × 0.85).
double HostDeviceBandwidth(const p2ptrace::Gpu& gpu);
// The fault of a direct copy a→b (host indices) on `host`, or null.
const CopyFault* FindCopyFault(const Topology& topo, const p2ptrace::Host& host, int a, int b);
// Copies inside one GPU's memory.
inline constexpr double kDeviceLocalGbps = 1000;

// Which host this process is on: P2PSIM_HOST, else the only host of the file. Null with `error`
// set when neither settles it.
const p2ptrace::Host* SelectHost(const Topology& topo, std::string* error);

}  // namespace p2psim
