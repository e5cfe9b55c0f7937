// The stopped finding's rules (tools/report/stopped.h) on traces built record by record: hosts whose clocks
// disagree, two jobs in one directory, a trace cut short, ties. Never a wrong "first" rank.
#include "tools/report/stopped.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace::cli {
namespace {

constexpr uint64_t kS = 1000000000ull;

// One process of a job: rank `rank` of one world communicator of `nranks`, started at wall-clock
// 1000 s by its host's clock + `skew_s`, monotonic 0 at start; it calls one allreduce a second from
// 10 s (the first at 10 s wall clock by its own clock), `ops` of them, the last pending when `in_call`;
// its heartbeat stops at `beat_s` (monotonic); `state` as the header says.
struct Proc {
  std::string host = "h0", job = "job";
  int pid = 100, rank = 0, nranks = 4;
  double skew_s = 0;
  int ops = 5;
  bool in_call = true;
  double beat_s = 20;
  uint32_t state = P2PTRACE_STATE_RUNNING;
  uint64_t dropped = 0;
};

Trace Make(const Proc& p) {
  Trace t;
  t.path = p.host + "." + std::to_string(p.pid) + ".p2ptrace";
  p2ptrace_file_header& h = t.header;
  std::strncpy(h.host, p.host.c_str(), sizeof h.host - 1);
  std::strncpy(h.job_id, p.job.c_str(), sizeof h.job_id - 1);
  h.pid = p.pid;
  h.rank = p.rank;
  h.state = p.state;
  h.start_monotonic_ns = 1;  // (0 reads as "no time")
  h.start_realtime_ns = static_cast<uint64_t>((1000 + p.skew_s) * kS);
  h.heartbeat_ns = static_cast<uint64_t>(p.beat_s * kS);
  h.dropped_records = p.dropped;
  h.file_size = t.file_bytes = 1 << 20;
  p2ptrace_nccl_comm_record c{};
  c.h.time_ns = 5 * kS;
  c.comm = 0xc0;
  c.id_hash = 0x1234567800000000ull;
  c.rank = p.rank;
  c.nranks = p.nranks;
  c.api = P2PTRACE_NCCL_CommInitRank;
  t.records.push_back({1, c});
  for (int i = 0; i < p.ops; ++i) {
    p2ptrace_nccl_op_record o{};
    o.h.time_ns = static_cast<uint64_t>(10 + i) * kS;
    o.comm = 0xc0;
    o.stream = 0x5;
    o.bytes = 1 << 20;
    o.peer = -1;
    o.api = P2PTRACE_NCCL_AllReduce;
    o.datatype = 7 + 1;  // float32
    o.result = i + 1 == p.ops && p.in_call ? P2PTRACE_RESULT_PENDING : 0;
    t.records.push_back({1, o});
  }
  return t;
}

StoppedFinding Judge(const std::vector<Proc>& procs) {
  StoppedFinding f;
  std::map<std::string, StoppedComm> comms;
  for (const Proc& p : procs) {
    Trace t = Make(p);
    StoppedFold fold;
    for (const TraceRecord& r : t.records) fold.Add(r);
    f.processes.push_back(fold.Finish(t, &comms, f.processes.size()));
  }
  FinishStopped(&f, std::move(comms), {}, 5);
  return f;
}

int FirstRank(const StoppedFinding& f) { return f.first_process < 0 ? -1 : f.processes[f.first_process].rank; }

// Ranks 0, 1, 3 wait in #5 beating until 40 s; rank 2 stopped beating at 14 s inside #5.
std::vector<Proc> StoppedRankTwo() {
  std::vector<Proc> v;
  for (int r = 0; r < 4; ++r) {
    Proc p;
    p.rank = r;
    p.pid = 100 + r;
    p.beat_s = r == 2 ? 14 : 40;
    v.push_back(p);
  }
  return v;
}

TEST(StoppedFinding, AFinishedJobHasNone) {
  std::vector<Proc> v = StoppedRankTwo();
  for (Proc& p : v) p.state = P2PTRACE_STATE_EXITED, p.in_call = false, p.beat_s = 40;
  EXPECT_FALSE(Judge(v).present);
}

TEST(StoppedFinding, ALiveJobThatProgressesHasNone) {
  std::vector<Proc> v = StoppedRankTwo();
  for (Proc& p : v) p.beat_s = 14.5, p.in_call = false;  // all beating, the last op called 0.5 s ago
  EXPECT_FALSE(Judge(v).present);
}

TEST(StoppedFinding, TheRankThatStoppedBeatingIsFirst) {
  StoppedFinding f = Judge(StoppedRankTwo());
  ASSERT_TRUE(f.present);
  EXPECT_EQ(FirstRank(f), 2) << f.verdict;
  EXPECT_NE(f.first_doing.find("ncclAllReduce #5 (1.0 MiB float32), in the call"), std::string::npos) << f.first_doing;
  ASSERT_EQ(f.comms.size(), 1u);
  EXPECT_EQ(f.comms[0].waits, "ranks 0-1, 3 wait in ncclAllReduce #5; rank 2 stopped (no heartbeat) in it");
}

TEST(StoppedFinding, AHostWhoseClockIsBehindIsCorrectedBeforeAnyoneIsBlamed) {
  // Rank 2 (host a) stopped at 14 s; rank 3 (host b, whose clock is 30 s behind) was killed at 20 s.
  // Read raw, rank 3's last sign (990 s) comes before rank 2's (1014 s): the wrong first.
  std::vector<Proc> v = StoppedRankTwo();
  for (Proc& p : v) p.host = p.rank < 3 ? "a" : "b";
  v[3].skew_s = -30;
  v[3].beat_s = 20;
  v[0].beat_s = v[1].beat_s = 40;
  StoppedFinding f = Judge(v);
  EXPECT_EQ(FirstRank(f), 2) << f.verdict;
  bool said = false;
  for (const std::string& n : f.notes) said = said || n.find("b's clock reads 30.0 s behind") != std::string::npos;
  EXPECT_TRUE(said) << testing::PrintToString(f.notes);
  // Within the 2 s the ranks' first collective can tell, nothing is moved.
  v[3].skew_s = -1.5;
  f = Judge(v);
  for (const std::string& n : f.notes) EXPECT_EQ(n.find("clock reads"), std::string::npos) << n;
}

TEST(StoppedFinding, TwoJobsInOneDirectoryAreComparedApart) {
  std::vector<Proc> v = StoppedRankTwo();
  std::vector<Proc> done = StoppedRankTwo();  // another job that finished, same ranks, same comm hash
  for (Proc& p : done) p.job = "other", p.pid += 50, p.state = P2PTRACE_STATE_EXITED, p.in_call = false, p.ops = 9;
  v.insert(v.end(), done.begin(), done.end());
  StoppedFinding f = Judge(v);
  EXPECT_EQ(FirstRank(f), 2) << f.verdict;
  EXPECT_EQ(f.processes[f.first_process].job_id, "job");
  EXPECT_EQ(f.comms.size(), 2u);  // one per job: job's 5 operations are never compared with other's 9
  bool said = false;
  for (const std::string& n : f.notes) said = said || n.find("traces of 2 jobs") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(StoppedFinding, ACutShortTraceIsNeverFirstOnItsNumbersAlone) {
  // Every rank beats; rank 1's trace dropped records, so it shows 3 operations where the others wait
  // in #5: it looks behind, but its count cannot be trusted.
  std::vector<Proc> v = StoppedRankTwo();
  for (Proc& p : v) p.beat_s = 40;
  v[1].ops = 3;
  v[1].in_call = false;
  v[1].dropped = 12;
  StoppedFinding f = Judge(v);
  EXPECT_TRUE(f.present);
  EXPECT_NE(FirstRank(f), 1) << f.verdict;
  bool said = false;
  for (const std::string& n : f.notes) said = said || n.find("cut short or dropped records") != std::string::npos;
  EXPECT_TRUE(said);
  // The same count with a whole trace: rank 1 never called #4 and #5, and is named.
  v[1].dropped = 0;
  EXPECT_EQ(FirstRank(Judge(v)), 1);
}

TEST(StoppedFinding, TwoThatStoppedTogetherAreBothNamedNotGuessed) {
  std::vector<Proc> v = StoppedRankTwo();
  v[1].beat_s = 14.5;  // within two beats of rank 2, both inside #5
  StoppedFinding f = Judge(v);
  EXPECT_EQ(FirstRank(f), -1) << f.verdict;
  bool said = false;
  for (const std::string& n : f.notes) said = said || n.find("cannot be told from their clocks") != std::string::npos;
  EXPECT_TRUE(said) << testing::PrintToString(f.notes);
}

}  // namespace
}  // namespace p2ptrace::cli
