#include "shim/base/environment.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

extern char** environ;

namespace p2ptrace::shim {
namespace {

std::mutex g_mu;

// The array the shim published last (with room to grow) and its room, in pointers after the
// terminator's slot. glibc may still change it in place (a program's setenv of a variable already
// there, its unsetenv), so its length is counted each time, never remembered.
char** g_own = nullptr;
size_t g_capacity = 0;  // slots, terminator included

bool Named(const char* entry, const char* name, size_t n) { return std::strncmp(entry, name, n) == 0 && entry[n] == '='; }

// "NAME=VALUE" strings the shim made, each kept for the process's life and handed out again for the
// same text: a job that re-creates its communicators for days switches between a few values.
constexpr size_t kInterned = 64;
char* g_interned[kInterned];
size_t g_interned_count = 0;

char* Entry(const char* name, const char* value) {  // g_mu held
  size_t n = std::strlen(name), v = std::strlen(value);
  for (size_t i = 0; i < g_interned_count; ++i)
    if (Named(g_interned[i], name, n) && std::strcmp(g_interned[i] + n + 1, value) == 0) return g_interned[i];
  auto* entry = static_cast<char*>(std::malloc(n + v + 2));
  if (entry == nullptr) return nullptr;
  std::memcpy(entry, name, n);
  entry[n] = '=';
  std::memcpy(entry + n + 1, value, v + 1);
  if (g_interned_count < kInterned) g_interned[g_interned_count++] = entry;
  return entry;
}

void Store(char** slot, char* value) { __atomic_store_n(slot, value, __ATOMIC_RELEASE); }

// `environ` without `name`, plus `added` when not null, as a new array with room to grow, published
// whole; the old array is left alone (a getenv may be walking it).
bool Publish(const char* name, char* added) {
  size_t n = std::strlen(name), count = 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) ++count;
  size_t capacity = count + 2 + 16;
  auto** fresh = static_cast<char**>(std::calloc(capacity, sizeof(char*)));
  if (fresh == nullptr) return false;
  size_t at = 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (!Named(*e, name, n)) fresh[at++] = *e;
  if (added != nullptr) fresh[at++] = added;
  __atomic_store_n(&environ, fresh, __ATOMIC_RELEASE);  // never freed: a getenv may be walking the old one
  g_own = fresh;
  g_capacity = capacity;
  return true;
}

// The change made in the shim's own array where that needs no variable to move (a concurrent getenv
// then sees the environment either before or after it, never one that lacks another variable):
// a value replaced in its slot, a variable added after the last, the last one taken off. False
// when it cannot be done in place.
bool InPlace(const char* name, char* added) {
  if (environ == nullptr || environ != g_own) return false;
  size_t n = std::strlen(name), count = 0, at = SIZE_MAX;
  for (char** e = environ; *e != nullptr; ++e, ++count)
    if (at == SIZE_MAX && Named(*e, name, n)) at = count;
  if (added != nullptr && at != SIZE_MAX) {
    Store(&environ[at], added);
    return true;
  }
  if (added != nullptr) {
    if (count + 2 > g_capacity) return false;
    Store(&environ[count + 1], nullptr);
    Store(&environ[count], added);
    return true;
  }
  if (at + 1 != count) return false;
  Store(&environ[at], nullptr);
  return true;
}

}  // namespace

bool SetEnvironment(const char* name, const char* value) {
  std::lock_guard<std::mutex> lock(g_mu);
  char* entry = Entry(name, value);
  return entry != nullptr && (InPlace(name, entry) || Publish(name, entry));
}

bool UnsetEnvironment(const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (std::getenv(name) == nullptr) return true;  // nothing to take out: environ stays as it is
  return InPlace(name, nullptr) || Publish(name, nullptr);
}

}  // namespace p2ptrace::shim
