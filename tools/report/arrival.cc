#include "tools/report/arrival.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "core/causes.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "tools/report/report.h"

namespace p2ptrace::cli {
namespace {

// What makes a rank "the late one" rather than chance: enough collectives, last in at least half of
// them and far more often than 1 in n would be by chance, by a margin no scheduler jitter gives, and
// by a margin that makes at least half of the waiting. The last test tells a late rank from a busy
// host: where every rank jitters by milliseconds, the one woken last (sharing a core, say) can be
// last more often than chance by a millisecond or two, yet had it been on time the others would have
// waited nearly as long for one another. The median collective is asked, not the sum: one long
// preemption would otherwise count as much as a whole job's lateness.
constexpr uint64_t kMinCompared = 10;
constexpr double kMinShare = 0.5;
constexpr double kMaxChance = 1e-3;
constexpr double kMinMarginMs = 1.0;
constexpr double kMinWaitShare = 0.5;
// Between hosts the wall clocks are compared: NTP keeps them within milliseconds, so less is not
// claimed.
constexpr double kHostsFloorMs = 20.0;
// The Perfetto track: at most this many ranks' series (the late rank's always among them).
constexpr size_t kSeriesRanks = 64;

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)))];
}

// P(X >= k) for X ~ Binomial(n, p): how likely a rank is last this often by chance.
double ChanceAtLeast(uint64_t n, uint64_t k, double p) {
  double sum = 0;
  for (uint64_t i = k; i <= n; ++i) {
    double dn = static_cast<double>(n), di = static_cast<double>(i);
    sum += std::exp(std::lgamma(dn + 1) - std::lgamma(di + 1) - std::lgamma(dn - di + 1) + di * std::log(p) +
                    (dn - di) * std::log1p(-p));
  }
  return std::min(1.0, sum);
}

std::string Ms(double ms) { return ms >= 10 ? fmt::format("{:.0f} ms", ms) : fmt::format("{:.1f} ms", ms); }

// " float32" for a record's datatype (ncclDataType_t + 1); "" when not known.
std::string TypeSuffix(int datatype) {
  std::string_view name = NcclTypeName(datatype - 1);
  return name.empty() ? "" : " " + std::string(name);
}

// The smallest period of the sequence (each collective's operation and size) that repeats in at
// least 90% of places: the collectives of one step. 0 when none does within 256.
int StepLength(const std::vector<std::tuple<int, uint64_t, int>>& sig) {
  for (size_t p = 1; p <= 256 && 2 * p <= sig.size(); ++p) {
    size_t same = 0;
    for (size_t i = 0; i + p < sig.size(); ++i) same += sig[i] == sig[i + p];
    if (same * 10 >= (sig.size() - p) * 9) return static_cast<int>(p);
  }
  return 0;
}

// One communicator compared: the arrivals, and the candidate late rank's figures.
struct Compared {
  CommArrivals a;
  std::vector<const StoppedMember*> by_rank;
  int late = -1;  // the rank last most often
  double chance = 1, margin_median_ms = -1;
  // The share of the ranks' waiting its margin makes, in the median collective: had it called with
  // the next-to-last, each of the other n-1 ranks would have waited its margin less (0 where it was
  // not last).
  double wait_share = 0;
  std::vector<double> late_ms;  // its call minus the others' median, per collective
  double wait_ns = 0;           // the others' waiting in collectives where it was last
  std::vector<std::tuple<int, uint64_t, int>> sig;
  bool qualifies = false;
  std::string why_not;  // a candidate that fell short: why
};

