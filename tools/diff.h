// `p2ptrace diff A B [--json]`: what changed between two runs' reports — pairs whose transport
// class changed or whose GB/s moved by more than 20%, pairs that appeared or vanished, causes that
// appeared or vanished, NCCL operations whose bus bandwidth moved. "Worse" (exit 1, for gating a
// node's acceptance in CI) is a pair on a worse class, newly falling back, or 20% slower.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/report.h"

namespace p2ptrace::cli {

struct PairDiff {
  std::string pair;      // "node0 GPU0 -> GPU1 (cuda)"
  std::string change;    // "class", "bandwidth", "new", "gone"
  std::string before, after;  // classes ("nvlink+host_staged"), "" when absent
  double gbps_before = -1, gbps_after = -1;  // -1: not timed
  bool fallback_before = false, fallback_after = false;
  std::vector<std::string> causes_appeared, causes_vanished;
  bool worse = false;
};

struct DiffResult {
  std::string a, b;
  std::vector<PairDiff> pairs;
  std::vector<PairDiff> nccl_ops;  // pair = "ncclAllReduce (8 ranks)", gbps = busbw
  std::vector<std::string> causes_appeared, causes_vanished;  // job-wide finding ids
  bool Worse() const;
};

// Fraction of GB/s change that counts as a move (0.2: 20%).
inline constexpr double kBandwidthThreshold = 0.2;

// The `diff` command: exit 1 when a pair or NCCL operation got worse, 0 otherwise, 2 when either
// run has no usable trace.
int RunDiff(const std::string& a, const std::string& b, bool json, std::ostream& out, std::ostream& err,
            bool err_is_tty = false);

DiffResult DiffReports(const Report& a, const Report& b);
std::string RenderDiffText(const DiffResult& diff);
nlohmann::json RenderDiffJson(const DiffResult& diff);

}  // namespace p2ptrace::cli
