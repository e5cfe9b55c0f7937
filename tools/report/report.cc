#include "tools/report/report.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>
#include <variant>

#include "core/causes.h"
#include "core/nccl_failures.h"
#include "core/node_probe.h"
#include "core/preflight_block.h"
#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "tools/common/json_text.h"
#include "tools/report/nccl_bw.h"
#include "tools/report/trace_fold.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

const char* NvmlStatusText(int encoded) {
  switch (encoded) {
    case 1: return "OK";
    case 2: return "chipset not supported";
    case 3: return "GPU not supported";
    case 4: return "IOH topology not supported";
    case 5: return "disabled by regkey";
    case 6: return "not supported";
    default: return "unknown";
  }
}

std::string StateText(const p2ptrace_file_header& h) {
  switch (h.state) {
    case P2PTRACE_STATE_EXITED: return "exited";
    case P2PTRACE_STATE_FATAL_SIGNAL: return fmt::format("fatal signal {}", h.fatal_signal);
    default: return "running or killed";  // no exit seen: still running, SIGKILL, _exit or a crash
  }
}

}  // namespace



std::string GpuName(const GpuRef& g) {
  return g.gpu >= 0 ? fmt::format("GPU{}", g.gpu) : fmt::format("GPU({})", g.bus_id.empty() ? "?" : g.bus_id);
}



namespace {

struct Key {
  std::string host, src, dst;
  int transport;
  bool operator<(const Key& o) const {
    return std::tie(host, src, dst, transport) < std::tie(o.host, o.src, o.dst, o.transport);
  }
};

std::string DeviceName(const Trace& t, int d) {
  std::string bus = NormalizeBusId(t.BusId(d));
  return bus.empty() ? fmt::format("device{}", d) : bus;
}

// NCCL prints busId as the hex of "dddd:bb:dd.f" without separators ("1a000"): back to PCI form.
std::string BusFromNccl(const std::string& hex) {
  if (hex.empty() || hex.find(':') != std::string::npos) return hex;
  unsigned long long v = std::strtoull(hex.c_str(), nullptr, 16);
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", v >> 20, (v >> 12) & 0xff, (v >> 4) & 0xff, v & 0xf);
}

// How far a process's trace can be trusted: what the shim saw, and what an empty answer means.
void DescribeCapture(ProcessInfo* p) {
  std::vector<std::string> mode, trust;
  std::vector<std::string> runtimes;
  if (p->capture_flags & P2PTRACE_CAPTURE_CUDART_11) runtimes.push_back("11");
  if (p->capture_flags & P2PTRACE_CAPTURE_CUDART_12) runtimes.push_back("12");
  if (p->capture_flags & P2PTRACE_CAPTURE_CUDART_13) runtimes.push_back("13");
  bool driver = (p->capture_flags & P2PTRACE_CAPTURE_DRIVER) != 0;
  if (runtimes.empty() && driver) {
    mode.push_back("no CUDA runtime call reached the shim; the CUDA driver API's did");
  } else if (runtimes.empty() && !p->nccl_init_failed.empty()) {
    // Not a static runtime: the job stopped at NCCL's init, before a copy or peer call (findings say why).
    mode.push_back("no CUDA copy or peer call reached the shim before NCCL's init failed");
    trust.push_back(fmt::format("NCCL's init failed ({}): the process stopped before any GPU pair exchanged data "
                                "(the NCCL finding says why)",
                                p->nccl_init_failed));
  } else if (runtimes.empty()) {
    mode.push_back("no CUDA runtime call reached the shim");
    // Static linking only when the program's ELF carries the static runtime (read where the report runs).
    std::optional<bool> is_static = p->exe.empty() ? std::nullopt : CarriesStaticCudart(p->exe);
    if (is_static.value_or(false))
      trust.push_back(fmt::format("{} carries a statically linked CUDA runtime (nvcc's default --cudart static), which "
                                  "LD_PRELOAD cannot intercept: its CUDA copies are unseen (rebuild with "
                                  "`nvcc -cudart shared`)",
                                  p->exe));
    else if (is_static.has_value())
      trust.push_back(fmt::format("{} carries no static CUDA runtime: the process ended{} before any CUDA runtime call "
                                  "the shim wraps",
                                  p->exe, p->nccl_used ? " (its NCCL calls are traced)" : ""));
    else
      trust.push_back(fmt::format("its program ({}) cannot be read here to tell whether its CUDA runtime is linked "
                                  "statically: no CUDA pair listed for it proves nothing",
                                  p->exe.empty() ? "not named in the trace" : p->exe));
  } else {
    mode.push_back(fmt::format("cudart {} intercepted", fmt::join(runtimes, "+")));
  }
  // Which path the calls came by besides linking (trace 1.4): dlsym, seen through the audit module.
  if (p->capture_flags & P2PTRACE_CAPTURE_CUDART_DLSYM) mode.push_back("CUDA runtime via dlsym (LD_AUDIT)");
  if (p->capture_flags & P2PTRACE_CAPTURE_NCCL_DLSYM) mode.push_back("NCCL via dlsym (LD_AUDIT)");
  // The driver API (trace 1.5): linked, or handed out by address.
  if (driver && !runtimes.empty()) mode.push_back("CUDA driver API intercepted");
  if (p->capture_flags & P2PTRACE_CAPTURE_DRIVER_DLSYM) mode.push_back("CUDA driver via dlsym (LD_AUDIT)");
  if (p->capture_flags & P2PTRACE_CAPTURE_DRIVER_ENTRY_POINT)
    mode.push_back("CUDA driver via cuGetProcAddress/cudaGetDriverEntryPoint");
  mode.push_back(p->capture_flags & P2PTRACE_CAPTURE_NVML_LINKS ? "link types from NVML"
                 : p->links_from_probe                        ? "link types from the job-start probe (NVML)"
                                                              : "link types unknown");
  if (p->nccl_used) {
    bool from_trace = p->nccl_log.rfind("trace records", 0) == 0;
    mode.push_back(p->nccl_log == "tapped"      ? "NCCL log tapped"
                   : p->nccl_log == "user file" ? "NCCL log read from the user's file"
                   : from_trace                 ? "NCCL connections from the trace (log file missing)"
                                                : "NCCL lines not seen");
    if (p->nccl_log.rfind("not seen", 0) == 0) trust.push_back("NCCL's transports are unknown: " + p->nccl_log.substr(10));
    if (from_trace)
      trust.push_back("NCCL's transports from the connection lines the shim recorded; NCCL's other messages (its "
                      "reasons for refusing P2P) were only in the missing log: the recorded environment stands in");
  }
  if (p->capture_flags & P2PTRACE_CAPTURE_NCCL_PROFILER) mode.push_back("NCCL kernel timers");
  if (p->capture_flags & P2PTRACE_CAPTURE_NCCL_PROFILER_USER)
    trust.push_back("the program's own NCCL profiler plugin (NCCL_PROFILER_PLUGIN) could not be forwarded and was left "
                    "in place: its NCCL pairs were timed per call and per group, not on their own");
  if (p->capture_flags & P2PTRACE_CAPTURE_TIMING_OFF) {
    mode.push_back("timing off");
    trust.push_back("no bandwidth measured (P2PTRACE_SAMPLE)");
  }
  if (p->capture_flags & P2PTRACE_CAPTURE_FORK_CHILD) mode.push_back("forked child");
  if (p->dropped_records && (p->capture_flags & P2PTRACE_CAPTURE_NO_SPACE))
    trust.push_back(fmt::format("{} records dropped: the trace's filesystem was full (free space there or point "
                                "P2PTRACE_DIR elsewhere): pair totals exact, timelines partial",
                                p->dropped_records));
  else if (p->dropped_records)
    trust.push_back(fmt::format("{} records dropped at the size cap: pair totals exact, timelines partial",
                                p->dropped_records));
  if (!p->graph_alterations.empty()) {
    std::vector<std::string> calls;
    for (const auto& [api, n] : p->graph_alterations) calls.push_back(fmt::format("{} {}", api, n));
    trust.push_back(fmt::format("graph replays counted as the copies were recorded: the program changed, disabled or "
                                "removed graph nodes afterwards ({}), so its replayed calls and bytes may be off",
                                fmt::join(calls, ", ")));
  }
  if (p->fatal_signal)
    trust.push_back(fmt::format("killed by {} (signal {}): complete up to that moment", SignalName(p->fatal_signal),
                                p->fatal_signal));
  else if (p->state != "exited")
    trust.push_back("ended without exit (killed, crashed or still running): complete up to that moment");
  p->capture_mode = fmt::format("{}", fmt::join(mode, ", "));
  p->trust = trust.empty() ? "complete" : fmt::format("{}", fmt::join(trust, "; "));
}

std::string NcclLogStatus(const Trace& t) {
  // Checked first: the environment the trace recorded may still show the tap that was taken back.
  if (t.header.capture_flags & P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN)
    return fmt::format("not seen: the log tap was withdrawn because NCCL {} ignores NCCL_DEBUG_FILE (its lines "
                       "would have gone to the job's own output); keep that output with NCCL_DEBUG=INFO and run "
                       "`p2ptrace explain` on it",
                       t.header.nccl_version > 0 ? NcclVersionText(t.header.nccl_version) : std::string("2.13"));
  std::string level = t.Env("NCCL_DEBUG");
  for (char& ch : level) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (t.Env("P2PTRACE_NCCL_TAP") == "1") return "tapped";
  if (!t.Env("NCCL_DEBUG_FILE").empty()) return "user file";
  if (level == "INFO" || level == "TRACE")
    return "not seen: NCCL_DEBUG=" + level + " prints to the job's own output; set NCCL_DEBUG_FILE to let p2ptrace read it";
  if (!level.empty()) return "not seen: NCCL_DEBUG=" + level + " hides the transport lines; unset it to let p2ptrace tap them";
  if (t.Env("P2PTRACE_NCCL_LOG") == "off") return "not seen: P2PTRACE_NCCL_LOG=off";
  // The tap declines a value of NCCL_DEBUG it does not know, and a trace directory it cannot make.
  return "not seen: the shim set up no NCCL log tap for this process";
}

// Which API's calls moved a pair's bytes: the runtime's, the driver's, or both (DESIGN.md §4).
struct PairApis {
  bool runtime = false, driver = false;
  // The names the cause's text uses: the API the program called.
  const char* Copies() const { return driver && !runtime ? "cuMemcpy*" : runtime && driver ? "cudaMemcpy*/cuMemcpy*" : "cudaMemcpy*"; }
  const char* Enable() const {
    return driver && !runtime ? "cuCtxEnablePeerAccess" : runtime && driver ? "cudaDeviceEnablePeerAccess or cuCtxEnablePeerAccess" : "cudaDeviceEnablePeerAccess";
  }
  const char* CanAccess() const { return driver && !runtime ? "cuDeviceCanAccessPeer" : "cudaDeviceCanAccessPeer"; }
};

// The cause of a host-staged CUDA pair, from what the node allows and what the process did.
Cause HostStagedCause(const p2ptrace_pair_counters& c, const GpuRef& src, const GpuRef& dst, int status,
                      const PeerFacts& f, bool p2p_possible, bool p2p_impossible, const PairApis& apis) {
  Cause cause;
  if (p2p_possible) {
    cause.id = "peer-access-not-enabled";
    cause.evidence.push_back(fmt::format("{} {} calls ({}) from GPU {} to GPU {} went through host memory", c.calls,
                                         apis.Copies(), BytesText(c.bytes), src.bus_id, dst.bus_id));
    if (f.enabled_ever)
      cause.evidence.push_back("peer access between them was not enabled when these copies ran "
                               "(it was enabled at another time)");
    else if (f.failed_enables.empty())
      cause.evidence.push_back(fmt::format("{} was never called between these two devices", apis.Enable()));
    for (const std::string& fe : f.failed_enables) cause.evidence.push_back(fe);
    if (status == 1) cause.evidence.push_back("NVML P2P status between them: OK");
    if (f.can_access == 1) cause.evidence.push_back(fmt::format("{} said 1", apis.CanAccess()));
    cause.fix = apis.driver && !apis.runtime
                    ? "enable peer access before copying: with each device's context current, "
                      "cuCtxEnablePeerAccess(ctx_b, 0) for the context of every peer b it copies with"
                    : "enable peer access before copying: on each device cudaSetDevice(a); "
                      "cudaDeviceEnablePeerAccess(b, 0) for every peer b it copies with";
  } else if (p2p_impossible) {
    cause.id = status > 1 ? "nvml-p2p-status" : "cuda-no-peer-access";
    if (status > 1) cause.evidence.push_back(fmt::format("NVML P2P status: {}", NvmlStatusText(status)));
    if (f.can_access == 0) cause.evidence.push_back(fmt::format("{} said 0", apis.CanAccess()));
    cause.fix = "this pair cannot use P2P on this node; place communicating ranks on GPUs that can "
                "(nvidia-smi topo -p2p r), or see `p2ptrace doctor` for why";
  } else {
    cause.id = "unknown";
    cause.evidence.push_back("checked: NVML P2P status (unavailable), cudaDeviceCanAccessPeer (never called)");
  }
  if (const CauseInfo* info = FindCause(cause.id)) cause.confirm = std::string(info->confirm);
  return cause;
}

uint64_t ParsePointer(const std::string& text) { return std::strtoull(text.c_str(), nullptr, 16); }

// A communicator as one process alone can name it: by its pointer there, else (no pointer printed)
// by its size. Never "0x…": ReportBuilder::State::RekeyByTraces tells the two apart.
std::string ProcessCommKey(const std::string& host, int pid, uint64_t comm, int nranks) {
  return comm != 0 ? fmt::format("{}:{}:{:#x}", host, pid, comm) : fmt::format("{}:{}:n{}", host, pid, nranks);
}

// Ranks of one communicator share commId (NCCL ≥ 2.16); without it, the printing process's key
// (the traces rekey it in Finish).
std::string CommKey(const RankIdentity& id) {
  // The grammar's key (commId, or a split's key derived from its parent's), else one process's.
  if (!id.comm_key.empty()) return id.comm_key;
  if (!id.comm_id.empty()) return id.comm_id;
  return ProcessCommKey(id.host, id.pid, id.comm.empty() ? 0 : ParsePointer(id.comm), id.nranks);
}

}  // namespace

