#include "probe/probe.h"

#include "probe/deadline.h"
#include "probe/files.h"
#include "probe/nvml.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <memory>

extern char** environ;

namespace p2ptrace::probe {
namespace {

std::string Basename(const std::string& p) {
  size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

int ToInt(const std::string& s, int fallback) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 0);
  return end != s.c_str() && (*end == '\0' || *end == '\n') && v >= INT_MIN && v <= INT_MAX ? static_cast<int>(v) : fallback;
}

void Step(NodeProbe* p, std::string name, std::string source, std::string status, std::string detail) {
  p->steps.push_back({std::move(name), std::move(source), std::move(status), std::move(detail)});
}

// Where a device sits from its resolved sysfs path ("/sys/devices/pci0000:00/0000:01:00.0/0000:1a:00.0"):
// the root, then the bridges down to the device (the last part), nearest first.
PciPlace PlaceOf(const std::string& real) {
  std::vector<std::string> parts;
  for (size_t s = 0, e; s < real.size(); s = e + 1) {
    e = real.find('/', s);
    if (e == std::string::npos) e = real.size();
    if (e > s) parts.push_back(real.substr(s, e - s));
  }
  PciPlace place;
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i].rfind("pci", 0) == 0 && parts[i].find(':') != std::string::npos) {
      place.root = parts[i];
      for (size_t j = parts.size() - 1; j > i + 1; --j) place.bridges.push_back(parts[j - 1]);
      break;
    }
  return place;
}

// --- procfs / identity ----------------------------------------------------------------------------

