// The slow-rank finding (DESIGN.md §7): the rank that makes every step wait, or the hop that slows a
// ring. Durations cannot tell it (a collective equalises every rank's step); arrival order can. Each
// NCCL collective's call time is recorded on every rank (never sampled), so the collectives of one
// communicator are matched across ranks by number (StoppedFold numbers them, the newest
// StoppedFold::kWindow are compared) and the rank that called last, how late and what the others
// waited is counted. Where every rank arrives on time, a ring bounded by one of its pairs (a slower
// class, a host-staged hop where the node allows P2P, a link with errors) is named with its transport
// and cause.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/common/finding.h"
#include "tools/report/stopped.h"

namespace p2ptrace::cli {

struct Report;

// One communicator's collectives compared across its ranks.
struct CommArrivals {
  std::string id;  // as StoppedComm::id: 8 hex digits of the communicator's hash
  int nranks = 0;
  uint64_t compared = 0;    // collectives every rank called (within each one's window) and agreed on
  uint64_t mismatched = 0;  // collectives whose ranks called different operations or sizes: left out
  // The clock the ranks were compared on: "CLOCK_MONOTONIC of one boot" (exact), or "wall clocks of
  // N hosts" (each host's own; an offset between them reads as lateness).
  std::string clock;
  bool across_hosts = false;
  std::vector<uint64_t> last_by_rank;  // how often each rank (by index) called last
  double skew_median_ms = -1, skew_p90_ms = -1;  // last call minus first call, per collective
  double wait_rank_seconds = 0;  // summed over collectives: every rank's distance to the last call
  // Arrival lag of every rank per compared collective (ms behind the first caller), oldest first,
  // with the first call's wall-clock time: the Perfetto track. Only for the finding's communicator.
  struct Point {
    uint64_t first_realtime_ns = 0;
    std::vector<float> lag_ms;  // as series_ranks
  };
  std::vector<Point> series;
  std::vector<int> series_ranks;  // every rank, or the first 63 and the late one
};

struct SlowRankFinding {
  bool present = false;
  // "late-rank": it calls late, its hops at their expected rate (its compute, input or host);
  // "slow-hop": every rank arrives on time but a ring it is in runs at one pair's pace;
  // "host-staged-hop": that pair goes through host memory where the node allows P2P.
  std::string kind;
  std::string verdict;  // one sentence
  std::string comm;     // the communicator (8 hex digits); "" when a hop's ring names none
  int nranks = 0;
  int rank = -1;        // the late rank, or the rank that sends over the slow hop; -1 unknown
  std::string host, gpu;  // where that rank ran ("GPU2"); "" unknown
  int pid = 0;
  // Late rank: of `compared` collectives it called last in `last`; how late (its call minus the
  // others' median call, ms); per step (a step: the repeating sequence of `step_collectives`
  // collectives, 0 when none repeats) and over the compared collectives, the others' waiting for it.
  uint64_t compared = 0, last = 0;
  double late_median_ms = -1, late_p90_ms = -1;
  double wait_share = -1;  // the share of the ranks' waiting its margin makes, in the median collective compared
  int step_collectives = 0;
  uint64_t steps = 0;
  double wait_per_step_ms = -1, wait_seconds = -1;  // summed over the other ranks
  // Slow hop: the pair ("node0 GPU1 -> GPU2"), its transport, its causes, the rings it bounds and
  // their measured pace against the pair's class.
  std::string pair, transport;
  std::vector<std::string> causes;
  int rings = 0;
  double ring_gbps = -1, class_gbps_low = 0;
  std::vector<std::string> evidence;
  std::string fix;
  std::vector<std::string> notes;  // other communicators, clocks, what could not be compared
  std::vector<CommArrivals> comms;  // every communicator compared, the finding's first
};

// After the rings (NcclFold::FinishRings) and the stopped finding (FinishStopped: its communicators,
// its processes with their hosts' clocks corrected).
SlowRankFinding FindSlowRank(const std::vector<StoppedComm>& comms, const std::vector<StoppedProcess>& processes,
                             const Report& report);

// The same, as one of the report's findings: id "slow-rank", its kind as the cause.
Finding SlowRankAsFinding(const SlowRankFinding& f);

}  // namespace p2ptrace::cli
