#include "core/pair_verdict.h"

#include <algorithm>
#include <cstdio>

#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace {
namespace {

std::string Gbps(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 10 ? "%.0f" : "%.1f", v);
  return buf;
}

// The node rules P2P out for the pair by design: its topology allows none (the best class the
// probes found for it is not a direct one), the pair crosses sockets (SYS: CUDA refuses P2P over
// the inter-socket link on most platforms), or its class forbids it (a consumer GPU, a VM without
// P2P, MIG).
bool ByDesign(const PairPrediction* p) {
  if (p == nullptr) return false;
  if ((p->best != 0 && !IsDirect(p->best)) || p->link == "SYS") return true;
  return std::any_of(p->causes.begin(), p->causes.end(), [](const CauseHit& c) {
    return c.role == "decided" && (c.id == "consumer-gpu" || c.id == "virtualized" || c.id == "mig-enabled");
  });
}

// The probes' causes worth naming on a measured pair: those that bear on a CUDA peer copy (the
// link, the platform, the driver), not NCCL's settings and choices; context left out.
std::vector<CauseHit> Causes(const PairPrediction* p) {
  static constexpr std::string_view kCopyCauses[] = {
      "no-nvlink", "nvlink-down", "cuda-no-peer-access", "nvml-p2p-status", "consumer-gpu", "mig-enabled",
      "virtualized", "iommu-enabled", "acs-redirect", "acs-suspected", "pcie-downtrained", "p2p-degraded",
      "cuda-peer-query-failed", "cuda-peer-enable-failed"};
  std::vector<CauseHit> out;
  if (p != nullptr)
    for (const CauseHit& c : p->causes)
      if (c.role != "context" && std::find(std::begin(kCopyCauses), std::end(kCopyCauses), c.id) != std::end(kCopyCauses))
        out.push_back(c);
  return out;
}

}  // namespace

PairVerdict JudgePair(const PairMeasurement& m, const PairPrediction* predicted, int pcie_gen) {
  PairVerdict v;
  std::string link = predicted ? predicted->link : "";
  // Peer access on, a copy takes the link; off, the runtime stages it through the host.
  int best = predicted && IsDirect(predicted->best) ? predicted->best : P2PTRACE_TRANSPORT_P2P;
  v.transport = m.can_access ? best : P2PTRACE_TRANSPORT_HOST_STAGED;
  v.expected = ExpectedBandwidth(v.transport, link, pcie_gen);
  auto fail = [&](std::string reason, std::vector<CauseHit> causes) {
    v.verdict = "fail";
    v.reason = std::move(reason);
    v.causes = std::move(causes);
    return v;
  };
  std::string pair = "GPU" + std::to_string(m.src) + " -> GPU" + std::to_string(m.dst);
  if (!m.tested) {
    v.verdict = "untested";
    v.reason = m.error;
    return v;
  }
  if (m.timed_out)
    return fail((m.stalled_copy.empty() ? std::string("a copy") : m.stalled_copy) + " did not finish within the time limit",
                Causes(predicted));
  if (!m.data_ok)
    return fail("GPU" + std::to_string(m.dst) + " did not receive what GPU" + std::to_string(m.src) + " sent (data differs)",
                Causes(predicted));
  if (m.sm_checked && m.sm_differing > 0) {
    std::vector<CauseHit> causes = Causes(predicted);
    causes.insert(causes.begin(), {"p2p-stores-lost", "decided",
                                   {std::to_string(m.sm_differing) + " of " + std::to_string(m.sm_words) +
                                    " words a kernel on GPU" + std::to_string(m.src) + " stored into GPU" +
                                    std::to_string(m.dst) + " differ there; the copy engine's copy arrived whole"}});
    return fail("GPU" + std::to_string(m.dst) + " did not receive what GPU" + std::to_string(m.src) +
                    "'s kernel stored through peer access (" + std::to_string(m.sm_differing) + " of " +
                    std::to_string(m.sm_words) + " words differ); the copy engine's copies arrived",
                causes);
  }
  if (!m.error.empty()) return fail(m.error, Causes(predicted));
  if (!m.can_access) {
    if (ByDesign(predicted)) {
      v.verdict = "expected";
      v.causes = Causes(predicted);
      v.reason = "no peer access, as this node allows none for the pair";  // staged_gbps: what it gets instead
      return v;
    }
    std::vector<CauseHit> causes = Causes(predicted);
    if (causes.empty()) causes.push_back({"cuda-no-peer-access", "decided", {"cudaDeviceCanAccessPeer(" + std::to_string(m.src) + ", " + std::to_string(m.dst) + ") = 0"}});
    return fail("no peer access (cudaDeviceCanAccessPeer says 0)", causes);
  }
  if (m.enable_result != 0 && m.enable_result != 704)  // 704: cudaErrorPeerAccessAlreadyEnabled
    return fail("cudaDeviceEnablePeerAccess returned " + std::to_string(m.enable_result), Causes(predicted));
  if (m.gbps < 0) return fail("not measured", Causes(predicted));
  std::string figure = v.expected.low > 0 ? Gbps(v.expected.low) + "-" + Gbps(v.expected.high) + " GB/s (" + v.expected.basis + ")" : "";
  if (v.expected.low <= 0) {  // no catalog figure: at least faster than the host
    if (m.staged_gbps >= 0 && m.gbps < m.staged_gbps)
      return fail(Gbps(m.gbps) + " GB/s with peer access, slower than staged through the host (" + Gbps(m.staged_gbps) + " GB/s)",
                  Causes(predicted));
    v.verdict = "pass";
    v.reason = Gbps(m.gbps) + " GB/s (no figure for this link to compare with)";
    return v;
  }
  if (m.gbps < kPassFraction * v.expected.low) {
    std::vector<CauseHit> causes = Causes(predicted);
    if (causes.empty())
      causes.push_back({"p2p-degraded", "decided", {"no cause found in the probes for the pair's low rate"}});
    return fail(Gbps(m.gbps) + " GB/s, below " + std::to_string(static_cast<int>(kPassFraction * 100)) + "% of " + figure,
                causes);
  }
  v.verdict = "pass";
  v.reason = Gbps(m.gbps) + " GB/s, as " + figure + " should give";
  for (const CauseHit& c : Causes(predicted))
    if (c.role == "risk") v.causes.push_back(c);  // passes now, may still hang or crawl: said
  return v;
}

