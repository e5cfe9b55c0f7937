// `report --json`: the document of DESIGN.md §7, whole (RenderJson) or one element at a time (WriteJson).
#include "tools/formats/json.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "tools/common/json_text.h"
#include "tools/common/link_json.h"

namespace p2ptrace::cli {

using nlohmann::json;

namespace {

// One element of "ranks": a rank of the job, or a process that holds none. A process that drives
// several GPUs holds several ranks (its ranks in its largest communicator), one element each, with
// that rank's GPU.
struct RankRow {
  const ProcessInfo* p;
  int rank = -1;  // p->ranks[i], or -1 for a process without one
};
std::vector<RankRow> RankRows(const Report& rep) {
  std::vector<RankRow> rows;
  for (const ProcessInfo& p : rep.processes) {
    if (p.ranks.empty()) rows.push_back({&p, -1});
    for (int r : p.ranks) rows.push_back({&p, r});
  }
  return rows;
}

json RankJson(const RankRow& row) {
  const ProcessInfo& p = *row.p;
  json r{{"rank", row.rank >= 0 ? json(row.rank) : json(nullptr)}, {"host", p.host}, {"pid", p.pid},
         {"bus_ids", p.bus_ids}, {"state", p.state}, {"file", p.file},
         {"cuda_runtime_version", p.runtime_version}, {"cuda_driver_version", p.driver_version}};
  r["nccl_log"] = p.nccl_log;
  r["nccl_version"] = p.nccl_version > 0 ? json(NcclVersionText(p.nccl_version)) : json(nullptr);
  r["nccl_version_code"] = p.nccl_version;
  r["job_id"] = p.job_id;
  r["capture_mode"] = p.capture_mode;
  r["trust"] = p.trust;
  r["graph_nodes_altered"] = p.graph_alterations;  // {api: calls}: replays counted as recorded
  r["start_realtime_ns"] = p.start_realtime_ns;
  r["seconds"] = p.seconds >= 0 ? json(p.seconds) : json(nullptr);
  // Its GPU when it saw one (the host's index; null when unknown), and the index of each it saw.
  r["gpu"] = p.gpus.size() == 1 && p.gpus[0] >= 0 ? json(p.gpus[0]) : json(nullptr);
  r["bus_id"] = p.bus_ids.size() == 1 ? json(p.bus_ids[0]) : json(nullptr);
  json gpus = json::array();
  for (int g : p.gpus) gpus.push_back(g >= 0 ? json(g) : json(nullptr));
  r["gpus"] = gpus;
  r["cuda_device"] = p.bus_ids.size() == 1 ? json(0) : json(nullptr);
  r["ranks_in_process"] = p.ranks.size();
  // NCCL's ranks on this rank's GPU, one per communicator (the world, its splits); for a process
  // without a rank, all it held.
  int device = -1;
  for (const NcclRank& n : p.nccl_ranks)
    if (n.comm == p.rank_comm && n.rank == row.rank) {
      device = n.cuda_device;
      r["gpu"] = n.gpu >= 0 ? json(n.gpu) : json(nullptr);
      r["bus_id"] = n.bus_id.empty() ? json(nullptr) : json(n.bus_id);
      r["cuda_device"] = n.cuda_device >= 0 ? json(n.cuda_device) : json(nullptr);
    }
  json comms = json::array();
  for (const NcclRank& n : p.nccl_ranks)
    if (row.rank < 0 || (device >= 0 ? n.cuda_device == device : n.rank == row.rank))
      comms.push_back({{"comm", n.comm}, {"rank", n.rank}, {"nranks", n.nranks}});
  r["nccl_ranks"] = std::move(comms);
  return r;
}

// One end of a pair: the host's index (nvidia-smi's; null when unknown), its bus id, the CUDA
// ordinal its process gave it (null when unknown or not the same in every process) and its model.
json GpuJson(const GpuRef& g) {
  json o{{"host", g.host}, {"gpu", g.gpu >= 0 ? json(g.gpu) : json(nullptr)}, {"bus_id", g.bus_id},
         {"name", GpuName(g)}};
  o["cuda"] = g.cuda >= 0 ? json(g.cuda) : json(nullptr);
  if (!g.name.empty()) o["model"] = g.name;
  return o;
}

json PairJson(const PairEntry& e) {
  auto ref = [](const GpuRef& g, const std::set<int>& ranks) {
    json o = GpuJson(g);
    o["rank"] = ranks.size() == 1 && *ranks.begin() >= 0 ? json(*ranks.begin()) : json(nullptr);
    return o;
  };
  json p{{"src", ref(e.src, e.ranks)}, {"dst", ref(e.dst, e.dst_ranks.empty() ? e.ranks : e.dst_ranks)}, {"source", e.source},
         {"transport", TransportName(e.transport)}, {"nccl_transports", e.nccl_transports},
         {"expected", TransportName(e.expected)}, {"fallback", e.fallback}, {"calls", e.calls},
         {"bytes", e.bytes}, {"errors", e.errors}, {"timed_calls", e.timed_calls},
         {"timed_bytes", e.timed_bytes}};
  p["seconds"] = e.RatedSeconds() >= 0 ? json(e.RatedSeconds()) : json(nullptr);
  p["gbps"] = e.RatedGbps() > 0 ? json(e.RatedGbps()) : json(nullptr);
  p["rate_note"] = e.RateNote().empty() ? json(nullptr) : json(e.RateNote());
  p["rate_basis"] = e.RateBasis().empty() ? json(nullptr) : json(e.RateBasis());
  json apis = json::object();
  for (const auto& [api, n] : e.apis) apis[api] = {{"calls", n.first}, {"bytes", n.second}};
  p["apis"] = std::move(apis);
  p["graph_calls"] = e.graph_calls;  // of calls and bytes: CUDA graph replays
  p["graph_bytes"] = e.graph_bytes;
  p["group_timed_calls"] = e.group_timed_calls;
  p["shared_group_calls"] = e.shared_calls;
  p["kernel_timed_calls"] = e.kernel_timed_calls;
  p["collectives"] = e.coll.timed_calls == 0
                         ? json(nullptr)
                         : json{{"timed_calls", e.coll.timed_calls}, {"timed_bytes", e.coll.timed_bytes},
                                {"seconds", static_cast<double>(e.coll.timed_ns) * 1e-9},
                                {"gbps", e.CollGbps() > 0 ? json(e.CollGbps()) : json(nullptr)},
                                {"basis", "NCCL kernel timers"},
                                {"bounded_by", e.bounded_by.empty() ? json(nullptr) : json(e.bounded_by)}};
  // The hop that set this pair's pace in its ring (as in `collectives`, beside the rate it bounds).
  p["bounded_by"] = e.bounded_by.empty() ? json(nullptr) : json(e.bounded_by);
  p["channels"] = e.channels;
  p["link"] = e.link.empty() ? json(nullptr) : json(e.link);
  p["nccl_from"] = e.nccl_from.empty() ? json(nullptr) : json(e.nccl_from);
  p["expected_gbps"] = e.expected_gbps_high > 0 ? json{{"low", e.expected_gbps_low}, {"high", e.expected_gbps_high},
                                                       {"basis", e.expected_basis}}
                                                : json(nullptr);
  p["best_gbps"] = e.best_gbps > 0 ? json(e.best_gbps) : json(nullptr);
  p["best_basis"] = e.best_basis;
  p["lost_seconds"] = e.lost_seconds >= 0 ? json(e.lost_seconds) : json(nullptr);
  p["net"] = NetSidesJson(e);
  json links = json::array();
  for (const PairEntry::LinkCharge& l : e.link_changes)
    links.push_back({{"host", l.host}, {"where", l.where}, {"what", l.what}, {"kind", l.kind}});
  p["link_changes"] = links;
  p["causes"] = json::array();
  for (const Cause& c : e.causes) p["causes"].push_back(CauseJson(c));
  return p;
}

json NcclOpJson(const NcclOpSummary& s) {
  json o{{"comm", s.comm}, {"nranks", s.nranks}, {"op", s.op}, {"calls", s.calls}, {"errors", s.errors},
         {"bytes", s.bytes}, {"timed_calls", s.timed_calls}, {"ranks", s.ranks},
         {"group_timed_calls", s.group_timed_calls}, {"kernel_timed_calls", s.kernel_timed_calls},
         {"timings", s.timings},
         {"graph_calls", s.graph_calls}, {"graph_bytes", s.graph_bytes}};
  o["seconds"] = s.timed_calls ? json(static_cast<double>(s.timed_ns) * 1e-9 / static_cast<double>(s.timed_calls))
                               : json(nullptr);
  o["algbw_gbps"] = s.AlgBw() >= 0 ? json(s.AlgBw()) : json(nullptr);
  o["busbw_gbps"] = s.BusBw() >= 0 ? json(s.BusBw()) : json(nullptr);
  o["rate_note"] = s.RateNote().empty() ? json(nullptr) : json(s.RateNote());
  return o;
}

json RingJson(const RingSummary& r) {
  json o{{"comm", r.comm.empty() ? json(nullptr) : json(r.comm)}, {"nccl_comm_id", r.nccl_comm},
         {"channel", r.channel}, {"hops", r.hops}};
  o["slowest_gbps"] = r.slowest_gbps > 0 ? json(r.slowest_gbps) : json(nullptr);
  o["fastest_gbps"] = r.fastest_gbps > 0 ? json(r.fastest_gbps) : json(nullptr);
  o["bounded_by"] = r.bounded_by.empty() ? json(nullptr) : json(r.bounded_by);
  o["bound_expected_gbps"] =
      r.bounded_by.empty() ? json(nullptr) : json{{"low", r.bound_expected_low}, {"high", r.bound_expected_high}};
  return o;
}

json CallSiteJson(const CallSiteSummary& c) {
  json pairs = json::array();
  for (const CallSiteSummary::Pair& p : c.pairs)
    pairs.push_back({{"src", GpuJson(p.src)}, {"dst", GpuJson(p.dst)},
                     {"transport", TransportName(p.transport)}, {"copies", p.copies}, {"bytes", p.bytes}});
  return {{"id", c.id}, {"frames", c.frames}, {"copies", c.copies}, {"bytes", c.bytes},
          {"host_staged_bytes", c.host_staged_bytes}, {"errors", c.errors},
          {"nccl_ops", c.nccl_ops}, {"nccl_bytes", c.nccl_bytes}, {"nccl_errors", c.nccl_errors},
          {"nccl_operations", c.nccl_operations}, {"pairs", pairs}, {"ranks", c.ranks},
          {"processes", c.processes}};
}

json PreflightJson(const Report::Preflight& pf) {
  return {{"host", pf.host}, {"boot_id", pf.boot_id}, {"warnings", pf.warnings}};
}

json FindingJson(const Finding& f) {
  json o{{"id", f.id}, {"severity", f.severity}, {"pairs", f.pairs}, {"evidence", f.evidence}, {"fix", f.fix}};
  if (!f.title.empty()) o["title"] = f.title;
  if (!f.cause.empty()) o["cause"] = f.cause;
  if (!f.ranks.empty()) o["ranks"] = f.ranks;
  return o;
}

json CaptureJson(const Report& rep) {
  uint32_t flags = 0;
  uint64_t dropped = 0;
  int abnormal = 0;
  for (const ProcessInfo& p : rep.processes) {
    flags |= p.capture_flags;
    dropped += p.dropped_records;
    if (p.state != "exited") ++abnormal;
  }
  return {{"processes", rep.processes.size()},
          {"nccl_logs", rep.nccl_logs},
          {"nccl_from_traces", rep.nccl_from_traces},
          {"cudart_11", (flags & P2PTRACE_CAPTURE_CUDART_11) != 0},
          {"cudart_12", (flags & P2PTRACE_CAPTURE_CUDART_12) != 0},
          {"cudart_13", (flags & P2PTRACE_CAPTURE_CUDART_13) != 0},
          {"nvml_link_types", (flags & P2PTRACE_CAPTURE_NVML_LINKS) != 0},
          {"cudart_via_dlsym", (flags & P2PTRACE_CAPTURE_CUDART_DLSYM) != 0},
          {"nccl_via_dlsym", (flags & P2PTRACE_CAPTURE_NCCL_DLSYM) != 0},
          {"driver", (flags & P2PTRACE_CAPTURE_DRIVER) != 0},
          {"driver_via_dlsym", (flags & P2PTRACE_CAPTURE_DRIVER_DLSYM) != 0},
          {"driver_via_entry_point", (flags & P2PTRACE_CAPTURE_DRIVER_ENTRY_POINT) != 0},
          {"timing", (flags & P2PTRACE_CAPTURE_TIMING_OFF) == 0},
          // trace 1.9: NCCL called the shim as its profiler plugin (per-pair kernel times), or the
          // program's own plugin was left in place (NCCL's pairs timed per call and group only)
          {"nccl_kernel_timers", (flags & P2PTRACE_CAPTURE_NCCL_PROFILER) != 0},
          {"nccl_profiler_left_to_program", (flags & P2PTRACE_CAPTURE_NCCL_PROFILER_USER) != 0},
          {"abnormal_exits", abnormal},
          {"dropped_records", dropped},
          {"skipped_files", rep.problems},
          {"partial_files", rep.partial}};
}

// The report's top-level members in the order nlohmann's object (a std::map) prints them; each
// writes its value. Big arrays are written element by element (see WriteJson).
template <typename T, typename F>
json ArrayOf(const std::vector<T>& items, F&& one) {
  json a = json::array();
  for (const T& x : items) a.push_back(one(x));
  return a;
}

// `v` as nlohmann's dump(2) prints it nested `depth` levels deep: every line after the first
// indented by 2 × depth spaces (a JSON string never holds a raw newline).
void PutNested(std::ostream& out, const json& v, int depth) {
  std::string s = JsonText(v, 2);
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.write(s.data() + start, static_cast<std::streamsize>(nl + 1 - start));
    for (int i = 0; i < depth; ++i) out << "  ";
  }
  out.write(s.data() + start, static_cast<std::streamsize>(s.size() - start));
}

template <typename T, typename F>
void PutArray(std::ostream& out, const std::vector<T>& items, F&& one) {
  if (items.empty()) {
    out << "[]";
    return;
  }
  out << "[\n";
  for (size_t i = 0; i < items.size(); ++i) {
    out << (i ? ",\n    " : "    ");
    PutNested(out, one(items[i]), 2);
  }
  out << "\n  ]";
}

}  // namespace

