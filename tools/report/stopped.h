// The "stopped" finding (DESIGN.md §7): when a job hung or died, which rank stopped first, what it
// was doing, which ranks wait for it in which operation, and where ranks of one communicator
// disagree. Built from what the shim records for it (trace minor 10): every NCCL operation when
// called (its result pending until it returns), the watchdog's heartbeat and NCCL_PROGRESS records,
// fatal signals and NCCL's errors. Operations are numbered per communicator in call order, as
// NCCL and PyTorch's Flight Recorder count them: collectives apart from sends and receives.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/trace_reader.h"
#include "tools/common/finding.h"

namespace p2ptrace::cli {

// One NCCL operation as the finding shows it.
struct StoppedOp {
  uint64_t seq = 0;   // its number among its communicator's collectives (or sends and receives)
  bool p2p = false;   // a send or receive (numbered apart)
  int api = 0;        // p2ptrace_nccl_api
  uint64_t bytes = 0;
  int datatype = -1;  // ncclDataType_t; -1 unknown
  int peer = -1;      // send/recv peer, broadcast/reduce root
  // "in the call" (it never returned), "on the GPU" (returned, not seen finished), "finished"
  // (the watchdog saw its stream pass it), "returned" (no watchdog view), "failed N (name)".
  std::string state;
  uint64_t called_realtime_ns = 0;
  std::string Text() const;  // "ncclAllReduce #57 (16.0 MiB float32)"
};

// One collective as a rank called it, for the arrival comparison (tools/report/arrival.h).
struct CalledCollective {
  uint64_t called_ns = 0;   // when it was called: the process's CLOCK_MONOTONIC
  uint64_t bytes = 0;
  uint8_t api = 0, datatype = 0;  // p2ptrace_nccl_api; ncclDataType_t + 1 (0 unknown)
};

// One process's view of one communicator.
struct StoppedMember {
  size_t process = 0;  // index into StoppedFinding::processes
  int rank = -1;       // in the communicator
  uint64_t collectives = 0, p2p = 0;  // operations called
  std::vector<StoppedOp> last;        // its newest operations, oldest first (a few)
  // When it called the communicator's first collective (wall clock, by its host): the ranks call it
  // together, right after their init returned together, so hosts' clocks are compared on it.
  uint64_t first_called_realtime_ns = 0;
  // Its newest collectives (at most StoppedFold::kWindow), oldest first: when each was called; the
  // first is number `first_called`, the others follow without a gap.
  std::vector<CalledCollective> called;
  uint64_t first_called = 0;
};

struct StoppedComm {
  std::string id;  // as the report names communicators: the first 8 hex digits of its hash
  int nranks = -1;
  std::vector<StoppedMember> members;
  std::vector<std::string> mismatches;  // "#57: rank 3 called ncclBroadcast (4 MiB) where 0-2 called …"
  std::string waits;                    // "ranks 0, 1, 3 wait in ncclAllReduce #57; rank 2 never called it (its last: #56)"
  // The first mismatch's odd ones out: the ranks whose operation fewer ranks called (none on a tie),
  // and what they called against what the others did.
  std::vector<int> odd_ranks;
  std::string odd_text;
};

struct StoppedProcess {
  std::string host, job_id, file;
  int pid = 0, rank = -1;
  // How it ended: "exited", "fatal signal SIGSEGV", "no heartbeat since …" (stopped, killed or
  // stuck), "running" (beating at the end of the traces), "ended without exit" (no watchdog).
  std::string life;
  bool exited = false;               // it called exit (or returned from main)
  int exit_status = 0;               // exit's status, when exited and known
  bool beating = false;              // its heartbeat is as recent as the job's newest (or, on this machine, now)
  // On this machine (its boot id is ours) and not exited: what /proc says now. kNotHere otherwise.
  enum class Here { kNotHere, kBeating, kStopped, kStuck, kGone } here = Here::kNotHere;
  uint64_t last_sign_realtime_ns = 0;  // its last heartbeat, or its last record
  std::vector<std::string> nccl_errors;  // "ncclCommGetAsyncError: 6 (ncclRemoteError)"
  std::string pending_init;              // "ncclCommInitRank (rank 3 of 4) entered …, never returned"
  bool incomplete = false;               // trace cut short or records dropped: its counts may be low
  // Its host's boot id, and the distance from its CLOCK_MONOTONIC to the wall clock (its start
  // anchors, corrected with its host's clock): processes of one boot share a monotonic clock and are
  // compared on it, exactly.
  std::string boot_id;
  int64_t realtime_minus_monotonic_ns = 0;
};

struct StoppedFinding {
  bool present = false;  // some process did not exit, or an operation did not finish
  std::string verdict;   // one sentence: who stopped first and how, or why that cannot be said
  int first_process = -1;  // index into processes; -1 when none can be named
  std::string first_doing;   // what it was doing: its last operation per communicator
  std::vector<std::string> pair_notes;  // the pair(s) of that operation: path and causes
  std::vector<std::string> pairs;       // the same pairs' GPUs, as findings name pairs
  std::vector<std::string> notes;       // clock skew, mixed jobs, truncated traces …
  std::vector<StoppedProcess> processes;
  std::vector<StoppedComm> comms;
};

// One trace's records, then the trace itself (as ReportBuilder streams them).
class StoppedFold {
 public:
  // The collectives each member keeps for the arrival comparison: the newest, 24 bytes each.
  static constexpr size_t kWindow = 1024;
  void Add(const TraceRecord& r);
  StoppedProcess Finish(const Trace& t, std::map<std::string, StoppedComm>* comms, size_t process_index);

