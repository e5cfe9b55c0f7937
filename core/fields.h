// The small text rules the line-oriented records share (the preflight block, the link readings,
// warning lines): split on a separator, keep a value on its line, read a whole integer, find a
// versioned block's records.
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

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

// A record's fields between tabs, empty ones kept (a record may leave a field empty).
inline std::vector<std::string_view> TabFields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i)
    if (i == line.size() || line[i] == '\t') {
      out.push_back(line.substr(start, i - start));
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

// The non-empty lines after a block's first line, which must be `name`, a space and version 1
// ("p2ptrace-links 1"); else an error naming the block as `what` ("link reading").
inline Expected<std::vector<std::string_view>> VersionOneRecords(std::string_view text, std::string_view name,
                                                                 std::string_view what) {
  if (text.substr(0, name.size()) != name || text.substr(name.size(), 1) != " ")
    return Error{"not a p2ptrace " + std::string(what) + " (no '" + std::string(name) + "' line)"};
  size_t nl = text.find('\n');
  size_t from = name.size() + 1;
  int version = ToInt(text.substr(from, nl == std::string_view::npos ? std::string_view::npos : nl - from), -1);
  if (version != 1) return Error{std::string(what) + " version is not 1"};
  return Split(nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1), '\n');
}

}  // namespace p2ptrace
