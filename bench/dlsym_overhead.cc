// What a call through dlsym costs under the audit module (run_bench.py --dlsym). Linked to neither
// libcudart nor libnccl: both dlopen'ed RTLD_LOCAL (the simulated ones, by LD_LIBRARY_PATH), every
// function taken with dlsym, as Python ctypes does. Run bare, under LD_PRELOAD=libp2ptrace.so alone
// (the calls never reach the shim) and with LD_AUDIT=libp2ptrace_audit.so too (they do):
//   dlsym_overhead allreduce N   setup, 64 warm-up + N ncclAllReduce of 1024 floats, 1-rank comm
//   dlsym_overhead dlsym N       64 + N dlsym(libnccl, "ncclAllReduce"): the module's price per dlsym
// One idle thread first, as in nccl_overhead.cc (glibc's single-thread shortcuts would otherwise end
// only in the shim's runs).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

struct UniqueId {
  char internal[128];
};

void* Open(const char* name) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlsym_overhead: %s\n", dlerror());
    std::exit(1);
  }
  return h;
}

template <typename F>
F Sym(void* lib, const char* name) {
  void* fn = dlsym(lib, name);
  if (fn == nullptr) {
    std::fprintf(stderr, "dlsym_overhead: no %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(fn);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: dlsym_overhead allreduce|dlsym N\n");
    return 2;
  }
  std::thread([] { pause(); }).detach();
  long n = std::atol(argv[2]);
  void* nccl = Open("libnccl.so.2");
  if (std::strcmp(argv[1], "dlsym") == 0) {
    void* last = nullptr;
    for (long i = 0; i < 64 + n; ++i) last = dlsym(nccl, "ncclAllReduce");
    std::printf("dlsym %s\n", last ? "found" : "missing");
    return last ? 0 : 1;
  }
  if (std::strcmp(argv[1], "allreduce") != 0) return 2;
  // RTLD_GLOBAL here only because the simulated NCCL finds the runtime with dlsym(RTLD_DEFAULT) (a
  // real NCCL carries its own); the functions are still taken from the handle with dlsym.
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (cudart == nullptr) cudart = Open("libcudart.so.13");
  auto set_device = Sym<int (*)(int)>(cudart, "cudaSetDevice");
  auto malloc_dev = Sym<int (*)(void**, size_t)>(cudart, "cudaMalloc");
  auto stream_create = Sym<int (*)(void**)>(cudart, "cudaStreamCreate");
  auto stream_sync = Sym<int (*)(void*)>(cudart, "cudaStreamSynchronize");
  auto get_id = Sym<int (*)(UniqueId*)>(nccl, "ncclGetUniqueId");
  auto init_rank = Sym<int (*)(void**, int, UniqueId, int)>(nccl, "ncclCommInitRank");
  auto all_reduce = Sym<int (*)(const void*, void*, size_t, int, int, void*, void*)>(nccl, "ncclAllReduce");
  auto destroy = Sym<int (*)(void*)>(nccl, "ncclCommDestroy");
  UniqueId id;
  void *comm = nullptr, *stream = nullptr, *buf = nullptr;
  int step = 0;
  if (++step, set_device(0) != 0 || (++step, get_id(&id) != 0) || (++step, init_rank(&comm, 1, id, 0) != 0) ||
      (++step, stream_create(&stream) != 0) || (++step, malloc_dev(&buf, 4096) != 0)) {
    std::fprintf(stderr, "dlsym_overhead: setup step %d failed\n", step);
    return 1;
  }
  for (long i = 0; i < 64 + n; ++i)
    if (int r = all_reduce(buf, buf, 1024, 7 /* float32 */, 0 /* sum */, comm, stream); r != 0) {
      std::fprintf(stderr, "dlsym_overhead: ncclAllReduce %d\n", r);
      return 1;
    }
  stream_sync(stream);
  destroy(comm);
  std::printf("allreduce done\n");
  return 0;
}
