#include "shim/record/call_sites.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "p2ptrace/trace_format.h"
#include "shim/base/config.h"
#include "shim/record/text_block.h"
#include "shim/base/fd.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {

namespace detail {
constinit std::atomic<bool> g_call_sites_on{false};
}  // namespace detail

namespace {

// The shim's own frames above the application's (wrapper, hook, this file: a handful); backtrace()
// is asked for this many more than the depth kept.
constexpr int kShimFrames = 16;
constexpr uint32_t kSlots = 2 * kMaxCallSites;  // open addressing, never more than half full
static_assert((kSlots & (kSlots - 1)) == 0);

struct Site {
  uint64_t hash = 0;
  int depth = 0;
  // The trace generation (TraceWriter's g_generation) whose file holds this site's description; a
  // fork child's file has a new one, so the child describes the site again in its own file.
  std::atomic<uint64_t> described{0};
};

// Sites are only ever added, so lookups read the slots without the lock: a slot is published
// (release) after its site is complete.
struct Table {
  std::mutex mu;  // adding sites; never held across a call that may take another lock (dladdr, the trace)
  uint32_t count = 0;
  std::atomic<uint32_t> slots[kSlots] = {};  // site index + 1; 0 empty
  Site sites[kMaxCallSites];
  uintptr_t* pcs = nullptr;  // kMaxCallSites × g_depth return addresses
};

int g_depth = 0;
Table* g_table = nullptr;
uintptr_t g_shim_lo = 0, g_shim_hi = 0;  // the mapping of the module this file is linked into

struct ModuleSearch {
  uintptr_t addr, lo = 0, hi = 0;
};

// The extent of the loaded object holding `addr` (all its PT_LOAD segments).
int FindModule(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<ModuleSearch*>(data);
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD) continue;
    uintptr_t start = info->dlpi_addr + p.p_vaddr, end = start + p.p_memsz;
    lo = std::min(lo, start);
    hi = std::max(hi, end);
    holds |= s->addr >= start && s->addr < end;
  }
  if (!holds) return 0;
  s->lo = lo;
  s->hi = hi;
  return 1;
}

inline bool InShim(const void* pc) {
  auto a = reinterpret_cast<uintptr_t>(pc);
  return a >= g_shim_lo && a < g_shim_hi;
}

uint64_t Hash(const uintptr_t* pcs, int n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    h = (h ^ pcs[i]) * 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h;
}

bool Same(const Table& t, uint32_t index, const uintptr_t* pcs, int n, uint64_t h) {
  const Site& s = t.sites[index];
  return s.hash == h && s.depth == n && std::memcmp(t.pcs + index * g_depth, pcs, n * sizeof *pcs) == 0;
}

// The id of the site `pcs`, or 0 when it is not in the table (yet). Lock-free.
uint32_t Find(const Table& t, const uintptr_t* pcs, int n, uint64_t h) {
  for (uint32_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    uint32_t s = t.slots[i].load(std::memory_order_acquire);
    if (s == 0) return 0;
    if (Same(t, s - 1, pcs, n, h)) return s;
  }
}

// The same, adding the site when it is new; 0 when the table is full. Caller holds t.mu.
uint32_t FindOrAdd(Table& t, const uintptr_t* pcs, int n, uint64_t h) {
  for (uint32_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    uint32_t s = t.slots[i].load(std::memory_order_acquire);
    if (s != 0) {
      if (Same(t, s - 1, pcs, n, h)) return s;
      continue;
    }
    if (t.count == kMaxCallSites) return 0;
    uint32_t index = t.count++;
    t.sites[index].hash = h;
    t.sites[index].depth = n;
    std::memcpy(t.pcs + index * g_depth, pcs, n * sizeof *pcs);
    t.slots[i].store(index + 1, std::memory_order_release);
    return index + 1;
  }
}

// A thread forking while another adds a site: the child must not inherit a held lock.
void ForkPrepare() { g_table->mu.lock(); }
void ForkParent() { g_table->mu.unlock(); }
void ForkChild() { g_table->mu.unlock(); }

std::string Hex(uintptr_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(v));
  return buf;
}

const std::string& ExePath() {
  static const std::string exe = [] {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("[main program]");
  }();
  return exe;
}

