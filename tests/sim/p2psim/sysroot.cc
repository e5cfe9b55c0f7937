#include "tests/sim/p2psim/sysroot.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <vector>

namespace p2psim {

const char kSysrootRules[] =
    "  PCI tree: CPU i is root bus pci0000:<i*0x40> (closer spacing past 4 CPUs); each switch is\n"
    "  one bridge directory under its parent; GPUs sit under their parent at their bus_id; switches\n"
    "  and NICs get synthetic ids 0000:bb:00.0 on the first bus after their CPU's root bus that no\n"
    "  GPU uses. Bridges and NICs report the host's best GPU link generation, x16 (a switch's\n"
    "  \"pcie\" its own). GPUs and bridges have aer_dev_{correctable,nonfatal,fatal} (the file's \"aer\").\n"
    "  IOMMU: groups exist when the command line has intel_iommu=on or amd_iommu=on (iommu=pt\n"
    "  included: group type \"identity\" instead of \"DMA-FQ\"; iommu=off turns them off). A switch\n"
    "  with acs_redirect=false has no ACS: everything below it (below the topmost such switch)\n"
    "  shares one group, its own bridge has its own; with ACS, and under a CPU directly, every\n"
    "  device has its own group. With the IOMMU off, sys/kernel/iommu_groups is empty.\n";

namespace {

namespace fs = std::filesystem;
using p2ptrace::Host;

// Writes under one root and remembers the first failure, so the generator below reads as a list of
// facts rather than a ladder of error checks.
class TreeWriter {
 public:
  explicit TreeWriter(fs::path root) : root_(std::move(root)) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  void Dir(const fs::path& rel) {
    if (!ok()) return;
    std::error_code ec;
    fs::create_directories(root_ / rel, ec);
    if (ec) Fail(rel, ec);
  }

  void File(const fs::path& rel, const std::string& text) {
    Dir(rel.parent_path());
    if (!ok()) return;
    std::error_code ignored;
    fs::remove(root_ / rel, ignored);  // a stale symlink here must not redirect the write
    errno = 0;
    std::ofstream out(root_ / rel, std::ios::binary | std::ios::trunc);
    if (out) out << text;
    if (out) out.close();
    if (!out) Fail(rel, std::error_code(errno ? errno : EIO, std::generic_category()));
  }

  // A relative symlink at `rel` to `target` (both relative to the root), as sysfs links are.
  void Link(const fs::path& rel, const fs::path& target) {
    Dir(rel.parent_path());
    if (!ok()) return;
    std::error_code ec;
    fs::remove(root_ / rel, ec);
    ec.clear();
    fs::create_symlink(target.lexically_relative(rel.parent_path()), root_ / rel, ec);
    if (ec) Fail(rel, ec);
  }

  void RemoveTree(const fs::path& rel) {
    if (!ok()) return;
    std::error_code ec;
    fs::remove_all(root_ / rel, ec);  // does not follow symlinks
    if (ec) Fail(rel, ec);
  }

 private:
  void Fail(const fs::path& rel, const std::error_code& ec) {
    error_ = (root_ / rel).string() + ": " + ec.message();
  }

