// One trace's records folded as they are decoded (ReadTrace's visitor hands them over one at a
// time), so that no record is kept: what the report needs of a process — its device pairs' peer
// facts, communicators, NCCL operations with their timings, call sites — in memory that grows with
// pairs, communicators and operations in flight, never with events.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/trace_reader.h"

namespace p2ptrace::cli {

// What one process knew about one of its device pairs.
struct PeerFacts {
  int can_access = -1;          // last cudaDeviceCanAccessPeer answer, -1 never asked
  bool enabled_ever = false;    // a successful (or 704) enable from either side
  std::vector<std::string> failed_enables;
};

struct TraceFold {
  // An operation's TIMING record measures it alone only outside a group. Inside ncclGroupStart …
  // ncclGroupEnd the shim times the group, one event pair per stream, and every operation of that
  // stream shares its seq (trace_format.h): the duration is then the group's, counted once for the
  // operations of one kind in it, and a send's pair gets it only when the group sent to that peer
  // alone; otherwise no rate of the pair can be told from it (`shared_calls`).
  struct Ops {
    uint64_t calls = 0, errors = 0, bytes = 0, timed_calls = 0, timed_bytes = 0, timed_ns = 0;
    uint64_t group_calls = 0;   // of timed_calls: timed as their group's (the group's duration, its bytes)
    uint64_t shared_calls = 0;  // timed only with other peers (a group that sent to several, an alltoall/gather/scatter): no per-pair time
    uint64_t timings = 0;       // durations measured (a group's calls of one kind share one)
    uint64_t graph_calls = 0, graph_bytes = 0;  // of calls and bytes: replays of captured operations
  };
  struct Pending {  // a timed NCCL operation whose TIMING record has not come yet
    uint64_t comm;
    int api, peer;
    uint64_t bytes;
  };
  std::map<std::pair<int, int>, PeerFacts> facts;               // per unordered device pair
  // Successful copy records per (src, dst, path: 0 direct, 1 host-staged) and API (p2ptrace_api):
  // calls, bytes, graph replays of captured copies included (under the API that captured them).
  // Which API moved a pair's bytes (the runtime's or the driver's); the counters stay the totals
  // (records can be dropped, counters cannot).
  std::map<std::tuple<int, int, int>, std::map<int, std::pair<uint64_t, uint64_t>>> copy_apis;
  struct CommSeen {
    uint64_t id_hash = 0;
    int nranks = 0, rank = -1, device = -1;
  };
  std::unordered_map<uint64_t, CommSeen> comm;  // comm pointer -> what its init said
  std::map<std::pair<uint64_t, int>, Ops> ops;                  // (comm pointer, api)
  // (comm pointer, peer): what this rank sent that peer point to point: ncclSend, and its blocks of
  // AlltoAll, Gather and Scatter (AddFanOut).
  std::map<std::pair<uint64_t, int>, Ops> sends;
  // A timed operation outside a group has a seq of its own; its timing may come before or after it
  // in the file (the resolver thread writes TIMING records into its own chunk). Flat tables: one
  // entry per timed operation of the file, and no allocation per record.
  absl::flat_hash_map<uint32_t, Pending> pending;            // op seq -> awaiting its timing
  std::unordered_multimap<uint32_t, Pending> pending_more;   // another op with a seq already pending (a damaged file)
  absl::flat_hash_map<uint32_t, uint64_t> timings;           // seq -> measured duration, as read
  // Timed groups by their seq (one per stream and group): which operations, and the duration once
  // read. Applied in Finish, when every operation of each group has been read.
  struct Group {
    std::vector<Pending> ops;
    uint64_t ns = 0;
    bool timed = false;
  };
  absl::flat_hash_map<uint32_t, Group> groups;
  // What the records naming each call site (P2PTRACE_STACKS) did, by the file's site id.
  struct SiteUse {
    uint64_t copies = 0, bytes = 0, host_staged_bytes = 0, errors = 0, nccl_ops = 0, nccl_bytes = 0, nccl_errors = 0;
    std::map<std::tuple<int, int, int>, std::pair<uint64_t, uint64_t>> pairs;  // (src, dst, transport) -> copies, bytes
    std::set<int> nccl_apis;
  };
  std::map<uint32_t, SiteUse> sites;
  static constexpr size_t kMaxSites = 1 << 16;  // the shim writes at most 4096 per file; more is a damaged file
  // CUDA graphs (format minor 5): what each capture recorded (flagged CAPTURED, its graph id in the
  // seq), and how many successful launches replayed it. A launch may be read before the capture it
  // replays (another thread's chunk): applied in Finish, captured work × launches, exactly.
  struct CapturedCopy {
    uint64_t calls = 0, bytes = 0;
  };
  struct Capture {
    std::map<std::tuple<uint32_t, int, int, int>, CapturedCopy> copies;  // (site, src, dst, transport)
    std::map<std::tuple<int, int, int, int>, CapturedCopy> by_api;      // (src, dst, path as copy_apis, api)
    std::map<std::tuple<uint64_t, int, int, uint64_t, uint32_t>, uint64_t> ops;  // (comm, api, peer, bytes, site) -> calls
    uint64_t launches = 0;
    bool failed = false;  // its capture ended in an error: no graph, never replayed
    std::vector<uint32_t> includes;  // ids whose work this one also holds, once per INCLUDE (minor 6)
  };
  std::map<uint32_t, Capture> captures;  // by graph id
  Capture* CaptureOf(uint32_t id);        // nullptr past kMaxPending captures (a damaged file)
  // Finish's result: replayed copies per (src, dst, transport), for the pairs (whose counters hold
  // only the copies that ran when called).
  std::map<std::tuple<int, int, int>, CapturedCopy> replayed;
  uint64_t graph_launches = 0;  // successful launches of graphs with recorded work
  // Calls that changed nodes of recorded graphs after they were recorded (trace minor 7), by
  // p2ptrace_api: replays still count what was recorded.
  std::map<int, uint64_t> graph_alterations;
  void AddGraph(const p2ptrace_graph_record& g);
  void Replay(const Capture& c, uint64_t n);            // c's own work, n times
  static constexpr uint64_t kMaxRuns = 1ull << 48;     // runs of one id (a damaged file's includes multiply)
  static constexpr size_t kMaxIncludes = 1 << 16;      // INCLUDEs of one id kept

