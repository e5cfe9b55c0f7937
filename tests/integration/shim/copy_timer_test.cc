// The shim's copy timer (shim/record/copy_timer.h) seen from outside, on the simulated node: with
// every pair copy sampled (P2PTRACE_SAMPLE=all), a tight loop of copies from several threads makes
// at most CopyTimer::kPairsPerDevice (64) timing event pairs per device; every copy is either timed
// (flagged, with its TIMING record) or counted in the header's timings_skipped; streams created
// and destroyed by the thousand are still found on their device (the lock-free stream table).
// No assertion depends on how fast anything runs: how many copies are skipped varies.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/trace_reader.h"
#include "tests/support/subprocess.h"

namespace {

using p2ptrace::Trace;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using Env = std::map<std::string, std::optional<std::string>>;

constexpr uint64_t kPairsPerDevice = 64;

Env Traced(const std::string& dir) {
  Env env;
  for (const char* name : {"P2PTRACE_DISABLE", "P2PTRACE_SYSROOT", "P2PTRACE_WARN", "CUDA_VISIBLE_DEVICES",
                           "P2PSIM_HOST", "RANK", "LOCAL_RANK", "WORLD_SIZE"})
    env[name] = std::nullopt;
  env["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  env["P2PSIM_TOPOLOGY"] = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";
  env["LD_PRELOAD"] = SHIM_LIB;
  env["P2PTRACE_DIR"] = dir;
  env["P2PTRACE_SAMPLE"] = "all";
  env["P2PTRACE_MAX_MB"] = "64";
  return env;
}

Trace RunAndRead(const std::vector<std::string>& argv, const std::string& name, const std::string& expect_out,
                 const std::string& sample = "all") {
  std::string dir = TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  Env env = Traced(dir);
  env["P2PTRACE_SAMPLE"] = sample;
  RunResult r = RunProgram(argv, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expect_out);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".p2ptrace") files.push_back(e.path().string());
  if (files.size() != 1) {
    ADD_FAILURE() << files.size() << " traces in " << dir;
    return Trace{};
  }
  auto t = p2ptrace::ReadTrace(files[0]);
  if (!t) {
    ADD_FAILURE() << t.error().message;
    return Trace{};
  }
  return std::move(*t);
}

struct Timings {
  std::map<std::pair<int, int>, uint64_t> copies, timed;  // per (src, dst)
  std::set<uint32_t> timed_seqs, timing_seqs;
  uint64_t total = 0, total_timed = 0;
};

Timings Collect(const Trace& t) {
  Timings s;
  for (const auto& rec : t.records) {
    if (const auto* c = std::get_if<p2ptrace_copy_record>(&rec.body)) {
      ++s.total;
      ++s.copies[{c->src_device, c->dst_device}];
      if (c->flags & P2PTRACE_COPY_TIMED) {
        ++s.total_timed;
        ++s.timed[{c->src_device, c->dst_device}];
        s.timed_seqs.insert(c->h.seq);
      }
    } else if (const auto* tr = std::get_if<p2ptrace_timing_record>(&rec.body)) {
      s.timing_seqs.insert(tr->h.seq);
    }
  }
  return s;
}

// Every copy sampled: each one timed or counted as skipped; each timed one resolved at exit.
void ExpectEveryCopyTimedOrSkipped(const Trace& t, const Timings& s, uint64_t copies) {
  EXPECT_EQ(t.header.dropped_records, 0u);
  EXPECT_EQ(s.total, copies);
  EXPECT_EQ(s.total_timed + t.header.timings_skipped, copies)
      << s.total_timed << " timed, " << t.header.timings_skipped << " skipped";
  EXPECT_GE(s.total_timed, 1u);
  EXPECT_EQ(s.timing_seqs, s.timed_seqs) << "a TIMING record for each copy flagged timed, and no other";
}

TEST(CopyTimer, TightLoopOfTimedCopiesMakesAtMost64EventPairsPerDevice) {
  constexpr int kThreads = 4, kCopies = 20000;  // on streams of device 0, copying 0 -> 1
  Trace t = RunAndRead({SHIM_WORKLOAD, "threads", std::to_string(kThreads), std::to_string(kCopies)}, "tight",
                       "threads 4 x 20000 done\n");
  Timings s = Collect(t);
  ExpectEveryCopyTimedOrSkipped(t, s, uint64_t{kThreads} * kCopies);
  EXPECT_GE(t.header.timing_event_pairs, 1u);
  EXPECT_LE(t.header.timing_event_pairs, kPairsPerDevice);
  const p2ptrace_pair_counters& c = t.Counter(0, 1, 0);
  EXPECT_EQ(c.calls, uint64_t{kThreads} * kCopies);
  EXPECT_EQ(c.timed_calls, s.timing_seqs.size());
}

TEST(CopyTimer, ChurnedStreamsAreTimedOnTheirOwnDevice) {
  // 6000 streams created and destroyed (more than the stream table's 4096 slots), half on device
  // 0 and half on device 2: a copy is timed only when its stream's device is known (events are
  // recorded on the stream's device), so timed copies on both pairs show that the table found it.
  constexpr int kRounds = 6000;
  Trace t = RunAndRead({TIMER_WORKLOAD, "churn", std::to_string(kRounds)}, "churn", "churn 6000 done\n");
  Timings s = Collect(t);
  ExpectEveryCopyTimedOrSkipped(t, s, kRounds);
  EXPECT_EQ((s.copies[{0, 1}]), uint64_t{kRounds / 2});
  EXPECT_EQ((s.copies[{2, 3}]), uint64_t{kRounds / 2});
  EXPECT_GE((s.timed[{0, 1}]), 1u);
  EXPECT_GE((s.timed[{2, 3}]), 1u);
  EXPECT_GE(t.header.timing_event_pairs, 2u);
  EXPECT_LE(t.header.timing_event_pairs, 2 * kPairsPerDevice);
}

// P2PTRACE_SAMPLE=K:N:SIZE (DESIGN §8): each pair's first K copies, every copy of SIZE or more,
// and one in N of the rest on average, by a countdown restarted at random in [N/2, 3N/2) so that
// copies alternating between two pairs (what an exact 1-in-N counter with N even would always
// catch on the same pair) are sampled on both. A sampled copy is timed, or skipped when no event
// pair is free (counted in the header): the sampler's count is both together. The copies are
// synchronous and 50 us apart, so that skips stay few and the timed ones show the pairs' shares.
TEST(CopyTimer, SamplingTimesTheFirstKOneInNOnAverageAndEveryLargeCopy) {
  constexpr int kCopies = 4000, kFirst = 4, kEvery = 16;
  Trace t = RunAndRead({TIMER_WORKLOAD, "alternate", std::to_string(kCopies), "4096", "0", "0"}, "sample",
                       "alternate 4000 done\n", "4:16:1M");
  Timings s = Collect(t);
  EXPECT_EQ(s.total, uint64_t{kCopies});
  EXPECT_EQ(s.timing_seqs, s.timed_seqs);
  // The renewal count of intervals uniform on [8, 24) over 3992 copies: mean 249.5, sd about 3.2;
  // +-20% is more than 10 sd, and a sampler that never (8) or always (4000) fired is far outside.
  uint64_t sampled = s.total_timed + t.header.timings_skipped;
  double rest = kCopies - 2 * kFirst, want = 2 * kFirst + rest / kEvery;
  EXPECT_GE(sampled, 0.8 * want) << s.total_timed << " timed, " << t.header.timings_skipped << " skipped";
  EXPECT_LE(sampled, 1.2 * want) << s.total_timed << " timed, " << t.header.timings_skipped << " skipped";
#ifdef P2PTRACE_SANITIZED
  constexpr uint64_t kMostSkipped = 2;  // a sanitized resolver is slower to free its event pairs
#else
  constexpr uint64_t kMostSkipped = 4;
#endif
  EXPECT_LE(t.header.timings_skipped, sampled / kMostSkipped) << "too few timed to see the pairs' shares";
  for (auto pair : {std::pair{0, 1}, std::pair{2, 3}}) {
    // At least the first K of each, and each pair about half of the rest: no period locked onto.
    uint64_t timed = s.timed[pair];
    EXPECT_GE(timed, uint64_t{kFirst});
    double share = (timed - kFirst) / (s.total_timed - 2.0 * kFirst);
    EXPECT_GT(share, 0.25) << pair.first << "->" << pair.second << ": " << timed << " of " << s.total_timed;
    EXPECT_LT(share, 0.75) << pair.first << "->" << pair.second << ": " << timed << " of " << s.total_timed;
  }
  // Every tenth copy 2 MiB, over a 1 MiB SIZE, with 1 in 1000 otherwise: each large copy sampled.
  Trace big = RunAndRead({TIMER_WORKLOAD, "alternate", "1000", "4096", "10", std::to_string(2 << 20)}, "sample-big",
                         "alternate 1000 done\n", "2:1000:1M");
  uint64_t large = 0, large_timed = 0, small_timed = 0;
  for (const auto& rec : big.records)
    if (const auto* c = std::get_if<p2ptrace_copy_record>(&rec.body)) {
      bool timed = c->flags & P2PTRACE_COPY_TIMED;
      if (c->bytes >= (1u << 20)) large += 1, large_timed += timed;
      else small_timed += timed;
    }
  EXPECT_EQ(large, 100u);
  EXPECT_GE(large_timed + big.header.timings_skipped, 100u);
  EXPECT_GE(large_timed, 100u - 100u / kMostSkipped);
  EXPECT_LE(small_timed, 12u);  // each pair's first 2, and about one in 1000 of 900: a few at most
}

}  // namespace
