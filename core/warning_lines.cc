#include "core/warning_lines.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/causes.h"
#include "core/fields.h"
#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace {
namespace {

// Causes that are a setting the user made (an NCCL_* variable), not the node or NCCL's own choice.
bool IsUserSetting(std::string_view id) { return id.substr(0, 4) == "env-"; }

// Causes that only restate a gate (what the driver or CUDA answered) rather than why.
bool IsGate(std::string_view id) { return id == "nvml-p2p-status" || id == "cuda-no-peer-access" || id == "unknown"; }

}  // namespace

bool PairWarns(const PairPrediction& p) {
  if (p.fallback || p.init_error) return true;
  for (const CauseHit& c : p.causes) {
    if (c.role != "risk") continue;
    const CauseInfo* info = FindCause(c.id);
    if (info && info->severity != Severity::kInfo) return true;
  }
  return false;
}

const CauseHit* HeadlineCause(const PairPrediction& p) {
  if (p.fallback || p.init_error) {
    // A setting the user made leads (NCCL_SHM_DISABLE sending a pair NCCL deliberately put on SHM
    // to TCP sockets): undoing it is the step that pays, and it is theirs to take.
    for (const CauseHit& c : p.causes)
      if ((c.role == "decided" || c.role == "contributes") && IsUserSetting(c.id)) return &c;
    for (const CauseHit& c : p.causes)
      if ((c.role == "decided" || c.role == "contributes") && !IsGate(c.id)) return &c;
    for (const CauseHit& c : p.causes)
      if (c.role == "decided") return &c;
  }
  for (const CauseHit& c : p.causes) {
    const CauseInfo* info = FindCause(c.id);
    if (c.role == "risk" && info && info->severity != Severity::kInfo) return &c;
  }
  return p.causes.empty() ? nullptr : &p.causes.front();
}

std::string GpuLabel(const NodeProbe& probe, int index) {
  const ProbedGpu* g = probe.Gpu(index);
  if (g && g->hostname && *g->hostname != probe.hostname) return *g->hostname + " GPU" + std::to_string(g->cuda >= 0 ? g->cuda : index);
  return "GPU" + std::to_string(index);
}

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

namespace {

// What happens to a pair, as its warning says it: "shm instead of pcie_p2p", "NCCL init error instead
// of nvlink", "pcie_p2p at risk (slow or hanging) instead of pcie_p2p at full speed".
std::string ChangeText(const PairPrediction& p) {
  std::string taken(TransportName(p.transport)), best(TransportName(p.best));
  if (p.fallback) return taken + " instead of " + best;
  if (p.init_error) return "NCCL init error instead of " + best;
  return taken + " at risk (slow or hanging) instead of " + best + " at full speed";
}

}  // namespace

std::string WarningLine(std::string_view host, std::string_view gpu_a, std::string_view gpu_b, int rank_a, int rank_b,
                        const PairPrediction& p, std::string_view note) {
  std::string line = "p2ptrace: warning: " + (host.empty() ? "" : std::string(host) + " ") + std::string(gpu_a) + " -> " +
                     std::string(gpu_b);
  if (rank_a >= 0 && rank_b >= 0) line += " (ranks " + std::to_string(rank_a) + "->" + std::to_string(rank_b) + ")";
  line += ": " + ChangeText(p);
  if (!note.empty()) line += " (" + std::string(note) + ")";
  if (const CauseHit* head = HeadlineCause(p)) {
    line += " [" + head->id + "] " + Join(head->evidence, "; ");
    std::vector<std::string> also;
    for (const CauseHit& c : p.causes)
      if (&c != head && c.role != "context") also.push_back(c.id);
    if (!also.empty()) line += " (also: " + Join(also, ", ") + ")";
    if (!p.impact.empty()) line += "; " + p.impact;
    if (const CauseInfo* info = FindCause(head->id)) line += "; fix: " + std::string(info->fix);
  }
  return OneLine(line);
}

