// NCCL's side of the report: every communicator's ranks and connections (from the NCCL logs, else
// from the connection lines the shim recorded in the trace), the operations and their timings
// (CUDA events or NCCL's kernel timers), the rings, the failed calls and NCCL's reasons. Fed one
// trace and one log at a time, as the report reads them; keeps their sums, never their records.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/nccl_failures.h"
#include "core/nccl_log.h"
#include "core/net_diagnosis.h"
#include "tools/report/gpu_index.h"
#include "tools/report/report.h"
#include "tools/report/trace_fold.h"
#include "tools/report/traces.h"

namespace p2ptrace::cli {

class NcclFold {
 public:
  // One trace, folded (`fold`), whose process is rep.processes[process]. The ranks its
  // communicators gave, the operations, kernel timings and sends, the connection lines the shim
  // recorded, the calls that failed.
  void AddTrace(const Trace& t, const TraceFold& fold, const ProcessInfo& process, size_t index);
  // One NCCL log: its ranks, connections, refusals and WARN lines.
  void AddLog(const NcclLogFile& log, Report& rep);

  size_t Connections() const { return conns_.size(); }
  // Once every trace and log is in: the NCCL pairs (appended to rep.pairs), the operations
  // (rep.nccl_ops); processes whose log is missing take their recorded connections.
  void FinishPairs(Report& rep, const GpuIndex& gpus);
  // After the pairs' expectations are known (ReportBuilder's costs): the rings and their slowest hop.
  void FinishRings(Report& rep) const;
  // After the job-start predictions' causes (NodePredictions::ApplyTo): each cross-host pair NCCL
  // ran over TCP sockets or without GPUDirect RDMA takes the cause the NCCL log of the host whose
  // side lacked it shows; the logs' "does not say why" only where no other cause is known.
  void ApplyNetCauses(Report& rep) const;
  // Each connection as the stopped finding names an operation's pairs.
  std::vector<PairPath> StopPaths(const Report& rep, const GpuIndex& gpus) const;
  // NCCL's failures, one finding per cause, then the calls that failed.
  void AddFindings(Report& rep) const;

 private:
  struct Who {
    std::string host, bus;
    int cuda = -1;  // the rank's CUDA ordinal in its process
  };
  // NCCL connections of one communicator direction and class, resolved to GPUs in FinishPairs (the
  // ranks' identities may come from logs read later).
  struct Conn {
    std::set<std::string> transports;
    int channels = 0;
    bool from_log = false, from_trace = false;
    // By the host that printed the lines; a side without GPUDirect RDMA (or on sockets) is degraded there.
    std::map<std::string, PairEntry::NetSide> net_sides;
    // A NET line's side, as `host` printed it; nothing for other transports.
    void NoteNet(const std::string& host, const std::string& transport);
    Conn& operator+=(const Conn& o);
  };
  using ConnKey = std::tuple<std::string, int, int, int>;  // (comm key, src rank, dst rank, class)
  using Place = std::tuple<std::string, int, uint64_t>;    // (host, pid, comm pointer)
  struct P2pOps : Traffic {
    uint64_t group_calls = 0, shared_calls = 0;
  };
  // One process's NCCL view as its trace recorded it (its communicators' records and the connection
  // lines the shim read, P2PTRACE_RECORD_NCCL_CONN), used when no log read holds a connection line
  // the process logged: its log file is missing. A few entries per connection.
  struct TraceConns {
    std::string host;
    int pid = 0;
    size_t process = 0;  // its index in rep.processes
    std::map<std::pair<std::string, int>, Who> who;
    std::map<Place, std::pair<std::string, int>> comm_of;
    std::map<ConnKey, Conn> conns;
    std::string refusal_kind, refusal_evidence;  // NCCL_P2P_DISABLE / NCCL_P2P_LEVEL=LOC in its environment
  };
  // NCCL calls that returned an error, by (api, ncclResult_t): how many, and by whom.
  struct FailedCalls {
    uint64_t calls = 0;
    std::set<int> ranks;
    std::vector<std::string> processes;  // "node0 pid 4711" of rank-less processes (a few)
  };
  using ByRanks = std::map<std::tuple<std::string, int, int>, std::pair<int, PairEntry*>>;