void ProbeIdentity(const Files& fs, NodeProbe* p) {
  p->hostname = fs.Line("/proc/sys/kernel/hostname");
  if (p->hostname.empty() && fs.root.empty()) {
    char h[256] = {};
    if (gethostname(h, sizeof h - 1) == 0) p->hostname = h;
  }
  p->boot_id = fs.Line("/proc/sys/kernel/random/boot_id");
  Step(p, "host identity", "/proc/sys/kernel/hostname, /proc/sys/kernel/random/boot_id",
       p->hostname.empty() ? "failed" : "ok", "hostname " + p->hostname + ", boot_id " + p->boot_id);

  if (auto cmd = fs.Read("/proc/cmdline", 8192)) {
    while (!cmd->empty() && cmd->back() == '\n') cmd->pop_back();
    p->cmdline_text = *cmd;
    p->cmdline = ParseKernelCmdline(*cmd);
    Step(p, "kernel cmdline", "/proc/cmdline", "ok",
         (p->cmdline.iommu_tokens.empty() ? std::string("no IOMMU setting") : p->cmdline.iommu_tokens) +
             (p->cmdline.acs_override.empty() ? "" : "; pcie_acs_override=" + p->cmdline.acs_override));
  } else {
    Step(p, "kernel cmdline", "/proc/cmdline", "failed", "not readable");
  }

  if (auto params = fs.Read("/proc/driver/nvidia/params")) {
    p->regkeys = ParseNvidiaParams(*params);
    Step(p, "driver regkeys", "/proc/driver/nvidia/params", "ok",
         p->regkeys.evidence.empty() ? "no RegistryDwords setting that turns P2P off" : p->regkeys.evidence);
  } else {
    Step(p, "driver regkeys", "/proc/driver/nvidia/params", "missing", "no NVIDIA kernel driver loaded");
  }

  if (auto cpuinfo = fs.Read("/proc/cpuinfo", 64 * 1024)) {
    bool hypervisor = false;
    size_t pos = 0;
    while (pos < cpuinfo->size()) {
      size_t eol = cpuinfo->find('\n', pos);
      std::string line = cpuinfo->substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
      pos = eol == std::string::npos ? cpuinfo->size() : eol + 1;
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
      std::string value = line.substr(std::min(line.size(), colon + 2));
      if (key == "vendor_id" && p->cpu_vendor == CpuVendor::kUnknown) p->cpu_vendor = ParseCpuVendor(value).value_or(CpuVendor::kUnknown);
      else if (key == "CPU implementer" && p->cpu_vendor == CpuVendor::kUnknown) p->cpu_vendor = CpuVendor::kArm;
      else if (key == "flags" && (" " + value + " ").find(" hypervisor ") != std::string::npos) hypervisor = true;
    }
    std::string dmi = fs.Line("/sys/class/dmi/id/sys_vendor");
    static const char* kVmVendors[] = {"QEMU", "KVM", "VMware", "Microsoft Corporation", "Xen", "Amazon EC2", "Google",
                                       "innotek GmbH", "Parallels"};
    bool vm_dmi = std::any_of(std::begin(kVmVendors), std::end(kVmVendors),
                              [&](const char* v) { return dmi.find(v) != std::string::npos; });
    if (hypervisor || vm_dmi) {
      p->virtualization = Virtualization::kPassthrough;
      p->virtualization_evidence = std::string(hypervisor ? "/proc/cpuinfo has the hypervisor flag" : "") +
                                   (hypervisor && vm_dmi ? "; " : "") + (vm_dmi ? "DMI sys_vendor is " + dmi : "");
    } else {
      p->virtualization = Virtualization::kNone;
    }
    Step(p, "CPU and VM", "/proc/cpuinfo, /sys/class/dmi/id/sys_vendor", "ok",
         std::string("CPU vendor ") + std::string(CpuVendorName(p->cpu_vendor)) +
             (p->virtualization_evidence.empty() ? "; bare metal" : "; " + p->virtualization_evidence));
  } else {
    Step(p, "CPU and VM", "/proc/cpuinfo", "failed", "not readable");
  }

  // Containers: Docker's and Podman's marker files, Kubernetes' environment, the cgroup path.
  std::string cgroup = fs.Read("/proc/1/cgroup", 16 * 1024).value_or("");
  if (fs.Exists("/.dockerenv") || cgroup.find("docker") != std::string::npos) p->container = "docker";
  else if (fs.Exists("/run/.containerenv")) p->container = "podman";
  if (std::getenv("KUBERNETES_SERVICE_HOST") || cgroup.find("kubepods") != std::string::npos) p->container = "kubernetes";
  Step(p, "container", "/.dockerenv, /run/.containerenv, /proc/1/cgroup, KUBERNETES_SERVICE_HOST", "ok",
       p->container.empty() ? "none seen" : p->container);

  // /dev/shm: device and size. A sysroot cannot hold a tmpfs, so the simulated node describes it
  // in p2psim/dev_shm (and a simulated container's own /dev/shm in P2PSIM_SHM_DEVICE).
  if (!fs.root.empty() && fs.Exists("/p2psim/dev_shm")) {
    std::string text = fs.Read("/p2psim/dev_shm", 4096).value_or("");
    long mb = -1, dev = -1;
    size_t s = text.find("size_mb ");
    if (s != std::string::npos) mb = std::strtol(text.c_str() + s + 8, nullptr, 10);
    size_t d = text.find("device ");
    if (d != std::string::npos) dev = std::strtol(text.c_str() + d + 7, nullptr, 10);
    if (const char* own = std::getenv("P2PSIM_SHM_DEVICE"); own && *own) dev = std::strtol(own, nullptr, 10);
    if (mb >= 0) p->shm_bytes = static_cast<uint64_t>(mb) << 20;
    if (dev >= 0) p->shm_dev = static_cast<uint64_t>(dev);
    Step(p, "/dev/shm", fs.root + "/p2psim/dev_shm", "ok",
         "device " + std::to_string(dev) + ", " + std::to_string(mb) + " MiB");
  } else {
    struct stat st;
    struct statvfs vfs;
    std::string path = fs.Path("/dev/shm");
    if (stat(path.c_str(), &st) == 0 && statvfs(path.c_str(), &vfs) == 0) {
      p->shm_dev = static_cast<uint64_t>(st.st_dev);
      p->shm_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
      Step(p, "/dev/shm", path, "ok",
           "device " + std::to_string(st.st_dev) + ", " + std::to_string(*p->shm_bytes >> 20) + " MiB");
    } else {
      Step(p, "/dev/shm", path, "failed", std::strerror(errno));
    }
  }

  // Network: RDMA HCAs, and GPUDirect RDMA through nvidia_peermem.
  std::vector<std::string> hcas = fs.List("/sys/class/infiniband");
  p->rdma_nics = !hcas.empty();
  for (const std::string& h : hcas) {
    NodeProbe::Nic n;
    n.name = h;
    std::string port = "/sys/class/infiniband/" + h + "/ports/1/";
    std::string state = fs.Line(port + "state");  // "4: ACTIVE"
    n.state = state.substr(state.find(':') == std::string::npos ? 0 : state.find(':') + 1);
    n.state.erase(0, n.state.find_first_not_of(' '));
    std::string rate = fs.Line(port + "rate");    // "200 Gb/sec (4X HDR)"
    if (!rate.empty() && rate[0] >= '0' && rate[0] <= '9') n.rate_gbps = std::atoi(rate.c_str());
    // device -> "/sys/devices/pci0000:00/…/0000:3b:00.0": the NIC's own PCI function.
    std::string device = fs.Resolve("/sys/class/infiniband/" + h + "/device");
    if (!device.empty() && device.rfind("/sys/devices/", 0) == 0) {
      n.bus_id = NormalizeBusId(Basename(device));
      n.pci = PlaceOf(device);
      n.pci.numa_node = ToInt(fs.Line("/sys/class/infiniband/" + h + "/device/numa_node"), -1);
    }
    p->nics.push_back(n);
  }
  p->kernel_release = fs.Line("/proc/sys/kernel/osrelease");
  if (auto version = fs.Read("/proc/driver/nvidia/version", 4096))
    p->open_kernel_module = version->find("Open Kernel Module") != std::string::npos;
  std::string modules = fs.Read("/proc/modules", 64 * 1024).value_or("");
  bool peermem = fs.Exists("/sys/module/nvidia_peermem") || modules.find("nvidia_peermem ") != std::string::npos;
  p->peermem_loaded = peermem;
  p->peermem_registered = fs.Exists("/sys/kernel/mm/memory_peers/nv_mem");
  std::string hca_list;
  for (const NodeProbe::Nic& n : p->nics) {
    hca_list += (hca_list.empty() ? "" : ", ") + n.name;
    if (!n.bus_id.empty()) hca_list += " (" + n.bus_id + ", NUMA " + std::to_string(n.pci.numa_node) + ")";
    if (!n.state.empty()) hca_list += " port 1 " + n.state + (n.rate_gbps > 0 ? " " + std::to_string(n.rate_gbps) + " Gb/s" : "");
  }
  std::string gdr_text = peermem ? (p->peermem_registered ? "; nvidia_peermem loaded and registered"
                                                          : "; nvidia_peermem loaded, not registered (memory_peers/nv_mem missing)")
                                 : p->peermem_registered ? "; a peer-memory client registered as nv_mem" : "; nvidia_peermem not loaded";
  Step(p, "RDMA", "/sys/class/infiniband, /sys/module/nvidia_peermem, /sys/kernel/mm/memory_peers", "ok",
       hcas.empty() ? "no RDMA HCA" : "HCAs " + hca_list + gdr_text);
}

