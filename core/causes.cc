#include "core/causes.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace {
namespace {

// Severity: error = the job hangs, fails or loses most of its bandwidth without NCCL saying so;
// warning = a fallback someone chose or can change; info = the machine's design, or NCCL's deliberate choice.
constexpr std::array<CauseInfo, 59> kCauses = {{
    {"env-p2p-disabled", Severity::kWarning, "NCCL_P2P_DISABLE is set: NCCL does not use P2P between any GPUs",
     "unset NCCL_P2P_DISABLE (launchers such as Accelerate set it for some GPUs); it moves every pair of a node to "
     "host memory (SHM) or the network",
     "grep NCCL_P2P_DISABLE in the job's environment, launcher config and NCCL log (`NCCL_P2P_DISABLE set by "
     "environment to 1`)"},
    {"env-p2p-level", Severity::kWarning, "NCCL_P2P_LEVEL is below this pair's path",
     "unset NCCL_P2P_LEVEL or raise it to the pair's path (NVL < PIX < PXB < PHB < SYS; nvidia-smi's NODE is PHB); "
     "LOC (0) turns P2P off, as NCCL_P2P_DISABLE=1 does",
     "the NCCL log prints `NCCL_P2P_LEVEL set by environment to …`"},
    {"env-shm-disabled", Severity::kWarning, "NCCL_SHM_DISABLE is set: pairs without P2P go over the network",
     "unset NCCL_SHM_DISABLE: the pairs NCCL keeps off P2P then go through host shared memory (SHM), several "
     "times faster than TCP sockets on one node", "the NCCL log prints `NCCL_SHM_DISABLE set by environment to 1`"},
    {"env-ib-disabled", Severity::kWarning, "NCCL_IB_DISABLE is set: the network path is TCP sockets",
     "unset NCCL_IB_DISABLE so that NCCL can use InfiniBand/RoCE", "`ibv_devinfo` lists the HCAs NCCL could use"},
    {"env-gdr-disabled", Severity::kWarning, "NCCL_NET_GDR_LEVEL turns GPUDirect RDMA off",
     "unset NCCL_NET_GDR_LEVEL or raise it to the GPU-NIC path (see `nvidia-smi topo -m`)", ""},
    {"topology-beyond-p2p-level", Severity::kInfo,
     "the path crosses a host bridge or CPU sockets, beyond NCCL's default P2P level",
     "NCCL chose host memory deliberately: P2P through the CPU is often slower than SHM. Place GPUs that talk most "
     "under one PCIe switch; raise NCCL_P2P_LEVEL (e.g. NODE, SYS) only after measuring both with nccl-tests",
     "compare all_reduce_perf busbw with and without NCCL_P2P_LEVEL=SYS"},
    {"no-nvlink", Severity::kInfo, "no NVLink between these GPUs: peer traffic crosses PCIe",
     "use NVLink-connected GPUs for the ranks that exchange most (tensor parallel groups), or accept PCIe bandwidth",
     "`nvidia-smi topo -m` shows no NV# between them"},
    {"nvlink-down", Severity::kError, "fewer NVLinks are active than the GPUs have",
     "check `nvidia-smi nvlink -s` for inactive links and dmesg for Xid 74/149; reseat or service the GPU/baseboard; "
     "on NVSwitch systems check nvidia-fabricmanager",
     "`nvidia-smi nvlink -s -i <gpu>` shows links <inactive>"},
    {"cuda-no-peer-access", Severity::kWarning, "CUDA reports no peer access between these GPUs",
     "find why the driver refuses: `nvidia-smi topo -p2p r` names it (chipset, GPU, topology, regkey); then IOMMU, "
     "ACS, virtualization or the GPU model below",
     "cudaDeviceCanAccessPeer(&ok, a, b) returns 0 (`p2ptrace doctor` or CUDA's p2pBandwidthLatencyTest shows it)"},
    {"nvml-p2p-status", Severity::kWarning, "the driver (NVML) reports P2P unsupported or disabled for this pair",
     "act on the status: CNS (chipset, usually a VM or platform) / TNS (topology) need a different host or slot; GNS "
     "(GPU: GeForce) needs datacenter GPUs; DR (regkey) needs the RegistryDwords setting removed "
     "(/proc/driver/nvidia/params). NCCL_IGNORE_DISABLED_P2P=1 only silences NCCL's check",
     "`nvidia-smi topo -p2p r` and `nvidia-smi topo -p2p w` for the pair"},
    {"consumer-gpu", Severity::kInfo, "GeForce/TITAN GPUs: NVIDIA's driver does not allow PCIe P2P on them",
     "treat host-memory transfers as this hardware's speed (smaller tensor-parallel groups), use an NVLink bridge "
     "where the model has one, or move to datacenter GPUs",
     "`nvidia-smi topo -p2p r` shows GNS"},
    {"mig-enabled", Severity::kWarning, "MIG is on: MIG instances cannot use CUDA P2P",
     "disable MIG on GPUs that must exchange data (`nvidia-smi -i <gpu> -mig 0`, then reset), or keep each job in one "
     "instance",
     "`nvidia-smi --query-gpu=index,mig.mode.current --format=csv`"},
    {"virtualized", Severity::kWarning, "a VM (passthrough or vGPU): the hypervisor usually hides or blocks P2P",
     "run on bare metal, or ask the provider for an instance type with P2P/NVLink (and its NCCL topology file, "
     "NCCL_TOPO_FILE)",
     "`nvidia-smi topo -p2p r` shows NS/CNS; `systemd-detect-virt` names the hypervisor"},
    {"iommu-enabled", Severity::kWarning, "the IOMMU translates DMA: peer traffic is remapped through the root complex",
     "if no VM passthrough is needed, boot with iommu=pt (or intel_iommu=off / amd_iommu=off) or disable VT-d/AMD-Vi "
     "in the BIOS, reboot, and measure again",
     "`cat /proc/cmdline | grep -i iommu`; `ls /sys/kernel/iommu_groups | wc -l`; as a diagnostic only, compare "
     "with NCCL_P2P_DISABLE=1 (not a fix)"},
    {"acs-redirect", Severity::kError,
     "PCIe ACS redirects peer requests to the root complex: P2P hangs, fails or crawls",
     "disable ACS on the bridges between the GPUs (BIOS, or `setpci` on each bridge's ACS control), or boot with the "
     "IOMMU off; keep NCCL_P2P_DISABLE=1 only until then",
     "`sudo lspci -vvv | grep -B5 -A10 'Access Control Services'`: `ACSCtl: … ReqRedir+ CmpltRedir+` on a bridge. As "
     "a diagnostic only, NCCL_P2P_DISABLE=1 makes the hang go away (at host-memory speed): that proves P2P is the "
     "problem, it does not fix it"},
    {"acs-suspected", Severity::kWarning,
     "PCIe ACS may redirect peer traffic (IOMMU groups split the GPUs; ACS control unreadable without root)",
     "confirm first, then disable ACS on the bridges between the GPUs or boot with the IOMMU off",
     "`sudo lspci -vvv | grep -B5 -A10 'Access Control Services'` (needs root): look for ReqRedir+ CmpltRedir+"},
    {"peer-access-not-enabled", Severity::kWarning,
     "the application copies between GPUs without enabling peer access: the driver stages through the host",
     "call cudaDeviceEnablePeerAccess(peer, 0) from each device once (after cudaDeviceCanAccessPeer says 1) before "
     "cudaMemcpyPeer/cudaMemcpy between the GPUs",
     "the trace shows cudaMemcpyPeer between the pair and no cudaDeviceEnablePeerAccess"},
    {"container-separate-shm", Severity::kWarning,
     "the ranks' /dev/shm are different filesystems (separate containers): no P2P and no SHM, so the network",
     "run the ranks of a node in one container, or share the host's IPC namespace (docker --ipc=host, Kubernetes "
     "hostIPC: true)",
     "`stat -c %d /dev/shm` differs between the ranks' containers"},
    {"container-separate-host", Severity::kWarning,
     "the ranks see different hostnames/boot ids (separate containers or pods): NCCL treats them as separate hosts",
     "run the node's ranks in one container/pod, or give them the same NCCL_HOSTID",
     "`hostname; cat /proc/sys/kernel/random/boot_id` differs between the ranks"},
    {"shm-too-small", Severity::kError, "/dev/shm is too small for NCCL's SHM buffers: init fails or hangs",
     "give the container more shared memory (docker --shm-size=1g or more, or docker --ipc=host to share the host's; "
     "Kubernetes: an emptyDir of medium Memory on /dev/shm); NCCL_SHM_DISABLE=1 avoids SHM altogether, but its pairs "
     "then go over P2P where allowed, else the network (slower)",
     "`df -h /dev/shm`; NCCL logs `failed to extend /dev/shm/nccl-…` or `No space left on device`"},
    {"no-gdr", Severity::kWarning,
     "no GPUDirect RDMA: network traffic is copied through host memory by NCCL's proxy (up to ~10x slower)",
     "load nvidia_peermem (or use a dmabuf-capable kernel/driver) on every node",
     "`lsmod | grep nvidia_peermem`; NCCL logs `GPU Direct RDMA Disabled for HCA` and no `/GDRDMA` in `via NET/…`"},
    {"gdr-no-module", Severity::kWarning,
     "no peer-memory module: the NIC cannot reach GPU memory, so NCCL stages every network byte in host memory",
     "load nvidia-peermem on every node (`modprobe nvidia-peermem`; with the GPU Operator, driver.rdma.enabled), or "
     "let NCCL use DMA-BUF instead (NCCL 2.13 or later, Linux 5.12 or later, the open GPU kernel modules)",
     "`lsmod | grep -E 'nvidia_peermem|nv_peer_mem'` and `ls /sys/kernel/mm/memory_peers`; NCCL logs `GPU Direct "
     "RDMA Disabled for HCA n '…' (no module)`"},
    {"peermem-not-registered", Severity::kWarning,
     "nvidia_peermem is loaded but not registered with the RDMA core: NCCL before 2.23 runs without GPUDirect RDMA",
     "load nvidia-peermem after the RDMA stack it registers with (MLNX_OFED or the inbox ib_core): "
     "`modprobe -r nvidia-peermem && modprobe nvidia-peermem`, and read dmesg for why it did not register",
     "`lsmod | grep nvidia_peermem` lists it while `/sys/kernel/mm/memory_peers/nv_mem` is missing"},
    {"grdma-topo-check", Severity::kWarning,
     "the NVIDIA driver refuses a PCIe NIC's DMA-BUF mapping of this Grace Blackwell GPU's memory (its GPUDirect RDMA "
     "PCI topology check): NCCL's network falls back to TCP sockets",
     "load the nvidia module with NVreg_GrdmaPciTopoCheckOverride=1 (`options nvidia NVreg_GrdmaPciTopoCheckOverride=1`; "
     "with the GPU Operator, a kernelModuleConfig ConfigMap), then restart the driver; from driver R595 the knob is gone",
     "`grep GrdmaPciTopoCheckOverride /proc/driver/nvidia/params`; dmesg: `NVRM: dma-buf attach failed: topology not "
     "supported for mapping type FORCE_PCIE`"},
    {"gdr-distance", Severity::kWarning,
     "the GPU and its NIC are farther apart than NCCL_NET_GDR_LEVEL allows: no GPUDirect RDMA for that GPU",
     "put each rank on a GPU whose NIC sits under the same PCIe switch (rail-aligned placement; NCCL_IB_HCA per local "
     "rank), or, where the platform carries GPUDirect RDMA across that path, raise NCCL_NET_GDR_LEVEL (PHB, SYS) after "
     "measuring both with nccl-tests",
     "`nvidia-smi topo -m` (the GPU's row against the NIC's column); NCCL logs `GPU Direct RDMA Disabled for GPU … "
     "(distance D > L)` where its NET lines are shown"},
    {"gdr-off-unexplained", Severity::kWarning,
     "no GPUDirect RDMA on the network connections, and the log does not say why",
     "run `p2ptrace doctor` on the node (peer-memory module, DMA-BUF, the GPU-NIC distance); rerun with "
     "NCCL_DEBUG_SUBSYS=INIT,NET so that NCCL prints its GPU Direct RDMA decisions",
     "`lsmod | grep nvidia_peermem`; `nvidia-smi topo -m`"},
    {"env-gdr-read-off", Severity::kWarning, "NCCL_NET_GDR_READ=0: sends are staged in host memory",
     "unset NCCL_NET_GDR_READ", "the NCCL log prints `NCCL_NET_GDR_READ set by environment to 0`"},
    {"gdr-read-off", Severity::kInfo,
     "GPUDirect RDMA for receives only: NCCL keeps it off for sends on this GPU by default",
     "nothing to fix by default: NCCL reads GPU memory for sends from compute capability 8.0 or with NVLink; "
     "NCCL_NET_GDR_READ=1 turns it on, to keep only if nccl-tests shows it faster",
     "`[send]` lines without `/GDRDMA` while `[receive]` lines have it"},
    {"net-no-rdma-device", Severity::kWarning,
     "no usable InfiniBand/RoCE device: NCCL's network connections run over TCP sockets",
     "make an RDMA NIC usable to the job: `ibv_devinfo` must list it with a port in PORT_ACTIVE; in a container pass "
     "/dev/infiniband and the rdma-core libraries; an NCCL_IB_HCA that is set must name a device that exists",
     "`ibv_devinfo`; NCCL logs `NET/IB : No device found.` and then `NET/Socket : Using …`"},
    {"net-no-verbs", Severity::kWarning,
     "libibverbs is missing: NCCL cannot open InfiniBand/RoCE and its network connections run over TCP sockets",
     "install rdma-core's libibverbs in the image the job runs in (Debian/Ubuntu: libibverbs1 and ibverbs-providers; "
     "RHEL: rdma-core and libibverbs)",
     "`ldconfig -p | grep libibverbs`; NCCL logs `Failed to open libibverbs.so`"},
    {"net-socket-unexplained", Severity::kWarning,
     "NCCL's network connections run over TCP sockets, and the log does not say why",
     "run `p2ptrace doctor` on the node (RDMA devices, their ports, libibverbs, NCCL_IB_* settings); rerun with "
     "NCCL_DEBUG_SUBSYS=INIT,NET so that NCCL prints why it did not use InfiniBand/RoCE",
     "`ibv_devinfo`; NCCL logs `NET/Socket : Using …` without a `NET/IB : Using …` line"},
    {"pcie-downtrained", Severity::kWarning, "a GPU's PCIe link runs below its maximum speed or width",
     "reseat the GPU or riser, check the slot's BIOS setting (Gen/bifurcation) and the power state under load",
     "`nvidia-smi -q -d PCI` (Link Width/Generation Current vs Max) while the GPU is busy"},
    {"link-errors", Severity::kWarning,
     "a link this pair crosses counted errors during the job (NVLink replays, recoveries or CRC errors; PCIe "
     "replays or AER errors) and the pair ran below its class's rate: the link retries instead of failing",
     "drain the node and run the vendor's link diagnostics; a link whose counters keep growing is reseated or its "
     "part replaced (the RMA asks for the counters' readings with their times: `p2ptrace doctor --json`)",
     "`nvidia-smi nvlink -e -i GPU` (NVLink) or the port's aer_dev_* files before and after `p2ptrace doctor --test` "
     "on the pair"},
    {"link-downtrained", Severity::kWarning,
     "a link this pair crosses trained below what it can do (fewer PCIe lanes or a lower generation, an NVLink "
     "down or slower than its GPU's others) and the pair ran below its class's rate",
     "reset the GPUs or reboot; a link that trains low again is reseated (card, riser, cable) or its part replaced",
     "`lspci -vvv -s BUS` LnkSta against LnkCap while the GPU is busy; `nvidia-smi nvlink -s`"},
    {"p2p-degraded", Severity::kWarning, "P2P runs far below what its link should carry",
     "look for ACS/IOMMU redirection, a downtrained link or a shared switch uplink; compare with "
     "p2pBandwidthLatencyTest",
     "nccl-tests sendrecv_perf or p2pBandwidthLatencyTest between the pair"},
    {"p2p-stores-lost", Severity::kError,
     "a GPU's own stores into its peer's memory do not arrive, while copy-engine copies do: NCCL's kernels write "
     "this way and its collectives corrupt or hang (nccl#2335)",
     "until the platform is fixed (driver, BIOS IOMMU/ACS settings, a P2P-patched driver module), keep NCCL off "
     "peer stores: NCCL_P2P_USE_CUDA_MEMCPY=1 (copy engine), else NCCL_P2P_DISABLE=1",
     "`p2ptrace doctor --test --gpus A,B` again; nvbandwidth's device_to_device_memcpy_write_sm for the pair"},
    {"legacy-ipc-unsupported", Severity::kWarning, "legacy CUDA IPC is unavailable here (e.g. WSL): no P2P between processes",
     "let NCCL use cuMem handles (NCCL_CUMEM_ENABLE=1, the default from NCCL 2.19)", ""},
    {"cuda-peer-query-failed", Severity::kWarning, "NCCL could not query peer access between the GPUs",
     "check that every rank sees its peer GPUs (CUDA_VISIBLE_DEVICES, container GPU lists)", ""},
    {"cuda-peer-enable-failed", Severity::kWarning, "enabling peer access failed",
     "check `nvidia-smi topo -p2p r`, IOMMU/ACS and the peer-mapping limit (8 peers per GPU on PCIe)", ""},
    {"collnet-unavailable", Severity::kInfo, "CollNet/SHARP did not start", "check the SHARP plugin and the fabric", ""},
    // Failures NCCL reports in its WARN lines and return codes (core/nccl_failures.h).
    {"shm-failed", Severity::kError, "NCCL could not create or map a shared-memory segment in /dev/shm",
     "check that /dev/shm is mounted, writable by the job and not full of stale /dev/shm/nccl-* segments; in a "
     "container give it more (docker --shm-size=1g, --ipc=host)",
     "`df -h /dev/shm; ls -la /dev/shm` on the node"},
    {"peer-mapping-exhausted", Severity::kError,
     "CUDA ran out of peer mappings: a GPU can map only a few peers over PCIe (typically 8)",
     "keep each GPU's P2P peers within the limit: on a PCIe node of more than 9 GPUs limit NCCL's P2P "
     "(NCCL_P2P_LEVEL, or communicators of fewer GPUs), and disable peer access a program no longer needs "
     "(cudaDeviceDisablePeerAccess)",
     "the WARN quotes `peer mapping resources exhausted` (cudaErrorTooManyPeers, 711)"},
    {"gpu-out-of-memory", Severity::kError, "a GPU ran out of memory while NCCL allocated its buffers",
     "free GPU memory before NCCL's init and first collectives (smaller batches, the framework's cache), or make NCCL "
     "need less (NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS); check no other process holds the GPU",
     "`nvidia-smi` memory use while the job starts"},
    {"no-gpu-visible", Severity::kError, "the process does not see the GPU it was to use",
     "check CUDA_VISIBLE_DEVICES, the container's GPU list (docker --gpus, Kubernetes nvidia.com/gpu) and that each "
     "rank selects its own device (torch.cuda.set_device(LOCAL_RANK))",
     "`nvidia-smi -L` and `echo $CUDA_VISIBLE_DEVICES` inside the job's environment"},
    {"cuda-driver-too-old", Severity::kError, "the NVIDIA driver is older than the CUDA version NCCL needs",
     "install a driver that supports NCCL's CUDA version (the `+cudaX.Y` of `NCCL version`), or use an NCCL/framework "
     "build for an older CUDA",
     "`nvidia-smi` shows the highest CUDA version the driver supports"},
    {"cuda-error", Severity::kError, "a CUDA call inside NCCL failed",
     "the CUDA error quoted in NCCL's WARN line names the cause; `dmesg` (Xid errors) and `nvidia-smi` show whether a "
     "GPU faulted",
     ""},
    {"duplicate-gpu", Severity::kError, "two ranks of one communicator use the same GPU",
     "give every rank its own GPU before NCCL's init (torch.cuda.set_device(LOCAL_RANK), or CUDA_VISIBLE_DEVICES per "
     "rank); NCCL 2.30+ allows shared GPUs only with NCCL_MULTI_RANK_GPU_ENABLE=1",
     "the Init lines of the log show the ranks' busId"},
    {"rank-mismatch", Severity::kError,
     "the ranks disagree: different NCCL versions or settings, or different operations, counts or sizes",
     "run one NCCL version and the same NCCL_* settings on every rank, and have every rank call the same "
     "collectives with the same counts in the same order",
     ""},
    {"peer-process-failed", Severity::kError, "another rank exited or failed first; this rank's error follows from it",
     "find the first rank that failed (its own log or exit status holds the cause: a crash, out of memory, a timeout)",
     ""},
    {"socket-interface-not-found", Severity::kError, "NCCL found no usable network interface for its sockets",
     "set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on (`ip -br addr`; e.g. eth0, ib0, ^docker,lo)",
     ""},
    {"bootstrap-connect-failed", Severity::kError,
     "ranks could not connect to each other over TCP (NCCL's bootstrap or socket transport)",
     "check MASTER_ADDR/MASTER_PORT or NCCL_COMM_ID, that every rank started, NCCL_SOCKET_IFNAME (the interface the "
     "ranks reach each other on), and firewalls or security groups (NCCL uses ephemeral TCP ports between all ranks)",
     "the address in the WARN line: `nc -zv ADDRESS PORT` from the other node"},
    {"ib-error", Severity::kError, "an InfiniBand/RoCE device or transfer failed",
     "check the fabric: port state (`ibstat`, `ibv_devinfo`), link errors (`perfquery`), cables and switch logs; "
     "exclude a bad port with NCCL_IB_HCA; on RoCE set NCCL_IB_GID_INDEX; NCCL_IB_TIMEOUT for long fabrics",
     "the WARN's status (e.g. transport retry counter exceeded) and vendor error"},
    {"ib-memlock", Severity::kError, "the locked-memory limit stops NCCL registering memory with the NIC",
     "raise the memlock limit (ulimit -l unlimited; docker --ulimit memlock=-1; systemd LimitMEMLOCK=infinity)",
     "`ulimit -l` in the job's environment"},
    {"no-transport", Severity::kError, "NCCL found no transport between two ranks",
     "a disabled transport left none: unset NCCL_P2P_DISABLE/NCCL_SHM_DISABLE, or allow a network (NCCL_IB_DISABLE, "
     "NCCL_NET, NCCL_SOCKET_IFNAME)",
     ""},
    {"nvml-unavailable", Severity::kWarning, "NCCL could not load NVML (libnvidia-ml.so.1)",
     "make the driver's libraries visible to the job (the NVIDIA Container Toolkit in containers; LD_LIBRARY_PATH)",
     ""},
    {"nccl-invalid-usage", Severity::kError, "the program called NCCL wrongly",
     "NCCL's WARN line names the argument: check rank < nranks, one ncclUniqueId for all ranks of a communicator, the "
     "device selected before init, and that no communicator is used after an error",
     ""},
    {"nccl-system-error", Severity::kError, "a system call inside NCCL failed (ncclSystemError)",
     "the WARN line before the error names the call; common causes are a full /dev/shm, the open-files limit "
     "(ulimit -n) and the locked-memory limit (ulimit -l)",
     "rerun with NCCL_DEBUG=INFO (WARN lines name the failing call)"},
    {"nccl-internal-error", Severity::kError, "NCCL reported an internal error (ncclInternalError)",
     "often a topology, plugin or version problem: check NCCL_NET_PLUGIN/NCCL_TOPO_FILE settings and that the ranks "
     "run one NCCL version; otherwise report it to NVIDIA/nccl with the NCCL_DEBUG=INFO log",
     ""},
    {"unknown", Severity::kInfo, "no known cause explains this pair's path",
     "collect `nvidia-smi topo -m`, `nvidia-smi topo -p2p r`, the NCCL_DEBUG=INFO log and `p2ptrace doctor` from the node",
     ""},
}};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 10 || v == std::floor(v) ? "%.0f" : "%.1f", v);
  return buf;
}

