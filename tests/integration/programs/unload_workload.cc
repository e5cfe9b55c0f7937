// A program that is not linked to the CUDA runtime and uses it only through a library it opens
// (RTLD_LOCAL, as Python's ctypes does) and closes again, N times: each dlclose unloads cudart.
//   unload_workload LIB N     LIB: unload_copy_lib (tests/integration/programs/unload_copy_lib.cc)
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: unload_workload LIB N\n");
    return 64;
  }
  for (int i = 0, n = std::atoi(argv[2]); i < n; ++i) {
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      std::printf("dlopen: %s\n", dlerror());
      return 2;
    }
    auto run = reinterpret_cast<int (*)(int)>(dlsym(h, "unload_copy_lib_run"));
    int r = run ? run(8) : -1;
    std::printf("round %d: %d\n", i, r);
    if (dlclose(h) != 0 || r != 0) return 3;
  }
  return 0;
}
