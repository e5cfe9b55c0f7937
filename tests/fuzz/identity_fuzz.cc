// libFuzzer target: the identity files ranks exchange (shim/identity.h) on arbitrary bytes: no
// crash, no overread; an accepted file holds only printable ASCII in its text fields and serializes
// back to text that parses to the same identity.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shim/identity.h"

namespace {
bool Printable(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  p2ptrace::shim::RankIdentity id;
  if (!p2ptrace::shim::ParseIdentity(std::string_view(reinterpret_cast<const char*>(data), size), &id)) return 0;
  if (!Printable(id.host) || (!id.bus.empty() && !Printable(id.bus)) || (!id.boot_id.empty() && !Printable(id.boot_id)))
    __builtin_trap();
  p2ptrace::shim::RankIdentity again;
  if (!p2ptrace::shim::ParseIdentity(p2ptrace::shim::SerializeIdentity(id), &again) || again.host != id.host ||
      again.bus != id.bus || again.boot_id != id.boot_id || again.pid != id.pid || again.rank != id.rank ||
      again.gpu != id.gpu || again.shm_dev != id.shm_dev || again.shm_mb != id.shm_mb)
    __builtin_trap();
  return 0;
}
