#include "tools/report/diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "core/printable.h"
#include "core/rate.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "tools/common/json_text.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

// How good a class is, lower better; -1 when it cannot be ranked. `p2p` (direct, link type
// unknown: no NVML) cannot be ranked against nvlink or pcie_p2p: one run may simply have lacked
// NVML. Against anything else it ranks as a direct path.
int Tier(int t) {
  switch (t) {
    case P2PTRACE_TRANSPORT_NVLINK: case P2PTRACE_TRANSPORT_NVLS: return 0;
    case P2PTRACE_TRANSPORT_PCIE_P2P: case P2PTRACE_TRANSPORT_P2P: return 1;
    case P2PTRACE_TRANSPORT_P2P_INDIRECT: return 2;
    case P2PTRACE_TRANSPORT_SHM: case P2PTRACE_TRANSPORT_HOST_STAGED: return 3;
    case P2PTRACE_TRANSPORT_NET_GDR: case P2PTRACE_TRANSPORT_COLLNET: return 4;
    case P2PTRACE_TRANSPORT_NET_IB: return 5;
    case P2PTRACE_TRANSPORT_NET_SOCKET: return 6;
    default: return -1;
  }
}

bool WorseClass(int before, int after) {
  bool direct_pair = (before == P2PTRACE_TRANSPORT_P2P || after == P2PTRACE_TRANSPORT_P2P) &&
                     Tier(before) <= 1 && Tier(after) <= 1;
  if (direct_pair || Tier(before) < 0 || Tier(after) < 0) return false;
  return Tier(after) > Tier(before);
}

// One GPU pair of one run, over all its entries (a pair can use several classes).
struct PairAgg : Traffic {
  std::string label;
  std::map<int, uint64_t> weight;  // class -> bytes (cuda) or connections (nccl)
  bool fallback = false;
  std::set<std::string> causes;
  double Gbps() const { return MeasuredGbps(timed_bytes, timed_ns); }
  // Classes, heaviest first: "nvlink+host_staged".
  std::string Classes() const {
    std::vector<std::pair<uint64_t, int>> by;
    for (auto [c, w] : weight) by.emplace_back(w, -c);
    std::sort(by.rbegin(), by.rend());
    std::string s;
    for (auto [w, c] : by) s += (s.empty() ? "" : "+") + std::string(TransportName(-c));
    return s;
  }
  int Dominant() const {
    int best = 0;
    uint64_t w = 0;
    for (auto [c, cw] : weight)
      if (cw > w || best == 0) best = c, w = cw;
    return best;
  }
  int Worst() const {
    int worst = 0;
    for (auto [c, cw] : weight)
      if (worst == 0 || WorseClass(worst, c)) worst = c;
    return worst;
  }
};

using PairKey = std::tuple<std::string, std::string, std::string, std::string, std::string>;

std::map<PairKey, PairAgg> Aggregate(const Report& r) {
  std::map<PairKey, PairAgg> pairs;
  for (const PairEntry& e : r.pairs) {
    PairAgg& p = pairs[PairKey{e.source, e.src.host, e.src.bus_id, e.dst.host, e.dst.bus_id}];
    p.label = e.dst.host == e.src.host
                  ? fmt::format("{} {} -> {} ({})", e.src.host, GpuName(e.src), GpuName(e.dst), e.source)
                  : fmt::format("{} {} -> {} {} ({})", e.src.host, GpuName(e.src), e.dst.host, GpuName(e.dst), e.source);
    p.weight[e.transport] += e.source == "nccl" ? static_cast<uint64_t>(e.channels) : e.bytes;
    p += e.Rated();  // the pair's rate as the report gives it: its own calls, else its ring share
    p.fallback |= e.fallback;
    for (const Cause& c : e.causes) p.causes.insert(c.id);
  }
  return pairs;
}