// One line per frame: a module path or symbol with a newline in it must not split a frame.
std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', '?');
  return s;
}

}  // namespace

std::string DescribeFrames(const uintptr_t* pcs, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (pcs[i] == 0) continue;
    uintptr_t pc = pcs[i] - 1;  // the call instruction: a return address can lie past its function's end
    Dl_info info{};
    struct link_map* map = nullptr;
    if (dladdr1(reinterpret_cast<void*>(pc), &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 ||
        map == nullptr) {
      out += Hex(pc) + "\n";  // in no loaded object (generated code)
      continue;
    }
    std::string module = map->l_name != nullptr && map->l_name[0] != '\0' ? map->l_name : ExePath();
    out += OneLine(module) + "+" + Hex(pc - map->l_addr);
    if (info.dli_sname != nullptr && info.dli_saddr != nullptr) {
      int status = -1;
      char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      out += " (" + OneLine(status == 0 && demangled ? demangled : info.dli_sname) + "+" +
             Hex(pc - reinterpret_cast<uintptr_t>(info.dli_saddr)) + ")";
      std::free(demangled);
    }
    out += "\n";
  }
  return out;
}

bool StartCallSites(int depth, void (*warn)(const std::string&)) {
  static bool tried = false;  // the constructor runs once, before any other thread of the shim
  if (tried || depth <= 0) return CallSitesEnabled();
  tried = true;
  ModuleSearch self{reinterpret_cast<uintptr_t>(&FindModule)};
  dl_iterate_phdr(FindModule, &self);
  if (self.hi == 0) {
    warn("P2PTRACE_STACKS: the shim cannot find its own code in memory; call sites off");
    return false;
  }
  // The first backtrace() loads libgcc_s.so.1 and allocates: here, not inside a wrapped call.
  void* probe[4];
  if (backtrace(probe, 4) <= 0) {
    warn("P2PTRACE_STACKS: backtrace() returned no frame (is libgcc_s.so.1 missing?); call sites off");
    return false;
  }
  g_shim_lo = self.lo;
  g_shim_hi = self.hi;
  g_depth = std::min(depth, kMaxStackDepth);
  g_table = new Table();
  g_table->pcs = new uintptr_t[size_t{kMaxCallSites} * static_cast<size_t>(g_depth)]();
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
  detail::g_call_sites_on.store(true, std::memory_order_release);
  return true;
}

uint32_t CaptureCallSite() {
  KeepErrno keep;
  if (!CallSitesEnabled() || !TraceWriter::Ready()) return 0;
  Table& t = *g_table;
  void* frames[kMaxStackDepth + kShimFrames];
  int n = backtrace(frames, g_depth + kShimFrames);
  // The shim's frames come first, unless an interceptor of backtrace() itself (ASan's) precedes
  // them: skip through the first run of shim frames found near the top.
  int first = 0;
  while (first < n && first < 4 && !InShim(frames[first])) ++first;
  if (first == n || !InShim(frames[first])) first = 0;
  while (first < n && InShim(frames[first])) ++first;
  int depth = std::min(n - first, g_depth);
  if (depth <= 0) return 0;
  uintptr_t pcs[kMaxStackDepth];
  for (int i = 0; i < depth; ++i) pcs[i] = reinterpret_cast<uintptr_t>(frames[first + i]);
  uint64_t h = Hash(pcs, depth);
  uint32_t id = Find(t, pcs, depth, h);
  if (id == 0) {
    std::lock_guard<std::mutex> lock(t.mu);
    id = FindOrAdd(t, pcs, depth, h);
  }
  if (id == 0) return 0;  // more distinct sites than the table holds
  // Described once per file, by whichever thread claims it; symbolised outside any lock of ours
  // (dladdr takes the loader's lock, which a library constructor making copies already holds).
  Site& s = t.sites[id - 1];
  uint64_t gen = detail::g_generation.load(std::memory_order_acquire);
  uint64_t seen = s.described.load(std::memory_order_acquire);
  if (seen != gen && s.described.compare_exchange_strong(seen, gen))
    WriteTextBlock(P2PTRACE_TEXT_CALL_SITE, id, DescribeFrames(pcs, depth));
  return id;
}

}  // namespace p2ptrace::shim