  fs::path root_;
  std::string error_;
};

bool HasToken(const std::string& cmdline, const std::string& token) {
  std::istringstream words(cmdline);
  for (std::string w; words >> w;)
    if (w == token) return true;
  return false;
}

std::string Hex(unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*x", digits, value);
  return buf;
}

int BusOf(const std::string& bus_id) {  // "dddd:bb:dd.f", validated by the topology parser
  int bus = 0;
  std::from_chars(bus_id.data() + 5, bus_id.data() + 7, bus, 16);
  return bus;
}

// Linux's text in current_link_speed / max_link_speed.
std::string LinkSpeed(int gen) {
  switch (gen) {
    case 1: return "2.5 GT/s PCIe";
    case 2: return "5.0 GT/s PCIe";
    case 3: return "8.0 GT/s PCIe";
    case 4: return "16.0 GT/s PCIe";
    case 5: return "32.0 GT/s PCIe";
    case 6: return "64.0 GT/s PCIe";
  }
  return "Unknown";
}

struct PciDevice {
  enum class Kind { kBridge, kGpu, kNic } kind = Kind::kGpu;
  std::string bdf;
  fs::path dir;  // relative to the sysroot
  int numa_node = 0;
  p2ptrace::PcieLink link;
  const p2ptrace::Gpu* gpu = nullptr;
  const p2ptrace::Nic* nic = nullptr;
  const p2ptrace::PcieSwitch* sw = nullptr;
  int iommu_group = -1;
  Aer aer;
};

// Hands out synthetic function-0 addresses in domain 0000 for switches and NICs, never on a bus a
// GPU or a CPU root uses, so every address in the tree is unique and GPU ids stay the file's.
class BusAllocator {
 public:
  explicit BusAllocator(const Host& host) {
    for (const p2ptrace::Gpu& g : host.gpus) taken_[BusOf(g.bus_id)] = true;
  }
  void Reserve(int bus) { taken_[bus & 0xff] = true; }
  std::optional<std::string> Next(int from) {
    for (int i = 0; i < 256; ++i) {
      int bus = (from + i) & 0xff;
      if (taken_[bus]) continue;
      taken_[bus] = true;
      return "0000:" + Hex(bus, 2) + ":00.0";
    }
    return std::nullopt;
  }

 private:
  bool taken_[256] = {};
};

// The host's PCI devices, parents before children, with their sysfs directories.
class PciPlanner {
 public:
  PciPlanner(const Topology* topo, const Host& host) : topo_(topo), host_(host), buses_(host) {
    for (const p2ptrace::Gpu& g : host.gpus) infra_link_.max_gen = std::max(infra_link_.max_gen, g.pcie.max_gen);
    infra_link_ = {infra_link_.max_gen, 16, infra_link_.max_gen, 16};
    size_t stride = 256 / std::max<size_t>(4, host.cpus.size());
    for (size_t i = 0; i < host.cpus.size(); ++i) {
      root_bus_.push_back(static_cast<int>((i * std::max<size_t>(1, stride)) & 0xff));
      buses_.Reserve(root_bus_.back());
    }
  }

  bool Plan(std::vector<PciDevice>* out, std::string* error) {
    for (size_t i = 0; i < host_.cpus.size(); ++i) {
      fs::path root = "sys/devices/pci0000:" + Hex(root_bus_[i], 2);
      if (!PlaceChildren(host_.cpus[i], root, static_cast<int>(i), root_bus_[i] + 1, error)) return false;
    }
    AssignIommuGroups();
    *out = std::move(devices_);
    return true;
  }

  std::vector<fs::path> Roots() const {
    std::vector<fs::path> roots;
    for (int bus : root_bus_) roots.push_back("sys/devices/pci0000:" + Hex(bus, 2));
    return roots;
  }

 private:
  bool PlaceChildren(const std::string& node, const fs::path& dir, int numa, int first_bus, std::string* error) {
    for (const p2ptrace::PcieSwitch& sw : host_.switches) {
      if (sw.parent != node) continue;
      std::optional<std::string> bdf = buses_.Next(first_bus);
      if (!bdf) return OutOfBuses(error);
      PciDevice d{PciDevice::Kind::kBridge, *bdf, dir / *bdf, numa, infra_link_};
      d.sw = &sw;
      if (const SwitchLinks* l = topo_ ? topo_->SwitchLinksOf(host_, sw.id) : nullptr) {
        d.aer = l->aer;
        if (l->has_pcie) d.link = l->pcie;
      }
      devices_.push_back(d);
      group_key_.push_back(GroupKey(sw.parent, d.bdf));
      if (!PlaceChildren(sw.id, d.dir, numa, first_bus, error)) return false;
    }
    for (const p2ptrace::Gpu& g : host_.gpus) {
      if (g.parent != node) continue;
      PciDevice d{PciDevice::Kind::kGpu, g.bus_id, dir / g.bus_id, numa, g.pcie};
      d.gpu = &g;
      if (topo_ != nullptr) d.aer = topo_->LinksOf(host_, g.index).aer;
      devices_.push_back(d);
      group_key_.push_back(GroupKey(g.parent, d.bdf));
    }
    for (const p2ptrace::Nic& n : host_.nics) {
      if (n.parent != node) continue;
      std::optional<std::string> bdf = buses_.Next(first_bus);
      if (!bdf) return OutOfBuses(error);
      PciDevice d{PciDevice::Kind::kNic, *bdf, dir / *bdf, numa, infra_link_};
      d.nic = &n;
      devices_.push_back(d);
      group_key_.push_back(GroupKey(n.parent, d.bdf));
    }
    return true;
  }

