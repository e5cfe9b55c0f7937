#include "tests/sim/common/sim_links.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace p2psim {
namespace {

constexpr const char* kNames[kLinkCounters] = {"replay",          "recovery",        "crc_flit",
                                               "crc_data",        "rcv_errors",      "recovery_failed",
                                               "recovery_events", "effective_errors", "symbol_errors",
                                               "pcie_replay"};

// The shared file: two header words, then per GPU (in the host's file order) every NVLink
// counter of every possible link, the PCIe replay counter and the downtrain flag. Only what
// faults add is kept there; base values stay in the topology.
constexpr size_t kHeaderWords = 2;
constexpr size_t kPcieReplaySlot = size_t(kMaxNvLinks) * kNvLinkCounters;
constexpr size_t kDowntrainSlot = kPcieReplaySlot + 1;
constexpr size_t kWordsPerGpu = kDowntrainSlot + 1;
constexpr uint64_t kMagic = 0x6b6e6c6d69733270ull;  // "p2simlnk" in little-endian bytes, for whoever opens it

int GpuPosition(const p2ptrace::Host& host, int gpu) {
  for (size_t i = 0; i < host.gpus.size(); ++i)
    if (host.gpus[i].index == gpu) return static_cast<int>(i);
  return -1;
}

// The host's words, mapped once per process (and per library: each simulated library has its own
// copy of this code; the kernel keeps their mappings of one file coherent).
uint64_t* SharedWords(const Topology& topo, const p2ptrace::Host& host) {
  static std::mutex mu;
  static auto* maps = new std::map<std::string, uint64_t*>();  // by the path as given, and host
  std::string key = topo.path + '\n' + host.name;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = maps->find(key); it != maps->end()) return it->second;
  std::string path = LinkStatePath(topo, host);
  size_t bytes = (kHeaderWords + host.gpus.size() * kWordsPerGpu) * sizeof(uint64_t);
  void* p = MAP_FAILED;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  int err = errno;
  if (fd >= 0) {
    struct stat st {};
    // Processes that create it at once all size it the same, and new bytes read as zero.
    if (fstat(fd, &st) == 0 && st.st_size < static_cast<off_t>(bytes) && ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      err = errno;
    else
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), err = errno;
    close(fd);
  }
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "p2psim: %s: %s; link counters are this process's own\n", path.c_str(), std::strerror(err));
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
  }
  auto* words = static_cast<uint64_t*>(p);
  uint64_t zero = 0;
  __atomic_compare_exchange_n(&words[0], &zero, kMagic, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  __atomic_store_n(&words[1], host.gpus.size(), __ATOMIC_RELAXED);
  (*maps)[key] = words;
  return words;
}

uint64_t* Word(const Topology& topo, const p2ptrace::Host& host, int gpu, size_t slot) {
  int pos = GpuPosition(host, gpu);
  if (pos < 0) return nullptr;
  uint64_t* words = SharedWords(topo, host);
  return words == nullptr ? nullptr : words + kHeaderWords + size_t(pos) * kWordsPerGpu + slot;
}

size_t NvLinkSlot(int link, LinkCounter c) { return size_t(link) * kNvLinkCounters + size_t(c); }

void Add(const Topology& topo, const p2ptrace::Host& host, int gpu, size_t slot, uint64_t n) {
  if (uint64_t* w = Word(topo, host, gpu, slot)) __atomic_fetch_add(w, n, __ATOMIC_RELAXED);
}

const LinkFault* DowntrainOf(const Topology& topo, const p2ptrace::Host& host, int gpu) {
  for (const LinkFault& f : topo.link_faults)
    if (f.host == host.name && f.gpu == gpu && f.nvlink < 0 && (f.pcie_gen > 0 || f.pcie_width > 0)) return &f;
  return nullptr;
}

p2ptrace::PcieLink Narrowed(p2ptrace::PcieLink link, const LinkFault& f) {
  if (f.pcie_gen > 0) link.gen = f.pcie_gen;
  if (f.pcie_width > 0) link.width = f.pcie_width;
  return link;
}

const char* SysfsSpeed(int gen) {
  static const char* kSpeeds[] = {"Unknown", "2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe",
                                  "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe"};
  return kSpeeds[gen >= 1 && gen <= 6 ? gen : 0];
}

