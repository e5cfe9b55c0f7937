// Compiled with -fno-optimize-sibling-calls: glibc's dlsym/dlvsym(RTLD_NEXT) look at their caller's
// address to pick the object to search after; a tail call would make that ld.so's and crash (seen
// with glibc 2.36).
#include "shim/interpose/resolve.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shim/record/trace_dir.h"

namespace p2ptrace::shim {
namespace {

const char* const kNodeNames[] = {"libcudart.so.11.0", "libcudart.so.12", "libcudart.so.13", "libcuda.so.1"};

struct Search {
  const char* soname;  // "libcudart.so.13"
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

}  // namespace

const char* NodeName(Node node) { return kNodeNames[static_cast<int>(node)]; }

__attribute__((noinline)) void* ResolveReal(const char* name, Node node) {
  KeepErrno keep;
  const char* version = NodeName(node);
  void* fn = dlvsym(RTLD_NEXT, name, version);
  if (fn == nullptr) fn = dlsym(RTLD_NEXT, name);
  if (fn != nullptr) return fn;
  // RTLD_LOCAL loads: find the runtime of this major (or the driver) among the loaded objects.
  Search s{node == Node::kCudart11 ? "libcudart.so.11" : version, {}};
  dl_iterate_phdr(FindLoaded, &s);
  if (s.path.empty()) return nullptr;
  void* handle = dlopen(s.path.c_str(), RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) return nullptr;
  fn = dlvsym(handle, name, version);
  if (fn == nullptr) fn = dlsym(handle, name);
  dlclose(handle);  // RTLD_NOLOAD took a reference; the library stays loaded by its owner
  return fn;
}

}  // namespace p2ptrace::shim