std::string GpuSetText(std::vector<int> gpus) {
  std::sort(gpus.begin(), gpus.end());
  gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
  std::string out = "GPU";
  for (size_t i = 0; i < gpus.size();) {
    size_t j = i;
    while (j + 1 < gpus.size() && gpus[j + 1] == gpus[j] + 1) ++j;
    out += (i == 0 ? "" : ",") + std::to_string(gpus[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(gpus[j]);
    i = j + 1;
  }
  return out;
}

std::string PairSetText(std::vector<std::pair<int, int>> pairs, size_t max_parts) {
  for (auto& [a, b] : pairs)
    if (a > b) std::swap(a, b);
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  std::map<int, std::set<int>> nb;  // neighbours, both ways
  for (auto [a, b] : pairs) nb[a].insert(b), nb[b].insert(a);
  // Connected groups of GPUs, in the order of their lowest GPU.
  std::vector<std::vector<int>> groups;
  std::set<int> seen;
  for (const auto& [start, unused] : nb) {
    if (seen.count(start)) continue;
    std::vector<int> group, todo{start};
    seen.insert(start);
    while (!todo.empty()) {
      int g = todo.back();
      todo.pop_back();
      group.push_back(g);
      for (int n : nb[g])
        if (seen.insert(n).second) todo.push_back(n);
    }
    std::sort(group.begin(), group.end());
    groups.push_back(std::move(group));
  }
  std::vector<std::string> parts;
  for (const std::vector<int>& group : groups) {
    size_t edges = 0;
    for (int g : group) edges += nb[g].size();
    edges /= 2;
    if (group.size() == 2) {
      parts.push_back("GPU" + std::to_string(group[0]) + " <-> GPU" + std::to_string(group[1]));
      continue;
    }
    if (edges == group.size() * (group.size() - 1) / 2) {  // a clique
      parts.push_back("every pair of " + GpuSetText(group));
      continue;
    }
    // Complete bipartite: two sets, each GPU's partners exactly the other set.
    std::map<std::set<int>, std::vector<int>> by_partners;
    for (int g : group) by_partners[nb[g]].push_back(g);
    if (by_partners.size() == 2) {
      auto first = by_partners.begin(), second = std::next(first);
      std::set<int> a(first->second.begin(), first->second.end()), b(second->second.begin(), second->second.end());
      if (first->first == b && second->first == a) {
        // The smaller set first (one GPU against the others reads as such), else the lower GPUs.
        bool a_first = a.size() != b.size() ? a.size() < b.size() : *a.begin() < *b.begin();
        parts.push_back(GpuSetText(a_first ? first->second : second->second) + " <-> " +
                        GpuSetText(a_first ? second->second : first->second));
        continue;
      }
    }
    // Otherwise rows: each GPU with its higher partners, GPUs of equal rows together.
    std::vector<std::pair<std::set<int>, std::vector<int>>> rows;
    for (int g : group) {
      std::set<int> higher(nb[g].upper_bound(g), nb[g].end());
      if (higher.empty()) continue;
      auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == higher; });
      if (it == rows.end()) rows.push_back({higher, {g}});
      else it->second.push_back(g);
    }
    for (const auto& [higher, from] : rows)
      parts.push_back(GpuSetText(from) + " <-> " + GpuSetText(std::vector<int>(higher.begin(), higher.end())));
  }
  std::string out;
  for (size_t i = 0; i < parts.size() && i < max_parts; ++i) out += (i ? "; " : "") + parts[i];
  if (parts.size() > max_parts) out += "; …";
  return out;
}

