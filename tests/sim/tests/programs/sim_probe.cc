// Helper for the process-level sim tests: prints the result of a few CUDA calls, one per line,
// as "<call> <code>", so a test can check what every call returns under a given environment.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  bool unsupported = argc > 1 && std::strcmp(argv[1], "--unsupported") == 0;
  int n = -1, can = -1, dev = -1;
  void* p = nullptr;
  cudaStream_t s = nullptr;
  std::printf("cudaGetDeviceCount %d\n", cudaGetDeviceCount(&n));
  std::printf("cudaSetDevice %d\n", cudaSetDevice(0));
  std::printf("cudaGetDevice %d\n", cudaGetDevice(&dev));
  std::printf("cudaMalloc %d\n", cudaMalloc(&p, 64));
  std::printf("cudaDeviceCanAccessPeer %d\n", cudaDeviceCanAccessPeer(&can, 0, 1));
  std::printf("cudaDeviceEnablePeerAccess %d\n", cudaDeviceEnablePeerAccess(1, 0));
  std::printf("cudaStreamCreate %d\n", cudaStreamCreate(&s));
  std::printf("cudaGetLastError %d\n", cudaGetLastError());
  if (unsupported) {
    int value = 0;
    // Not modelled by the sim: twice, so a test can see the message is printed once.
    std::printf("cudaMemcpyToSymbol %d\n", cudaMemcpyToSymbol(&value, &value, sizeof value));
    std::printf("cudaMemcpyToSymbol %d\n", cudaMemcpyToSymbol(&value, &value, sizeof value));
    std::printf("cudaGetErrorName %s\n", cudaGetErrorName(cudaErrorNotSupported));
  }
  return 0;
}