// Bytes and timed bytes are nccl-tests' sizes already (AddNcclOps): algbw = S / t.
double NcclOpSummary::AlgBw() const { return nranks == 1 ? -1 : MeasuredGbps(timed_bytes, timed_ns); }

std::string NcclOpSummary::RateNote() const {
  if (nranks == 1) return "one rank: nothing crossed a link";
  return WithheldRateNote(timed_bytes, timed_ns);
}

double NcclOpSummary::BusBw() const {
  double alg = AlgBw();
  return alg < 0 ? -1 : alg * NcclBusFactor(api, nranks);
}

uint64_t PairEntry::DriverCalls() const {
  uint64_t n = 0;
  for (const auto& [api, calls] : apis)
    if (api.rfind("cu", 0) == 0 && api.rfind("cuda", 0) != 0) n += calls.first;
  return n;
}

std::string PairEntry::RateBasis() const {
  if (timed_calls == 0) return coll.timed_calls ? "collectives, NCCL kernel timers" : "";
  if (kernel_timed_calls == timed_calls) return "NCCL kernel timers";
  if (group_timed_calls == 0) return "own events";
  return group_timed_calls == timed_calls ? "group" : "own events and group";
}

struct ReportBuilder::State {
  struct Who {
    std::string host, bus;
    int cuda = -1;  // the rank's CUDA ordinal in its process
  };
  // NCCL connections of one communicator direction and class, resolved to GPUs in Finish (the
  // ranks' identities may come from logs read later).
  struct NcclConn {
    std::set<std::string> transports;
    int channels = 0;
    bool from_log = false, from_trace = false;
    NcclConn& operator+=(const NcclConn& o) {
      transports.insert(o.transports.begin(), o.transports.end());
      channels += o.channels;
      from_log |= o.from_log;
      from_trace |= o.from_trace;
      return *this;
    }
  };
  struct P2pOps : Traffic {
    uint64_t group_calls = 0, shared_calls = 0;
  };

  Report rep;
  // Each host's own numbering of its GPUs (nvidia-smi's index, by bus id; keyed by the host's whole
  // name, as every host here is): the preflight blocks' (NVML's index, or the PCI order of every GPU on the
  // node when NVML did not answer). A host without one is numbered in the PCI order of the GPUs of
  // a process that saw them all (no CUDA_VISIBLE_DEVICES in its environment); else its GPUs are
  // named by bus id. Never by a process's CUDA ordinal.
  std::map<std::string, std::map<std::string, PreflightGpu>> node_gpus;
  std::map<std::string, std::set<std::string>> all_visible;
  std::map<Key, PairEntry> cuda_pairs;
  std::map<std::pair<uint64_t, int>, NcclOpSummary> ops;
  // ncclSend bytes per (host, pid, comm pointer, peer rank): attributed to a pair in Finish.
  std::map<std::tuple<std::string, int, uint64_t, int>, P2pOps> sends;
  std::map<std::pair<std::string, int>, Who> who;  // (communicator key, rank) -> GPU
  // (host, pid, comm pointer) -> (communicator key, rank): joins trace records to log lines.
  std::map<std::tuple<std::string, int, uint64_t>, std::pair<std::string, int>> comm_of;
  std::map<std::tuple<std::string, int, int, int>, NcclConn> nccl_conns;  // (comm key, src, dst, class)
  std::map<std::string, int> process_keys;  // ProcessCommKey -> its communicator's size (RekeyByTraces)
  std::map<std::string, Refusal> first_refusal;  // per host: NCCL's own reason for refusing P2P
  // One process's NCCL view as its trace recorded it (its communicators' records and the connection
  // lines the shim read, P2PTRACE_RECORD_NCCL_CONN), used in Finish when no log read holds a
  // connection line the process logged: its log file is missing. A few entries per connection.
  struct TraceConns {
    std::string host;
    int pid = 0;
    size_t process = 0;  // its index in rep.processes
    std::map<std::pair<std::string, int>, Who> who;
    std::map<std::tuple<std::string, int, uint64_t>, std::pair<std::string, int>> comm_of;
    std::map<std::tuple<std::string, int, int, int>, NcclConn> conns;
    std::string refusal_kind, refusal_evidence;  // NCCL_P2P_DISABLE / NCCL_P2P_LEVEL=LOC in its environment
  };
  std::vector<TraceConns> trace_conns;
  // NCCL's kernel timers (NCCL_KERNEL records), keyed by the communicator's commId ("0x…", the key
  // of its connections): send/recv by (commId, sending rank, receiving rank), as the sender and as
  // the receiver timed them; collectives by (commId, rank, nranks, api, algo, channel mask).
  std::map<std::tuple<std::string, int, int>, TraceFold::KernelTimes> kernel_sends, kernel_recvs;
  std::map<std::tuple<std::string, int, int, int, int, uint64_t>, TraceFold::KernelTimes> kernel_colls;
  // Each ring's next hop: (commId, channel, rank) -> (the line that said it, next rank). A rank's
  // first connection of a channel (index 0) is its ring's; its tree's come later in its log.
  std::map<std::tuple<std::string, int, int>, std::pair<uint64_t, int>> ring_next;
  // (host, pid, comm pointer) -> the communicator's id hash (its trace's init record): with comm_of,
  // names a ring's communicator as the operations name it.
  std::map<std::tuple<std::string, int, uint64_t>, uint64_t> id_hash_of;
  void AddRingHop(const std::string& key, int channel, int conn_index, int src, int dst, const std::string& direction,
                  uint64_t line) {
    if (channel < 0 || conn_index > 0 || direction == "receive" || src == dst) return;
    auto [it, fresh] = ring_next.try_emplace({key, channel, src}, line, dst);
    if (!fresh && line < it->second.first) it->second = {line, dst};
  }
  void FinishKernelTimes(const std::map<std::tuple<std::string, int, int>, std::pair<int, PairEntry*>>& by_ranks);
  void FinishRings();
  void FinishOpKernelTimes();
  std::map<std::string, uint64_t> OpComms() const;
  // NCCL calls that returned an error, by (api, ncclResult_t): how many, and by whom.
  struct NcclFailure {
    uint64_t calls = 0;
    std::set<int> ranks;
    std::vector<std::string> processes;  // "node0 pid 4711" of rank-less processes (a few)
  };
  std::map<std::pair<int, int>, NcclFailure> nccl_failures;
  // Why NCCL failed, from its WARN lines (core/nccl_failures.h), one per cause over every log.
  std::vector<p2ptrace::NcclFailure> nccl_causes;
  // Per host, from the environment of a process whose log is missing: a setting that takes P2P
  // away (the refusal kind, the evidence), standing in for NCCL's `… set by environment` line.
  std::map<std::string, std::pair<std::string, std::string>> env_refusal;
  std::set<std::pair<std::string, int>> logged;  // (host, pid) of every connection line read from a log
  // NCCL prints a host up to its first dot (gpu01 of gpu01.cluster.local); every key here holds the
  // whole name, as traces do. (printed host, pid) -> the traced processes' whole host names.
  std::map<std::pair<std::string, int>, std::vector<std::string>> traced_hosts;
  // The whole host name of a log line's (printed host, pid): the traced process's; where two hosts
  // share their first label and a pid, the one the log file is named after (`hint`, the tap's
  // nccl.<host>.<pid>.log); a process no trace holds keeps the printed name.
  std::string WholeHost(const std::string& printed, int pid, const std::string& hint) const {
    auto it = traced_hosts.find({printed, pid});
    if (it == traced_hosts.end()) return printed;
    for (const std::string& h : it->second)
      if (h == hint) return h;
    return it->second.front();
  }
  // Each host's preflight: its pairs (the first process's prediction of a pair stands) and warnings.
  struct HostPreflight {
    std::string boot_id;
    bool nvml = false;  // NVML answered the probe: a PCIe label then means no NVLink
    std::map<std::pair<std::string, std::string>, std::string> links;  // (bus, bus), both orders -> "NV6"
    std::vector<PreflightPair> pairs;
    std::vector<std::string> warnings;
  };
  std::map<std::string, HostPreflight> preflight;  // by the trace's host
  // Call sites by their frames (one text per site over all processes), their pairs by (host, src bus,
  // dst bus, transport) until the GPUs' indices are known in Finish.
  struct SiteTotals {
    CallSiteSummary s;
    std::map<std::tuple<std::string, std::string, std::string, int>, std::pair<uint64_t, uint64_t>> pairs;
  };
  std::map<std::string, SiteTotals> sites;

