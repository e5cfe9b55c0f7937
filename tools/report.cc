#include "tools/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <variant>
#include <tuple>

#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"

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

std::string Version(int v) { return v > 0 ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : "?"; }

std::string Bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return fmt::format("{} B", b);
}

// What one process knew about one of its device pairs.
struct PeerFacts {
  int can_access = -1;          // last cudaDeviceCanAccessPeer answer, -1 never asked
  bool enabled_ever = false;    // a successful (or 704) enable from either side
  std::vector<std::string> failed_enables;
};

struct Key {
  std::string host, src, dst;
  int transport;
  bool operator<(const Key& o) const {
    return std::tie(host, src, dst, transport) < std::tie(o.host, o.src, o.dst, o.transport);
  }
};

std::string DeviceName(const Trace& t, int d) {
  std::string bus = t.BusId(d);
  return bus.empty() ? fmt::format("device{}", d) : bus;
}

// NCCL operations from the traces: per (communicator, operation), calls, bytes and the timed subset.
void AddNcclOps(const LoadedTraces& loaded, Report* rep) {
  std::map<std::pair<uint64_t, int>, NcclOpSummary> ops;
  for (const Trace& t : loaded.traces) {
    std::map<uint64_t, uint64_t> comm_hash;  // comm pointer -> id hash (this process)
    std::map<uint64_t, int> comm_nranks;
    std::map<uint32_t, uint64_t> timed_ns;   // seq -> measured duration
    for (const TraceRecord& r : t.records) {
      if (const auto* c = std::get_if<p2ptrace_nccl_comm_record>(&r.body); c && c->comm && c->result == 0) {
        comm_hash[c->comm] = c->id_hash;
        comm_nranks[c->comm] = c->nranks;
      } else if (const auto* tr = std::get_if<p2ptrace_timing_record>(&r.body); tr && tr->src_device < 0) {
        timed_ns[tr->h.seq] = tr->duration_ns;
      }
    }
    for (const TraceRecord& r : t.records) {
      const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body);
      if (o == nullptr) continue;
      uint64_t hash = comm_hash.count(o->comm) ? comm_hash[o->comm] : 0;
      NcclOpSummary& s = ops[{hash, o->api}];
      s.comm = fmt::format("{:016x}", hash);
      s.nranks = std::max(s.nranks, comm_nranks.count(o->comm) ? comm_nranks[o->comm] : 0);
      s.op = std::string(NcclApiName(o->api));
      s.ranks.insert(t.header.rank);
      if (o->result != 0) {
        ++s.errors;
        continue;
      }
      ++s.calls;
      s.bytes += o->bytes;
      if (auto it = timed_ns.find(o->h.seq); it != timed_ns.end()) {
        ++s.timed_calls;
        s.timed_bytes += o->bytes;
        s.timed_ns += it->second;
      }
    }
  }
  for (auto& [k, s] : ops) rep->nccl_ops.push_back(s);
}

// NCCL prints busId as the hex of "dddd:bb:dd.f" without separators ("1a000"): back to PCI form.
std::string BusFromNccl(const std::string& hex) {
  if (hex.empty() || hex.find(':') != std::string::npos) return hex;
  unsigned long long v = std::strtoull(hex.c_str(), nullptr, 16);
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", v >> 20, (v >> 12) & 0xff, (v >> 4) & 0xff, v & 0xf);
}

const char* RefusalFix(const std::string& kind) {
  if (kind == "env-p2p-disabled")
    return "unset NCCL_P2P_DISABLE: it is a diagnostic that forces the host path, not a fix";
  if (kind == "env-p2p-level") return "raise or unset NCCL_P2P_LEVEL (NCCL's default follows the topology)";
  return "see `p2ptrace doctor` on that node for why the driver refuses P2P";
}

