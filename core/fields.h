// The small text rules the line-oriented records share (the preflight block, warning lines): split
// on a separator, keep a value on its line, read a whole integer.
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

namespace p2ptrace {

// The non-empty pieces of `s` between separators.
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      if (i > start) out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// A value with its tabs, line breaks and unit separators made spaces: it stays one field of one line.
inline std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r' || c == '\x1f') c = ' ';
  return s;
}

// The whole of `s` as an int, else `fallback`.
inline int ToInt(std::string_view s, int fallback) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() ? v : fallback;
}

}  // namespace p2ptrace