std::vector<std::string> WarningLines(const NodeProbe& probe, const Prediction& prediction) {
  std::string host = probe.hostname.empty() ? "this node" : probe.hostname;
  // One line per cause (the headline cause of each pair that warns); within it, the pairs of each
  // path change apart when they differ (NVLink pairs and PCIe pairs that both go to SHM).
  struct Change {
    std::string text, impact;
    std::vector<const PairPrediction*> pairs;
  };
  struct Group {
    std::string cause;
    std::vector<Change> changes;
    std::vector<const PairPrediction*> pairs;
  };
  std::vector<Group> groups;
  for (const PairPrediction& p : prediction.pairs) {
    if (!PairWarns(p)) continue;
    const CauseHit* head = HeadlineCause(p);
    std::string cause = head ? head->id : "";
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.cause == cause; });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{cause, {}, {}});
    g->pairs.push_back(&p);
    std::string text = ChangeText(p);
    auto c = std::find_if(g->changes.begin(), g->changes.end(), [&](const Change& x) { return x.text == text; });
    if (c == g->changes.end()) c = g->changes.insert(g->changes.end(), Change{text, p.impact, {}});
    c->pairs.push_back(&p);
  }
  bool foreign = false;  // GPUs of other hosts: named by their labels, pair by pair
  for (const ProbedGpu& g : probe.gpus)
    if (g.hostname && *g.hostname != probe.hostname) foreign = true;
  auto names = [&](const std::vector<const PairPrediction*>& pairs) {
    if (foreign) {
      std::vector<std::string> out;
      for (const PairPrediction* p : pairs) out.push_back(GpuLabel(probe, p->a) + " <-> " + GpuLabel(probe, p->b));
      if (out.size() > 4) out.resize(4), out.push_back("…");
      return Join(out, ", ");
    }
    std::vector<std::pair<int, int>> ab;
    for (const PairPrediction* p : pairs) ab.push_back({p->a, p->b});
    return PairSetText(ab);
  };
  std::vector<std::string> lines;
  for (const Group& g : groups) {
    const PairPrediction& first = *g.pairs.front();
    std::string line = "p2ptrace: warning: " + host + " " + names(g.pairs);
    if (g.pairs.size() > 1) line += ", " + std::to_string(2 * g.pairs.size()) + " pairs";
    const ProbedGpu* ga = probe.Gpu(first.a);
    const ProbedGpu* gb = probe.Gpu(first.b);
    if (g.pairs.size() == 1 && ga && gb && ga->rank >= 0 && gb->rank >= 0)
      line += " (ranks " + std::to_string(ga->rank) + "<->" + std::to_string(gb->rank) + ")";
    line += ": ";
    for (size_t i = 0; i < g.changes.size(); ++i) {
      const Change& c = g.changes[i];
      // A second change of the same class taken reads "…, instead of pcie_p2p (…)".
      std::string text = c.text;
      if (i > 0 && c.pairs.front()->transport == g.changes[i - 1].pairs.front()->transport &&
          text.find(" instead of ") != std::string::npos)
        text = text.substr(text.find(" instead of ") + 1);
      line += (i ? ", " : "") + text + (g.changes.size() > 1 ? " (" + names(c.pairs) + ")" : "");
    }
    if (const CauseHit* head = HeadlineCause(first)) {
      // One pair's evidence stands for all; "e.g." when another pair's differs (it names its GPUs).
      bool same = true;
      std::set<std::string> also_seen;
      std::vector<std::string> also;
      for (const PairPrediction* p : g.pairs) {
        const CauseHit* h = HeadlineCause(*p);
        if (h && h->evidence != head->evidence) same = false;
        for (const CauseHit& c : p->causes)
          if (&c != h && c.role != "context" && also_seen.insert(c.id).second) also.push_back(c.id);
      }
      line += " [" + head->id + "] " + (same ? "" : "e.g. ") + Join(head->evidence, "; ");
      if (!also.empty()) line += " (also: " + Join(also, ", ") + ")";
      std::vector<std::string> impacts;
      for (const Change& c : g.changes)
        if (!c.impact.empty() && std::find(impacts.begin(), impacts.end(), c.impact) == impacts.end())
          impacts.push_back(c.impact);
      if (!impacts.empty()) line += "; " + Join(impacts, "; ");
      if (const CauseInfo* info = FindCause(head->id)) line += "; fix: " + std::string(info->fix);
    }
    lines.push_back(OneLine(line));
  }
  // The all-good line only where there are pairs: a node with one GPU (or none visible) has nothing to say.
  if (lines.empty() && !prediction.pairs.empty())
    lines.push_back("p2ptrace: all " + std::to_string(prediction.pairs.size()) + " GPU pairs on " + host +
                    " can use NVLink/P2P");  // DESIGN.md §2's wording, even for one pair
  return lines;
}

}  // namespace p2ptrace