 private:
  struct Op {
    uint64_t time = 0, stream = 0, bytes = 0;
    int32_t result = 0, peer = -1;
    uint8_t api = 0, datatype = 0;
  };
  struct Comm {
    uint64_t collectives = 0, p2p = 0;
    std::vector<Op> last;  // newest by time, at most kKeep
    uint64_t first_collective = UINT64_MAX;  // the earliest collective's time
    // Collectives, unordered, trimmed to the newest kWindow whenever they reach twice that.
    std::vector<CalledCollective> window;
  };
  static constexpr size_t kKeep = 6;
  std::map<uint64_t, Comm> ops_;  // by ncclComm_t
  struct Info {
    uint64_t hash = 0;
    int rank = -1, nranks = -1;
  };
  std::map<uint64_t, Info> comms_;
  std::map<uint64_t, uint64_t> done_through_;  // stream → newest DONE
  std::vector<std::string> errors_;
  std::string pending_init_;
  uint64_t pending_init_time_ = 0, last_record_ns_ = 0;
};

// What `report` needs of the pairs to describe an operation's pair (filled by the report).
struct PairPath {
  std::string comm;  // 8 hex digits
  int src_rank = -1, dst_rank = -1;
  std::string text;  // "GPU3 -> GPU4 over shm (host-staged): acs-redirect …"
  std::string gpus;  // "node0 GPU3 -> GPU4", as findings name pairs; "" when the ranks' GPUs are unknown
  // Its causes include one known to make peer transfers hang (ACS or the IOMMU redirecting them
  // through the root complex, a driver regkey or NVML status refusing P2P, a degraded link): how
  // strongly, 0 none (ACS redirect highest, then a suspected one, NVML's status, degraded, IOMMU, VM).
  int hang_risk = 0;
};

// All processes in: compares them. `paths`: the pairs NCCL connected, for the pair notes; an
// operation still open stall_seconds after its call (by its process's last sign of life) is stuck.
void FinishStopped(StoppedFinding* f, std::map<std::string, StoppedComm> comms, const std::vector<PairPath>& paths,
                   double stall_seconds);

// The same, as one of the report's findings (JSON `findings`, where scripts look): the verdict and
// where the others wait as its title, the first rank's pairs, what it was doing as evidence, and
// what to do about how it stopped.
Finding StoppedAsFinding(const StoppedFinding& f);

}  // namespace p2ptrace::cli
