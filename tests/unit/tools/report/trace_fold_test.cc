// TraceFold's CUDA graph replays (trace format 1.5, includes 1.6): captured copies and NCCL operations count
// once per successful launch of their graph id, whatever order the records come in; a failed
// capture, a failed launch, a graph id 0 and records of no capture replay nothing.
#include <gtest/gtest.h>

#include "p2ptrace/vocabulary.h"
#include "tools/report/trace_fold.h"

namespace p2ptrace::cli {
namespace {

TraceRecord Copy(int src, int dst, uint64_t bytes, uint32_t graph, int result = 0) {
  p2ptrace_copy_record c{};
  c.h.type = P2PTRACE_RECORD_COPY;
  c.h.seq = graph;
  c.src_device = static_cast<int8_t>(src);
  c.dst_device = static_cast<int8_t>(dst);
  c.transport = P2PTRACE_TRANSPORT_NVLINK;
  c.bytes = bytes;
  c.result = result;
  c.flags = P2PTRACE_COPY_ASYNC | (graph ? P2PTRACE_COPY_CAPTURED : 0);
  return TraceRecord{0, c};
}

TraceRecord Op(uint64_t comm, int api, uint64_t bytes, uint32_t graph, int peer = -1) {
  p2ptrace_nccl_op_record o{};
  o.h.type = P2PTRACE_RECORD_NCCL_OP;
  o.h.seq = graph;
  o.comm = comm;
  o.api = static_cast<uint8_t>(api);
  o.bytes = bytes;
  o.peer = peer;
  o.flags = graph ? P2PTRACE_NCCL_CAPTURED : 0;
  return TraceRecord{0, o};
}

TraceRecord Graph(uint8_t event, uint32_t graph, int result = 0) {
  p2ptrace_graph_record g{};
  g.h.type = P2PTRACE_RECORD_GRAPH;
  g.event = event;
  g.graph_id = graph;
  g.result = result;
  return TraceRecord{0, g};
}

TEST(GraphFold, CapturedWorkCountsOncePerLaunchNotAtCapture) {
  TraceFold f;
  f.Add(Copy(0, 1, 100, 7));
  f.Add(Copy(0, 1, 50, 7));
  f.Add(Copy(1, 0, 10, 7));
  f.Add(Op(0xc0, P2PTRACE_NCCL_AllReduce, 400, 7));
  f.Add(Op(0xc0, P2PTRACE_NCCL_Send, 30, 7, 1));
  f.Add(Op(0xc0, P2PTRACE_NCCL_AllReduce, 400, 0));  // outside any graph: counted at once
  EXPECT_EQ((f.ops[{0xc0, int{P2PTRACE_NCCL_AllReduce}}].calls), 1u) << "a captured operation ran nothing yet";
  f.Add(Graph(P2PTRACE_GRAPH_END_CAPTURE, 7));
  f.Add(Graph(P2PTRACE_GRAPH_INSTANTIATE, 7));
  for (int i = 0; i < 5; ++i) f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 7));
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 7, 700));  // failed: ran nothing
  f.Finish();
  using Key = std::tuple<int, int, int>;
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].calls, 10u);
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].bytes, 750u);
  EXPECT_EQ(f.replayed[Key(1, 0, P2PTRACE_TRANSPORT_NVLINK)].calls, 5u);
  EXPECT_EQ(f.replayed[Key(1, 0, P2PTRACE_TRANSPORT_NVLINK)].bytes, 50u);
  const TraceFold::Ops& a = f.ops[{0xc0, int{P2PTRACE_NCCL_AllReduce}}];
  EXPECT_EQ(a.calls, 6u);
  EXPECT_EQ(a.bytes, 2400u);
  EXPECT_EQ(a.graph_calls, 5u);
  EXPECT_EQ(a.graph_bytes, 2000u);
  const TraceFold::Ops& s = f.sends[{0xc0, 1}];
  EXPECT_EQ(s.calls, 5u);
  EXPECT_EQ(s.graph_bytes, 150u);
  EXPECT_EQ(f.graph_launches, 5u);
}