json NetSidesJson(const PairEntry& e) {
  if (e.net.empty()) return nullptr;
  json sides = json::array();
  for (const PairEntry::NetSide& s : e.net)
    sides.push_back({{"host", s.host}, {"network", s.network}, {"nic_index", s.nic_index},
                     {"nic", s.nic.empty() ? json(nullptr) : json(s.nic)}, {"gdr", s.gdr},
                     {"proxy_rank", s.proxy_rank >= 0 ? json(s.proxy_rank) : json(nullptr)},
                     {"nic_path", s.nic_path.empty() ? json(nullptr) : json(s.nic_path)},
                     {"nearest_nic", s.nearest_nic.empty() ? json(nullptr) : json(s.nearest_nic)},
                     {"nearest_path", s.nearest_path.empty() ? json(nullptr) : json(s.nearest_path)},
                     {"crosses_rails", s.CrossesRails()}});
  return sides;
}

// A host's link health: its readings' summary, every change with the pairs it was charged to.
json HostLinksJson(const Report::HostLinks& h) {
  json changes = json::array();
  for (const Report::HostLinks::Change& c : h.changes) {
    json one = LinkChangeJson(c.change);
    one["pairs"] = c.pairs;
    changes.push_back(std::move(one));
  }
  return {{"host", h.host}, {"readings", h.readings}, {"exit_readings", h.exit_readings},
          {"read_ms", h.read_ms >= 0 ? json(h.read_ms) : json(nullptr)}, {"changes", changes},
          {"unsupported", h.unsupported}, {"notes", h.notes}};
}

