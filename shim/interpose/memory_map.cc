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
    leaf->entry[g & kLeafMask].store(device_or_host >= 0 ? DeviceEntry(device_or_host) : OtherEntry(static_cast<int8_t>(device_or_host)),
                                     std::memory_order_relaxed);
}

// Sets one granule from the ranges overlapping it (caller holds g_mu): its one owner (the whole
// granule: see memory_map.h), or "mixed" (ask the exact map).
void MemoryMap::Recompute(uintptr_t g) {
  uintptr_t lo = g << kGranuleShift, hi = lo + kGranule;
  int owner = kUnknown;
  auto& ranges = Ranges();
  auto it = ranges.upper_bound(lo);
  if (it != ranges.begin()) --it;
  for (; it != ranges.end() && it->first < hi; ++it) {
    if (it->first + it->second.size <= lo) continue;
    if (owner == kUnknown) {
      owner = it->second.device;
    } else if (owner != it->second.device) {
      owner = kMixed;  // a second owner
      break;
    }
  }
  uint64_t entry = owner >= 0 ? DeviceEntry(owner) : owner == kMixed ? OtherEntry(kMixed) : 0;
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
