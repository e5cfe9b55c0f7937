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
// tests/integration/graph_test.cc holds the same constants and checks the report's totals.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kCopyA = 1 << 20, kCopyB = 3 << 16, kCopyC = 1 << 19, kCopyD = 1 << 15, kCopyE = 5 << 12;
constexpr size_t kCountA = 1024, kCountB = 4096;
constexpr int kLaunches1 = 7, kLaunches2 = 3, kLaunches3 = 5, kLaunches4 = 2, kLaunches5 = 4;

#define CUDA_OK(call)                                                                                 \
  do {                                                                                                \
    cudaError_t r_ = (call);                                                                          \
    if (r_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "graph_workload: %s failed: %s\n", #call, cudaGetErrorString(r_));         \
      std::exit(2);                                                                                   \
    }                                                                                                 \
  } while (0)
#define NCCL_OK(call)                                                                                 \
  do {                                                                                                \
    ncclResult_t r_ = (call);                                                                         \
    if (r_ != ncclSuccess) {                                                                          \
      std::fprintf(stderr, "graph_workload: %s failed: %s\n", #call, ncclGetErrorString(r_));         \
      std::exit(2);                                                                                   \
    }                                                                                                 \
  } while (0)

struct Node {
  cudaStream_t s0, s1;
  char *a0, *b0, *a1, *b1;  // a: sources, b: destinations; 0/1: the device
  float *x0, *x1;           // allreduce buffers
  ncclComm_t comms[2];
};

// Device bytes as the host sees them.
std::vector<char> Read(const void* p, size_t n) {
  std::vector<char> h(n);
  CUDA_OK(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost));
  return h;
}
bool Equal(const void* a, const void* b, size_t n) { return Read(a, n) == Read(b, n); }

// One capture on s0 in `mode`, s1 joining through an event: copies of `ab` bytes 0→1 on s0 and of
// `ba` bytes 1→0 on s1 (none when 0), and an allreduce of `count` floats on both ranks.
cudaGraph_t Capture(Node& n, cudaStreamCaptureMode mode, size_t ab, size_t ba, size_t count) {
  cudaEvent_t fork, join;
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaStreamBeginCapture(n.s0, mode));
  CUDA_OK(cudaMemcpyPeerAsync(n.b1, 1, n.a0, 0, ab, n.s0));
  CUDA_OK(cudaEventRecord(fork, n.s0));
  CUDA_OK(cudaStreamWaitEvent(n.s1, fork, 0));  // s1 joins the capture
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_OK(cudaStreamIsCapturing(n.s1, &status));
  if (status != cudaStreamCaptureStatusActive) std::exit(3);
  if (ba) CUDA_OK(cudaMemcpyAsync(n.b0, n.a1, ba, cudaMemcpyDeviceToDevice, n.s1));
  if (count) {
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(n.x0, n.x0, count, ncclFloat, ncclSum, n.comms[0], n.s0));
    NCCL_OK(ncclAllReduce(n.x1, n.x1, count, ncclFloat, ncclSum, n.comms[1], n.s1));
    NCCL_OK(ncclGroupEnd());
  }
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaEventRecord(join, n.s1));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaStreamWaitEvent(n.s0, join, 0));
  cudaGraph_t g = nullptr;
  CUDA_OK(cudaStreamEndCapture(n.s0, &g));
  CUDA_OK(cudaEventDestroy(fork));
  CUDA_OK(cudaEventDestroy(join));
  return g;
}

void Launch(cudaGraphExec_t exec, cudaStream_t s, int times) {
  for (int i = 0; i < times; ++i) CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
}

}  // namespace