// --- sysfs PCI ----------------------------------------------------------------------------------

void ProbePci(const Files& fs, NodeProbe* p) {
  std::vector<std::string> devices = fs.List("/sys/bus/pci/devices");
  if (devices.empty()) {
    Step(p, "PCI tree", "/sys/bus/pci/devices", "failed", "not readable");
    return;
  }
  std::vector<std::string> groups = fs.List("/sys/kernel/iommu_groups");
  p->iommu_groups = fs.Exists("/sys/kernel/iommu_groups") ? static_cast<int>(groups.size()) : -1;
  int found = 0;
  for (const std::string& bdf : devices) {
    std::string dir = "/sys/bus/pci/devices/" + bdf;
    if (fs.Line(dir + "/vendor") != "0x10de") continue;
    std::string cls = fs.Line(dir + "/class");
    if (cls.rfind("0x0300", 0) != 0 && cls.rfind("0x0302", 0) != 0) continue;
    ProbedGpu g;
    g.bus_id = NormalizeBusId(bdf);
    g.index = found++;
    g.numa_node = ToInt(fs.Line(dir + "/numa_node"), -1);
    g.pcie.gen = PcieGenFromLinkSpeed(fs.Line(dir + "/current_link_speed"));
    g.pcie.max_gen = PcieGenFromLinkSpeed(fs.Line(dir + "/max_link_speed"));
    g.pcie.width = ToInt(fs.Line(dir + "/current_link_width"), 0);
    g.pcie.max_width = ToInt(fs.Line(dir + "/max_link_width"), 0);
    PciPlace place = PlaceOf(fs.Resolve(dir));
    g.root = place.root;
    g.bridges = place.bridges;
    std::string group = Basename(fs.Resolve(dir + "/iommu_group"));
    if (!group.empty() && fs.Exists(dir + "/iommu_group")) {
      g.iommu_group = ToInt(group, -1);
      g.iommu_group_type = fs.Line("/sys/kernel/iommu_groups/" + group + "/type");
    }
    p->gpus.push_back(std::move(g));
  }
  std::string detail = std::to_string(found) + " NVIDIA GPU(s)";
  for (const ProbedGpu& g : p->gpus)
    detail += "; " + g.bus_id + " Gen" + std::to_string(g.pcie.gen) + " x" + std::to_string(g.pcie.width) + " of Gen" +
              std::to_string(g.pcie.max_gen) + " x" + std::to_string(g.pcie.max_width) + ", NUMA " +
              std::to_string(g.numa_node) + ", " + std::to_string(g.bridges.size()) + " bridge(s) to " + g.root;
  Step(p, "PCI tree", "/sys/bus/pci/devices", "ok", detail);
  Step(p, "IOMMU groups", "/sys/kernel/iommu_groups", p->iommu_groups < 0 ? "missing" : "ok",
       p->iommu_groups < 0 ? "not present" : std::to_string(p->iommu_groups) + " group(s)");
  // The IOMMU's mode: the GPUs' group type says what the kernel did; the cmdline what was asked.
  p->iommu = p->cmdline.iommu;
  for (const ProbedGpu& g : p->gpus)
    if (!g.iommu_group_type.empty()) {
      p->iommu = g.iommu_group_type == "identity" ? IommuMode::kPassthrough
                 : g.iommu_group_type.rfind("DMA", 0) == 0 ? IommuMode::kTranslating : p->iommu;
      break;
    }
  if (p->iommu == IommuMode::kUnknown && p->iommu_groups == 0) p->iommu = IommuMode::kOff;
}