  // NCCL operations timed on the GPU by NCCL's profiler plugin interface (NCCL_KERNEL records, trace
  // 1.9): calls, bytes and the kernels' time. A send's or receive's by (NCCL's commHash, sending rank,
  // receiving rank) and the side that timed it; a collective's by what places its share on ring edges.
  struct KernelTimes {
    uint64_t calls = 0, bytes = 0, ns = 0;
  };
  std::map<std::tuple<uint64_t, int, int>, KernelTimes> kernel_sends, kernel_recvs;
  struct KernelColl {
    uint64_t comm_hash;
    int rank, nranks, api, algo;
    uint64_t channel_mask;
    auto operator<=>(const KernelColl&) const = default;
  };
  std::map<KernelColl, KernelTimes> kernel_colls;
  void AddKernel(const p2ptrace_nccl_kernel_record& k);

  bool nccl_used = false;
  // NCCL calls that returned an error: (p2ptrace_nccl_api, ncclResult_t) -> how many.
  std::map<std::pair<int, int>, uint64_t> nccl_failures;
  uint64_t last_ns = 0;
  static constexpr size_t kMaxPending = 1 << 20;  // past it, forgotten rather than accumulated

  void Timed(const Pending& p, uint64_t ns);
  void TimedGroup(const Group& g);
  void AddFanOut(const p2ptrace_nccl_op_record& o, uint64_t times = 1);
  // After the file's last record: the groups' timings to their operations.
  void Finish();

  SiteUse* Site(uint32_t id);  // nullptr for no site, or past kMaxSites

  void Add(const TraceRecord& r);
};

}  // namespace p2ptrace::cli
