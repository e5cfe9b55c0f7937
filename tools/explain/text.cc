// `p2ptrace explain`'s text: per communicator its ranks and pairs, NCCL's reasons, failures and fixes,
// and a topology's matrix with the predicted path of every GPU pair.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/causes.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/vocabulary.h"
#include "tools/explain/explain.h"

namespace p2ptrace::cli {
namespace {

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

std::string Who(const NcclLogger& l) {
  if (l.host.empty()) return "";
  return l.cuda_dev >= 0 ? fmt::format("  ({} pid {}, cudaDev {})", l.host, l.pid, l.cuda_dev)
                         : fmt::format("  ({} pid {})", l.host, l.pid);
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
    out += fmt::format("  {:<12} {:<5} {:<10}{}{}\n", GpuPairName(p.a, p.b), p.link.empty() ? "?" : p.link,
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
        out += fmt::format("  ranks {} -> {} ({}): NCCL used {}, predicted {}\n", c.src_rank, c.dst_rank, GpuPairName(c.a, c.b),
                           TransportName(c.observed), TransportName(c.predicted));
  }
  return out;
}

// Per host that printed NET connection lines: the networks and NICs they name (with what the
// host's `NET/… : Using` line says of each), how many have GPUDirect RDMA each way, the PXN relays.
std::string NetText(const Explanation& e) {
  struct Host {
    std::map<std::pair<std::string, int>, std::string> nics;  // (network, nic) -> device text
    size_t lines = 0, gdr_send = 0, sends = 0, gdr_receive = 0, receives = 0;
    std::set<int> relays;
  };
  std::map<std::string, Host> hosts;
  std::vector<std::string> order;
  for (const ExplainConnection& ec : e.connections) {
    std::optional<NetPath> p = ParseNetPath(ec.c.transport);
    if (!p) continue;
    auto [it, fresh] = hosts.try_emplace(ec.c.logger.host);
    if (fresh) order.push_back(ec.c.logger.host);
    Host& h = it->second;
    h.nics.try_emplace({p->network, p->nic}, "");
    ++h.lines;
    bool send = ec.c.direction == "send";
    (send ? h.sends : h.receives) += 1;
    if (p->gdr) (send ? h.gdr_send : h.gdr_receive) += 1;
    if (p->proxy_rank >= 0) h.relays.insert(p->proxy_rank);
  }
  if (hosts.empty()) return "";
  for (const ExplainNetDevice& d : e.net_devices) {
    auto h = hosts.find(d.logger.host);
    if (h == hosts.end()) continue;
    auto nic = h->second.nics.find({d.device.network, d.device.index});
    if (nic == h->second.nics.end() || !nic->second.empty()) continue;
    nic->second = d.device.name.empty() ? fmt::format(" ({} {})", d.device.interface, d.device.address)
                                        : fmt::format(" ({} port {}, {})", d.device.name, d.device.port, d.device.link);
  }
  std::string out = "\nnetwork (NET) connections, by the host that printed them:\n";
  for (const std::string& name : order) {
    const Host& h = hosts[name];
    std::string nics;
    for (const auto& [k, text] : h.nics) nics += fmt::format("{}{} NIC {}{}", nics.empty() ? "" : ", ", k.first, k.second, text);
    auto gdr = [](size_t with, size_t all) { return all == 0 ? std::string("-") : fmt::format("{} of {}", with, all); };
    out += fmt::format("  {}: {}; {} line{}; GPUDirect RDMA: sends {}, receives {}", name.empty() ? "(no prefix)" : name,
                       nics, h.lines, h.lines == 1 ? "" : "s", gdr(h.gdr_send, h.sends), gdr(h.gdr_receive, h.receives));
    if (!h.relays.empty()) {
      std::string relays;
      for (int r : h.relays) relays += (relays.empty() ? "" : ", ") + std::to_string(r);
      out += fmt::format("; PXN: sends relayed through rank{} {}", h.relays.size() == 1 ? "" : "s", relays);
    }
    out += "\n";
  }
  for (const NetFinding& n : e.net) {
    std::string ranks;
    for (size_t i = 0; i < n.pairs.size() && i < 4; ++i) ranks += fmt::format("{}{} -> {}", i ? ", " : "", n.pairs[i].first, n.pairs[i].second);
    if (n.pairs.size() > 4) ranks += fmt::format(", … ({} pairs)", n.pairs.size());
    out += fmt::format("  [{}] {}: {} (ranks {})\n", n.cause, n.host.empty() ? "(no prefix)" : n.host,
                       NetShortfallText(n.shortfall), ranks);
    for (const std::string& ev : n.evidence) out += fmt::format("      {}\n", ev);
    if (!n.settled) out += fmt::format("      {}\n", WhereToLook(n));
  }
  return out;
}

}  // namespace

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
  out += NetText(e);
  if (!e.refusals.empty()) {
    out += "\nwhy — NCCL's own lines that explain a fallback:\n";
    for (const SourceLine& r : e.refusals) out += fmt::format("  {}  {}{}\n", r.Where(), r.text, Who(r.logger));
  }
  if (!e.env.empty()) {
    std::set<std::string> seen;
    std::string list;
    for (const SourceLine& s : e.env)
      if (seen.insert(s.text).second) list += fmt::format("  {}  {}\n", s.Where(), s.text);
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

}  // namespace p2ptrace::cli