  GpuRef Ref(const std::string& host, const std::string& bus, int cuda = -1) const {
    GpuRef g{host, bus, -1};
    g.cuda = cuda;
    if (auto n = node_gpus.find(host); n != node_gpus.end())
      if (auto it = n->second.find(bus); it != n->second.end()) {
        g.gpu = it->second.index;
        g.name = it->second.name;
        return g;
      }
    if (auto v = all_visible.find(host); v != all_visible.end())
      if (auto it = v->second.find(bus); it != v->second.end()) g.gpu = static_cast<int>(std::distance(v->second.begin(), it));
    return g;
  }
  TraceFold fold;  // the trace being read
  StoppedFold stop_fold;  // the same trace, for the stopped finding
  std::map<std::string, StoppedComm> stop_comms;
  double stall_seconds = 60;
  std::vector<PairPath> StopPaths() const;
  void AddNcclOps(const Trace& t, const TraceFold& f);
  void AddCudaPairs(const Trace& t, const TraceFold& f);
  void AddCallSites(const Trace& t, const TraceFold& f);
  void AddTraceConns(const Trace& t, const TraceFold& f);
  void FinishTraceConns();
  void RekeyByTraces();
  void FinishCallSites();
  void FinishNcclPairs();
  void FinishCosts();
  void AddPreflight(const std::string& host, const PreflightBlock& b);
  const PreflightPair* PredictionFor(const PairEntry& e) const;
  void ApplyPreflight(PairEntry& e) const;
  void NameLink(PairEntry& e) const;
  const HostPreflight* PreflightOf(const std::string& host) const;
};

ReportBuilder::ReportBuilder(std::string path) : s_(std::make_unique<State>()) { s_->rep.path = std::move(path); }
ReportBuilder::~ReportBuilder() = default;

void ReportBuilder::AddProblem(std::string problem) { s_->rep.problems.push_back(std::move(problem)); }
void ReportBuilder::AddPartial(std::string partial) { s_->rep.partial.push_back(std::move(partial)); }

void ReportBuilder::AddTrace(const Trace& t) {
  for (const TraceRecord& r : t.records) AddRecord(r);
  EndTrace(t);
}

void ReportBuilder::SetStallSeconds(double seconds) { s_->stall_seconds = seconds; }

void ReportBuilder::AddRecord(const TraceRecord& r) {
  s_->fold.Add(r);
  s_->stop_fold.Add(r);
}
void ReportBuilder::AbandonTrace() {
  s_->fold = TraceFold{};
  s_->stop_fold = StoppedFold{};
}

void ReportBuilder::EndTrace(const Trace& t) {
  TraceFold f = std::move(s_->fold);
  s_->fold = TraceFold{};
  f.Finish();
  s_->rep.stopped.processes.push_back(
      s_->stop_fold.Finish(t, &s_->stop_comms, s_->rep.stopped.processes.size()));
  s_->stop_fold = StoppedFold{};
  const p2ptrace_file_header& h = t.header;
  ProcessInfo p;
  p.rank = h.rank;
  // NCCL's ranks: every communicator's, and the job's from the largest communicator (the world;
  // of equal ones the lowest hash, so that a re-created world gives the same answer).
  const TraceFold::CommSeen* world = nullptr;
  for (const auto& [ptr, c] : f.comm) {
    if (c.rank < 0) continue;
    p.nccl_ranks.push_back({fmt::format("{:016x}", c.id_hash), c.rank, c.nranks, c.device,
                            c.device >= 0 ? t.BusId(c.device) : "", -1});
    if (world == nullptr || std::tie(c.nranks, world->id_hash) > std::tie(world->nranks, c.id_hash)) world = &c;
  }
  std::sort(p.nccl_ranks.begin(), p.nccl_ranks.end(),
            [](const NcclRank& a, const NcclRank& b) { return std::tie(a.comm, a.rank) < std::tie(b.comm, b.rank); });
  p.nccl_ranks.erase(std::unique(p.nccl_ranks.begin(), p.nccl_ranks.end(),
                                 [](const NcclRank& a, const NcclRank& b) { return a.comm == b.comm && a.rank == b.rank; }),
                     p.nccl_ranks.end());
  if (world != nullptr) {
    p.rank_comm = fmt::format("{:016x}", world->id_hash);
    for (const NcclRank& r : p.nccl_ranks)
      if (r.comm == p.rank_comm) p.ranks.push_back(r.rank);
    p.rank = p.ranks.size() == 1 ? p.ranks[0] : -1;
  } else if (h.rank >= 0) {
    p.ranks.push_back(h.rank);
  }
  p.pid = h.pid;
  p.host = t.Host();
  s_->traced_hosts[{std::string(NcclLogHost(p.host)), p.pid}].push_back(p.host);
  p.file = t.path;
  p.exe = std::string(h.exe, strnlen(h.exe, sizeof h.exe));
  p.state = StateText(h);
  if (h.state == P2PTRACE_STATE_FATAL_SIGNAL) p.fatal_signal = h.fatal_signal;
  // Without CUDA_VISIBLE_DEVICES a process sees every GPU of its node.
  bool sees_all = t.Env("CUDA_VISIBLE_DEVICES").empty();
  for (int d = 0; d < std::min(h.device_count, P2PTRACE_MAX_DEVICES); ++d) {
    p.bus_ids.push_back(t.BusId(d));
    if (sees_all && !NormalizeBusId(t.BusId(d)).empty()) s_->all_visible[p.host].insert(NormalizeBusId(t.BusId(d)));
  }
  p.runtime_version = h.cuda_runtime_version;
  p.driver_version = h.cuda_driver_version;
  p.nccl_version = h.nccl_version;  // zero in files older than minor 1 (a zero-filled header page)
  p.capture_flags = h.capture_flags;
  p.dropped_records = h.dropped_records;
  p.nccl_log = NcclLogStatus(t);
  p.job_id = std::string(h.job_id, strnlen(h.job_id, sizeof h.job_id));
  p.start_realtime_ns = h.start_realtime_ns;
  p.nccl_used = f.nccl_used;
  // Only when no communicator of the process came to be: a retried init that succeeded is no failed init.
  for (const auto& [k, n] : f.nccl_failures)
    if (p.nccl_init_failed.empty() && f.comm.empty() && IsNcclCommCreation(k.first))
      p.nccl_init_failed = fmt::format("{} returned {} ({})", NcclApiName(k.first), k.second, NcclResultName(k.second));
  for (const auto& [api, n] : f.graph_alterations) p.graph_alterations[std::string(ApiName(api))] += n;
  // A process that never exited ran at least to its last record.
  uint64_t last_ns = std::max(h.end_monotonic_ns, f.last_ns);
  if (last_ns > h.start_monotonic_ns) p.seconds = static_cast<double>(last_ns - h.start_monotonic_ns) * 1e-9;
  DescribeCapture(&p);
  for (const auto& [kind, text] : t.text_blocks) {
    if (kind != P2PTRACE_TEXT_PREFLIGHT) continue;
    Expected<PreflightBlock> b = ParsePreflight(text);
    if (b.ok()) s_->AddPreflight(p.host, *b);
    else s_->rep.partial.push_back(fmt::format("{}: preflight block unreadable ({})", t.path, b.error().message));
  }
  for (const auto& [k, n] : f.nccl_failures) {
    State::NcclFailure& nf = s_->nccl_failures[k];
    nf.calls += n;
    if (p.rank >= 0) nf.ranks.insert(p.rank);
    else if (nf.processes.size() < 8) nf.processes.push_back(fmt::format("{} pid {}", p.host, p.pid));
  }
  s_->rep.processes.push_back(std::move(p));
  s_->AddCudaPairs(t, f);
  s_->AddNcclOps(t, f);
  s_->AddCallSites(t, f);
  s_->AddTraceConns(t, f);
}

namespace {
template <size_t N>
std::string Field(const char (&text)[N]) {
  return std::string(text, strnlen(text, N));
}
}  // namespace

