// What a test's job left in its trace directory, read back: the traces by rank, and their pair
// counters as lines a test can compare whole.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/trace_reader.h"

namespace p2ptrace::testing {

// Every *.p2ptrace file of `dir`, by rank (an unreadable one is a test failure).
inline std::vector<Trace> ReadTraceDir(const std::string& dir) {
  std::vector<Trace> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".p2ptrace") continue;
    auto t = ReadTrace(e.path().string());
    if (!t.ok()) ADD_FAILURE() << t.error().message;
    else out.push_back(std::move(t.value()));
  }
  std::sort(out.begin(), out.end(), [](const Trace& a, const Trace& b) { return a.header.rank < b.header.rank; });
  return out;
}

// Every counter cell with calls or errors among devices 0-7: "src->dst/path calls bytes errors".
inline std::vector<std::string> CounterCells(const Trace& t) {
  std::vector<std::string> cells;
  for (int s = 0; s < 8; ++s)
    for (int d = 0; d < 8; ++d)
      for (int p = 0; p < 2; ++p)
        if (const auto& c = t.Counter(s, d, p); c.calls != 0 || c.errors != 0)
          cells.push_back(std::to_string(s) + "->" + std::to_string(d) + "/" + std::to_string(p) + " " +
                          std::to_string(c.calls) + " " + std::to_string(c.bytes) + " " + std::to_string(c.errors));
  return cells;
}

}  // namespace p2ptrace::testing
