// The slow-rank finding's rules (tools/report/arrival.h) on communicators built by hand: chance is no
// late rank, a margin under the clocks' trust is not claimed, nor one smaller than the others' own
// jitter, collectives are compared only where every rank has them and agrees on them, a step is the
// sequence that repeats; a ring bounded by a pair names it, host-staged where the node allows P2P
// told apart from a slow link.
#include "tools/report/arrival.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"
#include "tools/report/report.h"

namespace p2ptrace::cli {
namespace {

constexpr uint64_t kMs = 1000000ull;

// A communicator of `nranks` ranks, one process each, that called `n` collectives 100 ms apart;
// `late(seq, rank)` is how many ms after the beat that rank called collective seq; `bytes(seq)` its size.
struct Job {
  std::vector<StoppedComm> comms;
  std::vector<StoppedProcess> procs;
};
Job Make(int nranks, uint64_t n, const std::function<double(uint64_t, int)>& late,
         const std::function<uint64_t(uint64_t)>& bytes = [](uint64_t) { return 4096; },
         const std::vector<std::string>& boots = {}) {
  Job j;
  StoppedComm& c = j.comms.emplace_back();
  c.id = "12345678";
  c.nranks = nranks;
  for (int r = 0; r < nranks; ++r) {
    StoppedProcess p;
    p.host = boots.empty() ? "h0" : "h" + boots[static_cast<size_t>(r)];
    p.pid = 100 + r;
    p.boot_id = boots.empty() ? "boot" : boots[static_cast<size_t>(r)];
    p.realtime_minus_monotonic_ns = 1000000 * kMs;
    j.procs.push_back(p);
    StoppedMember m;
    m.process = static_cast<size_t>(r);
    m.rank = r;
    m.collectives = n;
    m.first_called = 1;
    for (uint64_t s = 1; s <= n; ++s)
      m.called.push_back({static_cast<uint64_t>((static_cast<double>(s) * 100 + late(s, r)) * kMs), bytes(s),
                          P2PTRACE_NCCL_AllReduce, 8});
    c.members.push_back(m);
  }
  return j;
}

TEST(SlowRank, ChanceIsNoLateRank) {
  // Each rank last in turn, by 5 ms: a quarter each.
  Job j = Make(4, 200, [](uint64_t s, int r) { return static_cast<int>(s % 4) == r ? 5.0 : 0.0; });
  SlowRankFinding f = FindSlowRank(j.comms, j.procs, Report{});
  EXPECT_FALSE(f.present) << f.verdict;
  ASSERT_EQ(f.comms.size(), 1u);
  EXPECT_EQ(f.comms[0].compared, 200u);
  EXPECT_EQ(f.comms[0].last_by_rank, (std::vector<uint64_t>{50, 50, 50, 50}));
  EXPECT_NEAR(f.comms[0].skew_median_ms, 5.0, 0.01);
  ASSERT_FALSE(f.notes.empty());
  EXPECT_NE(f.notes[0].find("not clearly more than chance"), std::string::npos) << f.notes[0];
}

TEST(SlowRank, ARankLastMostOftenByAMarginIsLate) {
  // Rank 3 is 8 ms late in 4 of every 5 collectives; otherwise rank 0 by 1 ms.
  Job j = Make(4, 100, [](uint64_t s, int r) { return s % 5 ? (r == 3 ? 8.0 : 0.0) : (r == 0 ? 1.0 : 0.0); });
  SlowRankFinding f = FindSlowRank(j.comms, j.procs, Report{});
  ASSERT_TRUE(f.present);
  EXPECT_EQ(f.kind, "late-rank");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.pid, 103);
  EXPECT_EQ(f.compared, 100u);
  EXPECT_EQ(f.last, 80u);
  EXPECT_NEAR(f.late_median_ms, 8.0, 0.01);
  EXPECT_NEAR(f.late_p90_ms, 8.0, 0.01);
  // One collective a step (every size alike); the three others wait 8 ms each when it is last.
  EXPECT_EQ(f.step_collectives, 1);
  EXPECT_EQ(f.steps, 100u);
  EXPECT_NEAR(f.wait_seconds, 80 * 3 * 8e-3, 1e-6);
  EXPECT_NEAR(f.wait_per_step_ms, 80 * 3 * 8.0 / 100, 1e-6);
  ASSERT_EQ(f.comms.size(), 1u);
  EXPECT_EQ(f.comms[0].clock, "CLOCK_MONOTONIC of one boot");
  ASSERT_EQ(f.comms[0].series.size(), 100u);
  EXPECT_EQ(f.comms[0].series_ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FLOAT_EQ(f.comms[0].series[0].lag_ms[3], 8.0f);
  Finding as = SlowRankAsFinding(f);
  EXPECT_EQ(as.id, "slow-rank");
  EXPECT_EQ(as.cause, "late-rank");
  EXPECT_EQ(as.ranks, std::vector<int>{3});
  EXPECT_TRUE(as.pairs.empty());
}

TEST(SlowRank, ASubMillisecondMarginIsJitterNotLateness) {
  Job j = Make(4, 100, [](uint64_t, int r) { return r == 1 ? 0.3 : 0.0; });
  SlowRankFinding f = FindSlowRank(j.comms, j.procs, Report{});
  EXPECT_FALSE(f.present);
  ASSERT_FALSE(f.notes.empty());
  EXPECT_NE(f.notes[0].find("by a median 0.3 ms only"), std::string::npos) << f.notes[0];
}

TEST(SlowRank, OnABusyHostARankLastByLessThanTheOthersDifferIsNotTheLateOne) {
  // Every rank jitters by 0-6 ms; in 3 of every 5 collectives rank 0 comes 1.5 ms after the slowest
  // of the others. It is last far more often than chance, by more than a millisecond, yet had it been
  // on time the others would still wait for one another: most of the waiting is theirs.
  auto jitter = [](uint64_t s, int r) {
    return static_cast<double>((s * 7919 + static_cast<uint64_t>(r) * 104729) % 600) / 100;
  };
  auto slowest_other = [&](uint64_t s) { return std::max({jitter(s, 1), jitter(s, 2), jitter(s, 3)}); };
  Job busy = Make(4, 100, [&](uint64_t s, int r) { return r == 0 && s % 5 < 3 ? slowest_other(s) + 1.5 : jitter(s, r); });
  SlowRankFinding f = FindSlowRank(busy.comms, busy.procs, Report{});
  EXPECT_FALSE(f.present) << f.verdict;
  ASSERT_EQ(f.comms.size(), 1u);
  EXPECT_GE(f.comms[0].last_by_rank[0], 60u);
  ASSERT_FALSE(f.notes.empty());
  EXPECT_NE(f.notes[0].find("by a median 1.5 ms, but that makes 43% of the ranks' waiting only in the median "
                            "collective"),
            std::string::npos)
      << f.notes[0];
  // The same rank 8 ms after the others' slowest is the late one: its lateness is most of the waiting.
  Job late = Make(4, 100, [&](uint64_t s, int r) { return r == 0 ? slowest_other(s) + 8 : jitter(s, r); });
  f = FindSlowRank(late.comms, late.procs, Report{});
  ASSERT_TRUE(f.present) << (f.notes.empty() ? "" : f.notes[0]);
  EXPECT_EQ(f.rank, 0);
  EXPECT_NEAR(f.wait_share, 0.8, 0.01);
  EXPECT_NE(f.evidence[0].find("which makes 80% of the ranks' waiting in the median collective"), std::string::npos)
      << f.evidence[0];
}

TEST(SlowRank, AcrossHostsOnlyWhatTheWallClocksCanTell) {
  std::vector<std::string> boots = {"a", "a", "b", "b"};
  Job small = Make(4, 100, [](uint64_t, int r) { return r == 2 ? 5.0 : 0.0; }, [](uint64_t) { return 4096; }, boots);
  SlowRankFinding f = FindSlowRank(small.comms, small.procs, Report{});
  EXPECT_FALSE(f.present) << f.verdict;
  ASSERT_EQ(f.comms.size(), 1u);
  EXPECT_TRUE(f.comms[0].across_hosts);
  EXPECT_EQ(f.comms[0].clock, "the wall clocks of 2 hosts");
  Job big = Make(4, 100, [](uint64_t, int r) { return r == 2 ? 30.0 : 0.0; }, [](uint64_t) { return 4096; }, boots);
  f = FindSlowRank(big.comms, big.procs, Report{});
  ASSERT_TRUE(f.present);
  EXPECT_EQ(f.rank, 2);
  EXPECT_NE(f.evidence[2].find("the wall clocks of 2 hosts"), std::string::npos) << f.evidence[2];
}

TEST(SlowRank, AHostClockSecondsOffIsCorrectedAsTheStoppedFindingCorrectsIt) {
  // Rank 3's host reads 5 s ahead: by the raw clocks it would be 5 s late to every collective.
  Job j = Make(4, 50, [](uint64_t s, int r) { return static_cast<int>(s % 4) == r ? 0.2 : 0.0; },
               [](uint64_t) { return 4096; }, {"a", "a", "b", "c"});
  j.procs[3].realtime_minus_monotonic_ns += 5000 * static_cast<int64_t>(kMs);
  for (StoppedMember& m : j.comms[0].members)
    m.first_called_realtime_ns = static_cast<uint64_t>(static_cast<int64_t>(m.called[0].called_ns) +
                                                       j.procs[m.process].realtime_minus_monotonic_ns);
  SlowRankFinding raw = FindSlowRank(j.comms, j.procs, Report{});
  ASSERT_TRUE(raw.present);
  EXPECT_EQ(raw.rank, 3);
  StoppedFinding st;
  st.processes = j.procs;
  std::map<std::string, StoppedComm> by_key{{"job/12345678", j.comms[0]}};
  FinishStopped(&st, by_key, {}, 60);
  ASSERT_FALSE(st.notes.empty());
  EXPECT_NE(st.notes[0].find("hc's clock reads 5.0 s ahead"), std::string::npos) << st.notes[0];
  SlowRankFinding f = FindSlowRank(st.comms, st.processes, Report{});
  EXPECT_FALSE(f.present) << f.verdict;
}

TEST(SlowRank, AStepIsTheSequenceThatRepeats) {
  // Three buckets a step (1, 2, 3 MiB); rank 1 is 12 ms late to the first of each step, 2 ms to the others.
  Job j = Make(4, 90, [](uint64_t s, int r) { return r == 1 ? (s % 3 == 1 ? 12.0 : 2.0) : r == 0 ? 0.5 : 0.0; },
               [](uint64_t s) { return ((s - 1) % 3 + 1) << 20; });
  SlowRankFinding f = FindSlowRank(j.comms, j.procs, Report{});
  ASSERT_TRUE(f.present);
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.step_collectives, 3);
  EXPECT_EQ(f.steps, 30u);
  // Each step the others wait 11.5 + 12 + 12 ms at the first bucket, 1.5 + 2 + 2 ms at each other.
  EXPECT_NEAR(f.wait_per_step_ms, 35.5 + 2 * 5.5, 1e-6);
  EXPECT_NEAR(f.late_median_ms, 2.0, 1e-6);
  EXPECT_NE(f.evidence[1].find("a step is 3 collectives (ncclAllReduce 1.0 MiB float32, ncclAllReduce 2.0 MiB"),
            std::string::npos)
      << f.evidence[1];
}

TEST(SlowRank, OnlyCollectivesEveryRankHasAndAgreesOn) {
  Job j = Make(4, 100, [](uint64_t, int r) { return r == 3 ? 5.0 : 0.0; });
  // Rank 0 kept only its newest 60 (a window), rank 2 called #50 with another size.
  auto& m = j.comms[0].members;
  m[0].called.erase(m[0].called.begin(), m[0].called.begin() + 40);
  m[0].first_called = 41;
  m[2].called[49].bytes = 1;
  SlowRankFinding f = FindSlowRank(j.comms, j.procs, Report{});
  ASSERT_TRUE(f.present);
  EXPECT_EQ(f.compared, 59u);
  ASSERT_EQ(f.comms.size(), 1u);
  EXPECT_EQ(f.comms[0].mismatched, 1u);
}

TEST(SlowRank, ACommunicatorWithARankTwiceMissingOrInOneProcessIsNotCompared) {
  Job j = Make(4, 100, [](uint64_t, int r) { return r == 3 ? 5.0 : 0.0; });
  j.comms[0].members[1].rank = 0;
  EXPECT_TRUE(FindSlowRank(j.comms, j.procs, Report{}).comms.empty());
  j = Make(4, 100, [](uint64_t, int r) { return r == 3 ? 5.0 : 0.0; });
  j.comms[0].members.pop_back();
  EXPECT_TRUE(FindSlowRank(j.comms, j.procs, Report{}).comms.empty());
  // One process driving every rank (ncclCommInitAll) calls them in its program's order.
  j = Make(4, 100, [](uint64_t, int r) { return r == 3 ? 5.0 : 0.0; });
  for (StoppedMember& m : j.comms[0].members) m.process = 0;
  EXPECT_TRUE(FindSlowRank(j.comms, j.procs, Report{}).comms.empty());
}

// Rings over four GPUs of one host; hop 1 -> 2 of the given transport, the others NVLink.
Report Ring(int transport, bool fallback, int expected, std::vector<Cause> causes) {
  Report rep;
  for (int g = 0; g < 4; ++g) {
    PairEntry e;
    e.source = "nccl";
    e.src = {"node0", "b" + std::to_string(g), g};
    e.dst = {"node0", "b" + std::to_string((g + 1) % 4), (g + 1) % 4};
    e.transport = g == 1 ? transport : P2PTRACE_TRANSPORT_NVLINK;
    e.ranks = {g};
    if (g == 1) e.fallback = fallback, e.expected = expected, e.causes = causes;
    rep.pairs.push_back(e);
  }
  for (int channel = 0; channel < 2; ++channel) {
    RingSummary r;
    r.comm = "12345678abcdef00";
    r.channel = channel;
    r.hop_pairs = {0, 1, 2, 3};
    r.slowest_gbps = 11.5;
    if (transport != P2PTRACE_TRANSPORT_NVLINK) r.bound_pair = 1, r.bound_expected_low = 6, r.bound_expected_high = 40;
    rep.rings.push_back(r);
  }
  return rep;
}

TEST(SlowRank, ARingBoundedByAHostStagedPairWhereP2pIsAllowed) {
  Job j = Make(4, 100, [](uint64_t s, int r) { return static_cast<int>(s % 4) == r ? 0.1 : 0.0; });
  Cause env{"env-p2p-disabled", {"NCCL_P2P_DISABLE=1"}, "unset NCCL_P2P_DISABLE", "", "trace"};
  SlowRankFinding f = FindSlowRank(j.comms, j.procs, Ring(P2PTRACE_TRANSPORT_SHM, true, P2PTRACE_TRANSPORT_P2P, {env}));
  ASSERT_TRUE(f.present);
  EXPECT_EQ(f.kind, "host-staged-hop");
  EXPECT_EQ(f.pair, "node0 GPU1 -> GPU2");
  EXPECT_EQ(f.transport, "shm");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.rings, 2);
  EXPECT_EQ(f.comm, "12345678");
  EXPECT_EQ(f.causes, std::vector<std::string>{"env-p2p-disabled"});
  EXPECT_EQ(f.fix, "unset NCCL_P2P_DISABLE");
  EXPECT_EQ(f.verdict.rfind("every rank arrives on time, but 2 rings", 0), 0u) << f.verdict;
  // Too few collectives compared to say the ranks were on time: the hop alone.
  Job few = Make(4, 5, [](uint64_t, int) { return 0.0; });
  f = FindSlowRank(few.comms, few.procs, Ring(P2PTRACE_TRANSPORT_SHM, true, P2PTRACE_TRANSPORT_P2P, {env}));
  EXPECT_EQ(f.verdict.rfind("2 rings of communicator 12345678 run at the pace of node0 GPU1 -> GPU2", 0), 0u) << f.verdict;
  // The node forbids P2P there: a slow hop, not a fallback the user can undo.
  f = FindSlowRank(j.comms, j.procs, Ring(P2PTRACE_TRANSPORT_SHM, false, P2PTRACE_TRANSPORT_SHM, {}));
  EXPECT_EQ(f.kind, "slow-hop");
}