int main() {
  Node n{};
  int count = 0;
  CUDA_OK(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::fprintf(stderr, "graph_workload: needs 2 GPUs\n");
    return 2;
  }
  for (int d = 0; d < 2; ++d) {
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(cudaDeviceEnablePeerAccess(1 - d, 0));
    char** a = d ? &n.a1 : &n.a0;
    char** b = d ? &n.b1 : &n.b0;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(a), kCopyA));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(b), kCopyA));
    CUDA_OK(cudaMemset(*a, 0x10 + d, kCopyA));
    CUDA_OK(cudaMemset(*b, 0, kCopyA));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(d ? &n.x1 : &n.x0), kCountB * sizeof(float)));
    CUDA_OK(cudaStreamCreateWithFlags(d ? &n.s1 : &n.s0, cudaStreamNonBlocking));
  }
  int devs[2] = {0, 1};
  NCCL_OK(ncclCommInitAll(n.comms, 2, devs));

  // Outside any graph: counted when called.
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaMemcpyPeerAsync(n.b1, 1, n.a0, 0, kCopyA, n.s0));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(n.x0, n.x0, kCountA, ncclFloat, ncclSum, n.comms[0], n.s0));
  NCCL_OK(ncclAllReduce(n.x1, n.x1, kCountA, ncclFloat, ncclSum, n.comms[1], n.s1));
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(n.s0));
  CUDA_OK(cudaStreamSynchronize(n.s1));
  CUDA_OK(cudaMemset(n.b1, 0, kCopyA));
  CUDA_OK(cudaMemset(n.b0, 0, kCopyA));

  cudaGraph_t g1 = Capture(n, cudaStreamCaptureModeGlobal, kCopyA, kCopyB, kCountA);
  // Capturing moved nothing: the destinations are still zero.
  std::vector<char> zero(kCopyA, 0);
  bool moved_at_capture = Read(n.b1, kCopyA) != zero || Read(n.b0, kCopyB) != std::vector<char>(kCopyB, 0);
  std::printf("capture moved data: %s\n", moved_at_capture ? "yes" : "no");
  cudaGraphExec_t exec1 = nullptr, exec2 = nullptr, exec3 = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec1, g1, 0));
  CUDA_OK(cudaGraphInstantiateWithFlags(&exec2, g1, 0));
  Launch(exec1, n.s0, kLaunches1);
  std::printf("after launches: 0->1 %s, 1->0 %s\n", Equal(n.b1, n.a0, kCopyA) ? "copied" : "missing",
              Equal(n.b0, n.a1, kCopyB) ? "copied" : "missing");
  Launch(exec2, n.s0, kLaunches2);

  cudaGraph_t g2 = Capture(n, cudaStreamCaptureModeThreadLocal, kCopyC, kCopyD, kCountB);
  cudaGraphExecUpdateResultInfo info{};
  CUDA_OK(cudaGraphExecUpdate(exec2, g2, &info));
  Launch(exec2, n.s0, kLaunches3);

  cudaGraph_t g3 = Capture(n, cudaStreamCaptureModeRelaxed, kCopyE, 0, 0);
  cudaGraphInstantiateParams params{};
  CUDA_OK(cudaGraphInstantiateWithParams(&exec3, g3, &params));
  Launch(exec3, n.s0, kLaunches4);

  // A capture invalidated by synchronizing its stream: no graph; its copy never runs.
  CUDA_OK(cudaStreamBeginCapture(n.s0, cudaStreamCaptureModeGlobal));
  CUDA_OK(cudaMemcpyPeerAsync(n.b1, 1, n.a0, 0, kCopyA, n.s0));
  cudaError_t sync = cudaStreamSynchronize(n.s0);
  cudaGraph_t dead = nullptr;
  cudaError_t end = cudaStreamEndCapture(n.s0, &dead);
  std::printf("invalidated capture: sync %s, end %s, graph %s\n", cudaGetErrorName(sync), cudaGetErrorName(end),
              dead ? "made" : "none");
  (void)cudaGetLastError();

  // A graph of no copy or NCCL call: its launches are not recorded.
  cudaGraph_t g4 = nullptr;
  cudaGraphExec_t exec4 = nullptr;
  CUDA_OK(cudaStreamBeginCapture(n.s0, cudaStreamCaptureModeGlobal));
  CUDA_OK(cudaMemsetAsync(n.b0, 1, kCopyB, n.s0));
  CUDA_OK(cudaStreamEndCapture(n.s0, &g4));
  CUDA_OK(cudaGraphInstantiate(&exec4, g4, 0));
  Launch(exec4, n.s0, kLaunches5);

  for (cudaGraphExec_t e : {exec1, exec2, exec3, exec4}) CUDA_OK(cudaGraphExecDestroy(e));
  for (cudaGraph_t g : {g1, g2, g3, g4}) CUDA_OK(cudaGraphDestroy(g));
  for (ncclComm_t c : n.comms) NCCL_OK(ncclCommDestroy(c));
  std::printf("graph_workload: %d launches\n", kLaunches1 + kLaunches2 + kLaunches3 + kLaunches4 + kLaunches5);
  return 0;
}