  void AddOps(const Trace& t, const TraceFold& f);
  void AddTraceConns(const Trace& t, const TraceFold& f, size_t process);
  void AddRingHop(const std::string& key, int channel, int conn_index, int src, int dst, const std::string& direction,
                  uint64_t line);
  std::string WholeHost(const std::string& printed, int pid, const std::string& hint) const;
  void FinishTraceConns(Report& rep);
  void RekeyByTraces();
  void FinishConnections(Report& rep, const GpuIndex& gpus);
  void FinishKernelTimes(const ByRanks& by_ranks);
  void FinishOpKernelTimes();
  std::map<std::string, uint64_t> OpComms() const;

  std::map<std::pair<uint64_t, int>, NcclOpSummary> ops_;
  // ncclSend bytes per (host, pid, comm pointer, peer rank): attributed to a pair in FinishPairs.
  std::map<std::tuple<std::string, int, uint64_t, int>, P2pOps> sends_;
  std::map<std::pair<std::string, int>, Who> who_;  // (communicator key, rank) -> GPU
  // (host, pid, comm pointer) -> (communicator key, rank): joins trace records to log lines.
  std::map<Place, std::pair<std::string, int>> comm_of_;
  std::map<ConnKey, Conn> conns_;
  // Each host's network devices as its `NET/… : Using` lines list them: (host, network, index) -> name.
  std::map<std::tuple<std::string, std::string, int>, std::string> nic_names_;
  std::map<std::string, int> process_keys_;  // ProcessCommKey -> its communicator's size (RekeyByTraces)
  std::map<std::string, Refusal> first_refusal_;  // per host: NCCL's own reason for refusing P2P
  std::vector<TraceConns> trace_conns_;
  // NCCL's kernel timers (NCCL_KERNEL records), keyed by the communicator's commId ("0x…", the key
  // of its connections): send/recv by (commId, sending rank, receiving rank), as the sender and as
  // the receiver timed them; collectives by (commId, rank, nranks, api, algo, channel mask).
  std::map<std::tuple<std::string, int, int>, TraceFold::KernelTimes> kernel_sends_, kernel_recvs_;
  std::map<std::tuple<std::string, int, int, int, int, uint64_t>, TraceFold::KernelTimes> kernel_colls_;
  // Each ring's next hop: (commId, channel, rank) -> (the line that said it, next rank). A rank's
  // first connection of a channel (index 0) is its ring's; its tree's come later in its log.
  std::map<std::tuple<std::string, int, int>, std::pair<uint64_t, int>> ring_next_;
  // (host, pid, comm pointer) -> the communicator's id hash (its trace's init record): with comm_of_,
  // names a ring's communicator as the operations name it.
  std::map<Place, uint64_t> id_hash_of_;
  std::map<std::pair<int, int>, FailedCalls> failed_calls_;
  // Why NCCL failed, from its WARN lines (core/nccl_failures.h), one per cause over every log.
  std::vector<NcclFailure> causes_;
  // Per host, from the environment of a process whose log is missing: a setting that takes P2P
  // away (the refusal kind, the evidence), standing in for NCCL's `… set by environment` line.
  std::map<std::string, std::pair<std::string, std::string>> env_refusal_;
  std::set<std::pair<std::string, int>> logged_;  // (host, pid) of every connection line read from a log
  // NCCL prints a host up to its first dot (gpu01 of gpu01.cluster.local); every key here holds the
  // whole name, as traces do. (printed host, pid) -> the traced processes' whole host names.
  std::map<std::pair<std::string, int>, std::vector<std::string>> traced_hosts_;
  // Per whole host name and shortfall: the cause its NCCL logs show for its degraded NET connections
  // (core/net_diagnosis.h), the one a log settled standing over "the log does not say".
  std::map<std::pair<std::string, NetShortfall>, NetFinding> net_causes_;
  // Per cross-host pair (src host, src bus, dst host, dst bus): the hosts whose side was degraded.
  std::map<std::tuple<std::string, std::string, std::string, std::string>, std::set<std::string>> net_degraded_;
};

}  // namespace p2ptrace::cli
