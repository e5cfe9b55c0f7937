// shim_overhead: what libp2ptrace.so adds to one CUDA copy call. Linked to the real libcudart only
// (never to the shim); bench/run_bench.py runs it bare, under LD_PRELOAD=libp2ptrace.so counting
// only (P2PTRACE_SAMPLE=off) and timing every call (P2PTRACE_SAMPLE=all), on the simulated node,
// and compares. The simulated runtime itself costs far more than a real cudart's enqueue (a mutex,
// std::map lookups, a real 4 KiB memcpy), so compare the absolute difference (shim - bare), in ns
// and in instructions, not only the ratio.
//
//   shim_overhead [Google Benchmark flags]     the benchmarks below
//   shim_overhead --time-loop N KIND           N calls of KIND after a warm-up, timed with
//                                              steady_clock: prints "KIND <ns> ns/call" (the mode
//                                              tests/device/check.sh uses on a real GPU node, where
//                                              no Google Benchmark is installed)
//   shim_overhead --callgrind-loop N KIND      setup, a warm-up, then exactly N calls of KIND and
//                                              one stream synchronize: run under callgrind for
//                                              N=1000 and N=2000, (Ir(2000) - Ir(1000)) / 1000 is
//                                              the cost of one call with startup cancelled out
//
// Kinds (each a 4 KiB copy on a created non-blocking stream of device 0):
//   same         cudaMemcpyAsync D2D within device 0 (the common, uninteresting case)
//   cross        cudaMemcpyAsync D2D device 0 -> device 1, peer access 0->1 enabled
//   peer         cudaMemcpyPeerAsync device 0 -> device 1
//   h2d          cudaMemcpyAsync pinned host -> device 0
//   same_small   as same, and cross_small as cross, between buffers of their own 4 KiB
//   cross_small  cudaMalloc(4096) allocations (the others use the middle of 8 MiB ones)
//   event2       two cudaEventRecord on the stream (no copy): what a timed copy may add
//   graph        cudaGraphLaunch of a graph captured from one cross copy (0 -> 1) on the stream
//   graph16      the same, the graph captured from 16 cross copies (the shim's cost must not grow)
//   cugraph      the driver's cuGraphLaunch of a graph captured through the driver (cuStreamBeginCapture,
//                one cuMemcpyAsync 0 -> 1)
// With one GPU only same, h2d, same_small and event2 run (the others say why and are skipped).
// And, as a benchmark only, clock/ (clock_gettime(CLOCK_MONOTONIC), what each recorded copy's
// timestamp costs natively).
#ifndef P2PTRACE_HAVE_GBENCH
#define P2PTRACE_HAVE_GBENCH 1
#endif
#if P2PTRACE_HAVE_GBENCH
#include <benchmark/benchmark.h>
#endif
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

constexpr size_t kCopyBytes = 4096;
// Device buffers are 8 MiB and the copies use the 4 MiB point: the 2 MiB granule of that address
// lies wholly inside the allocation, the shim's pointer->device table's fast case. The *_small
// kinds copy between allocations of 4 KiB, whose granules the allocations cover only in part.
constexpr size_t kAllocBytes = size_t{8} << 20;
constexpr size_t kUseOffset = size_t{4} << 20;
constexpr int kSyncEvery = 1024;  // stream synchronize every this many calls

[[noreturn]] void Fail(cudaError_t r, const char* what) {
  std::fprintf(stderr, "shim_overhead: %s failed: %d (%s)\n", what, static_cast<int>(r), cudaGetErrorName(r));
  std::exit(1);
}

