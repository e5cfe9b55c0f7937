// Which GPU owns a pointer, answered on the hot path without a lock: a two-level table of 2 MiB
// granules, each holding one owning device and the span of the granule its allocations cover
// (contiguous; the rest of the granule is not that device's). Real CUDA gives each device its own
// address ranges, so a granule has one owner; a granule shared by two owners, or holding two
// separate spans, says "mixed" and the exact range map answers under a lock.
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
    uint64_t e = leaf->entry[(a >> kGranuleShift) & kLeafMask].load(std::memory_order_relaxed);
    auto owner = static_cast<int8_t>(e & 0xff);
    uint64_t off = a & (kGranule - 1);
    if (__builtin_expect(owner >= 0, 1)) return off >= SpanLo(e) && off < SpanHi(e) ? owner : kUnknown;
    return owner == kMixed ? LookupExact(a) : owner;
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
  static constexpr uint64_t kGranule = uint64_t{1} << kGranuleShift;
  // An entry: owner in bits 0-7, covered span [lo, hi) in bits 8-29 and 30-51.
  static uint64_t SpanLo(uint64_t e) { return (e >> 8) & 0x3fffff; }
  static uint64_t SpanHi(uint64_t e) { return (e >> 30) & 0x3fffff; }
  static uint64_t Entry(int owner, uint64_t lo, uint64_t hi) {
    return static_cast<uint8_t>(owner) | (lo << 8) | (hi << 30);
  }
  struct Leaf {
    Leaf() {
      for (auto& e : entry) e.store(Entry(kUnknown, 0, kGranule), std::memory_order_relaxed);
    }
    std::atomic<uint64_t> entry[size_t{1} << kLeafBits];
  };
  static int LookupExact(uintptr_t a);
  static void Recompute(uintptr_t granule);
  static std::atomic<Leaf*> top_[size_t{1} << (kVaBits - kTopShift)];
};

}  // namespace p2ptrace::shim