// The connection lines the shim recorded, keyed as AddNcclLog keys a log's: the communicator by its
// commId (else the process's key), its ranks by the trace's communicator records.
void ReportBuilder::State::AddTraceConns(const Trace& t, const TraceFold& f) {
  if (t.nccl_connections.empty()) return;
  TraceConns tc;
  tc.host = t.Host();
  tc.pid = t.header.pid;
  tc.process = rep.processes.size() - 1;
  for (const p2ptrace_nccl_conn_record& c : t.nccl_connections) {
    if (c.dst_rank < 0) continue;  // CollNet lines name no peer
    std::string comm = Field(c.comm);
    // The logging rank's communicator: by its pointer, or the process's only one when the log did not say.
    auto ci = !comm.empty() ? f.comm.find(ParsePointer(comm)) : f.comm.size() == 1 ? f.comm.begin() : f.comm.end();
    if (ci == f.comm.end() || ci->second.rank < 0) continue;
    std::string comm_id = Field(c.comm_id);
    std::string key = comm_id.empty() ? ProcessCommKey(tc.host, tc.pid, ci->first, ci->second.nranks) : comm_id;
    if (comm_id.empty()) process_keys.emplace(key, ci->second.nranks);
    std::string bus = NormalizeBusId(t.BusId(ci->second.device));
    tc.who.try_emplace({key, ci->second.rank}, Who{tc.host, bus, ci->second.device});
    tc.comm_of.try_emplace({tc.host, tc.pid, ci->first}, std::pair{key, ci->second.rank});
    AddRingHop(key, c.channel, c.conn_index, c.src_rank, c.dst_rank,
               c.direction == P2PTRACE_NCCL_CONN_RECEIVE ? "receive" : "", c.line);
    NcclConn& nc = tc.conns[{key, c.src_rank, c.dst_rank, c.transport_class}];
    nc.transports.insert(Field(c.transport));
    ++nc.channels;
    nc.from_trace = true;
  }
  auto zero = [](const std::string& v) { return v == "0" || v == "00"; };
  if (std::string v = t.Env("NCCL_P2P_DISABLE"); !v.empty() && !zero(v)) {
    tc.refusal_kind = "env-p2p-disabled";
    tc.refusal_evidence = fmt::format("NCCL_P2P_DISABLE={} in the environment {} recorded (NCCL's log line is missing)",
                                      v, t.path);
  } else if (std::string l = t.Env("NCCL_P2P_LEVEL"); l == "LOC" || zero(l)) {
    tc.refusal_kind = "env-p2p-level";
    tc.refusal_evidence = fmt::format("NCCL_P2P_LEVEL={} in the environment {} recorded (NCCL's log line is missing)",
                                      l, t.path);
  }
  if (!tc.conns.empty()) trace_conns.push_back(std::move(tc));
}

// NCCL before 2.16 printed no commId, so its lines key a communicator by the printing process
// (ProcessCommKey) and the ranks of different processes never meet. Each rank's trace recorded its
// communicator's commId hash at init: every process key whose communicator a trace knows becomes
// that, as a newer NCCL's lines would have said. The rest (no init recorded: an NCCL linked into
// the program, out of the shim's reach) are joined as `explain` joins such a paste: the process
// keys of one size whose ranks never repeat are one communicator.
void ReportBuilder::State::RekeyByTraces() {
  std::map<std::string, std::string> to;
  for (const auto& [where, key] : comm_of)
    if (process_keys.count(key.first))
      if (auto h = id_hash_of.find(where); h != id_hash_of.end() && h->second != 0)
        to.emplace(key.first, fmt::format("{:#x}", h->second));
  std::map<int, std::vector<std::string>> by_size;
  for (const auto& [key, nranks] : process_keys)
    if (!to.count(key) && nranks > 1) by_size[nranks].push_back(key);
  for (const auto& [nranks, keys] : by_size) {
    if (keys.size() < 2) continue;
    std::map<int, int> seen;  // rank -> how many keys hold it
    for (const auto& [k, w] : who)
      if (std::binary_search(keys.begin(), keys.end(), k.first)) ++seen[k.second];
    if (std::any_of(seen.begin(), seen.end(), [](const auto& r) { return r.second > 1; })) continue;
    for (const std::string& k : keys) to.emplace(k, fmt::format("size:{}", nranks));
  }
  if (to.empty()) return;
  auto key_of = [&](const std::string& k) -> const std::string& {
    auto it = to.find(k);
    return it == to.end() ? k : it->second;
  };
  for (auto& [where, key] : comm_of) key.first = key_of(key.first);
  std::map<std::pair<std::string, int>, Who> who_now;
  for (auto& [k, w] : who) who_now.try_emplace({key_of(k.first), k.second}, std::move(w));
  who = std::move(who_now);
  std::map<std::tuple<std::string, int, int, int>, NcclConn> conns_now;
  for (auto& [k, nc] : nccl_conns)
    conns_now[{key_of(std::get<0>(k)), std::get<1>(k), std::get<2>(k), std::get<3>(k)}] += nc;
  nccl_conns = std::move(conns_now);
  std::map<std::tuple<std::string, int, int>, std::pair<uint64_t, int>> ring_now;
  for (auto& [k, v] : ring_next) ring_now.try_emplace({key_of(std::get<0>(k)), std::get<1>(k), std::get<2>(k)}, v);
  ring_next = std::move(ring_now);
}

// The recorded connections of every process no log spoke for; what the logs said stands.
void ReportBuilder::State::FinishTraceConns() {
  for (TraceConns& tc : trace_conns) {
    if (logged.count({tc.host, tc.pid})) continue;
    for (auto& [k, w] : tc.who) who.try_emplace(k, std::move(w));
    for (auto& [k, v] : tc.comm_of) comm_of.try_emplace(k, std::move(v));
    for (auto& [k, nc] : tc.conns) nccl_conns[k] += nc;  // from_trace: set on every recorded one
    if (!tc.refusal_kind.empty()) env_refusal.try_emplace(tc.host, tc.refusal_kind, tc.refusal_evidence);
    ProcessInfo& p = rep.processes[tc.process];
    p.nccl_log = "trace records: " + std::string(p.nccl_log == "user file" ? "the user's NCCL_DEBUG_FILE" : "the tapped log") +
                 " is not in the trace directory";
    DescribeCapture(&p);
    ++rep.nccl_from_traces;
  }
  std::vector<TraceConns>().swap(trace_conns);
}

// The file's call sites, by their frames: the same site in every rank of a program is one.
void ReportBuilder::State::AddCallSites(const Trace& t, const TraceFold& f) {
  const std::string host = t.Host();
  for (const auto& [id, u] : f.sites) {
    const CallSite* cs = t.FindCallSite(id);
    std::vector<std::string> frames =
        cs != nullptr && !cs->frames.empty()
            ? cs->frames
            : std::vector<std::string>{fmt::format("[site {} not described in {}: the process ended before writing it]", id, t.path)};
    SiteTotals& st = sites[fmt::format("{}", fmt::join(frames, "\n"))];
    CallSiteSummary& s = st.s;
    if (s.frames.empty()) s.frames = std::move(frames);
    s.copies += u.copies;
    s.bytes += u.bytes;
    s.host_staged_bytes += u.host_staged_bytes;
    s.errors += u.errors;
    s.nccl_ops += u.nccl_ops;
    s.nccl_bytes += u.nccl_bytes;
    s.nccl_errors += u.nccl_errors;
    for (int api : u.nccl_apis) s.nccl_operations.insert(std::string(NcclApiName(api)));
    for (const auto& [k, v] : u.pairs) {
      auto& p = st.pairs[{host, DeviceName(t, std::get<0>(k)), DeviceName(t, std::get<1>(k)), std::get<2>(k)}];
      p.first += v.first;
      p.second += v.second;
    }
    if (t.header.rank >= 0) s.ranks.insert(t.header.rank);
    ++s.processes;
  }
}

// GPU indices for the sites' pairs; the sites most host-staged bytes first, then most bytes.
void ReportBuilder::State::FinishCallSites() {
  for (auto& [key, st] : sites) {
    for (const auto& [k, v] : st.pairs) {
      const auto& [host, src, dst, transport] = k;
      st.s.pairs.push_back({Ref(host, src), Ref(host, dst), transport, v.first, v.second});
    }
    std::sort(st.s.pairs.begin(), st.s.pairs.end(), [](const CallSiteSummary::Pair& a, const CallSiteSummary::Pair& b) {
      return std::tie(a.src.host, a.src.gpu, a.dst.gpu, a.src.bus_id, a.dst.bus_id, a.transport) <
             std::tie(b.src.host, b.src.gpu, b.dst.gpu, b.src.bus_id, b.dst.bus_id, b.transport);
    });
    rep.call_sites.push_back(std::move(st.s));
  }
  std::stable_sort(rep.call_sites.begin(), rep.call_sites.end(), [](const CallSiteSummary& a, const CallSiteSummary& b) {
    return std::make_tuple(a.host_staged_bytes, a.bytes + a.nccl_bytes, a.copies + a.nccl_ops) >
           std::make_tuple(b.host_staged_bytes, b.bytes + b.nccl_bytes, b.copies + b.nccl_ops);
  });
  for (size_t i = 0; i < rep.call_sites.size(); ++i) rep.call_sites[i].id = static_cast<int>(i + 1);
}

// Copies between this process's devices: exact totals from the counter table, causes from its
// peer records (first process to show a host-staged pair explains it).
void ReportBuilder::State::AddCudaPairs(const Trace& t, const TraceFold& fold) {
  const p2ptrace_file_header& h = t.header;
  static const PeerFacts kNone;
  const std::string host = t.Host();
  // The counters hold the copies that ran when called; CUDA graph replays of captured copies come
  // from the fold (by the copy records' transport: host-staged, else the pair's direct path).
  std::map<uint32_t, p2ptrace_pair_counters> cells;
  std::map<uint32_t, TraceFold::CapturedCopy> replays;
  for (const PairCounter& pc : t.counters) cells[pc.index] = pc.c;
  for (const auto& [k, v] : fold.replayed) {
    const auto& [a, b, transport] = k;
    if (a < 0 || b < 0 || static_cast<uint32_t>(a) >= h.max_devices || static_cast<uint32_t>(b) >= h.max_devices) continue;
    uint32_t index = (static_cast<uint32_t>(a) * h.max_devices + static_cast<uint32_t>(b)) * 2 +
                     (transport == P2PTRACE_TRANSPORT_HOST_STAGED ? 1 : 0);
    p2ptrace_pair_counters& c = cells[index];
    c.calls += v.calls, c.bytes += v.bytes;
    replays[index].calls += v.calls, replays[index].bytes += v.bytes;
  }
  for (const auto& [index, c] : cells) {
    uint32_t cell = index / 2;
    int a = static_cast<int>(cell / h.max_devices), b = static_cast<int>(cell % h.max_devices), path_kind = index % 2;
    if (a == b || (c.calls == 0 && c.errors == 0)) continue;
    int direct = h.direct_transport[a][b] ? int{h.direct_transport[a][b]} : int{P2PTRACE_TRANSPORT_P2P};
    int transport = path_kind == 0 ? direct : int{P2PTRACE_TRANSPORT_HOST_STAGED};
    GpuRef src{host, DeviceName(t, a), -1}, dst{host, DeviceName(t, b), -1};
    src.cuda = a, dst.cuda = b;
    PairEntry& e = cuda_pairs[Key{host, src.bus_id, dst.bus_id, transport}];
    // The CUDA ordinals, while every process agrees on them (-1 once two differ).
    if (e.calls == 0 && e.errors == 0) e.src = src, e.dst = dst;
    else if (e.src.cuda != a || e.dst.cuda != b) e.src.cuda = e.dst.cuda = -1;
    e.transport = transport;
    e += Traffic{c.calls, c.bytes, c.errors, c.timed_calls, c.timed_bytes, c.timed_ns};
    if (auto r = replays.find(index); r != replays.end()) e.graph_calls += r->second.calls, e.graph_bytes += r->second.bytes;
    e.ranks.insert(h.rank);
    if (auto ai = fold.copy_apis.find({a, b, path_kind}); ai != fold.copy_apis.end())
      for (const auto& [api, n] : ai->second) {
        auto& sum = e.apis[std::string(ApiName(api))];
        sum.first += n.first;
        sum.second += n.second;
      }
    // What the node allows: NVML's P2P status, else the application's own capability query.
    int status = h.nvml_p2p_status[a][b];
    auto fi = fold.facts.find({std::min(a, b), std::max(a, b)});
    const PeerFacts& f = fi != fold.facts.end() ? fi->second : kNone;
    bool p2p_possible = status == 1 || (status == 0 && f.can_access == 1);
    bool p2p_impossible = (status > 1) || (status == 0 && f.can_access == 0);
    if (p2p_possible) e.expected = direct;
    else if (p2p_impossible) e.expected = P2PTRACE_TRANSPORT_HOST_STAGED;
    if (transport != P2PTRACE_TRANSPORT_HOST_STAGED || !e.causes.empty()) continue;
    if (p2p_possible) e.fallback = true;
    PairApis apis;
    if (auto ai = fold.copy_apis.find({a, b, path_kind}); ai != fold.copy_apis.end())
      for (const auto& [api, n] : ai->second) (IsDriverApi(api) ? apis.driver : apis.runtime) = true;
    e.causes.push_back(HostStagedCause(c, src, dst, status, f, p2p_possible, p2p_impossible, apis));
  }
}