// Another thread's chunk may hold the launches before the capture's records.
TEST(GraphFold, LaunchesReadBeforeTheCaptureStillReplayIt) {
  TraceFold f;
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 3));
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 3));
  f.Add(Copy(2, 3, 64, 3));
  f.Add(Graph(P2PTRACE_GRAPH_END_CAPTURE, 3));
  f.Finish();
  EXPECT_EQ((f.replayed[{2, 3, int{P2PTRACE_TRANSPORT_NVLINK}}].calls), 2u);
  EXPECT_EQ((f.replayed[{2, 3, int{P2PTRACE_TRANSPORT_NVLINK}}].bytes), 128u);
}

TEST(GraphFold, NothingOfAFailedCaptureOrAnUnknownGraphIsReplayed) {
  TraceFold f;
  f.Add(Copy(0, 1, 100, 4));
  f.Add(Op(0xc0, P2PTRACE_NCCL_AllReduce, 8, 4));
  f.Add(Graph(P2PTRACE_GRAPH_END_CAPTURE, 4, 901));  // invalidated
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 4));            // (a damaged file: its id launched anyway)
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 0));            // a graph the shim did not see captured
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 9));            // launches of a graph that captured nothing recorded
  f.Finish();
  EXPECT_TRUE(f.replayed.empty());
  EXPECT_EQ((f.ops[{0xc0, int{P2PTRACE_NCCL_AllReduce}}].calls), 0u);
}

// Two graph ids (an exec updated to another graph's work): each launch replays its own id.
TEST(GraphFold, EachLaunchReplaysItsOwnGraph) {
  TraceFold f;
  f.Add(Copy(0, 1, 100, 1));
  f.Add(Copy(0, 1, 7, 2));
  for (int i = 0; i < 3; ++i) f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 1));
  f.Add(Graph(P2PTRACE_GRAPH_EXEC_UPDATE, 2));
  for (int i = 0; i < 4; ++i) f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 2));
  f.Finish();
  EXPECT_EQ((f.replayed[{0, 1, int{P2PTRACE_TRANSPORT_NVLINK}}].calls), 7u);
  EXPECT_EQ((f.replayed[{0, 1, int{P2PTRACE_TRANSPORT_NVLINK}}].bytes), 328u);
}

TraceRecord Include(uint32_t graph, uint32_t included) {
  TraceRecord r = Graph(P2PTRACE_GRAPH_INCLUDE, graph);
  std::get<p2ptrace_graph_record>(r.body).included_id = included;
  return r;
}

// Trace 1.6: a graph id holds its own copies and all of each included id's, recursively, once per
// launch of the including id; an included id's own launches count on their own; a cycle (only a
// damaged file makes one) ends; an included failed capture adds nothing.
TEST(GraphFold, IncludedGraphsReplayWithTheGraphThatHoldsThem) {
  TraceFold f;
  using Key = std::tuple<int, int, int>;
  f.Add(Copy(0, 1, 100, 1));           // id 1: a copy node
  f.Add(Include(2, 1));                // id 2: grew from 1 (read before its own copy)
  f.Add(Copy(0, 2, 10, 2));
  f.Add(Include(3, 2));                // id 3: a clone of 2
  f.Add(Include(4, 2));                // id 4: a copy of its own and 2 as a child
  f.Add(Copy(1, 0, 1000, 4));
  f.Add(Copy(2, 1, 7, 5));             // id 5: a capture that failed, included by 4
  f.Add(Graph(P2PTRACE_GRAPH_END_CAPTURE, 5, 901));
  f.Add(Include(4, 5));
  for (int i = 0; i < 2; ++i) f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 1));
  for (int i = 0; i < 3; ++i) f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 2));
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 3));
  for (int i = 0; i < 2; ++i) f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 4));
  f.Finish();
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].calls, 2u + 3u + 1u + 2u);
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].bytes, 800u);
  EXPECT_EQ(f.replayed[Key(0, 2, P2PTRACE_TRANSPORT_NVLINK)].calls, 3u + 1u + 2u);
  EXPECT_EQ(f.replayed[Key(1, 0, P2PTRACE_TRANSPORT_NVLINK)].calls, 2u);
  EXPECT_EQ(f.replayed.count(Key(2, 1, P2PTRACE_TRANSPORT_NVLINK)), 0u);

  TraceFold cycle;
  cycle.Add(Copy(0, 1, 1, 8));
  cycle.Add(Include(8, 9));
  cycle.Add(Include(9, 8));
  cycle.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 8));
  cycle.Finish();  // ends; the cycle adds nothing to what its ids' own launches ran
  EXPECT_EQ(cycle.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].calls, 1u);
}