// ACS control of every bridge on a pair's path, from config space (complete only for root).
void ProbeAcs(const Files& fs, NodeProbe* p) {
  std::vector<std::string> unreadable;
  int read = 0;
  for (ProbedPair& pr : p->pairs) {
    const ProbedGpu* a = p->Gpu(pr.a);
    const ProbedGpu* b = p->Gpu(pr.b);
    if (!a || !b || a->root.empty() || a->root != b->root) continue;
    std::vector<std::string> path;
    for (const ProbedGpu* g : {a, b})
      for (const std::string& br : g->bridges)
        if (std::find(path.begin(), path.end(), br) == path.end()) path.push_back(br);
    bool shared = false;
    for (const std::string& br : a->bridges)
      if (std::find(b->bridges.begin(), b->bridges.end(), br) != b->bridges.end()) shared = true;
    if (shared && a->iommu_group >= 0 && b->iommu_group >= 0) pr.split_iommu_groups = a->iommu_group != b->iommu_group;
    bool any_unknown = false, redirect = false;
    for (const std::string& br : path) {
      auto cfg = fs.Read("/sys/bus/pci/devices/" + br + "/config", 4096);
      std::optional<AcsControl> acs;
      if (cfg) acs = ParseAcsFromConfig({reinterpret_cast<const uint8_t*>(cfg->data()), cfg->size()});
      if (!acs) {
        any_unknown = true;
        if (std::find(unreadable.begin(), unreadable.end(), br) == unreadable.end()) unreadable.push_back(br);
        continue;
      }
      ++read;
      if (acs->Redirects()) {
        redirect = true;
        pr.acs_bridges.push_back(br);
      }
    }
    if (redirect) pr.acs_redirect = true;
    else if (!any_unknown && !path.empty()) pr.acs_redirect = false;
  }
  if (!unreadable.empty())
    Step(p, "ACS control", "/sys/bus/pci/devices/<bridge>/config", "unknown",
         "config space past 64 bytes needs root; run: " + AcsCommand(unreadable));
  else
    Step(p, "ACS control", "/sys/bus/pci/devices/<bridge>/config", "ok", std::to_string(read) + " bridge read(s)");
}