// A sysroot the process reads its node from (P2PTRACE_SYSROOT, as p2psim launch sets it) shows the
// narrowed link too, where it has the GPU's directory.
void UpdateSysroot(const p2ptrace::Gpu& gpu, const p2ptrace::PcieLink& link) {
  const char* root = std::getenv("P2PTRACE_SYSROOT");
  if (root == nullptr || *root == '\0') return;
  std::string dir = std::string(root) + "/sys/bus/pci/devices/" + gpu.bus_id + "/";
  auto rewrite = [&](const char* name, const std::string& text) {
    std::string path = dir + name;
    if (access(path.c_str(), W_OK) != 0) return;
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
  };
  rewrite("current_link_width", std::to_string(link.width) + "\n");
  rewrite("current_link_speed", std::string(SysfsSpeed(link.gen)) + "\n");
}

}  // namespace

const char* CounterName(LinkCounter c) {
  int i = static_cast<int>(c);
  return i >= 0 && i < kLinkCounters ? kNames[i] : "?";
}

bool ParseCounterName(std::string_view name, LinkCounter* out) {
  for (int i = 0; i < kLinkCounters; ++i)
    if (name == kNames[i]) {
      *out = static_cast<LinkCounter>(i);
      return true;
    }
  return false;
}

int NvLinkGenerationOf(const std::string& name) {
  auto has = [&](const char* key) { return name.find(key) != std::string::npos; };
  for (const char* k : {"GB200", "GB300", "B100", "B200", "B300"})
    if (has(k)) return 5;
  for (const char* k : {"GH200", "H100", "H200", "H800", "H20"})
    if (has(k)) return 4;
  for (const char* k : {"A100", "A800", "A30", "A40"})
    if (has(k)) return 3;
  if (has("V100")) return 2;
  return 4;
}

unsigned NvmlNvLinkVersion(int generation) {
  switch (generation) {
    case 1: return 1;  // NVML_NVLINK_VERSION_1_0
    case 2: return 2;  // 2_0
    case 3: return 4;  // 3_0
    case 4: return 6;  // 4_0
    case 5: return 7;  // 5_0
  }
  return 0;  // INVALID
}

unsigned NvLinkSpeedMbps(int generation) {
  switch (generation) {
    case 1: return 20000;
    case 2:
    case 3: return 25000;
    case 4: return 26562;
    case 5: return 53125;
  }
  return 0;
}

std::vector<Lane> Lanes(const p2ptrace::Host& host, int gpu) {
  // Each GPU numbers its links over its own entries, so the same link has its own number on each end.
  auto first_link_of = [&](int g, const p2ptrace::NvLink* entry) {
    int n = 0;
    for (const p2ptrace::NvLink& l : host.nvlinks) {
      if (&l == entry) return n;
      if (l.a == g || l.b == g) n += l.links;
    }
    return -1;
  };
  std::vector<Lane> lanes;
  for (const p2ptrace::NvLink& l : host.nvlinks) {
    if (l.a != gpu && l.b != gpu) continue;
    int peer = l.a == gpu ? l.b : l.a;
    int remote_first = first_link_of(peer, &l);
    for (int i = 0; i < l.links; ++i) lanes.push_back({peer, i < l.active, remote_first + i});
  }
  return lanes;
}

bool CounterServed(const Topology& topo, const p2ptrace::Host& host, int gpu, LinkCounter c) {
  if (host.virtualization == p2ptrace::Virtualization::kVgpu) return false;
  const GpuLinks& g = topo.LinksOf(host, gpu);
  if (g.unsupported & (1u << static_cast<int>(c))) return false;
  if (IsLegacyNvLinkCounter(c)) return g.nvlink_version <= 4;
  if (IsNvLinkFieldCounter(c)) return g.nvlink_version >= 5;
  return c == LinkCounter::kPcieReplay;
}

uint64_t CounterValue(const Topology& topo, const p2ptrace::Host& host, int gpu, int link, LinkCounter c) {
  const GpuLinks& g = topo.LinksOf(host, gpu);
  uint64_t base = 0;
  size_t slot = kPcieReplaySlot;
  if (c == LinkCounter::kPcieReplay) {
    base = g.pcie_replay;
  } else {
    if (link < 0 || link >= kMaxNvLinks) return 0;
    if (auto it = g.nvlink.find(link); it != g.nvlink.end()) base = it->second[static_cast<size_t>(c)];
    slot = NvLinkSlot(link, c);
  }
  if (!HasLinkFaults(topo, host)) return base;
  const uint64_t* w = Word(topo, host, gpu, slot);
  return base + (w == nullptr ? 0 : __atomic_load_n(w, __ATOMIC_RELAXED));
}

