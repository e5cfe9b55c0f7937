#include "shim/interpose/device_memory.h"

#include <mutex>

#include "shim/interpose/cuda_hooks.h"
#include "shim/interpose/memory_map.h"
#include "shim/preflight.h"
#include "shim/record/handle_table.h"

namespace p2ptrace::shim {
namespace {

std::mutex g_pools_mu;
constinit HandleTable<int, 1024> g_pools;  // pool handle -> device; a pool past the capacity is unknown

}  // namespace

void NoteDeviceMemory(const CudaRuntime& rt, cudaError_t r, const void* p, size_t n, int device) {
  if (r != cudaSuccess) return;
  if (p != nullptr && device >= 0) MemoryMap::Add(p, n, device);
  if (ReadyAfter(rt, r)) PreflightIfNccl(rt);  // an NCCL job: warn before its first collective
}

void ForgetDeviceMemory(const void* p) { MemoryMap::Remove(p); }

void NotePool(const CudaRuntime& rt, cudaError_t r, const void* pool, int device) {
  if (r != cudaSuccess || pool == nullptr || device < 0) return;
  {
    std::lock_guard<std::mutex> lock(g_pools_mu);
    g_pools.Put(reinterpret_cast<uintptr_t>(pool), device);
  }
  ReadyAfter(rt, r);
}

void ForgetPool(const void* pool) {
  std::lock_guard<std::mutex> lock(g_pools_mu);
  g_pools.Erase(reinterpret_cast<uintptr_t>(pool));
}

int PoolDevice(const void* pool) { return g_pools.Lookup(reinterpret_cast<uintptr_t>(pool), -1); }

void NoteAccess(const CudaRuntime& rt, uint8_t api, int owner, int accessor, int flags, cudaError_t r) {
  if (!ReadyAfter(rt, r)) return;
  if (r == cudaSuccess && flags != 0) PeerMappingChanged(accessor, owner, kPeerByAccess, true);
  RecordPeerCall(api, accessor, owner, r, flags, 0);
}

}  // namespace p2ptrace::shim
