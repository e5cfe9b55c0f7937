// TraceFold's CUDA graph replays (trace format 1.5): captured copies and NCCL operations count
// once per successful launch of their graph id, whatever order the records come in; a failed
// capture, a failed launch, a graph id 0 and records of no capture replay nothing.
#include <gtest/gtest.h>

#include "p2ptrace/vocabulary.h"
#include "tools/trace_fold.h"

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

}  // namespace
}  // namespace p2ptrace::cli
