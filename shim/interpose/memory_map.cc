#include "shim/interpose/memory_map.h"

#include <algorithm>
#include <map>
#include <mutex>

namespace p2ptrace::shim {
namespace {

struct Range {
  size_t size;
  int device;
};
std::mutex g_mu;
std::map<uintptr_t, Range>& Ranges() {
  static auto* ranges = new std::map<uintptr_t, Range>();  // never destroyed: used until the very end
  return *ranges;
}

}  // namespace

MemoryMap::Leaf MemoryMap::empty_;
constinit std::array<std::atomic<MemoryMap::Leaf*>, MemoryMap::kTopSize> MemoryMap::top_ =
    AllEmpty(std::make_index_sequence<kTopSize>());

MemoryMap::Leaf* MemoryMap::LeafFor(uintptr_t g) {
  uintptr_t t = (g >> kLeafBits) & kTopMask;
  Leaf* leaf = LeafAt(t);
  if (leaf == &empty_) {
    leaf = new Leaf{};  // never freed: readers may hold it
    top_[t].store(leaf, std::memory_order_release);
  }
  return leaf;
}

static_assert(std::atomic<uint64_t>::is_always_lock_free);

void MemoryMap::Add(const void* base, size_t size, int device) {
  if (base == nullptr || size == 0 || device < 0 || device > kMaxOwner) return;
  if ((reinterpret_cast<uintptr_t>(base) + size - 1) >> kVaBits) {  // exact map only
    std::lock_guard<std::mutex> lock(g_mu);
    Ranges()[reinterpret_cast<uintptr_t>(base)] = Range{size, device};
    return;
  }
  auto b = reinterpret_cast<uintptr_t>(base);
  std::lock_guard<std::mutex> lock(g_mu);
  Ranges()[b] = Range{size, device};
  for (uintptr_t g = b >> kGranuleShift; g <= (b + size - 1) >> kGranuleShift; ++g) Recompute(g);
}

bool MemoryMap::Remove(const void* base) {
  auto b = reinterpret_cast<uintptr_t>(base);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Ranges().find(b);
  if (it == Ranges().end()) return false;
  size_t size = it->second.size;
  Ranges().erase(it);
  if ((b + size - 1) >> kVaBits) return true;
  for (uintptr_t g = b >> kGranuleShift; g <= (b + size - 1) >> kGranuleShift; ++g) Recompute(g);
  return true;
}

void MemoryMap::Learn(const void* p, int device_or_host) {
  auto a = reinterpret_cast<uintptr_t>(p);
  if (a >> kVaBits || device_or_host > kMaxOwner) return;
  std::lock_guard<std::mutex> lock(g_mu);
  uintptr_t g = a >> kGranuleShift;
  Leaf* leaf = LeafFor(g);
  // Only where the range map says nothing: what the shim saw allocated wins.
  if (leaf->entry[g & kLeafMask].load(std::memory_order_relaxed) == 0)
    leaf->entry[g & kLeafMask].store(device_or_host >= 0 ? Entry(device_or_host, 0, kGranule) : Entry(device_or_host, 0, 0),
                                     std::memory_order_relaxed);
}

// Sets one granule from the ranges overlapping it (caller holds g_mu): one owner and the span
// from its first to its last byte there, or "mixed" (ask the exact map).
void MemoryMap::Recompute(uintptr_t g) {
  uintptr_t lo = g << kGranuleShift, hi = lo + kGranule;
  int owner = kUnknown;
  uintptr_t span_lo = 0, span_hi = 0;
  auto& ranges = Ranges();
  auto it = ranges.upper_bound(lo);
  if (it != ranges.begin()) --it;
  for (; it != ranges.end() && it->first < hi; ++it) {
    uintptr_t end = it->first + it->second.size;
    if (end <= lo) continue;
    uintptr_t a = std::max(it->first, lo) - lo, b = std::min(end, hi) - lo;
    if (owner == kUnknown) {
      owner = it->second.device;
      span_lo = a;
      span_hi = b;
    } else if (owner != it->second.device) {
      owner = kMixed;  // a second owner
      break;
    } else {
      span_hi = b;  // ranges come in address order: extend the span, over any gap
    }
  }
  uint64_t entry = owner >= 0 ? Entry(owner, span_lo, span_hi) : owner == kMixed ? Entry(kMixed, 0, 0) : 0;
  if (entry == 0 && LeafAt((g >> kLeafBits) & kTopMask) == &empty_) return;
  LeafFor(g)->entry[g & kLeafMask].store(entry, std::memory_order_relaxed);
}

int MemoryMap::LookupExact(uintptr_t a) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& ranges = Ranges();
  auto it = ranges.upper_bound(a);
  if (it == ranges.begin()) return kUnknown;
  --it;
  return a < it->first + it->second.size ? it->second.device : kUnknown;
}

void MemoryMap::ForgetAll() {
  std::lock_guard<std::mutex> lock(g_mu);
  Ranges().clear();
  for (uintptr_t t = 0; t < kTopSize; ++t)
    if (Leaf* leaf = LeafAt(t); leaf != &empty_)
      for (auto& e : leaf->entry) e.store(0, std::memory_order_relaxed);
}

}  // namespace p2ptrace::shim
