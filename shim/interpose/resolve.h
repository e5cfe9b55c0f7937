// Finding the real function behind each wrapper: once per (function, runtime node), cached.
#pragma once

#include <atomic>

namespace p2ptrace::shim {

// The runtime version nodes wrappers are emitted for, and the driver (libcuda.so.1, no symbol
// versions): a "runtime" of its own whose table the shim fills with driver calls (driver_hooks.cc).
enum class Node : int { kCudart11 = 0, kCudart12 = 1, kCudart13 = 2, kDriver = 3, kCount = 4 };

// "libcudart.so.11.0", "libcudart.so.12", "libcudart.so.13", "libcuda.so.1".
const char* NodeName(Node node);

// Order: dlvsym(RTLD_NEXT, name, node) → dlsym(RTLD_NEXT, name) → the loaded libcudart of that
// major found with dl_iterate_phdr and dlopen(RTLD_NOLOAD) (RTLD_NEXT sees nothing when cudart was
// loaded RTLD_LOCAL, e.g. by Python ctypes). Null if there is no such function.
void* ResolveReal(const char* name, Node node);

// Cached lookup: the slot holds the resolved pointer once found.
inline void* CachedReal(std::atomic<void*>* slot, const char* name, Node node) {
  void* fn = slot->load(std::memory_order_acquire);
  if (__builtin_expect(fn != nullptr, 1)) return fn;
  fn = ResolveReal(name, node);
  if (fn != nullptr) slot->store(fn, std::memory_order_release);
  return fn;
}

}  // namespace p2ptrace::shim