std::string Range(const Bandwidth& b) {
  return b.low == b.high ? "~" + Num(b.low) + " GB/s" : "~" + Num(b.low) + "-" + Num(b.high) + " GB/s";
}

int NvLinkCount(std::string_view link) {
  if (link.size() < 3 || link.substr(0, 2) != "NV") return 0;
  int n = 0;
  auto [p, ec] = std::from_chars(link.data() + 2, link.data() + link.size(), n);
  return ec == std::errc() && p == link.data() + link.size() ? n : 0;
}

}  // namespace

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo: return "info";
    case Severity::kWarning: return "warning";
    case Severity::kError: return "error";
  }
  return "info";
}

std::span<const CauseInfo> AllCauses() { return kCauses; }

const CauseInfo* FindCause(std::string_view id) {
  for (const CauseInfo& c : kCauses)
    if (c.id == id) return &c;
  return nullptr;
}

std::string_view CauseForNcclRefusal(std::string_view kind) {
  if (kind == "nvml-p2p-disabled" || kind == "nvml-p2p-disabled-nvlink") return "nvml-p2p-status";
  return kind;
}

Bandwidth ExpectedBandwidth(int transport_class, std::string_view link, int pcie_gen) {
  auto pcie = [&]() -> Bandwidth {
    switch (pcie_gen) {
      case 3: return {12, 12, "PCIe Gen3 x16"};
      case 4: return {25, 25, "PCIe Gen4 x16"};
      case 5: return {55, 55, "PCIe Gen5 x16"};
      default: return {25, 55, "PCIe Gen4-Gen5 x16"};
    }
  };
  switch (transport_class) {
    case P2PTRACE_TRANSPORT_NVLINK: {
      // ~25 GB/s line rate per link and direction, ~80% of it measured (H100 NV18: ~370 GB/s).
      int links = NvLinkCount(link);
      if (links > 0) return {20.0 * links, 20.0 * links, std::string(link) + " at ~20 GB/s per link"};
      return {20, 370, "NVLink, link count unknown"};
    }
    case P2PTRACE_TRANSPORT_PCIE_P2P: return pcie();
    case P2PTRACE_TRANSPORT_P2P: return {pcie().low, 370, "P2P over PCIe or NVLink"};
    case P2PTRACE_TRANSPORT_P2P_INDIRECT: return {20, 370, "P2P through another GPU's NVLinks"};
    case P2PTRACE_TRANSPORT_SHM: return {6, 40, "host memory"};
    case P2PTRACE_TRANSPORT_HOST_STAGED: return {6, 40, "copies staged through host memory"};
    case P2PTRACE_TRANSPORT_NET_GDR: return {12, 50, "one IB/RoCE NIC, 100-400 Gb/s, GPUDirect RDMA"};
    case P2PTRACE_TRANSPORT_NET_IB: return {3, 12, "IB/RoCE through host memory (no GPUDirect RDMA)"};
    case P2PTRACE_TRANSPORT_NET_SOCKET: return {1, 3, "TCP sockets, 10-25 GbE"};
    default: return {};
  }
}

std::string ImpactText(int taken_class, int best_class, std::string_view link, int pcie_gen) {
  Bandwidth taken = ExpectedBandwidth(taken_class, link, pcie_gen);
  Bandwidth best = ExpectedBandwidth(best_class, link, pcie_gen);
  if (taken.high <= 0 || best.high <= 0 || best.high <= taken.high) return "";
  double lo = best.low / taken.high, hi = best.high / taken.low;
  std::string ratio = lo >= 0.95 * hi ? Num(hi) + "x" : Num(std::max(lo, 1.0)) + "-" + Num(hi) + "x";
  return std::string(TransportName(taken_class)) + " (" + Range(taken) + ", " + taken.basis + ") instead of " +
         std::string(TransportName(best_class)) + " (" + Range(best) + ", " + best.basis + "): ~" + ratio + " less bandwidth";
}

}  // namespace p2ptrace
