// cudart 12 and 13 in one process (tests/integration/shim/shim_test.cc): this program is linked to the
// real libcudart.so.13 and copies 0->1 itself; it is also linked to shim_copy_lib12, a library
// linked to libcudart.so.12, which copies 2->3 through its own runtime. Each runtime enables its
// own peer access, so both copies are direct.
#include <cuda_runtime_api.h>

#include <cstdio>

extern "C" int shim_copy_lib_run(int src_dev, int dst_dev, size_t bytes);

int main() {
  constexpr size_t kBytes = 2u << 20;
  void *src = nullptr, *dst = nullptr;
  int version = 0;
  cudaError_t e = cudaRuntimeGetVersion(&version);
  if (e == cudaSuccess) e = cudaSetDevice(1);
  if (e == cudaSuccess) e = cudaMalloc(&dst, kBytes);
  if (e == cudaSuccess) e = cudaSetDevice(0);
  if (e == cudaSuccess) e = cudaMalloc(&src, kBytes);
  if (e == cudaSuccess) e = cudaDeviceEnablePeerAccess(1, 0);
  if (e == cudaSuccess) e = cudaMemcpyPeer(dst, 1, src, 0, kBytes);
  std::printf("main: runtime %d copy 0->1: %d\n", version, static_cast<int>(e));
  std::fflush(stdout);
  if (e != cudaSuccess) return 1;
  int r = shim_copy_lib_run(2, 3, 1u << 20);
  std::printf("main: library returned %d\n", r);
  return r == 0 ? 0 : 1;
}
