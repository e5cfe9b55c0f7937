// Which GPU owns a pointer, answered on the hot path without a lock: a two-level table of 2 MiB
// granules, each holding one owning device and the span of the granule from the first to the last
// byte of its allocations there. A gap between two allocations of one device counts as that
// device's (real CUDA carves each device's memory from its own address ranges, so what lies there
// is that device's memory the shim did not see allocated, e.g. through the driver API). A granule
// shared by two owners says "mixed" and the exact range map answers under a lock.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace p2ptrace::shim {

class MemoryMap {
 public:
  static constexpr int kUnknown = -1;  // not an allocation the shim saw
  static constexpr int kHost = -2;     // learned: host memory
  static constexpr int kMaxOwner = 125;  // devices above are not mapped (the copy path's sentinels lie above)

  // A device allocation (cudaMalloc…) of [base, base+size) on `device`.
  static void Add(const void* base, size_t size, int device);
  // Its removal (cudaFree…); false when the shim never saw it.
  static bool Remove(const void* base);
  // Remembers what cudaPointerGetAttributes said about a pointer the shim did not allocate.
  static void Learn(const void* p, int device_or_host);

  static int Lookup(const void* p) {
    auto a = reinterpret_cast<uintptr_t>(p);
    if (__builtin_expect(a >> kVaBits, 0)) return LookupExact(a);  // beyond the table (5-level paging)
    uint64_t e = EntryOf(a);
    if (Covers(e, a)) return static_cast<int8_t>(e & 0xff);
    auto owner = static_cast<int8_t>(e & 0xff);
    if (owner >= 0) return kUnknown;
    return owner == kMixed ? LookupExact(a) : owner;
  }

  // Whether both pointers lie within the table's address range (QuickLookup's precondition).
  static bool InTable(const void* a, const void* b) {
    return ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) >> kVaBits) == 0;
  }
  // The owner of a pointer InTable when the table alone proves it, else `not_proven` (then ask
  // Lookup): no call and one branch, so a caller's hot path needs no stack frame.
  static int QuickLookup(const void* p, int not_proven) {
    auto a = reinterpret_cast<uintptr_t>(p);
    uint64_t e = EntryOf(a);
    if (__builtin_expect(WholeGranule(e), 1)) return static_cast<int>(e & 0x7f);
    return Covers(e, a) ? static_cast<int>(e & 0x7f) : not_proven;
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
  // An entry: owner in bits 0-7, the span [lo, lo+len) of the granule it covers as lo (bits
  // 8-29) and len (bits 42-63), so one unsigned comparison checks both ends. Entries that are not
  // one device's (kHost, kMixed, or 0: nothing known) have len 0, so that comparison fails.
  static uint64_t Entry(int owner, uint64_t lo, uint64_t hi) {
    return static_cast<uint8_t>(owner) | (lo << 8) | ((hi - lo) << 42);
  }
  // One device covers the whole granule (lo 0, len 2^21): exactly the top bit, a sign test.
  static bool WholeGranule(uint64_t e) { return static_cast<int64_t>(e) < 0; }
  static_assert((kGranule << 42) == uint64_t{1} << 63);
  static bool Covers(uint64_t e, uintptr_t a) {
    return (a & (kGranule - 1)) - ((e >> 8) & 0x3fffff) < (e >> 42);
  }
  struct Leaf {
    std::atomic<uint64_t> entry[size_t{1} << kLeafBits];  // zero: nothing known
  };
  // Every top_ slot points at a leaf, empty_ (all zeros) until the range gets one of its own, so
  // a lookup needs no null check. Constant-initialised: right before any code runs.
  static constexpr size_t kTopSize = size_t{1} << (kVaBits - kTopShift);
  static Leaf empty_;
  template <size_t... I>
  static constexpr std::array<std::atomic<Leaf*>, kTopSize> AllEmpty(std::index_sequence<I...>) {
    return {{((void)I, &empty_)...}};
  }
  static Leaf* LeafAt(uintptr_t top_index) { return top_[top_index].load(std::memory_order_acquire); }
  static uint64_t EntryOf(uintptr_t a) {
    return LeafAt(a >> kTopShift)->entry[(a >> kGranuleShift) & kLeafMask].load(std::memory_order_relaxed);
  }
  static Leaf* LeafFor(uintptr_t granule);  // making it (caller holds the lock)
  static int LookupExact(uintptr_t a);
  static void Recompute(uintptr_t granule);
  static constinit std::array<std::atomic<Leaf*>, kTopSize> top_;
};

}  // namespace p2ptrace::shim
