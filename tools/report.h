// The merged view of a job's traces (DESIGN.md §7 `report`): every directional GPU pair that
// moved bytes, by which path, how fast, and — for host-staged pairs — why.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/finding.h"
#include "tools/traces.h"

namespace p2ptrace::cli {

struct GpuRef {
  std::string host, bus_id;
  int gpu = -1;  // index among the host's GPUs the traces saw, in PCI order
};

struct Cause {
  std::string id;
  std::vector<std::string> evidence;
  std::string fix;
};

struct PairEntry {
  GpuRef src, dst;
  std::string source = "cuda";             // "cuda": intercepted copies; "nccl": NCCL's own log lines
  std::set<std::string> nccl_transports;   // NCCL's text after "via", verbatim
  int channels = 0;                        // NCCL connections seen for the pair
  int transport = 0;  // p2ptrace_transport
  int expected = 0;   // the best class the node allows for this pair; 0 unknown
  bool fallback = false;
  uint64_t calls = 0, bytes = 0, errors = 0, timed_calls = 0, timed_bytes = 0, timed_ns = 0;
  std::set<int> ranks;
  std::vector<Cause> causes;
  double Gbps() const { return timed_ns ? static_cast<double>(timed_bytes) / static_cast<double>(timed_ns) : -1; }
  // All bytes at the measured rate; -1 when nothing was timed.
  double Seconds() const { return timed_bytes ? static_cast<double>(bytes) * 1e-9 / Gbps() : -1; }
};

// One NCCL operation kind of one communicator, over all its ranks (nccl-tests' algbw/busbw).
struct NcclOpSummary {
  std::string comm;  // FNV hash of the ncclUniqueId, shared by the communicator's ranks
  int nranks = 0;
  std::string op;    // "ncclAllReduce", …
  uint64_t calls = 0, errors = 0, bytes = 0, timed_calls = 0, timed_bytes = 0, timed_ns = 0;
  std::set<int> ranks;
  double AlgBw() const;  // GB/s over the timed calls, nccl-tests' size convention; -1 untimed
  double BusBw() const;
};

struct ProcessInfo {
  int rank = -1, pid = 0;
  std::string host, file, state;  // state: running|exited|fatal signal N
  std::vector<std::string> bus_ids;
  int runtime_version = 0, driver_version = 0;
  uint32_t capture_flags = 0;
  uint64_t dropped_records = 0;
  std::string nccl_log;  // how NCCL's lines reached p2ptrace: tapped | user file | not seen: <why>
};

struct Report {
  std::string path;
  std::vector<ProcessInfo> processes;
  std::vector<PairEntry> pairs;
  std::vector<NcclOpSummary> nccl_ops;
  std::vector<Finding> findings;
  std::vector<std::string> problems;  // files skipped, one line each
  size_t nccl_logs = 0;               // NCCL log files read
};

Report BuildReport(const std::string& path, const LoadedTraces& traces);
std::string RenderText(const Report& report, bool color);
nlohmann::json RenderJson(const Report& report);

}  // namespace p2ptrace::cli
