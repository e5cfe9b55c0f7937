// Compiled with -fno-optimize-sibling-calls: glibc's dlsym/dlvsym(RTLD_NEXT) look at their caller's
// address to pick the object to search after; a tail call would make that ld.so's and crash (seen
// with glibc 2.36). Every RTLD_NEXT lookup of the shim is in this file.
#include "shim/base/bind.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shim/base/fd.h"

namespace p2ptrace::shim {
namespace {

constexpr int kLibraries = static_cast<int>(Library::kCount);
const char* const kLibraryNames[kLibraries] = {"libcudart.so.11.0", "libcudart.so.12", "libcudart.so.13",
                                               "libcuda.so.1",      "libnccl.so",      "libc"};

struct Search {
  const char* soname;  // "libcudart.so.13", "libnccl.so"
  std::string path;
};

bool NameMatches(const char* path, const char* soname) {
  const char* base = std::strrchr(path, '/');
  base = base ? base + 1 : path;
  // libcudart.so.13 and libcudart.so.13.0.96 both count.
  size_t n = std::strlen(soname);
  return std::strncmp(base, soname, n) == 0 && (base[n] == '\0' || base[n] == '.');
}

int FindLoaded(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<Search*>(data);
  if (info->dlpi_name == nullptr || *info->dlpi_name == '\0') return 0;
  bool match = NameMatches(info->dlpi_name, s->soname);
  // Opened by an unversioned link (ctypes.CDLL(".../libcudart.so")): the file it names decides.
  const char* base = std::strrchr(info->dlpi_name, '/');
  if (!match && std::strcmp(base ? base + 1 : info->dlpi_name, "libcudart.so") == 0) {
    char real[PATH_MAX];
    match = realpath(info->dlpi_name, real) != nullptr && NameMatches(real, s->soname);
  }
  if (match) s->path = info->dlpi_name;
  return match ? 1 : 0;
}

// `name` (with `version` for a CUDA node) from the next object in search order, else from the
// loaded library `soname` itself (an RTLD_LOCAL load).
__attribute__((noinline)) void* Lookup(const char* name, const char* version, const char* soname) {
  void* fn = version ? dlvsym(RTLD_NEXT, name, version) : nullptr;
  if (fn == nullptr) fn = dlsym(RTLD_NEXT, name);
  if (fn != nullptr || soname == nullptr) return fn;
  Search s{soname, {}};
  dl_iterate_phdr(FindLoaded, &s);
  if (s.path.empty()) return nullptr;
  void* handle = dlopen(s.path.c_str(), RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) return nullptr;
  fn = version ? dlvsym(handle, name, version) : nullptr;
  if (fn == nullptr) fn = dlsym(handle, name);
  dlclose(handle);  // RTLD_NOLOAD took a reference; the library stays loaded by its owner
  return fn;
}

// Per library: the first function found and where its library was loaded (dladdr's dli_fbase).
struct Anchor {
  std::atomic<const void*> fn{nullptr};
  std::atomic<const void*> base{nullptr};
};
Anchor g_anchors[kLibraries];
std::mutex g_anchor_mu;

void NoteAnchor(Library lib, const void* fn) {
  Anchor& a = g_anchors[static_cast<int>(lib)];
  if (a.fn.load(std::memory_order_acquire) != nullptr) return;
  Dl_info info{};
  if (dladdr(fn, &info) == 0) return;
  std::lock_guard<std::mutex> lock(g_anchor_mu);
  if (a.fn.load(std::memory_order_relaxed) != nullptr) return;
  a.base.store(info.dli_fbase, std::memory_order_relaxed);
  a.fn.store(fn, std::memory_order_release);
}

// Every RealFunction ever found, newest first; entries are never removed (their objects are static).
std::atomic<RealFunction*> g_listed{nullptr};

void LockForFork() { UnloadMutex().lock(); }
void UnlockAfterFork() { UnloadMutex().unlock(); }

}  // namespace

const char* LibraryName(Library lib) { return kLibraryNames[static_cast<int>(lib)]; }

__attribute__((noinline)) void* ResolveReal(const char* name, Library lib) {
  KeepErrno keep;
  void* fn = nullptr;
  switch (lib) {
    case Library::kLibc:
      fn = Lookup(name, nullptr, nullptr);
      break;
    case Library::kNccl: {
      std::string p = std::string("p") + name;
      fn = Lookup(p.c_str(), nullptr, "libnccl.so");
      if (fn == nullptr) fn = Lookup(name, nullptr, "libnccl.so");
      break;
    }
    default:
      fn = Lookup(name, LibraryName(lib), lib == Library::kCudart11 ? "libcudart.so.11" : LibraryName(lib));
  }
  if (fn != nullptr) NoteAnchor(lib, fn);
  return fn;
}

void* RealFunction::Find() {
  void* fn = cached();
  if (fn != nullptr) return fn;
  fn = ResolveReal(name_, lib_);
  if (fn == nullptr) return nullptr;
  if (!listed_.exchange(true, std::memory_order_acq_rel)) {
    next_ = g_listed.load(std::memory_order_relaxed);
    while (!g_listed.compare_exchange_weak(next_, this, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }
  fn_.store(fn, std::memory_order_release);
  return fn;
}

bool LibraryUnloaded(Library lib) {
  const Anchor& a = g_anchors[static_cast<int>(lib)];
  const void* fn = a.fn.load(std::memory_order_acquire);
  if (fn == nullptr) return false;
  Dl_info info{};
  return dladdr(fn, &info) == 0 || info.dli_fbase != a.base.load(std::memory_order_relaxed);
}

void ForgetLibrary(Library lib) {
  for (RealFunction* f = g_listed.load(std::memory_order_acquire); f != nullptr; f = f->next_)
    if (f->lib_ == lib) f->fn_.store(nullptr, std::memory_order_release);
  g_anchors[static_cast<int>(lib)].fn.store(nullptr, std::memory_order_release);
}

std::recursive_mutex& UnloadMutex() {
  static auto* mu = [] {
    auto* m = new std::recursive_mutex();
    pthread_atfork(LockForFork, UnlockAfterFork, UnlockAfterFork);
    return m;
  }();
  return *mu;
}

}  // namespace p2ptrace::shim
