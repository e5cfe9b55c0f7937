// Which GPU owns a pointer, answered on the hot path without a lock: a two-level table of 2 MiB
// granules. A granule where the shim saw allocations of one device only is that device's, whole:
// CUDA maps device memory in 2 MiB pages carved from each device's own address reservations, so
// the rest of such a granule is that device's memory the shim did not see allocated (a neighbour
// from a caching allocator, the driver API), never host memory. This makes small allocations as
// quick to look up as large ones (bench/README.md: same_small, cross_small). A granule shared by two
// owners says "mixed" and the exact range map answers under a lock.
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
    if (OneDevice(e)) return static_cast<int>(e & 0x7f);
    auto owner = static_cast<int8_t>(e & 0xff);  // kHost, kMixed, or 0: nothing known
    return owner == kMixed ? LookupExact(a) : owner == kHost ? kHost : kUnknown;
  }

  // Whether both pointers lie within the table's address range (QuickLookup's precondition).
  static bool InTable(const void* a, const void* b) {
    return ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) >> kVaBits) == 0;
  }
  // The owner of a pointer InTable when the table alone proves it, else `not_proven` (then ask
  // Lookup): no call and one branch, so a caller's hot path needs no stack frame.
  static int QuickLookup(const void* p, int not_proven) {
    uint64_t e = EntryOf(reinterpret_cast<uintptr_t>(p));
    return OneDevice(e) ? static_cast<int>(e & 0x7f) : not_proven;
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
  // An entry: the owner in bits 0-7 and, when it is one device's, the top bit (a sign test);
  // kHost and kMixed entries have it clear, and 0 is "nothing known".
  static uint64_t DeviceEntry(int device) { return static_cast<uint8_t>(device) | uint64_t{1} << 63; }
  static uint64_t OtherEntry(int8_t what) { return static_cast<uint8_t>(what); }
  static bool OneDevice(uint64_t e) { return static_cast<int64_t>(e) < 0; }
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