Compared Compare(const StoppedComm& c, const std::vector<StoppedProcess>& procs) {
  Compared out;
  out.a.id = c.id;
  out.a.nranks = c.nranks;
  if (c.nranks < 2 || static_cast<int>(c.members.size()) != c.nranks) return out;
  size_t n = static_cast<size_t>(c.nranks);
  out.by_rank.assign(n, nullptr);
  for (const StoppedMember& m : c.members) {
    if (m.rank < 0 || m.rank >= c.nranks || out.by_rank[static_cast<size_t>(m.rank)] != nullptr || m.called.empty())
      return out;  // a rank twice (a communicator re-created under one id), or one that called nothing
    out.by_rank[static_cast<size_t>(m.rank)] = &m;
  }
  std::set<std::string> boots, hosts;
  std::set<size_t> processes;
  for (const StoppedMember* m : out.by_rank) {
    boots.insert(procs[m->process].boot_id);
    hosts.insert(procs[m->process].host);
    processes.insert(m->process);
  }
  if (processes.size() < n) return out;  // ranks of one process call in its program's order, not when ready
  bool one_boot = boots.size() == 1 && !boots.begin()->empty();
  out.a.across_hosts = !one_boot;
  out.a.clock = one_boot ? "CLOCK_MONOTONIC of one boot" : fmt::format("the wall clocks of {} hosts", hosts.size());
  // The numbers every rank's window holds.
  uint64_t lo = 0, hi = UINT64_MAX;
  for (const StoppedMember* m : out.by_rank) {
    lo = std::max(lo, m->first_called);
    hi = std::min(hi, m->first_called + m->called.size() - 1);
  }
  std::vector<int64_t> t(n);
  // Collective `seq` on every rank into t (wall clock across hosts); false where the ranks disagree
  // on what it is. Twice over the numbers (the counts, then the late rank's figures): nothing per
  // collective and rank is kept but the Perfetto series.
  auto times = [&](uint64_t seq) {
    const StoppedMember& m0 = *out.by_rank[0];
    const CalledCollective& k0 = m0.called[seq - m0.first_called];
    bool same = true;
    for (size_t r = 0; r < n; ++r) {
      const StoppedMember& m = *out.by_rank[r];
      const CalledCollective& k = m.called[seq - m.first_called];
      same = same && k.api == k0.api && k.bytes == k0.bytes && k.datatype == k0.datatype;
      t[r] = static_cast<int64_t>(k.called_ns) + (one_boot ? 0 : procs[m.process].realtime_minus_monotonic_ns);
    }
    return same;
  };
  auto last_of = [&] { return static_cast<size_t>(std::max_element(t.begin(), t.end()) - t.begin()); };
  out.a.last_by_rank.assign(n, 0);
  std::vector<std::vector<double>> margins(n);
  std::vector<double> skews;
  for (uint64_t seq = lo; lo <= hi && seq <= hi; ++seq) {
    if (!times(seq)) {
      ++out.a.mismatched;
      continue;
    }
    size_t last = last_of();
    int64_t first = *std::min_element(t.begin(), t.end()), second = INT64_MIN;
    for (size_t r = 0; r < n; ++r)
      if (r != last) second = std::max(second, t[r]);
    ++out.a.last_by_rank[last];
    margins[last].push_back(static_cast<double>(t[last] - second) * 1e-6);
    skews.push_back(static_cast<double>(t[last] - first) * 1e-6);
    for (size_t r = 0; r < n; ++r) out.a.wait_rank_seconds += static_cast<double>(t[last] - t[r]) * 1e-9;
  }
  out.a.compared = skews.size();
  out.a.skew_median_ms = Quantile(skews, 0.5);
  out.a.skew_p90_ms = Quantile(skews, 0.9);
  if (skews.empty()) return out;
  out.late = static_cast<int>(std::max_element(out.a.last_by_rank.begin(), out.a.last_by_rank.end()) -
                              out.a.last_by_rank.begin());
  size_t L = static_cast<size_t>(out.late);
  // The arrival lags for Perfetto: every rank's when few, else the first others and the late rank.
  for (size_t r = 0; r < std::min(n, kSeriesRanks); ++r) out.a.series_ranks.push_back(static_cast<int>(r));
  if (L >= kSeriesRanks) out.a.series_ranks.back() = out.late;
  int64_t to_real = one_boot ? procs[out.by_rank[0]->process].realtime_minus_monotonic_ns : 0;
  std::vector<double> others, shares;
  for (uint64_t seq = lo; seq <= hi; ++seq) {
    if (!times(seq)) continue;
    others.clear();
    for (size_t r = 0; r < n; ++r)
      if (r != L) others.push_back(static_cast<double>(t[r]));
    out.late_ms.push_back((static_cast<double>(t[L]) - Quantile(others, 0.5)) * 1e-6);
    double share = 0;
    if (last_of() == L) {
      double wait = 0, second = *std::max_element(others.begin(), others.end());
      for (size_t r = 0; r < n; ++r) wait += static_cast<double>(t[L] - t[r]);
      out.wait_ns += wait;
      if (wait > 0) share = static_cast<double>(n - 1) * (static_cast<double>(t[L]) - second) / wait;
    }
    shares.push_back(share);
    int64_t first = *std::min_element(t.begin(), t.end());
    CommArrivals::Point p;
    p.first_realtime_ns = static_cast<uint64_t>(first + to_real);
    for (int r : out.a.series_ranks)
      p.lag_ms.push_back(static_cast<float>(static_cast<double>(t[static_cast<size_t>(r)] - first) * 1e-6));
    out.a.series.push_back(std::move(p));
    const CalledCollective& k = out.by_rank[0]->called[seq - out.by_rank[0]->first_called];
    out.sig.emplace_back(k.api, k.bytes, k.datatype);
  }
  uint64_t k = out.a.last_by_rank[L];
  size_t compared = skews.size();
  out.chance = ChanceAtLeast(compared, k, 1.0 / static_cast<double>(n));
  out.margin_median_ms = Quantile(margins[L], 0.5);
  out.wait_share = Quantile(shares, 0.5);
  double share = static_cast<double>(k) / static_cast<double>(compared);
  double floor = out.a.across_hosts ? kHostsFloorMs : kMinMarginMs;
  if (compared < kMinCompared) {
    out.why_not = fmt::format("{} collectives compared, fewer than {}", compared, kMinCompared);
  } else if (share < kMinShare || out.chance > kMaxChance) {
    out.why_not = fmt::format("rank {} called last in {:.0f}% of them, not clearly more than chance", out.late, 100 * share);
  } else if (out.margin_median_ms < floor) {
    out.why_not = fmt::format("rank {} called last in {:.0f}% of them, but by a median {} only (less than {}{})", out.late,
                              100 * share, Ms(out.margin_median_ms), Ms(floor),
                              out.a.across_hosts ? ": the hosts' clocks are not trusted closer" : "");
  } else if (out.wait_share < kMinWaitShare) {
    out.why_not = fmt::format("rank {} called last in {:.0f}% of them, by a median {}, but that makes {:.0f}% of the ranks' "
                              "waiting only in the median collective (less than {:.0f}%): they differ among themselves about "
                              "as much",
                              out.late, 100 * share, Ms(out.margin_median_ms), 100 * out.wait_share, 100 * kMinWaitShare);
  } else {
    out.qualifies = true;
  }
  return out;
}