// NCCL operations: per (communicator, operation) calls, bytes and the timed subset; ncclSend per
// peer, for the pair it crossed.
void ReportBuilder::State::AddNcclOps(const Trace& t, const TraceFold& f) {
  const std::string host = t.Host();
  for (const auto& [k, a] : f.ops) {
    auto ci = f.comm.find(k.first);
    uint64_t hash = ci != f.comm.end() ? ci->second.id_hash : 0;
    NcclOpSummary& s = ops[{hash, k.second}];
    if (s.op.empty()) {
      s.comm = fmt::format("{:016x}", hash);
      s.op = std::string(NcclApiName(k.second));
      s.api = k.second;
    }
    int nranks = ci != f.comm.end() ? ci->second.nranks : 0;
    s.nranks = std::max(s.nranks, nranks);
    if (ci != f.comm.end() && ci->second.rank >= 0) s.ranks.insert(ci->second.rank);  // NCCL's rank
    else s.ranks.insert(t.header.rank);
    // The trace holds NCCL's count × type size; nccl-tests' size S is n of them for the operations
    // whose count is one rank's block (tools/report/nccl_bw.h).
    const int api = k.second;  // clang 14 cannot capture a structured binding
    auto size = [&](uint64_t count_bytes) { return static_cast<uint64_t>(NcclTestsSize(api, count_bytes, nranks)); };
    s += Traffic{a.calls, size(a.bytes), a.errors, a.timed_calls, size(a.timed_bytes), a.timed_ns};
    s.group_timed_calls += a.group_calls;
    s.timings += a.timings;
    s.graph_calls += a.graph_calls;
    s.graph_bytes += size(a.graph_bytes);
  }
  auto add = [](TraceFold::KernelTimes& to, const TraceFold::KernelTimes& from) {
    to.calls += from.calls, to.bytes += from.bytes, to.ns += from.ns;
  };
  for (const auto& [ptr, seen] : f.comm) id_hash_of[{host, t.header.pid, ptr}] = seen.id_hash;
  auto comm_id = [](uint64_t hash) { return fmt::format("{:#x}", hash); };  // as NCCL prints commId
  for (const auto& [k, v] : f.kernel_sends) add(kernel_sends[{comm_id(std::get<0>(k)), std::get<1>(k), std::get<2>(k)}], v);
  for (const auto& [k, v] : f.kernel_recvs) add(kernel_recvs[{comm_id(std::get<0>(k)), std::get<1>(k), std::get<2>(k)}], v);
  for (const auto& [k, v] : f.kernel_colls)
    add(kernel_colls[{comm_id(k.comm_hash), k.rank, k.nranks, k.api, k.algo, k.channel_mask}], v);
  for (const auto& [k, a] : f.sends) {
    P2pOps& p = sends[{host, t.header.pid, k.first, k.second}];
    p += Traffic{a.calls, a.bytes, 0, a.timed_calls, a.timed_bytes, a.timed_ns};
    p.group_calls += a.group_calls;
    p.shared_calls += a.shared_calls;
  }
}

void ReportBuilder::AddNcclLog(const NcclLogFile& f) {
  ++s_->rep.nccl_logs;
  if (!f.log.nccl_version.empty()) s_->rep.nccl_versions.insert(f.log.nccl_version);
  const std::string hint = NcclLogFileHost(std::filesystem::path(f.path).filename().string());
  auto whole = [&](const NcclLogger& l) { return s_->WholeHost(l.host, l.pid, hint); };
  for (const RankIdentity& id : f.log.ranks) {
    RankIdentity named = id;  // CommKey's fallback key names the host too
    named.host = s_->WholeHost(id.host, id.pid, hint);
    s_->who[{CommKey(named), id.rank}] = State::Who{named.host, BusFromNccl(id.bus_id), id.cuda_dev};
    if (id.comm_key.empty() && id.comm_id.empty()) s_->process_keys.emplace(CommKey(named), id.nranks);
    if (!id.comm.empty()) s_->comm_of[{named.host, id.pid, ParsePointer(id.comm)}] = {CommKey(named), id.rank};
  }
  for (const Connection& c : f.log.connections) {
    if (c.dst_rank < 0) continue;  // CollNet lines name no peer
    const RankIdentity* found = f.log.IdentityOf(c);
    if (found == nullptr) continue;
    RankIdentity me = *found;
    me.host = s_->WholeHost(me.host, me.pid, hint);
    s_->AddRingHop(CommKey(me), c.channel, c.conn_index, c.src_rank, c.dst_rank, c.direction, c.line);
    State::NcclConn& nc = s_->nccl_conns[{CommKey(me), c.src_rank, c.dst_rank, c.transport_class}];
    nc.transports.insert(c.transport);
    ++nc.channels;
    nc.from_log = true;
    s_->logged.insert({whole(c.logger), c.logger.pid});
  }
  for (const Refusal& r : f.log.refusals) s_->first_refusal.try_emplace(whole(r.logger), r);
  // One log at a time (one per process): a cause seen in several logs is one, its lines counted.
  for (p2ptrace::NcclFailure& nf : DiagnoseNcclFailures({NamedNcclLog{f.path, &f.log}})) {
    auto same = std::find_if(s_->nccl_causes.begin(), s_->nccl_causes.end(),
                             [&](const p2ptrace::NcclFailure& x) { return x.cause == nf.cause; });
    if (same == s_->nccl_causes.end()) {
      s_->nccl_causes.push_back(std::move(nf));
      continue;
    }
    same->lines += nf.lines;
    for (std::string& e : nf.evidence)
      if (same->evidence.size() < kMaxNcclFailureEvidence) same->evidence.push_back(std::move(e));
  }
}

// NCCL's pairs: connections resolved to GPUs, the class each should have had, and the ncclSend
// bytes that crossed them.
void ReportBuilder::State::FinishNcclPairs() {
  std::map<std::tuple<std::string, std::string, std::string, std::string, int>, PairEntry> pairs;
  // (comm key, src rank, dst rank) -> the entry of the class with the most connections
  std::map<std::tuple<std::string, int, int>, std::pair<int, PairEntry*>> by_ranks;
  for (const auto& [k, nc] : nccl_conns) {
    const auto& [key, src_rank, dst_rank, cls] = k;
    auto src = who.find({key, src_rank});
    auto dst = who.find({key, dst_rank});
    if (src == who.end() || dst == who.end()) continue;
    // NCCL connects no rank to itself (a send to self is a copy inside the GPU); a line that says
    // so names no link between two GPUs.
    if (src_rank == dst_rank) continue;
    PairEntry& e = pairs[{src->second.host, src->second.bus, dst->second.host, dst->second.bus, cls}];
    e.source = "nccl";
    e.src = Ref(src->second.host, src->second.bus, src->second.cuda);
    e.dst = Ref(dst->second.host, dst->second.bus, dst->second.cuda);
    e.transport = cls;
    e.nccl_transports.insert(nc.transports.begin(), nc.transports.end());
    e.channels += nc.channels;
    bool log = nc.from_log || e.nccl_from == "log" || e.nccl_from == "log+trace";
    bool trace = nc.from_trace || e.nccl_from == "trace" || e.nccl_from == "log+trace";
    e.nccl_from = log && trace ? "log+trace" : log ? "log" : "trace";
    e.ranks.insert(src_rank);
    e.dst_ranks.insert(dst_rank);
    auto& best = by_ranks[{key, src_rank, dst_rank}];
    if (best.second == nullptr || nc.channels > best.first) best = {nc.channels, &e};
  }
  for (const auto& [k, p] : sends) {
    const auto& [host, pid, comm_ptr, peer] = k;
    auto c = comm_of.find({host, pid, comm_ptr});
    if (c == comm_of.end()) continue;
    auto e = by_ranks.find({c->second.first, c->second.second, peer});
    if (e == by_ranks.end()) continue;
    PairEntry& pe = *e->second.second;
    pe += p;
    pe.group_timed_calls += p.group_calls;
    pe.shared_calls += p.shared_calls;
  }
  FinishKernelTimes(by_ranks);
  for (auto it = pairs.begin(); it != pairs.end(); it = pairs.erase(it)) {
    PairEntry& e = it->second;
    bool same_host = e.src.host == e.dst.host;
    if (IsDirect(e.transport)) e.expected = e.transport;
    else if (!same_host && e.transport == P2PTRACE_TRANSPORT_NET_GDR) e.expected = e.transport;
    // NCCL said why it refused P2P on this host: that explains a host or network path there.
    bool host_path = e.transport == P2PTRACE_TRANSPORT_SHM || e.transport == P2PTRACE_TRANSPORT_NET_IB ||
                     e.transport == P2PTRACE_TRANSPORT_NET_GDR || e.transport == P2PTRACE_TRANSPORT_NET_SOCKET;
    // Without NCCL's line (its log missing), the setting as the trace recorded the environment.
    auto refusal = first_refusal.find(e.src.host);
    auto env = env_refusal.find(e.src.host);
    if (host_path && same_host && (refusal != first_refusal.end() || env != env_refusal.end())) {
      std::string id(CauseForNcclRefusal(refusal != first_refusal.end() ? refusal->second.kind : env->second.first));
      std::string evidence = refusal != first_refusal.end() ? fmt::format("NCCL: {}", refusal->second.text) : env->second.second;
      const CauseInfo* info = FindCause(id);
      e.causes.push_back(Cause{id, {evidence}, info ? std::string(info->fix) : "see `p2ptrace doctor` on that node",
                               info ? std::string(info->confirm) : "", "trace"});
      e.fallback = true;
      e.expected = P2PTRACE_TRANSPORT_P2P;  // what NCCL uses between two GPUs of a node when allowed
    }
    rep.pairs.push_back(std::move(e));
  }
}