TEST(SlowRank, ARingOfOneClassIsBoundedOnlyByAPairWhoseLinkDegraded) {
  Job j = Make(4, 100, [](uint64_t, int) { return 0.0; });
  EXPECT_FALSE(FindSlowRank(j.comms, j.procs, Ring(P2PTRACE_TRANSPORT_NVLINK, false, 0, {})).present);
  Cause errors{"link-errors", {"measured 51.4 GB/s, below the 120 GB/s its nvlink class gives"}, "drain the node", "", "trace"};
  SlowRankFinding f = FindSlowRank(j.comms, j.procs, Ring(P2PTRACE_TRANSPORT_NVLINK, false, 0, {errors}));
  ASSERT_TRUE(f.present);
  EXPECT_EQ(f.kind, "slow-hop");
  EXPECT_EQ(f.pair, "node0 GPU1 -> GPU2");
  EXPECT_EQ(f.transport, "nvlink");
}

TEST(SlowRank, ALateRankComesFirstAndTheSlowHopIsNoted) {
  Job j = Make(4, 100, [](uint64_t, int r) { return r == 2 ? 20.0 : 0.0; });
  Cause env{"env-p2p-disabled", {"NCCL_P2P_DISABLE=1"}, "unset NCCL_P2P_DISABLE", "", "trace"};
  SlowRankFinding f = FindSlowRank(j.comms, j.procs, Ring(P2PTRACE_TRANSPORT_SHM, true, P2PTRACE_TRANSPORT_P2P, {env}));
  ASSERT_TRUE(f.present);
  EXPECT_EQ(f.kind, "late-rank");
  EXPECT_EQ(f.rank, 2);
  ASSERT_FALSE(f.notes.empty());
  EXPECT_EQ(f.notes[0].rfind("also: 2 rings of communicator 12345678 run at the pace of node0 GPU1 -> GPU2", 0), 0u)
      << f.notes[0];
}

}  // namespace
}  // namespace p2ptrace::cli
