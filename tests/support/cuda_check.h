// What the test workloads (programs run under the shim on the simulated node) share: stop at the
// first CUDA call that fails, saying which, and allocate on a device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

// Exits 2 with the call, its error and the line when `call` does not return cudaSuccess.
#define P2PTRACE_CHECK(call)                                                                                    \
  do {                                                                                                          \
    cudaError_t e_ = (call);                                                                                    \
    if (e_ != cudaSuccess) {                                                                                    \
      std::fprintf(stderr, "%s:%d: %s failed: %d (%s)\n", __FILE__, __LINE__, #call, static_cast<int>(e_),     \
                   cudaGetErrorName(e_));                                                                       \
      std::exit(2);                                                                                             \
    }                                                                                                           \
  } while (0)

namespace p2ptrace::test {

// cudaMalloc of `bytes` on `device` (made current).
inline void* AllocOn(int device, size_t bytes) {
  void* p = nullptr;
  P2PTRACE_CHECK(cudaSetDevice(device));
  P2PTRACE_CHECK(cudaMalloc(&p, bytes));
  return p;
}

}  // namespace p2ptrace::test
