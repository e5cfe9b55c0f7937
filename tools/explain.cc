#include "tools/explain.h"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <map>
#include <ostream>
#include <tuple>

#include "core/causes.h"
#include "core/nccl_failures.h"
#include "core/input_file.h"
#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/vocabulary.h"
#include "tools/json_text.h"
#include "tools/traces.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

// How bad a class is for a GPU pair, worst highest; classes that are not a pair's path rank lowest
// so that they never hide a fallback.
int Badness(int transport_class) {
  switch (transport_class) {
    case P2PTRACE_TRANSPORT_NVLINK: return 1;
    case P2PTRACE_TRANSPORT_PCIE_P2P: return 2;
    case P2PTRACE_TRANSPORT_P2P: return 3;
    case P2PTRACE_TRANSPORT_P2P_INDIRECT: return 4;
    case P2PTRACE_TRANSPORT_SHM: return 5;
    case P2PTRACE_TRANSPORT_HOST_STAGED: return 6;
    case P2PTRACE_TRANSPORT_NET_GDR: return 7;
    case P2PTRACE_TRANSPORT_NET_IB: return 8;
    case P2PTRACE_TRANSPORT_NET_SOCKET: return 9;
    case P2PTRACE_TRANSPORT_UNKNOWN: return -1;
    default: return 0;  // same_device, nvls, collnet
  }
}

// NCCL's refusal kinds name catalog causes (core/causes.h): one fix text for the CLI, report and shim.
std::string FixFor(std::string_view cause) {
  const CauseInfo* c = FindCause(cause);
  return c ? std::string(c->fix) : "";
}

std::string Channels(const std::set<int>& channels) {
  std::string out;
  for (auto it = channels.begin(); it != channels.end();) {
    int first = *it, last = first;
    for (++it; it != channels.end() && *it == last + 1; ++it) last = *it;
    if (!out.empty()) out += ",";
    out += first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
  }
  return out;
}

std::string Where(const SourceLine& s) { return fmt::format("{}:{}", s.file, s.line); }

std::string Who(const NcclLogger& l) {
  if (l.host.empty()) return "";
  return l.cuda_dev >= 0 ? fmt::format("  ({} pid {}, cudaDev {})", l.host, l.pid, l.cuda_dev)
                         : fmt::format("  ({} pid {})", l.host, l.pid);
}

// commId, or a split's key from its parent's (core/nccl_log.h comm_key); else ranks of one size (and
// for a split, one color) are taken as one communicator.
std::string GroupKey(const RankIdentity& r) {
  if (!r.comm_key.empty()) return r.comm_key;
  if (!r.parent.empty() && r.nranks >= 0) return fmt::format("split:nranks={}:color={}", r.nranks, r.color);
  return r.nranks >= 0 ? fmt::format("nranks={}", r.nranks) : "";
}

std::string GroupLabel(const std::string& key, const std::string& file, size_t nranks_seen) {
  if (key.empty())
    return fmt::format("connections in {} that the log does not tie to a communicator (no communicator of the "
                       "process that printed them fits: its Init line is not in the log, or the line has no "
                       "host:pid:tid prefix)", file);
  if (key.starts_with("split:nranks=")) {
    size_t colon = key.find(":color=");
    return fmt::format("split communicator of {} ranks, color {} ({} seen; its parent's Init line is not in the log, "
                       "so split ranks of this size and color are taken as one communicator)",
                       key.substr(13, colon - 13), key.substr(colon + 7), nranks_seen);
  }
  if (key.starts_with("nranks="))
    return fmt::format("communicator of {} ranks ({} seen; this NCCL prints no commId, so ranks of this size are taken "
                       "as one communicator)",
                       key.substr(7), nranks_seen);
  return fmt::format("communicator {} ({} ranks seen)", key, nranks_seen);
}

// A split's key is p2ptrace's (NCCL 2.23+ prints no commId for it): say what it was split from.
std::string SplitNote(const Communicator& g) {
  for (const ExplainRank& r : g.ranks)
    if (!r.id.parent_key.empty() && r.id.comm_id.empty())
      return fmt::format("; {} of {}{}, color {}: NCCL prints no commId for it, the key is p2ptrace's",
                         r.id.api.empty() ? "split" : r.id.api, r.id.parent_key,
                         r.id.split_count >= 0 ? fmt::format(" (split {})", r.id.split_count) : "", r.id.color);
  return "";
}

// Unattributed connections of different files are not assumed to share a communicator.
Communicator& GroupFor(std::vector<Communicator>& groups, const std::string& key, const std::string& file) {
  std::string group_file = key.empty() ? file : "";
  for (Communicator& g : groups)
    if (g.key == key && g.file == group_file) return g;
  groups.push_back(Communicator{key, group_file, "", {}, {}, 0});
  return groups.back();
}