// --- NVML ----------------------------------------------------------------------------------------

P2pStatus FromNvml(int s) {
  switch (s) {
    case 0: return P2pStatus::kOk;
    case 1: return P2pStatus::kChipsetNotSupported;
    case 2: return P2pStatus::kGpuNotSupported;
    case 3: return P2pStatus::kTopologyNotSupported;
    case 4: return P2pStatus::kDisabledByRegkey;
    case 5: return P2pStatus::kNotSupported;
    default: return P2pStatus::kNvmlUnknown;
  }
}

std::string AncestorLabel(int level) {
  switch (level) {
    case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
    default: return "";
  }
}

// What NVML said, gathered on a helper thread; the probe takes it only if it came in time.
struct NvmlResult {
  bool loaded = false, ok = false;
  std::string error, driver;
  std::vector<ProbedGpu> gpus;    // NVML order
  std::vector<ProbedPair> pairs;  // indices = NVML's
};

// The compute processes on one GPU; unset when NVML cannot say.
std::optional<std::vector<unsigned>> ComputePids(const NvmlApi& n, void* h) {
  if (!n.GetComputeProcesses) return std::nullopt;
  std::vector<NvmlProcessInfo> infos(16);
  for (int tries = 0; tries < 4; ++tries) {  // the list may grow between the asking and the reading
    unsigned count = static_cast<unsigned>(infos.size());
    int r = n.GetComputeProcesses(h, &count, infos.data());
    if (r == 0) {
      std::vector<unsigned> pids;
      for (unsigned i = 0; i < count && i < infos.size(); ++i) pids.push_back(infos[i].pid);
      return pids;
    }
    if (r != 7 /* NVML_ERROR_INSUFFICIENT_SIZE */) return std::nullopt;
    infos.resize(std::max<size_t>(count, infos.size()) * 2);
  }
  return std::nullopt;
}

