// What the node probes found (probe/probe.cc gathers it, in the traced process or in `p2ptrace
// doctor`; the parsers of the files they read: probe_parsers.h), and the step from probes to the
// predictor's facts (core/predict.h). Pure: no file is opened.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/predict.h"
#include "core/probe_parsers.h"
#include "core/status.h"
#include "core/topo_matrix.h"
#include "core/topology.h"

namespace p2ptrace {

// One probe step, as `doctor` and the trace show it.
struct ProbeStep {
  std::string name;    // "kernel cmdline", "NVML", …
  std::string source;  // the file or API read
  std::string status;  // "ok", "missing", "failed", "timed out", "unknown"
  std::string detail;  // what it found or why it failed, one line
};

// Where a PCI device sits: its upstream bridges, nearest first, its root complex ("pci0000:00"), its
// NUMA node; "" / -1 where unknown.
struct PciPlace {
  std::vector<std::string> bridges;
  std::string root;
  int numa_node = -1;
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
  PciPlace Place() const { return {bridges, root, numa_node}; }
  int nvml_virtualization = -1;      // nvmlGpuVirtualizationMode_t, -1 unknown
  // Compute processes on the GPU as NVML lists them (asked only when ProbeOptions::gpu_processes):
  // their pids, 0 where NVML hides it (another PID namespace); unset when not asked or not answered.
  std::optional<std::vector<unsigned>> compute_pids;
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
  std::optional<bool> rdma_nics;
  // Each RDMA NIC (/sys/class/infiniband/<name>) with its first port's state and rate (ports/1/state
  // "4: ACTIVE", ports/1/rate "200 Gb/sec (4X HDR)"): "" and -1 where unreadable.
  // Where each sits on PCI (its `device` link): which GPU it serves best, and whether NCCL's
  // GPUDirect RDMA distance rule lets them pair.
  struct Nic {
    std::string name, state;
    int rate_gbps = -1;
    std::string bus_id;  // "0000:3b:00.0"; "" unknown
    PciPlace pci;
  };
  std::vector<Nic> nics;
  // nvidia_peermem loaded (/sys/module/nvidia_peermem) and registered with the RDMA core's peer
  // memory (/sys/kernel/mm/memory_peers/nv_mem): NCCL before 2.23 looks only at the latter.
  bool peermem_loaded = false, peermem_registered = false;
  // DMA-BUF, NCCL's other way (2.13+) for the NIC to reach GPU memory: Linux 5.12 or later and the
  // open GPU kernel modules. The kernel's release (/proc/sys/kernel/osrelease) and the driver's
  // flavour (/proc/driver/nvidia/version names "Open Kernel Module"); ""/unset where unread.
  std::string kernel_release;
  std::optional<bool> open_kernel_module;
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

// nvidia-smi's link label between two PCI devices from their sysfs chains (no NVML): PIX when the
// nearest common bridge is both devices' parent, PXB for another common bridge, PHB for one root
// complex, NODE for one NUMA node, else SYS; "" when a root is unknown.
std::string PathBetween(const PciPlace& a, const PciPlace& b);
inline std::string PathFromChains(const ProbedGpu& a, const ProbedGpu& b) { return PathBetween(a.Place(), b.Place()); }

// Whether the node can give NCCL DMA-BUF registration, and why: nullopt when the kernel's release
// or the driver's flavour was not read.
struct DmaBuf {
  std::optional<bool> possible;
  std::string why;  // "Linux 6.1.0 and the open GPU kernel modules", "Linux 5.10 is older than 5.12", …
};
DmaBuf DmaBufSupport(const NodeProbe& probe);

// The RDMA NICs NCCL may use: those NCCL_IB_HCA selects (all when it is unset), in probe order.
std::vector<const NodeProbe::Nic*> NcclNics(const NodeProbe& probe);

// A GPU of this host and the RDMA NIC NCCL would pair it with: the nearest by PCIe of NcclNics with
// an active port (among all when no port is known active), the first of equals as NCCL orders them.
struct GpuNic {
  int gpu = -1;        // ProbedGpu::index
  int nic = -1;        // into NodeProbe::nics; -1 no NIC with a known place
  std::string path;    // nvidia-smi's label between them ("PIX", "SYS"); "" unknown
};
// `nccl_selected` false: among every RDMA NIC of the node, whatever NCCL_IB_HCA says (the NIC a GPU
// is wired nearest, to tell a job that used another).
std::vector<GpuNic> NearestNics(const NodeProbe& probe, bool nccl_selected = true);

// The predictor's facts from a probe.
NodeFacts FactsFromProbe(const NodeProbe& probe);

// The prediction with the probe's evidence added where a cause needs it (regkey text, IOMMU
// groups, the ACS command to run as root, the rank of each GPU). `cuda_copies`: for a process
// that moves data with CUDA copies, not NCCL (NodeFacts::cuda_copies).
Prediction PredictNode(const NodeProbe& probe, bool cuda_copies = false);

// The exact command that shows a bridge's ACS control (needs root).
std::string AcsCommand(const std::vector<std::string>& bridges);

}  // namespace p2ptrace