json CauseJson(const Cause& c) {
  return {{"id", c.id}, {"evidence", c.evidence}, {"fix", c.fix}, {"confirm", c.confirm}, {"origin", c.origin}};
}

json JobJson(const Report& rep) {
  std::set<std::string> hosts, job_ids;
  int rt = 0, drv = 0;
  for (const ProcessInfo& p : rep.processes) {
    hosts.insert(p.host);
    if (!p.job_id.empty()) job_ids.insert(p.job_id);
    rt = std::max(rt, p.runtime_version);
    drv = std::max(drv, p.driver_version);
  }
  // The headers' versions (ncclGetVersion) when any process recorded one, else the log lines'.
  std::set<std::string> nccl_versions;
  for (const ProcessInfo& p : rep.processes)
    if (p.nccl_version > 0) nccl_versions.insert(NcclVersionText(p.nccl_version));
  if (nccl_versions.empty()) nccl_versions = rep.nccl_versions;
  return {{"ids", job_ids}, {"hosts", hosts}, {"nccl_versions", nccl_versions},
          {"cuda_runtime", CudaVersionText(rt)}, {"cuda_driver", CudaVersionText(drv)}};
}

json StoppedJson(const StoppedFinding& st) {
  auto op = [](const StoppedOp& o) {
    return json{{"seq", o.seq},     {"p2p", o.p2p},     {"op", NcclApiName(o.api)}, {"bytes", o.bytes},
                {"peer", o.peer},   {"state", o.state}, {"called_realtime_ns", o.called_realtime_ns}};
  };
  json procs = json::array(), comms = json::array();
  for (const StoppedProcess& p : st.processes)
    procs.push_back({{"host", p.host}, {"pid", p.pid}, {"rank", p.rank}, {"job_id", p.job_id}, {"file", p.file},
                     {"life", p.life}, {"exited", p.exited}, {"exit_status", p.exit_status}, {"beating", p.beating}, {"last_seen_realtime_ns", p.last_sign_realtime_ns},
                     {"nccl_errors", p.nccl_errors}, {"pending_init", p.pending_init}, {"incomplete", p.incomplete}});
  for (const StoppedComm& c : st.comms) {
    json members = json::array();
    for (const StoppedMember& m : c.members) {
      json last = json::array();
      for (const StoppedOp& o : m.last) last.push_back(op(o));
      members.push_back({{"process", m.process}, {"rank", m.rank}, {"collectives", m.collectives}, {"p2p", m.p2p},
                         {"last", last}});
    }
    comms.push_back({{"id", c.id}, {"nranks", c.nranks}, {"waits", c.waits}, {"mismatches", c.mismatches},
                     {"members", members}});
  }
  return {{"present", st.present}, {"verdict", st.verdict}, {"first_process", st.first_process},
          {"first_doing", st.first_doing}, {"pairs", st.pair_notes}, {"notes", st.notes},
          {"processes", procs}, {"comms", comms}};
}

