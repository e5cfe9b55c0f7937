// `p2ptrace export DIR --perfetto OUT`: the job as Chrome trace-event JSON, which Perfetto UI (and
// chrome://tracing) opens. A process per rank, named with host, rank and GPU (a process that drives
// several GPUs gets one per rank: its ranks in its largest communicator); a track per peer pair
// holding async slices (b/e) for every timed copy and every NCCL call (zero-length when untimed); flows from each ncclSend to
// the matching ncclRecv on the peer; GB/s counters per pair; and a "p2ptrace job" process whose
// instant events carry the pair matrix per host and the findings with their causes and fixes.
// Timestamps are µs since the first process started, on the wall clock (each host's monotonic
// clock is mapped through the realtime/monotonic pair its traces recorded at start).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>
#include <ostream>
#include <string>

#include "tools/report/report.h"
#include "tools/report/traces.h"

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

// Pass 1 of the export: what it must know of every file before writing any slice (how many
// events, for the stride; each send/recv direction's calls, for the flows; the first start).
// Fed one trace at a time, as the report reads it (StreamOptions' hooks); memory is one file's
// timed copies plus one entry per send/recv direction.
class ExportCounts {
 public:
  void Add(const TraceRecord& record);
  void EndTrace(const Trace& trace);
  void Abandon();  // the file being read failed half-way: forget it

  uint64_t events = 0;  // timed copies and NCCL calls (as ExportStats::events)
  uint64_t t0 = UINT64_MAX;  // the first process's start, wall clock
  struct LinkOps {
    uint64_t sends = 0, recvs = 0;  // the k-th send pairs with the k-th recv
    uint64_t first_flow_id = 0;
  };
  std::map<std::tuple<uint64_t, int, int>, LinkOps> links;  // (comm hash, sender, receiver)

  // A process's communicator: the job-wide identity and this process's rank in it.
  struct CommView {
    uint64_t hash = 0;
    int rank = -1, nranks = 0, device = -1;
  };

 private:
  std::map<uint64_t, CommView> file_comms_;
  std::map<std::tuple<uint64_t, int, int>, uint64_t> file_p2p_;  // (comm pointer, api, peer) -> calls
  std::vector<uint32_t> copy_seqs_, timed_seqs_;
};

// Writes the trace from the report and pass 1's counts, reading each process's file again (twice).
ExportStats WritePerfetto(const Report& report, ExportCounts& counts, const ExportOptions& options, std::ostream& out,
                          std::ostream& err, const std::function<void(size_t, size_t)>& progress = {});

}  // namespace p2ptrace::cli