p2ptrace::PcieLink CurrentPcie(const Topology& topo, const p2ptrace::Host& host, int gpu) {
  const p2ptrace::Gpu* g = host.FindGpu(gpu);
  if (g == nullptr) return {};
  const LinkFault* f = DowntrainOf(topo, host, gpu);
  if (f == nullptr) return g->pcie;
  const uint64_t* flag = Word(topo, host, gpu, kDowntrainSlot);
  return flag != nullptr && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0 ? Narrowed(g->pcie, *f) : g->pcie;
}

double StormSlowdown(const Topology& topo, const p2ptrace::Host& host, int a, int b) {
  double factor = 1;
  for (const LinkFault& f : topo.link_faults) {
    if (f.host != host.name || f.nvlink < 0 || (f.gpu != a && f.gpu != b)) continue;
    std::vector<Lane> lanes = Lanes(host, f.gpu);
    if (size_t(f.nvlink) >= lanes.size()) continue;
    const Lane& l = lanes[size_t(f.nvlink)];
    if (l.active && l.peer == (f.gpu == a ? b : a)) factor = std::min(factor, f.slowdown);
  }
  return factor;
}

void ChargeTransfer(const Topology& topo, const p2ptrace::Host& host, int a, int b, bool direct, uint64_t bytes) {
  if (bytes == 0 || a == b || !HasLinkFaults(topo, host)) return;
  bool nvlink = false;
  if (a >= 0 && b >= 0 && direct) {
    p2ptrace::GpuPath path = p2ptrace::ClassifyGpuPath(host, a, b);
    nvlink = path.type == p2ptrace::PathType::kNVLink && path.active_links > 0;
  }
  for (const LinkFault& f : topo.link_faults) {
    if (f.host != host.name || (f.gpu != a && f.gpu != b)) continue;
    double grown = f.per_gb * static_cast<double>(bytes) / 1e9;  // at least one per transfer
    uint64_t amount = grown < 1 ? 1 : grown > 9e18 ? uint64_t(9e18) : static_cast<uint64_t>(std::llround(grown));
    if (f.nvlink >= 0) {
      if (!nvlink) continue;
      std::vector<Lane> lanes = Lanes(host, f.gpu);
      if (size_t(f.nvlink) >= lanes.size()) continue;
      const Lane& l = lanes[size_t(f.nvlink)];
      int other = f.gpu == a ? b : a;
      if (!l.active || l.peer != other) continue;
      // Both ends count what crosses the link, whichever way it went.
      Add(topo, host, f.gpu, NvLinkSlot(f.nvlink, static_cast<LinkCounter>(f.counter)), amount);
      Add(topo, host, other, NvLinkSlot(l.remote_link, static_cast<LinkCounter>(f.counter)), amount);
      continue;
    }
    if (nvlink) continue;
    if (f.counter >= 0) Add(topo, host, f.gpu, kPcieReplaySlot, amount);
    if (f.pcie_gen > 0 || f.pcie_width > 0) {
      uint64_t* flag = Word(topo, host, f.gpu, kDowntrainSlot);
      uint64_t zero = 0;
      if (flag != nullptr && __atomic_compare_exchange_n(flag, &zero, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        if (const p2ptrace::Gpu* g = host.FindGpu(f.gpu)) UpdateSysroot(*g, Narrowed(g->pcie, f));
    }
  }
}

bool HasLinkFaults(const Topology& topo, const p2ptrace::Host& host) {
  for (const LinkFault& f : topo.link_faults)
    if (f.host == host.name) return true;
  return false;
}

std::string LinkStatePath(const Topology& topo, const p2ptrace::Host& host) {
  // One name for the file however a process was given the topology's path.
  char resolved[PATH_MAX];
  std::string file = realpath(topo.path.c_str(), resolved) != nullptr ? resolved : topo.path;
  return file + ".links-" + host.name;
}

}  // namespace p2psim