json SlowRankJson(const SlowRankFinding& f) {
  auto number = [](double v) { return v >= 0 ? json(v) : json(nullptr); };
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json comms = json::array();
  for (const CommArrivals& c : f.comms)
    comms.push_back({{"id", c.id}, {"nranks", c.nranks}, {"compared", c.compared}, {"mismatched", c.mismatched},
                     {"clock", c.clock}, {"across_hosts", c.across_hosts}, {"last_by_rank", c.last_by_rank},
                     {"skew_median_ms", number(c.skew_median_ms)}, {"skew_p90_ms", number(c.skew_p90_ms)},
                     {"wait_rank_seconds", c.wait_rank_seconds}});
  return {{"present", f.present}, {"kind", text(f.kind)}, {"verdict", f.verdict}, {"comm", text(f.comm)},
          {"nranks", f.nranks}, {"rank", f.rank >= 0 ? json(f.rank) : json(nullptr)}, {"host", text(f.host)},
          {"gpu", text(f.gpu)}, {"pid", f.pid > 0 ? json(f.pid) : json(nullptr)}, {"compared", f.compared},
          {"last", f.last}, {"late_median_ms", number(f.late_median_ms)}, {"late_p90_ms", number(f.late_p90_ms)},
          {"wait_share", number(f.wait_share)}, {"step_collectives", f.step_collectives}, {"steps", f.steps},
          {"wait_per_step_ms", number(f.wait_per_step_ms)},
          {"wait_seconds", number(f.wait_seconds)}, {"pair", text(f.pair)}, {"transport", text(f.transport)},
          {"causes", f.causes}, {"rings", f.rings}, {"ring_gbps", number(f.ring_gbps)},
          {"class_gbps_low", f.class_gbps_low > 0 ? json(f.class_gbps_low) : json(nullptr)}, {"evidence", f.evidence},
          {"fix", f.fix}, {"notes", f.notes}, {"comms", comms}};
}

