// The C library functions the shim interposes, each for one reason of the shim's own:
//   fopen, fopen64  NCCL opening the log tap's file gets it created safely, on a high descriptor
//                   (nccl_log_tap.h, OpenNcclTapFile); every other path goes straight through.
//   dlclose         a CUDA runtime or NCCL unloaded: what the shim holds of it is retired (unload.h).
//   puts            the version line an NCCL before 2.22 prints only because the log tap raised its
//                   level is dropped (nccl_log_tap.h, IsTapsNcclVersionLine); every other line goes
//                   straight through.
// Callers reference these with glibc's version (fopen@GLIBC_2.2.5, dlclose@GLIBC_2.34 or, from
// binaries built before glibc 2.34, dlclose@GLIBC_2.2.5): a definition under any other version name
// would not interpose them (ld.so binds a versioned reference only to that version name), so each is
// bound with .symver to glibc's own
// names (P2PTRACE_GLIBC_BASE, from CMake: the architecture's first glibc version) and listed under
// those nodes in the version script.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "shim/base/bind.h"
#include "shim/interpose/unload.h"
#include "shim/nccl_log_tap.h"

#ifndef P2PTRACE_GLIBC_BASE
#error "P2PTRACE_GLIBC_BASE (the architecture's base glibc version) comes from shim/CMakeLists.txt"
#endif

namespace {

using p2ptrace::shim::Library;
using p2ptrace::shim::RealFunction;
using FopenFn = FILE* (*)(const char*, const char*);
using DlcloseFn = int (*)(void*);
using PutsFn = int (*)(const char*);
constinit RealFunction g_fopen{"fopen", Library::kLibc};
constinit RealFunction g_fopen64{"fopen64", Library::kLibc};
constinit RealFunction g_dlclose{"dlclose", Library::kLibc};
constinit RealFunction g_puts{"puts", Library::kLibc};

// Found before main, never inside a call: dlsym replaces the thread's dlerror() state, and NCCL
// formats a failed dlopen's dlerror() into a WARN line whose first output is what opens the tap
// file (through fopen). Resolving there would free the string NCCL is about to print.
__attribute__((constructor)) void FindNextOnce() {
  g_fopen.Get();
  g_fopen64.Get();
  g_dlclose.Get();
  g_puts.Get();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) FILE* p2p_fopen(const char* path, const char* mode) {
  return p2ptrace::shim::OpenNcclTapFile(path, mode, g_fopen.As<FopenFn>());
}
extern "C" __attribute__((visibility("default"))) FILE* p2p_fopen64(const char* path, const char* mode) {
  return p2ptrace::shim::OpenNcclTapFile(path, mode, g_fopen64.As<FopenFn>());
}
extern "C" __attribute__((visibility("default"))) int p2p_dlclose(void* handle) {
  return p2ptrace::shim::CloseLibrary(handle, g_dlclose.As<DlcloseFn>());
}
extern "C" __attribute__((visibility("default"))) int p2p_dlclose_base(void* handle) {
  return p2ptrace::shim::CloseLibrary(handle, g_dlclose.As<DlcloseFn>());
}

extern "C" __attribute__((visibility("default"))) int p2p_puts(const char* line) {
  // What glibc's puts returns for a line written: its length and the newline.
  if (p2ptrace::shim::IsTapsNcclVersionLine(line)) return static_cast<int>(std::min<size_t>(std::strlen(line) + 1, INT_MAX));
  return g_puts.As<PutsFn>()(line);
}

__asm__(".symver p2p_fopen, fopen@@" P2PTRACE_GLIBC_BASE);
__asm__(".symver p2p_puts, puts@@" P2PTRACE_GLIBC_BASE);
__asm__(".symver p2p_fopen64, fopen64@@" P2PTRACE_GLIBC_BASE);
__asm__(".symver p2p_dlclose, dlclose@@GLIBC_2.34");
__asm__(".symver p2p_dlclose_base, dlclose@" P2PTRACE_GLIBC_BASE);
