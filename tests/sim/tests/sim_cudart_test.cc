// The simulated CUDA runtime, exercised through the real CUDA headers by a binary linked against
// the real libcudart.so.13 (RUNPATH) and run with the sim's directory in LD_LIBRARY_PATH. Each suite
// is registered by CTest with the topology it expects (see tests/CMakeLists.txt).
#include <cuda_runtime_api.h>
#include <cuda_runtime.h>  // make_cudaPitchedPtr, make_cudaExtent
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

extern "C" {
cudaError_t cudaMemcpyAsync_ptsz(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy_ptds(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemsetAsync_ptsz(void*, int, size_t, cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t, cudaStream_t);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t, cudaHostFn_t, void*);
}

namespace {

constexpr double kNvlinkGbps = 6 * 20.5;  // demo topology: NV6 inside each island
constexpr double kStagedGbps = 20;

// Leaves every device as a fresh process would find it: no peers, no memory, no last error.
class SimTest : public ::testing::Test {
 protected:
  void TearDown() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess)
      for (int d = 0; d < n; ++d) {
        cudaSetDevice(d);
        cudaDeviceSynchronize();
        cudaDeviceReset();
      }
    cudaSetDevice(0);
    cudaGetLastError();
  }
};

using Demo = SimTest;

std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) & 0xff);
  return v;
}

void* DeviceAlloc(int device, size_t bytes) {
  int saved = 0;
  cudaGetDevice(&saved);
  cudaSetDevice(device);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
  cudaSetDevice(saved);
  return p;
}

// Milliseconds one async copy src_dev→dst_dev takes, measured with events on a stream of src_dev.
float TimedPeerCopy(int src_dev, int dst_dev, size_t bytes) {
  void* src = DeviceAlloc(src_dev, bytes);
  void* dst = DeviceAlloc(dst_dev, bytes);
  cudaSetDevice(src_dev);
  cudaStream_t s;
  cudaEvent_t a, b;
  EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cudaEventCreate(&a), cudaSuccess);
  EXPECT_EQ(cudaEventCreate(&b), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(a, s), cudaSuccess);
  EXPECT_EQ(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(b, s), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(b), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  cudaFree(src);
  cudaFree(dst);
  return ms;
}

double ExpectedMs(size_t bytes, double gbps) { return bytes / (gbps * 1e9) * 1e3; }

TEST_F(Demo, DevicesAndProperties) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 8);
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 5), cudaSuccess);
  EXPECT_STREQ(p.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(p.pciBusID, 0xab);
  EXPECT_EQ(p.pciDomainID, 0);
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.unifiedAddressing, 1);
  // The H100's figures (tests/sim/common/gpu_model): programs size kernels from them (PyTorch's
  // reductions divide by the warp size).
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.multiProcessorCount, 132);
  EXPECT_EQ(p.maxThreadsPerMultiProcessor, 2048);
  EXPECT_EQ(p.l2CacheSize, 50 << 20);
  EXPECT_EQ(p.sharedMemPerBlockOptin, 232448u);
  EXPECT_EQ(p.totalGlobalMem, 81090ull << 20);
  EXPECT_EQ(p.maxGridSize[0], 2147483647);
  char bus[32];
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus, sizeof bus, 5), cudaSuccess);
  EXPECT_STREQ(bus, "0000:AB:00.0");
  int dev = -1;
  ASSERT_EQ(cudaDeviceGetByPCIBusId(&dev, "0000:db:00.0"), cudaSuccess);
  EXPECT_EQ(dev, 7);
  EXPECT_EQ(cudaGetDeviceProperties(&p, 8), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(8), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(-1), cudaErrorInvalidDevice);
  int value = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&value, cudaDevAttrPciBusId, 3), cudaSuccess);
  EXPECT_EQ(value, 0x5d);
  ASSERT_EQ(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 3), cudaSuccess);
  EXPECT_EQ(value, 233472);
}

