// The C library functions the shim interposes, each for one reason of the shim's own:
//   fopen, fopen64  NCCL opening the log tap's file gets it created safely, on a high descriptor
//                   (nccl_log_tap.h, OpenNcclTapFile); every other path goes straight through.
//   dlclose         a CUDA runtime or NCCL unloaded: what the shim holds of it is retired (unload.h).
// Callers reference these with glibc's version (fopen@GLIBC_2.2.5, dlclose@GLIBC_2.34 or, from
// binaries built before glibc 2.34, dlclose@GLIBC_2.2.5): a definition under any other version name
// would not interpose them (ld.so binds a versioned reference only to that version name), so each is
// bound with .symver to glibc's own
// names (P2PTRACE_GLIBC_BASE, from CMake: the architecture's first glibc version) and listed under
// those nodes in the version script.
// Compiled with -fno-optimize-sibling-calls: dlsym(RTLD_NEXT) looks at its caller's address.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>

#include "shim/interpose/unload.h"
#include "shim/nccl_log_tap.h"

#ifndef P2PTRACE_GLIBC_BASE
#error "P2PTRACE_GLIBC_BASE (the architecture's base glibc version) comes from shim/CMakeLists.txt"
#endif

namespace {

// The next definition of `name` (libc's), found once.
template <typename F>
__attribute__((noinline)) F Next(std::atomic<void*>& slot, const char* name) {
  void* fn = slot.load(std::memory_order_acquire);
  if (__builtin_expect(fn == nullptr, 0)) {
    fn = dlsym(RTLD_NEXT, name);
    slot.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<F>(fn);
}

using FopenFn = FILE* (*)(const char*, const char*);
using DlcloseFn = int (*)(void*);
std::atomic<void*> g_fopen, g_fopen64, g_dlclose;

// Found before main, never inside a call: dlsym replaces the thread's dlerror() state, and NCCL
// formats a failed dlopen's dlerror() into a WARN line whose first output is what opens the tap
// file (through fopen). Resolving there would free the string NCCL is about to print.
__attribute__((constructor)) void FindNextOnce() {
  Next<FopenFn>(g_fopen, "fopen");
  Next<FopenFn>(g_fopen64, "fopen64");
  Next<DlcloseFn>(g_dlclose, "dlclose");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) FILE* p2p_fopen(const char* path, const char* mode) {
  return p2ptrace::shim::OpenNcclTapFile(path, mode, Next<FopenFn>(g_fopen, "fopen"));
}
extern "C" __attribute__((visibility("default"))) FILE* p2p_fopen64(const char* path, const char* mode) {
  return p2ptrace::shim::OpenNcclTapFile(path, mode, Next<FopenFn>(g_fopen64, "fopen64"));
}
extern "C" __attribute__((visibility("default"))) int p2p_dlclose(void* handle) {
  return p2ptrace::shim::CloseLibrary(handle, Next<DlcloseFn>(g_dlclose, "dlclose"));
}
extern "C" __attribute__((visibility("default"))) int p2p_dlclose_base(void* handle) {
  return p2ptrace::shim::CloseLibrary(handle, Next<DlcloseFn>(g_dlclose, "dlclose"));
}

__asm__(".symver p2p_fopen, fopen@@" P2PTRACE_GLIBC_BASE);
__asm__(".symver p2p_fopen64, fopen64@@" P2PTRACE_GLIBC_BASE);
__asm__(".symver p2p_dlclose, dlclose@@GLIBC_2.34");
__asm__(".symver p2p_dlclose_base, dlclose@" P2PTRACE_GLIBC_BASE);
