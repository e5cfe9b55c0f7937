// A real CUDA program built by nvcc (kernel registration, <<<>>> launches): on the simulated node
// the fat binary registers and the launch succeeds without running device code.
#include <cstdio>

__global__ void Scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

int main() {
  float* d = nullptr;
  cudaError_t m = cudaMalloc(&d, 32 * sizeof(float));
  Scale<<<1, 32>>>(d, 2.0f, 32);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  std::printf("malloc %d launch %d sync %d\n", m, launch, sync);
  cudaFree(d);
  return m == cudaSuccess && launch == cudaSuccess && sync == cudaSuccess ? 0 : 1;
}