void AddPair(Communicator& g, const Connection& c) {
  auto it = std::find_if(g.pairs.begin(), g.pairs.end(),
                         [&](const ExplainPair& p) { return p.src_rank == c.src_rank && p.dst_rank == c.dst_rank; });
  if (it == g.pairs.end()) {
    g.pairs.push_back(ExplainPair{c.src_rank, c.dst_rank, c.transport_class, {}, {}, 0});
    it = g.pairs.end() - 1;
  }
  if (Badness(c.transport_class) > Badness(it->transport_class)) it->transport_class = c.transport_class;
  if (std::find(it->transports.begin(), it->transports.end(), c.transport) == it->transports.end())
    it->transports.push_back(c.transport);
  it->channels.insert(c.channel);
  ++it->lines;
}

}  // namespace

Explanation BuildExplanation(const std::vector<ExplainFile>& files) {
  Explanation e;
  for (const ExplainFile& f : files) {
    const NcclLog& log = f.log;
    e.files.push_back(f.path);
    e.lines += log.lines_read;
    e.nccl_lines += log.nccl_lines;
    if (e.nccl_version.empty()) e.nccl_version = log.nccl_version;
    for (const VersionLine& v : log.version_lines) e.nccl_versions.insert(v.version);
    e.warnings += log.warnings.size();
    for (const RankIdentity& r : log.ranks) GroupFor(e.communicators, GroupKey(r), f.path).ranks.push_back({f.path, r});
    for (const Connection& c : log.connections) {
      const RankIdentity* r = log.IdentityOf(c);  // exact even for a comm pointer reused after destroy
      if (c.attribution == Attribution::kAmbiguous) ++e.ambiguous;
      e.connections.push_back({f.path, r ? r->comm_id : "", r ? GroupKey(*r) : "", c});
      Communicator& g = GroupFor(e.communicators, r ? GroupKey(*r) : "", f.path);
      ++g.connection_lines;
      if (c.dst_rank >= 0) AddPair(g, c);
    }
    for (const Refusal& r : log.refusals) e.refusals.push_back({f.path, r.line, r.text, r.logger, r.kind});

    for (const EnvSetting& s : log.env)
      e.env.push_back({f.path, s.line, fmt::format("{} set by environment to {}", s.name, s.value), s.logger, ""});
  }
  // NCCL's failures over all files at once: one per cause, and a program's error line counts as
  // explained by another file's WARN line.
  std::vector<NamedNcclLog> named;
  for (const ExplainFile& f : files) named.push_back({f.path, &f.log});
  e.failures = DiagnoseNcclFailures(named);
  for (Communicator& g : e.communicators) {
    std::sort(g.ranks.begin(), g.ranks.end(), [](const ExplainRank& a, const ExplainRank& b) {
      return std::tie(a.id.rank, a.id.host, a.id.pid) < std::tie(b.id.rank, b.id.host, b.id.pid);
    });
    std::sort(g.pairs.begin(), g.pairs.end(), [](const ExplainPair& a, const ExplainPair& b) {
      return std::tie(a.src_rank, a.dst_rank) < std::tie(b.src_rank, b.dst_rank);
    });
    g.label = GroupLabel(g.key, g.file, g.ranks.size());
    if (std::string note = SplitNote(g); !note.empty() && g.label.ends_with(")")) g.label.insert(g.label.size() - 1, note);
  }
  // Unattributed connections last.
  std::stable_partition(e.communicators.begin(), e.communicators.end(),
                        [](const Communicator& g) { return !g.key.empty(); });
  // NCCL's own failures first: they are why a job stopped.
  for (const NcclFailure& nf : e.failures) {
    const CauseInfo* info = FindCause(nf.cause);
    Finding f;
    f.id = "nccl-failure";
    f.severity = info ? std::string(SeverityName(info->severity)) : "error";
    f.cause = nf.cause;
    f.evidence = nf.evidence;
    if (nf.lines > nf.evidence.size()) f.evidence.push_back(fmt::format("… {} more line(s)", nf.lines - nf.evidence.size()));
    f.fix = info ? std::string(info->fix) : "";
    e.findings.push_back(std::move(f));
  }
  for (const SourceLine& r : e.refusals) {
    Finding f;
    f.id = "nccl-refusal";
    f.severity = "warning";
    f.cause = CauseForNcclRefusal(r.kind);
    f.evidence.push_back(fmt::format("{}: {}", Where(r), r.text));
    f.fix = FixFor(f.cause);
    e.findings.push_back(std::move(f));
  }
  return e;
}

