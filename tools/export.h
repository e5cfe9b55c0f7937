// `p2ptrace export DIR --perfetto OUT`: the job as Chrome trace-event JSON, which Perfetto UI (and
// chrome://tracing) opens. A process per rank, named with host, rank and GPU; a track per peer pair
// holding async slices (b/e) for every timed copy and every NCCL call (zero-length when untimed); flows from each ncclSend to
// the matching ncclRecv on the peer; GB/s counters per pair; and a "p2ptrace job" process whose
// instant events carry the pair matrix per host and the findings with their causes and fixes.
// Timestamps are µs since the first process started, on the wall clock (each host's monotonic
// clock is mapped through the realtime/monotonic pair its traces recorded at start).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "tools/report.h"
#include "tools/traces.h"

namespace p2ptrace::cli {

struct ExportOptions {
  // Slices at most: past it every k-th slice of each track is kept (the same k on both ends of a
  // send/recv pair, so flows stay matched), and the job process says so.
  uint64_t max_slices = 250000;
};

struct ExportStats {
  uint64_t slices = 0, flows = 0, counters = 0;
  uint64_t events = 0;  // timed copies and NCCL calls: what would get a slice without thinning
  uint64_t stride = 1;  // 1: every timed event has its slice
};

// The `export` command: loads DIR, writes OUT; exit 0, or 2 with one line per problem on `err`.
int RunExport(const std::string& dir, const std::string& out_file, const ExportOptions& options, std::ostream& err);

ExportStats WritePerfetto(const Report& report, const LoadedTraces& loaded, const ExportOptions& options,
                          std::ostream& out);

}  // namespace p2ptrace::cli