void QueryNvml(NvmlResult* out, bool gpu_processes) {
  const NvmlApi* api = LoadNvml();
  if (api == nullptr) {
    out->error = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)";
    return;
  }
  out->loaded = true;
  const NvmlApi& n = *api;
  if (!n.Init || !n.GetCount || !n.GetHandle || !n.GetPci) {
    out->error = "libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlDeviceGetCount_v2/…";
    return;  // the library stays loaded: unloading a driver library mid-process is riskier
  }
  int r = n.Init();
  if (r != 0) {
    out->error = "nvmlInit_v2 returned " + std::to_string(r) + (r == 9 ? " (driver not loaded)" : "");
    return;
  }
  char ver[96] = {};
  if (n.DriverVersion && n.DriverVersion(ver, sizeof ver) == 0) out->driver = ver;
  unsigned count = 0;
  n.GetCount(&count);
  count = std::min(count, 64u);
  std::vector<void*> handles;
  for (unsigned i = 0; i < count; ++i) {
    void* h = nullptr;
    if (n.GetHandle(i, &h) != 0) continue;
    ProbedGpu g;
    g.index = static_cast<int>(i);
    char buf[128] = {};
    if (n.GetName && n.GetName(h, buf, sizeof buf) == 0) g.name = buf;
    char uuid[96] = {};
    if (n.GetUuid && n.GetUuid(h, uuid, sizeof uuid) == 0) g.uuid = uuid;
    NvmlPciInfo pci{};
    if (n.GetPci(h, &pci) == 0) g.bus_id = NormalizeBusId(std::string(pci.busId, strnlen(pci.busId, sizeof pci.busId)));
    unsigned cur = 0, pend = 0;
    if (n.GetMig && n.GetMig(h, &cur, &pend) == 0) g.mig = cur == 1;
    int virt = -1;
    if (n.GetVirt && n.GetVirt(h, &virt) == 0) g.nvml_virtualization = virt;
    unsigned v = 0;
    if (n.CurGen && n.CurGen(h, &v) == 0) g.pcie.gen = static_cast<int>(v);
    if (n.MaxGen && n.MaxGen(h, &v) == 0) g.pcie.max_gen = static_cast<int>(v);
    if (n.CurWidth && n.CurWidth(h, &v) == 0) g.pcie.width = static_cast<int>(v);
    if (n.MaxWidth && n.MaxWidth(h, &v) == 0) g.pcie.max_width = static_cast<int>(v);
    if (gpu_processes) g.compute_pids = ComputePids(n, h);
    out->gpus.push_back(std::move(g));
    handles.push_back(h);
  }
  // NVLinks per remote GPU: links present (the state answers) and active. A link whose far end is
  // no GPU of the node goes to an NVSwitch (counted per GPU: through the switches it reaches every
  // GPU that NVML's NVLink P2P status says it can).
  std::vector<std::vector<std::pair<int, int>>> lanes(handles.size(), std::vector<std::pair<int, int>>(handles.size()));
  std::vector<int> switch_lanes(handles.size(), 0);
  for (size_t i = 0; i < handles.size(); ++i) {
    if (!n.GetLinkState || !n.GetLinkRemote) break;
    for (unsigned link = 0; link < 36; ++link) {
      int active = 0;
      if (n.GetLinkState(handles[i], link, &active) != 0) continue;
      NvmlPciInfo remote{};
      if (n.GetLinkRemote(handles[i], link, &remote) != 0) continue;
      std::string bus = NormalizeBusId(std::string(remote.busId, strnlen(remote.busId, sizeof remote.busId)));
      bool to_gpu = false;
      for (size_t j = 0; j < out->gpus.size(); ++j)
        if (j != i && out->gpus[j].bus_id == bus) {
          to_gpu = true;
          lanes[i][j].first++;
          if (active) lanes[i][j].second++;
        }
      if (!to_gpu && active) switch_lanes[i]++;
    }
  }
  int widest = 0;  // the most links any GPU pair of the node shows directly
  for (const auto& row : lanes)
    for (const auto& [present, active] : row) widest = std::max(widest, present);
  for (size_t i = 0; i < handles.size(); ++i)
    for (size_t j = i + 1; j < handles.size(); ++j) {
      ProbedPair pr;
      pr.a = out->gpus[i].index;
      pr.b = out->gpus[j].index;
      int s = -1;
      if (n.GetP2P && n.GetP2P(handles[i], handles[j], 0, &s) == 0) pr.nvml_read = FromNvml(s);
      if (n.GetP2P && n.GetP2P(handles[i], handles[j], 1, &s) == 0) pr.nvml_write = FromNvml(s);
      int level = -1;
      std::string pcie_label;
      if (n.GetAncestor && n.GetAncestor(handles[i], handles[j], &level) == 0) pcie_label = AncestorLabel(level);
      auto [present, active] = lanes[i][j];
      if (present > 0) {
        pr.nvlinks_present = present;
        pr.nvlinks_active = active;
      }
      pr.link = active > 0 ? "NV" + std::to_string(present) : pcie_label;
      pr.link_source = "NVML";
      // No link names the other GPU, yet NVML says they talk over NVLink: an NVSwitch between them
      // (its links counted, as nvidia-smi's NV18 on an HGX board), or direct links past those NVML
      // numbers (taken as wide as the node's widest pair). NCCL and CUDA use NVLink there whatever
      // the PCIe path between the sockets is.
      int nvlink_status = -1;
      if (active == 0 && n.GetP2P && n.GetP2P(handles[i], handles[j], 2, &nvlink_status) == 0 &&
          FromNvml(nvlink_status) == P2pStatus::kOk) {
        int links = std::min(switch_lanes[i], switch_lanes[j]);
        if (links == 0) links = std::max(widest, 1);
        pr.nvlinks_active = links;
        pr.link = "NV" + std::to_string(links);
        pr.link_source = links == std::min(switch_lanes[i], switch_lanes[j]) ? "NVML (NVSwitch)" : "NVML P2P status (NVLink)";
      }
      out->pairs.push_back(std::move(pr));
    }
  out->ok = true;
}

