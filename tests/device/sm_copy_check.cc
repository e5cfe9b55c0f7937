// doctor --test's two kernels (tools/doctor/sm_copy.h) on one GPU, checked against what the copy engine
// delivers: p2ptrace_copy_words copies the words of a buffer within the device; p2ptrace_count_differing
// then counts none differing from the source, and exactly K once K words of the copy were overwritten
// through cudaMemcpy. The driver compiles the PTX here: on a machine with one GPU this is the kernels'
// whole run (doctor --test needs two). On the simulated node, which runs only the kernels it knows
// (p2psim_kernel_runs), the last line says whether these ran or were only accepted.
//   sm_copy_check [DEVICE]    exit 0 when both kernels did what they must, 1 when one did not,
//                             2 when there is no GPU, driver or module to try them with
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/doctor/sm_copy.h"

namespace {

constexpr uint64_t kWords = 1 << 20;  // 8 MiB
constexpr uint64_t kOverwritten = 1024;

int Fail(const char* what, int code) {
  std::printf("FAIL %s: %d\n", what, code);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int device = argc > 1 ? std::atoi(argv[1]) : 0;
  if (int r = cudaSetDevice(device); r != cudaSuccess) return Fail("cudaSetDevice", r);
  if (int r = cudaFree(nullptr); r != cudaSuccess) return Fail("cudaFree(0), binding the device's context", r);
  p2ptrace::cli::SmCopyKernels sm;
  std::string why;
  if (!sm.Load(&why)) {
    std::printf("FAIL %s\n", why.c_str());
    return 2;
  }
  void* module = nullptr;
  void *copy = nullptr, *count = nullptr;
  if (int r = sm.ModuleLoadData(&module, p2ptrace::cli::kSmCopyPtx); r != 0) return Fail("cuModuleLoadData", r);
  if (int r = sm.ModuleGetFunction(&copy, module, "p2ptrace_copy_words"); r != 0) return Fail("p2ptrace_copy_words", r);
  if (int r = sm.ModuleGetFunction(&count, module, "p2ptrace_count_differing"); r != 0)
    return Fail("p2ptrace_count_differing", r);

  std::vector<uint64_t> host(kWords);
  for (uint64_t i = 0; i < kWords; ++i) host[i] = i * 0x9E3779B97F4A7C15ull;
  void *src = nullptr, *dst = nullptr, *counter = nullptr;
  if (cudaMalloc(&src, kWords * 8) != cudaSuccess || cudaMalloc(&dst, kWords * 8) != cudaSuccess ||
      cudaMalloc(&counter, 4) != cudaSuccess)
    return Fail("cudaMalloc", 0);
  cudaMemcpy(src, host.data(), kWords * 8, cudaMemcpyHostToDevice);
  cudaMemset(dst, 0, kWords * 8);
  uint64_t words = kWords;
  auto launch = [&](void* fn, std::vector<void*> params) {
    return sm.LaunchKernel(fn, 256u, 1u, 1u, 256u, 1u, 1u, 0u, nullptr, params.data(), nullptr);
  };
  auto counted = [&](uint32_t* n) {
    cudaMemset(counter, 0, 4);
    if (int r = launch(count, {&dst, &src, &words, &counter}); r != 0) return r;
    if (int r = cudaDeviceSynchronize(); r != cudaSuccess) return r;
    return static_cast<int>(cudaMemcpy(n, counter, 4, cudaMemcpyDeviceToHost));
  };

  if (int r = launch(copy, {&dst, &src, &words}); r != 0) return Fail("cuLaunchKernel p2ptrace_copy_words", r);
  if (int r = cudaDeviceSynchronize(); r != cudaSuccess) return Fail("the copy kernel", r);
  std::vector<uint64_t> back(kWords);
  cudaMemcpy(back.data(), dst, kWords * 8, cudaMemcpyDeviceToHost);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < kWords; ++i) wrong += back[i] != host[i];
  uint32_t after_copy = 0, after_overwrite = 0;
  if (int r = counted(&after_copy); r != 0) return Fail("the count kernel", r);
  const uint64_t mark = ~0ull;
  for (uint64_t i = 0; i < kOverwritten; ++i)
    cudaMemcpy(static_cast<uint64_t*>(dst) + i * (kWords / kOverwritten), &mark, 8, cudaMemcpyHostToDevice);
  if (int r = counted(&after_overwrite); r != 0) return Fail("the count kernel", r);

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  std::printf("GPU%d (%s): p2ptrace_copy_words copied %llu words, %llu differ from the source (read back, want 0)\n",
              device, prop.name, static_cast<unsigned long long>(kWords), static_cast<unsigned long long>(wrong));
  std::printf("p2ptrace_count_differing: %u after the copy (want 0), %u after %llu words were overwritten (want %llu)\n",
              after_copy, after_overwrite, static_cast<unsigned long long>(kOverwritten),
              static_cast<unsigned long long>(kOverwritten));
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (auto runs = driver ? reinterpret_cast<int (*)(const char*)>(dlsym(driver, "p2psim_kernel_runs")) : nullptr)
    std::printf("simulated node: p2ptrace_copy_words %s, p2ptrace_count_differing %s\n",
                runs("p2ptrace_copy_words") ? "ran" : "accepted, not run",
                runs("p2ptrace_count_differing") ? "ran" : "accepted, not run");
  bool ok = wrong == 0 && after_copy == 0 && after_overwrite == kOverwritten;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