#define CHECK(call)                                 \
  do {                                              \
    cudaError_t check_r_ = (call);                  \
    if (check_r_ != cudaSuccess) Fail(check_r_, #call); \
  } while (0)

struct Setup {
  cudaStream_t stream = nullptr;  // on device 0
  char* a0 = nullptr;             // device 0
  char* b0 = nullptr;             // device 0
  char* a1 = nullptr;             // device 1
  char *s0 = nullptr, *t0 = nullptr, *s1 = nullptr;  // 4 KiB allocations: device 0, 0, 1
  void* host = nullptr;           // pinned
  cudaEvent_t ev_start = nullptr, ev_end = nullptr;  // device 0
  cudaGraphExec_t graph1 = nullptr, graph16 = nullptr;  // captured cross copies: 1, 16
  CUgraphExec cugraph = nullptr;  // captured through the driver: 1 cross copy
  bool two_devices = false;  // device 1 exists and device 0 can map it
};

Setup g;

char* DeviceBuffer(int device, size_t alloc = kAllocBytes, size_t offset = kUseOffset) {
  void* p = nullptr;
  CHECK(cudaSetDevice(device));
  CHECK(cudaMalloc(&p, alloc));
  char* use = static_cast<char*>(p) + offset;
  CHECK(cudaMemset(use, device + 1, kCopyBytes));
  return use;
}

// An exec of a graph captured on the stream from n cross copies.
cudaGraphExec_t CaptureCopies(int n) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < n; ++i) CHECK(cudaMemcpyAsync(g.a1, g.a0, kCopyBytes, cudaMemcpyDeviceToDevice, g.stream));
  CHECK(cudaStreamEndCapture(g.stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  return exec;
}

// The same through the driver API (as XLA's command buffers do).
CUgraphExec CaptureDriverCopy() {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  auto dev = [](const char* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); };
  auto check = [](CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) Fail(static_cast<cudaError_t>(r), what);
  };
  check(cuStreamBeginCapture(g.stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  check(cuMemcpyAsync(dev(g.a1), dev(g.a0), kCopyBytes, g.stream), "cuMemcpyAsync");
  check(cuStreamEndCapture(g.stream, &graph), "cuStreamEndCapture");
  check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  return exec;
}

void SetUp() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  int can = 0;
  if (n >= 2) CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
  g.two_devices = n >= 2 && can;
  if (!g.two_devices)
    std::fprintf(stderr, "shim_overhead: %s: only the one-device kinds run (same, h2d, same_small, event2)\n",
                 n < 2 ? "one device" : "device 0 cannot access device 1 as a peer");
  if (g.two_devices) {
    g.a1 = DeviceBuffer(1);
    g.s1 = DeviceBuffer(1, kCopyBytes, 0);
  }
  g.a0 = DeviceBuffer(0);
  g.b0 = DeviceBuffer(0);
  g.s0 = DeviceBuffer(0, kCopyBytes, 0);
  g.t0 = DeviceBuffer(0, kCopyBytes, 0);
  CHECK(cudaSetDevice(0));
  if (g.two_devices) {
    cudaError_t r = cudaDeviceEnablePeerAccess(1, 0);
    if (r == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    else if (r != cudaSuccess) Fail(r, "cudaDeviceEnablePeerAccess(1, 0)");
  }
  CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  CHECK(cudaMallocHost(&g.host, kCopyBytes));
  std::memset(g.host, 7, kCopyBytes);
  if (g.two_devices) {
    g.graph1 = CaptureCopies(1);
    g.graph16 = CaptureCopies(16);
    g.cugraph = CaptureDriverCopy();
  }
  CHECK(cudaEventCreate(&g.ev_start));
  CHECK(cudaEventCreate(&g.ev_end));
  CHECK(cudaDeviceSynchronize());
}

enum class Kind { kSame, kCross, kPeer, kH2D, kSameSmall, kCrossSmall, kEvent2, kGraph, kGraph16, kCuGraph };

bool NeedsTwoDevices(Kind k) {
  return k == Kind::kCross || k == Kind::kPeer || k == Kind::kCrossSmall || k == Kind::kGraph || k == Kind::kGraph16 ||
         k == Kind::kCuGraph;
}

bool ParseKind(const std::string& s, Kind* k) {
  if (s == "same") *k = Kind::kSame;
  else if (s == "cross") *k = Kind::kCross;
  else if (s == "peer") *k = Kind::kPeer;
  else if (s == "h2d") *k = Kind::kH2D;
  else if (s == "same_small") *k = Kind::kSameSmall;
  else if (s == "cross_small") *k = Kind::kCrossSmall;
  else if (s == "event2") *k = Kind::kEvent2;
  else if (s == "graph") *k = Kind::kGraph;
  else if (s == "graph16") *k = Kind::kGraph16;
  else if (s == "cugraph") *k = Kind::kCuGraph;
  else return false;
  return true;
}

// One call of the kind (two for event2). Always inlined so the loop around it is all there is.
inline __attribute__((always_inline)) cudaError_t Call(Kind k) {
  switch (k) {
    case Kind::kSame:
      return cudaMemcpyAsync(g.b0, g.a0, kCopyBytes, cudaMemcpyDeviceToDevice, g.stream);
    case Kind::kCross:
      return cudaMemcpyAsync(g.a1, g.a0, kCopyBytes, cudaMemcpyDeviceToDevice, g.stream);
    case Kind::kPeer:
      return cudaMemcpyPeerAsync(g.a1, 1, g.a0, 0, kCopyBytes, g.stream);
    case Kind::kH2D:
      return cudaMemcpyAsync(g.a0, g.host, kCopyBytes, cudaMemcpyHostToDevice, g.stream);
    case Kind::kSameSmall:
      return cudaMemcpyAsync(g.t0, g.s0, kCopyBytes, cudaMemcpyDeviceToDevice, g.stream);
    case Kind::kCrossSmall:
      return cudaMemcpyAsync(g.s1, g.s0, kCopyBytes, cudaMemcpyDeviceToDevice, g.stream);
    case Kind::kEvent2: {
      cudaError_t r = cudaEventRecord(g.ev_start, g.stream);
      return r != cudaSuccess ? r : cudaEventRecord(g.ev_end, g.stream);
    }
    case Kind::kGraph:
      return cudaGraphLaunch(g.graph1, g.stream);
    case Kind::kGraph16:
      return cudaGraphLaunch(g.graph16, g.stream);
    case Kind::kCuGraph:
      return static_cast<cudaError_t>(cuGraphLaunch(g.cugraph, g.stream));
  }
  return cudaErrorInvalidValue;
}

#if P2PTRACE_HAVE_GBENCH
template <Kind K>
void BM_Copy(benchmark::State& state) {
  if (NeedsTwoDevices(K) && !g.two_devices) {
    state.SkipWithError("needs two devices with peer access");
    return;
  }
  int i = 0;
  for (auto _ : state) {
    cudaError_t r = Call(K);
    if (__builtin_expect(r != cudaSuccess, 0)) {
      state.SkipWithError(cudaGetErrorName(r));
      break;
    }
    if (++i == kSyncEvery) {
      i = 0;
      cudaStreamSynchronize(g.stream);
    }
  }
  cudaStreamSynchronize(g.stream);
  state.SetItemsProcessed(state.iterations());
}

// Names are what run_bench.py matches on.
BENCHMARK(BM_Copy<Kind::kSame>)->Name("same/cudaMemcpyAsync_D2D_dev0_4KiB");
BENCHMARK(BM_Copy<Kind::kCross>)->Name("cross/cudaMemcpyAsync_D2D_0to1_4KiB");
BENCHMARK(BM_Copy<Kind::kPeer>)->Name("peer/cudaMemcpyPeerAsync_0to1_4KiB");
BENCHMARK(BM_Copy<Kind::kH2D>)->Name("h2d/cudaMemcpyAsync_H2D_4KiB");
BENCHMARK(BM_Copy<Kind::kSameSmall>)->Name("same_small/cudaMemcpyAsync_D2D_dev0_4KiB_allocs");
BENCHMARK(BM_Copy<Kind::kCrossSmall>)->Name("cross_small/cudaMemcpyAsync_D2D_0to1_4KiB_allocs");
BENCHMARK(BM_Copy<Kind::kEvent2>)->Name("event2/2x_cudaEventRecord");
BENCHMARK(BM_Copy<Kind::kGraph>)->Name("graph/cudaGraphLaunch_1_copy_0to1_4KiB");
BENCHMARK(BM_Copy<Kind::kGraph16>)->Name("graph16/cudaGraphLaunch_16_copies_0to1_4KiB");
BENCHMARK(BM_Copy<Kind::kCuGraph>)->Name("cugraph/cuGraphLaunch_1_copy_0to1_4KiB");

// What the shim's timestamp per recorded copy costs natively (callgrind cannot see the vDSO).
void BM_Clock(benchmark::State& state) {
  timespec ts;
  for (auto _ : state) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    benchmark::DoNotOptimize(ts);
  }
}
BENCHMARK(BM_Clock)->Name("clock/clock_gettime_MONOTONIC");

