// Device memory the program maps or draws from pools itself, whichever API: the virtual memory API
// (cuMemCreate, cuMemMap, cuMemSetAccess: JAX/XLA's allocator since 0.11, PyTorch's
// expandable_segments) and stream-ordered pools (cu(da)MallocAsync, …FromPoolAsync,
// cu(da)MemPoolSetAccess). The shim learns which device owns such memory (the copy path's
// MemoryMap) and which peers were granted access to it: such a grant, not cuCtxEnablePeerAccess,
// is what lets a GPU reach that memory directly (DESIGN.md §4, "Memory the program maps").
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/base/cuda_runtime.h"

namespace p2ptrace::shim {

// [p, p+n) of `device` became usable (a mapping, a pool allocation) by a call of rt that returned r:
// mapped for the copy path; the process has used CUDA (its trace opens). A device of -1 leaves the
// owner to be learned at the first copy; p null: memory made without an address yet (cuMemCreate).
void NoteDeviceMemory(const CudaRuntime& rt, cudaError_t r, const void* p, size_t n, int device);
// Before the real unmap or free: afterwards the range may already be reused.
void ForgetDeviceMemory(const void* p);

// A memory pool and its device (where the program made or named it); -1 when not known.
void NotePool(const CudaRuntime& rt, cudaError_t r, const void* pool, int device);
void ForgetPool(const void* pool);
int PoolDevice(const void* pool);

// `accessor` was granted (flags != 0) access to memory of `owner` by `api` (cuMemSetAccess,
// cu(da)MemPoolSetAccess), which returned r: recorded, and copies between the two go direct. A
// grant is kept for the pair while the process runs: the shim does not follow it range by range.
void NoteAccess(const CudaRuntime& rt, uint8_t api, int owner, int accessor, int flags, cudaError_t r);

// NoteAccess for each device but the owner that one set-access call names (its CUmemAccessDesc or
// cudaMemAccessDesc list: the same layout, and a device location is 1 in both APIs).
template <typename AccessDesc>
void NoteAccessList(const CudaRuntime& rt, uint8_t api, int owner, const AccessDesc* d, size_t count, cudaError_t r) {
  static_assert(cudaMemLocationTypeDevice == 1);
  for (size_t i = 0; d != nullptr && i < count; ++i)
    if (static_cast<int>(d[i].location.type) == cudaMemLocationTypeDevice && d[i].location.id != owner)
      NoteAccess(rt, api, owner, d[i].location.id, static_cast<int>(d[i].flags), r);
}

}  // namespace p2ptrace::shim