// The process holding the late rank: its host, GPU and pid.
void NameRank(const Report& rep, const Compared& c, const std::vector<StoppedProcess>& procs, SlowRankFinding* f) {
  const StoppedMember& m = *c.by_rank[static_cast<size_t>(c.late)];
  f->host = procs[m.process].host;
  f->pid = procs[m.process].pid;
  if (m.process < rep.processes.size())
    for (const NcclRank& r : rep.processes[m.process].nccl_ranks)
      if (r.comm.rfind(c.a.id, 0) == 0 && r.rank == c.late && r.gpu >= 0) f->gpu = fmt::format("GPU{}", r.gpu);
}

void DescribeLate(const Report& rep, const Compared& c, const std::vector<StoppedProcess>& procs, bool slow_hop,
                  SlowRankFinding* f) {
  f->present = true;
  f->kind = "late-rank";
  f->comm = c.a.id;
  f->nranks = c.a.nranks;
  f->rank = c.late;
  NameRank(rep, c, procs, f);
  f->compared = c.a.compared;
  f->last = c.a.last_by_rank[static_cast<size_t>(c.late)];
  f->late_median_ms = Quantile(c.late_ms, 0.5);
  f->late_p90_ms = Quantile(c.late_ms, 0.9);
  f->wait_share = c.wait_share;
  f->wait_seconds = c.wait_ns * 1e-9;
  f->step_collectives = StepLength(c.sig);
  if (f->step_collectives > 0) {
    f->steps = f->compared / static_cast<uint64_t>(f->step_collectives);
    if (f->steps > 0) f->wait_per_step_ms = f->wait_seconds * 1e3 / static_cast<double>(f->steps);
  }
  std::string where = f->host.empty() ? "" : fmt::format(" ({}{}, pid {})", f->host, f->gpu.empty() ? "" : " " + f->gpu, f->pid);
  double share = 100.0 * static_cast<double>(f->last) / static_cast<double>(f->compared);
  f->verdict = fmt::format("rank {}{} arrives last at {:.0f}% of communicator {}'s collectives, {} late (median; p90 {}): "
                           "the other {} ranks wait for it {}",
                           f->rank, where, share, f->comm, Ms(f->late_median_ms), Ms(f->late_p90_ms), f->nranks - 1,
                           f->wait_per_step_ms >= 0 ? fmt::format("{} per step", Ms(f->wait_per_step_ms))
                                                    : fmt::format("{:.3g} s in all", f->wait_seconds));
  f->evidence.push_back(fmt::format("called last in {} of the {} collectives compared (the newest of each rank's; by chance "
                                    "about 1 in {}: p = {:.1e}); by a median {} over the next-to-last, which makes {:.0f}% "
                                    "of the ranks' waiting in the median collective",
                                    f->last, f->compared, f->nranks, c.chance, Ms(c.margin_median_ms), 100 * c.wait_share));
  if (f->step_collectives > 0) {
    std::vector<std::string> ops;
    for (int i = 0; i < std::min(f->step_collectives, 4); ++i) {
      const auto& [api, bytes, type] = c.sig[static_cast<size_t>(i)];
      ops.push_back(fmt::format("{} {}{}", NcclApiName(api), BytesText(bytes), TypeSuffix(type)));
    }
    f->evidence.push_back(fmt::format("a step is {} collective{} ({}{}); {} steps compared: the others waited {} per step, "
                                      "{:.3g} s over them (rank-seconds, from the ranks' call times)",
                                      f->step_collectives, f->step_collectives == 1 ? "" : "s", fmt::join(ops, ", "),
                                      f->step_collectives > 4 ? ", …" : "", f->steps, Ms(f->wait_per_step_ms), f->wait_seconds));
  } else {
    f->evidence.push_back(fmt::format("the others waited {:.3g} s for it over the collectives compared (rank-seconds, from "
                                      "the ranks' call times; no repeating step found)",
                                      f->wait_seconds));
  }
  f->evidence.push_back("compared on " + c.a.clock + "; each call's time is when the rank called NCCL (recorded for every call)");
  f->evidence.push_back(std::string(slow_hop ? "it arrives late (a slow hop, below, slows the rings too)"
                                             : "it arrives late, and no ring is bounded by a slow hop") +
                        ": the time goes before it calls, in its compute, its input or its host, which call times "
                        "cannot tell apart");
  f->fix = fmt::format("profile rank {} between its collectives (py-spy dump --pid {} on {}, or torch.profiler on that rank "
                       "alone): a data loader that cannot keep up, host work (CPU binding: numactl/taskset, other "
                       "processes on its cores), or a GPU running slower (nvidia-smi -q -d PERFORMANCE,CLOCK{} for "
                       "throttling)",
                       f->rank, f->pid, f->host.empty() ? "its host" : f->host,
                       f->gpu.empty() ? "" : " -i " + f->gpu.substr(3));
}

