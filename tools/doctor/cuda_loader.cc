#include "tools/doctor/cuda_loader.h"

namespace p2ptrace::cli {

void* OpenCudaRuntime(std::string* why) {
  for (const char* name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"})
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
  *why = "no CUDA runtime (libcudart.so) found: install the CUDA runtime, or put it on LD_LIBRARY_PATH";
  return nullptr;
}

std::string NoDeviceWhy(int result, int count) {
  if (result == 0 && count > 0) return "";
  if (result == 35) return "the NVIDIA driver is older than this CUDA runtime (cudaGetDeviceCount: 35)";
  if (result == 34) return "no NVIDIA driver (the CUDA driver is a stub library: cudaGetDeviceCount 34)";
  if (result == 100 || (result == 0 && count == 0)) return "no CUDA-capable GPU (cudaGetDeviceCount: 100)";
  return "cudaGetDeviceCount returned " + std::to_string(result);
}

}  // namespace p2ptrace::cli
