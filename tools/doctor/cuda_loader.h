// The CUDA runtime, loaded at run time: the CLI links no CUDA, so `doctor` runs (and says why it
// cannot test) where none is installed. One place finds the library and explains a missing device;
// each user binds the functions it needs.
#pragma once

#include <dlfcn.h>

#include <string>

namespace p2ptrace::cli {

// libcudart.so.13, .12, .11.0 or unversioned, whichever loads first; null with `why` when none does.
void* OpenCudaRuntime(std::string* why);

// Why cudaGetDeviceCount's (result, count) leaves no GPU to use; "" when there is one.
std::string NoDeviceWhy(int result, int count);

// `name` from `lib` into `*fn`; false when the runtime lacks it.
template <typename F>
bool BindCuda(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

}  // namespace p2ptrace::cli