// The transports NCCL reported, per directional GPU pair, from the logs the shim tapped.
void AddNcclPairs(const LoadedTraces& loaded, std::map<std::string, std::set<std::string>>* host_buses, Report* rep) {
  struct Who {
    std::string host, bus;
  };
  // Ranks of one communicator share commId (NCCL ≥ 2.16); without it, one process holds them all.
  auto comm_key = [](const RankIdentity& id) {
    return id.comm_id.empty() ? fmt::format("{}:{}:{}", id.host, id.pid, id.nranks) : id.comm_id;
  };
  std::map<std::pair<std::string, int>, Who> who;
  for (const NcclLogFile& f : loaded.nccl_logs)
    for (const RankIdentity& id : f.log.ranks) {
      who[{comm_key(id), id.rank}] = Who{id.host, BusFromNccl(id.bus_id)};
      if (!id.bus_id.empty()) (*host_buses)[id.host].insert(BusFromNccl(id.bus_id));
    }
  auto gpu_of = [&](const Who& w) {
    GpuRef g{w.host, w.bus, -1};
    const auto& buses = (*host_buses)[w.host];
    if (auto it = buses.find(w.bus); it != buses.end()) g.gpu = static_cast<int>(std::distance(buses.begin(), it));
    return g;
  };
  std::map<std::tuple<std::string, std::string, std::string, std::string, int>, PairEntry> pairs;
  for (const NcclLogFile& f : loaded.nccl_logs)
    for (const Connection& c : f.log.connections) {
      if (c.dst_rank < 0) continue;  // CollNet lines name no peer
      const RankIdentity* me = f.log.FindRank(c.logger.host, c.logger.pid, c.comm);
      if (me == nullptr) continue;
      std::string key = comm_key(*me);
      auto src = who.find({key, c.src_rank});
      auto dst = who.find({key, c.dst_rank});
      if (src == who.end() || dst == who.end()) continue;
      PairEntry& e = pairs[{src->second.host, src->second.bus, dst->second.host, dst->second.bus, c.transport_class}];
      e.source = "nccl";
      e.src = gpu_of(src->second);
      e.dst = gpu_of(dst->second);
      e.transport = c.transport_class;
      e.nccl_transports.insert(c.transport);
      ++e.channels;
      e.ranks.insert(c.src_rank);
    }
  for (auto& [k, e] : pairs) {
    // NCCL said why it refused P2P on this host: that explains a host or network path there.
    bool host_path = e.transport == P2PTRACE_TRANSPORT_SHM || e.transport == P2PTRACE_TRANSPORT_NET_IB ||
                     e.transport == P2PTRACE_TRANSPORT_NET_GDR || e.transport == P2PTRACE_TRANSPORT_NET_SOCKET;
    if (host_path && e.src.host == e.dst.host) {
      for (const NcclLogFile& f : loaded.nccl_logs)
        for (const Refusal& r : f.log.refusals)
          if (r.logger.host == e.src.host && e.causes.empty()) {
            e.causes.push_back(Cause{r.kind, {fmt::format("NCCL: {}", r.text)}, RefusalFix(r.kind)});
            e.fallback = true;
          }
    }
    rep->pairs.push_back(e);
  }
}

}  // namespace

// nccl-tests' conventions: the size of an allgather/reducescatter is the full buffer (count × ranks);
// busbw scales algbw by what each link carries.
double NcclOpSummary::AlgBw() const {
  if (timed_ns == 0) return -1;
  double size = static_cast<double>(timed_bytes);
  if (op == "ncclAllGather" || op == "ncclReduceScatter") size *= std::max(nranks, 1);
  return size / static_cast<double>(timed_ns);
}

double NcclOpSummary::BusBw() const {
  double alg = AlgBw(), n = std::max(nranks, 1);
  if (alg < 0) return -1;
  if (op == "ncclAllReduce") return alg * 2 * (n - 1) / n;
  if (op == "ncclAllGather" || op == "ncclReduceScatter" || op == "ncclAlltoAll") return alg * (n - 1) / n;
  return alg;
}

