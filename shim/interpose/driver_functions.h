// Every CUDA driver (libcuda.so.1) function the shim intercepts: X(name, (parameters), (arguments)),
// by the exact name libcuda exports (cuMemcpyDtoD_v2: cuda.h's cuMemcpyDtoD; the legacy unsuffixed
// names of 32-bit CUdeviceptr days are not wrapped). All return CUresult. The wrappers
// (driver_hooks.cc), the version script and the handing out through cuGetProcAddress are all made
// from this list. libcuda has no symbol versions: the wrappers are exported unversioned.
#pragma once

#include <cuda.h>

// cuda.h renames the entry point to its newest form; the shim wraps each form by its own name.
#undef cuGetProcAddress

#define P2PTRACE_DRIVER_FUNCTIONS(X)                                                                          \
  /* bookkeeping: which device owns a pointer */                                                             \
  X(cuMemAlloc_v2, (CUdeviceptr * p, size_t n), (p, n))                                                      \
  X(cuMemFree_v2, (CUdeviceptr p), (p))                                                                      \
  /* peer capability and access */                                                                           \
  X(cuDeviceCanAccessPeer, (int* can, CUdevice dev, CUdevice peer), (can, dev, peer))                        \
  X(cuDeviceGetP2PAttribute, (int* v, CUdevice_P2PAttribute a, CUdevice src, CUdevice dst), (v, a, src, dst)) \
  X(cuCtxEnablePeerAccess, (CUcontext peer, unsigned int flags), (peer, flags))                              \
  X(cuCtxDisablePeerAccess, (CUcontext peer), (peer))                                                        \
  /* copies */                                                                                               \
  X(cuMemcpyPeer, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),                  \
    (dst, dc, src, sc, n))                                                                                   \
  X(cuMemcpyPeer_ptds, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),             \
    (dst, dc, src, sc, n))                                                                                   \
  X(cuMemcpyPeerAsync, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s), \
    (dst, dc, src, sc, n, s))                                                                                \
  X(cuMemcpyPeerAsync_ptsz,                                                                                  \
    (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),                    \
    (dst, dc, src, sc, n, s))                                                                                \
  X(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                                   \
  X(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                              \
  X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))               \
  X(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))          \
  X(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                            \
  X(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                       \
  X(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))        \
  X(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))   \
  X(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER* p), (p))                                                      \
  X(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER* p), (p))                                                 \
  X(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER* p, CUstream s), (p, s))                                  \
  X(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER* p, CUstream s), (p, s))                             \
  /* entry points: hand out the wrappers above instead of the functions they wrap */                         \
  X(cuGetProcAddress, (const char* sym, void** pfn, int version, cuuint64_t flags), (sym, pfn, version, flags)) \
  X(cuGetProcAddress_v2,                                                                                     \
    (const char* sym, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status),    \
    (sym, pfn, version, flags, status))
