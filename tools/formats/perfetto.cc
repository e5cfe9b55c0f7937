#include "tools/formats/perfetto.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/nccl_failures.h"
#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "p2ptrace/trace_format.h"
#include "tools/common/json_text.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

constexpr int64_t kJobPid = 1000000000;  // the metadata process; rank processes are rank + 1

std::string Quote(const std::string& s) { return JsonText(s); }

// This process's communicators: its ncclComm_t value -> the job-wide identity of the communicator
// and this process's rank in it.
using CommView = ExportCounts::CommView;
void AddComm(const TraceRecord& r, std::map<uint64_t, CommView>* comms) {
  if (const auto* c = std::get_if<p2ptrace_nccl_comm_record>(&r.body); c && c->comm && c->result == 0 && c->rank >= 0)
    (*comms)[c->comm] = CommView{c->id_hash, c->rank, c->nranks, c->cuda_device};
}

// A send/recv direction of one communicator: (comm hash, sending rank, receiving rank).
using Link = std::tuple<uint64_t, int, int>;
using LinkOps = ExportCounts::LinkOps;

// A process's device as the report names it ("GPU4": the host's index, never the CUDA ordinal).
class GpuNames {
 public:
  explicit GpuNames(const Report& report) {
    for (const ProcessInfo& p : report.processes) processes_[p.file] = &p;
  }
  std::string operator()(const Trace& t, int device) const {
    GpuRef g{t.Host(), t.BusId(device), -1};
    if (auto p = processes_.find(t.path); p != processes_.end() && device >= 0 &&
                                          device < static_cast<int>(p->second->gpus.size()))
      g.gpu = p->second->gpus[static_cast<size_t>(device)];
    if (g.gpu < 0 && g.bus_id.empty()) return fmt::format("CUDA device {}", device);
    return GpuName(g);
  }

 private:
  std::map<std::string, const ProcessInfo*> processes_;
};

class Writer {
 public:
  explicit Writer(std::ostream& out) : out_(out) {}
  void Event(const std::string& body) {
    out_ << (first_ ? "\n" : ",\n") << body;
    first_ = false;
  }
  void Metadata(int64_t pid, int64_t tid, const char* name, const json& args) {
    Event(fmt::format(R"({{"ph":"M","pid":{},"tid":{},"name":"{}","args":{}}})", pid, tid, name, JsonText(args)));
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

std::string Us(double us) { return fmt::format("{:.3f}", us); }

}  // namespace

// Pass 1, counts only, riding on the report's read (StreamOptions hooks): events that get a slice
// (for the sampling stride), and each send/recv direction's calls (flows join the k-th send to the
// k-th recv). Per file it holds the timed copies' seqs; over the job, one entry per direction.
void ExportCounts::Add(const TraceRecord& r) {
  AddComm(r, &file_comms_);
  if (const auto* c = std::get_if<p2ptrace_copy_record>(&r.body)) {
    if (c->result == 0 && !(c->flags & P2PTRACE_COPY_CAPTURED)) copy_seqs_.push_back(c->h.seq);
  } else if (const auto* tr = std::get_if<p2ptrace_timing_record>(&r.body)) {
    timed_seqs_.push_back(tr->h.seq);
  } else if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body);
             o && !NcclCallFailed(o->result) && o->result != P2PTRACE_RESULT_PENDING && !(o->flags & P2PTRACE_NCCL_CAPTURED)) {
    ++events;  // every NCCL call has a slice: a zero-length one when it was not timed
    if (o->api == P2PTRACE_NCCL_Send || o->api == P2PTRACE_NCCL_Recv) ++file_p2p_[{o->comm, o->api, o->peer}];
  } else if (std::holds_alternative<p2ptrace_nccl_kernel_record>(r.body)) {
    ++events;  // an operation timed on the GPU: a slice of its own
  }
}

