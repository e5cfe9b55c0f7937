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

Trace RunAndRead(const std::vector<std::string>& argv, const std::string& name, const std::string& expect_out) {
  std::string dir = TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  RunResult r = RunProgram(argv, Traced(dir));
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

}  // namespace
