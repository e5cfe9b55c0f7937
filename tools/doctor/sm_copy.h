// doctor --test's copy by the GPU's own cores. NCCL's kernels move data by storing into
// the peer's memory through peer access, which the copy-engine copies of the rest of the test never
// exercise, and a platform can carry those and silently drop the stores (nccl#2335). A kernel on
// the source copies words into the destination; a kernel on the destination counts the words that
// differ from what should have arrived (nvbandwidth's SM copies, checked where they land). The
// kernels are PTX, compiled by the driver when loaded (the CLI links no CUDA and needs no nvcc); the
// driver is loaded at run time like the runtime.
#pragma once

#include <map>
#include <string>

namespace p2ptrace::cli {

// The two kernels, 8-byte words, a grid-stride loop each:
//   p2ptrace_copy_words(u64* dst, const u64* src, u64 words)            dst[i] = src[i]
//   p2ptrace_count_differing(const u64* a, const u64* b, u64 words, u32* count)
//                                                                        *count += words where a[i] != b[i]
extern const char kSmCopyPtx[];

struct SmCopyKernels {
  int (*CtxGetCurrent)(void** context) = nullptr;
  int (*ModuleLoadData)(void** module, const void* image) = nullptr;
  int (*ModuleGetFunction)(void** fn, void* module, const char* name) = nullptr;
  int (*LaunchKernel)(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shared_bytes, void* stream, void** params, void** extra) = nullptr;
  // False with why ("libcuda.so.1 not found") when the driver cannot be had.
  bool Load(std::string* why);
  // The kernels, once loaded, in each context (a module belongs to the context current at its
  // load; the runtime's primary context of a device, made current by a runtime call first: CUDA 11's
  // cudaSetDevice binds it only at the next call that needs one).
  struct Loaded {
    void* copy = nullptr;
    void* count = nullptr;
  };
  std::map<void*, Loaded> by_context;
};

}  // namespace p2ptrace::cli