void ExportCounts::EndTrace(const Trace& t) {
  t0 = std::min(t0, t.header.start_realtime_ns);
  std::sort(timed_seqs_.begin(), timed_seqs_.end());
  for (uint32_t seq : copy_seqs_) events += std::binary_search(timed_seqs_.begin(), timed_seqs_.end(), seq);
  for (const auto& [k, n] : file_p2p_) {
    const auto& [comm, api, peer] = k;
    auto c = file_comms_.find(comm);
    if (c == file_comms_.end()) continue;
    bool send = api == P2PTRACE_NCCL_Send;
    LinkOps& l = links[send ? Link{c->second.hash, c->second.rank, peer} : Link{c->second.hash, peer, c->second.rank}];
    (send ? l.sends : l.recvs) += n;
  }
  Abandon();
}

void ExportCounts::Abandon() {
  file_comms_.clear();
  file_p2p_.clear();
  std::vector<uint32_t>().swap(copy_seqs_);
  std::vector<uint32_t>().swap(timed_seqs_);
}

ExportStats WritePerfetto(const Report& report, ExportCounts& counts, const ExportOptions& options, std::ostream& out,
                          std::ostream& err, const std::function<void(size_t, size_t)>& progress) {
  ExportStats stats;
  GpuNames gpu_name(report);
  stats.events = counts.events;
  std::map<Link, LinkOps>& links = counts.links;
  uint64_t t0 = counts.t0 == UINT64_MAX ? 0 : counts.t0;
  uint64_t next_flow = 1;
  for (auto& [k, l] : links) {
    l.first_flow_id = next_flow;
    next_flow += std::min(l.sends, l.recvs);
  }
  stats.stride = options.max_slices && stats.events > options.max_slices
                     ? (stats.events + options.max_slices - 1) / options.max_slices
                     : 1;

  Writer w(out);
  out << R"({"displayTimeUnit":"ms","otherData":)"
      << JsonText({{"generator", "p2ptrace export"}, {"source", report.path}, {"format", "Chrome trace event JSON, ts in µs"},
                   {"kept_every", stats.stride}})
      << R"(,"traceEvents":[)";

  // The job process: what the report concluded, readable in the UI's details panel.
  w.Metadata(kJobPid, 0, "process_name", {{"name", "p2ptrace job: " + report.path}});
  w.Metadata(kJobPid, 0, "process_sort_index", {{"sort_index", -1}});
  std::set<std::string> hosts;
  for (const ProcessInfo& p : report.processes) hosts.insert(p.host);
  w.Metadata(kJobPid, 1, "thread_name", {{"name", "summary"}});
  w.Event(fmt::format(R"({{"ph":"i","s":"t","pid":{},"tid":1,"ts":0,"cat":"p2ptrace.meta","name":"job summary","args":{}}})",
                      kJobPid,
                      JsonText({{"processes", report.processes.size()}, {"hosts", hosts.size()},
                                {"skipped_files", report.problems.size()}, {"partly_read_files", report.partial.size()},
                                {"events", stats.events}, {"kept_every", stats.stride}})));
  int64_t tid = 2;
  for (const std::string& host : hosts) {
    // Rows: source GPU; each cell every class the pair used, most bytes (or connections) first.
    std::map<std::string, std::map<std::string, std::vector<std::pair<uint64_t, std::string>>>> cells;
    for (const PairEntry& e : report.pairs)
      if (e.src.host == host && e.dst.host == host)
        cells[GpuName(e.src)][GpuName(e.dst)].emplace_back(e.source == "nccl" ? e.channels : e.bytes,
                                                 std::string(TransportName(e.transport)));
    if (cells.empty()) continue;
    json rows = json::object();
    for (auto& [src, dsts] : cells)
      for (auto& [dst, used] : dsts) {
        std::sort(used.rbegin(), used.rend());
        std::string cell;
        for (const auto& [weight, name] : used) cell += (cell.empty() ? "" : "+") + name;
        rows[src][dst] = cell;
      }
    w.Metadata(kJobPid, tid, "thread_name", {{"name", "matrix " + host}});
    w.Event(fmt::format(R"({{"ph":"i","s":"t","pid":{},"tid":{},"ts":0,"cat":"p2ptrace.meta","name":{},"args":{}}})",
                        kJobPid, tid, Quote("pair matrix " + host), JsonText({{"rows", rows}})));
    ++tid;
  }
  w.Metadata(kJobPid, tid, "thread_name", {{"name", "findings"}});
  for (const Finding& f : report.findings) {
    constexpr size_t kPairs = 64;
    std::vector<std::string> pairs(f.pairs.begin(), f.pairs.begin() + std::min(f.pairs.size(), kPairs));
    json args{{"id", f.id}, {"severity", f.severity}, {"pairs", pairs}, {"pair_count", f.pairs.size()},
              {"evidence", f.evidence}, {"fix", f.fix}};
    w.Event(fmt::format(R"({{"ph":"i","s":"t","pid":{},"tid":{},"ts":0,"cat":"p2ptrace.meta","name":{},"args":{}}})",
                        kJobPid, tid, Quote(f.severity + " [" + f.id + "]"), JsonText(args)));
  }
  // Arrival skew: per collective of the slow-rank finding's communicator (else the largest
  // compared), how far each rank called behind the first, one series per rank on one counter.
  for (const CommArrivals& c : report.slow_rank.comms) {
    if (c.series.empty()) continue;
    ++tid;
    std::string name = fmt::format("arrival lag, comm {} (ms behind the first caller)", c.id);
    w.Metadata(kJobPid, tid, "thread_name", {{"name", name}});
    for (const CommArrivals::Point& p : c.series) {
      json args = json::object();
      for (size_t r = 0; r < p.lag_ms.size() && r < c.series_ranks.size(); ++r)
        args[fmt::format("rank {}", c.series_ranks[r])] = std::round(static_cast<double>(p.lag_ms[r]) * 1000) / 1000;  // to the µs
      double at = static_cast<double>(static_cast<int64_t>(p.first_realtime_ns - t0)) / 1000.0;
      w.Event(fmt::format(R"({{"ph":"C","pid":{},"tid":{},"ts":{},"name":{},"args":{}}})", kJobPid, tid, Us(at), Quote(name),
                          JsonText(args)));
      ++stats.counters;
    }
  }

  // Pass 2, one process at a time, its file read again (twice: its communicators and timings
  // first, then its records in order): its name, its tracks, its slices. Memory: one file's timings.
  std::set<int64_t> pids;
  uint64_t slice_id = 0;
  for (size_t index = 0; index < report.processes.size(); ++index) {
    if (progress) progress(index, report.processes.size());
    const std::string& file = report.processes[index].file;
    std::map<uint64_t, CommView> comms;
    std::unordered_map<uint32_t, uint64_t> timed;  // seq -> measured duration (TIMING records)
    Expected<Trace> first = ReadTrace(file, {}, [&](const TraceRecord& r) {
      AddComm(r, &comms);
      if (const auto* tr = std::get_if<p2ptrace_timing_record>(&r.body)) timed[tr->h.seq] = tr->duration_ns;
    });
    if (!first.ok()) {  // read a moment ago: removed or replaced since
      err << "p2ptrace export: skipped " << first.error().message << " (on the second read)\n";
      continue;
    }
    const Trace& t = *first;
    const p2ptrace_file_header& h = t.header;
    // One timeline process per NCCL rank: a process that drives several GPUs (nccl-tests' -g,
    // ncclCommInitAll) holds several ranks, each on its own GPU. A GPU's rank is its rank in the
    // largest communicator of this process that uses it (the world, not a split of it).
    std::map<int, CommView> rank_of_device;  // CUDA device -> that communicator's view
    for (const auto& [ptr, view] : comms) {
      if (view.device < 0) continue;
      auto [it, added] = rank_of_device.try_emplace(view.device, view);
      if (!added && view.nranks > it->second.nranks) it->second = view;
    }
    struct Lane {
      int64_t pid = 0;
      std::map<std::string, std::pair<int64_t, uint64_t>> tracks;  // label -> (tid, slices seen)
    };
    std::map<int, Lane> lanes;  // CUDA device (-1: the process as a whole) -> its timeline process
    auto name_lane = [&](int key, int device, int rank, int64_t wanted, int64_t fallback) {
      Lane& lane = lanes[key];
      lane.pid = wanted > 0 && pids.insert(wanted).second ? wanted : fallback;
      pids.insert(lane.pid);
      std::string gpu = device >= 0 ? " " + gpu_name(t, device) : "";
      std::string name = rank >= 0 ? fmt::format("rank {} · {}{} (pid {})", rank, t.Host(), gpu, h.pid)
                                   : fmt::format("{}{} pid {}", t.Host(), gpu, h.pid);
      w.Metadata(lane.pid, 0, "process_name", {{"name", name}});
      w.Metadata(lane.pid, 0, "process_sort_index", {{"sort_index", rank >= 0 ? rank : lane.pid}});
    };
    if (rank_of_device.size() > 1) {
      for (const auto& [device, view] : rank_of_device)
        name_lane(device, device, view.rank, view.rank + 1,
                  2000000 + static_cast<int64_t>(index) * P2PTRACE_MAX_DEVICES + device);  // a rank seen twice: a fork
    } else {
      int device = !comms.empty() && comms.begin()->second.device >= 0 ? comms.begin()->second.device
                   : h.device_count == 1                                 ? 0
                                                                         : -1;
      int rank = h.rank >= 0 ? h.rank : rank_of_device.size() == 1 ? rank_of_device.begin()->second.rank : -1;
      // Every event of the process goes there.
      name_lane(-1, device, rank, rank >= 0 ? rank + 1 : 0, 1000000 + static_cast<int64_t>(index));  // unranked, or a fork
    }
    // The timeline process of an event on `device` (a copy's source GPU, an operation's
    // communicator's GPU): its GPU's, else the process's first.
    auto lane_of = [&](int device) -> Lane& {
      if (auto it = lanes.find(device); it != lanes.end()) return it->second;
      if (auto it = lanes.find(-1); it != lanes.end()) return it->second;
      return lanes.begin()->second;
    };
    // In integers: a double holds an epoch in ns only to ~256 ns.
    auto us = [&](uint64_t mono) {
      int64_t ns = static_cast<int64_t>(h.start_realtime_ns - t0) + static_cast<int64_t>(mono - h.start_monotonic_ns);
      return static_cast<double>(ns) / 1000.0;
    };
    using Track = std::pair<int64_t, uint64_t>;
    auto track = [&](Lane& lane, const std::string& label) -> Track& {
      auto [it, added] = lane.tracks.try_emplace(label, static_cast<int64_t>(lane.tracks.size()) + 1, 0);
      if (added) {
        w.Metadata(lane.pid, it->second.first, "thread_name", {{"name", label}});
        w.Metadata(lane.pid, it->second.first, "thread_sort_index", {{"sort_index", it->second.first}});
      }
      return it->second;
    };
    auto slice = [&](const std::string& label, int64_t pid, int64_t on, const char* cat, double begin, double end,
                     const json& args, const std::string& flow) {
      std::string id = fmt::format("0x{:x}", ++slice_id);
      w.Event(fmt::format(R"({{"ph":"b","cat":"{}","id":"{}","pid":{},"tid":{},"ts":{},"name":{},"args":{}{}}})", cat, id,
                          pid, on, Us(begin), Quote(label), JsonText(args), flow));
      w.Event(fmt::format(R"({{"ph":"e","cat":"{}","id":"{}","pid":{},"tid":{},"ts":{},"name":{}}})", cat, id, pid, on,
                          Us(end), Quote(label)));
      ++stats.slices;
    };
    auto counter = [&](const std::string& label, int64_t pid, int64_t on, double at, double gbps) {
      w.Event(fmt::format(R"({{"ph":"C","pid":{},"tid":{},"ts":{},"name":{},"args":{{"GB/s":{:.3f}}}}})", pid, on, Us(at),
                          Quote(label), gbps));
      ++stats.counters;
    };
    std::map<Link, uint64_t> ordinal;  // sends/recvs seen so far per direction
    struct Cached {
      std::string label;
      int64_t pid = 0;
      Track* track = nullptr;
    };
    std::map<std::tuple<int, int, int>, Cached> copy_tracks;  // (src, dst, path)
    std::map<std::tuple<int, uint64_t, int, int, int>, Cached> nccl_tracks;  // (api|-1, comm, link, device)
    std::map<std::tuple<int, uint64_t, int, int, int>, Cached> kernel_tracks;  // (api, NCCL's comm hash, from, to, device)
    auto emit = [&](const TraceRecord& r) {
      if (const auto* c = std::get_if<p2ptrace_copy_record>(&r.body)) {
        // A captured copy ran nothing when called (its seq is a graph id): graph launches have no slices yet.
        if (c->flags & P2PTRACE_COPY_CAPTURED) return;
        auto d = timed.find(c->h.seq);
        if (d == timed.end() || c->result != 0 || c->src_device < 0 || c->dst_device < 0) return;
        // A label per (devices, path), formatted once per file: most records are thinned away.
        auto [cached, added] = copy_tracks.try_emplace({c->src_device, c->dst_device, c->transport});
        if (added) {
          cached->second.label = fmt::format("{} -> {} {}", gpu_name(t, c->src_device),
                                             gpu_name(t, c->dst_device), TransportName(c->transport));
          Lane& lane = lane_of(c->src_device);
          cached->second.pid = lane.pid;
          cached->second.track = &track(lane, cached->second.label);
        }
        const std::string& label = cached->second.label;
        int64_t pid = cached->second.pid;
        auto& [on, seen] = *cached->second.track;
        if (seen++ % stats.stride != 0) return;
        double begin = us(c->h.time_ns), end = us(c->h.time_ns + d->second);
        double gbps = std::max(0.0, MeasuredGbps(c->bytes, d->second));  // core/rate.h: none past any hardware
        slice(label, pid, on, "p2ptrace.copy", begin, end,
              {{"api", ApiName(c->api)}, {"bytes", c->bytes}, {"gbps", gbps}, {"transport", TransportName(c->transport)},
               {"seq", c->h.seq}},
              "");
        counter(label, pid, on, begin, gbps);
        counter(label, pid, on, end, 0);
      } else if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body)) {
        if (NcclCallFailed(o->result) || o->result == P2PTRACE_RESULT_PENDING || (o->flags & P2PTRACE_NCCL_CAPTURED)) return;
        auto cv = comms.find(o->comm);
        CommView comm = cv != comms.end() ? cv->second : CommView{};
        bool send = o->api == P2PTRACE_NCCL_Send, recv = o->api == P2PTRACE_NCCL_Recv;
        uint64_t k = 0;
        Link link{comm.hash, send ? comm.rank : o->peer, send ? o->peer : comm.rank};
        if ((send || recv) && cv != comms.end()) k = ordinal[link]++;
        auto d = timed.find(o->h.seq);
        uint64_t duration = d == timed.end() ? 0 : d->second;  // calls inside a group are not timed
        auto [cached, added] = nccl_tracks.try_emplace(
            send || recv ? std::make_tuple(-1, comm.hash, std::get<1>(link), std::get<2>(link), comm.device)
                         : std::make_tuple(int{o->api}, comm.hash, 0, 0, comm.device));
        if (added) {
          cached->second.label = send || recv
                                     ? fmt::format("NCCL rank {} -> rank {}", std::get<1>(link), std::get<2>(link))
                                     : fmt::format("NCCL {} comm {:08x}", NcclApiName(o->api), comm.hash >> 32);
          Lane& lane = lane_of(comm.device);
          cached->second.pid = lane.pid;
          cached->second.track = &track(lane, cached->second.label);
        }
        const std::string& label = cached->second.label;
        int64_t pid = cached->second.pid;
        auto& [on, seen] = *cached->second.track;
        // Sends and recvs sample by their ordinal, the same on both ends; the rest by track order.
        if ((send || recv ? k : seen) % stats.stride != 0) {
          ++seen;
          return;
        }
        ++seen;
        std::string flow;
        if ((send || recv) && cv != comms.end()) {
          const LinkOps& l = links[link];
          if (k < std::min(l.sends, l.recvs)) {
            flow = fmt::format(R"(,"bind_id":{},"{}":true)", l.first_flow_id + k, send ? "flow_out" : "flow_in");
            stats.flows += send;
          }
        }
        double begin = us(o->h.time_ns), end = us(o->h.time_ns + duration);
        json args{{"op", NcclApiName(o->api)}, {"bytes", o->bytes}, {"timed", duration > 0},
                  {"comm", fmt::format("{:016x}", comm.hash)}, {"nranks", comm.nranks}, {"seq", o->h.seq}};
        if (o->peer >= 0) args["peer"] = o->peer;
        // Inside a group the duration is the group's on this stream, shared by all its operations:
        // the slice spans it, but no rate of this one operation follows from it.
        bool grouped = (o->flags & P2PTRACE_NCCL_IN_GROUP) != 0;
        if (duration) args["timing"] = grouped ? "its group's duration (shared by the group's operations on this stream)" : "own events";
        // One rank moves nothing across a link; no rate past any hardware (core/rate.h).
        double gbps = !grouped && comm.nranks != 1 ? std::max(0.0, MeasuredGbps(o->bytes, duration)) : 0;
        if (gbps > 0) args["gbps"] = gbps;
        slice(label, pid, on, "p2ptrace.nccl", begin, end, args, flow);
        if (gbps > 0) {
          counter(label, pid, on, begin, gbps);
          counter(label, pid, on, end, 0);
        }
      } else if (const auto* k = std::get_if<p2ptrace_nccl_kernel_record>(&r.body)) {
        // NCCL's kernel timers (trace 1.9): the GPU's own start and stop, in its clock. Placed to end
        // when the shim read the last channel's stop (h.time_ns, the CPU's clock), just after it ended.
        int device = -1;
        for (const auto& [ptr, view] : comms)
          if (view.rank == k->rank && view.nranks == k->nranks) device = view.device;
        bool p2p = k->api == P2PTRACE_NCCL_Send || k->api == P2PTRACE_NCCL_Recv;
        int from = k->api == P2PTRACE_NCCL_Recv ? k->peer : k->rank, to = k->api == P2PTRACE_NCCL_Recv ? k->rank : k->peer;
        auto [cached, added] = kernel_tracks.try_emplace({k->api, k->comm_hash, from, to, device});
        if (added) {
          cached->second.label = p2p ? fmt::format("NCCL kernel rank {} -> rank {}", from, to)
                                     : fmt::format("NCCL kernel {} comm {:#x}", NcclApiName(k->api), k->comm_hash);
          Lane& lane = lane_of(device);
          cached->second.pid = lane.pid;
          cached->second.track = &track(lane, cached->second.label);
        }
        auto& [on, seen] = *cached->second.track;
        if (seen++ % stats.stride != 0) return;
        double end = us(k->h.time_ns), begin = end - static_cast<double>(k->duration_ns) / 1000.0;
        json args{{"op", NcclApiName(k->api)}, {"bytes", k->bytes}, {"timing", "NCCL kernel timers"},
                  {"channels", k->channels}, {"channel_mask", fmt::format("{:#x}", k->channel_mask)},
                  {"gpu_start_ns", k->gpu_start_ns}, {"comm", fmt::format("{:#x}", k->comm_hash)}, {"rank", k->rank}};
        if (k->peer >= 0) args["peer"] = k->peer;
        if (k->flags & P2PTRACE_NCCL_KERNEL_PARTIAL) args["partial"] = true;
        // A send's or receive's own rate; a collective's bytes are not one link's.
        double gbps = p2p ? std::max(0.0, MeasuredGbps(k->bytes, k->duration_ns)) : 0;
        if (gbps > 0) args["gbps"] = gbps;
        slice(cached->second.label, cached->second.pid, on, "p2ptrace.nccl_kernel", begin, end, args, "");
        if (gbps > 0) {
          counter(cached->second.label, cached->second.pid, on, begin, gbps);
          counter(cached->second.label, cached->second.pid, on, end, 0);
        }
      }
    };
    if (Expected<Trace> again = ReadTrace(file, {}, emit); !again.ok())
      err << "p2ptrace export: partly written " << again.error().message << " (on the second read)\n";
  }
  if (progress) progress(report.processes.size(), report.processes.size());
  out << "\n]}\n";
  return stats;
}

}  // namespace p2ptrace::cli
