#include "tools/formats/rows.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>
#include <set>

#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "tools/common/json_text.h"
#include "tools/formats/json.h"
#include "tools/common/version.h"

namespace p2ptrace::cli {

using nlohmann::json;

namespace {

json OrNull(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }
json OrNull(int v) { return v >= 0 ? json(v) : json(nullptr); }
json OrNull(double v, bool known) { return known ? json(v) : json(nullptr); }

// "2026-01-01T00:00:00.123Z": a wall-clock time every engine parses as a timestamp.
std::string IsoTime(uint64_t ns) {
  time_t s = static_cast<time_t>(ns / 1000000000ull);
  struct tm tm {};
  gmtime_r(&s, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ns / 1000000ull % 1000));
}

std::string VersionOfNccl(const Report& rep, const std::vector<const ProcessInfo*>& procs) {
  for (const ProcessInfo* p : procs)
    if (p && p->nccl_version > 0) return NcclVersionText(p->nccl_version);
  for (const ProcessInfo& p : rep.processes)
    if (p.nccl_version > 0) return NcclVersionText(p.nccl_version);
  if (!rep.nccl_versions.empty()) {  // NCCL's own line: "2.28.9+cuda13.0"
    const std::string& v = *rep.nccl_versions.begin();
    return v.substr(0, v.find('+'));
  }
  return "";
}

// What every row of one job shares.
struct JobFacts {
  std::string job_id, trace_job_id, scheduler, scheduler_job_id, step_id, run_id, start, trace_format;
  std::map<std::string, const ProcessInfo*> first_process;  // by host
  std::map<std::string, SchedulerIds> host_ids;             // by host: the first process's
  std::map<int, std::string> rank_host;                     // the job's ranks (launcher's or NCCL world's)
  std::map<std::pair<std::string, int>, std::string> comm_rank_host;  // (comm, rank) -> host
  std::map<int, const ProcessInfo*> rank_process;
};

JobFacts Facts(const Report& rep, const ProcessOrigins& origins) {
  JobFacts f;
  uint64_t start = UINT64_MAX;
  std::set<std::pair<int, int>> formats;
  for (const ProcessInfo& p : rep.processes) {
    const std::string& h = p.host;
    if (f.trace_job_id.empty()) f.trace_job_id = p.job_id;
    if (p.start_realtime_ns) start = std::min(start, p.start_realtime_ns);
    f.first_process.emplace(h, &p);
    auto o = origins.find({p.host, p.pid});
    if (o != origins.end()) {
      const SchedulerIds& ids = o->second.ids;
      if (f.scheduler.empty()) f.scheduler = ids.scheduler;
      if (f.scheduler_job_id.empty()) f.scheduler_job_id = ids.job_id;
      if (f.step_id.empty()) f.step_id = ids.step_id;
      if (f.run_id.empty()) f.run_id = ids.run_id;
      f.host_ids.emplace(h, ids);
      formats.insert({o->second.format_major, o->second.format_minor});
    }
    for (int r : p.ranks) {
      f.rank_host.emplace(r, h);
      f.rank_process.emplace(r, &p);
    }
    for (const NcclRank& n : p.nccl_ranks) f.comm_rank_host.emplace(std::make_pair(n.comm, n.rank), h);
  }
  f.job_id = !f.scheduler_job_id.empty() ? f.scheduler_job_id : f.trace_job_id;
  if (start != UINT64_MAX) f.start = IsoTime(start);
  if (formats.size() == 1) f.trace_format = fmt::format("{}.{}", formats.begin()->first, formats.begin()->second);
  return f;
}

json Common(const JobFacts& f, const char* kind) {
  json r = json::object();
  r["schema"] = kRowsSchema;
  r["kind"] = kind;
  r["job_id"] = OrNull(f.job_id);
  r["trace_job_id"] = OrNull(f.trace_job_id);
  r["scheduler"] = OrNull(f.scheduler);
  r["scheduler_job_id"] = OrNull(f.scheduler_job_id);
  r["slurm_step_id"] = OrNull(f.step_id);
  r["torchrun_run_id"] = OrNull(f.run_id);
  r["job_start"] = OrNull(f.start);
  r["p2ptrace_version"] = VersionText();
  r["trace_format"] = OrNull(f.trace_format);
  return r;
}

// Where the scheduler placed a host's processes: its node name, pod and namespace (null outside one).
void Placement(json& r, const JobFacts& f, const std::string& host) {
  auto it = f.host_ids.find(host);
  const SchedulerIds* ids = it == f.host_ids.end() ? nullptr : &it->second;
  r["node"] = ids ? OrNull(ids->node) : json(nullptr);
  r["k8s_pod"] = ids ? OrNull(ids->pod) : json(nullptr);
  r["k8s_namespace"] = ids ? OrNull(ids->pod_namespace) : json(nullptr);
}

json CudaVersion(int code) { return code > 0 ? json(CudaVersionText(code)) : json(nullptr); }

json PairRow(const Report& rep, const JobFacts& f, const PairEntry& e) {
  json r = Common(f, "pair");
  r["host"] = e.src.host;
  Placement(r, f, e.src.host);
  std::set<std::string> hosts{e.src.host, e.dst.host};
  r["hosts"] = hosts;
  r["source"] = e.source;
  auto end = [&](const char* side, const GpuRef& g, const std::set<int>& ranks) {
    std::string s = side;
    r[s + "_host"] = g.host;
    r[s + "_gpu"] = OrNull(g.gpu);
    r[s + "_cuda_device"] = OrNull(g.cuda);
    r[s + "_bus_id"] = OrNull(g.bus_id);
    r[s + "_model"] = OrNull(g.name);
    r[s + "_rank"] = ranks.size() == 1 && *ranks.begin() >= 0 ? json(*ranks.begin()) : json(nullptr);
  };
  end("src", e.src, e.ranks);
  end("dst", e.dst, e.dst_ranks.empty() ? e.ranks : e.dst_ranks);
  std::set<std::string> models;
  for (const GpuRef* g : {&e.src, &e.dst})
    if (!g->name.empty()) models.insert(g->name);
  r["gpu_models"] = models.empty() ? json(nullptr) : json(models);
  r["class_used"] = e.transport ? json(TransportName(e.transport)) : json(nullptr);
  r["class_expected"] = e.expected ? json(TransportName(e.expected)) : json(nullptr);
  r["fallback"] = e.fallback;
  r["link"] = OrNull(e.link);
  r["nccl_transports"] = e.nccl_transports;
  r["net"] = NetSidesJson(e);
  json links = json::array();
  for (const PairEntry::LinkCharge& l : e.link_changes) links.push_back({{"where", l.where}, {"what", l.what}, {"kind", l.kind}});
  r["link_changes"] = links;
  r["calls"] = e.calls;
  r["bytes"] = e.bytes;
  r["errors"] = e.errors;
  r["timed_calls"] = e.timed_calls;
  r["timed_bytes"] = e.timed_bytes;
  r["seconds"] = OrNull(e.RatedSeconds(), e.RatedSeconds() >= 0);
  r["gbps"] = OrNull(e.RatedGbps(), e.RatedGbps() > 0);
  r["rate_basis"] = OrNull(e.RateBasis());
  // Inside ring collectives, by NCCL's kernel timers (trace 1.9), and the hop that set that pace.
  r["coll_gbps"] = OrNull(e.CollGbps(), e.CollGbps() > 0);
  r["bounded_by"] = OrNull(e.bounded_by);
  // What the class used should deliver (the report's expected_gbps), and what the cost was counted against.
  r["class_used_gbps_low"] = OrNull(e.expected_gbps_low, e.expected_gbps_high > 0);
  r["class_used_gbps_high"] = OrNull(e.expected_gbps_high, e.expected_gbps_high > 0);
  r["best_gbps"] = OrNull(e.best_gbps, e.best_gbps > 0);
  json causes = json::array();
  for (const Cause& c : e.causes) causes.push_back(c.id);
  r["causes"] = causes;
  r["cause"] = e.causes.empty() ? json(nullptr) : json(e.causes.front().id);
  r["lost_seconds"] = OrNull(e.lost_seconds, e.lost_seconds >= 0);
  std::vector<const ProcessInfo*> procs;
  for (int rank : e.ranks)
    if (auto it = f.rank_process.find(rank); it != f.rank_process.end()) procs.push_back(it->second);
  if (auto it = f.first_process.find(e.src.host); it != f.first_process.end()) procs.push_back(it->second);
  r["nccl_version"] = OrNull(VersionOfNccl(rep, procs));
  const ProcessInfo* p = procs.empty() ? nullptr : procs.front();
  r["cuda_runtime_version"] = p ? CudaVersion(p->runtime_version) : json(nullptr);
  r["cuda_driver_version"] = p ? CudaVersion(p->driver_version) : json(nullptr);
  return r;
}

json OpRow(const Report& rep, const JobFacts& f, const NcclOpSummary& s) {
  json r = Common(f, "op");
  std::set<std::string> hosts;
  std::vector<const ProcessInfo*> procs;
  for (int rank : s.ranks) {
    if (auto it = f.comm_rank_host.find({s.comm, rank}); it != f.comm_rank_host.end()) hosts.insert(it->second);
    else if (auto h = f.rank_host.find(rank); h != f.rank_host.end()) hosts.insert(h->second);
  }
  for (const std::string& h : hosts)
    if (auto it = f.first_process.find(h); it != f.first_process.end()) procs.push_back(it->second);
  r["hosts"] = hosts;
  std::set<std::string> nodes;
  for (const std::string& h : hosts)
    if (auto it = f.host_ids.find(h); it != f.host_ids.end() && !it->second.node.empty()) nodes.insert(it->second.node);
  r["nodes"] = nodes.empty() ? json(nullptr) : json(nodes);
  r["comm"] = s.comm;
  r["nranks"] = s.nranks;
  r["ranks"] = s.ranks;
  r["op"] = s.op;
  r["calls"] = s.calls;
  r["bytes"] = s.bytes;
  r["errors"] = s.errors;
  r["timed_calls"] = s.timed_calls;
  r["timed_bytes"] = s.timed_bytes;
  bool timed = s.timed_calls > 0 && s.timed_ns > 0;
  r["seconds"] = OrNull(static_cast<double>(s.timed_ns) * 1e-9, timed);
  r["algbw_gbps"] = OrNull(s.AlgBw(), s.AlgBw() >= 0);
  r["busbw_gbps"] = OrNull(s.BusBw(), s.BusBw() >= 0);
  r["nccl_version"] = OrNull(VersionOfNccl(rep, procs));
  const ProcessInfo* p = procs.empty() ? nullptr : procs.front();
  r["cuda_runtime_version"] = p ? CudaVersion(p->runtime_version) : json(nullptr);
  r["cuda_driver_version"] = p ? CudaVersion(p->driver_version) : json(nullptr);
  return r;
}

}  // namespace