// A ring bounded by one of its pairs: the pair, by its class or the link faults charged to it.
struct HopCandidate {
  int rings = 0;
  double ring_gbps = -1;
  std::string comm;
  std::string how;  // why the first ring that named it is bounded by it
};

bool LinkCaused(const PairEntry& e) {
  return std::any_of(e.causes.begin(), e.causes.end(), [](const Cause& c) { return c.SlowedByLink(); });
}

bool HostMemory(int transport) {
  return transport == P2PTRACE_TRANSPORT_SHM || transport == P2PTRACE_TRANSPORT_HOST_STAGED;
}

bool DescribeSlowHop(const Report& rep, bool on_time, SlowRankFinding* f) {
  std::map<size_t, HopCandidate> hops;
  for (const RingSummary& r : rep.rings) {
    int bound = r.bound_pair;
    std::string how = fmt::format("its class gives {:.0f}-{:.0f} GB/s, below the others'", r.bound_expected_low,
                                  r.bound_expected_high);
    if (bound < 0) {  // one class: the hop whose link degraded
      auto degraded = std::find_if(r.hop_pairs.begin(), r.hop_pairs.end(),
                                   [&](size_t i) { return i < rep.pairs.size() && LinkCaused(rep.pairs[i]); });
      if (degraded == r.hop_pairs.end()) continue;
      bound = static_cast<int>(*degraded);
      how = "a link it crosses degraded while the job ran";
    }
    HopCandidate& h = hops[static_cast<size_t>(bound)];
    ++h.rings;
    if (r.slowest_gbps > 0 && (h.ring_gbps < 0 || r.slowest_gbps < h.ring_gbps)) h.ring_gbps = r.slowest_gbps;
    if (h.comm.empty()) h.comm = r.comm.substr(0, 8);
    if (h.how.empty()) h.how = how;
  }
  if (hops.empty()) return false;
  auto best = std::max_element(hops.begin(), hops.end(),
                               [](const auto& a, const auto& b) { return a.second.rings < b.second.rings; });
  const PairEntry& e = rep.pairs[best->first];
  const HopCandidate& h = best->second;
  f->present = true;
  bool allowed = HostMemory(e.transport) && e.fallback && IsDirect(e.expected);
  f->kind = allowed ? "host-staged-hop" : "slow-hop";
  f->comm = h.comm;
  f->pair = PairName(e);
  f->transport = std::string(TransportName(e.transport));
  f->rank = e.ranks.empty() ? -1 : *e.ranks.begin();
  f->host = e.src.host;
  f->gpu = GpuName(e.src);
  f->rings = h.rings;
  f->ring_gbps = h.ring_gbps;
  f->class_gbps_low = e.expected_gbps_low;
  for (const Cause& c : e.causes) f->causes.push_back(c.id);
  std::string why = allowed ? fmt::format("through host memory ({}) where the node allows {}", f->transport,
                                          TransportName(e.expected))
                            : fmt::format("over {}", f->transport);
  f->verdict = fmt::format("{}{} ring{} of communicator {} run{} at the pace of {} ({}){}",
                           on_time ? "every rank arrives on time, but " : "", h.rings,
                           h.rings == 1 ? "" : "s", f->comm.empty() ? "?" : f->comm, h.rings == 1 ? "s" : "",
                           f->pair, why, f->causes.empty() ? "" : fmt::format(": {}", fmt::join(f->causes, ", ")));
  f->evidence.push_back(fmt::format("the ring{} carried {} (the slowest hop's rate in collectives, NCCL's kernel timers); {}",
                                    h.rings == 1 ? "" : "s", h.ring_gbps > 0 ? fmt::format("{:.1f} GB/s", h.ring_gbps) : "an unmeasured rate",
                                    h.how));
  for (const Cause& c : e.causes)
    for (size_t i = 0; i < std::min<size_t>(c.evidence.size(), 2); ++i) f->evidence.push_back(c.id + ": " + c.evidence[i]);
  if (!LinkCaused(e))  // else its cause's evidence already names them
    for (const PairEntry::LinkCharge& l : e.link_changes) f->evidence.push_back(fmt::format("{} {}: {}", l.host, l.where, l.what));
  f->fix = !e.causes.empty() ? e.causes.front().fix
                             : "every ring of the communicator crosses this pair: place the ranks so that a faster link joins them";
  return true;
}

}  // namespace

