// A shared library for the shim's loader tests (tests/integration/shim/shim_test.cc), built twice:
// against the real libcudart.so.13 (loaded by Python ctypes, RTLD_LOCAL) and against the simulated
// libcudart.so.12 (loaded next to cudart 13 in one process). One function: enable peer access
// src->dst in this library's own runtime, copy between the devices, check the bytes arrived.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <vector>

#define LIB_CHECK(call)                                                                                          \
  do {                                                                                                           \
    cudaError_t e_ = (call);                                                                                     \
    if (e_ != cudaSuccess) {                                                                                     \
      std::printf("shim_copy_lib: %s failed: %d\n", #call, static_cast<int>(e_));                                \
      return static_cast<int>(e_);                                                                               \
    }                                                                                                            \
  } while (0)

extern "C" __attribute__((visibility("default"))) int shim_copy_lib_run(int src_dev, int dst_dev, size_t bytes) {
  int version = 0;
  LIB_CHECK(cudaRuntimeGetVersion(&version));
  void *src = nullptr, *dst = nullptr;
  LIB_CHECK(cudaSetDevice(dst_dev));
  LIB_CHECK(cudaMalloc(&dst, bytes));
  LIB_CHECK(cudaSetDevice(src_dev));
  LIB_CHECK(cudaMalloc(&src, bytes));
  // cudaPointerGetAttributes is not wrapped: it asks this library's runtime directly, so it proves
  // the (wrapped) cudaMalloc reached this runtime and not another one loaded in the process.
  cudaPointerAttributes a{};
  LIB_CHECK(cudaPointerGetAttributes(&a, dst));
  if (a.type != cudaMemoryTypeDevice || a.device != dst_dev) {
    std::printf("shim_copy_lib: runtime %d does not own its allocation (type %d device %d)\n", version,
                static_cast<int>(a.type), a.device);
    return 100;
  }
  LIB_CHECK(cudaDeviceEnablePeerAccess(dst_dev, 0));
  std::vector<unsigned char> in(bytes), out(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 13 + static_cast<size_t>(src_dev));
  LIB_CHECK(cudaMemcpy(src, in.data(), bytes, cudaMemcpyHostToDevice));
  LIB_CHECK(cudaMemcpyPeer(dst, dst_dev, src, src_dev, bytes));
  LIB_CHECK(cudaMemcpy(out.data(), dst, bytes, cudaMemcpyDeviceToHost));
  if (in != out) {
    std::printf("shim_copy_lib: bytes differ after the copy\n");
    return 101;
  }
  LIB_CHECK(cudaFree(src));
  LIB_CHECK(cudaFree(dst));
  std::printf("shim_copy_lib: runtime %d copied %zu bytes %d->%d\n", version, bytes, src_dev, dst_dev);
  std::fflush(stdout);
  return 0;
}
