#include "tools/formats/dump.h"

#include <cstring>
#include <iterator>

#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "tools/common/json_text.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

std::string Field(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

json Header(const Trace& t) {
  const p2ptrace_file_header& h = t.header;
  json env = json::object();
  for (const auto& [k, v] : t.env) env[k] = v;
  json buses = json::array();
  for (int d = 0; d < std::min(h.device_count, P2PTRACE_MAX_DEVICES); ++d) buses.push_back(t.BusId(d));
  return {{"kind", "header"}, {"file", t.path}, {"format", fmt::format("{}.{}", h.major, h.minor)},
          {"host", t.Host()}, {"exe", Field(h.exe, sizeof h.exe)}, {"job_id", Field(h.job_id, sizeof h.job_id)},
          {"boot_id", Field(h.boot_id, sizeof h.boot_id)}, {"pid", h.pid}, {"ppid", h.ppid}, {"rank", h.rank}, {"local_rank", h.local_rank},
          {"world_size", h.world_size}, {"state", h.state}, {"fatal_signal", h.fatal_signal},
          {"capture_flags", h.capture_flags}, {"cuda_runtime_version", h.cuda_runtime_version},
          {"cuda_driver_version", h.cuda_driver_version}, {"device_count", h.device_count}, {"bus_ids", buses},
          {"start_realtime_ns", h.start_realtime_ns}, {"start_monotonic_ns", h.start_monotonic_ns},
          {"end_monotonic_ns", h.end_monotonic_ns}, {"chunks", h.chunks_claimed},
          {"heartbeat_ns", h.heartbeat_ns}, {"heartbeats", h.heartbeats}, {"heartbeat_period_ms", h.heartbeat_period_ms},
          {"exit_status", h.exit_status_known ? json(h.exit_status) : json(nullptr)},
          {"dropped_records", h.dropped_records}, {"skipped_records", t.skipped_records},
          {"bad_chunks", t.bad_chunks}, {"env", env}};
}

json Record(const TraceRecord& r) {
  const p2ptrace_record_header& h = r.header();
  json j{{"seq", h.seq}, {"time_ns", h.time_ns}, {"tid", r.tid}};
  if (const auto* c = std::get_if<p2ptrace_copy_record>(&r.body)) {
    j.update({{"kind", "copy"}, {"api", ApiName(c->api)}, {"src", c->src_device}, {"dst", c->dst_device},
              {"transport", TransportName(c->transport)}, {"bytes", c->bytes}, {"result", c->result},
              {"stream", c->stream}, {"flags", c->flags}, {"site", c->site}});
  } else if (const auto* p = std::get_if<p2ptrace_peer_record>(&r.body)) {
    j.update({{"kind", "peer"}, {"api", ApiName(p->api)}, {"device", p->device}, {"peer", p->peer},
              {"result", p->result}, {"value", p->value}, {"attr", p->attr}});
  } else if (const auto* t = std::get_if<p2ptrace_timing_record>(&r.body)) {
    j.update({{"kind", "timing"}, {"src", t->src_device}, {"dst", t->dst_device},
              {"transport", TransportName(t->transport)}, {"bytes", t->bytes}, {"duration_ns", t->duration_ns}});
  } else if (const auto* nc = std::get_if<p2ptrace_nccl_comm_record>(&r.body)) {
    j.update({{"kind", "nccl_comm"}, {"api", NcclApiName(nc->api)}, {"comm", nc->comm},
              {"id_hash", fmt::format("{:016x}", nc->id_hash)}, {"rank", nc->rank}, {"nranks", nc->nranks},
              {"cuda_device", nc->cuda_device}, {"result", nc->result}});
    if (nc->result == P2PTRACE_RESULT_PENDING) j["result"] = "pending";
  } else if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body)) {
    j.update({{"kind", "nccl_op"}, {"api", NcclApiName(o->api)}, {"comm", o->comm}, {"stream", o->stream},
              {"bytes", o->bytes}, {"peer", o->peer}, {"result", o->result}, {"flags", o->flags}, {"site", o->site},
              {"datatype", int(o->datatype) - 1}});
    if (o->result == P2PTRACE_RESULT_PENDING) j["result"] = "pending";
  } else if (const auto* pr = std::get_if<p2ptrace_nccl_progress_record>(&r.body)) {
    j.update({{"kind", "nccl_progress"}, {"state", pr->state == P2PTRACE_PROGRESS_DONE ? "done" : "stalled"},
              {"stream", pr->stream}, {"comm", pr->comm}, {"through_ns", pr->through}, {"waited_ms", pr->waited_ms}});
  } else if (const auto* g = std::get_if<p2ptrace_graph_record>(&r.body)) {
    static constexpr const char* kEvent[] = {"", "end_capture", "instantiate", "launch", "exec_update", "exec_destroy",
                                             "graph_destroy", "include", "altered"};
    j.update({{"kind", "graph"}, {"event", g->event < std::size(kEvent) ? kEvent[g->event] : "unknown"},
              {"graph_id", g->graph_id}, {"handle", g->handle}, {"stream", g->stream}, {"result", g->result},
              {"flags", g->flags}});
    if (g->event == P2PTRACE_GRAPH_INCLUDE) j["included_id"] = g->included_id;
    if (g->event == P2PTRACE_GRAPH_ALTERED) j["api"] = ApiName(g->api);
  } else if (const auto* k = std::get_if<p2ptrace_nccl_kernel_record>(&r.body)) {
    j.update({{"kind", "nccl_kernel"}, {"api", NcclApiName(k->api)}, {"comm_hash", fmt::format("{:#x}", k->comm_hash)},
              {"rank", k->rank}, {"nranks", k->nranks}, {"peer", k->peer}, {"bytes", k->bytes},
              {"coll_seq", k->coll_seq}, {"channels", k->channels}, {"channel_mask", k->channel_mask},
              {"gpu_start_ns", k->gpu_start_ns}, {"duration_ns", k->duration_ns}, {"channel_ns", k->channel_ns},
              {"abi", k->abi}, {"algo", k->algo}, {"flags", k->flags}});
  } else if (const auto* i = std::get_if<p2ptrace_ipc_record>(&r.body)) {
    j.update({{"kind", "ipc"}, {"api", ApiName(i->api)}, {"device", i->device}, {"owner", i->owner_device},
              {"result", i->result}, {"address", i->address}});
  }
  return j;
}