// Stream capture state as PyTorch's NCCL watchdog and CUDA graphs read it.
TEST_F(Demo, CaptureInfoAndMode) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  unsigned long long id = 7;
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(1);
  size_t deps = 9;
  ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id, &graph, nullptr, nullptr, &deps), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(deps, 0u);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id, &graph, nullptr, nullptr, &deps), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_NE(id, 0u);
  EXPECT_NE(graph, nullptr);
  cudaGraph_t done = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &done), cudaSuccess);
  EXPECT_EQ(done, graph);  // the graph that was being built
  unsigned long long id2 = 0;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id2, nullptr, nullptr, nullptr, nullptr), cudaSuccess);
  EXPECT_NE(id2, id);
  cudaGraph_t second = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &second), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(done), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(second), cudaSuccess);
  EXPECT_EQ(cudaStreamGetCaptureInfo(s, nullptr, &id, nullptr, nullptr, nullptr, nullptr), cudaErrorInvalidValue);

  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal);  // every thread starts in global mode
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(Demo, CurrentDeviceIsPerThread) {
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  int other = -1;
  std::thread([&] {
    cudaGetDevice(&other);  // a new thread starts on device 0
    cudaSetDevice(6);
  }).join();
  int mine = -1;
  cudaGetDevice(&mine);
  EXPECT_EQ(other, 0);
  EXPECT_EQ(mine, 2);
}

TEST_F(Demo, PeerCapabilityFollowsTheTopology) {
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      int can = -1;
      ASSERT_EQ(cudaDeviceCanAccessPeer(&can, a, b), cudaSuccess);
      bool same_island = a / 4 == b / 4;
      EXPECT_EQ(can, a != b && same_island ? 1 : 0) << a << "->" << b;
    }
  int can = 0;
  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 8), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
}

TEST_F(Demo, P2PAttributes) {
  int v = -1;
  ASSERT_EQ(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 3), cudaSuccess);
  EXPECT_EQ(v, 1);
  ASSERT_EQ(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, 0, 3), cudaSuccess);
  EXPECT_EQ(v, 0);
  ASSERT_EQ(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, 1, 2), cudaSuccess);
  EXPECT_EQ(v, 1);
  ASSERT_EQ(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 3, 4), cudaSuccess);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 2, 2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceGetP2PAttribute(&v, static_cast<cudaDeviceP2PAttr>(99), 0, 1), cudaErrorInvalidValue);
}

TEST_F(Demo, EnableAndDisablePeerAccessErrorCodes) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);   // 704
  EXPECT_EQ(cudaDeviceEnablePeerAccess(4, 0), cudaErrorPeerAccessUnsupported);      // 217: other socket
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);              // 101: itself
  EXPECT_EQ(cudaDeviceEnablePeerAccess(9, 0), cudaErrorInvalidDevice);              // 101: no such device
  EXPECT_EQ(cudaDeviceEnablePeerAccess(2, 1), cudaErrorInvalidValue);               // 1: flags must be 0
  EXPECT_EQ(cudaDeviceDisablePeerAccess(3), cudaErrorPeerAccessNotEnabled);         // 705
  // Access is per direction: 0→1 says nothing about 1→0.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
}

