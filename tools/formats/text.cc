// The text report: what `p2ptrace report` prints on a terminal, from a folded Report.
#include "tools/formats/text.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"

namespace p2ptrace::cli {

const char* TransportCell(int transport) {
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

namespace {

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

// The text report as a terminal gets it: every byte escaped by Printable in one pass at the end
// (host names, paths, environment values and log lines all come from files), and the report's own
// colours placed by offset, so that nothing read from a file can pass for one of them.
class TerminalText {
 public:
  explicit TerminalText(bool color) : color_(color) {}
  TerminalText& operator+=(std::string_view s) {
    text_ += s;
    return *this;
  }
  // `s` in the colour of its transport class (when colour is on).
  void Painted(int transport, std::string_view s) {
    if (color_) spans_.push_back({text_.size(), text_.size() + s.size(), Color(transport, true)});
    text_ += s;
  }
  std::string Finish() const {
    std::string out;
    size_t at = 0;
    for (const Span& sp : spans_) {
      out += Printable(std::string_view(text_).substr(at, sp.begin - at));
      out += sp.sgr;
      out += Printable(std::string_view(text_).substr(sp.begin, sp.end - sp.begin));
      out += "\033[0m";
      at = sp.end;
    }
    return out + Printable(std::string_view(text_).substr(at));
  }

 private:
  struct Span {
    size_t begin, end;
    const char* sgr;
  };
  bool color_;
  std::string text_;
  std::vector<Span> spans_;
};

std::string Duration(double s) {
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.0f} µs", s * 1e6);
}


// "node0, node1, … (512 hosts)"
std::string NameList(const std::vector<std::string>& names, size_t shown = 4) {
  if (names.size() <= shown) return fmt::format("{}", fmt::join(names, ", "));
  return fmt::format("{}, … ({} in all)", fmt::join(names.begin(), names.begin() + static_cast<long>(shown), ", "),
                     names.size());
}

// Where an NCCL pair's connection lines came from, when not (only) from NCCL's log.
const char* NcclFromText(const PairEntry& e) {
  return e.nccl_from == "trace" ? " (from trace)" : e.nccl_from == "log+trace" ? " (log + trace)" : "";
}

// "312.4 GB/s (nvlink: 20-370 expected)" — measured against what the class should deliver.
// A latency-bound rate (a sweep's first, small calls) keeps its digits rather than show 0.0.
std::string RateNumber(double gbps) { return gbps >= 0.1 ? fmt::format("{:.1f}", gbps) : fmt::format("{:.2g}", gbps); }

// A pair's rate, only as measured, and how: "(group)" when an NCCL send was timed with its group;
// how many of its calls the figure covers when not all.
std::string Expected(const PairEntry& e) {
  return e.expected_gbps_high <= 0 ? ""
         : e.expected_gbps_low == e.expected_gbps_high
             ? fmt::format(" [~{:.0f}]", e.expected_gbps_high)
             : fmt::format(" [{:.0f}-{:.0f}]", e.expected_gbps_low, e.expected_gbps_high);
}

// What a pair carried inside ring collectives, by NCCL's kernel timers, and the hop that set its pace.
std::string CollText(const PairEntry& e) {
  if (e.CollGbps() <= 0) return "";
  return fmt::format("{} GB/s in collectives (kernel timers){}", RateNumber(e.CollGbps()),
                     e.bounded_by.empty() ? "" : ", bounded by " + e.bounded_by);
}

std::string RateText(const PairEntry& e) {
  if (e.Gbps() <= 0 && e.CollGbps() > 0) return CollText(e) + Expected(e);
  if (e.Gbps() <= 0) {
    if (e.shared_calls > 0)
      return "no per-pair rate: it was timed only together with other peers (a group, or an alltoall, gather or scatter)";
    if (std::string note = e.RateNote(); !note.empty()) return note;
    return e.source == "nccl" && e.bytes == 0 ? "no send/recv to measure" : "not timed";
  }
  std::string expect = Expected(e);
  // NCCL's send/recv rates include NCCL's own protocol, and a group's duration is set by its
  // slowest link: never judged SLOW on that rate.
  bool nccl = e.source == "nccl";
  const char* slow = !nccl && e.expected_gbps_low > 0 && e.Gbps() < 0.5 * e.expected_gbps_low ? " SLOW" : "";
  const std::string b = e.RateBasis();
  std::string basis = b == "group" || b == "own events and group" ? " (" + b + ")" : b == "NCCL kernel timers" ? " (kernel timers)" : "";
  std::string covered = e.timed_calls < e.calls ? fmt::format(" ({} of {} calls timed)", e.timed_calls, e.calls) : "";
  std::string coll = CollText(e);
  return fmt::format("{} GB/s{}{}{}{}{}", RateNumber(e.Gbps()), basis, expect, slow, covered, coll.empty() ? "" : "; " + coll);
}

// The part of a pair's or operation's calls that CUDA graph launches replayed.
std::string GraphText(uint64_t calls, uint64_t bytes) {
  if (calls == 0) return "";
  return fmt::format("; {} call{} ({}) from graph replays", calls, calls == 1 ? "" : "s", BytesText(bytes));
}

// The matrix cells of one host, in the layout of `nvidia-smi topo -m`.
struct HostMatrix {
  using Gpu = std::pair<int, std::string>;    // (the host's index, bus id): in nvidia-smi's order
  std::map<Gpu, std::string> gpus;            // -> its name in the matrix
  std::map<std::pair<Gpu, Gpu>, std::pair<int, int>> cells;  // (row, col) -> (class of most bytes, classes)
  bool operator==(const HostMatrix& o) const { return gpus == o.gpus && cells == o.cells; }
};

std::map<std::string, HostMatrix> Matrices(const Report& rep) {
  std::map<std::string, HostMatrix> out;
  std::map<std::pair<std::string, std::pair<HostMatrix::Gpu, HostMatrix::Gpu>>, uint64_t> most;
  for (const PairEntry& e : rep.pairs) {
    if (e.src.host != e.dst.host) continue;
    HostMatrix& m = out[e.src.host];
    // A numbered GPU is keyed by its index alone, so that hosts alike compare alike.
    HostMatrix::Gpu src{e.src.gpu, e.src.gpu >= 0 ? "" : e.src.bus_id}, dst{e.dst.gpu, e.dst.gpu >= 0 ? "" : e.dst.bus_id};
    m.gpus[src] = GpuName(e.src);
    m.gpus[dst] = GpuName(e.dst);
    auto& cell = m.cells[{src, dst}];
    uint64_t& top = most[{e.src.host, {src, dst}}];
    if (cell.second == 0 || e.bytes > top) {
      cell.first = e.transport;
      top = e.bytes;
    }
    ++cell.second;
  }
  return out;
}

}  // namespace


std::vector<std::string> NcclVersionGroups(const Report& rep) {
  std::map<std::string, std::vector<int>> ranks, pids;  // version -> ranks (pids of rank-less processes)
  for (const ProcessInfo& p : rep.processes)
    if (p.nccl_version > 0) (p.rank >= 0 ? ranks : pids)[NcclVersionText(p.nccl_version)].push_back(p.rank >= 0 ? p.rank : p.pid);
  std::set<std::string> versions;
  for (const auto* m : {&ranks, &pids})
    for (const auto& [v, ids] : *m) versions.insert(v);
  if (versions.empty()) return {rep.nccl_versions.begin(), rep.nccl_versions.end()};
  std::vector<std::string> out;
  for (const std::string& v : versions) {
    // One version for the whole job needs no rank list.
    if (versions.size() == 1) {
      out.push_back(v);
      continue;
    }
    std::vector<std::string> who;
    if (auto r = ranks.find(v); r != ranks.end()) {
      std::sort(r->second.begin(), r->second.end());
      who.push_back(fmt::format("rank{} {}", r->second.size() == 1 ? "" : "s", RankRanges(r->second)));
    }
    if (auto p = pids.find(v); p != pids.end()) {
      std::sort(p->second.begin(), p->second.end());
      who.push_back(fmt::format("pid{} {}", p->second.size() == 1 ? "" : "s", NameList([&] {
                                  std::vector<std::string> s;
                                  for (int x : p->second) s.push_back(std::to_string(x));
                                  return s;
                                }())));
    }
    out.push_back(fmt::format("{} ({})", v, fmt::join(who, "; ")));
  }
  return out;
}

// Each host's link readings: what changed on which link, the pairs that crossed it, what the node
// does not count.
std::string LinksText(const Report& rep) {
  std::string out;
  for (const Report::HostLinks& h : rep.links) {
    out += fmt::format("\nlink health on {} ({} process{} read the links at start, {} at exit{}):\n", h.host, h.readings,
                       h.readings == 1 ? "" : "es", h.exit_readings,
                       h.read_ms >= 0 ? fmt::format("; the slowest reading took {:.1f} ms", h.read_ms) : "");
    if (h.changes.empty()) out += "  no error counter moved and no link trained below what it can do\n";
    for (const Report::HostLinks::Change& c : h.changes)
      out += fmt::format("  {}: {}; {}\n", c.change.Where(), c.change.What(),
                         c.pairs.empty() ? std::string("no traced pair crossed it")
                                         : fmt::format("crossed by {}", NameList(c.pairs, 8)));
    if (!h.unsupported.empty())
      out += fmt::format("  not counted here (unsupported, not zero): {}\n", fmt::join(h.unsupported, "; "));
    for (const std::string& n : h.notes) out += "  " + n + "\n";
  }
  return out;
}

std::string ArrivalsText(const SlowRankFinding& sr) {
  if (sr.comms.empty()) return "";
  std::string out = "\nNCCL arrivals (each collective's call on every rank, matched by communicator and number):\n";
  constexpr size_t kShown = 8;
  for (size_t i = 0; i < std::min(sr.comms.size(), kShown); ++i) {
    const CommArrivals& c = sr.comms[i];
    auto top = std::max_element(c.last_by_rank.begin(), c.last_by_rank.end());
    out += fmt::format("  comm {} ({} ranks): {} collectives compared, skew median {:.2f} ms, p90 {:.2f} ms; last most "
                       "often: rank {} ({} times){}\n",
                       c.id, c.nranks, c.compared, c.skew_median_ms, c.skew_p90_ms, top - c.last_by_rank.begin(), *top,
                       c.across_hosts ? "; on " + c.clock : "");
  }
  if (sr.comms.size() > kShown) out += fmt::format("  … {} more communicators (--json has each)\n", sr.comms.size() - kShown);
  return out;
}

std::string StoppedText(const StoppedFinding& st) {
  if (!st.present) return "";
  std::string out = "STOPPED: " + st.verdict + "\n";
  if (st.first_process >= 0) out += "  it was doing: " + st.first_doing + "\n";
  for (const std::string& p : st.pair_notes) out += "  pair: " + p + "\n";
  constexpr size_t kCommsShown = 8;
  size_t shown = 0;
  for (const StoppedComm& c : st.comms) {
    if (c.waits.empty() && c.mismatches.empty()) continue;
    if (shown++ >= kCommsShown) continue;
    out += fmt::format("  communicator {} ({} ranks){}{}\n", c.id, c.nranks, c.waits.empty() ? "" : ": ", c.waits);
    for (const std::string& m : c.mismatches) out += "    mismatch " + m + "\n";
  }
  if (shown > kCommsShown) out += fmt::format("  … {} more communicators (--json has each)\n", shown - kCommsShown);
  constexpr size_t kProcessesShown = 16;
  size_t listed = 0;
  for (const StoppedProcess& p : st.processes) {
    if ((p.exited && p.exit_status == 0) || (p.beating && p.nccl_errors.empty() && p.pending_init.empty())) continue;
    if (listed++ >= kProcessesShown) continue;
    out += fmt::format("  {} {} (pid {}): {}{}{}\n", p.rank >= 0 ? fmt::format("rank {}", p.rank) : "process", p.host,
                       p.pid, p.life, p.nccl_errors.empty() ? "" : "; " + p.nccl_errors.front(),
                       p.pending_init.empty() ? "" : "; " + p.pending_init);
  }
  if (listed > kProcessesShown) out += fmt::format("  … {} more processes (--json has each)\n", listed - kProcessesShown);
  for (const std::string& n : st.notes) out += "  note: " + n + "\n";
  return out;
}

std::string RenderText(const Report& rep, bool color) {
  TerminalText out(color);
  std::set<std::string> hosts, job_ids;
  std::set<int> ranks;
  int rt = 0, drv = 0;
  for (const ProcessInfo& p : rep.processes) {
    hosts.insert(p.host);
    ranks.insert(p.ranks.begin(), p.ranks.end());  // NCCL's ranks: a process may hold several
    if (!p.job_id.empty()) job_ids.insert(p.job_id);
    rt = std::max(rt, p.runtime_version);
    drv = std::max(drv, p.driver_version);
  }
  out += fmt::format("p2ptrace report: {}\n", rep.path);
  out += fmt::format("job {}: {} rank{} ({} process{}) on {} host{} ({})\n",
                     job_ids.empty() ? "?" : NameList({job_ids.begin(), job_ids.end()}, 2), ranks.size(),
                     ranks.size() == 1 ? "" : "s", rep.processes.size(), rep.processes.size() == 1 ? "" : "es",
                     hosts.size(), hosts.size() == 1 ? "" : "s", NameList({hosts.begin(), hosts.end()}));
  std::vector<std::string> nccl = NcclVersionGroups(rep);
  // 0: no call the shim records succeeded through that API, so it never asked the version.
  auto version = [](int v) { return v > 0 ? CudaVersionText(v) : std::string("not seen"); };
  out += fmt::format("CUDA runtime {}, driver {}; NCCL {}\n", version(rt), version(drv),
                     nccl.empty() ? std::string(rep.nccl_logs ? "version not printed" : "not seen")
                                  : fmt::format("{}", fmt::join(nccl, ", ")));
  out += StoppedText(rep.stopped);  // a hung or dead job: that first
  // Capture modes: processes that saw alike grouped, with what that means for trusting the answer.
  std::map<std::pair<std::string, std::string>, std::vector<int>> modes;
  std::map<std::pair<std::string, std::string>, std::vector<int>> mode_pids;  // processes without a rank
  for (const ProcessInfo& p : rep.processes)
    (p.rank >= 0 ? modes : mode_pids)[{p.capture_mode, p.trust}].push_back(p.rank >= 0 ? p.rank : p.pid);
  out += "capture (what the shim saw, and how far to trust it):\n";
  constexpr size_t kModesShown = 8;
  size_t shown_modes = 0;
  for (auto* group : {&modes, &mode_pids})
    for (auto& [mode, ids] : *group) {
      if (shown_modes++ >= kModesShown) continue;
      std::sort(ids.begin(), ids.end());
      out += fmt::format("  {} {}: {} — {}\n", group == &modes ? (ids.size() == 1 ? "rank" : "ranks") : "pid",
                         RankRanges(ids), mode.first, mode.second);
    }
  if (shown_modes > kModesShown) out += fmt::format("  … {} more kinds (--json has every rank's)\n", shown_modes - kModesShown);
  // A process a signal killed, by name: its data stops there, and the crash may be the story.
  constexpr size_t kKilledShown = 8;
  size_t killed = 0;
  for (const ProcessInfo& p : rep.processes) {
    if (!p.fatal_signal || killed++ >= kKilledShown) continue;
    out += fmt::format("{} {} on {} (pid {}): killed by {} (signal {})\n", p.rank >= 0 ? "rank" : "pid",
                       p.rank >= 0 ? p.rank : p.pid, p.host, p.pid, SignalName(p.fatal_signal), p.fatal_signal);
  }
  if (killed > kKilledShown)
    out += fmt::format("… {} more processes killed by a signal (--json has every rank's state)\n", killed - kKilledShown);
  for (const ProcessInfo& p : rep.processes)
    if (p.nccl_log.rfind("not seen", 0) == 0 && !rep.nccl_ops.empty()) {
      out += "note: NCCL lines " + p.nccl_log + "\n";
      break;
    }
  if (rep.nccl_from_traces)
    out += fmt::format("note: the NCCL connections of {} process{} come from the connection lines their traces "
                       "recorded: their NCCL log file{} not in {} (marked \"from trace\" below)\n",
                       rep.nccl_from_traces, rep.nccl_from_traces == 1 ? "" : "es",
                       rep.nccl_from_traces == 1 ? " is" : "s are", rep.path);
  constexpr size_t kSkippedShown = 20;
  for (size_t i = 0; i < std::min(kSkippedShown, rep.problems.size()); ++i) out += "skipped: " + rep.problems[i] + "\n";
  if (rep.problems.size() > kSkippedShown)
    out += fmt::format("skipped: … {} more files (each is named on stderr)\n", rep.problems.size() - kSkippedShown);
  // What the shim predicted at job start, each host's lines once.
  constexpr size_t kPreflightHostsShown = 8;
  if (!rep.preflight.empty()) out += "\njob-start preflight (predicted before the first transfer):\n";
  for (size_t i = 0; i < std::min(kPreflightHostsShown, rep.preflight.size()); ++i) {
    const Report::Preflight& pf = rep.preflight[i];
    out += fmt::format("  {}:{}\n", pf.host, pf.warnings.empty() ? " no warning line recorded" : "");
    for (const std::string& w : pf.warnings) out += "    " + w + "\n";
  }
  if (rep.preflight.size() > kPreflightHostsShown)
    out += fmt::format("  … {} more hosts (--json has every host's)\n", rep.preflight.size() - kPreflightHostsShown);

  // Per host, the pair matrix; hosts with the same matrix are shown once.
  std::map<std::string, HostMatrix> matrices = Matrices(rep);
  std::vector<std::pair<const HostMatrix*, std::vector<std::string>>> groups;
  for (const auto& [host, m] : matrices) {
    const HostMatrix* mine = &m;  // clang 14 cannot capture a structured binding
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return *x.first == *mine; });
    if (g == groups.end()) groups.push_back({mine, {host}});
    else g->second.push_back(host);
  }
  for (const auto& [m, names] : groups) {
    out += fmt::format("\n{}: GPU pairs by path (row: source GPU, column: destination GPU){}\n      ", names[0],
                       names.size() > 1 ? fmt::format("; the same on {}", NameList({names.begin() + 1, names.end()}))
                                        : std::string());
    size_t w = 6;  // wider for GPUs named by bus id
    for (auto& [g, name] : m->gpus) w = std::max(w, name.size() + 1);
    out += std::string(w - 6, ' ');
    for (auto& [g, name] : m->gpus) out += fmt::format("{:>{}}", name, w);
    out += "\n";
    for (auto& [row, row_name] : m->gpus) {
      out += fmt::format("{:<{}}", row_name, w);
      for (auto& [col, col_name] : m->gpus) {
        if (row == col) {
          out += fmt::format("{:>{}}", "X", w);
          continue;
        }
        auto c = m->cells.find({row, col});
        if (c == m->cells.end()) {
          out += fmt::format("{:>{}}", ".", w);
          continue;
        }
        std::string cell = std::string(TransportCell(c->second.first)) + (c->second.second > 1 ? "*" : "");
        out.Painted(c->second.first, fmt::format("{:>{}}", cell, w));
      }
      out += "\n";
    }
  }
  if (!groups.empty())
    out += "\nLegend: NVL nvlink, PCI pcie_p2p, P2P direct (link unknown), HST host-staged, SHM NCCL via host memory,\n"
           "NET NCCL via the network, . none, * several paths (the cell shows the one that moved most bytes);\n"
           "time: the timed calls' measured time; [low-high]: the GB/s the path used should give (one direction);\n"
           "(group): an NCCL send timed as its group (the group's duration, this pair's bytes; its slowest link sets the rate)\n"
           "(kernel timers): timed on the GPU by NCCL's own channel timers (p2ptrace as NCCL's profiler plugin)\n";

  // Cross-host pairs, grouped by host pair.
  std::map<std::pair<std::string, std::string>, std::vector<const PairEntry*>> cross;
  for (const PairEntry& e : rep.pairs)
    if (e.src.host != e.dst.host) cross[{e.src.host, e.dst.host}].push_back(&e);
  constexpr size_t kHostPairsShown = 16;
  if (!cross.empty()) out += fmt::format("\ncross-host pairs ({} host pair{}):\n", cross.size(), cross.size() == 1 ? "" : "s");
  size_t host_pairs = 0;
  for (const auto& [hp, entries] : cross) {
    if (host_pairs++ >= kHostPairsShown) break;
    out += fmt::format("  {} -> {}:\n", hp.first, hp.second);
    for (const PairEntry* e : entries) {
      out += fmt::format("    {} -> {}  ", GpuName(e->src), GpuName(e->dst));
      out.Painted(e->transport, fmt::format("{:<12}", TransportName(e->transport)));
      out += fmt::format(" {}{:>11}  {}\n",
                         e->nccl_transports.empty() ? ""
                         : fmt::format("{}{} ", fmt::join(e->nccl_transports, ", "), NcclFromText(*e)),
                         e->bytes ? BytesText(e->bytes) : "", RateText(*e));
      if (!e->net.empty()) out += fmt::format("      network: {}\n", e->NetSidesText());
    }
  }
  if (cross.size() > kHostPairsShown)
    out += fmt::format("  … {} more host pairs (--json lists them)\n", cross.size() - kHostPairsShown);

  // Pairs inside a host, one line each.
  constexpr size_t kPairsShown = 64;
  size_t inside = 0;
  for (const PairEntry& e : rep.pairs) inside += e.src.host == e.dst.host;
  if (rep.pairs.empty()) out += "\nno GPU pair exchanged data through the intercepted CUDA calls\n";
  else if (inside) out += "\npairs inside a host:\n";
  size_t shown = 0;
  for (const PairEntry& e : rep.pairs) {
    if (e.src.host != e.dst.host || shown++ >= kPairsShown) continue;
    std::string what = e.source == "nccl"
                           ? fmt::format("NCCL, {} connection{}: {}{}", e.channels, e.channels == 1 ? "" : "s",
                                         fmt::join(e.nccl_transports, ", "), NcclFromText(e))
                           : fmt::format("{} cop{}{}", e.calls, e.calls == 1 ? "y" : "ies",
                                         e.DriverCalls() ? fmt::format(" ({} by the driver API)", e.DriverCalls()) : "");
    out += fmt::format("  {}  ", PairName(e));
    out.Painted(e.transport, fmt::format("{:<12}", TransportName(e.transport)));
    out += fmt::format(" {:<34} {:>11} {:>9}  {}{}{}{}\n", what, e.bytes ? BytesText(e.bytes) : "",
                       e.RatedSeconds() > 0 ? Duration(e.RatedSeconds()) : "", RateText(e), GraphText(e.graph_calls, e.graph_bytes),
                       e.errors ? fmt::format(", {} failed", e.errors) : "",
                       e.fallback && e.expected ? fmt::format("  fallback from {}", TransportName(e.expected)) : "");
    for (const PairEntry::LinkCharge& l : e.link_changes) out += fmt::format("      link {}: {}\n", l.where, l.what);
  }
  if (shown > kPairsShown) out += fmt::format("  … {} more pairs (--json lists them all)\n", shown - kPairsShown);
  out += LinksText(rep);

  if (!rep.rings.empty()) {
    out += "\nNCCL rings timed by NCCL's kernel timers (every hop of a pipelined ring carries at the pace of its slowest):\n";
    for (const RingSummary& r : rep.rings) {
      std::string pace = r.slowest_gbps > 0 ? fmt::format("{}-{} GB/s per hop", RateNumber(r.slowest_gbps), RateNumber(r.fastest_gbps))
                                            : std::string("not timed");
      std::string bound = r.bounded_by.empty()
                              ? "one link class: no hop bounds the others"
                              : fmt::format("bounded by {} [{:.0f}-{:.0f}]", r.bounded_by, r.bound_expected_low,
                                            r.bound_expected_high);
      // Named as the operations below name it (NCCL's commId where no trace said which it is).
      std::string comm = r.comm.empty() ? r.nccl_comm : r.comm.substr(0, 8);
      out += fmt::format("  comm {} channel {}: {} hops, {}; {}\n", comm, r.channel, r.hops.size(), pace, bound);
    }
  }

  if (!rep.nccl_ops.empty()) {
    out += "\nNCCL operations (per communicator; timed subset, nccl-tests' algbw/busbw):\n";
    for (const NcclOpSummary& s : rep.nccl_ops) {
      std::string note = s.RateNote();
      std::string bw = s.AlgBw() >= 0 ? fmt::format("algbw {:.1f} GB/s, busbw {:.1f} GB/s{}", s.AlgBw(), s.BusBw(),
                                                    s.kernel_timed_calls ? " (kernel timers)" : "")
                       : note.empty() ? std::string("not timed")
                                      : note;
      out += fmt::format("  comm {} ({} ranks) {:<18} {:>6} calls {:>11}  {}{}{}\n", s.comm.substr(0, 8), s.nranks,
                         s.op, s.calls, BytesText(s.bytes), bw, GraphText(s.graph_calls, s.graph_bytes),
                         s.errors ? fmt::format(", {} failed", s.errors) : "");
    }
  }

  // Fallbacks, the costliest first, with what each cost.
  std::vector<const PairEntry*> fallbacks;
  for (const PairEntry& e : rep.pairs)
    if (e.fallback) fallbacks.push_back(&e);
  std::stable_sort(fallbacks.begin(), fallbacks.end(),
                   [](const PairEntry* a, const PairEntry* b) { return a->lost_seconds > b->lost_seconds; });
  if (!fallbacks.empty()) {
    out += fmt::format("\nfallbacks: {} pair{}, {} lost in total (the timed calls on the fallback path: their "
                       "measured time − their bytes at the expected-best GB/s)\n",
                       fallbacks.size(), fallbacks.size() == 1 ? "" : "s", Duration(rep.lost_seconds));
    constexpr size_t kFallbacksShown = 20;
    std::set<std::string> fixes_shown;
    for (size_t i = 0; i < std::min(kFallbacksShown, fallbacks.size()); ++i) {
      const PairEntry& e = *fallbacks[i];
      std::vector<std::string> ids;
      for (const Cause& c : e.causes) ids.push_back("[" + c.id + "]");
      std::string cost = e.lost_seconds >= 0
                             ? fmt::format("{} timed at {} GB/s{} vs {:.1f} GB/s ({}): {} lost", BytesText(e.Rated().timed_bytes),
                                           RateNumber(e.RatedGbps()), e.timed_calls ? "" : " in collectives", e.best_gbps, e.best_basis, Duration(e.lost_seconds))
                             : std::string(e.bytes ? "not timed: cost unknown" : "no bytes attributed: cost unknown");
      out += fmt::format("  {}  ", PairName(e));
      out.Painted(e.transport, TransportName(e.transport));
      out += fmt::format(" instead of {}: {}  {}\n", TransportName(e.expected), cost, fmt::join(ids, " "));
      // Each cause under its pair; a fix is spelled out the first time its cause appears here.
      for (const Cause& c : e.causes) {
        out += fmt::format("      [{}]{} {}\n", c.id, c.origin == "preflight" ? " (predicted at job start)" : "",
                           c.evidence.empty() ? std::string("no evidence recorded") : fmt::format("{}", fmt::join(c.evidence, "; ")));
        if (!fixes_shown.insert(c.id).second) continue;
        if (!c.fix.empty()) out += "        fix: " + c.fix + "\n";
        if (!c.confirm.empty()) out += "        confirm: " + c.confirm + "\n";
      }
    }
    if (fallbacks.size() > kFallbacksShown)
      out += fmt::format("  … {} more (--json lists them all)\n", fallbacks.size() - kFallbacksShown);
  }

  // Where in the program the traffic came from (P2PTRACE_STACKS): the sites that staged most
  // bytes through the host first.
  if (!rep.call_sites.empty()) {
    uint64_t dropped = 0;
    for (const ProcessInfo& p : rep.processes) dropped += p.dropped_records;
    constexpr size_t kSitesShown = 10, kFramesShown = 6, kPairsShownPerSite = 4;
    out += fmt::format("\ntop call sites ({} in all; most host-staged bytes first, then most bytes{}):\n",
                       rep.call_sites.size(), dropped ? "; copies whose records were dropped at the size cap are not counted" : "");
    for (size_t i = 0; i < std::min(kSitesShown, rep.call_sites.size()); ++i) {
      const CallSiteSummary& c = rep.call_sites[i];
      std::vector<std::string> what;
      if (c.copies || c.errors)
        what.push_back(fmt::format("{} cop{}, {}{}{}", c.copies, c.copies == 1 ? "y" : "ies", BytesText(c.bytes),
                                   c.host_staged_bytes ? fmt::format(" ({} host-staged)", BytesText(c.host_staged_bytes)) : "",
                                   c.errors ? fmt::format(", {} failed", c.errors) : ""));
      if (c.nccl_ops || c.nccl_errors)
        what.push_back(fmt::format("{} NCCL op{} ({}), {}{}", c.nccl_ops, c.nccl_ops == 1 ? "" : "s",
                                   fmt::join(c.nccl_operations, ", "), BytesText(c.nccl_bytes),
                                   c.nccl_errors ? fmt::format(", {} failed", c.nccl_errors) : ""));
      std::vector<int> site_ranks(c.ranks.begin(), c.ranks.end());
      out += fmt::format("  #{}  {}; {} process{}{}\n", c.id, fmt::join(what, "; "), c.processes,
                         c.processes == 1 ? "" : "es",
                         site_ranks.empty() ? "" : " (ranks " + RankRanges(site_ranks) + ")");
      if (!c.pairs.empty()) out += "      pairs: ";
      for (size_t k = 0; k < std::min(kPairsShownPerSite, c.pairs.size()); ++k) {
        const CallSiteSummary::Pair& p = c.pairs[k];
        out += fmt::format("{}{} {} -> {} ", k ? ", " : "", p.src.host, GpuName(p.src), GpuName(p.dst));
        out.Painted(p.transport, TransportName(p.transport));
        out += fmt::format(" ({})", BytesText(p.bytes));
      }
      if (c.pairs.size() > kPairsShownPerSite) out += fmt::format(", … {} more", c.pairs.size() - kPairsShownPerSite);
      if (!c.pairs.empty()) out += "\n";
      for (size_t k = 0; k < std::min(kFramesShown, c.frames.size()); ++k)
        out += fmt::format("      {} {}\n", k == 0 ? "at" : "  ", c.frames[k]);
      if (c.frames.size() > kFramesShown)
        out += fmt::format("         … {} more frames (--json has them)\n", c.frames.size() - kFramesShown);
    }
    if (rep.call_sites.size() > kSitesShown)
      out += fmt::format("  … {} more call sites (--json lists them all)\n", rep.call_sites.size() - kSitesShown);
  }

  out += ArrivalsText(rep.slow_rank);
  // One paragraph per finding: the pairs it explains, the evidence of the first, the fix.
  for (const Finding& f : rep.findings) {
    if (f.id == "stopped") continue;  // its STOPPED lines lead the report
    const PairEntry* first = nullptr;
    for (const PairEntry& e : rep.pairs)
      for (const Cause& c : e.causes)
        if (c.id == f.id && first == nullptr) first = &e;
    std::string what = first && first->fallback
                           ? fmt::format("{} instead of {}", TransportName(first->transport), TransportName(first->expected))
                           : std::string(first ? TransportName(first->transport) : "");
    constexpr size_t kShown = 8;
    std::vector<std::string> some(f.pairs.begin(), f.pairs.begin() + static_cast<long>(std::min(f.pairs.size(), kShown)));
    if (!f.title.empty())
      out += fmt::format("\n{} [{}] {}\n", f.severity, f.id, f.title);
    else
      out += fmt::format("\n{} [{}] {} on {} pair{}: {}{}\n", f.severity, f.id, what, f.pairs.size(),
                         f.pairs.size() == 1 ? "" : "s", fmt::join(some, ", "),
                         f.pairs.size() > kShown ? fmt::format(", … ({} more)", f.pairs.size() - kShown) : "");
    for (const std::string& e : f.evidence) out += "    evidence: " + e + "\n";
    if (!f.fix.empty()) out += "    fix: " + f.fix + "\n";
  }
  return out.Finish();
}

}  // namespace p2ptrace::cli
