// Link health of the simulated node (DESIGN.md §9): NVLink numbering and generations, the error
// counters NVML serves, and the faults of `link_faults` that make them grow while a job runs.
// Every simulated library that moves bytes between GPUs (the CUDA driver and runtimes, NCCL)
// charges them here, and NVML reads them here. What grows at run time lives in one small file per
// host, mapped shared, so every process of a job and a later `p2ptrace doctor` see the same values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tests/sim/common/sim_topology.h"

namespace p2psim {

// The topology file's counter names ("replay", …, "pcie_replay").
const char* CounterName(LinkCounter c);
bool ParseCounterName(std::string_view name, LinkCounter* out);
inline bool IsLegacyNvLinkCounter(LinkCounter c) { return c <= LinkCounter::kCrcData; }
inline bool IsNvLinkFieldCounter(LinkCounter c) {
  return c >= LinkCounter::kRcvErrors && c <= LinkCounter::kSymbolErrors;
}

// The NVLink generation of a GPU by its name: B100/B200/B300/GB200/GB300 5, H100/H200/H800/H20/
// GH200 4, A100/A800/A30/A40 3, V100 2; anything else 4 (the file's default GPU is an H100).
int NvLinkGenerationOf(const std::string& gpu_name);
// NVML's nvmlNvlinkVersion_t for a generation (NVML_NVLINK_VERSION_3_0 = 4, 4_0 = 6, 5_0 = 7).
unsigned NvmlNvLinkVersion(int generation);
// The sim's per-link speed (NVML field NVML_FI_DEV_NVLINK_GET_SPEED), per direction, in NVML's
// MB/s: what nvidia-smi nvlink -s prints per link, × 1000.
unsigned NvLinkSpeedMbps(int generation);

// One NVLink of a GPU as NVML numbers them: the GPU's `nvlinks` entries in file order, each
// entry's links in turn, the first `active` of an entry up.
struct Lane {
  int peer = -1;
  bool active = false;
  int remote_link = -1;  // the same link's number on the peer
};
std::vector<Lane> Lanes(const p2ptrace::Host& host, int gpu);

// Whether NVML serves counter `c` of the GPU: not on a vGPU host, not when the GPU lists it in
// unsupported_counters; the legacy four up to NVLink 4, the five fields from NVLink 5.
bool CounterServed(const Topology& topo, const p2ptrace::Host& host, int gpu, LinkCounter c);
// A counter's value: the file's base value plus what link_faults added so far. `link` is the
// NVLink for NVLink counters (ignored for pcie_replay).
uint64_t CounterValue(const Topology& topo, const p2ptrace::Host& host, int gpu, int link, LinkCounter c);

// The GPU's PCIe link now: the topology's, narrowed by its PCIe fault once that fired.
p2ptrace::PcieLink CurrentPcie(const Topology& topo, const p2ptrace::Host& host, int gpu);
// The factor NVLink storms on the pair's active links put on its NVLink rate (1: none).
double StormSlowdown(const Topology& topo, const p2ptrace::Host& host, int a, int b);

// Bytes moved between a and b (host GPU indices, -1 host memory) on `host`. `direct`: GPU to GPU
// without the host (peer access, a P2P transport); then they cross the pair's NVLinks when it has
// an active one, else both GPUs' PCIe links; host-staged and host↔device bytes cross the PCIe
// link of each GPU involved; within one GPU, none. Grows the faults' counters and fires PCIe
// faults. Call it before timing the transfer: the copy that fires a downtrain runs narrowed.
void ChargeTransfer(const Topology& topo, const p2ptrace::Host& host, int a, int b, bool direct, uint64_t bytes);

bool HasLinkFaults(const Topology& topo, const p2ptrace::Host& host);
// The shared file of a host's run-time counters: `<topology file>.links-<host>`.
std::string LinkStatePath(const Topology& topo, const p2ptrace::Host& host);

}  // namespace p2psim
