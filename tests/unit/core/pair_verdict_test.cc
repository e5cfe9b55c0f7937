// doctor --test's verdict per GPU pair (core/pair_verdict.h): measured against the link class's
// figure and the probes' causes; pass, fail with the causes, or expected where the node rules P2P out.
#include "core/pair_verdict.h"

#include <gtest/gtest.h>

#include "p2ptrace/vocabulary.h"

namespace p2ptrace {
namespace {

PairPrediction Predicted(int best, const std::string& link, std::vector<CauseHit> causes = {}) {
  PairPrediction p;
  p.a = 0;
  p.b = 1;
  p.best = best;
  p.link = link;
  p.causes = std::move(causes);
  return p;
}

PairMeasurement Measured(double gbps, bool can_access = true) {
  PairMeasurement m;
  m.src = 0;
  m.dst = 1;
  m.can_access = can_access;
  m.enable_result = can_access ? 0 : -1;
  m.gbps = can_access ? gbps : -1;
  m.staged_gbps = 11;
  return m;
}

TEST(PairVerdict, ALinkThatGivesWhatItsClassShouldPasses) {
  PairPrediction nv = Predicted(P2PTRACE_TRANSPORT_NVLINK, "NV12");
  PairVerdict v = JudgePair(Measured(231), &nv, 4);
  EXPECT_EQ(v.verdict, "pass") << v.reason;
  EXPECT_EQ(v.transport, P2PTRACE_TRANSPORT_NVLINK);
  EXPECT_EQ(v.expected.low, 240);  // 12 links at ~20 GB/s
  EXPECT_EQ(v.reason, "231 GB/s, as 240-240 GB/s (NV12 at ~20 GB/s per link) should give");
  // 80% of the figure is the line: 192 passes, 191 fails.
  EXPECT_EQ(JudgePair(Measured(192), &nv, 4).verdict, "pass");
  EXPECT_EQ(JudgePair(Measured(191), &nv, 4).verdict, "fail");
}

TEST(PairVerdict, ASlowLinkFailsWithTheProbesCausesOrAsDegraded) {
  PairPrediction pcie = Predicted(P2PTRACE_TRANSPORT_PCIE_P2P, "PIX");
  PairVerdict v = JudgePair(Measured(12.3), &pcie, 4);
  EXPECT_EQ(v.verdict, "fail");
  EXPECT_EQ(v.reason, "12 GB/s, below 80% of 25-25 GB/s (PCIe Gen4 x16)");
  ASSERT_EQ(v.causes.size(), 1u);
  EXPECT_EQ(v.causes[0].id, "p2p-degraded");  // nothing in the probes: the measurement is the cause
  PairPrediction trained = Predicted(P2PTRACE_TRANSPORT_PCIE_P2P, "PIX", {{"pcie-downtrained", "risk", {"x8 of x16"}}});
  v = JudgePair(Measured(12.3), &trained, 4);
  ASSERT_EQ(v.causes.size(), 1u);
  EXPECT_EQ(v.causes[0].id, "pcie-downtrained");
}

TEST(PairVerdict, NoPeerAccessIsExpectedOnlyWhereTheNodeRulesItOut) {
  PairPrediction consumer = Predicted(P2PTRACE_TRANSPORT_PCIE_P2P, "PHB", {{"consumer-gpu", "decided", {"GeForce"}}});
  PairVerdict v = JudgePair(Measured(0, false), &consumer, 4);
  EXPECT_EQ(v.verdict, "expected") << v.reason;
  EXPECT_EQ(v.transport, P2PTRACE_TRANSPORT_HOST_STAGED);
  EXPECT_EQ(v.reason, "no peer access, as this node allows none for the pair");
  // Two sockets: the topology's best for the pair is host memory, so no peer access is its design.
  PairPrediction sockets = Predicted(P2PTRACE_TRANSPORT_SHM, "SYS");
  EXPECT_EQ(JudgePair(Measured(0, false), &sockets, 4).verdict, "expected");
  PairPrediction sys = Predicted(P2PTRACE_TRANSPORT_PCIE_P2P, "SYS");  // NCCL could, CUDA will not: as designed
  EXPECT_EQ(JudgePair(Measured(0, false), &sys, 4).verdict, "expected");
  PairPrediction plain = Predicted(P2PTRACE_TRANSPORT_PCIE_P2P, "PIX");
  v = JudgePair(Measured(0, false), &plain, 4);
  EXPECT_EQ(v.verdict, "fail");
  ASSERT_EQ(v.causes.size(), 1u);
  EXPECT_EQ(v.causes[0].id, "cuda-no-peer-access");
  // A consumer GPU named only as context decides nothing: a refusal there is a failure.
  PairPrediction context = Predicted(P2PTRACE_TRANSPORT_PCIE_P2P, "PIX", {{"consumer-gpu", "context", {}}});
  EXPECT_EQ(JudgePair(Measured(0, false), &context, 4).verdict, "fail");
}

TEST(PairVerdict, CorruptionHangsAndErrorsFailWhateverTheSpeed) {
  PairPrediction acs = Predicted(P2PTRACE_TRANSPORT_PCIE_P2P, "PIX", {{"acs-suspected", "risk", {"IOMMU groups"}}});
  PairMeasurement m = Measured(24);
  m.data_ok = false;
  PairVerdict v = JudgePair(m, &acs, 4);
  EXPECT_EQ(v.verdict, "fail");
  EXPECT_EQ(v.reason, "GPU1 did not receive what GPU0 sent (data differs)");
  ASSERT_EQ(v.causes.size(), 1u);
  EXPECT_EQ(v.causes[0].id, "acs-suspected");
  m = Measured(-1);
  m.timed_out = true;
  m.stalled_copy = "the copies both ways (GPU0 <-> GPU1)";
  EXPECT_EQ(JudgePair(m, &acs, 4).reason, "the copies both ways (GPU0 <-> GPU1) did not finish within the time limit");
  m = Measured(24);
  m.error = "cudaMemcpyPeerAsync: 700 (an illegal memory access was encountered)";
  EXPECT_EQ(JudgePair(m, &acs, 4).reason, m.error);
  m = Measured(24);
  m.enable_result = 704;  // already enabled: as good as enabled
  EXPECT_EQ(JudgePair(m, &acs, 4).verdict, "pass");
  EXPECT_EQ(JudgePair(m, &acs, 4).causes.size(), 1u);  // a pass still carries its risk
  m.enable_result = 217;  // cudaErrorPeerAccessUnsupported
  EXPECT_EQ(JudgePair(m, &acs, 4).reason, "cudaDeviceEnablePeerAccess returned 217");
}

TEST(PairVerdict, WithoutAFigurePeerAccessMustAtLeastBeatTheHost) {
  // The probes could not place the pair: P2P of unknown link, 25-370 GB/s; below that but above
  // the host, the figure still decides.
  PairVerdict v = JudgePair(Measured(9), nullptr, 0);
  EXPECT_EQ(v.verdict, "fail");
  EXPECT_EQ(v.transport, P2PTRACE_TRANSPORT_P2P);
  EXPECT_EQ(JudgePair(Measured(30), nullptr, 0).verdict, "pass");
}

TEST(PairVerdict, OnlyCausesOfACudaCopyAreNamedAndUntestedIsNoFailure) {
  // NCCL's level and settings do not bear on cudaMemcpyPeer: a slow pair names the link's cause only.
  PairPrediction p = Predicted(P2PTRACE_TRANSPORT_PCIE_P2P, "PHB",
                               {{"topology-beyond-p2p-level", "decided", {"PHB beyond PXB"}},
                                {"env-p2p-disabled", "decided", {"NCCL_P2P_DISABLE=1"}},
                                {"pcie-downtrained", "risk", {"GPU1 runs Gen3"}}});
  PairVerdict v = JudgePair(Measured(12), &p, 4);
  EXPECT_EQ(v.verdict, "fail");
  ASSERT_EQ(v.causes.size(), 1u);
  EXPECT_EQ(v.causes[0].id, "pcie-downtrained");
  // A pair skipped because one of its GPUs hung on an earlier copy: untested, said so, no cause.
  PairMeasurement m;
  m.src = 0, m.dst = 1;
  m.tested = false;
  m.error = "a copy with GPU1 never finished earlier, so the GPU is left alone";
  v = JudgePair(m, &p, 4);
  EXPECT_EQ(v.verdict, "untested");
  EXPECT_EQ(v.reason, "a copy with GPU1 never finished earlier, so the GPU is left alone");
  EXPECT_TRUE(v.causes.empty());
}

}  // namespace
}  // namespace p2ptrace