// NCCL's kernel timers on the pairs: a send/recv pair's own time (the sender's, else the
// receiver's, never both: one transfer) in place of its group's; a ring collective's share on each
// hop its channels' rings took from this rank.
void ReportBuilder::State::FinishKernelTimes(
    const std::map<std::tuple<std::string, int, int>, std::pair<int, PairEntry*>>& by_ranks) {
  for (const auto* side : {&kernel_recvs, &kernel_sends})  // the sender's last: it wins
    for (const auto& [k, t] : *side) {
      auto e = by_ranks.find(k);
      if (e == by_ranks.end() || t.calls == 0) continue;
      PairEntry& pe = *e->second.second;
      pe.timed_calls = pe.kernel_timed_calls = t.calls;
      pe.timed_bytes = t.bytes;
      pe.timed_ns = t.ns;
      pe.group_timed_calls = pe.shared_calls = 0;
    }
  for (const auto& [k, t] : kernel_colls) {
    const auto& [key, rank, nranks, api, algo, mask] = k;
    if (algo != P2PTRACE_NCCL_ALGO_RING || nranks < 2 || mask == 0) continue;
    const int channels = __builtin_popcountll(mask);
    const double edge_bytes = NcclTestsSize(api, t.bytes, nranks) * NcclBusFactor(api, nranks) / channels;
    std::map<int, int> next;  // next rank -> channels of this rank that send to it
    for (int c = 0; c < 64; ++c)
      if ((mask >> c) & 1)
        if (auto n = ring_next.find({key, c, rank}); n != ring_next.end()) ++next[n->second.second];
    for (const auto& [to, n] : next) {
      auto e = by_ranks.find({key, rank, to});
      if (e == by_ranks.end()) continue;
      e->second.second->coll += Traffic{t.calls, 0, 0, t.calls, static_cast<uint64_t>(edge_bytes * n), t.ns};
    }
  }
}

// NCCL's commId -> the id hash the operations are named by (through the processes' communicators).
std::map<std::string, uint64_t> ReportBuilder::State::OpComms() const {
  std::map<std::string, uint64_t> op_comm;
  for (const auto& [where, key] : comm_of)
    if (auto h = id_hash_of.find(where); h != id_hash_of.end()) op_comm.try_emplace(key.first, h->second);
  return op_comm;
}

// An operation kind no event timed (NCCL's kernel timers measured instead: the shim puts no event on
// NCCL's stream then) gets the kernel timers' times: each sampled call from its first channel's
// start to its last channel's stop, on every rank, in nccl-tests' sizes.
void ReportBuilder::State::FinishOpKernelTimes() {
  const std::map<std::string, uint64_t> op_comm = OpComms();
  auto add = [&](const std::string& key, int api, int nranks, const TraceFold::KernelTimes& t) {
    auto h = op_comm.find(key);
    if (h == op_comm.end()) return;
    auto s = ops.find({h->second, api});
    if (s == ops.end() || s->second.timed_calls > s->second.kernel_timed_calls) return;  // events timed it
    int n = nranks > 0 ? nranks : s->second.nranks;
    s->second.timed_calls += t.calls;
    s->second.kernel_timed_calls += t.calls;
    s->second.timings += t.calls;
    s->second.timed_bytes += static_cast<uint64_t>(NcclTestsSize(api, t.bytes, n));
    s->second.timed_ns += t.ns;
  };
  for (const auto& [k, t] : kernel_colls) add(std::get<0>(k), std::get<3>(k), std::get<2>(k), t);
  for (const auto& [k, t] : kernel_sends) add(std::get<0>(k), P2PTRACE_NCCL_Send, 0, t);
  for (const auto& [k, t] : kernel_recvs) add(std::get<0>(k), P2PTRACE_NCCL_Recv, 0, t);
}

// Every ring a timed collective ran on: its hops in order, what each carried, and the hop whose
// class sets the pace. The others are bounded by it, never slow themselves.
void ReportBuilder::State::FinishRings() {
  std::map<std::pair<std::string, int>, int> timed;  // (commId, channel) -> a rank of it that was timed
  for (const auto& [k, t] : kernel_colls) {
    const auto& [key, rank, nranks, api, algo, mask] = k;
    if (algo != P2PTRACE_NCCL_ALGO_RING) continue;
    for (int c = 0; c < 64; ++c)
      if ((mask >> c) & 1) timed.try_emplace({key, c}, rank);
  }
  std::map<std::tuple<std::string, std::string, std::string, std::string>, PairEntry*> pair_of;
  for (PairEntry& e : rep.pairs)
    if (e.source == "nccl" && e.coll.timed_calls > 0) pair_of[{e.src.host, e.src.bus_id, e.dst.host, e.dst.bus_id}] = &e;
  auto pair = [&](const std::string& key, int a, int b) -> PairEntry* {
    auto wa = who.find({key, a}), wb = who.find({key, b});
    if (wa == who.end() || wb == who.end()) return nullptr;
    auto p = pair_of.find({wa->second.host, NormalizeBusId(wa->second.bus), wb->second.host, NormalizeBusId(wb->second.bus)});
    if (p == pair_of.end()) p = pair_of.find({wa->second.host, wa->second.bus, wb->second.host, wb->second.bus});
    return p == pair_of.end() ? nullptr : p->second;
  };
  const std::map<std::string, uint64_t> op_comm = OpComms();
  auto hop_name = [](const PairEntry& e) {
    return fmt::format("{} -> {}{} ({})", GpuName(e.src), e.dst.host == e.src.host ? "" : e.dst.host + " ",
                       GpuName(e.dst), TransportName(e.transport));
  };
  for (const auto& [ring, start] : timed) {
    const auto& [key, channel] = ring;
    RingSummary r;
    r.nccl_comm = key;
    if (auto h = op_comm.find(key); h != op_comm.end()) r.comm = fmt::format("{:016x}", h->second);
    r.channel = channel;
    std::vector<PairEntry*> hops;
    int at = start;
    std::set<int> seen;
    // From the lowest rank of the ring, so that every rank's ring reads the same.
    for (int guard = 0; guard < 1 << 16 && seen.insert(at).second; ++guard) {
      auto n = ring_next.find({key, channel, at});
      if (n == ring_next.end()) break;
      at = n->second.second;
    }
    int first = seen.empty() ? start : *seen.begin();
    seen.clear();
    for (at = first; seen.insert(at).second;) {
      auto n = ring_next.find({key, channel, at});
      if (n == ring_next.end()) break;
      PairEntry* e = pair(key, at, n->second.second);
      if (e == nullptr) break;
      hops.push_back(e);
      at = n->second.second;
    }
    if (hops.size() < 2) continue;
    PairEntry* slowest = nullptr;
    for (PairEntry* e : hops) {
      r.hops.push_back(hop_name(*e));
      double g = e->CollGbps();
      if (g > 0 && (r.slowest_gbps < 0 || g < r.slowest_gbps)) r.slowest_gbps = g;
      r.fastest_gbps = std::max(r.fastest_gbps, g);
      if (e->expected_gbps_high > 0 && (slowest == nullptr || e->expected_gbps_high < slowest->expected_gbps_high))
        slowest = e;
    }
    // Mixed classes: the hop whose class tops out below another's floor sets the pace.
    bool mixed = slowest != nullptr && std::any_of(hops.begin(), hops.end(), [&](const PairEntry* e) {
                   return e->expected_gbps_low > slowest->expected_gbps_high;
                 });
    if (mixed) {
      r.bounded_by = hop_name(*slowest);
      r.bound_expected_low = slowest->expected_gbps_low;
      r.bound_expected_high = slowest->expected_gbps_high;
      for (PairEntry* e : hops)
        if (e->expected_gbps_low > slowest->expected_gbps_high && e->bounded_by.empty()) e->bounded_by = r.bounded_by;
    }
    rep.rings.push_back(std::move(r));
  }
}

// Each pair against its link's expectation, and what each fallback cost.
void ReportBuilder::State::FinishCosts() {
  // Measured GB/s per (host, src bus, dst bus, class) and per (host, class), for "best".
  std::map<std::tuple<std::string, std::string, std::string, int>, double> measured_pair;
  std::map<std::pair<std::string, int>, std::vector<double>> measured_host;
  for (const PairEntry& e : rep.pairs)
    if (e.Gbps() > 0 && e.src.host == e.dst.host) {
      measured_pair[{e.src.host, e.src.bus_id, e.dst.bus_id, e.transport}] = e.Gbps();
      measured_host[{e.src.host, e.transport}].push_back(e.Gbps());
    }
  for (auto& [k, v] : measured_host) std::sort(v.begin(), v.end());
  // The direct link class the CUDA side saw between two GPUs (NCCL's log says only "P2P").
  std::map<std::tuple<std::string, std::string, std::string>, int> link_class;
  for (const PairEntry& e : rep.pairs)
    if (e.source == "cuda" && IsDirect(e.expected) && e.expected != P2PTRACE_TRANSPORT_P2P)
      link_class[{e.src.host, e.src.bus_id, e.dst.bus_id}] = e.expected;
  rep.lost_seconds = 0;
  for (PairEntry& e : rep.pairs) {
    if (e.expected == P2PTRACE_TRANSPORT_P2P && e.fallback)
      if (auto l = link_class.find({e.src.host, e.src.bus_id, e.dst.bus_id}); l != link_class.end()) e.expected = l->second;
    Bandwidth b = ExpectedBandwidth(e.transport, e.link, 0);
    e.expected_gbps_low = b.low;
    e.expected_gbps_high = b.high;
    e.expected_basis = b.basis;
    if (!e.fallback || e.expected == 0 || e.RatedGbps() <= 0) continue;
    if (auto m = measured_pair.find({e.src.host, e.src.bus_id, e.dst.bus_id, e.expected}); m != measured_pair.end()) {
      e.best_gbps = m->second;
      e.best_basis = "measured on this pair";
    } else if (auto h = measured_host.find({e.src.host, e.expected}); h != measured_host.end()) {
      e.best_gbps = h->second[h->second.size() / 2];
      e.best_basis = fmt::format("median of {}'s {} pairs", e.src.host, TransportName(e.expected));
    } else if (Bandwidth best = ExpectedBandwidth(e.expected, "", 0); best.low > 0) {
      e.best_gbps = best.low;
      e.best_basis = fmt::format("catalog low figure for {}: {}", TransportName(e.expected), best.basis);
    } else {
      continue;
    }
    // The timed calls' measured time less what their bytes would take at `best`: what was measured
    // lost, never more than was measured (untimed bytes are not extrapolated).
    const Traffic& t = e.Rated();
    e.lost_seconds =
        std::max(0.0, static_cast<double>(t.timed_ns) * 1e-9 - static_cast<double>(t.timed_bytes) * 1e-9 / e.best_gbps);
    rep.lost_seconds += e.lost_seconds;
  }
}