namespace {

std::string Pair(int a, int b) { return fmt::format("GPU{}-GPU{}", a, b); }

bool SameKind(int observed, int predicted) {
  auto direct = [](int c) {
    return c == P2PTRACE_TRANSPORT_NVLINK || c == P2PTRACE_TRANSPORT_PCIE_P2P || c == P2PTRACE_TRANSPORT_P2P;
  };
  if (direct(observed) && direct(predicted)) return true;  // NCCL's log does not say NVLink or PCIe
  return observed == predicted;
}

std::string JoinCommas(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string RenderTopoText(const TopoExplanation& t) {
  const TopoMatrix& m = t.matrix;
  std::string out = fmt::format("topology {}: {} GPU{}{}; legend {}{}\n", t.file, m.gpus.size(), m.gpus.size() == 1 ? "" : "s",
                                m.nics.empty() ? "" : fmt::format(", {} NIC{}", m.nics.size(), m.nics.size() == 1 ? "" : "s"),
                                m.legend == TopoLegend::kAbsent ? "absent" : m.legend == TopoLegend::kCut ? "cut" : "complete",
                                m.truncated ? "; the paste is cut off (missing cells are blank)" : "");
  std::vector<std::string> names;
  for (int g : m.gpus) names.push_back(fmt::format("GPU{}", g));
  for (size_t k = 0; k < m.nics.size(); ++k) names.push_back(m.nics[k]);
  out += fmt::format("  {:<8}", "");
  for (const auto& n : names) out += fmt::format("{:<8}", n);
  out += "\n";
  for (size_t r = 0; r < names.size(); ++r) {
    out += fmt::format("  {:<8}", names[r]);
    for (size_t c = 0; c < names.size(); ++c) out += fmt::format("{:<8}", m.cells[r][c].empty() ? "?" : m.cells[r][c]);
    if (r < m.gpus.size() && !m.affinity[r].cpu.empty()) out += fmt::format(" cpus {}", m.affinity[r].cpu);
    if (r < m.gpus.size() && !m.affinity[r].numa.empty()) out += fmt::format(" numa {}", m.affinity[r].numa);
    out += "\n";
  }
  for (const auto& [nic, name] : m.nic_names) out += fmt::format("  {} = {}\n", nic, name);
  for (const auto& n : m.notes) out += fmt::format("  note: {}\n", n);
  if (t.p2p) out += fmt::format("NVML P2P status from {} (topo -p2p {})\n", t.p2p_file, t.p2p->p2p_mode.empty() ? "?" : t.p2p->p2p_mode);
  if (!t.assumptions.empty()) {
    out += "\nassumed (say otherwise with --nccl-version, --cpu-vendor, --gpus, --env):\n";
    for (const auto& a : t.assumptions) out += fmt::format("  - {}\n", a);
  }
  out += fmt::format("\npredicted path per GPU pair (NCCL {}.{}.{} rules, {} GPU{} counted):\n", t.prediction.rules.major,
                     t.prediction.rules.minor, t.prediction.rules.patch, t.prediction.gpu_count,
                     t.prediction.gpu_count == 1 ? "" : "s");
  size_t fallbacks = 0;
  std::vector<std::string> causes;  // each explained once, after the pairs
  for (const PairPrediction& p : t.prediction.pairs) {
    fallbacks += p.fallback;
    out += fmt::format("  {:<12} {:<5} {:<10}{}{}\n", Pair(p.a, p.b), p.link.empty() ? "?" : p.link,
                       TransportName(p.transport), p.fallback ? fmt::format(" instead of {}", TransportName(p.best)) : "",
                       p.init_error ? " (NCCL init fails)" : "");
    for (const CauseHit& c : p.causes) {
      if (c.role == "context" && !p.fallback) continue;
      out += fmt::format("      [{}] {}: {}\n", c.id, c.role, JoinCommas(c.evidence));
      if (c.role != "context" && std::find(causes.begin(), causes.end(), c.id) == causes.end()) causes.push_back(c.id);
    }
    if (!p.impact.empty()) out += fmt::format("      impact: {}\n", p.impact);
    for (const Alternative& a : p.alternatives)
      out += fmt::format("      depends: with {} it would be {}\n", a.assumption, TransportName(a.transport));
  }
  if (fallbacks == 0 && !t.prediction.pairs.empty())
    out += fmt::format("  all {} GPU pairs can use NVLink/P2P\n", t.prediction.pairs.size());
  if (!causes.empty()) out += "\ncauses:\n";
  for (const std::string& id : causes)
    if (const CauseInfo* info = FindCause(id)) {
      out += fmt::format("  [{}] ({}) {}\n      fix: {}\n", id, SeverityName(info->severity), info->title, info->fix);
      if (!info->confirm.empty()) out += fmt::format("      confirm: {}\n", info->confirm);
    }
  if (!t.comparisons.empty()) {
    size_t agree = 0;
    for (const Comparison& c : t.comparisons) agree += c.agrees;
    out += fmt::format("\nNCCL's log against the prediction: {} of {} rank pairs agree\n", agree, t.comparisons.size());
    for (const Comparison& c : t.comparisons)
      if (!c.agrees)
        out += fmt::format("  ranks {} -> {} ({}): NCCL used {}, predicted {}\n", c.src_rank, c.dst_rank, Pair(c.a, c.b),
                           TransportName(c.observed), TransportName(c.predicted));
  }
  return out;
}

void AddTopoJson(const TopoExplanation& t, json& j) {
  const TopoMatrix& m = t.matrix;
  json topo;
  topo["file"] = t.file;
  topo["gpus"] = m.gpus;
  topo["nics"] = json::array();
  for (size_t k = 0; k < m.nics.size(); ++k) topo["nics"].push_back({{"column", m.nics[k]}, {"name", m.NicName(k)}});
  topo["matrix"] = m.cells;
  topo["affinity"] = json::array();
  for (size_t r = 0; r < m.gpus.size(); ++r)
    topo["affinity"].push_back({{"gpu", m.gpus[r]}, {"cpu", m.affinity[r].cpu}, {"numa", m.affinity[r].numa},
                                {"gpu_numa", m.affinity[r].gpu_numa}});
  topo["affinity_columns"] = m.affinity_columns;
  topo["legend"] = m.legend == TopoLegend::kAbsent ? "absent" : m.legend == TopoLegend::kCut ? "cut" : "complete";
  topo["truncated"] = m.truncated;
  topo["notes"] = m.notes;
  topo["annotations"] = m.annotations;
  if (t.p2p) topo["p2p"] = {{"file", t.p2p_file}, {"mode", t.p2p->p2p_mode}, {"matrix", t.p2p->cells}};
  j["topology"] = topo;
  j["assumptions"] = t.assumptions;
  j["nccl_rules"] = fmt::format("{}.{}.{}", t.prediction.rules.major, t.prediction.rules.minor, t.prediction.rules.patch);
  j["predicted"] = json::array();
  for (const PairPrediction& p : t.prediction.pairs) {
    json causes = json::array();
    for (const CauseHit& c : p.causes) {
      const CauseInfo* info = FindCause(c.id);
      causes.push_back({{"id", c.id}, {"role", c.role}, {"evidence", c.evidence},
                        {"severity", info ? SeverityName(info->severity) : "info"},
                        {"title", info ? info->title : ""}, {"fix", info ? info->fix : ""},
                        {"confirm", info ? info->confirm : ""}});
    }
    json alts = json::array();
    for (const Alternative& a : p.alternatives) alts.push_back({{"assumption", a.assumption}, {"class", TransportName(a.transport)}});
    j["predicted"].push_back({{"a", p.a}, {"b", p.b}, {"link", p.link}, {"class", TransportName(p.transport)},
                              {"best", TransportName(p.best)}, {"fallback", p.fallback}, {"init_error", p.init_error},
                              {"p2p_level", p.level}, {"causes", causes}, {"impact", p.impact}, {"depends_on", alts}});
  }
  j["comparison"] = json::array();
  for (const Comparison& c : t.comparisons)
    j["comparison"].push_back({{"src_rank", c.src_rank}, {"dst_rank", c.dst_rank}, {"a", c.a}, {"b", c.b},
                               {"observed", TransportName(c.observed)}, {"predicted", TransportName(c.predicted)},
                               {"agrees", c.agrees}, {"communicator", c.communicator}});
}

}  // namespace

void AddTopology(Explanation& e, TopoExplanation t) {
  t.prediction = Predict(t.facts);
  t.assumptions.insert(t.assumptions.begin(), t.prediction.assumptions.begin(), t.prediction.assumptions.end());
  const std::vector<int>& comm = t.facts.communicator;
  bool mapped_by_rank = false;
  for (const Communicator& g : e.communicators) {
    std::map<int, const RankIdentity*> ids;
    for (const ExplainRank& r : g.ranks) ids[r.id.rank] = &r.id;
    auto gpu_of = [&](int rank) {
      auto it = ids.find(rank);
      if (it != ids.end() && it->second->nvml_dev >= 0) return it->second->nvml_dev;
      int dev = it != ids.end() && it->second->cuda_dev >= 0 ? it->second->cuda_dev : rank;
      if (it == ids.end() || it->second->cuda_dev < 0) mapped_by_rank = true;
      if (comm.empty()) return dev;  // no CUDA_VISIBLE_DEVICES: cudaDev is the matrix index
      return dev >= 0 && static_cast<size_t>(dev) < comm.size() ? comm[static_cast<size_t>(dev)] : -1;
    };
    for (const ExplainPair& p : g.pairs) {
      auto src = ids.find(p.src_rank), dst = ids.find(p.dst_rank);
      if (src != ids.end() && dst != ids.end() && src->second->host != dst->second->host) continue;  // other node
      int a = gpu_of(p.src_rank), b = gpu_of(p.dst_rank);
      if (a < 0 || b < 0 || a == b || t.matrix.GpuColumn(a) < 0 || t.matrix.GpuColumn(b) < 0) continue;
      auto pred = std::find_if(t.prediction.pairs.begin(), t.prediction.pairs.end(), [&](const PairPrediction& q) {
        return q.a == std::min(a, b) && q.b == std::max(a, b);
      });
      if (pred == t.prediction.pairs.end()) continue;
      t.comparisons.push_back({p.src_rank, p.dst_rank, a, b, p.transport_class, pred->transport,
                               SameKind(p.transport_class, pred->transport), g.key});
    }
  }
  if (mapped_by_rank)
    t.assumptions.push_back(comm.empty() ? "ranks whose GPU the log does not print: rank r on GPU r"
                                         : "ranks whose GPU the log does not print: rank r on the r-th GPU of --gpus");
  // One finding per cause, over the pairs it holds for.
  std::map<std::string, Finding> by_cause;
  std::vector<std::string> order;
  for (const PairPrediction& p : t.prediction.pairs)
    for (const CauseHit& c : p.causes) {
      if (c.role == "context") continue;
      const CauseInfo* info = FindCause(c.id);
      auto [it, fresh] = by_cause.try_emplace(c.id);
      if (fresh) {
        order.push_back(c.id);
        it->second.id = c.id;
        it->second.cause = c.id;
        it->second.severity = info ? std::string(SeverityName(info->severity)) : "info";
        it->second.fix = info ? std::string(info->fix) : "";
      }
      it->second.pairs.push_back(Pair(p.a, p.b));
      for (const std::string& ev : c.evidence)
        if (std::find(it->second.evidence.begin(), it->second.evidence.end(), ev) == it->second.evidence.end() &&
            it->second.evidence.size() < 8)
          it->second.evidence.push_back(ev);
    }
  for (const std::string& id : order) e.findings.push_back(by_cause[id]);
  Finding mismatch;
  for (const Comparison& c : t.comparisons)
    if (!c.agrees) {
      mismatch.pairs.push_back(Pair(c.a, c.b));
      mismatch.evidence.push_back(fmt::format("ranks {} -> {}: NCCL used {}, predicted {}", c.src_rank, c.dst_rank,
                                              TransportName(c.observed), TransportName(c.predicted)));
    }
  if (!mismatch.pairs.empty()) {
    mismatch.id = "prediction-mismatch";
    mismatch.cause = "unknown";
    mismatch.severity = "warning";
    mismatch.fix = "tell explain how the job ran (--nccl-version, --cpu-vendor, --gpus, --env), or run `p2ptrace doctor` on "
                   "the node: a modified NCCL, NVML status, containers or IOMMU/ACS can decide what the matrix cannot show";
    e.findings.push_back(std::move(mismatch));
  }
  e.topo = std::move(t);
}

std::string RenderExplainText(const Explanation& e) {
  if (e.nccl_lines == 0 && e.connections.empty() && e.topo) return RenderTopoText(*e.topo);
  std::string out = fmt::format("p2ptrace explain: {} file{}, {} lines ({} from NCCL); NCCL {}\n", e.files.size(),
                                e.files.size() == 1 ? "" : "s", e.lines, e.nccl_lines,
                                e.nccl_version.empty() ? "version not printed" : e.nccl_version);
  if (e.nccl_versions.size() > 1) {
    std::string all;
    for (const auto& v : e.nccl_versions) all += (all.empty() ? "" : ", ") + v;
    out += fmt::format("  several NCCL versions printed: {}\n", all);
  }
  for (const Communicator& g : e.communicators) {
    out += fmt::format("\n{}\n", g.label);
    if (!g.ranks.empty()) {
      out += fmt::format("  {:>5}  {:<20} {:>8}  {:>7}  {:>7}  {:<10} {}\n", "rank", "host", "pid", "cudaDev", "nvmlDev",
                         "busId", "comm");
      for (const ExplainRank& r : g.ranks) {
        auto num = [](int v) { return v >= 0 ? fmt::format("{}", v) : std::string("-"); };
        out += fmt::format("  {:>5}  {:<20} {:>8}  {:>7}  {:>7}  {:<10} {}\n", r.id.rank, r.id.host, r.id.pid,
                           num(r.id.cuda_dev), num(r.id.nvml_dev), r.id.bus_id.empty() ? "-" : r.id.bus_id, r.id.comm);
      }
    }
    if (g.pairs.empty()) {
      out += g.connection_lines ? "  no rank pairs (CollNet lines only)\n"
                                : "  no connection lines (NCCL >= 2.22 connects at the first collective that needs them)\n";
      continue;
    }
    out += fmt::format("  {:>10}  {:<12} {:<10} {}\n", "src -> dst", "class", "channels", "NCCL transports");
    for (const ExplainPair& p : g.pairs) {
      std::string transports;
      for (const auto& t : p.transports) transports += (transports.empty() ? "" : ", ") + t;
      out += fmt::format("  {:>10}  {:<12} {:<10} {}\n", fmt::format("{} -> {}", p.src_rank, p.dst_rank),
                         TransportName(p.transport_class), Channels(p.channels), transports);
    }
  }
  bool any_p2p = std::any_of(e.communicators.begin(), e.communicators.end(), [](const Communicator& g) {
    return std::any_of(g.pairs.begin(), g.pairs.end(),
                       [](const ExplainPair& p) { return p.transport_class == P2PTRACE_TRANSPORT_P2P; });
  });
  if (any_p2p) out += "\n(p2p: NCCL's log does not say whether P2P runs over NVLink or PCIe)\n";
  size_t anonymous = 0, noted = 0;
  std::string a_note;
  for (const ExplainConnection& ec : e.connections) {
    anonymous += ec.c.logger.host.empty() && ec.c.logger.pid < 0;
    if (!ec.c.note.empty() && noted++ == 0) a_note = ec.c.note;
  }
  if (anonymous)
    out += fmt::format("\n{} connection line{} no host:pid:tid prefix (a paste): the ranks are as printed, but not which "
                       "process printed {}; {} tied to a communicator only where the paste's own Init lines fit\n",
                       anonymous, anonymous == 1 ? " has" : "s have", anonymous == 1 ? "it" : "them",
                       anonymous == 1 ? "it is" : "they are");
  if (noted)
    out += fmt::format("\n{} connection line{} text after the transport that NCCL does not print (e.g. `{}`): left out "
                       "of the transport\n",
                       noted, noted == 1 ? " carries" : "s carry", a_note);
  if (e.ambiguous)
    out += fmt::format("\n{} connection line{} fit several communicators of {} process equally (the same rank, ranks "
                       "and GPUs): counted with the most recently created\n",
                       e.ambiguous, e.ambiguous == 1 ? "" : "s", e.ambiguous == 1 ? "its" : "their");
  if (!e.refusals.empty()) {
    out += "\nwhy — NCCL's own lines that explain a fallback:\n";
    for (const SourceLine& r : e.refusals) out += fmt::format("  {}  {}{}\n", Where(r), r.text, Who(r.logger));
  }
  if (!e.env.empty()) {
    std::set<std::string> seen;
    std::string list;
    for (const SourceLine& s : e.env)
      if (seen.insert(s.text).second) list += fmt::format("  {}  {}\n", Where(s), s.text);
    out += "\nenvironment NCCL read:\n" + list;
  }
  if (!e.failures.empty()) {
    out += "\nNCCL failed — what its lines say:\n";
    for (const NcclFailure& f : e.failures) {
      out += fmt::format("  [{}] {}\n", f.cause, f.meaning);
      for (const std::string& ev : f.evidence) out += fmt::format("      {}\n", ev);
      if (f.lines > f.evidence.size()) out += fmt::format("      … {} more line(s)\n", f.lines - f.evidence.size());
    }
  }
  if (e.warnings) out += fmt::format("\n{} NCCL WARN line{} (see the log)\n", e.warnings, e.warnings == 1 ? "" : "s");
  // One fix per cause: the lines behind each are listed above.
  std::set<std::string> causes_shown;
  for (const Finding& f : e.findings) {
    if (!causes_shown.insert(f.cause).second || f.fix.empty()) continue;
    if (causes_shown.size() == 1) out += "\nfixes:\n";
    out += fmt::format("  {} ({}): {}\n", f.cause, f.severity, f.fix);
  }
  if (e.topo) out += "\n" + RenderTopoText(*e.topo);
  return out;
}

json RenderExplainJson(const Explanation& e) {
  auto num = [](int v) { return v >= 0 ? json(v) : json(nullptr); };
  auto str = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json j;
  j["version"] = 1;
  j["nccl_version"] = str(e.nccl_version);
  j["nccl_versions"] = e.nccl_versions;
  j["files"] = e.files;
  j["ranks"] = json::array();
  for (const Communicator& g : e.communicators)
    for (const ExplainRank& r : g.ranks)
      j["ranks"].push_back({{"rank", r.id.rank}, {"host", r.id.host}, {"pid", num(r.id.pid)},
                            {"cuda_dev", num(r.id.cuda_dev)}, {"nvml_dev", num(r.id.nvml_dev)},
                            {"bus_id", str(r.id.bus_id)}, {"nranks", num(r.id.nranks)}, {"comm", r.id.comm},
                            {"comm_id", str(r.id.comm_id)}, {"communicator", str(GroupKey(r.id))},
                            {"parent", str(r.id.parent)}, {"parent_communicator", str(r.id.parent_key)},
                            {"file", r.file},
                            {"line", r.id.complete_line ? r.id.complete_line : r.id.FirstLine()}});
  j["connections"] = json::array();
  for (const ExplainConnection& ec : e.connections) {
    const Connection& c = ec.c;
    j["connections"].push_back(
        {{"comm", str(c.comm)}, {"comm_id", str(ec.comm_id)}, {"communicator", str(ec.communicator)},
         {"attribution", AttributionName(c.attribution)}, {"note", str(c.note)}, {"channel", c.channel},
         {"conn_index", num(c.conn_index)},
         {"src_rank", c.src_rank}, {"dst_rank", num(c.dst_rank)}, {"src_dev", str(c.src_dev)},
         {"dst_dev", str(c.dst_dev)}, {"transport", c.transport}, {"class", TransportName(c.transport_class)},
         {"direction", str(c.direction)}, {"host", str(c.logger.host)}, {"pid", num(c.logger.pid)},
         {"cuda_dev", num(c.logger.cuda_dev)}, {"file", ec.file}, {"line", c.line}});
  }
  j["pairs"] = json::array();
  for (const Communicator& g : e.communicators)
    for (const ExplainPair& p : g.pairs)
      j["pairs"].push_back({{"src_rank", p.src_rank}, {"dst_rank", p.dst_rank}, {"class", TransportName(p.transport_class)},
                            {"transports", p.transports}, {"channels", p.channels}, {"lines", p.lines},
                            {"communicator", str(g.key)}, {"file", str(g.file)}});
  j["refusals"] = json::array();
  for (const SourceLine& r : e.refusals)
    j["refusals"].push_back({{"kind", r.kind}, {"text", r.text}, {"file", r.file}, {"line", r.line},
                             {"host", str(r.logger.host)}, {"pid", num(r.logger.pid)}});
  j["env"] = json::array();
  for (const SourceLine& s : e.env)
    j["env"].push_back({{"text", s.text}, {"file", s.file}, {"line", s.line}, {"host", str(s.logger.host)}});
  j["failures"] = json::array();
  for (const NcclFailure& f : e.failures)
    j["failures"].push_back({{"cause", f.cause}, {"meaning", f.meaning}, {"evidence", f.evidence}, {"lines", f.lines},
                             {"host", str(f.host)}, {"pid", num(f.pid)}});
  j["findings"] = json::array();
  for (const Finding& f : e.findings)
    j["findings"].push_back({{"id", f.id}, {"severity", f.severity}, {"cause", f.cause}, {"pairs", f.pairs},
                             {"evidence", f.evidence}, {"fix", f.fix}});
  if (e.topo) AddTopoJson(*e.topo, j);
  return j;
}

namespace {

constexpr size_t kTopoHeadBytes = 1 << 20;  // a pasted topology is far smaller; logs are streamed

// Streams a file through the NCCL log parser (memory stays what the log keeps, up to
// kMaxNcclLogBytes of it, whatever the file's size) and keeps its head for the topology parser.
// Only a regular file is read (traces.h): a FIFO or /dev/zero would never end.
bool ReadFile(const std::string& path, NcclLog* log, std::string* head, std::string* problem, std::string* partial) {
  NcclLogParser parser;
  Expected<uint64_t> size = ReadInPieces(path, kMaxNcclLogBytes, [&](std::string_view got) {
    if (head->size() < kTopoHeadBytes) head->append(got.substr(0, kTopoHeadBytes - head->size()));
    parser.Feed(got);
  });
  if (!size.ok()) {
    // The message names the file already; the caller names it again in its own prefix.
    std::string_view m = size.error().message;
    std::string why(m.substr(m.rfind(path + ": ", 0) == 0 ? path.size() + 2 : 0));
    *problem = why.rfind("not a regular file", 0) == 0 ? why : "cannot read it (" + why + ")";
    return false;
  }
  if (*size > kMaxNcclLogBytes)
    *partial = fmt::format("only its first {} MiB of {} MiB read", kMaxNcclLogBytes >> 20, *size >> 20);
  parser.Finish();
  *log = parser.log();
  return true;
}

// The flags, checked; false with a one-line message on a bad value.
bool ApplyOptions(const ExplainOptions& o, NodeFacts* f, std::string* problem) {
  for (const std::string& kv : o.env) {
    size_t eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos) {
      *problem = fmt::format("--env '{}': expected NAME=VALUE", kv);
      return false;
    }
    f->env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!o.nccl_version.empty()) {
    f->nccl_version = ParseNcclVersion(o.nccl_version);
    if (!f->nccl_version) {
      *problem = fmt::format("--nccl-version '{}': expected a version such as 2.21.5", o.nccl_version);
      return false;
    }
  }
  if (!o.cpu_vendor.empty()) {
    // intel-bdw: Broadwell or older (NCCL 2.6-2.8 give those a lower P2P level).
    std::string vendor = o.cpu_vendor == "intel-bdw" ? "intel" : o.cpu_vendor;
    auto v = ParseCpuVendor(vendor);
    if (!v) {
      *problem = fmt::format("--cpu-vendor '{}': expected intel, intel-bdw, amd, arm or zhaoxin", o.cpu_vendor);
      return false;
    }
    f->cpu_vendor = *v;
    if (*v == CpuVendor::kIntel && o.cpu_vendor == "intel-bdw") f->intel_pre_skylake = true;
  }
  if (!o.gpus.empty()) {
    std::string_view rest = o.gpus;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      int g = -1;
      auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), g);
      if (ec != std::errc() || p != item.data() + item.size() || g < 0 || f->Gpu(g) == nullptr ||
          std::find(f->communicator.begin(), f->communicator.end(), g) != f->communicator.end()) {
        *problem = fmt::format("--gpus '{}': '{}' is not a GPU of the matrix (or given twice)", o.gpus, item);
        return false;
      }
      f->communicator.push_back(g);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return true;
}

}  // namespace

