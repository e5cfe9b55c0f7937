// Which GPU owns a pointer, answered on the hot path without a lock: a two-level table of 2 MiB
// granules holding the owning device. Real CUDA gives each device its own address ranges, so a
// granule has one owner; when two owners share one (possible on the simulated node) the granule
// says "mixed" and the exact range map answers under a lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace p2ptrace::shim {

class MemoryMap {
 public:
  static constexpr int kUnknown = -1;  // not an allocation the shim saw
  static constexpr int kHost = -2;     // learned: host memory

  // A device allocation (cudaMalloc…) of [base, base+size) on `device`.
  static void Add(const void* base, size_t size, int device);
  // Its removal (cudaFree…); false when the shim never saw it.
  static bool Remove(const void* base);
  // Remembers what cudaPointerGetAttributes said about a pointer the shim did not allocate.
  static void Learn(const void* p, int device_or_host);

  static int Lookup(const void* p) {
    auto a = reinterpret_cast<uintptr_t>(p);
    if (__builtin_expect(a >> kVaBits, 0)) return LookupExact(a);  // beyond the table (5-level paging)
    Leaf* leaf = top_[a >> kTopShift].load(std::memory_order_acquire);
    if (leaf == nullptr) return kUnknown;
    int8_t v = leaf->owner[(a >> kGranuleShift) & kLeafMask].load(std::memory_order_relaxed);
    if (__builtin_expect(v >= 0, 1)) return v;
    return v == kMixed ? LookupExact(a) : v;
  }

  static void ForgetAll();  // tests

 private:
  static constexpr int kGranuleShift = 21;  // 2 MiB
  static constexpr int kLeafBits = 14;
  static constexpr int kTopShift = kGranuleShift + kLeafBits;
  static constexpr uintptr_t kLeafMask = (uintptr_t{1} << kLeafBits) - 1;
  static constexpr int kVaBits = 48;  // x86-64 and arm64 user space with 4-level page tables
  static constexpr uintptr_t kTopMask = (uintptr_t{1} << (kVaBits - kTopShift)) - 1;
  static constexpr int8_t kMixed = -3;
  struct Leaf {
    Leaf() {
      for (auto& o : owner) o.store(kUnknown, std::memory_order_relaxed);
    }
    std::atomic<int8_t> owner[size_t{1} << kLeafBits];
  };
  static int LookupExact(uintptr_t a);
  static void Recompute(uintptr_t granule);
  static std::atomic<Leaf*> top_[size_t{1} << (kVaBits - kTopShift)];
};

}  // namespace p2ptrace::shim