SlowRankFinding FindSlowRank(const std::vector<StoppedComm>& comms, const std::vector<StoppedProcess>& processes,
                             const Report& rep) {
  SlowRankFinding f;
  std::vector<Compared> all;
  for (const StoppedComm& c : comms) {
    Compared k = Compare(c, processes);
    if (k.a.compared > 0) all.push_back(std::move(k));
  }
  // The late rank of the communicator where the others waited longest for it: a rank late in one
  // communicator because it waited in another is late in both, and less in the second.
  auto late = all.end();
  for (auto it = all.begin(); it != all.end(); ++it)
    if (it->qualifies && (late == all.end() || it->wait_ns > late->wait_ns)) late = it;
  if (late != all.end()) {
    SlowRankFinding hop;
    bool slow_hop = DescribeSlowHop(rep, false, &hop);
    DescribeLate(rep, *late, processes, slow_hop, &f);
    if (slow_hop) f.notes.push_back("also: " + hop.verdict);
  } else {
    // "On time" only where enough collectives were compared to say so.
    bool judged = std::any_of(all.begin(), all.end(), [](const Compared& k) { return k.a.compared >= kMinCompared; });
    DescribeSlowHop(rep, judged, &f);
    late = std::max_element(all.begin(), all.end(), [](const Compared& a, const Compared& b) {
      return std::tie(a.a.nranks, a.a.compared) < std::tie(b.a.nranks, b.a.compared);
    });
  }
  if (late != all.end()) std::rotate(all.begin(), late, late + 1);  // the finding's (or the largest) first
  for (size_t i = 0; i < all.size(); ++i) {
    const Compared& k = all[i];
    if (i > 0 && k.qualifies)
      f.notes.push_back(fmt::format("communicator {}: rank {} also arrives last most often ({} of {})", k.a.id, k.late,
                                    k.a.last_by_rank[static_cast<size_t>(k.late)], k.a.compared));
    else if (!k.qualifies && !k.why_not.empty() && !f.present)
      f.notes.push_back(fmt::format("communicator {}: no late rank: {}", k.a.id, k.why_not));
    if (k.a.mismatched > 0)
      f.notes.push_back(fmt::format("communicator {}: {} collectives left out (its ranks called different operations or sizes)",
                                    k.a.id, k.a.mismatched));
    f.comms.push_back(std::move(all[i].a));
    if (i > 0) f.comms.back().series.clear();  // the first communicator's only
  }
  return f;
}

Finding SlowRankAsFinding(const SlowRankFinding& f) {
  Finding out;
  out.id = "slow-rank";
  out.cause = f.kind;
  out.severity = "warning";
  out.title = f.kind + ": " + f.verdict;
  out.evidence = f.evidence;
  out.evidence.insert(out.evidence.end(), f.notes.begin(), f.notes.end());
  out.fix = f.fix;
  if (!f.pair.empty()) out.pairs.push_back(f.pair);
  if (f.rank >= 0) out.ranks.push_back(f.rank);
  return out;
}

}  // namespace p2ptrace::cli