  // Devices below a switch without ACS can reach each other without the IOMMU seeing it, so Linux
  // groups them together: the key is the topmost such switch above the device, else the device.
  std::string GroupKey(const std::string& parent, const std::string& bdf) const {
    std::string key = "device " + bdf;
    for (const std::string& id : p2ptrace::PcieAncestors(host_, parent))
      if (const p2ptrace::PcieSwitch* sw = host_.FindSwitch(id); sw != nullptr && !sw->acs_redirect)
        key = "below " + sw->id;
    return key;
  }

  void AssignIommuGroups() {
    std::map<std::string, int> numbers;
    for (size_t i = 0; i < devices_.size(); ++i) {
      auto [it, fresh] = numbers.emplace(group_key_[i], static_cast<int>(numbers.size()));
      devices_[i].iommu_group = it->second;
    }
  }

  bool OutOfBuses(std::string* error) const {
    *error = "host " + host_.name + ": too many PCI devices for 256 bus numbers";
    return false;
  }

  const Topology* topo_;
  const Host& host_;
  BusAllocator buses_;
  p2ptrace::PcieLink infra_link_;
  std::vector<int> root_bus_;
  std::vector<PciDevice> devices_;
  std::vector<std::string> group_key_;  // parallel to devices_
};

// A device's `config` as sysfs returns it: 64 bytes to a normal user, 4096 to root. A switch port
// carries an ACS extended capability at 0x100 whose control register has P2P Request and
// Completion Redirect on when the switch has acs_redirect.
void WriteConfigSpace(TreeWriter& w, const Host& host, const PciDevice& d) {
  std::string cfg(host.config_space_readable ? 4096 : 64, '\0');
  auto put16 = [&](size_t off, unsigned v) {
    if (off + 1 < cfg.size()) cfg[off] = static_cast<char>(v & 0xff), cfg[off + 1] = static_cast<char>(v >> 8);
  };
  unsigned vendor = d.kind == PciDevice::Kind::kBridge ? 0x1000 : d.kind == PciDevice::Kind::kGpu ? 0x10de : 0x15b3;
  put16(0, vendor);
  put16(2, d.kind == PciDevice::Kind::kBridge ? 0xc030 : d.kind == PciDevice::Kind::kGpu ? 0x2330 : 0x1021);
  if (d.kind == PciDevice::Kind::kBridge && cfg.size() > 0x108) {
    bool redirect = d.sw != nullptr && d.sw->acs_redirect;
    put16(0x100, 0x000d);              // ACS, version 1, no next capability
    put16(0x102, 0x0001);
    put16(0x104, 0x005f);              // capabilities: SV TB RR CR UF EC
    put16(0x106, redirect ? 0x001d : 0x0000);  // control: SV RR CR UF when redirecting
  }
  w.File(d.dir / "config", cfg);
}

// The kernel's AER statistics (drivers/pci/pcie/aer.c): a line per error type, then the total. The
// sim has totals only; it puts each on one type that a failing link typically raises, so the lines
// still add up to the total.
void WriteAer(TreeWriter& w, const PciDevice& d) {
  static const std::vector<std::string> kCorrectable = {"RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout",
                                                        "NonFatalErr", "CorrIntErr", "HeaderOF"};
  static const std::vector<std::string> kUncorrectable = {
      "Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP",
      "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
      "PoisonTLPBlocked"};
  auto text = [](const std::vector<std::string>& names, const std::string& counted, uint64_t n, const char* total) {
    std::string out;
    for (const std::string& name : names) out += name + " " + (name == counted ? std::to_string(n) : "0") + "\n";
    return out + total + " " + std::to_string(n) + "\n";
  };
  w.File(d.dir / "aer_dev_correctable", text(kCorrectable, "RxErr", d.aer.correctable, "TOTAL_ERR_COR"));
  w.File(d.dir / "aer_dev_nonfatal", text(kUncorrectable, "CmpltTO", d.aer.nonfatal, "TOTAL_ERR_NONFATAL"));
  w.File(d.dir / "aer_dev_fatal", text(kUncorrectable, "DLP", d.aer.fatal, "TOTAL_ERR_FATAL"));
}

void WritePciDevice(TreeWriter& w, const Host& host, const PciDevice& d) {
  std::string vendor, device, cls;
  switch (d.kind) {
    case PciDevice::Kind::kBridge:  // a Broadcom PEX switch port
      vendor = "0x1000", device = "0xc030", cls = "0x060400";
      break;
    case PciDevice::Kind::kGpu:  // the fake NVML reports device 0x2330 for every GPU too
      vendor = "0x10de", device = "0x2330";
      cls = p2ptrace::IsConsumerGpu(d.gpu->name) ? "0x030000" : "0x030200";
      break;
    case PciDevice::Kind::kNic:  // a ConnectX-7
      vendor = "0x15b3", device = "0x1021", cls = d.nic->kind == "ib" ? "0x020700" : "0x020000";
      break;
  }
  w.File(d.dir / "vendor", vendor + "\n");
  w.File(d.dir / "device", device + "\n");
  w.File(d.dir / "class", cls + "\n");
  w.File(d.dir / "numa_node", std::to_string(d.numa_node) + "\n");
  w.File(d.dir / "current_link_speed", LinkSpeed(d.link.gen) + "\n");
  w.File(d.dir / "max_link_speed", LinkSpeed(d.link.max_gen) + "\n");
  w.File(d.dir / "current_link_width", std::to_string(d.link.width) + "\n");
  w.File(d.dir / "max_link_width", std::to_string(d.link.max_width) + "\n");
  if (d.kind != PciDevice::Kind::kNic) WriteAer(w, d);
  w.Link(fs::path("sys/bus/pci/devices") / d.bdf, d.dir);
  WriteConfigSpace(w, host, d);
  if (d.nic != nullptr) {  // how NCCL finds a NIC's PCI path
    bool rdma = d.nic->kind != "eth";
    fs::path own = d.dir / (rdma ? "infiniband" : "net") / d.nic->name;
    w.Dir(own);
    w.Link(own / "device", d.dir);  // the NIC's PCI function, as the kernel links it
    if (rdma) {  // the first port, as ibstat reads it
      static const std::map<std::string, std::string> kState = {{"ACTIVE", "4: ACTIVE"}, {"DOWN", "1: DOWN"}, {"INIT", "2: INIT"}};
      w.File(own / "ports/1/state", kState.at(d.nic->state) + "\n");
      w.File(own / "ports/1/rate", std::to_string(d.nic->rate_gbps) + " Gb/sec (4X)\n");
    }
    w.Link(fs::path("sys/class") / (rdma ? "infiniband" : "net") / d.nic->name, own);
  }
}

void WriteIommu(TreeWriter& w, const Host& host, const std::vector<PciDevice>& devices) {
  w.Dir("sys/kernel/iommu_groups");
  bool intel = HasToken(host.kernel_cmdline, "intel_iommu=on");
  bool amd = HasToken(host.kernel_cmdline, "amd_iommu=on");
  if ((!intel && !amd) || HasToken(host.kernel_cmdline, "iommu=off")) return;
  std::string type = p2ptrace::IommuTranslating(host.kernel_cmdline) ? "DMA-FQ" : "identity";
  for (const PciDevice& d : devices) {
    fs::path group = "sys/kernel/iommu_groups/" + std::to_string(d.iommu_group);
    w.File(group / "type", type + "\n");
    w.Link(group / "devices" / d.bdf, d.dir);
    w.Link(d.dir / "iommu_group", group);
  }
  for (auto [on, unit] : {std::pair{intel, "dmar0"}, std::pair{amd, "ivhd0"}}) {
    if (!on) continue;
    fs::path dev = fs::path("sys/devices/virtual/iommu") / unit;
    w.Dir(dev / "devices");
    w.Link(fs::path("sys/class/iommu") / unit, dev);
  }
}

// The same UUID the fake NVML reports for this GPU.
std::string GpuUuid(const Host& host, const p2ptrace::Gpu& g) {
  unsigned h = 2166136261u;
  for (char c : host.name + "/" + g.bus_id) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%08x-%04x-%04x-%04x-%012x", h, g.index, 0x5157, 0x1d, h ^ 0xabcdef);
  return buf;
}

void WriteNvidiaDriver(TreeWriter& w, const Host& host) {
  std::string arch = host.cpu_vendor == "arm" ? "aarch64" : "x86_64";
  w.File("proc/driver/nvidia/version",
         "NVRM version: NVIDIA UNIX Open Kernel Module for " + arch +
             "  580.95.05  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:52:05 UTC 2025\n"
             "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)\n");
  // The regkey that turns PCIe P2P off: global when every GPU has it, else per device.
  std::vector<std::string> disabled;
  for (const p2ptrace::Gpu& g : host.gpus)
    if (g.p2p_regkey_disabled) disabled.push_back(g.bus_id);
  std::string global, per_device;
  if (!disabled.empty() && disabled.size() == host.gpus.size()) {
    global = "ForceP2P=0x0";
  } else {
    for (const std::string& bdf : disabled) per_device += "pci=" + bdf + ";ForceP2P=0x0;";
  }
  w.File("proc/driver/nvidia/params",
         "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"
         "DeviceFileGID: 0\nDeviceFileMode: 438\nInitializeSystemMemoryAllocations: 1\n"
         "UsePageAttributeTable: 4294967295\nEnableMSI: 1\nEnablePCIeGen3: 0\nMemoryPoolSize: 0\n"
         "KMallocHeapMaxSize: 0\nVMallocHeapMaxSize: 0\nIgnoreMMIOCheck: 0\nEnableStreamMemOPs: 0\n"
         "EnableUserNUMAManagement: 1\nNvLinkDisable: 0\nRmProfilingAdminOnly: 1\n"
         "PreserveVideoMemoryAllocations: 0\nEnableS0ixPowerManagement: 0\n"
         "S0ixPowerManagementVideoMemoryThreshold: 256\nDynamicPowerManagement: 3\n"
         "DynamicPowerManagementVideoMemoryThreshold: 200\nRegisterPCIDriver: 1\n"
         "EnablePCIERelaxedOrderingMode: 0\nEnableResizableBar: 0\nEnableGpuFirmware: 18\n"
         "EnableGpuFirmwareLogs: 2\nRmNvlinkBandwidthLinkCount: 0\nEnableDbgBreakpoint: 0\n"
         "OpenRmEnableUnsupportedGpus: 1\nDmaRemapPeerMmio: 1\nImexChannelCount: 2048\n"
         "CreateImexChannel0: 0\nGrdmaPciTopoCheckOverride: 0\n"
         "RegistryDwords: \"" + global + "\"\n"
         "RegistryDwordsPerDevice: \"" + per_device + "\"\n"
         "RmMsg: \"\"\nGpuBlacklist: \"\"\nTemporaryFilePath: \"\"\nExcludedGpus: \"\"\n");
  for (const p2ptrace::Gpu& g : host.gpus) {
    w.File(fs::path("proc/driver/nvidia/gpus") / g.bus_id / "information",
           "Model: \t\t " + g.name + "\nIRQ:   \t\t " + std::to_string(200 + g.index) +
               "\nGPU UUID: \t " + GpuUuid(host, g) +
               "\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
               "DMA Mask: \t 0xfffffffffffff\nBus Location: \t " + g.bus_id +
               "\nDevice Minor: \t " + std::to_string(g.index) + "\nGPU Excluded:\t No\n");
  }
}

// What tells a guest from bare metal: the DMI vendor, and on x86 the CPUID hypervisor bit that
// /proc/cpuinfo lists as a flag (Arm has no such flag; its DMI vendor still says QEMU).
void WriteMachineMarkers(TreeWriter& w, const Host& host) {
  bool guest = host.virtualization != p2ptrace::Virtualization::kNone;
  w.File("sys/class/dmi/id/sys_vendor", guest ? "QEMU\n" : "Supermicro\n");
  std::string cpuinfo;
  for (size_t i = 0; i < host.cpus.size(); ++i) {
    std::string n = std::to_string(i);
    if (host.cpu_vendor == "arm") {
      cpuinfo += "processor\t: " + n + "\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull "
                 "sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 "
                 "sm3 sm4 asimddp sha512 sve asimdfhm\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
                 "CPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n\n";
      continue;
    }
    bool amd = host.cpu_vendor == "amd";
    cpuinfo += "processor\t: " + n + "\nvendor_id\t: " + (amd ? "AuthenticAMD" : "GenuineIntel") +
               "\ncpu family\t: " + (amd ? "25" : "6") + "\nmodel\t\t: " + (amd ? "17" : "143") +
               "\nmodel name\t: " +
               (amd ? "AMD EPYC 9654 96-Core Processor" : "Intel(R) Xeon(R) Platinum 8480+") +
               "\nphysical id\t: " + n +
               "\nflags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 "
               "clflush mmx fxsr sse sse2 ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl "
               "xtopology cpuid pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt "
               "aes xsave avx f16c rdrand" + std::string(guest ? " hypervisor" : "") +
               " lahf_lm abm 3dnowprefetch avx2 avx512f avx512dq\n\n";
  }
  w.File("proc/cpuinfo", cpuinfo);
}

}  // namespace

bool WriteSysroot(const Host& host, const std::string& dir, std::string* error) {
  return WriteSysroot(Topology(), host, dir, error);
}

bool WriteSysroot(const Topology& topo, const Host& host, const std::string& dir, std::string* error) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::path root = ec ? fs::path() : fs::canonical(dir, ec);
  if (ec) {
    *error = dir + ": " + ec.message();
    return false;
  }
  if (root == root.root_path()) {  // would rewrite this machine's /etc/hostname
    *error = dir + ": refusing to write a sysroot over /";
    return false;
  }
  std::vector<PciDevice> devices;
  PciPlanner planner(&topo, host);
  if (!planner.Plan(&devices, error)) return false;

