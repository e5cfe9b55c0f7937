// libp2ptrace_audit.so: an rtld-audit module (LD_AUDIT, rtld-audit(7)) that lets the shim see
// CUDA runtime and NCCL calls a program makes through dlsym (Python ctypes, vLLM's
// PyNcclCommunicator, CuPy), which LD_PRELOAD alone never sees: a dlsym on a libcudart/libnccl
// handle searches that library, not the global scope where the shim sits.
//
// For a dlsym (LA_SYMB_DLSYM) whose definition is in libcudart.so.N, libnccl.so* or libcuda.so*, and
// whose name the loaded libp2ptrace.so exports as a wrapper of that library (its version node
// libcudart.so.N / P2PTRACE_0: the shim's export list is the only list), the program gets the
// shim's wrapper; the wrapper calls the real function of the library loaded (shim/base/bind.cc finds an
// RTLD_LOCAL one). Every other binding is returned untouched, and the shim's own dlsym calls (how
// it finds the real functions) always get the real address; so do cudart's, NCCL's and libcuda's
// own lookups in libcuda (a runtime call is then seen once, as the runtime's). No wrapping of dlsym itself, so
// RTLD_NEXT keeps working for everyone else.
//
// The module lives in its own link namespace, with its own libc; it reaches the shim (base
// namespace) through dlmopen(LM_ID_BASE, …, RTLD_NOLOAD). Its only DT_NEEDED is the C library's.
// Without the shim in the process (LD_AUDIT alone) it changes nothing. It defines no
// la_pltenter/la_pltexit: with them glibc would send every PLT call of the audited objects through
// its profiling trampoline (DESIGN.md §4, "Calls through dlsym").
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "p2ptrace/trace_format.h"