TEST_F(Demo, LastErrorStaysUntilRead) {
  ASSERT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  int d;
  EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);  // success does not clear it
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorPeerAccessAlreadyEnabled);
  cudaError_t in_thread = cudaErrorUnknown;
  std::thread([&] { in_thread = cudaPeekAtLastError(); }).join();
  EXPECT_EQ(in_thread, cudaSuccess);  // per thread
  EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Demo, CopiesOfEveryKindMoveTheBytes) {
  const size_t n = 1 << 20;
  std::vector<unsigned char> host = Pattern(n, 7), back(n, 0), other(n, 0);
  void* d0 = DeviceAlloc(0, n);
  void* d0b = DeviceAlloc(0, n);
  void* d5 = DeviceAlloc(5, n);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d0, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d0b, d0, n, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d5, d0b, n, cudaMemcpyDefault), cudaSuccess);  // across devices, inferred
  ASSERT_EQ(cudaMemcpy(pinned, d5, n, cudaMemcpyDefault), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(other.data(), pinned, n, cudaMemcpyHostToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d5, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_EQ(other, host);
  // Async on a stream, then the per-thread-default-stream variants.
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<unsigned char> host2 = Pattern(n, 99);
  ASSERT_EQ(cudaMemcpyAsync(d0, host2.data(), n, cudaMemcpyDefault, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync_ptsz(d5, d0, n, cudaMemcpyDeviceToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize_ptsz(nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpy_ptds(back.data(), d5, n, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(back, host2);
  // Peer copies name their devices.
  ASSERT_EQ(cudaMemcpyPeer(d0b, 0, d5, 5, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d0b, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host2);
  EXPECT_EQ(cudaMemcpyPeer(d0b, 0, d5, 9, n), cudaErrorInvalidDevice);
  // Wrong claims and bounds.
  EXPECT_EQ(cudaMemcpy(host.data(), d0, n, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(back.data(), static_cast<char*>(d0) + 1, n, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(back.data(), d0, n, static_cast<cudaMemcpyKind>(7)), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(back.data(), d0, 0, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaStreamDestroy(s);
  cudaFreeHost(pinned);
}

TEST_F(Demo, Copies2DAnd3DPeerAndMemset) {
  const size_t w = 100, h = 20, pitch = 128;
  std::vector<unsigned char> host = Pattern(pitch * h, 3), back(pitch * h, 0);
  void* d1 = DeviceAlloc(1, pitch * h);
  void* d2 = DeviceAlloc(2, pitch * h);
  ASSERT_EQ(cudaMemcpy2D(d1, pitch, host.data(), pitch, w, h, cudaMemcpyHostToDevice), cudaSuccess);
  cudaMemcpy3DPeerParms p{};
  p.srcPtr = make_cudaPitchedPtr(d1, pitch, w, h);
  p.dstPtr = make_cudaPitchedPtr(d2, pitch, w, h);
  p.srcDevice = 1;
  p.dstDevice = 2;
  p.extent = make_cudaExtent(w, h, 1);
  ASSERT_EQ(cudaMemcpy3DPeer(&p), cudaSuccess);
  ASSERT_EQ(cudaMemcpy2D(back.data(), pitch, d2, pitch, w, h, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t r = 0; r < h; ++r)
    EXPECT_EQ(0, std::memcmp(back.data() + r * pitch, host.data() + r * pitch, w)) << "row " << r;
  EXPECT_EQ(cudaMemcpy2D(d1, 64, host.data(), pitch, w, h, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
  ASSERT_EQ(cudaMemset(d1, 0x5a, pitch * h), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync_ptsz(d2, 0x11, 10, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d1, pitch * h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::count(back.begin(), back.end(), 0x5a), static_cast<long>(pitch * h));
  unsigned char first[10];
  ASSERT_EQ(cudaMemcpy(first, d2, 10, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(first[9], 0x11);
  EXPECT_EQ(cudaMemset(host.data(), 0, 10), cudaErrorInvalidValue);  // not device memory
}

TEST_F(Demo, HostStagedIsSlowerThanNvlinkByTheConfiguredRatio) {
  const size_t bytes = 256u << 20;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  float nvlink = TimedPeerCopy(0, 1, bytes);
  float staged_cross_socket = TimedPeerCopy(0, 4, bytes);  // not peer-capable
  float staged_not_enabled = TimedPeerCopy(0, 2, bytes);   // capable, but access never enabled
  EXPECT_NEAR(nvlink, ExpectedMs(bytes, kNvlinkGbps), 1e-3 * nvlink);
  EXPECT_NEAR(staged_cross_socket, ExpectedMs(bytes, kStagedGbps), 1e-3 * staged_cross_socket);
  EXPECT_NEAR(staged_not_enabled, staged_cross_socket, 1e-3 * staged_cross_socket);
  EXPECT_NEAR(staged_cross_socket / nvlink, kNvlinkGbps / kStagedGbps, 0.01);
  // Enabled in the other direction is enough for a direct copy (CUDA maps either side).
  cudaSetDevice(2);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
  EXPECT_NEAR(TimedPeerCopy(0, 2, bytes), nvlink, 1e-3 * nvlink);
}

TEST_F(Demo, EventQueryIsNotReadyUntilTheClockPasses) {
  const size_t bytes = 64u << 20;
  void* a = DeviceAlloc(0, bytes);
  void* b = DeviceAlloc(4, bytes);
  cudaStream_t s;
  cudaEvent_t start, end;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(end), cudaSuccess);  // never recorded
  ASSERT_EQ(cudaEventRecord(start, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDefault, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, s), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  cudaGetLastError();
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);  // "not ready" is not an error
  EXPECT_EQ(cudaEventQuery(end), cudaSuccess);    // time_scale 0: the poll moved the clock on
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_NEAR(ms, ExpectedMs(bytes, kStagedGbps), 1e-3 * ms);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);

  cudaEvent_t untimed, unrecorded;
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&unrecorded), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed, s), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, unrecorded), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventInterprocess), cudaErrorInvalidValue);
  // An event belongs to the device it was created on.
  cudaSetDevice(1);
  cudaStream_t s1;
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(start, s1), cudaErrorInvalidResourceHandle);
  cudaStreamDestroy(s1);
  cudaSetDevice(0);
  for (cudaEvent_t e : {start, end, untimed, unrecorded}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(start), cudaErrorInvalidResourceHandle);
  cudaStreamDestroy(s);
}

TEST_F(Demo, LegacyStreamWaitsForBlockingStreamsButNonBlockingDoesNot) {
  const size_t bytes = 128u << 20;
  void* a = DeviceAlloc(0, bytes);
  void* b = DeviceAlloc(4, bytes);
  cudaStream_t blocking, nonblocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  ASSERT_EQ(cudaEventRecord(e0, nonblocking), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDefault, blocking), cudaSuccess);  // staged: long
  ASSERT_EQ(cudaEventRecord(e1, nonblocking), cudaSuccess);  // independent of `blocking`
  ASSERT_EQ(cudaEventRecord(e2, nullptr), cudaSuccess);      // legacy stream waits for it
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float independent = -1, ordered = -1;
  ASSERT_EQ(cudaEventElapsedTime(&independent, e0, e1), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ordered, e0, e2), cudaSuccess);
  EXPECT_FLOAT_EQ(independent, 0);
  EXPECT_NEAR(ordered, ExpectedMs(bytes, kStagedGbps), 1e-3 * ordered);
  for (cudaEvent_t e : {e0, e1, e2}) cudaEventDestroy(e);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonblocking);
}

TEST_F(Demo, CapturedWorkIsRecordedNotRun) {
  const size_t n = 4096;
  std::vector<unsigned char> host = Pattern(n, 1), back(n, 0);
  void* d = DeviceAlloc(0, n);
  ASSERT_EQ(cudaMemset(d, 0, n), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaEvent_t e;
  cudaEventCreate(&e);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusInvalidated;
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  ASSERT_EQ(cudaMemcpyAsync(d, host.data(), n, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_NE(graph, nullptr);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 2u);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::count(back.begin(), back.end(), 0), static_cast<long>(n));  // nothing ran
  // The legacy stream cannot be captured; synchronising a capturing stream breaks the capture.
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaMemsetAsync(d, 1, n, s), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

struct HostFuncProbe {
  std::vector<int> order;
  cudaError_t malloc_inside = cudaSuccess;
};

TEST_F(Demo, HostFunctionsRunInOrderAndMayNotCallCuda) {
  HostFuncProbe probe;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto first = [](void* p) {
    auto* pr = static_cast<HostFuncProbe*>(p);
    pr->order.push_back(1);
    void* x = nullptr;
    pr->malloc_inside = cudaMalloc(&x, 16);
  };
  auto second = [](void* p) { static_cast<HostFuncProbe*>(p)->order.push_back(2); };
  ASSERT_EQ(cudaLaunchHostFunc(s, first, &probe), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc_ptsz(s, second, &probe), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(probe.order, (std::vector<int>{1, 2}));
  EXPECT_EQ(probe.malloc_inside, cudaErrorNotPermitted);
  EXPECT_EQ(cudaLaunchHostFunc(s, nullptr, nullptr), cudaErrorInvalidValue);
  cudaStreamDestroy(s);
}

TEST_F(Demo, PointerAttributes) {
  void* d = DeviceAlloc(6, 1024);
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault), cudaSuccess);
  int stack_var = 0;
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(d) + 100), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 6);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pinned), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&a, &stack_var), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(a.device, cudaInvalidDeviceId);
  EXPECT_EQ(cudaFree(pinned), cudaErrorInvalidValue);  // pinned memory goes back through cudaFreeHost
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(&stack_var), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
}

TEST_F(Demo, StreamsAndTheirErrors) {
  cudaStream_t s;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, 2), cudaErrorInvalidValue);
  ASSERT_EQ(cudaSetDevice(3), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -99), cudaSuccess);
  unsigned flags = 0;
  int prio = 0, dev = -1, least = 1, greatest = 1;
  ASSERT_EQ(cudaStreamGetFlags(s, &flags), cudaSuccess);
  ASSERT_EQ(cudaStreamGetPriority(s, &prio), cudaSuccess);
  ASSERT_EQ(cudaStreamGetDevice(s, &dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  EXPECT_EQ(flags, static_cast<unsigned>(cudaStreamNonBlocking));
  EXPECT_EQ(prio, greatest);  // clamped into the range
  EXPECT_EQ(dev, 3);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
}

// The runtime hands out the simulated driver's functions (libcuda.so.1's cuGetProcAddress).
TEST_F(Demo, DriverEntryPoints) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemcpyPeer", &fn, 12000, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_NE(fn, nullptr);
  EXPECT_EQ(status, cudaDriverEntryPointSuccess);
  fn = reinterpret_cast<void*>(1);
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &status),
            cudaErrorSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
}

