#include "shim/base/environment.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

extern char** environ;

namespace p2ptrace::shim {
namespace {

std::mutex g_mu;

bool Named(const char* entry, const char* name, size_t n) { return std::strncmp(entry, name, n) == 0 && entry[n] == '='; }

// `environ` without `name`, plus `added` when not null; published whole, the old array left alone.
bool Publish(const char* name, char* added) {
  size_t n = std::strlen(name), count = 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) ++count;
  auto** fresh = static_cast<char**>(std::malloc((count + 2) * sizeof(char*)));
  if (fresh == nullptr) return false;
  size_t at = 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (!Named(*e, name, n)) fresh[at++] = *e;
  if (added != nullptr) fresh[at++] = added;
  fresh[at] = nullptr;
  __atomic_store_n(&environ, fresh, __ATOMIC_RELEASE);  // never freed: a getenv may be walking the old one
  return true;
}

}  // namespace

bool SetEnvironment(const char* name, const char* value) {
  size_t n = std::strlen(name), v = std::strlen(value);
  auto* entry = static_cast<char*>(std::malloc(n + v + 2));
  if (entry == nullptr) return false;
  std::memcpy(entry, name, n);
  entry[n] = '=';
  std::memcpy(entry + n + 1, value, v + 1);
  std::lock_guard<std::mutex> lock(g_mu);
  if (Publish(name, entry)) return true;
  std::free(entry);
  return false;
}

bool UnsetEnvironment(const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (std::getenv(name) == nullptr) return true;  // nothing to take out: environ stays as it is
  return Publish(name, nullptr);
}

}  // namespace p2ptrace::shim
