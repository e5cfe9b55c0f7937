// `doctor --test --baseline FILE`: a previous `doctor --test --json` of a good node of the same
// kind, read as the bar each pair is held to (core/pair_verdict.h RegressionOf). Only pairs that
// passed there, or were as the node's design has them, set a bar.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "core/pair_verdict.h"

namespace p2ptrace::cli {

struct Baseline {
  std::map<std::pair<int, int>, PairBaseline> pairs;  // (src, dst) GPU index
  std::map<int, std::string> models;                  // GPU index -> model, when the file names them
};

// `text` as such a file (`name` for messages); false with why when it is not one.
bool ParseBaseline(std::string_view text, const std::string& name, Baseline* out, std::string* why);
// The file read (a regular file, at most 64 MiB) and parsed.
bool LoadBaseline(const std::string& file, Baseline* out, std::string* why);

}  // namespace p2ptrace::cli