json RenderJson(const Report& rep) {
  json j;
  j["version"] = 1;
  j["ranks"] = ArrayOf(RankRows(rep), RankJson);
  j["pairs"] = ArrayOf(rep.pairs, PairJson);
  j["nccl_ops"] = ArrayOf(rep.nccl_ops, NcclOpJson);
  j["call_sites"] = ArrayOf(rep.call_sites, CallSiteJson);
  j["job"] = JobJson(rep);
  j["links"] = ArrayOf(rep.links, HostLinksJson);
  j["lost_seconds"] = rep.lost_seconds;
  j["preflight"] = ArrayOf(rep.preflight, PreflightJson);
  j["rings"] = ArrayOf(rep.rings, RingJson);
  j["findings"] = ArrayOf(rep.findings, FindingJson);
  j["capture"] = CaptureJson(rep);
  j["stopped"] = StoppedJson(rep.stopped);
  j["slow_rank"] = SlowRankJson(rep.slow_rank);
  return j;
}

// RenderJson(rep).dump(2), without the whole tree: one array element at a time (a 4096-rank job's
// tree is ~200 MB; this holds one pair's).
void WriteJson(const Report& rep, std::ostream& out) {
  // Members in key order, as nlohmann's std::map-backed object prints them.
  out << "{\n  \"call_sites\": ";
  PutArray(out, rep.call_sites, CallSiteJson);
  out << ",\n  \"capture\": ";
  PutNested(out, CaptureJson(rep), 1);
  out << ",\n  \"findings\": ";
  PutArray(out, rep.findings, FindingJson);
  out << ",\n  \"job\": ";
  PutNested(out, JobJson(rep), 1);
  out << ",\n  \"links\": ";
  PutArray(out, rep.links, HostLinksJson);
  out << ",\n  \"lost_seconds\": ";
  PutNested(out, json(rep.lost_seconds), 1);
  out << ",\n  \"nccl_ops\": ";
  PutArray(out, rep.nccl_ops, NcclOpJson);
  out << ",\n  \"pairs\": ";
  PutArray(out, rep.pairs, PairJson);
  out << ",\n  \"preflight\": ";
  PutArray(out, rep.preflight, PreflightJson);
  out << ",\n  \"ranks\": ";
  PutArray(out, RankRows(rep), RankJson);
  out << ",\n  \"rings\": ";
  PutArray(out, rep.rings, RingJson);
  out << ",\n  \"slow_rank\": ";
  PutNested(out, SlowRankJson(rep.slow_rank), 1);
  out << ",\n  \"stopped\": ";
  PutNested(out, StoppedJson(rep.stopped), 1);
  out << ",\n  \"version\": 1\n}";
}

}  // namespace p2ptrace::cli