// NCCL operations by (op, nranks): communicator hashes differ from run to run.
std::map<std::pair<std::string, int>, NcclOpSummary> AggregateOps(const Report& r) {
  std::map<std::pair<std::string, int>, NcclOpSummary> ops;
  for (const NcclOpSummary& s : r.nccl_ops) {
    NcclOpSummary& o = ops[{s.op, s.nranks}];
    o.op = s.op;
    o.api = s.api;  // busbw's factor
    o.nranks = s.nranks;
    o += s;
  }
  return ops;
}

std::vector<std::string> Minus(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::vector<std::string> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

bool Moved(double before, double after) {
  return before > 0 && after > 0 && std::fabs(after - before) > kBandwidthThreshold * before;
}

}  // namespace

bool DiffResult::Worse() const {
  for (const PairDiff& p : pairs)
    if (p.worse) return true;
  for (const PairDiff& p : nccl_ops)
    if (p.worse) return true;
  for (const SiteDiff& c : call_sites)
    if (c.worse) return true;
  return false;
}

DiffResult DiffReports(const Report& a, const Report& b) {
  DiffResult d;
  d.a = a.path;
  d.b = b.path;
  auto pa = Aggregate(a), pb = Aggregate(b);
  std::set<PairKey> keys;
  for (auto& [k, v] : pa) keys.insert(k);
  for (auto& [k, v] : pb) keys.insert(k);
  for (const PairKey& k : keys) {
    auto ia = pa.find(k), ib = pb.find(k);
    PairDiff p;
    if (ib == pb.end()) {
      p.pair = ia->second.label;
      p.change = "gone";
      p.before = ia->second.Classes();
      p.gbps_before = ia->second.Gbps();
      p.fallback_before = ia->second.fallback;
      p.causes_vanished.assign(ia->second.causes.begin(), ia->second.causes.end());
      d.pairs.push_back(p);
      continue;
    }
    if (ia == pa.end()) {
      p.pair = ib->second.label;
      p.change = "new";
      p.after = ib->second.Classes();
      p.gbps_after = ib->second.Gbps();
      p.fallback_after = ib->second.fallback;
      p.causes_appeared.assign(ib->second.causes.begin(), ib->second.causes.end());
      p.worse = ib->second.fallback;  // a pair that appears already falling back
      d.pairs.push_back(p);
      continue;
    }
    const PairAgg &x = ia->second, &y = ib->second;
    p.pair = y.label;
    p.before = x.Classes();
    p.after = y.Classes();
    p.gbps_before = x.Gbps();
    p.gbps_after = y.Gbps();
    p.fallback_before = x.fallback;
    p.fallback_after = y.fallback;
    p.causes_appeared = Minus(y.causes, x.causes);
    p.causes_vanished = Minus(x.causes, y.causes);
    bool class_changed = p.before != p.after;
    bool moved = Moved(p.gbps_before, p.gbps_after);
    if (!class_changed && !moved && p.causes_appeared.empty() && p.causes_vanished.empty() &&
        x.fallback == y.fallback)
      continue;
    p.change = class_changed ? "class" : moved ? "bandwidth" : "causes";
    p.worse = WorseClass(x.Dominant(), y.Dominant()) || WorseClass(x.Worst(), y.Worst()) || (!x.fallback && y.fallback) ||
              (moved && p.gbps_after < p.gbps_before);
    d.pairs.push_back(p);
  }
  auto oa = AggregateOps(a), ob = AggregateOps(b);
  for (auto& [k, x] : oa) {
    auto it = ob.find(k);
    if (it == ob.end()) continue;
    double before = x.BusBw(), after = it->second.BusBw();
    if (!Moved(before, after)) continue;
    PairDiff p;
    p.pair = fmt::format("{} ({} ranks)", k.first, k.second);
    p.change = "bandwidth";
    p.gbps_before = before;
    p.gbps_after = after;
    p.worse = after < before;
    d.nccl_ops.push_back(p);
  }
  // Call sites by their frames: those whose host-staged bytes appeared or grew by more than 20%.
  std::map<std::string, const CallSiteSummary*> sites_a;
  for (const CallSiteSummary& c : a.call_sites) sites_a.emplace(fmt::format("{}", fmt::join(c.frames, "\n")), &c);
  for (const CallSiteSummary& c : b.call_sites) {  // B's order: most host-staged bytes first
    if (c.host_staged_bytes == 0) continue;
    auto it = sites_a.find(fmt::format("{}", fmt::join(c.frames, "\n")));
    uint64_t before = it == sites_a.end() ? 0 : it->second->host_staged_bytes;
    bool appeared = before == 0;
    if (!appeared && static_cast<double>(c.host_staged_bytes) <= (1 + kBandwidthThreshold) * static_cast<double>(before))
      continue;
    SiteDiff sd;
    sd.frames = c.frames;
    sd.id_after = c.id;
    sd.change = appeared ? "appeared" : "grew";
    sd.host_staged_before = before;
    sd.host_staged_after = c.host_staged_bytes;
    sd.bytes_before = it == sites_a.end() ? 0 : it->second->bytes;
    sd.bytes_after = c.bytes;
    sd.worse = appeared;
    d.call_sites.push_back(std::move(sd));
  }
  std::set<std::string> fa, fb;
  for (const Finding& f : a.findings) fa.insert(f.id);
  for (const Finding& f : b.findings) fb.insert(f.id);
  d.causes_appeared = Minus(fb, fa);
  d.causes_vanished = Minus(fa, fb);
  return d;
}