namespace {

// What la_objopen put into an object's cookie (glibc starts it as the link_map's address, never one
// of these small values). Only the libraries marked here get LA_FLG_BINDTO.
enum Cookie : uintptr_t { kCudart11 = 1, kCudart12 = 2, kCudart13 = 3, kNccl = 4, kShim = 5, kDriver = 6 };
constexpr const char* kCudartNodes[] = {"libcudart.so.11.0", "libcudart.so.12", "libcudart.so.13"};
constexpr const char kNcclNode[] = "P2PTRACE_0";  // the shim's version node of its NCCL and driver wrappers

// The shim's path as the loader named it (la_objopen), and its handle once opened; written under
// the loader's lock (la_objopen and la_symbind run with it held), read only there.
char g_shim_name[4096];
void* g_shim = nullptr;
bool g_shim_tried = false;
using BoundFn = void (*)(uint32_t);
BoundFn g_bound = nullptr;

const char* Base(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

bool StartsWith(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

void WarnOnce(const char* what) {
  static bool warned = false;
  if (warned) return;
  warned = true;
  char line[512];
  int n = std::snprintf(line, sizeof line, "p2ptrace: audit: %s; calls through dlsym are not traced\n", what);
  if (n > 0) (void)!write(2, line, static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1);
}

// libcudart.so.12, libcudart.so.12.8.90 → kCudart12; libnccl.so.2, libnccl.so → kNccl; libcuda.so.1,
// libcuda.so.580.65.06, libcuda.so → kDriver; else 0.
// An unversioned libcudart.so (ctypes.CDLL("libcudart.so")) by the file its link names.
uintptr_t Classify(const char* path) {
  const char* base = Base(path);
  if (std::strcmp(base, "libcudart.so") == 0) {
    char real[PATH_MAX];
    if (realpath(path, real) == nullptr || std::strcmp(Base(real), "libcudart.so") == 0) return 0;
    return Classify(real);
  }
  if (StartsWith(base, "libcudart.so.")) {
    const char* v = base + std::strlen("libcudart.so.");
    if (StartsWith(v, "11") && (v[2] == '\0' || v[2] == '.')) return kCudart11;
    if (StartsWith(v, "12") && (v[2] == '\0' || v[2] == '.')) return kCudart12;
    if (StartsWith(v, "13") && (v[2] == '\0' || v[2] == '.')) return kCudart13;
    return 0;  // a runtime the shim has no wrappers for
  }
  if (std::strcmp(base, "libnccl.so") == 0 || StartsWith(base, "libnccl.so.")) return kNccl;
  if (std::strcmp(base, "libcuda.so") == 0 || StartsWith(base, "libcuda.so.")) return kDriver;
  return 0;
}

// The shim, opened once in the base namespace without loading anything; null (for good) when the
// process has none, or one without the dlsym path (an older shim: warned).
void* Shim() {
  if (g_shim_tried) return g_shim;
  g_shim_tried = true;
  if (g_shim_name[0] == '\0') return nullptr;  // LD_AUDIT without the shim: nothing to hand out
  void* h = dlmopen(LM_ID_BASE, g_shim_name, RTLD_NOLOAD | RTLD_LAZY);
  if (h == nullptr) {
    WarnOnce("libp2ptrace.so is loaded but cannot be reached from the audit module");
    return nullptr;
  }
  g_bound = reinterpret_cast<BoundFn>(dlvsym(h, "p2ptrace_audit_bound", kNcclNode));
  if (g_bound == nullptr) {
    WarnOnce("the loaded libp2ptrace.so has no dlsym support (older than libp2ptrace_audit.so)");
    dlclose(h);
    return nullptr;
  }
  g_shim = h;  // kept: the shim is never unloaded before the program ends
  return g_shim;
}

// The shim's wrapper of `name` for the library of `kind`, or null when the shim wraps no such
// function there. The address must lie in the shim itself: a handle's lookup also searches the
// shim's dependencies.
void* Wrapper(uintptr_t kind, const char* name) {
  void* shim = Shim();
  if (shim == nullptr) return nullptr;
  const char* node = kind == kNccl || kind == kDriver ? kNcclNode : kCudartNodes[kind - kCudart11];
  void* fn = dlvsym(shim, name, node);
  if (fn == nullptr) return nullptr;
  Dl_info info{};
  struct link_map* where = nullptr;
  struct link_map* self = nullptr;
  if (dladdr1(fn, &info, reinterpret_cast<void**>(&where), RTLD_DL_LINKMAP) == 0 ||
      dlinfo(shim, RTLD_DI_LINKMAP, &self) != 0 || where != self)
    return nullptr;
  return fn;
}

}  // namespace

extern "C" {

// Version 1 is all this module needs (la_objopen, la_symbind64); the loader gets what it offered
// when that is older.
__attribute__((visibility("default"))) unsigned int la_version(unsigned int version) {
  return version < LAV_CURRENT ? version : LAV_CURRENT;
}

__attribute__((visibility("default"))) unsigned int la_objopen(struct link_map* map, Lmid_t lmid,
                                                                uintptr_t* cookie) {
  if (lmid != LM_ID_BASE || map->l_name == nullptr) return 0;  // other namespaces: the shim is not there
  const char* base = Base(map->l_name);
  // The shim by its name (also a versioned copy, libp2ptrace-1.2.so); Shim() checks it really is one.
  if (StartsWith(base, "libp2ptrace.so") || StartsWith(base, "libp2ptrace-")) {
    size_t n = std::strlen(map->l_name);
    if (n < sizeof g_shim_name && g_shim_name[0] == '\0') std::memcpy(g_shim_name, map->l_name, n + 1);
    *cookie = kShim;  // its own dlsym calls are told apart by this (la_symbind's refcook)
    return 0;
  }
  uintptr_t kind = Classify(map->l_name);
  if (kind == 0) return 0;  // neither bindings to nor from it are of interest: no cost there
  *cookie = kind;
  // Only BINDTO: a PLT binding is audited only when its caller has BINDFROM too, so a program
  // linked against these libraries binds as without the auditor; a dlsym is audited when either
  // side asks (rtld-audit's long-standing rule, checked in tests/integration/shim/audit_test.cc).
  return LA_FLG_BINDTO;
}

__attribute__((visibility("default"))) uintptr_t la_symbind64(Elf64_Sym* sym, unsigned int, uintptr_t* refcook,
                                                               uintptr_t* defcook, unsigned int* flags,
                                                               const char* symname) {
  uintptr_t real = sym->st_value;
  // Untouched: PLT bindings; values another auditor already changed; the shim's own lookups of the
  // real functions (shim/base/bind.cc); anything not defined by cudart, NCCL or the
  // driver; cudart's, NCCL's and the driver's own lookups in the driver.
  if ((*flags & LA_SYMB_DLSYM) == 0 || (*flags & LA_SYMB_ALTVALUE) != 0) return real;
  uintptr_t from = refcook != nullptr ? *refcook : 0;
  if (from == kShim) return real;
  uintptr_t kind = *defcook;
  if (symname == nullptr || kind < kCudart11 || kind > kDriver || kind == kShim) return real;
  if (kind == kDriver && ((from >= kCudart11 && from <= kNccl) || from == kDriver)) return real;
  const char* prefix = kind == kNccl ? "nccl" : kind == kDriver ? "cu" : "cuda";
  if (!StartsWith(symname, prefix)) return real;  // cheap first filter
  // Our own lookups in the shim below never come back here: the shim's definitions are not audited.
  void* wrapper = Wrapper(kind, symname);
  if (wrapper == nullptr) return real;
  g_bound(kind == kNccl     ? P2PTRACE_CAPTURE_NCCL_DLSYM
          : kind == kDriver ? P2PTRACE_CAPTURE_DRIVER_DLSYM
                            : P2PTRACE_CAPTURE_CUDART_DLSYM);
  return reinterpret_cast<uintptr_t>(wrapper);
}

}  // extern "C"