Report BuildReport(const std::string& path, const LoadedTraces& loaded) {
  Report rep;
  rep.path = path;
  rep.problems = loaded.problems;
  rep.nccl_logs = loaded.nccl_logs.size();
  // GPU indices per host: the PCI order of every bus id any process on that host saw.
  std::map<std::string, std::set<std::string>> host_buses;
  for (const Trace& t : loaded.traces)
    for (int d = 0; d < std::min(t.header.device_count, P2PTRACE_MAX_DEVICES); ++d)
      if (!t.BusId(d).empty()) host_buses[t.Host()].insert(t.BusId(d));
  auto gpu_ref = [&](const Trace& t, int d) {
    GpuRef g{t.Host(), DeviceName(t, d), -1};
    const auto& buses = host_buses[g.host];
    auto it = buses.find(g.bus_id);
    if (it != buses.end()) g.gpu = static_cast<int>(std::distance(buses.begin(), it));
    return g;
  };

  std::map<Key, PairEntry> pairs;
  for (const Trace& t : loaded.traces) {
    const p2ptrace_file_header& h = t.header;
    ProcessInfo p;
    p.rank = h.rank;
    p.pid = h.pid;
    p.host = t.Host();
    p.file = t.path;
    p.state = StateText(h);
    for (int d = 0; d < std::min(h.device_count, P2PTRACE_MAX_DEVICES); ++d) p.bus_ids.push_back(t.BusId(d));
    p.runtime_version = h.cuda_runtime_version;
    p.driver_version = h.cuda_driver_version;
    p.capture_flags = h.capture_flags;
    p.dropped_records = h.dropped_records;
    std::string level = t.Env("NCCL_DEBUG");
    for (char& ch : level) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (t.Env("P2PTRACE_NCCL_TAP") == "1") p.nccl_log = "tapped";
    else if (!t.Env("NCCL_DEBUG_FILE").empty()) p.nccl_log = "user file";
    else if (level == "INFO" || level == "TRACE")
      p.nccl_log = "not seen: NCCL_DEBUG=" + level + " prints to the job's own output; set NCCL_DEBUG_FILE to let p2ptrace read it";
    else if (!level.empty())
      p.nccl_log = "not seen: NCCL_DEBUG=" + level + " hides the transport lines; unset it to let p2ptrace tap them";
    else p.nccl_log = "not seen: P2PTRACE_NCCL_LOG=off";
    rep.processes.push_back(p);

    // Peer facts from this process's records, per unordered device pair.
    std::map<std::pair<int, int>, PeerFacts> facts;
    auto unordered = [](int a, int b) { return std::pair{std::min(a, b), std::max(a, b)}; };
    for (const TraceRecord& r : t.records) {
      const auto* pr = std::get_if<p2ptrace_peer_record>(&r.body);
      if (pr == nullptr || pr->device < 0 || pr->peer < 0) continue;
      PeerFacts& f = facts[unordered(pr->device, pr->peer)];
      if (pr->api == P2PTRACE_API_cudaDeviceCanAccessPeer && pr->result == 0) f.can_access = pr->value;
      if (pr->api == P2PTRACE_API_cudaDeviceEnablePeerAccess) {
        if (pr->result == 0 || pr->result == 704) f.enabled_ever = true;
        else f.failed_enables.push_back(fmt::format("cudaDeviceEnablePeerAccess({}) on device {} returned {}",
                                                    pr->peer, pr->device, pr->result));
      }
    }

    for (int a = 0; a < static_cast<int>(h.max_devices); ++a)
      for (int b = 0; b < static_cast<int>(h.max_devices); ++b) {
        if (a == b) continue;
        for (int path_kind = 0; path_kind < 2; ++path_kind) {
          const p2ptrace_pair_counters& c = t.Counter(a, b, path_kind);
          if (c.calls == 0 && c.errors == 0) continue;
          int direct = h.direct_transport[a][b] ? int{h.direct_transport[a][b]} : int{P2PTRACE_TRANSPORT_P2P};
          int transport = path_kind == 0 ? direct : int{P2PTRACE_TRANSPORT_HOST_STAGED};
          GpuRef src = gpu_ref(t, a), dst = gpu_ref(t, b);
          PairEntry& e = pairs[Key{src.host, src.bus_id, dst.bus_id, transport}];
          e.src = src;
          e.dst = dst;
          e.transport = transport;
          e.calls += c.calls;
          e.bytes += c.bytes;
          e.errors += c.errors;
          e.timed_calls += c.timed_calls;
          e.timed_bytes += c.timed_bytes;
          e.timed_ns += c.timed_ns;
          e.ranks.insert(h.rank);
          // What the node allows: NVML's P2P status, else the application's own capability query.
          int status = h.nvml_p2p_status[a][b];
          const PeerFacts& f = facts[unordered(a, b)];
          bool p2p_possible = status == 1 || (status == 0 && f.can_access == 1);
          bool p2p_impossible = (status > 1) || (status == 0 && f.can_access == 0);
          if (p2p_possible) e.expected = direct;
          else if (p2p_impossible) e.expected = P2PTRACE_TRANSPORT_HOST_STAGED;
          if (transport != P2PTRACE_TRANSPORT_HOST_STAGED || !e.causes.empty()) continue;
          Cause cause;
          if (p2p_possible) {
            e.fallback = true;
            cause.id = "peer-access-not-enabled";
            cause.evidence.push_back(fmt::format("{} cudaMemcpy* calls ({}) from GPU {} to GPU {} went through host memory",
                                                 c.calls, Bytes(c.bytes), src.bus_id, dst.bus_id));
            if (f.enabled_ever)
              cause.evidence.push_back("peer access between them was not enabled when these copies ran "
                                       "(it was enabled at another time)");
            else if (f.failed_enables.empty())
              cause.evidence.push_back("cudaDeviceEnablePeerAccess was never called between these two devices");
            for (const std::string& fe : f.failed_enables) cause.evidence.push_back(fe);
            if (status == 1) cause.evidence.push_back("NVML P2P status between them: OK");
            if (f.can_access == 1) cause.evidence.push_back("cudaDeviceCanAccessPeer said 1");
            cause.fix = "enable peer access before copying: on each device cudaSetDevice(a); "
                        "cudaDeviceEnablePeerAccess(b, 0) for every peer b it copies with";
          } else if (p2p_impossible) {
            cause.id = status > 1 ? "nvml-p2p-status" : "cuda-no-peer-access";
            if (status > 1) cause.evidence.push_back(fmt::format("NVML P2P status: {}", NvmlStatusText(status)));
            if (f.can_access == 0) cause.evidence.push_back("cudaDeviceCanAccessPeer said 0");
            cause.fix = "this pair cannot use P2P on this node; place communicating ranks on GPUs that can "
                        "(nvidia-smi topo -p2p r), or see `p2ptrace doctor` for why";
          } else {
            cause.id = "unknown";
            cause.evidence.push_back("checked: NVML P2P status (unavailable), cudaDeviceCanAccessPeer (never called)");
          }
          e.causes.push_back(cause);
        }
      }
  }
  for (auto& [k, e] : pairs) rep.pairs.push_back(e);
  AddNcclPairs(loaded, &host_buses, &rep);
  AddNcclOps(loaded, &rep);
  std::sort(rep.pairs.begin(), rep.pairs.end(), [](const PairEntry& x, const PairEntry& y) {
    return std::tie(x.src.host, x.src.gpu, x.src.bus_id, x.dst.gpu, x.dst.bus_id, x.transport) <
           std::tie(y.src.host, y.src.gpu, y.src.bus_id, y.dst.gpu, y.dst.bus_id, y.transport);
  });
  // One finding per cause id, listing its pairs.
  std::map<std::string, Finding> by_cause;
  for (const PairEntry& e : rep.pairs)
    for (const Cause& c : e.causes) {
      Finding& f = by_cause[c.id];
      f.id = c.id;
      f.severity = e.fallback ? "warning" : "info";
      f.pairs.push_back(fmt::format("{} GPU{} -> GPU{}", e.src.host, e.src.gpu, e.dst.gpu));
      if (f.evidence.empty()) f.evidence = c.evidence;
      f.fix = c.fix;
    }
  for (auto& [id, f] : by_cause) rep.findings.push_back(f);
  return rep;
}