namespace {

std::string Bw(double gbps) { return gbps > 0 ? fmt::format("{:.1f} GB/s", gbps) : "not timed"; }

std::string Line(const PairDiff& p) {
  std::string s = fmt::format("  {:<7}{}: ", p.worse ? "worse" : p.change == "gone" ? "gone" : p.change == "new" ? "new" : "changed",
                              p.pair);
  if (p.change == "gone") s += fmt::format("{} (was {})", p.before, Bw(p.gbps_before));
  else if (p.change == "new") s += fmt::format("{} ({})", p.after, Bw(p.gbps_after));
  else {
    s += p.before == p.after ? p.after : fmt::format("{} -> {}", p.before, p.after);
    if (p.gbps_before > 0 || p.gbps_after > 0) {
      s += fmt::format("; {} -> {}", Bw(p.gbps_before), Bw(p.gbps_after));
      if (p.gbps_before > 0 && p.gbps_after > 0)
        s += fmt::format(" ({:+.0f}%)", 100 * (p.gbps_after - p.gbps_before) / p.gbps_before);
    }
  }
  if (!p.causes_appeared.empty()) s += fmt::format("; new cause {}", fmt::join(p.causes_appeared, ", "));
  if (!p.causes_vanished.empty()) s += fmt::format("; cause gone {}", fmt::join(p.causes_vanished, ", "));
  return s + "\n";
}

}  // namespace

