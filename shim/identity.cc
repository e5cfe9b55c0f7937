#include "shim/identity.h"

#include <charconv>
#include <climits>
#include <cstring>

namespace p2ptrace::shim {
namespace {

bool AsciiAlnum(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// 1..max bytes, each an ASCII letter or digit or one of `extra` (no locale, no control byte).
bool AllOf(std::string_view s, size_t max, const char* extra) {
  if (s.empty() || s.size() > max) return false;
  for (unsigned char c : s)
    if (!AsciiAlnum(c) && (c == '\0' || std::strchr(extra, c) == nullptr)) return false;
  return true;
}

bool ParseLong(std::string_view s, long lo, long hi, long* out) {
  long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

std::string SerializeIdentity(const RankIdentity& id) {
  return "host " + id.host + "\nboot_id " + id.boot_id + "\nshm_dev " + std::to_string(id.shm_dev) + "\nshm_mb " +
         std::to_string(id.shm_mb) + "\nrank " + std::to_string(id.rank) + "\nbus " + id.bus + "\npid " +
         std::to_string(id.pid) + "\ngpu " + std::to_string(id.gpu) + "\n";
}

bool ParseIdentity(std::string_view text, RankIdentity* id) {
  RankIdentity out;
  long v = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) return false;  // whole lines only
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) return false;
    std::string_view k = line.substr(0, sp), val = line.substr(sp + 1);
    bool ok = true;
    if (k == "host") {
      ok = AllOf(val, 255, ".-_");
      out.host = val;
    } else if (k == "boot_id") {
      ok = val.empty() || AllOf(val, 64, "-");
      out.boot_id = val;
    } else if (k == "bus") {
      ok = val.empty() || AllOf(val, 16, ":.");
      out.bus = val;
    } else if (k == "shm_dev" || k == "shm_mb") {
      ok = ParseLong(val, -1, LONG_MAX, k == "shm_dev" ? &out.shm_dev : &out.shm_mb);
    } else if (k == "rank" || k == "pid" || k == "gpu") {
      ok = ParseLong(val, k == "pid" ? 1 : -1, INT_MAX, &v);
      (k == "rank" ? out.rank : k == "pid" ? out.pid : out.gpu) = static_cast<int>(v);
    }
    if (!ok) return false;
  }
  if (out.pid <= 0 || out.host.empty()) return false;
  *id = std::move(out);
  return true;
}

}  // namespace p2ptrace::shim