namespace {

const char* Short(int transport) {
  switch (transport) {
    case P2PTRACE_TRANSPORT_NVLINK: return "NVL";
    case P2PTRACE_TRANSPORT_PCIE_P2P: return "PCI";
    case P2PTRACE_TRANSPORT_P2P: return "P2P";
    case P2PTRACE_TRANSPORT_HOST_STAGED: return "HST";
    case P2PTRACE_TRANSPORT_SHM: return "SHM";
    case P2PTRACE_TRANSPORT_NET_GDR: case P2PTRACE_TRANSPORT_NET_IB: case P2PTRACE_TRANSPORT_NET_SOCKET: return "NET";
    default: return "?";
  }
}

const char* Color(int transport, bool color) {
  if (!color) return "";
  switch (transport) {
    case P2PTRACE_TRANSPORT_NVLINK: return "\033[32m";
    case P2PTRACE_TRANSPORT_PCIE_P2P: case P2PTRACE_TRANSPORT_P2P: return "\033[36m";
    case P2PTRACE_TRANSPORT_HOST_STAGED: case P2PTRACE_TRANSPORT_SHM: case P2PTRACE_TRANSPORT_NET_SOCKET:
      return "\033[31m";
    default: return "";
  }
}

}  // namespace

std::string RenderText(const Report& rep, bool color) {
  std::string out;
  const char* reset = color ? "\033[0m" : "";
  std::set<std::string> hosts;
  std::set<int> ranks;
  int crashed = 0;
  uint64_t dropped = 0;
  uint32_t flags = 0;
  int rt = 0, drv = 0;
  for (const ProcessInfo& p : rep.processes) {
    hosts.insert(p.host);
    if (p.rank >= 0) ranks.insert(p.rank);
    if (p.state != "exited") ++crashed;
    dropped += p.dropped_records;
    flags |= p.capture_flags;
    rt = std::max(rt, p.runtime_version);
    drv = std::max(drv, p.driver_version);
  }
  out += fmt::format("p2ptrace report: {}\n", rep.path);
  out += fmt::format("{} process{} on {} host{}, {} rank{}; CUDA runtime {}, driver {}\n", rep.processes.size(),
                     rep.processes.size() == 1 ? "" : "es", hosts.size(), hosts.size() == 1 ? "" : "s", ranks.size(),
                     ranks.size() == 1 ? "" : "s", Version(rt), Version(drv));
  std::vector<std::string> seen;
  if (flags & P2PTRACE_CAPTURE_CUDART_11) seen.push_back("cudart 11");
  if (flags & P2PTRACE_CAPTURE_CUDART_12) seen.push_back("cudart 12");
  if (flags & P2PTRACE_CAPTURE_CUDART_13) seen.push_back("cudart 13");
  if (rep.nccl_logs) out += fmt::format("NCCL: {} log file{} read\n", rep.nccl_logs, rep.nccl_logs == 1 ? "" : "s");
  out += fmt::format("capture: {}; link types {}{}\n",
                     seen.empty() ? "no CUDA runtime call reached the shim" : "intercepted " + fmt::format("{}", fmt::join(seen, ", ")),
                     flags & P2PTRACE_CAPTURE_NVML_LINKS ? "from NVML" : "unknown (no NVML)",
                     flags & P2PTRACE_CAPTURE_TIMING_OFF ? "; timing off" : "");
  if (crashed) out += fmt::format("note: {} process{} did not exit normally (killed, crashed, _exit, or still running); "
                                  "what they recorded is complete up to that moment\n", crashed, crashed == 1 ? "" : "es");
  for (const ProcessInfo& p : rep.processes)
    if (p.nccl_log.rfind("not seen", 0) == 0 && !rep.nccl_ops.empty()) {
      out += "note: NCCL lines " + p.nccl_log + "\n";
      break;
    }
  if (dropped) out += fmt::format("note: {} records dropped at the trace size cap (P2PTRACE_MAX_MB); counts stay exact\n", dropped);
  for (const std::string& p : rep.problems) out += "skipped: " + p + "\n";

  for (const std::string& host : hosts) {
    // The matrix: GPUs this host's pairs touched, by index.
    std::map<int, std::string> gpus;
    for (const PairEntry& e : rep.pairs)
      if (e.src.host == host) {
        gpus[e.src.gpu] = e.src.bus_id;
        gpus[e.dst.gpu] = e.dst.bus_id;
      }
    if (gpus.empty()) continue;
    out += fmt::format("\n{}: GPU pairs by path (row: source GPU, column: destination GPU)\n      ", host);
    for (auto& [g, bus] : gpus) out += fmt::format("{:>6}", fmt::format("GPU{}", g));
    out += "\n";
    for (auto& [row, row_bus] : gpus) {
      out += fmt::format("{:<6}", fmt::format("GPU{}", row));
      for (auto& [col, col_bus] : gpus) {
        if (row == col) { out += fmt::format("{:>6}", "X"); continue; }
        const PairEntry* best = nullptr;
        int kinds = 0;
        for (const PairEntry& e : rep.pairs)
          if (e.src.host == host && e.src.gpu == row && e.dst.gpu == col) {
            ++kinds;
            if (best == nullptr || e.bytes > best->bytes) best = &e;
          }
        std::string cell = best ? std::string(Short(best->transport)) + (kinds > 1 ? "*" : "") : ".";
        out += fmt::format("{}{:>6}{}", best ? Color(best->transport, color) : "", cell, best ? reset : "");
      }
      out += "\n";
    }
    out += "NVL nvlink, PCI pcie_p2p, P2P direct (link unknown), HST host-staged, SHM NCCL via host memory,\n"
           "NET NCCL via the network, . none, * several paths\n";
  }

  if (!rep.pairs.empty()) {
    out += "\npairs:\n";
    for (const PairEntry& e : rep.pairs) {
      if (e.source == "nccl") {
        out += fmt::format("  {} GPU{} -> {} GPU{}  {}{:<12}{} NCCL, {} connection{}: {}\n", e.src.host, e.src.gpu,
                           e.dst.host == e.src.host ? "" : e.dst.host, e.dst.gpu, Color(e.transport, color),
                           TransportName(e.transport), reset, e.channels, e.channels == 1 ? "" : "s",
                           fmt::join(e.nccl_transports, ", "));
        continue;
      }
      std::string gbps = e.Gbps() > 0 ? fmt::format("{:.1f} GB/s", e.Gbps()) : "not timed";
      out += fmt::format("  {} GPU{} -> GPU{}  {}{:<12}{} {:>8} copies {:>11}  {}{}{}\n", e.src.host, e.src.gpu,
                         e.dst.gpu, Color(e.transport, color), TransportName(e.transport), reset, e.calls,
                         Bytes(e.bytes), gbps,
                         e.errors ? fmt::format(", {} failed", e.errors) : "",
                         e.expected && e.expected != e.transport
                             ? fmt::format("  (expected {})", TransportName(e.expected)) : "");
    }
  } else {
    out += "\nno GPU pair exchanged data through the intercepted CUDA calls\n";
  }
  if (!rep.nccl_ops.empty()) {
    out += "\nNCCL operations (per communicator; timed subset, nccl-tests' algbw/busbw):\n";
    for (const NcclOpSummary& s : rep.nccl_ops) {
      std::string bw = s.AlgBw() >= 0 ? fmt::format("algbw {:.1f} GB/s, busbw {:.1f} GB/s", s.AlgBw(), s.BusBw())
                                      : std::string("not timed");
      out += fmt::format("  comm {} ({} ranks) {:<18} {:>6} calls {:>11}  {}{}\n", s.comm.substr(0, 8), s.nranks,
                         s.op, s.calls, Bytes(s.bytes), bw, s.errors ? fmt::format(", {} failed", s.errors) : "");
    }
  }
  // One paragraph per finding: the pairs it explains, the evidence of the first, the fix.
  for (const Finding& f : rep.findings) {
    const PairEntry* first = nullptr;
    for (const PairEntry& e : rep.pairs)
      for (const Cause& c : e.causes)
        if (c.id == f.id && first == nullptr) first = &e;
    std::string what = first && first->fallback
                           ? fmt::format("{} instead of {}", TransportName(first->transport), TransportName(first->expected))
                           : std::string(first ? TransportName(first->transport) : "");
    constexpr size_t kShown = 8;
    std::vector<std::string> shown(f.pairs.begin(), f.pairs.begin() + std::min(f.pairs.size(), kShown));
    out += fmt::format("\n{} [{}] {} on {} pair{}: {}{}\n", f.severity, f.id, what, f.pairs.size(),
                       f.pairs.size() == 1 ? "" : "s", fmt::join(shown, ", "),
                       f.pairs.size() > kShown ? fmt::format(", … ({} more)", f.pairs.size() - kShown) : "");
    for (const std::string& e : f.evidence) out += "    evidence: " + e + "\n";
    if (!f.fix.empty()) out += "    fix: " + f.fix + "\n";
  }
  return out;
}

