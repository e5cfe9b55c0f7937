// The workloads of the preflight scenarios (preflight_test.cc, job_start_test.cc), run on the
// simulated node under the shim. `query`: an NCCL job's start (libnccl.so.2 loaded and asked its
// version, as a framework does when it sets up NCCL, then one peer question: the shim's preflight
// runs there with NCCL's rules); `cuda-query`: the same peer question from a CUDA-only program (the
// driver's rules only); `nccl-loaded-cuda-query`: libnccl.so.2 loaded (PyTorch loads it with its
// CUDA libraries) but never called, then the peer question: still a CUDA-only program;
// `copy-no-peer`: copy GPU0 → GPU1 with cudaMemcpyPeer without enabling peer access (host-staged).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "query";
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    std::fprintf(stderr, "preflight_workload: no device\n");
    return 1;
  }
  bool nccl_job = std::strcmp(mode, "query") == 0;
  bool nccl_loaded = nccl_job || std::strcmp(mode, "nccl-loaded-cuda-query") == 0;
  if (nccl_loaded && dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "preflight_workload: %s\n", dlerror());
    return 1;
  }
  if (nccl_job) {  // through the global scope, as a framework's own symbol reference would bind
    auto get_version = reinterpret_cast<int (*)(int*)>(dlsym(RTLD_DEFAULT, "ncclGetVersion"));
    int version = 0;
    if (get_version == nullptr || get_version(&version) != 0) return 1;
  }
  if (nccl_loaded || std::strcmp(mode, "cuda-query") == 0) {
    int can = -1;
    cudaError_t r = cudaDeviceCanAccessPeer(&can, 0, n > 1 ? 1 : 0);
    std::printf("devices %d canAccessPeer(0,%d)=%d (%d)\n", n, n > 1 ? 1 : 0, can, static_cast<int>(r));
    return r == cudaSuccess ? 0 : 1;
  }
  if (std::strcmp(mode, "copy-no-peer") == 0 && n >= 2) {
    void *a = nullptr, *b = nullptr;
    if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&a, 1 << 20) != cudaSuccess) return 1;
    if (cudaSetDevice(1) != cudaSuccess || cudaMalloc(&b, 1 << 20) != cudaSuccess) return 1;
    cudaError_t r = cudaMemcpyPeer(b, 1, a, 0, 1 << 20);
    std::printf("copy %d\n", static_cast<int>(r));
    return r == cudaSuccess ? 0 : 1;
  }
  std::fprintf(stderr, "preflight_workload: unknown mode %s\n", mode);
  return 2;
}
