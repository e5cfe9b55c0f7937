// The merged view of a job's traces (DESIGN.md §7 `report`): every directional GPU pair that
// moved bytes, by which path, how fast against the link's expectation, what its fallbacks cost,
// and why. Built by folding one trace (and one NCCL log) at a time: memory grows with pairs,
// processes and communicators, never with events.
// This header is the model, the only one the writers of tools/formats/ include. Files: load.h reads a
// job directory; trace_fold.h folds one trace's records; builder.h merges traces, NCCL logs and
// preflight blocks into a Report (the CUDA pairs, causes and costs), with nccl_fold.h (NCCL's
// communicators, pairs, operations and rings), node_predictions.h (the job-start check), gpu_index.h
// (GPU numbering), capture.h (what each trace can be trusted for) and stopped.h (a job that hung);
// diff.h compares two Reports.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/link_health.h"
#include "core/rate.h"
#include "nlohmann/json.hpp"
#include "tools/common/finding.h"
#include "tools/common/text.h"
#include "tools/report/arrival.h"
#include "tools/report/stopped.h"
#include "tools/report/traces.h"

namespace p2ptrace::cli {

struct GpuRef {
  std::string host, bus_id;
  // The host's own index of the GPU, as nvidia-smi shows it (from its bus id): the job-start
  // probe's NVML index, else the PCI order of the node's GPUs; -1 when the traces cannot tell
  // (the GPU is then named by its bus id).
  int gpu = -1;
  int cuda = -1;     // the CUDA ordinal its process(es) gave it; -1 unknown or not the same in all
  std::string name;  // the GPU's model as NVML names it; "" unknown
};
// "GPU4", or "GPU(0000:1a:00.0)" when the host's numbering is unknown: how every output names a GPU.
std::string GpuName(const GpuRef& gpu);

struct Cause {
  std::string id;
  std::vector<std::string> evidence;
  std::string fix;
  std::string confirm;  // how to confirm it before changing anything (core/causes.h); "" when obvious
  // "trace": derived from what the process did and NCCL printed; "preflight": predicted at job start
  // by the shim's node probes (the trace's preflight block).
  std::string origin = "trace";
  // A link that degraded while the job ran slowed the pair (link-errors, link-downtrained: a
  // warning though the pair kept its path).
  bool SlowedByLink() const { return id == "link-errors" || id == "link-downtrained"; }
};

// Calls and bytes with their timed subset: what a pair's copies or sends, and an NCCL operation's
// calls, add up to. One sum for all of them (operator+=), one measured rate (core/rate.h).
struct Traffic {
  uint64_t calls = 0, bytes = 0, errors = 0, timed_calls = 0, timed_bytes = 0, timed_ns = 0;
  Traffic& operator+=(const Traffic& o) {
    calls += o.calls, bytes += o.bytes, errors += o.errors;
    timed_calls += o.timed_calls, timed_bytes += o.timed_bytes, timed_ns += o.timed_ns;
    return *this;
  }
};

struct PairEntry : Traffic {
  GpuRef src, dst;
  std::string source = "cuda";             // "cuda": intercepted copies; "nccl": NCCL's own log lines
  std::set<std::string> nccl_transports;   // NCCL's text after "via", verbatim
  // Where an NCCL pair's connection lines were read: "log" (NCCL's log file in DIR, or the user's
  // own), "trace" (the shim's P2PTRACE_RECORD_NCCL_CONN records: the log file is missing), or
  // "log+trace"; "" for a CUDA pair.
  std::string nccl_from;
  int channels = 0;                        // NCCL connections seen for the pair
  int transport = 0;  // p2ptrace_transport
  int expected = 0;   // the best class the node allows for this pair; 0 unknown
  // The pair's link as the job-start probe named it (`nvidia-smi topo -m`'s cell: "NV18", "PIX",
  // "SYS"); "" unknown. It names a direct pair's class when the trace could not (NCCL's log says
  // only "P2P").
  std::string link;
  bool fallback = false;
  // How the timed calls were measured: an NCCL send timed inside ncclGroupStart … ncclGroupEnd has
  // its group's duration (the group sent to this peer alone); `shared_calls` were timed only in
  // groups that also sent to other peers, which gives no time of this pair's own.
  uint64_t group_timed_calls = 0, shared_calls = 0;
  // A CUDA pair's copies by the API that made them (cudaMemcpyPeer, cuMemcpyDtoD, …): calls, bytes,
  // from the copy records (the totals above come from the counters).
  std::map<std::string, std::pair<uint64_t, uint64_t>> apis;
  uint64_t DriverCalls() const;  // of `apis`, the driver API's calls
  // Of calls and bytes: CUDA graph replays (copies captured into a graph, once per launch).
  uint64_t graph_calls = 0, graph_bytes = 0;
  std::set<int> ranks;      // the source's ranks (for a CUDA pair, the process holding both GPUs)
  std::set<int> dst_ranks;  // an NCCL pair's receiving ranks; empty for a CUDA pair
  std::vector<Cause> causes;
  // A cross-host NCCL pair's network as each side's own log printed it (the sender's and the
  // receiver's lines may differ: each prints its own NIC and GPUDirect RDMA), the source's side
  // first; empty for other pairs.
  struct NetSide {
    std::string host;
    std::string network;      // "IB", "Socket", … as NCCL prints it
    int nic_index = -1;       // the device's index as that network numbers it
    std::string nic;          // its name where the host's `NET/… : Using` line gives it ("mlx5_0", a socket's "eth0"); "" not given
    bool gdr = false;         // every line of this side had GPUDirect RDMA
    int proxy_rank = -1;      // PXN: the rank whose NIC carried this side's sends; -1 none
    // nvidia-smi's label between this side's GPU and the NIC it used ("PIX"), and the NIC nearest that
    // GPU with its label, as the host's job-start probe found them; "" not known. A NIC farther than
    // the nearest crosses rails (and may lose GPUDirect RDMA to the distance rule).
    std::string nic_path, nearest_nic, nearest_path;
    // The NIC it used is farther from its GPU than the nearest (a PXN relay aside: that is NCCL's
    // own way round it).
    bool CrossesRails() const;
  };
  std::vector<NetSide> net;
  // The sides in one line: "node0 mlx5_0 (PIX), GPUDirect RDMA; node1 mlx5_1 (SYS), no GPUDirect RDMA
  // (its GPU's nearest NIC is mlx5_0, PIX: crosses rails)"; "" for a pair without NET sides.
  std::string NetSidesText() const;
  // What the class used should deliver (core/causes.h ExpectedBandwidth); 0/0 when no figure.
  double expected_gbps_low = 0, expected_gbps_high = 0;
  std::string expected_basis;
  // A fallback's cost: bytes × (1/achieved − 1/best), where best is the expected class's GB/s —
  // measured on this pair, else on the host, else the catalog's low figure. -1: not computable.
  double best_gbps = -1;
  std::string best_basis;
  double lost_seconds = -1;
  // The timed calls' bytes over their measured time; -1 when nothing was timed or the figure is
  // beyond any hardware (core/rate.h; RateNote says why).
  double Gbps() const { return MeasuredGbps(timed_bytes, timed_ns); }
  std::string RateNote() const { return WithheldRateNote(timed_bytes, timed_ns); }
  // Of timed_calls: timed by NCCL's own kernel timers (p2ptrace as NCCL's profiler plugin): each
  // send's channels on the GPU, alone even inside a group. When there are any, they are all the
  // timed calls: the group timing of the pair's sends is set aside.
  uint64_t kernel_timed_calls = 0;
  // What the pair carried inside ring collectives, by NCCL's kernel timers: the sampled collectives
  // whose ring ran over this pair (calls, timed_calls), the bytes each ring edge carries by
  // nccl-tests' bus bandwidth rule (S × busbw factor, over the channels that used this edge), and
  // the kernels' time (timed_ns). Not in the pair's calls and bytes above (those are its sends).
  Traffic coll;
  double CollGbps() const { return MeasuredGbps(coll.timed_bytes, coll.timed_ns); }
  // The timing the pair's rate comes from, as RateBasis names it: its own timed calls, else its
  // ring share in collectives (an allreduce-only job's pairs have only that). `gbps` and `seconds`
  // in JSON, rows and the fallback costs are these.
  const Traffic& Rated() const { return timed_calls == 0 && coll.timed_calls ? coll : *this; }
  double RatedGbps() const { return MeasuredGbps(Rated().timed_bytes, Rated().timed_ns); }
  // The measured time (never bytes extrapolated at a rate: a sweep's first, small calls are
  // latency); -1 when nothing was timed.
  double RatedSeconds() const { return Rated().timed_calls ? static_cast<double>(Rated().timed_ns) * 1e-9 : -1; }
  // In a pipelined ring every hop carries at the pace of the slowest: the slower hop that set this
  // pair's collective pace ("GPU3 -> GPU4 (shm)"); "" when it is the slowest or carried none.
  std::string bounded_by;
  // What went wrong on the links this pair crosses while the job ran (tools/report/link_readings.h):
  // an error counter that moved, a link trained low; shown next to the pair's rate. A pair below its
  // class's rate with one also has the cause `link-errors` / `link-downtrained`.
  struct LinkCharge {
    std::string host;
    std::string where;  // "GPU2 NVLink 3", "PCIe bridge 0000:17:00.0 (above GPU0, GPU1)"
    std::string what;   // "replay +51200 (0 -> 51200)", "x4 of x16 (narrowed during the job)"
    std::string kind;   // "errors" | "downtrained"
  };
  std::vector<LinkCharge> link_changes;
  // How the rate was measured: "own events" (events around each call: CUDA copies, NCCL calls
  // outside a group), "group" (the group's duration with this pair's bytes in it), "own events and
  // group", "NCCL kernel timers" (each send's own channels on the GPU), "collectives, NCCL kernel
  // timers" (only the ring share above was timed); "" when not timed.
  std::string RateBasis() const;
};
// "node0 GPU3 -> GPU4", "node0 GPU1 -> node1 GPU0": how findings name a pair.
std::string PairName(const PairEntry& pair);

// One ring of a communicator's channel whose collectives NCCL's kernel timers measured: its hops in
// ring order, the rate each carried, and the hop whose link class sets the ring's pace.
struct RingSummary {
  std::string comm;        // the communicator as NcclOpSummary::comm names it; "" when no trace said
  std::string nccl_comm;   // NCCL's commId ("0x…"), as its log prints it
  int channel = -1;
  std::vector<std::string> hops;  // "GPU0 -> GPU1 (nvlink)", in ring order from the lowest rank
  double slowest_gbps = -1, fastest_gbps = -1;  // the hops' measured collective rates
  std::string bounded_by;  // the hop of the slowest class, when the ring mixes classes; "" when not
  double bound_expected_low = 0, bound_expected_high = 0;  // that hop's class's expected GB/s
  std::vector<size_t> hop_pairs;  // each hop's index in Report::pairs, as `hops`
  int bound_pair = -1;            // `bounded_by`'s index in Report::pairs; -1 when none
};

// One NCCL operation kind of one communicator, over all its ranks, by nccl-tests' definitions
// (tools/report/nccl_bw.h): `bytes` and `timed_bytes` are the calls' sizes S (the whole buffer of an
// allgather, reducescatter or alltoall, not NCCL's count), algbw = S / time, busbw its factor.
struct NcclOpSummary : Traffic {
  std::string comm;  // FNV hash of the ncclUniqueId, shared by the communicator's ranks
  int nranks = 0;
  std::string op;    // "ncclAllReduce", …
  int api = 0;       // p2ptrace_nccl_api
  uint64_t group_timed_calls = 0;  // of timed_calls: timed as their group (one duration for the group's calls of this kind)
  uint64_t timings = 0;            // durations measured: a group's calls of one kind share one
  // Of timed_calls: timed by NCCL's kernel timers (first channel's start to last channel's stop on
  // the GPU), where the shim is NCCL's profiler and puts no event on NCCL's stream.
  uint64_t kernel_timed_calls = 0;
  uint64_t graph_calls = 0, graph_bytes = 0;  // of calls and bytes (S): CUDA graph replays
  std::set<int> ranks;
  // GB/s over the timed calls; -1 when untimed, on one rank (nothing crosses a link) or beyond any
  // hardware (core/rate.h). RateNote says why a timed operation has no rate.
  double AlgBw() const;
  double BusBw() const;
  std::string RateNote() const;
};

// One application call site (P2PTRACE_STACKS) over all processes: the sites of different processes
// with the same frames are one (frames are module offsets, alike in every rank of one program).
struct CallSiteSummary {
  int id = 0;  // its place in Report::call_sites, from 1 (the order shown)
  std::vector<std::string> frames;  // innermost first, as the shim wrote them; one "[not described …]" line when lost
  uint64_t copies = 0, bytes = 0, host_staged_bytes = 0, errors = 0;  // CUDA peer copies (from their records)
  uint64_t nccl_ops = 0, nccl_bytes = 0, nccl_errors = 0;             // NCCL operations
  struct Pair {
    GpuRef src, dst;
    int transport = 0;  // p2ptrace_transport of the copies' path
    uint64_t copies = 0, bytes = 0;
  };
  std::vector<Pair> pairs;               // by source, destination, transport
  std::set<std::string> nccl_operations;  // "ncclAllReduce", …
  std::set<int> ranks;
  int processes = 0;
};

// One NCCL rank a process held: a process holds one per communicator it is in, several of one
// communicator when it drives several GPUs (nccl-tests' -g, ncclCommInitAll).
struct NcclRank {
  std::string comm;  // the communicator's hash, as NcclOpSummary::comm
  int rank = -1, nranks = 0, cuda_device = -1;
  std::string bus_id;
  int gpu = -1;  // as GpuRef::gpu
};

struct ProcessInfo {
  // The launcher's RANK, or the process's one NCCL rank in its largest communicator when NCCL said
  // it; -1 for a process that holds several (see `ranks`) or none.
  int rank = -1, pid = 0;
  // The job's ranks in this process: its ranks in its largest communicator (the world: one per
  // GPU it drives) when NCCL said them, else the launcher's RANK; empty when neither.
  std::vector<int> ranks;
  std::string rank_comm;             // the communicator `ranks` are of; "" when they are the launcher's
  std::vector<NcclRank> nccl_ranks;  // every communicator's rank it held, by communicator then rank
  std::string host, file, state;  // state: running|exited|fatal signal N
  std::string exe;                 // the program, as the trace names it (/proc/self/exe)
  int fatal_signal = 0;            // the signal that reached the shim's handler; 0 when none did
  std::vector<std::string> bus_ids;  // by CUDA ordinal
  std::vector<int> gpus;             // the host's index of each (GpuRef::gpu), by CUDA ordinal
  int runtime_version = 0, driver_version = 0;
  int nccl_version = 0;  // ncclGetVersion's code from the header (22809); 0 unknown or an older file
  uint32_t capture_flags = 0;
  uint64_t dropped_records = 0;
  std::string nccl_log;  // how NCCL's lines reached p2ptrace: tapped | user file | not seen: <why>
  std::string job_id;
  uint64_t start_realtime_ns = 0;  // wall clock at the shim's start
  double seconds = -1;             // how long it ran, as far as the trace says; -1 unknown
  bool nccl_used = false;  // the process created a communicator or called an NCCL operation
  // Its first failed communicator creation, as "ncclCommInitRank returned 5 (ncclInvalidUsage)"; ""
  // when none failed.
  std::string nccl_init_failed;
  bool links_from_probe = false;  // its host's job-start probe named the links (NVML answered)
  // Calls that changed recorded graph nodes afterwards, by API name (TraceFold::graph_alterations).
  std::map<std::string, uint64_t> graph_alterations;
  // What the shim could see in this process ("cudart 12 intercepted, NCCL log tapped, …") and
  // what that means for trusting an empty or partial answer.
  std::string capture_mode, trust;
};

struct Report {
  std::string path;
  std::vector<ProcessInfo> processes;
  std::vector<PairEntry> pairs;
  std::vector<NcclOpSummary> nccl_ops;
  // Every call site the traces describe or name, most host-staged bytes first, then most bytes.
  std::vector<CallSiteSummary> call_sites;
  std::vector<Finding> findings;
  std::vector<std::string> problems;  // files skipped, one line each
  std::vector<std::string> partial;   // files used in part, one line each
  size_t nccl_logs = 0;               // NCCL log files read
  // Processes whose NCCL connections came from their trace's records: no log read held a
  // connection line they logged (the file was deleted, not copied, or never written in DIR).
  size_t nccl_from_traces = 0;
  std::vector<RingSummary> rings;
  std::set<std::string> nccl_versions;  // printed in NCCL's log lines ("2.18.3+cuda12.2")
  // Each host's job-start preflight (the shim's probes and prediction): its warning lines, once
  // per host however many processes wrote the block.
  struct Preflight {
    std::string host, boot_id;
    std::vector<std::string> warnings;
  };
  std::vector<Preflight> preflight;
  // Each host's link health as the processes read it at start and exit (core/link_health.h): what
  // changed and the pairs it was charged to, the counters the node does not give, how long a reading
  // took. Hosts whose traces hold no reading are absent.
  struct HostLinks {
    std::string host;
    int readings = 0, exit_readings = 0;  // the processes' start readings, and how many also read at exit
    double read_ms = -1;                  // the slowest reading, as its reader measured it
    struct Change {
      LinkChange change;
      std::vector<std::string> pairs;  // the pairs that crossed the link ("GPU2 -> GPU3"), each direction
    };
    std::vector<Change> changes;
    // Counters the node did not give, by where: "NVLink, all 144 links: crc_data, crc_flit".
    std::vector<std::string> unsupported;
    std::vector<std::string> notes;  // what a reader could not read, once each
  };
  std::vector<HostLinks> links;
  double lost_seconds = 0;            // summed over the fallback pairs that could be costed
  // A job that hung or died: who stopped first, what it was doing, who waits (tools/report/stopped.h).
  StoppedFinding stopped;
  // A job that runs slow: the rank that arrives last at most collectives, or the hop that bounds a
  // ring (tools/report/arrival.h), with every communicator's arrivals compared.
  SlowRankFinding slow_rank;
};

}  // namespace p2ptrace::cli