std::string RenderDiffText(const DiffResult& d) {
  std::string out = fmt::format("p2ptrace diff: {} -> {}\n", d.a, d.b);
  size_t worse = 0;
  for (const PairDiff& p : d.pairs) worse += p.worse;
  // Worse pairs first: they are why the exit status is 1.
  std::vector<const PairDiff*> order;
  for (const PairDiff& p : d.pairs) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](const PairDiff* x, const PairDiff* y) { return x->worse > y->worse; });
  constexpr size_t kShown = 40;
  for (size_t i = 0; i < std::min(order.size(), kShown); ++i) out += Line(*order[i]);
  if (order.size() > kShown) out += fmt::format("  … {} more pair changes (--json lists all)\n", order.size() - kShown);
  for (const PairDiff& p : d.nccl_ops)
    out += fmt::format("  {:<7}{}: busbw {} -> {} ({:+.0f}%)\n", p.worse ? "worse" : "changed", p.pair,
                       Bw(p.gbps_before), Bw(p.gbps_after), 100 * (p.gbps_after - p.gbps_before) / p.gbps_before);
  if (!d.call_sites.empty()) {
    constexpr size_t kSites = 10, kFrames = 3;
    out += "call sites staging more through host memory (matched by their frames):\n";
    for (size_t i = 0; i < std::min(d.call_sites.size(), kSites); ++i) {
      const SiteDiff& c = d.call_sites[i];
      out += fmt::format("  {:<7}#{} host-staged {} -> {}{}\n", c.worse ? "worse" : "changed", c.id_after,
                         BytesText(c.host_staged_before), BytesText(c.host_staged_after),
                         c.host_staged_before ? fmt::format(" ({:+.0f}%)", 100.0 * (static_cast<double>(c.host_staged_after) -
                                                                                   static_cast<double>(c.host_staged_before)) /
                                                                          static_cast<double>(c.host_staged_before))
                                              : std::string());
      for (size_t f = 0; f < std::min(c.frames.size(), kFrames); ++f)
        out += fmt::format("         {} {}\n", f == 0 ? "at" : "  ", c.frames[f]);
    }
    if (d.call_sites.size() > kSites) out += fmt::format("  … {} more call sites (--json lists all)\n", d.call_sites.size() - kSites);
  }
  if (!d.causes_appeared.empty()) out += fmt::format("causes that appeared: {}\n", fmt::join(d.causes_appeared, ", "));
  if (!d.causes_vanished.empty()) out += fmt::format("causes that vanished: {}\n", fmt::join(d.causes_vanished, ", "));
  size_t worse_ops = 0;
  for (const PairDiff& p : d.nccl_ops) worse_ops += p.worse;
  size_t worse_sites = 0;
  for (const SiteDiff& c : d.call_sites) worse_sites += c.worse;
  if (!d.call_sites.empty())
    out += fmt::format("{} call site{} staging more through host memory ({} newly)\n", d.call_sites.size(),
                       d.call_sites.size() == 1 ? "" : "s", worse_sites);
  if (d.pairs.empty() && d.nccl_ops.empty()) out += "no pair changed class or moved more than 20% in GB/s\n";
  else
    out += fmt::format("{} pair{} changed ({} worse), {} NCCL operation{} moved ({} slower)\n", d.pairs.size(),
                       d.pairs.size() == 1 ? "" : "s", worse, d.nccl_ops.size(), d.nccl_ops.size() == 1 ? "" : "s",
                       worse_ops);
  return out;
}

json RenderDiffJson(const DiffResult& d) {
  auto item = [](const PairDiff& p) {
    json j{{"pair", p.pair}, {"change", p.change}, {"worse", p.worse}};
    if (!p.before.empty() || !p.after.empty()) {
      j["before"] = p.before.empty() ? json(nullptr) : json(p.before);
      j["after"] = p.after.empty() ? json(nullptr) : json(p.after);
      j["fallback_before"] = p.fallback_before;
      j["fallback_after"] = p.fallback_after;
      j["causes_appeared"] = p.causes_appeared;
      j["causes_vanished"] = p.causes_vanished;
    }
    j["gbps_before"] = p.gbps_before > 0 ? json(p.gbps_before) : json(nullptr);
    j["gbps_after"] = p.gbps_after > 0 ? json(p.gbps_after) : json(nullptr);
    return j;
  };
  json j{{"version", 1}, {"a", d.a}, {"b", d.b}, {"worse", d.Worse()}, {"threshold", kBandwidthThreshold}};
  j["pairs"] = json::array();
  for (const PairDiff& p : d.pairs) j["pairs"].push_back(item(p));
  j["nccl_ops"] = json::array();
  for (const PairDiff& p : d.nccl_ops) j["nccl_ops"].push_back(item(p));
  j["causes_appeared"] = d.causes_appeared;
  j["causes_vanished"] = d.causes_vanished;
  j["call_sites"] = json::array();
  for (const SiteDiff& c : d.call_sites)
    j["call_sites"].push_back({{"frames", c.frames}, {"id", c.id_after}, {"change", c.change}, {"worse", c.worse},
                               {"host_staged_bytes_before", c.host_staged_before},
                               {"host_staged_bytes_after", c.host_staged_after}, {"bytes_before", c.bytes_before},
                               {"bytes_after", c.bytes_after}});
  return j;
}

}  // namespace p2ptrace::cli
