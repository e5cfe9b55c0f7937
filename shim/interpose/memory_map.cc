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

std::atomic<MemoryMap::Leaf*> MemoryMap::top_[size_t{1} << (kVaBits - kTopShift)];

static_assert(sizeof(std::atomic<int8_t>) == 1);

void MemoryMap::Add(const void* base, size_t size, int device) {
  if (base == nullptr || size == 0 || device < 0 || device > 127) return;
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
  if (a >> kVaBits) return;
  std::lock_guard<std::mutex> lock(g_mu);
  uintptr_t g = a >> kGranuleShift;
  Leaf* leaf = top_[(g >> kLeafBits) & kTopMask].load(std::memory_order_relaxed);
  if (leaf == nullptr) {
    leaf = new Leaf();
    top_[(g >> kLeafBits) & kTopMask].store(leaf, std::memory_order_release);
  }
  // Only where the range map says nothing: what the shim saw allocated wins.
  if (leaf->owner[g & kLeafMask].load(std::memory_order_relaxed) == kUnknown)
    leaf->owner[g & kLeafMask].store(static_cast<int8_t>(device_or_host), std::memory_order_relaxed);
}

// Sets one granule from the ranges overlapping it (caller holds g_mu): its owner when one
// device's allocations cover all of it, "mixed" (ask the exact map) when they cover part of it.
void MemoryMap::Recompute(uintptr_t g) {
  uintptr_t lo = g << kGranuleShift, hi = lo + (uintptr_t{1} << kGranuleShift);
  int owner = kUnknown;
  uintptr_t covered = 0;
  auto& ranges = Ranges();
  auto it = ranges.upper_bound(lo);
  if (it != ranges.begin()) --it;
  for (; it != ranges.end() && it->first < hi; ++it) {
    uintptr_t end = it->first + it->second.size;
    if (end <= lo) continue;
    covered += std::min(end, hi) - std::max(it->first, lo);
    if (owner == kUnknown) owner = it->second.device;
    else if (owner != it->second.device) owner = kMixed;
  }
  if (owner >= 0 && covered < hi - lo) owner = kMixed;
  Leaf* leaf = top_[(g >> kLeafBits) & kTopMask].load(std::memory_order_relaxed);
  if (leaf == nullptr) {
    if (owner == kUnknown) return;
    leaf = new Leaf();
    top_[(g >> kLeafBits) & kTopMask].store(leaf, std::memory_order_release);
  }
  leaf->owner[g & kLeafMask].store(static_cast<int8_t>(owner), std::memory_order_relaxed);
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
  for (auto& t : top_)
    if (Leaf* leaf = t.load())
      for (auto& o : leaf->owner) o.store(kUnknown, std::memory_order_relaxed);
}

}  // namespace p2ptrace::shim
