// Linked against the simulated libcudart.so.12 (so its references carry the libcudart.so.12
// version node, as a CUDA 12 program's do): checks the 12 flavour answers in CUDA 12's ABI.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

extern "C" cudaError_t cudaGetDeviceProperties_v2(void* prop, int device);

int main() {
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  alignas(8) unsigned char prop[1032] = {};  // sizeof(cudaDeviceProp) in CUDA 12.8
  cudaError_t e = cudaGetDeviceProperties_v2(prop, 1);
  int bus = 0, warp = 0, clock = 0;
  std::memcpy(&bus, prop + 584, sizeof bus);  // offsetof(cudaDeviceProp, pciBusID) in CUDA 12.8
  std::memcpy(&warp, prop + 308, sizeof warp);  // warpSize
  std::memcpy(&clock, prop + 348, sizeof clock);  // clockRate, which CUDA 13 dropped
  std::printf("runtime %d props %d name %s bus %x warp %d clock %d\n", rt, e, reinterpret_cast<char*>(prop), bus,
              warp, clock);
  return e == cudaSuccess ? 0 : 1;
}