TEST_F(Demo, VersionsAndErrorNames) {
  int rt = 0, drv = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&rt), cudaSuccess);
  ASSERT_EQ(cudaDriverGetVersion(&drv), cudaSuccess);
  EXPECT_EQ(rt, 13000);
  EXPECT_GE(drv, rt);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorPeerAccessUnsupported), "cudaErrorPeerAccessUnsupported");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorPeerAccessAlreadyEnabled), "peer access is already enabled");
  EXPECT_STREQ(cudaGetErrorName(static_cast<cudaError_t>(12345)), "unrecognized error code");
}

TEST_F(Demo, KernelLaunchWithoutDeviceCodeSucceeds) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  static int fake_kernel_symbol;
  EXPECT_EQ(cudaLaunchKernel(&fake_kernel_symbol, dim3(1), dim3(32), nullptr, 0, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

// --- other topologies -----------------------------------------------------------------------

using Pcie16 = SimTest;  // 16 GPUs under one CPU: every pair is peer-capable

TEST_F(Pcie16, NinthPeerIsTooMany) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  for (int peer = 1; peer <= 8; ++peer) EXPECT_EQ(cudaDeviceEnablePeerAccess(peer, 0), cudaSuccess) << peer;
  EXPECT_EQ(cudaDeviceEnablePeerAccess(9, 0), cudaErrorTooManyPeers);  // 711
  EXPECT_EQ(cudaDeviceDisablePeerAccess(8), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(9, 0), cudaSuccess);
}

using Visible = SimTest;  // demo topology with CUDA_VISIBLE_DEVICES=5,2

TEST_F(Visible, RenumbersTheHostsGpus) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  ASSERT_EQ(n, 2);
  char bus[32];
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), cudaSuccess);
  EXPECT_STREQ(bus, "0000:AB:00.0");  // host GPU 5
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus, sizeof bus, 1), cudaSuccess);
  EXPECT_STREQ(bus, "0000:3A:00.0");  // host GPU 2
  int can = -1;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 0);  // 5 and 2 sit on different sockets
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
}

using IommuAcs = SimTest;  // PCIe switches, IOMMU on, ACS redirect on sw1

TEST_F(IommuAcs, PeerAccessWorksButRunsAtTheHostStagedRate) {
  int can = 0;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 2), cudaSuccess);
  EXPECT_EQ(can, 1);  // PHB: capable
  ASSERT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  const size_t bytes = 64u << 20;
  EXPECT_NEAR(TimedPeerCopy(0, 1, bytes), ExpectedMs(bytes, 10), 1e-3 * ExpectedMs(bytes, 10));
}

using Consumer = SimTest;  // two GeForce boards

TEST_F(Consumer, GeForcePairIsNotPeerCapable) {
  int can = -1;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessUnsupported);
}

}  // namespace