// A child added twice runs twice per launch of its parent; a clone of a clone, a chain of graphs
// grown after instantiation, and a graph shared by two parents each count once per path.
TEST(GraphFold, SharedAndRepeatedIncludesCountOncePerPath) {
  TraceFold f;
  using Key = std::tuple<int, int, int>;
  f.Add(Copy(0, 1, 10, 1));
  f.Add(Include(2, 1));  // parent 2: child 1 twice
  f.Add(Include(2, 1));
  f.Add(Include(3, 1));  // parent 3: child 1 once
  f.Add(Include(4, 2));  // 4 holds 2 and 3 (1 reached by three paths, twice through 2)
  f.Add(Include(4, 3));
  f.Add(Include(5, 4));  // clone of 4, then a clone of the clone
  f.Add(Include(6, 5));
  for (uint32_t id = 7; id < 300; ++id) f.Add(Include(id, id - 1));  // 293 growths in a row
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 6));
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 299));
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 2));
  f.Finish();
  // 6 and 299 each hold 4, which holds 1 three times; 2 holds 1 twice.
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].calls, 3u + 3u + 2u);
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].bytes, 80u);
}

// Only a damaged or hostile file has a cycle of includes or a doubling chain: the fold must end, and
// say nothing it cannot justify. A cycle's ids keep what reached them from outside it; runs saturate.
TEST(GraphFold, ACycleOfIncludesEndsAndReplaysOnlyWhatReachedIt) {
  TraceFold f;
  using Key = std::tuple<int, int, int>;
  f.Add(Copy(0, 1, 10, 1));
  f.Add(Copy(1, 0, 7, 2));
  f.Add(Include(1, 2));  // 1 holds 2 and 2 holds 1
  f.Add(Include(2, 1));
  f.Add(Include(2, 2));  // and one that holds itself: ignored
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 1));
  f.Finish();
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].calls, 1u);  // 1's own launch
  EXPECT_EQ(f.replayed[Key(1, 0, P2PTRACE_TRANSPORT_NVLINK)].calls, 0u);  // nothing from outside the cycle
}

TEST(GraphFold, RunsOfADoublingChainSaturate) {
  TraceFold f;
  using Key = std::tuple<int, int, int>;
  f.Add(Copy(0, 1, 3, 1));
  for (uint32_t id = 2; id <= 64; ++id) {  // each id holds the one before twice: 2^63 runs of id 1
    f.Add(Include(id, id - 1));
    f.Add(Include(id, id - 1));
  }
  f.Add(Graph(P2PTRACE_GRAPH_LAUNCH, 64));
  f.Finish();
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].calls, TraceFold::kMaxRuns);
  EXPECT_EQ(f.replayed[Key(0, 1, P2PTRACE_TRANSPORT_NVLINK)].bytes, 3 * TraceFold::kMaxRuns);
}

}  // namespace
}  // namespace p2ptrace::cli
