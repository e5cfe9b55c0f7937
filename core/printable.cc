#include "core/printable.h"

#include <cstdint>

namespace p2ptrace {
namespace {

// The length of the well-formed UTF-8 sequence at s[i], or 0 when the byte there starts none.
size_t SequenceLength(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  uint8_t b = at(i);
  if (b < 0x80) return 1;
  size_t n;
  uint8_t lo = 0x80, hi = 0xbf;  // the second byte's range; narrower after E0, ED, F0, F4
  if (b >= 0xc2 && b <= 0xdf) n = 2;
  else if (b >= 0xe0 && b <= 0xef) {
    n = 3;
    if (b == 0xe0) lo = 0xa0;       // overlong
    else if (b == 0xed) hi = 0x9f;  // surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    n = 4;
    if (b == 0xf0) lo = 0x90;       // overlong
    else if (b == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;  // a continuation byte, C0/C1 (overlong), F5-FF
  }
  if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  return n;
}

void AppendHex(uint8_t b, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  *out += "\\x";
  *out += kHex[b >> 4];
  *out += kHex[b & 0xf];
}

bool IsControl(std::string_view s, size_t i, size_t n, bool keep_newlines) {
  uint8_t b = static_cast<uint8_t>(s[i]);
  if (n == 1) return (b < 0x20 && !(keep_newlines && b == '\n')) || b == 0x7f;
  return n == 2 && b == 0xc2 && static_cast<uint8_t>(s[i + 1]) < 0xa0;  // C1: U+0080-U+009F
}

std::string Escape(std::string_view s, bool controls, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = SequenceLength(s, i);
    if (n == 0 || (controls && IsControl(s, i, n, keep_newlines))) {
      for (size_t k = 0; k < (n ? n : 1); ++k) AppendHex(static_cast<uint8_t>(s[i + k]), &out);
      i += n ? n : 1;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

bool IsUtf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    size_t n = SequenceLength(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ValidUtf8(std::string_view bytes) {
  if (IsUtf8(bytes)) return std::string(bytes);
  return Escape(bytes, false, true);
}

std::string Printable(std::string_view bytes, bool keep_newlines) { return Escape(bytes, true, keep_newlines); }

}  // namespace p2ptrace
