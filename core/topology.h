// The node model both sides reason about: GPUs in a PCIe tree under CPUs, NVLinks between
// them, and the path type between two GPUs in nvidia-smi's vocabulary (NV#, PIX, PXB, PHB, SYS).
// Pure data and rules: filled from a simulated topology file, from probes, or from
// `nvidia-smi topo -m`.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace p2ptrace {

// Best (closest) first, as NCCL orders them; NODE sits between PHB and SYS.
enum class PathType { kNVLink, kPIX, kPXB, kPHB, kNODE, kSYS };

// "NV" for NVLink (callers append the link count), else "PIX", "PXB", "PHB", "NODE", "SYS".
std::string_view PathTypeName(PathType type);
std::optional<PathType> ParsePathType(std::string_view text);  // accepts NV<n>, SOC as SYS

struct PcieLink {
  int gen = 0, width = 0, max_gen = 0, max_width = 0;
};

struct Gpu {
  int index = 0;           // the host's enumeration order (nvidia-smi / NVML index)
  std::string name;        // e.g. "NVIDIA H100 80GB HBM3"
  std::string bus_id;      // "0000:1a:00.0", lower case
  std::string parent;      // id of a switch or a CPU
  bool mig = false;
  bool p2p_regkey_disabled = false;
  PcieLink pcie;
};

struct PcieSwitch {
  std::string id, parent;  // parent: another switch or a CPU
  bool acs_redirect = false;
};

struct NvLink {
  int a = 0, b = 0, links = 0, active = 0;
};

struct Nic {
  std::string name, parent, kind;  // kind: ib | roce | eth
  std::string state = "ACTIVE";    // the port's state (ports/1/state): ACTIVE, DOWN, INIT
  int rate_gbps = 0;               // the port's line rate (ports/1/rate)
};

enum class Virtualization { kNone, kPassthrough, kVgpu };

struct Host {
  std::string name, boot_id, kernel_cmdline, cpu_vendor = "intel";
  Virtualization virtualization = Virtualization::kNone;
  long dev_shm_mb = 0;
  long shm_device = 0;
  bool gdr = false;
  bool libibverbs = true;  // rdma-core's libibverbs is installed where the job runs
  bool peermem_registered = true;  // with `gdr`: nvidia_peermem registered with the RDMA core's peer memory
  bool dmabuf = false;  // the kernel (5.12+) and driver (open modules) give DMA-BUF: GDR without peermem from NCCL 2.13
  bool config_space_readable = false;  // probes run as root: a bridge's full PCI config space (ACS) reads
  std::vector<std::string> cpus;
  std::vector<PcieSwitch> switches;
  std::vector<Gpu> gpus;
  std::vector<NvLink> nvlinks;
  std::vector<Nic> nics;

  const Gpu* FindGpu(int index) const;
  const PcieSwitch* FindSwitch(std::string_view id) const;
  bool IsCpu(std::string_view id) const;
  // The NVLink entry joining a and b (either order), if any.
  const NvLink* FindNvLink(int a, int b) const;
};

struct GpuPath {
  PathType type = PathType::kSYS;
  PathType pcie = PathType::kSYS;  // the PCIe tree alone, ignoring NVLink (NVML's common ancestor)
  int nvlinks = 0;         // bonded links when type is kNVLink
  int active_links = 0;
  bool acs_redirect = false;  // a switch on the PCIe path redirects peer traffic upstream
  std::string Label() const;  // "NV12", "PIX", …
};

// The path between two GPUs of one host, by nvidia-smi's rules: NVLink first; then the PCIe tree
// (same parent switch → PIX; a common switch ancestor → PXB; same CPU → PHB; else SYS).
GpuPath ClassifyGpuPath(const Host& host, int a, int b);

// The PCIe path between two devices of one host (GPUs, NICs) by their parents, a switch or a CPU:
// PIX under one switch, PXB below a common switch, PHB under one CPU, else SYS.
PathType ClassifyPciePath(const Host& host, std::string_view parent_a, std::string_view parent_b);

// The PCIe ancestors of a device, nearest first, ending with its CPU (empty if the chain breaks).
std::vector<std::string> PcieAncestors(const Host& host, std::string_view parent);

// True when the kernel command line turns on an IOMMU in translating mode (intel_iommu=on or
// amd_iommu=on without iommu=pt) — P2P over PCIe then takes the host bridge's slow path.
bool IommuTranslating(std::string_view kernel_cmdline);

// GeForce and TITAN boards: NVIDIA's driver refuses PCIe P2P on them.
bool IsConsumerGpu(std::string_view name);

}  // namespace p2ptrace