int RunExplain(const std::vector<std::string>& paths, const ExplainOptions& options, std::ostream& out,
               std::ostream& err) {
  std::vector<ExplainFile> logs;
  std::optional<TopoExplanation> topo;
  std::string p2p_file;
  std::optional<TopoMatrix> p2p;
  for (const std::string& path : paths) {
    ExplainFile f{path, {}};
    std::string head, problem, partial;
    if (!ReadFile(path, &f.log, &head, &problem, &partial)) {
      err << "p2ptrace explain: " << Printable(path + ": " + problem, false) << "\n";
      continue;
    }
    if (!partial.empty()) err << "p2ptrace explain: " << Printable(path + ": " + partial, false) << "\n";
    Expected<TopoText> text = ParseTopoText(head);
    bool is_log = f.log.nccl_lines > 0 || !f.log.connections.empty() || !f.log.results.empty();
    if (text.ok()) {
      if (const TopoMatrix* m = text->Links()) {
        if (topo) err << "p2ptrace explain: " << path << ": a second `nvidia-smi topo -m`; only " << topo->file << "'s is used\n";
        else {
          topo.emplace();
          topo->file = path;
          topo->matrix = *m;
        }
      }
      if (const TopoMatrix* m = text->P2p("r") ? text->P2p("r") : text->P2p("")) {
        if (!p2p) {
          p2p = *m;
          p2p_file = path;
        }
      }
    }
    if (is_log) logs.push_back(std::move(f));
    else if (!text.ok())
      err << "p2ptrace explain: "
          << Printable(path + ": neither an NCCL log (no NCCL_DEBUG=INFO line) nor `nvidia-smi topo` output (" +
                           text.error().message + ")", false)
          << "\n";
  }
  if (logs.empty() && !topo) {
    if (p2p) err << "p2ptrace explain: " << p2p_file << ": a `topo -p2p` matrix needs the `nvidia-smi topo -m` beside it\n";
    err << "p2ptrace explain: nothing to explain in " << paths.size() << " file" << (paths.size() == 1 ? "" : "s") << "\n";
    return 2;
  }
  Explanation e = BuildExplanation(logs);
  if (topo) {
    NodeFacts facts = FactsFromTopo(topo->matrix, p2p ? &*p2p : nullptr);
    std::string problem;
    if (!ApplyOptions(options, &facts, &problem)) {
      err << "p2ptrace explain: " << problem << "\n";
      return 2;
    }
    // What the logs say about the run, where the flags are silent.
    if (!facts.nccl_version && !e.nccl_version.empty() && (facts.nccl_version = ParseNcclVersion(e.nccl_version)))
      topo->assumptions.push_back("NCCL " + e.nccl_version + " from the log");
    for (const ExplainFile& f : logs)
      for (const EnvSetting& s : f.log.env)
        if (facts.env.emplace(s.name, s.value).second)
          topo->assumptions.push_back(fmt::format("{}={} from the log ({}:{})", s.name, s.value, f.path, s.line));
    topo->facts = std::move(facts);
    topo->p2p = p2p;
    topo->p2p_file = p2p_file;
    if (!topo->matrix.gpus.empty()) e.files.insert(e.files.begin(), topo->file);
    AddTopology(e, std::move(*topo));
  } else if (!options.env.empty() || !options.nccl_version.empty() || !options.cpu_vendor.empty() || !options.gpus.empty()) {
    err << "p2ptrace explain: --env/--nccl-version/--cpu-vendor/--gpus apply to `nvidia-smi topo -m` input; none was given\n";
  }
  if (options.json) out << JsonText(RenderExplainJson(e), 2) << "\n";
  else out << Printable(RenderExplainText(e));  // log lines and host names as the files hold them
  return 0;
}

}  // namespace p2ptrace::cli