void ProbeNvml(const ProbeOptions& o, NodeProbe* p) {
  auto started = std::chrono::steady_clock::now();
  std::optional<NvmlResult> answered = WithDeadline([processes = o.gpu_processes] {
    NvmlResult r;
    QueryNvml(&r, processes);
    return r;
  }, o.nvml_timeout_ms);
  if (!answered) {
    Step(p, "NVML", "libnvidia-ml.so.1", "timed out",
         "no answer within " + std::to_string(o.nvml_timeout_ms) + " ms (or no thread to ask it); continuing without NVML");
    return;
  }
  NvmlResult r = std::move(*answered);
  long ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  if (!r.ok) {
    Step(p, "NVML", "libnvidia-ml.so.1", r.loaded ? "failed" : "missing", r.error);
    return;
  }
  p->nvml = true;
  p->driver_version = r.driver;
  // NVML's list is the node's GPUs in its numbering; sysfs adds the PCI chain by bus id.
  std::vector<ProbedGpu> merged;
  for (ProbedGpu& g : r.gpus) {
    for (const ProbedGpu& s : p->gpus)
      if (s.bus_id == g.bus_id) {
        g.numa_node = s.numa_node;
        g.iommu_group = s.iommu_group;
        g.iommu_group_type = s.iommu_group_type;
        g.bridges = s.bridges;
        g.root = s.root;
        if (g.pcie.max_gen == 0) g.pcie = s.pcie;
      }
    merged.push_back(std::move(g));
  }
  p->gpus = std::move(merged);
  p->pairs = std::move(r.pairs);
  std::string detail = "driver " + (r.driver.empty() ? std::string("?") : r.driver) + ", " + std::to_string(p->gpus.size()) +
                       " GPU(s) in " + std::to_string(ms) + " ms";
  for (const ProbedGpu& g : p->gpus) {
    detail += "; GPU" + std::to_string(g.index) + " " + g.name + " " + g.bus_id;
    if (g.mig && *g.mig) detail += " MIG on";
    if (g.nvml_virtualization > 0) detail += " virtualization mode " + std::to_string(g.nvml_virtualization);
  }
  Step(p, "NVML", "libnvidia-ml.so.1", "ok", detail);
  for (const ProbedGpu& g : p->gpus)
    if (g.nvml_virtualization > 0 && (!p->virtualization || *p->virtualization == Virtualization::kNone)) {
      p->virtualization = g.nvml_virtualization == 2 ? Virtualization::kVgpu : Virtualization::kPassthrough;
      p->virtualization_evidence = "NVML virtualization mode " + std::to_string(g.nvml_virtualization) + " for GPU" +
                                   std::to_string(g.index) + (g.nvml_virtualization == 2 ? " (vGPU)" : " (passthrough)");
    }
}

// --- CUDA ----------------------------------------------------------------------------------------