void ReportBuilder::State::AddPreflight(const std::string& host, const PreflightBlock& b) {
  HostPreflight& hp = preflight[host];
  if (hp.boot_id.empty()) hp.boot_id = b.boot_id;
  for (const ProbeStep& st : b.steps)
    if (st.name == "NVML" && st.status == "ok") hp.nvml = true;
  auto& gpus = node_gpus[host];
  std::map<int, std::string> bus_of;
  for (const PreflightGpu& g : b.gpus) bus_of[g.index] = NormalizeBusId(g.bus_id);
  for (const PreflightLink& l : b.links)
    if (bus_of.count(l.a) && bus_of.count(l.b)) {
      hp.links.try_emplace({bus_of[l.a], bus_of[l.b]}, l.link);
      hp.links.try_emplace({bus_of[l.b], bus_of[l.a]}, l.link);
    }
  for (const PreflightGpu& g : b.gpus)
    if (std::string bus = NormalizeBusId(g.bus_id); !bus.empty() && g.index >= 0) gpus.try_emplace(bus, g);
  for (const PreflightPair& p : b.pairs)  // blocks written before the "gpu" lines
    for (const auto& [index, bus_id] : {std::pair{p.a, p.bus_a}, std::pair{p.b, p.bus_b}})
      if (std::string bus = NormalizeBusId(bus_id); !bus.empty() && index >= 0 && index < 100)
        gpus.try_emplace(bus, PreflightGpu{index, bus, "", -1});
  // A pair's first prediction stands unless a later one (a later block of the process, after its
  // first copies or NCCL's first operation, or another process's) foresees a fallback it did not.
  for (const PreflightPair& p : b.pairs) {
    auto same = [&](const PreflightPair& q) { return q.a == p.a && q.b == p.b && q.bus_a == p.bus_a && q.bus_b == p.bus_b; };
    auto it = std::find_if(hp.pairs.begin(), hp.pairs.end(), same);
    if (it == hp.pairs.end()) hp.pairs.push_back(p);
    else if (p.fallback && !it->fallback) *it = p;
  }
  for (const std::string& w : b.warnings)
    if (std::find(hp.warnings.begin(), hp.warnings.end(), w) == hp.warnings.end()) hp.warnings.push_back(w);
}

// The preflight's prediction for a report pair (either direction): by host and the two bus ids, else
// by GPU index. The shim numbers another host's (or container's) GPUs from 100 (shim/preflight.cc
// MergeIdentities), so a pair with such a GPU is matched only to a cross-host pair, its local GPU
// on the block's host.
const ReportBuilder::State::HostPreflight* ReportBuilder::State::PreflightOf(const std::string& host) const {
  auto it = preflight.find(host);
  return it == preflight.end() ? nullptr : &it->second;
}

const PreflightPair* ReportBuilder::State::PredictionFor(const PairEntry& e) const {
  constexpr int kForeignIndex = 100;
  auto block = [&](const std::string& host) { return PreflightOf(host); };
  auto bus = [](const std::string& b) { return NormalizeBusId(b); };  // "" for "device3"
  if (e.src.host == e.dst.host) {
    const HostPreflight* hp = block(e.src.host);
    if (hp == nullptr) return nullptr;
    std::string s = bus(e.src.bus_id), d = bus(e.dst.bus_id);
    for (const PreflightPair& p : hp->pairs) {
      if (p.a >= kForeignIndex || p.b >= kForeignIndex) continue;
      std::string a = bus(p.bus_a), b = bus(p.bus_b);
      if (!s.empty() && !d.empty() && !a.empty() && !b.empty()) {
        if ((a == s && b == d) || (a == d && b == s)) return &p;
      } else if (e.src.gpu >= 0 && e.dst.gpu >= 0 &&
                 ((p.a == e.src.gpu && p.b == e.dst.gpu) || (p.a == e.dst.gpu && p.b == e.src.gpu))) {
        return &p;
      }
    }
    return nullptr;
  }
  // Across hosts: the block of either end, its own GPU on that end.
  for (const auto& [local, remote] : {std::pair{&e.src, &e.dst}, std::pair{&e.dst, &e.src}}) {
    const HostPreflight* hp = block(local->host);
    if (hp == nullptr) continue;
    for (const PreflightPair& p : hp->pairs) {
      bool a_foreign = p.a >= kForeignIndex, b_foreign = p.b >= kForeignIndex;
      if (a_foreign == b_foreign) continue;
      const std::string& mine = a_foreign ? p.bus_b : p.bus_a;
      const std::string& theirs = a_foreign ? p.bus_a : p.bus_b;
      if (bus(mine) == bus(local->bus_id) && bus(theirs) == bus(remote->bus_id) && !bus(mine).empty()) return &p;
    }
  }
  return nullptr;
}

// A direct pair's link from the node's facts: NVLink when the probe's link is NV<n>, PCIe P2P when
// it is a PCIe path and NVML answered (it would have named an NVLink). The trace's own class stands
// where it named one; "p2p" stays only where nothing on the node could tell.
void ReportBuilder::State::NameLink(PairEntry& e) const {
  if (e.src.host != e.dst.host) return;
  const HostPreflight* hp = PreflightOf(e.src.host);
  if (hp == nullptr) return;
  // The node's link for the two GPUs (every pair the probe named), else the prediction's.
  if (auto l = hp->links.find({NormalizeBusId(e.src.bus_id), NormalizeBusId(e.dst.bus_id)}); l != hp->links.end())
    e.link = l->second;
  else if (const PreflightPair* p = PredictionFor(e); p != nullptr)
    e.link = p->link;
  if (e.link.empty()) return;
  int cls = e.link.rfind("NV", 0) == 0 ? P2PTRACE_TRANSPORT_NVLINK : hp->nvml ? P2PTRACE_TRANSPORT_PCIE_P2P : 0;
  if (cls == 0) return;
  if (e.transport == P2PTRACE_TRANSPORT_P2P) e.transport = cls;
  if (e.expected == P2PTRACE_TRANSPORT_P2P) e.expected = cls;
}

// The job-start prediction's causes, after the report's own, for a pair on the path the prediction
// foresaw (for an NCCL pair, also one the report already calls a fallback: the prediction says why
// the better path was closed). The report's own view of the expected class stands; the prediction
// fills it only where the report could not tell (NCCL prints no reason for a P2P level it applied).
void ReportBuilder::State::ApplyPreflight(PairEntry& e) const {
  const PreflightPair* p = PredictionFor(e);
  if (p == nullptr) return;
  bool foreseen = p->transport == e.transport;
  if (p->fallback) {
    if (!foreseen && !(e.source == "nccl" && e.fallback)) return;
    if (foreseen && e.expected == 0 && p->best != 0) {
      e.expected = p->best;
      e.fallback = true;
    }
  } else if (!foreseen && !(IsDirect(e.transport) && IsDirect(p->transport))) {
    return;
  }
  // A fallback takes every cause that decided or contributed; a path taken as foreseen that may
  // still crawl or hang (IOMMU/ACS redirecting P2P through the root complex, NVLinks down, a
  // downtrained PCIe link) takes its risks: they are the pair's, not only the job-start line's.
  for (const CauseHit& c : p->causes) {
    if (c.role == "context" || (!p->fallback && c.role != "risk")) continue;
    if (std::any_of(e.causes.begin(), e.causes.end(), [&](const Cause& x) { return x.id == c.id; })) continue;
    const CauseInfo* info = FindCause(c.id);
    Cause cause{c.id, c.evidence, info ? std::string(info->fix) : "see `p2ptrace doctor` on that node",
                info ? std::string(info->confirm) : "", "preflight"};
    if (cause.evidence.empty() && info) cause.evidence.push_back(std::string(info->title));
    e.causes.push_back(std::move(cause));
  }
}

// Each NCCL connection as the stopped finding names an operation's pairs: its communicator as the
// operations name it, its ranks, its path and, where the pair fell back, the causes with their fix.
std::vector<PairPath> ReportBuilder::State::StopPaths() const {
  std::map<std::string, std::string> id_of_key;  // connection key ("0x…" commId) -> 8 hex digits of the id hash
  for (const auto& [where, key] : comm_of)
    if (auto h = id_hash_of.find(where); h != id_hash_of.end()) id_of_key.try_emplace(key.first, fmt::format("{:08x}", h->second >> 32));
  std::map<std::tuple<std::string, std::string, std::string, std::string>, const PairEntry*> nccl_pair;
  for (const PairEntry& e : rep.pairs)
    if (e.source == "nccl") nccl_pair[{e.src.host, e.src.bus_id, e.dst.host, e.dst.bus_id}] = &e;
  std::vector<PairPath> out;
  for (const auto& [k, conn] : nccl_conns) {
    const auto& [key, src, dst, cls] = k;
    auto id = id_of_key.find(key);
    if (id == id_of_key.end()) continue;
    std::string gpus, pair_gpus;
    const PairEntry* pair = nullptr;
    auto a = who.find({key, src}), b = who.find({key, dst});
    if (a != who.end() && b != who.end()) {
      GpuRef ga = Ref(a->second.host, a->second.bus), gb = Ref(b->second.host, b->second.bus);
      pair_gpus = fmt::format("{} {} -> {}{}", ga.host, GpuName(ga), gb.host == ga.host ? "" : gb.host + " ", GpuName(gb));
      gpus = " (" + pair_gpus + ")";
      if (auto it = nccl_pair.find({ga.host, ga.bus_id, gb.host, gb.bus_id}); it != nccl_pair.end()) pair = it->second;
    }
    std::string text = fmt::format("rank {} -> rank {}{} via {} ({})", src, dst, gpus, fmt::join(conn.transports, ", "),
                                   TransportName(cls));
    // Paths known to hang transfers (nccl#2079: ACS redirecting peer writes deadlocked allreduce).
    static const std::map<std::string, int> kHangs = {{"acs-redirect", 6},     {"acs-suspected", 5}, {"nvml-p2p-status", 4},
                                                      {"p2p-degraded", 3},     {"iommu-enabled", 2}, {"virtualized", 1}};
    auto risk_of = [](const Cause& c) {
      auto it = kHangs.find(c.id);
      return it == kHangs.end() ? 0 : it->second;
    };
    int risk = 0;
    if (pair != nullptr && !pair->causes.empty()) {
      std::vector<std::string> ids;
      const Cause* shown = &pair->causes.front();
      for (const Cause& c : pair->causes) {
        ids.push_back(c.id);
        if (risk_of(c) > risk) risk = risk_of(c), shown = &c;
      }
      text += fmt::format(": {}{} — fix ({}): {}", fmt::join(ids, ", "), risk ? ", a path known to hang peer transfers" : "",
                          shown->id, shown->fix);
    }
    out.push_back({id->second, src, dst, std::move(text), std::move(pair_gpus), risk});
  }
  return out;
}

