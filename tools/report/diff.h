// `p2ptrace diff A B [--json]`: what changed between two runs' reports — pairs whose transport
// class changed or whose GB/s moved by more than 20%, pairs that appeared or vanished, causes that
// appeared or vanished, NCCL operations whose bus bandwidth moved, call sites whose host-staged
// bytes appeared or grew. "Worse" (exit 1, for gating a node's acceptance in CI) is a pair on a
// worse class, newly falling back, or 20% slower, or a call site that newly stages through the host.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/report/report.h"

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

// A call site (P2PTRACE_STACKS) that stages more bytes through host memory in B than in A; sites
// are matched across runs by their frames' text (module offsets: the same binary gives the same).
struct SiteDiff {
  std::vector<std::string> frames;  // innermost first
  int id_after = 0;                 // its number in B's report
  std::string change;  // "appeared" (staged nothing in A, or was not there), "grew" (> 20% more)
  uint64_t host_staged_before = 0, host_staged_after = 0, bytes_before = 0, bytes_after = 0;
  bool worse = false;  // "appeared": a site that kept its traffic on GPU paths now goes through the host
};

struct DiffResult {
  std::string a, b;
  std::vector<PairDiff> pairs;
  std::vector<PairDiff> nccl_ops;  // pair = "ncclAllReduce (8 ranks)", gbps = busbw
  std::vector<SiteDiff> call_sites;  // most host-staged bytes in B first
  std::vector<std::string> causes_appeared, causes_vanished;  // job-wide finding ids
  bool Worse() const;
};

// Fraction of GB/s change that counts as a move (0.2: 20%).
inline constexpr double kBandwidthThreshold = 0.2;

DiffResult DiffReports(const Report& a, const Report& b);
std::string RenderDiffText(const DiffResult& diff);
nlohmann::json RenderDiffJson(const DiffResult& diff);

}  // namespace p2ptrace::cli