void ProbeCuda(const CudaQueries& c, NodeProbe* p) {
  int n = 0;
  if (c.GetDeviceCount == nullptr || c.GetDeviceCount(&n) != 0) {
    Step(p, "CUDA", "cudaGetDeviceCount", "failed", "the runtime has no device");
    return;
  }
  p->cuda = true;
  n = std::min(n, 64);
  std::vector<int> gpu_of(static_cast<size_t>(n), -1);
  for (int d = 0; d < n; ++d) {
    char bus[32] = {};
    if (c.DeviceGetPCIBusId == nullptr || c.DeviceGetPCIBusId(bus, sizeof bus, d) != 0) continue;
    std::string b = NormalizeBusId(bus);
    for (ProbedGpu& g : p->gpus)
      if (g.bus_id == b) {
        g.cuda = d;
        gpu_of[static_cast<size_t>(d)] = g.index;
      }
    if (gpu_of[static_cast<size_t>(d)] < 0) {  // no NVML and no sysfs: CUDA's own numbering
      ProbedGpu g;
      g.index = static_cast<int>(p->gpus.size());
      g.cuda = d;
      g.bus_id = b;
      gpu_of[static_cast<size_t>(d)] = g.index;
      p->gpus.push_back(std::move(g));
    }
  }
  std::string detail = std::to_string(n) + " visible device(s)";
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      int ab = -1, ba = -1;
      if (c.CanAccessPeer == nullptr || c.CanAccessPeer(&ab, a, b) != 0 || c.CanAccessPeer(&ba, b, a) != 0) continue;
      int ga = gpu_of[static_cast<size_t>(a)], gb = gpu_of[static_cast<size_t>(b)];
      ProbedPair* pr = nullptr;
      for (ProbedPair& q : p->pairs)
        if ((q.a == ga && q.b == gb) || (q.a == gb && q.b == ga)) pr = &q;
      if (pr == nullptr) {
        p->pairs.push_back(ProbedPair{.a = std::min(ga, gb), .b = std::max(ga, gb)});
        pr = &p->pairs.back();
      }
      pr->cuda_can_access = ab == 1 && ba == 1;
      int v = 0;
      if (c.GetP2PAttribute && c.GetP2PAttribute(&v, 1, a, b) == 0) pr->cuda_perf_rank = v;
      if (c.GetP2PAttribute && c.GetP2PAttribute(&v, 2, a, b) == 0) pr->cuda_access_supported = v;
      if (c.GetP2PAttribute && c.GetP2PAttribute(&v, 3, a, b) == 0) pr->cuda_native_atomics = v;
      detail += "; canAccessPeer(" + std::to_string(a) + "," + std::to_string(b) + ")=" + std::to_string(ab) + "/" +
                std::to_string(ba);
    }
  Step(p, "CUDA", "cudaDeviceCanAccessPeer, cudaDeviceGetP2PAttribute", "ok", detail);
}

}  // namespace

bool AllowedEnvName(const std::string& name) {
  static const char* kPrefixes[] = {"NCCL_", "CUDA_", "TORCH_NCCL_"};
  static const char* kNames[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"};
  for (const char* p : kPrefixes)
    if (name.rfind(p, 0) == 0) return true;
  return std::find_if(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; }) != std::end(kNames);
}

NodeProbe GatherNodeProbe(const ProbeOptions& o) {
  NodeProbe p;
  p.sysroot = o.sysroot;
  Files fs{o.sysroot};
  while (!fs.root.empty() && fs.root.back() == '/') fs.root.pop_back();
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    std::string name(*e, static_cast<size_t>(eq - *e));
    if (AllowedEnvName(name)) p.env[name] = eq + 1;
  }
  ProbeIdentity(fs, &p);
  ProbePci(fs, &p);
  if (o.nvml) ProbeNvml(o, &p);
  else Step(&p, "NVML", "libnvidia-ml.so.1", "unknown", "not asked");
  // Without NVML, the sysfs chains name the path of each pair.
  if (!p.nvml)
    for (size_t i = 0; i < p.gpus.size(); ++i)
      for (size_t j = i + 1; j < p.gpus.size(); ++j)
        p.pairs.push_back(ProbedPair{.a = p.gpus[i].index, .b = p.gpus[j].index,
                                     .link = PathFromChains(p.gpus[i], p.gpus[j]), .link_source = "sysfs"});
  for (ProbedGpu& g : p.gpus)
    g.regkey_disabled = p.regkeys.p2p_disabled_all ||
                        std::find(p.regkeys.p2p_disabled.begin(), p.regkeys.p2p_disabled.end(), g.bus_id) !=
                            p.regkeys.p2p_disabled.end();
  ProbeAcs(fs, &p);
  if (o.cuda) ProbeCuda(*o.cuda, &p);
  else Step(&p, "CUDA", "cudaDeviceCanAccessPeer", "unknown", "not asked (no CUDA runtime has answered yet)");
  return p;
}

}  // namespace p2ptrace::probe