Report ReportBuilder::Finish() {
  State& s = *s_;
  Report& rep = s.rep;
  // Each map node goes as its pair moves out: the pairs are never held twice.
  rep.pairs.reserve(s.cuda_pairs.size() + s.nccl_conns.size());
  for (auto it = s.cuda_pairs.begin(); it != s.cuda_pairs.end(); it = s.cuda_pairs.erase(it)) {
    PairEntry& e = it->second;
    e.src = s.Ref(e.src.host, e.src.bus_id, e.src.cuda);
    e.dst = s.Ref(e.dst.host, e.dst.bus_id, e.dst.cuda);
    rep.pairs.push_back(std::move(e));
  }
  for (ProcessInfo& p : rep.processes) {
    p.gpus.clear();
    for (const std::string& bus : p.bus_ids) p.gpus.push_back(s.Ref(p.host, NormalizeBusId(bus)).gpu);
  }
  for (ProcessInfo& p : rep.processes)
    for (NcclRank& r : p.nccl_ranks)
      if (!r.bus_id.empty()) r.gpu = s.Ref(p.host, NormalizeBusId(r.bus_id)).gpu;
  s.FinishTraceConns();
  s.RekeyByTraces();
  s.FinishNcclPairs();
  s.FinishCallSites();
  s.FinishOpKernelTimes();
  for (auto& [k, op] : s.ops) rep.nccl_ops.push_back(std::move(op));
  for (PairEntry& e : rep.pairs) s.NameLink(e);
  std::sort(rep.pairs.begin(), rep.pairs.end(), [](const PairEntry& x, const PairEntry& y) {
    return std::tie(x.src.host, x.src.gpu, x.src.bus_id, x.dst.host, x.dst.gpu, x.dst.bus_id, x.transport, x.source) <
           std::tie(y.src.host, y.src.gpu, y.src.bus_id, y.dst.host, y.dst.gpu, y.dst.bus_id, y.transport, y.source);
  });
  for (PairEntry& e : rep.pairs) s.ApplyPreflight(e);
  for (ProcessInfo& p : rep.processes)
    for (const auto& [host, hp] : s.preflight)
      if (hp.nvml && host == p.host && !p.links_from_probe) {
        p.links_from_probe = true;
        DescribeCapture(&p);
      }
  for (const auto& [host, hp] : s.preflight) rep.preflight.push_back({host, hp.boot_id, hp.warnings});
  s.FinishCosts();
  s.FinishRings();
  FinishStopped(&rep.stopped, std::move(s.stop_comms), s.StopPaths(), s.stall_seconds);
  if (rep.stopped.present) rep.findings.push_back(StoppedAsFinding(rep.stopped));
  // One finding per cause id, listing its pairs.
  std::map<std::string, Finding> by_cause;
  for (const PairEntry& e : rep.pairs)
    for (const Cause& c : e.causes) {
      Finding& f = by_cause[c.id];
      f.id = c.id;
      if (f.severity != "warning") f.severity = e.fallback ? "warning" : "info";
      f.pairs.push_back(fmt::format("{} {} -> {}{}", e.src.host, GpuName(e.src),
                                    e.dst.host == e.src.host ? "" : e.dst.host + " ", GpuName(e.dst)));
      if (f.evidence.empty()) f.evidence = c.evidence;
      f.fix = c.fix;
    }
  for (auto& [id, f] : by_cause) rep.findings.push_back(std::move(f));
  // Why NCCL failed, in its own words: one finding per cause.
  std::vector<std::string> nccl_causes;
  for (const p2ptrace::NcclFailure& nf : s.nccl_causes) {
    const CauseInfo* info = FindCause(nf.cause);
    Finding f;
    f.id = "nccl-failure";
    f.cause = nf.cause;
    f.severity = info ? std::string(SeverityName(info->severity)) : "error";
    f.title = fmt::format("{}: {}", nf.cause, nf.meaning);
    f.evidence = nf.evidence;
    if (nf.lines > nf.evidence.size()) f.evidence.push_back(fmt::format("… {} more line(s)", nf.lines - nf.evidence.size()));
    f.fix = info ? std::string(info->fix) : "";
    nccl_causes.push_back(nf.cause);
    rep.findings.push_back(std::move(f));
  }
  // NCCL calls that failed: the symptom, with who and how; NCCL's WARN lines say why.
  if (!s.nccl_failures.empty()) {
    Finding f;
    f.id = "nccl-call-failed";
    f.severity = "error";
    std::vector<std::string> what;
    for (const auto& [k, nf] : s.nccl_failures) {
      std::string_view name = NcclResultName(k.second);
      std::string result = name.empty() ? fmt::format("{}", k.second) : fmt::format("{} ({})", name, k.second);
      std::vector<int> ranks(nf.ranks.begin(), nf.ranks.end());
      std::string who = !ranks.empty() ? fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", RankRanges(ranks))
                                       : fmt::format("{}", fmt::join(nf.processes, ", "));
      what.push_back(fmt::format("{} returned {}", NcclApiName(k.first), result));
      f.evidence.push_back(fmt::format("{} returned {} on {} ({} call{})", NcclApiName(k.first), result, who, nf.calls,
                                       nf.calls == 1 ? "" : "s"));
    }
    f.title = fmt::format("NCCL calls failed: {}", fmt::join(what, "; "));
    f.fix = !nccl_causes.empty()
                ? fmt::format("see why in the nccl-failure finding{} ({}): NCCL's own WARN lines",
                              nccl_causes.size() == 1 ? "" : "s", fmt::join(nccl_causes, ", "))
                : "NCCL printed no WARN line p2ptrace could read (the tapped nccl.<host>.<pid>.log files of the trace "
                  "directory hold what it printed); rerun with NCCL_DEBUG=WARN to see its reasons on the job's output";
    rep.findings.push_back(std::move(f));
  }
  return std::move(rep);
}

Report BuildReport(const std::string& path, const LoadedTraces& loaded) {
  ReportBuilder b(path);
  for (const std::string& p : loaded.problems) b.AddProblem(p);
  for (const std::string& p : loaded.partial) b.AddPartial(p);
  for (const Trace& t : loaded.traces) b.AddTrace(t);
  for (const NcclLogFile& f : loaded.nccl_logs) b.AddNcclLog(f);
  return b.Finish();
}

absl::StatusOr<Report> StreamReport(const std::string& path, const StreamOptions& options) {
  ReportBuilder b(path);
  b.SetStallSeconds(options.stall_seconds);
  JobVisitor v;
  // Records go straight into the fold as they are decoded; none is kept.
  v.on_record = [&](const TraceRecord& r) {
    b.AddRecord(r);
    if (options.on_record) options.on_record(r);
  };
  v.on_abandon = [&] {
    b.AbandonTrace();
    if (options.on_abandon) options.on_abandon();
  };
  v.on_trace = [&](Trace&& t) {
    b.EndTrace(t);
    if (options.on_trace) options.on_trace(t);
  };
  v.on_nccl_log = [&](NcclLogFile&& f) { b.AddNcclLog(std::move(f)); };
  v.on_problem = [&](std::string p) { b.AddProblem(p); };
  v.on_partial = [&](std::string p) { b.AddPartial(p); };
  v.progress = options.progress;
  if (absl::Status st = VisitJob(path, v); !st.ok()) return st;
  return b.Finish();
}

ProgressLine::ProgressLine(std::ostream& err, bool enabled, std::string what, std::chrono::steady_clock::time_point started)
    : err_(err), enabled_(enabled), what_(std::move(what)), start_(started), last_(started) {}

void ProgressLine::Update(size_t done, size_t total, const char* unit) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::seconds(1) || (now - last_ < std::chrono::milliseconds(100) && done < total)) return;
  last_ = now;
  shown_ = true;
  err_ << fmt::format("\rp2ptrace: {} {} of {} {} ({:.0f}%)", what_, done, total, unit,
                      total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0)
       << std::flush;
}

void ProgressLine::Clear() {
  if (shown_) err_ << "\r\033[K" << std::flush;  // the progress line gives way to what follows
  shown_ = false;
}

absl::StatusOr<Report> LoadReport(const std::string& path, std::ostream& err, bool err_is_tty, StreamOptions options) {
  ProgressLine progress(err, err_is_tty, "reading",
                        options.started == std::chrono::steady_clock::time_point{} ? std::chrono::steady_clock::now()
                                                                                    : options.started);
  options.progress = progress.Callback();
  absl::StatusOr<Report> rep = StreamReport(path, options);
  progress.Clear();
  if (!rep.ok()) return rep;
  PrintLoadProblems(rep->problems, rep->partial, rep->processes.size(), err);
  if (rep->processes.empty()) return absl::NotFoundError("no usable trace in " + path);
  return rep;
}

std::optional<Report> LoadReportOrSay(const std::string& path, std::string_view who, std::ostream& err,
                                      bool err_is_tty, StreamOptions options) {
  absl::StatusOr<Report> rep = LoadReport(path, err, err_is_tty, std::move(options));
  if (rep.ok()) return std::move(*rep);
  err << who << ": " << Printable(std::string(rep.status().message()), false) << "\n";
  return std::nullopt;
}

}  // namespace p2ptrace::cli