#endif  // P2PTRACE_HAVE_GBENCH

// N calls and nothing else worth counting: the callgrind driver.
int CallgrindLoop(long n, Kind k) {
  for (int i = 0; i < 64; ++i) CHECK(Call(k));  // warm-up: lazy resolution, first-time paths
  CHECK(cudaStreamSynchronize(g.stream));
  for (long i = 0; i < n; ++i) {
    cudaError_t r = Call(k);
    if (__builtin_expect(r != cudaSuccess, 0)) Fail(r, "copy");
  }
  CHECK(cudaStreamSynchronize(g.stream));
  return 0;
}

// N calls after a warm-up, timed: ns per call on stdout.
int TimeLoop(long n, Kind k, const char* name) {
  if (NeedsTwoDevices(k) && !g.two_devices) {
    std::printf("%s skipped (needs two devices with peer access)\n", name);
    return 0;
  }
  for (int i = 0; i < 256; ++i) CHECK(Call(k));
  CHECK(cudaStreamSynchronize(g.stream));
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    cudaError_t r = Call(k);
    if (__builtin_expect(r != cudaSuccess, 0)) Fail(r, "copy");
    if ((i + 1) % kSyncEvery == 0) CHECK(cudaStreamSynchronize(g.stream));
  }
  CHECK(cudaStreamSynchronize(g.stream));
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s %.1f ns/call\n", name, n > 0 ? ns / static_cast<double>(n) : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--time-loop") == 0) {
    Kind k{};
    char* end = nullptr;
    long n = argc == 4 ? std::strtol(argv[2], &end, 10) : -1;
    if (argc != 4 || end == argv[2] || *end != '\0' || n < 0 || !ParseKind(argv[3], &k)) {
      std::fprintf(stderr, "usage: %s --time-loop N same|cross|peer|h2d|same_small|cross_small|event2|graph|graph16|cugraph\n",
                   argv[0]);
      return 2;
    }
    SetUp();
    return TimeLoop(n, k, argv[3]);
  }
  if (argc >= 2 && std::strcmp(argv[1], "--callgrind-loop") == 0) {
    Kind k{};
    char* end = nullptr;
    long n = argc == 4 ? std::strtol(argv[2], &end, 10) : -1;
    if (argc != 4 || end == argv[2] || *end != '\0' || n < 0 || !ParseKind(argv[3], &k)) {
      std::fprintf(stderr, "usage: %s --callgrind-loop N same|cross|peer|h2d|same_small|cross_small|event2|graph|graph16|cugraph\n",
                   argv[0]);
      return 2;
    }
    SetUp();
    if (NeedsTwoDevices(k) && !g.two_devices) Fail(cudaErrorInvalidDevice, "a two-device kind on one device");
    return CallgrindLoop(n, k);
  }
#if P2PTRACE_HAVE_GBENCH
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  SetUp();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
#else
  std::fprintf(stderr, "usage: %s --time-loop N KIND | --callgrind-loop N KIND (built without Google Benchmark)\n",
               argv[0]);
  return 2;
#endif
}
