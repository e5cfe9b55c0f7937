#include "tools/report/node_predictions.h"

#include <algorithm>
#include <optional>

#include "core/causes.h"
#include "core/node_probe.h"
#include "core/probe_parsers.h"
#include "core/vocabulary.h"
#include "p2ptrace/trace_format.h"

namespace p2ptrace::cli {

void NodePredictions::Add(const std::string& host, const PreflightBlock& b, GpuIndex& gpus) {
  Host& hp = hosts_[host];
  if (hp.boot_id.empty()) hp.boot_id = b.boot_id;
  for (const ProbeStep& st : b.steps)
    if (st.name == "NVML" && st.status == "ok") hp.nvml = true;
  // Bus ids in one form (NormalizeBusId) from here on: the block's writer may spell them otherwise.
  std::map<int, std::string> bus_of;
  for (const PreflightGpu& g : b.gpus) {
    std::string bus = NormalizeBusId(g.bus_id);
    bus_of[g.index] = bus;
    if (!bus.empty() && g.index >= 0) gpus.AddProbed(host, bus, g);
    if (!bus.empty() && !g.nic_paths.empty()) hp.nic_paths.try_emplace(bus, g.nic_paths);
  }
  std::vector<PreflightPair> pairs = b.pairs;
  for (PreflightPair& p : pairs) p.bus_a = NormalizeBusId(p.bus_a), p.bus_b = NormalizeBusId(p.bus_b);
  for (const PreflightLink& l : b.links)
    if (bus_of.count(l.a) && bus_of.count(l.b)) {
      hp.links.try_emplace({bus_of[l.a], bus_of[l.b]}, l.link);
      hp.links.try_emplace({bus_of[l.b], bus_of[l.a]}, l.link);
    }
  for (const PreflightPair& p : pairs)  // blocks written before the "gpu" lines
    for (const auto& [index, bus] : {std::pair{p.a, p.bus_a}, std::pair{p.b, p.bus_b}})
      if (!bus.empty() && index >= 0 && index < 100) gpus.AddProbed(host, bus, PreflightGpu{index, bus, "", -1});
  // A pair's first prediction stands unless a later one (a later block of the process, after its
  // first copies or NCCL's first operation, or another process's) foresees a fallback it did not.
  for (const PreflightPair& p : pairs) {
    auto same = [&](const PreflightPair& q) { return q.a == p.a && q.b == p.b && q.bus_a == p.bus_a && q.bus_b == p.bus_b; };
    auto it = std::find_if(hp.pairs.begin(), hp.pairs.end(), same);
    if (it == hp.pairs.end()) hp.pairs.push_back(p);
    else if (p.fallback && !it->fallback) *it = p;
  }
  for (const std::string& w : b.warnings)
    if (std::find(hp.warnings.begin(), hp.warnings.end(), w) == hp.warnings.end()) hp.warnings.push_back(w);
  for (const NodeProbe::Nic& n : b.nics) {
    if (n.state == "ACTIVE" && n.rate_gbps > hp.active.gbps) hp.active = {n.name, n.rate_gbps, n.state};
    if (n.rate_gbps > hp.any.gbps) hp.any = {n.name, n.rate_gbps, n.state};
  }
}

void NodePredictions::NameNearestNics(PairEntry& e) const {
  for (PairEntry::NetSide& side : e.net) {
    const Host* h = Of(side.host);
    const std::string& bus = side.host == e.src.host ? e.src.bus_id : e.dst.bus_id;
    if (h == nullptr) continue;
    auto it = h->nic_paths.find(bus);
    if (it == h->nic_paths.end()) continue;
    std::optional<PathType> nearest;
    for (const auto& [nic, path] : it->second) {
      std::optional<PathType> type = ParsePathType(path);
      if (type && (!nearest || *type < *nearest)) nearest = type, side.nearest_nic = nic, side.nearest_path = path;
      if (nic == side.nic) side.nic_path = path;
    }
  }
}

NodePredictions::NicRate NodePredictions::FastestNic(const std::string& host) const {
  const Host* h = Of(host);
  if (h == nullptr) return {};
  return h->active.gbps > 0 ? h->active : h->any;
}

// The preflight's prediction for a report pair (either direction): by host and the two bus ids, else
// by GPU index. The shim numbers another host's (or container's) GPUs from 100 (shim/preflight.cc
// MergeIdentities), so a pair with such a GPU is matched only to a cross-host pair, its local GPU
// on the block's host.
const NodePredictions::Host* NodePredictions::Of(const std::string& host) const {
  auto it = hosts_.find(host);
  return it == hosts_.end() ? nullptr : &it->second;
}

const PreflightPair* NodePredictions::PredictionFor(const PairEntry& e) const {
  constexpr int kForeignIndex = 100;
  auto block = [&](const std::string& host) { return Of(host); };
  auto bus = [](const std::string& b) { return IsBusId(b) ? b : std::string(); };  // "" for "device3"
  if (e.src.host == e.dst.host) {
    const Host* hp = block(e.src.host);
    if (hp == nullptr) return nullptr;
    std::string s = bus(e.src.bus_id), d = bus(e.dst.bus_id);
    for (const PreflightPair& p : hp->pairs) {
      if (p.a >= kForeignIndex || p.b >= kForeignIndex) continue;
      const std::string &a = p.bus_a, &b = p.bus_b;
      if (!s.empty() && !d.empty() && !a.empty() && !b.empty()) {
        if ((a == s && b == d) || (a == d && b == s)) return &p;
      } else if (e.src.gpu >= 0 && e.dst.gpu >= 0 &&
                 ((p.a == e.src.gpu && p.b == e.dst.gpu) || (p.a == e.dst.gpu && p.b == e.src.gpu))) {
        return &p;
      }
    }
    return nullptr;
  }
  // Across hosts: the block of either end, its own GPU on that end. Each end sees its own side of
  // the path (its GPU, its NIC, its peer-memory module): the end that foresaw a fallback says why.
  const PreflightPair* found = nullptr;
  for (const auto& [local, remote] : {std::pair{&e.src, &e.dst}, std::pair{&e.dst, &e.src}}) {
    const Host* hp = block(local->host);
    if (hp == nullptr) continue;
    for (const PreflightPair& p : hp->pairs) {
      bool a_foreign = p.a >= kForeignIndex, b_foreign = p.b >= kForeignIndex;
      if (a_foreign == b_foreign) continue;
      const std::string& mine = a_foreign ? p.bus_b : p.bus_a;
      const std::string& theirs = a_foreign ? p.bus_a : p.bus_b;
      if (mine != local->bus_id || theirs != remote->bus_id || mine.empty()) continue;
      if (p.fallback) return &p;
      if (found == nullptr) found = &p;
    }
  }
  return found;
}

// A direct pair's link from the node's facts: NVLink when the probe's link is NV<n>, PCIe P2P when
// it is a PCIe path and NVML answered (it would have named an NVLink). The trace's own class stands
// where it named one; "p2p" stays only where nothing on the node could tell.
void NodePredictions::NameLink(PairEntry& e) const {
  if (e.src.host != e.dst.host) return;
  const Host* hp = Of(e.src.host);
  if (hp == nullptr) return;
  // The node's link for the two GPUs (every pair the probe named), else the prediction's.
  if (auto l = hp->links.find({e.src.bus_id, e.dst.bus_id}); l != hp->links.end())
    e.link = l->second;
  else if (const PreflightPair* p = PredictionFor(e); p != nullptr)
    e.link = p->link;
  if (e.link.empty()) return;
  int cls = e.link.rfind("NV", 0) == 0 ? P2PTRACE_TRANSPORT_NVLINK : hp->nvml ? P2PTRACE_TRANSPORT_PCIE_P2P : 0;
  if (cls == 0) return;
  if (e.transport == P2PTRACE_TRANSPORT_P2P) e.transport = cls;
  if (e.expected == P2PTRACE_TRANSPORT_P2P) e.expected = cls;
}

// The job-start prediction's causes, after the report's own, for a pair on the path the prediction
// foresaw (for an NCCL pair, also one the report already calls a fallback: the prediction says why
// the better path was closed). The report's own view of the expected class stands; the prediction
// fills it only where the report could not tell (NCCL prints no reason for a P2P level it applied).
void NodePredictions::ApplyTo(PairEntry& e) const {
  const PreflightPair* p = PredictionFor(e);
  if (p == nullptr) return;
  bool foreseen = p->transport == e.transport;
  if (p->fallback) {
    if (!foreseen && !(e.source == "nccl" && e.fallback)) return;
    if (foreseen && e.expected == 0 && p->best != 0) {
      e.expected = p->best;
      e.fallback = true;
    }
  } else if (!foreseen && !(IsDirect(e.transport) && IsDirect(p->transport))) {
    return;
  }
  // A fallback takes every cause that decided or contributed; a path taken as foreseen that may
  // still crawl or hang (IOMMU/ACS redirecting P2P through the root complex, NVLinks down, a
  // downtrained PCIe link) takes its risks: they are the pair's, not only the job-start line's.
  for (const CauseHit& c : p->causes) {
    if (c.role == "context" || (!p->fallback && c.role != "risk")) continue;
    if (std::any_of(e.causes.begin(), e.causes.end(), [&](const Cause& x) { return x.id == c.id; })) continue;
    const CauseInfo* info = FindCause(c.id);
    Cause cause{c.id, c.evidence, info ? std::string(info->fix) : "see `p2ptrace doctor` on that node",
                info ? std::string(info->confirm) : "", "preflight"};
    if (cause.evidence.empty() && info) cause.evidence.push_back(std::string(info->title));
    // Between hosts, say whose probe saw it: each end's block speaks for its own side.
    if (e.src.host != e.dst.host)
      for (std::string& ev : cause.evidence) ev = BlockHost(p) + ": " + ev;
    e.causes.push_back(std::move(cause));
  }
}

std::string NodePredictions::BlockHost(const PreflightPair* p) const {
  for (const auto& [host, h] : hosts_)
    if (!h.pairs.empty() && p >= h.pairs.data() && p < h.pairs.data() + h.pairs.size()) return host;
  return "";
}

bool NodePredictions::NvmlAnswered(const std::string& host) const {
  const Host* h = Of(host);
  return h != nullptr && h->nvml;
}

std::vector<Report::Preflight> NodePredictions::Warnings() const {
  std::vector<Report::Preflight> out;
  for (const auto& [host, hp] : hosts_) out.push_back({host, hp.boot_id, hp.warnings});
  return out;
}

}  // namespace p2ptrace::cli