void ChargeLinkChanges(JudgedPair* j, const LinkHealth& before, const LinkHealth& after, const std::string& link) {
  const PairMeasurement& m = j->measured;
  if (!m.tested) return;
  // Peer access on: the copies went the link's way; off, through the host.
  std::optional<LinkRoute> route = m.can_access ? RouteOf(j->verdict.transport, link) : LinkRoute::kThroughHost;
  if (!route) return;
  for (LinkChange& c : CompareLinkHealth(before, after))
    if (PairCrosses(c, m.src, m.dst, *route, after)) j->link_changes.push_back(std::move(c));
  PairVerdict& v = j->verdict;
  bool slow = v.verdict == "fail" && m.gbps >= 0 && v.expected.low > 0 && m.gbps < kPassFraction * v.expected.low;
  if (!slow || j->link_changes.empty()) return;
  // A GPU's own narrow link the probes already named (pcie-downtrained) is not said twice.
  bool gpu_link_named = std::any_of(v.causes.begin(), v.causes.end(), [](const CauseHit& c) { return c.id == "pcie-downtrained"; });
  std::vector<CauseHit> found;
  for (LinkChange::Kind kind : {LinkChange::Kind::kErrors, LinkChange::Kind::kDowntrained}) {
    CauseHit hit{kind == LinkChange::Kind::kErrors ? "link-errors" : "link-downtrained", "decided", {}};
    for (const LinkChange& c : j->link_changes)
      if (c.kind == kind && !(kind == LinkChange::Kind::kDowntrained && gpu_link_named && !c.nvlink && c.gpu >= 0))
        hit.evidence.push_back(c.Where() + ": " + c.What() + (kind == LinkChange::Kind::kErrors ? " during the pair's test" : ""));
    if (!hit.evidence.empty()) found.push_back(std::move(hit));
  }
  for (const CauseHit& c : v.causes)
    if (c.id != "p2p-degraded") found.push_back(c);
  v.causes = std::move(found);
}

std::string RegressionOf(const PairBaseline& before, const JudgedPair& now, double tolerance) {
  const PairMeasurement& m = now.measured;
  if (!m.tested) return "";
  std::string cls(TransportName(now.verdict.transport));
  if (!before.transport.empty() && before.transport != cls)
    return "copies took " + cls + " where the baseline's took " + before.transport;
  auto fell = [&](const char* what, double was, double is) -> std::string {
    if (was <= 0) return "";
    if (is < 0) return std::string(what) + " not measured where the baseline had " + Gbps(was) + " GB/s";
    if (is >= (1 - tolerance) * was) return "";
    return std::string(what) + " " + Gbps(is) + " GB/s, " + std::to_string(static_cast<int>((1 - is / was) * 100 + 0.5)) +
           "% below the baseline's " + Gbps(was) + " GB/s";
  };
  if (std::string r = fell("one way", before.gbps, m.gbps); !r.empty()) return r;
  return fell("both ways", before.bidir_gbps, m.bidir_gbps);
}

}  // namespace p2ptrace