  TreeWriter w(root);
  for (const char* generated : {"sys/devices", "sys/bus/pci", "sys/kernel/iommu_groups", "sys/class/iommu",
                                "sys/class/infiniband", "sys/class/net", "proc/driver/nvidia"})
    w.RemoveTree(generated);

  w.File("proc/cmdline", host.kernel_cmdline + "\n");
  w.File("proc/sys/kernel/random/boot_id", host.boot_id + "\n");
  w.File("proc/sys/kernel/hostname", host.name + "\n");
  // The kernel's release: DMA-BUF, GPUDirect RDMA without peermem, needs 5.12 (the driver's open modules
  // are what proc/driver/nvidia/version names).
  w.File("proc/sys/kernel/osrelease", host.dmabuf ? "6.1.0-26-amd64\n" : "5.10.0-28-amd64\n");
  w.File("etc/hostname", host.name + "\n");
  w.File("p2psim/dev_shm", "size_mb " + std::to_string(host.dev_shm_mb) + "\ndevice " +
                               std::to_string(host.shm_device) + "\n");
  for (const fs::path& r : planner.Roots()) w.Dir(r);
  w.Dir("sys/bus/pci/devices");
  for (const PciDevice& d : devices) WritePciDevice(w, host, d);
  WriteIommu(w, host, devices);
  // GPUDirect RDMA: the nvidia_peermem module, as /sys/module lists a loaded one.
  w.RemoveTree("sys/module/nvidia_peermem");
  w.RemoveTree("sys/kernel/mm/memory_peers");
  if (host.gdr) w.File("sys/module/nvidia_peermem/refcnt", "0\n");
  if (host.gdr && host.peermem_registered) w.File("sys/kernel/mm/memory_peers/nv_mem/version", "1.3\n");
  WriteNvidiaDriver(w, host);
  WriteMachineMarkers(w, host);
  if (!w.ok()) *error = w.error();
  return w.ok();
}

}  // namespace p2psim