// A connection NCCL logged (P2PTRACE_RECORD_NCCL_CONN).
json NcclConnection(const p2ptrace_nccl_conn_record& c) {
  static constexpr const char* kDirection[] = {"", "send", "receive"};
  return {{"kind", "nccl_conn"}, {"seq", c.h.seq}, {"time_ns", c.h.time_ns},
          {"comm", Field(c.comm, sizeof c.comm)}, {"comm_id", Field(c.comm_id, sizeof c.comm_id)},
          {"keyword", Field(c.keyword, sizeof c.keyword)}, {"channel", c.channel}, {"conn_index", c.conn_index},
          {"src_rank", c.src_rank}, {"dst_rank", c.dst_rank}, {"src_dev", Field(c.src_dev, sizeof c.src_dev)},
          {"dst_dev", Field(c.dst_dev, sizeof c.dst_dev)},
          {"direction", c.direction < 3 ? kDirection[c.direction] : "unknown"},
          {"transport", Field(c.transport, sizeof c.transport)},
          {"transport_cut", (c.flags & P2PTRACE_NCCL_CONN_CUT) != 0},
          {"class", TransportName(c.transport_class)}, {"line", c.line}};
}

// A call site the file describes (P2PTRACE_TEXT_CALL_SITE): what a record's "site" refers to.
json CallSiteJson(const CallSite& c) { return {{"kind", "call_site"}, {"id", c.id}, {"frames", c.frames}}; }

template <typename F>
void ForEachCounter(const Trace& t, F&& f) {
  for (int a = 0; a < static_cast<int>(t.header.max_devices); ++a)
    for (int b = 0; b < static_cast<int>(t.header.max_devices); ++b)
      for (int path = 0; path < 2; ++path) {
        const p2ptrace_pair_counters& c = t.Counter(a, b, path);
        if (c.calls || c.errors) f(a, b, path, c);
      }
}

}  // namespace

void DumpJson(const Trace& t, std::ostream& out) {
  out << JsonText(Header(t)) << "\n";
  ForEachCounter(t, [&](int a, int b, int path, const p2ptrace_pair_counters& c) {
    out << JsonText({{"kind", "counter"}, {"src", a}, {"dst", b}, {"path", path == 0 ? "direct" : "host_staged"},
                     {"calls", c.calls}, {"bytes", c.bytes}, {"errors", c.errors}, {"timed_calls", c.timed_calls},
                     {"timed_bytes", c.timed_bytes}, {"timed_ns", c.timed_ns}})
        << "\n";
  });
  for (const TraceRecord& r : t.records) out << JsonText(Record(r)) << "\n";
  for (const p2ptrace_nccl_conn_record& c : t.nccl_connections) out << JsonText(NcclConnection(c)) << "\n";
  for (const CallSite& c : t.call_sites) out << JsonText(CallSiteJson(c)) << "\n";
}

void DumpText(const Trace& t, std::ostream& out) {
  // Line by line through Printable: paths, host names and frames come from the file.
  auto line = [&](const std::string& text) { out << Printable(text) << "\n"; };
  const p2ptrace_file_header& h = t.header;
  line(fmt::format("{}: format {}.{}, host {}, pid {}, rank {}, {} device(s), {} record(s), {} dropped", t.path, h.major,
                   h.minor, t.Host(), h.pid, h.rank, h.device_count, t.records.size(), h.dropped_records));
  ForEachCounter(t, [&](int a, int b, int path, const p2ptrace_pair_counters& c) {
    line(fmt::format("  pair {} -> {} {}: {} copies, {} bytes, {} errors, {} timed ({} bytes in {} ns)", a, b,
                     a == b ? "same device" : path == 0 ? "direct" : "host-staged", c.calls, c.bytes, c.errors,
                     c.timed_calls, c.timed_bytes, c.timed_ns));
  });
  for (const TraceRecord& r : t.records) line("  " + JsonText(Record(r)));
  for (const p2ptrace_nccl_conn_record& c : t.nccl_connections) line("  " + JsonText(NcclConnection(c)));
  for (const CallSite& c : t.call_sites) {
    line(fmt::format("  call site {}:", c.id));
    for (const std::string& f : c.frames) line("    " + f);
  }
}

}  // namespace p2ptrace::cli