json RenderJson(const Report& rep) {
  json j;
  j["version"] = 1;
  j["ranks"] = json::array();
  for (const ProcessInfo& p : rep.processes) {
    json r{{"rank", p.rank >= 0 ? json(p.rank) : json(nullptr)}, {"host", p.host}, {"pid", p.pid},
           {"bus_ids", p.bus_ids}, {"state", p.state}, {"file", p.file},
           {"cuda_runtime_version", p.runtime_version}, {"cuda_driver_version", p.driver_version}};
    r["nccl_log"] = p.nccl_log;
    r["gpu"] = p.bus_ids.size() == 1 ? json(0) : json(nullptr);
    r["bus_id"] = p.bus_ids.size() == 1 ? json(p.bus_ids[0]) : json(nullptr);
    j["ranks"].push_back(r);
  }
  j["pairs"] = json::array();
  for (const PairEntry& e : rep.pairs) {
    auto ref = [](const GpuRef& g, const std::set<int>& ranks) {
      json o{{"host", g.host}, {"gpu", g.gpu}, {"bus_id", g.bus_id}};
      o["rank"] = ranks.size() == 1 && *ranks.begin() >= 0 ? json(*ranks.begin()) : json(nullptr);
      return o;
    };
    json p{{"src", ref(e.src, e.ranks)}, {"dst", ref(e.dst, e.ranks)}, {"source", e.source},
           {"transport", TransportName(e.transport)}, {"nccl_transports", e.nccl_transports},
           {"expected", TransportName(e.expected)}, {"fallback", e.fallback}, {"calls", e.calls},
           {"bytes", e.bytes}, {"errors", e.errors}, {"timed_calls", e.timed_calls},
           {"timed_bytes", e.timed_bytes}};
    p["seconds"] = e.Seconds() >= 0 ? json(e.Seconds()) : json(nullptr);
    p["gbps"] = e.Gbps() > 0 ? json(e.Gbps()) : json(nullptr);
    p["causes"] = json::array();
    for (const Cause& c : e.causes) p["causes"].push_back({{"id", c.id}, {"evidence", c.evidence}, {"fix", c.fix}});
    j["pairs"].push_back(p);
  }
  j["nccl_ops"] = json::array();
  for (const NcclOpSummary& s : rep.nccl_ops) {
    json o{{"comm", s.comm}, {"nranks", s.nranks}, {"op", s.op}, {"calls", s.calls}, {"errors", s.errors},
           {"bytes", s.bytes}, {"timed_calls", s.timed_calls}, {"ranks", s.ranks}};
    o["seconds"] = s.timed_calls ? json(static_cast<double>(s.timed_ns) * 1e-9 / static_cast<double>(s.timed_calls))
                                 : json(nullptr);
    o["algbw_gbps"] = s.AlgBw() >= 0 ? json(s.AlgBw()) : json(nullptr);
    o["busbw_gbps"] = s.BusBw() >= 0 ? json(s.BusBw()) : json(nullptr);
    j["nccl_ops"].push_back(o);
  }
  j["findings"] = json::array();
  for (const Finding& f : rep.findings)
    j["findings"].push_back({{"id", f.id}, {"severity", f.severity}, {"pairs", f.pairs}, {"evidence", f.evidence},
                             {"fix", f.fix}});
  uint32_t flags = 0;
  uint64_t dropped = 0;
  int abnormal = 0;
  for (const ProcessInfo& p : rep.processes) {
    flags |= p.capture_flags;
    dropped += p.dropped_records;
    if (p.state != "exited") ++abnormal;
  }
  j["capture"] = {{"processes", rep.processes.size()},
                  {"nccl_logs", rep.nccl_logs},
                  {"cudart_11", (flags & P2PTRACE_CAPTURE_CUDART_11) != 0},
                  {"cudart_12", (flags & P2PTRACE_CAPTURE_CUDART_12) != 0},
                  {"cudart_13", (flags & P2PTRACE_CAPTURE_CUDART_13) != 0},
                  {"nvml_link_types", (flags & P2PTRACE_CAPTURE_NVML_LINKS) != 0},
                  {"timing", (flags & P2PTRACE_CAPTURE_TIMING_OFF) == 0},
                  {"abnormal_exits", abnormal},
                  {"dropped_records", dropped},
                  {"skipped_files", rep.problems}};
  return j;
}

}  // namespace p2ptrace::cli
