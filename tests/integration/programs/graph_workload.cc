// CUDA graphs as vLLM and torch.compile use them: peer copies and an NCCL allreduce captured into a
// graph once, then launched many times. One process, GPUs 0 and 1, one communicator over both
// (ncclCommInitAll). Prints what it checked; its output must not change under `p2ptrace run`.
//   graph_workload
// The graphs (every capture also has its second stream join through an event, cross-stream):
//   g1 (global mode):       0→1 kCopyA bytes (s0), 1→0 kCopyB bytes (s1), allreduce of kCountA
//                           floats on both ranks; instantiated twice (exec1, exec2)
//   g2 (thread-local mode): the same shape with kCopyC, kCopyD, kCountB; exec2 is updated to it
//   g3 (relaxed mode):      0→1 kCopyE bytes alone; cudaGraphInstantiateWithParams (exec3)
//   a capture invalidated by a synchronize: its copy never runs and must never be counted
//   g4 (global mode):       a memset alone (nothing the shim records): launched kLaunches5 times
// Launches: exec1 kLaunches1 times, exec2 kLaunches2 times before its update and kLaunches3 after,
// exec3 kLaunches4 times. Outside any graph: one 0→1 copy of kCopyA and one allreduce of kCountA.
// tests/integration/shim/graph_test.cc holds the same constants and checks the report's totals.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/support/cuda_check.h"
#include "tests/support/nccl_check.h"

namespace {

constexpr size_t kCopyA = 1 << 20, kCopyB = 3 << 16, kCopyC = 1 << 19, kCopyD = 1 << 15, kCopyE = 5 << 12;
constexpr size_t kCountA = 1024, kCountB = 4096;
constexpr int kLaunches1 = 7, kLaunches2 = 3, kLaunches3 = 5, kLaunches4 = 2, kLaunches5 = 4;

struct Node {
  cudaStream_t s0, s1;
  char *a0, *b0, *a1, *b1;  // a: sources, b: destinations; 0/1: the device
  float *x0, *x1;           // allreduce buffers
  ncclComm_t comms[2];
};

// Device bytes as the host sees them.
std::vector<char> Read(const void* p, size_t n) {
  std::vector<char> h(n);
  P2PTRACE_CHECK(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost));
  return h;
}
bool Equal(const void* a, const void* b, size_t n) { return Read(a, n) == Read(b, n); }

// One capture on s0 in `mode`, s1 joining through an event: copies of `ab` bytes 0→1 on s0 and of
// `ba` bytes 1→0 on s1 (none when 0), and an allreduce of `count` floats on both ranks.
cudaGraph_t Capture(Node& n, cudaStreamCaptureMode mode, size_t ab, size_t ba, size_t count) {
  cudaEvent_t fork, join;
  P2PTRACE_CHECK(cudaSetDevice(0));
  P2PTRACE_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  P2PTRACE_CHECK(cudaSetDevice(1));
  P2PTRACE_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  P2PTRACE_CHECK(cudaSetDevice(0));
  P2PTRACE_CHECK(cudaStreamBeginCapture(n.s0, mode));
  P2PTRACE_CHECK(cudaMemcpyPeerAsync(n.b1, 1, n.a0, 0, ab, n.s0));
  P2PTRACE_CHECK(cudaEventRecord(fork, n.s0));
  P2PTRACE_CHECK(cudaStreamWaitEvent(n.s1, fork, 0));  // s1 joins the capture
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  P2PTRACE_CHECK(cudaStreamIsCapturing(n.s1, &status));
  if (status != cudaStreamCaptureStatusActive) std::exit(3);
  if (ba) P2PTRACE_CHECK(cudaMemcpyAsync(n.b0, n.a1, ba, cudaMemcpyDeviceToDevice, n.s1));
  if (count) {
    P2PTRACE_NCCL_CHECK(ncclGroupStart());
    P2PTRACE_NCCL_CHECK(ncclAllReduce(n.x0, n.x0, count, ncclFloat, ncclSum, n.comms[0], n.s0));
    P2PTRACE_NCCL_CHECK(ncclAllReduce(n.x1, n.x1, count, ncclFloat, ncclSum, n.comms[1], n.s1));
    P2PTRACE_NCCL_CHECK(ncclGroupEnd());
  }
  P2PTRACE_CHECK(cudaSetDevice(1));
  P2PTRACE_CHECK(cudaEventRecord(join, n.s1));
  P2PTRACE_CHECK(cudaSetDevice(0));
  P2PTRACE_CHECK(cudaStreamWaitEvent(n.s0, join, 0));
  // GRAPH_HOLD_MS: a global-mode capture held open that long, the streams' earlier NCCL work already
  // returned: a tracer's thread that recorded or queried an event meanwhile would join or invalidate it.
  if (const char* hold = std::getenv("GRAPH_HOLD_MS"); hold != nullptr && mode == cudaStreamCaptureModeGlobal)
    usleep(static_cast<useconds_t>(std::atoi(hold)) * 1000);
  cudaGraph_t g = nullptr;
  P2PTRACE_CHECK(cudaStreamEndCapture(n.s0, &g));
  size_t nodes = 0;
  P2PTRACE_CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  std::printf("captured %zu nodes\n", nodes);
  P2PTRACE_CHECK(cudaEventDestroy(fork));
  P2PTRACE_CHECK(cudaEventDestroy(join));
  return g;
}

