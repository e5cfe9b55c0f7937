#include "tools/report/builder.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "core/causes.h"
#include "core/preflight_block.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "tools/report/capture.h"
#include "tools/report/gpu_index.h"
#include "tools/report/link_readings.h"
#include "tools/report/nccl_fold.h"
#include "tools/report/node_predictions.h"
#include "tools/report/trace_fold.h"

namespace p2ptrace::cli {
namespace {

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

struct Key {
  std::string host, src, dst;
  int transport;
  bool operator<(const Key& o) const {
    return std::tie(host, src, dst, transport) < std::tie(o.host, o.src, o.dst, o.transport);
  }
};

std::string DeviceName(const Trace& t, int d) {
  std::string bus = t.BusId(d);
  return IsBusId(bus) ? bus : fmt::format("device{}", d);
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

bool IsNet(int transport) {
  return transport == P2PTRACE_TRANSPORT_NET_GDR || transport == P2PTRACE_TRANSPORT_NET_IB ||
         transport == P2PTRACE_TRANSPORT_NET_SOCKET;
}

}  // namespace

struct ReportBuilder::State {
  Report rep;
  GpuIndex gpus;
  NodePredictions predictions;
  NcclFold nccl;
  LinkReadings links;
  std::map<Key, PairEntry> cuda_pairs;
  // Call sites by their frames (one text per site over all processes), their pairs by (host, src bus,
  // dst bus, transport) until the GPUs' indices are known in Finish.
  struct SiteTotals {
    CallSiteSummary s;
    std::map<std::tuple<std::string, std::string, std::string, int>, std::pair<uint64_t, uint64_t>> pairs;
  };
  std::map<std::string, SiteTotals> sites;
  TraceFold fold;  // the trace being read
  StoppedFold stop_fold;  // the same trace, for the stopped finding
  std::map<std::string, StoppedComm> stop_comms;
  double stall_seconds = 60;
  void AddCudaPairs(const Trace& t, const TraceFold& f);
  void AddCallSites(const Trace& t, const TraceFold& f);
  void FinishCallSites();
  void FinishCosts();
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
  p.file = t.path;
  p.exe = std::string(h.exe, strnlen(h.exe, sizeof h.exe));
  p.state = StateText(h);
  if (h.state == P2PTRACE_STATE_FATAL_SIGNAL) p.fatal_signal = h.fatal_signal;
  // Without CUDA_VISIBLE_DEVICES a process sees every GPU of its node.
  bool sees_all = t.Env("CUDA_VISIBLE_DEVICES").empty();
  for (int d = 0; d < std::min(h.device_count, P2PTRACE_MAX_DEVICES); ++d) {
    p.bus_ids.push_back(t.BusId(d));
    if (sees_all && IsBusId(t.BusId(d))) s_->gpus.AddVisible(p.host, t.BusId(d));
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
    if (b.ok()) s_->predictions.Add(p.host, *b, s_->gpus);
    else s_->rep.partial.push_back(fmt::format("{}: preflight block unreadable ({})", t.path, b.error().message));
  }
  s_->links.AddTrace(t, &s_->rep.partial);
  s_->nccl.AddTrace(t, f, p, s_->rep.processes.size());
  s_->rep.processes.push_back(std::move(p));
  s_->AddCudaPairs(t, f);
  s_->AddCallSites(t, f);
}

void ReportBuilder::AddNcclLog(const NcclLogFile& f) { s_->nccl.AddLog(f, s_->rep); }

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
      st.s.pairs.push_back({gpus.Ref(host, src), gpus.Ref(host, dst), transport, v.first, v.second});
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
    } else if (NodePredictions::NicRate from = predictions.FastestNic(e.src.host), to = predictions.FastestNic(e.dst.host);
               e.src.host != e.dst.host && IsNet(e.expected) && from.gbps > 0 && to.gbps > 0) {
      // Between hosts the network is the bound: the slower end's line rate, not a catalog figure.
      e.best_gbps = std::min(from.gbps, to.gbps) / 8.0;
      auto nic = [](const std::string& host, const NodePredictions::NicRate& n) {
        return fmt::format("{} {} {} Gb/s{}", host, n.name, n.gbps, n.state == "ACTIVE" ? "" : " (port " + n.state + ")");
      };
      e.best_basis = fmt::format("line rate of the NICs: {}, {} (ports/1/rate, each host's fastest active port)",
                                 nic(e.src.host, from), nic(e.dst.host, to));
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

Report ReportBuilder::Finish() {
  State& s = *s_;
  Report& rep = s.rep;
  // Each map node goes as its pair moves out: the pairs are never held twice.
  rep.pairs.reserve(s.cuda_pairs.size() + s.nccl.Connections());
  for (auto it = s.cuda_pairs.begin(); it != s.cuda_pairs.end(); it = s.cuda_pairs.erase(it)) {
    PairEntry& e = it->second;
    e.src = s.gpus.Ref(e.src.host, e.src.bus_id, e.src.cuda);
    e.dst = s.gpus.Ref(e.dst.host, e.dst.bus_id, e.dst.cuda);
    rep.pairs.push_back(std::move(e));
  }
  for (ProcessInfo& p : rep.processes) {
    p.gpus.clear();
    for (const std::string& bus : p.bus_ids) p.gpus.push_back(s.gpus.Ref(p.host, bus).gpu);
  }
  for (ProcessInfo& p : rep.processes)
    for (NcclRank& r : p.nccl_ranks)
      if (!r.bus_id.empty()) r.gpu = s.gpus.Ref(p.host, r.bus_id).gpu;
  s.nccl.FinishPairs(rep, s.gpus);
  s.FinishCallSites();
  for (PairEntry& e : rep.pairs) {
    s.predictions.NameLink(e);
    s.predictions.NameNearestNics(e);
  }
  std::sort(rep.pairs.begin(), rep.pairs.end(), [](const PairEntry& x, const PairEntry& y) {
    return std::tie(x.src.host, x.src.gpu, x.src.bus_id, x.dst.host, x.dst.gpu, x.dst.bus_id, x.transport, x.source) <
           std::tie(y.src.host, y.src.gpu, y.src.bus_id, y.dst.host, y.dst.gpu, y.dst.bus_id, y.transport, y.source);
  });
  for (PairEntry& e : rep.pairs) s.predictions.ApplyTo(e);
  s.nccl.ApplyNetCauses(rep);
  for (ProcessInfo& p : rep.processes)
    if (s.predictions.NvmlAnswered(p.host) && !p.links_from_probe) {
      p.links_from_probe = true;
      DescribeCapture(&p);
    }
  rep.preflight = s.predictions.Warnings();
  s.FinishCosts();
  s.links.Charge(rep);
  s.nccl.FinishRings(rep);
  FinishStopped(&rep.stopped, std::move(s.stop_comms), s.nccl.StopPaths(rep, s.gpus), s.stall_seconds);
  rep.slow_rank = FindSlowRank(rep.stopped.comms, rep.stopped.processes, rep);
  if (rep.stopped.present) rep.findings.push_back(StoppedAsFinding(rep.stopped));
  // One finding per cause id, listing its pairs.
  std::map<std::string, Finding> by_cause;
  for (const PairEntry& e : rep.pairs)
    for (const Cause& c : e.causes) {
      Finding& f = by_cause[c.id];
      f.id = c.id;
      if (f.severity != "warning") f.severity = e.fallback || c.SlowedByLink() ? "warning" : "info";
      f.pairs.push_back(PairName(e));
      if (f.evidence.empty()) f.evidence = c.evidence;
      f.fix = c.fix;
    }
  for (auto& [id, f] : by_cause) rep.findings.push_back(std::move(f));
  if (rep.slow_rank.present) rep.findings.push_back(SlowRankAsFinding(rep.slow_rank));
  s.nccl.AddFindings(rep);
  return std::move(rep);
}

}  // namespace p2ptrace::cli
