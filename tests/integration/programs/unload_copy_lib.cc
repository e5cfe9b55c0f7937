// The library unload_workload opens and closes: linked to the CUDA runtime, it copies 1 MiB from
// device 0 to device 1 `copies` times (cudaMemcpyPeer, no peer access: host-staged) and checks the
// bytes arrived. Returns 0, or the first failing call's error.
#include <cuda_runtime_api.h>

#include <vector>

extern "C" __attribute__((visibility("default"))) int unload_copy_lib_run(int copies) {
  constexpr size_t kBytes = 1 << 20;
  void *a = nullptr, *b = nullptr;
  std::vector<unsigned char> in(kBytes, 0x5a), out(kBytes, 0);
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess) e = cudaMalloc(&a, kBytes);
  if (e == cudaSuccess) e = cudaMemcpy(a, in.data(), kBytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaSetDevice(1);
  if (e == cudaSuccess) e = cudaMalloc(&b, kBytes);
  for (int i = 0; i < copies && e == cudaSuccess; ++i) e = cudaMemcpyPeer(b, 1, a, 0, kBytes);
  if (e == cudaSuccess) e = cudaMemcpy(out.data(), b, kBytes, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && out != in) return -2;
  if (b != nullptr) cudaFree(b);
  if (a != nullptr) cudaFree(a);
  return static_cast<int>(e);
}