void Launch(cudaGraphExec_t exec, cudaStream_t s, int times) {
  for (int i = 0; i < times; ++i) P2PTRACE_CHECK(cudaGraphLaunch(exec, s));
  P2PTRACE_CHECK(cudaStreamSynchronize(s));
}

}  // namespace

int main() {
  Node n{};
  int count = 0;
  P2PTRACE_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::fprintf(stderr, "graph_workload: needs 2 GPUs\n");
    return 2;
  }
  for (int d = 0; d < 2; ++d) {
    P2PTRACE_CHECK(cudaSetDevice(d));
    P2PTRACE_CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
    char** a = d ? &n.a1 : &n.a0;
    char** b = d ? &n.b1 : &n.b0;
    P2PTRACE_CHECK(cudaMalloc(reinterpret_cast<void**>(a), kCopyA));
    P2PTRACE_CHECK(cudaMalloc(reinterpret_cast<void**>(b), kCopyA));
    P2PTRACE_CHECK(cudaMemset(*a, 0x10 + d, kCopyA));
    P2PTRACE_CHECK(cudaMemset(*b, 0, kCopyA));
    P2PTRACE_CHECK(cudaMalloc(reinterpret_cast<void**>(d ? &n.x1 : &n.x0), kCountB * sizeof(float)));
    P2PTRACE_CHECK(cudaStreamCreateWithFlags(d ? &n.s1 : &n.s0, cudaStreamNonBlocking));
  }
  int devs[2] = {0, 1};
  P2PTRACE_NCCL_CHECK(ncclCommInitAll(n.comms, 2, devs));

  // Outside any graph: counted when called.
  P2PTRACE_CHECK(cudaSetDevice(0));
  P2PTRACE_CHECK(cudaMemcpyPeerAsync(n.b1, 1, n.a0, 0, kCopyA, n.s0));
  P2PTRACE_NCCL_CHECK(ncclGroupStart());
  P2PTRACE_NCCL_CHECK(ncclAllReduce(n.x0, n.x0, kCountA, ncclFloat, ncclSum, n.comms[0], n.s0));
  P2PTRACE_NCCL_CHECK(ncclAllReduce(n.x1, n.x1, kCountA, ncclFloat, ncclSum, n.comms[1], n.s1));
  P2PTRACE_NCCL_CHECK(ncclGroupEnd());
  P2PTRACE_CHECK(cudaStreamSynchronize(n.s0));
  P2PTRACE_CHECK(cudaStreamSynchronize(n.s1));
  P2PTRACE_CHECK(cudaMemset(n.b1, 0, kCopyA));
  P2PTRACE_CHECK(cudaMemset(n.b0, 0, kCopyA));

  cudaGraph_t g1 = Capture(n, cudaStreamCaptureModeGlobal, kCopyA, kCopyB, kCountA);
  // Capturing moved nothing: the destinations are still zero.
  std::vector<char> zero(kCopyA, 0);
  bool moved_at_capture = Read(n.b1, kCopyA) != zero || Read(n.b0, kCopyB) != std::vector<char>(kCopyB, 0);
  std::printf("capture moved data: %s\n", moved_at_capture ? "yes" : "no");
  cudaGraphExec_t exec1 = nullptr, exec2 = nullptr, exec3 = nullptr;
  P2PTRACE_CHECK(cudaGraphInstantiate(&exec1, g1, 0));
  P2PTRACE_CHECK(cudaGraphInstantiateWithFlags(&exec2, g1, 0));
  Launch(exec1, n.s0, kLaunches1);
  std::printf("after launches: 0->1 %s, 1->0 %s\n", Equal(n.b1, n.a0, kCopyA) ? "copied" : "missing",
              Equal(n.b0, n.a1, kCopyB) ? "copied" : "missing");
  Launch(exec2, n.s0, kLaunches2);

  cudaGraph_t g2 = Capture(n, cudaStreamCaptureModeThreadLocal, kCopyC, kCopyD, kCountB);
  cudaGraphExecUpdateResultInfo info{};
  P2PTRACE_CHECK(cudaGraphExecUpdate(exec2, g2, &info));
  Launch(exec2, n.s0, kLaunches3);

  cudaGraph_t g3 = Capture(n, cudaStreamCaptureModeRelaxed, kCopyE, 0, 0);
  cudaGraphInstantiateParams params{};
  P2PTRACE_CHECK(cudaGraphInstantiateWithParams(&exec3, g3, &params));
  Launch(exec3, n.s0, kLaunches4);

  // A capture invalidated by synchronizing its stream: no graph; its copy never runs.
  P2PTRACE_CHECK(cudaStreamBeginCapture(n.s0, cudaStreamCaptureModeGlobal));
  P2PTRACE_CHECK(cudaMemcpyPeerAsync(n.b1, 1, n.a0, 0, kCopyA, n.s0));
  cudaError_t sync = cudaStreamSynchronize(n.s0);
  cudaGraph_t dead = nullptr;
  cudaError_t end = cudaStreamEndCapture(n.s0, &dead);
  std::printf("invalidated capture: sync %s, end %s, graph %s\n", cudaGetErrorName(sync), cudaGetErrorName(end),
              dead ? "made" : "none");
  (void)cudaGetLastError();

  // A graph of no copy or NCCL call: its launches are not recorded.
  cudaGraph_t g4 = nullptr;
  cudaGraphExec_t exec4 = nullptr;
  P2PTRACE_CHECK(cudaStreamBeginCapture(n.s0, cudaStreamCaptureModeGlobal));
  P2PTRACE_CHECK(cudaMemsetAsync(n.b0, 1, kCopyB, n.s0));
  P2PTRACE_CHECK(cudaStreamEndCapture(n.s0, &g4));
  P2PTRACE_CHECK(cudaGraphInstantiate(&exec4, g4, 0));
  Launch(exec4, n.s0, kLaunches5);

  for (cudaGraphExec_t e : {exec1, exec2, exec3, exec4}) P2PTRACE_CHECK(cudaGraphExecDestroy(e));
  for (cudaGraph_t g : {g1, g2, g3, g4}) P2PTRACE_CHECK(cudaGraphDestroy(g));
  for (ncclComm_t c : n.comms) P2PTRACE_NCCL_CHECK(ncclCommDestroy(c));
  std::printf("graph_workload: %d launches\n", kLaunches1 + kLaunches2 + kLaunches3 + kLaunches4 + kLaunches5);
  return 0;
}
