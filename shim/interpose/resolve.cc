// Compiled with -fno-optimize-sibling-calls: glibc's dlsym/dlvsym(RTLD_NEXT) look at their caller's
// address; a tail call would make that ld.so's and crash (notes/interposer.md E8).
#include "shim/interpose/resolve.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <string>

#include "shim/record/trace_dir.h"

namespace p2ptrace::shim {
namespace {

const char* const kNodeNames[] = {"libcudart.so.11.0", "libcudart.so.12", "libcudart.so.13"};

struct Search {
  const char* soname;  // "libcudart.so.13"
  std::string path;
};

int FindLoaded(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<Search*>(data);
  if (info->dlpi_name == nullptr || *info->dlpi_name == '\0') return 0;
  const char* base = std::strrchr(info->dlpi_name, '/');
  base = base ? base + 1 : info->dlpi_name;
  // libcudart.so.13 and libcudart.so.13.0.96 both count.
  size_t n = std::strlen(s->soname);
  if (std::strncmp(base, s->soname, n) == 0 && (base[n] == '\0' || base[n] == '.')) {
    s->path = info->dlpi_name;
    return 1;
  }
  return 0;
}

}  // namespace

const char* NodeName(Node node) { return kNodeNames[static_cast<int>(node)]; }

__attribute__((noinline)) void* ResolveReal(const char* name, Node node) {
  KeepErrno keep;
  const char* version = NodeName(node);
  void* fn = dlvsym(RTLD_NEXT, name, version);
  if (fn == nullptr) fn = dlsym(RTLD_NEXT, name);
  if (fn != nullptr) return fn;
  // RTLD_LOCAL loads: find the runtime of this major among the loaded objects.
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