std::vector<json> BuildTestRows(const NodeProbe& probe, const std::vector<JudgedPair>& pairs, const SchedulerIds& ids,
                                uint64_t unix_ns, const std::map<std::pair<int, int>, std::string>* regressions) {
  JobFacts f;  // no trace: the job is the one the scheduler names, if any
  f.scheduler = ids.scheduler;
  f.scheduler_job_id = f.job_id = ids.job_id;
  f.step_id = ids.step_id;
  f.run_id = ids.run_id;
  f.host_ids[probe.hostname] = ids;
  std::vector<json> rows;
  for (const JudgedPair& j : pairs) {
    const PairMeasurement& m = j.measured;
    json r = Common(f, "test");
    r["test_time"] = IsoTime(unix_ns);
    r["host"] = probe.hostname;
    Placement(r, f, probe.hostname);
    r["hosts"] = json::array({probe.hostname});
    r["source"] = "test";
    std::set<std::string> models;
    for (auto [side, index] : {std::pair{"src", m.src}, std::pair{"dst", m.dst}}) {
      const ProbedGpu* g = probe.Gpu(index);
      std::string s = side;
      r[s + "_host"] = probe.hostname;
      r[s + "_gpu"] = index;
      r[s + "_cuda_device"] = g ? OrNull(g->cuda) : json(nullptr);
      r[s + "_bus_id"] = g ? OrNull(g->bus_id) : json(nullptr);
      r[s + "_model"] = g ? OrNull(g->name) : json(nullptr);
      if (g && !g->name.empty()) models.insert(g->name);
    }
    r["gpu_models"] = models.empty() ? json(nullptr) : json(models);
    r["verdict"] = j.verdict.verdict;
    r["reason"] = j.verdict.reason;
    r["class_used"] = m.tested ? json(TransportName(j.verdict.transport)) : json(nullptr);
    const ProbedPair* link = probe.Pair(m.src, m.dst);
    r["link"] = link ? OrNull(link->link) : json(nullptr);
    r["gbps"] = OrNull(m.gbps, m.gbps >= 0);
    r["bidir_gbps"] = OrNull(m.bidir_gbps, m.bidir_gbps >= 0);
    r["staged_gbps"] = OrNull(m.staged_gbps, m.staged_gbps >= 0);
    r["latency_us"] = OrNull(m.latency_us, m.latency_us >= 0);
    r["class_used_gbps_low"] = OrNull(j.verdict.expected.low, j.verdict.expected.high > 0);
    r["class_used_gbps_high"] = OrNull(j.verdict.expected.high, j.verdict.expected.high > 0);
    json causes = json::array();
    for (const CauseHit& c : j.verdict.causes) causes.push_back(c.id);
    r["causes"] = causes;
    r["cause"] = j.verdict.causes.empty() ? json(nullptr) : json(j.verdict.causes.front().id);
    r["data_ok"] = m.data_checked ? json(m.data_ok) : json(nullptr);
    r["timed_out"] = m.timed_out;
    json regression = nullptr;
    if (regressions)
      if (auto it = regressions->find({m.src, m.dst}); it != regressions->end() && !it->second.empty()) regression = it->second;
    r["regression"] = regression;
    r["cuda_driver_version"] = nullptr;
    r["nvidia_driver_version"] = OrNull(probe.driver_version);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string RowsText(const std::vector<json>& rows) {
  std::string text;
  for (const json& r : rows) text += JsonText(r) + "\n";
  return text;
}

std::vector<json> BuildRows(const Report& report, const ProcessOrigins& origins) {
  JobFacts f = Facts(report, origins);
  std::vector<json> rows;
  rows.reserve(report.pairs.size() + report.nccl_ops.size());
  for (const PairEntry& e : report.pairs) rows.push_back(PairRow(report, f, e));
  for (const NcclOpSummary& s : report.nccl_ops) rows.push_back(OpRow(report, f, s));
  return rows;
}

}  // namespace p2ptrace::cli
