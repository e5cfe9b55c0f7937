// A fixed map from CUDA handles (streams, graph execs) to a small value, read lock-free by hot
// paths and written under the owner's mutex: open addressing with linear probing. A slot's value
// is stored before its key (release), so a reader that finds the key finds the value. An erased
// key becomes a tombstone, or empty when nothing lies beyond it; too many tombstones and the table
// is rebuilt in place, during which a concurrent reader may miss a handle (the callers say what
// that costs: an untimed copy, an unrecorded launch).
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace p2ptrace::shim {

template <typename V, uint32_t kSlots>
class HandleTable {
  static_assert((kSlots & (kSlots - 1)) == 0, "a power of two");

 public:
  static constexpr uintptr_t kNone = 0, kErased = ~uintptr_t{0};

  // The value of h, or `missing`: lock-free.
  V Lookup(uintptr_t h, V missing) const {
    for (uint32_t i = Hash(h), n = 0; n < kSlots; ++n, i = Next(i)) {
      uintptr_t k = slots_[i].key.load(std::memory_order_acquire);
      if (k == h) return slots_[i].value.load(std::memory_order_relaxed);
      if (k == kNone) return missing;
    }
    return missing;
  }

  // The rest under the owner's lock. False when the table is full of live handles (at most 3/4 used).
  bool Put(uintptr_t h, V v) {
    if (h == kNone || h == kErased) return false;
    if (int i = Find(h); i >= 0) {
      slots_[i].value.store(v, std::memory_order_relaxed);
      return true;
    }
    if (used_ + 1 > kSlots / 4 * 3) {  // rebuild without the tombstones
      std::vector<std::pair<uintptr_t, V>> live;
      for (Slot& slot : slots_) {
        uintptr_t k = slot.key.load(std::memory_order_relaxed);
        if (k != kNone && k != kErased) live.emplace_back(k, slot.value.load(std::memory_order_relaxed));
        slot.key.store(kNone, std::memory_order_relaxed);
      }
      used_ = 0;
      for (auto [k, value] : live) Place(k, value);
      if (used_ + 1 > kSlots / 4 * 3) return false;
    }
    Place(h, v);
    return true;
  }

  void Erase(uintptr_t h) {
    int i = Find(h);
    if (i < 0) return;
    if (slots_[Next(static_cast<uint32_t>(i))].key.load(std::memory_order_relaxed) != kNone) {
      slots_[i].key.store(kErased, std::memory_order_relaxed);
      return;
    }
    // Nothing lies beyond: this slot and the tombstones just before it need not be probed past.
    for (uint32_t j = static_cast<uint32_t>(i);; j = (j - 1) & (kSlots - 1)) {
      uintptr_t k = slots_[j].key.load(std::memory_order_relaxed);
      if (j != static_cast<uint32_t>(i) && k != kErased) break;
      slots_[j].key.store(kNone, std::memory_order_relaxed);
      --used_;
    }
  }

 private:
  struct Slot {
    std::atomic<uintptr_t> key;
    std::atomic<V> value;
  };
  static uint32_t Hash(uintptr_t h) {
    return static_cast<uint32_t>((h * 0x9E3779B97F4A7C15ull) >> (64 - __builtin_ctz(kSlots)));  // the top bits
  }
  static uint32_t Next(uint32_t i) { return (i + 1) & (kSlots - 1); }
  int Find(uintptr_t h) const {
    for (uint32_t i = Hash(h), n = 0; n < kSlots; ++n, i = Next(i)) {
      uintptr_t k = slots_[i].key.load(std::memory_order_relaxed);
      if (k == h) return static_cast<int>(i);
      if (k == kNone) return -1;
    }
    return -1;
  }
  void Place(uintptr_t h, V v) {
    for (uint32_t i = Hash(h);; i = Next(i)) {
      uintptr_t k = slots_[i].key.load(std::memory_order_relaxed);
      if (k == kNone || k == kErased) {
        if (k == kNone) ++used_;
        slots_[i].value.store(v, std::memory_order_relaxed);
        slots_[i].key.store(h, std::memory_order_release);
        return;
      }
    }
  }

  Slot slots_[kSlots]{};
  uint32_t used_ = 0;  // live + erased slots
};

}  // namespace p2ptrace::shim
