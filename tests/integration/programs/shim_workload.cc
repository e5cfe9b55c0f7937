// The shim's test workload: one program linked to the real libcudart (CUDA::cudart) and never to
// the shim, run by tests/integration/shim/shim_test.cc with and without LD_PRELOAD=libp2ptrace.so.
// Sub-commands (argv[1]):
//   script               a fixed script of CUDA calls covering every function the shim wraps
//                        (shim/interpose/cuda_functions.h) and every error path the simulated node
//                        gives; prints each call's result, out-parameters and sticky error, so the
//                        output with and without the shim can be compared byte for byte
//   pairs                a known workload on demo-8gpu.json with known pairs, paths and bytes
//   hostcopies           host <-> device copies (cudaMemcpyDefault) next to device memory: no pairs
//   crash N kill|segv|abort|_exit   N peer copies 0->1, then die that way
//   fork                 copies, a forked child (no exec) with its own copies, more copies
//   forkexec             copies, then fork + exec of this program with `pairs`
//   threads T N          T threads, each N cudaMemcpyPeerAsync 0->1 of 4 KiB on its own stream
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shim/interpose/cuda_functions.h"  // declares the _ptds/_ptsz entry points
#include "tests/support/cuda_check.h"

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// --- script -------------------------------------------------------------------------------------

int g_step = 0;

// One line per call: step, name, return code, out-parameters, then the sticky error after it.
void Report(const char* name, cudaError_t r, const std::string& outs = "") {
  cudaError_t peek = cudaPeekAtLastError();
  std::printf("%02d %-32s rc=%d%s%s peek=%d\n", ++g_step, name, static_cast<int>(r), outs.empty() ? "" : " ",
              outs.c_str(), static_cast<int>(peek));
}

std::string Kv(const char* k, long long v) { return std::string(k) + "=" + std::to_string(v); }

// Checksum of `n` bytes of device memory read back through the host (deterministic even when
// every call fails: the host buffer keeps its fill then).
uint32_t Sum(const void* dev, size_t n) {
  std::vector<unsigned char> h(n, 0xEE);
  cudaError_t r = cudaMemcpy(h.data(), dev, n, cudaMemcpyDeviceToHost);
  uint32_t s = static_cast<uint32_t>(r);
  for (unsigned char c : h) s = s * 31 + c;
  return s;
}

cudaMemcpy3DPeerParms Parms3D(void* dst, int dst_dev, void* src, int src_dev) {
  cudaMemcpy3DPeerParms p{};
  p.srcPtr = cudaPitchedPtr{src, 256, 64, 8};
  p.dstPtr = cudaPitchedPtr{dst, 256, 64, 8};
  p.srcDevice = src_dev;
  p.dstDevice = dst_dev;
  p.extent = cudaExtent{64, 4, 2};
  return p;
}

int Script() {
  cudaError_t r;
  int n = -7;
  r = cudaGetDeviceCount(&n);
  Report("cudaGetDeviceCount", r, Kv("count", n));

  // Allocations on devices 0, 1 and 4; pinned host memory for checks.
  void *a0 = nullptr, *b0 = nullptr, *a1 = nullptr, *a4 = nullptr;
  r = cudaSetDevice(0);
  Report("cudaSetDevice(0)", r);
  r = cudaMalloc(&a0, MiB);
  Report("cudaMalloc(dev0)", r, Kv("null", a0 == nullptr));
  r = cudaMalloc(&b0, MiB);
  Report("cudaMalloc(dev0 b)", r, Kv("null", b0 == nullptr));
  r = cudaMalloc(nullptr, MiB);
  Report("cudaMalloc(null out)", r);
  cudaSetDevice(1);
  r = cudaMalloc(&a1, MiB);
  Report("cudaMalloc(dev1)", r, Kv("null", a1 == nullptr));
  cudaSetDevice(4);
  r = cudaMalloc(&a4, MiB);
  Report("cudaMalloc(dev4)", r, Kv("null", a4 == nullptr));
  r = cudaSetDevice(0);
  Report("cudaSetDevice(0)", r);
  std::vector<unsigned char> host(MiB);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  r = cudaMemcpy(a0, host.data(), MiB, cudaMemcpyHostToDevice);
  Report("cudaMemcpy(H2D dev0)", r);

  // Capability queries.
  int can = -7;
  r = cudaDeviceCanAccessPeer(&can, 0, 1);
  Report("cudaDeviceCanAccessPeer(0,1)", r, Kv("can", can));
  can = -7;
  r = cudaDeviceCanAccessPeer(&can, 0, 4);
  Report("cudaDeviceCanAccessPeer(0,4)", r, Kv("can", can));
  can = -7;
  r = cudaDeviceCanAccessPeer(&can, 0, 99);
  Report("cudaDeviceCanAccessPeer(0,99)", r, Kv("can", can));
  r = cudaDeviceCanAccessPeer(nullptr, 0, 1);
  Report("cudaDeviceCanAccessPeer(null)", r);
  int v = -7;
  r = cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, 0, 1);
  Report("cudaDeviceGetP2PAttribute(rank)", r, Kv("v", v));
  v = -7;
  r = cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 4);
  Report("cudaDeviceGetP2PAttribute(acc)", r, Kv("v", v));
  v = -7;
  r = cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, 0, 2);
  Report("cudaDeviceGetP2PAttribute(atom)", r, Kv("v", v));
  v = -7;
  r = cudaDeviceGetP2PAttribute(&v, static_cast<cudaDeviceP2PAttr>(99), 0, 1);
  Report("cudaDeviceGetP2PAttribute(bad)", r, Kv("v", v));
  v = -7;
  r = cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 0);
  Report("cudaDeviceGetP2PAttribute(0,0)", r, Kv("v", v));

  // Peer access: every error code the sim gives.
  r = cudaDeviceEnablePeerAccess(1, 0);
  Report("cudaDeviceEnablePeerAccess(1)", r);
  r = cudaDeviceEnablePeerAccess(1, 0);
  Report("cudaDeviceEnablePeerAccess(1) again", r);  // 704
  r = cudaDeviceEnablePeerAccess(4, 0);
  Report("cudaDeviceEnablePeerAccess(4)", r);  // 217
  r = cudaDeviceEnablePeerAccess(0, 0);
  Report("cudaDeviceEnablePeerAccess(self)", r);  // 101
  r = cudaDeviceEnablePeerAccess(2, 1);
  Report("cudaDeviceEnablePeerAccess(2,f=1)", r);  // 1
  r = cudaDeviceDisablePeerAccess(2);
  Report("cudaDeviceDisablePeerAccess(2)", r);  // 705
  r = cudaDeviceDisablePeerAccess(99);
  Report("cudaDeviceDisablePeerAccess(99)", r);  // 101
  r = cudaGetLastError();
  Report("cudaGetLastError", r);

  // Pool access to a null pool: refused (1, as CUDA 13 answers), a result that must be identical.
  cudaMemAccessDesc desc{};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 1;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  r = cudaMemPoolSetAccess(nullptr, &desc, 1);
  Report("cudaMemPoolSetAccess", r);
  r = cudaMemPoolSetAccess(nullptr, nullptr, 1);
  Report("cudaMemPoolSetAccess(null)", r);

  // Peer copies.
  r = cudaMemcpyPeer(a1, 1, a0, 0, 4 * KiB);
  Report("cudaMemcpyPeer(0->1)", r, Kv("sum", Sum(a1, 4 * KiB)));
  r = cudaMemcpyPeer(a4, 4, a0, 0, 4 * KiB);
  Report("cudaMemcpyPeer(0->4)", r, Kv("sum", Sum(a4, 4 * KiB)));
  r = cudaMemcpyPeer(a1, 99, a0, 0, 16);
  Report("cudaMemcpyPeer(bad dev)", r);  // 101
  r = cudaMemcpyPeer(a1, 1, a0, 0, 2 * MiB);
  Report("cudaMemcpyPeer(past end)", r);  // 1

  // Streams.
  cudaStream_t s = nullptr, s2 = nullptr, s3 = nullptr, sx = nullptr;
  r = cudaStreamCreate(&s);
  Report("cudaStreamCreate", r, Kv("null", s == nullptr));
  r = cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  Report("cudaStreamCreateWithFlags", r, Kv("null", s2 == nullptr));
  r = cudaStreamCreateWithPriority(&s3, cudaStreamNonBlocking, -1);
  Report("cudaStreamCreateWithPriority", r, Kv("null", s3 == nullptr));
  r = cudaStreamCreateWithFlags(&sx, 0x80);
  Report("cudaStreamCreateWithFlags(bad)", r, Kv("null", sx == nullptr));
  r = cudaStreamCreate(nullptr);
  Report("cudaStreamCreate(null)", r);
  // A handle that names no stream (on the sim: invalid resource handle).
  static char not_a_stream[64];
  cudaStream_t bogus = reinterpret_cast<cudaStream_t>(not_a_stream);

  r = cudaGetLastError();  // a clean slate: an error the shim left behind would show below
  Report("cudaGetLastError", r);
  // A stream of device 4 used while device 1 is current: whatever the shim does for this copy
  // (timing events belong to the stream's device) must leave device 1 current.
  cudaStream_t s4 = nullptr;
  cudaSetDevice(4);
  r = cudaStreamCreate(&s4);
  Report("cudaStreamCreate(dev4)", r, Kv("null", s4 == nullptr));
  cudaSetDevice(1);
  r = cudaMemcpyPeerAsync(a0, 0, a4, 4, 4 * KiB, s4);
  int cur = -7;
  cudaGetDevice(&cur);
  Report("cudaMemcpyPeerAsync(4->0,s4)", r, Kv("current", cur));
  r = cudaMemcpyPeer(a4, 4, a1, 1, 4 * KiB);
  cur = -7;
  cudaGetDevice(&cur);
  Report("cudaMemcpyPeer(1->4)", r, Kv("current", cur));
  r = cudaStreamSynchronize(s4);
  Report("cudaStreamSynchronize(s4)", r);
  r = cudaStreamDestroy(s4);
  Report("cudaStreamDestroy(s4)", r);
  r = cudaSetDevice(0);
  Report("cudaSetDevice(0)", r);
  r = cudaMemcpyPeerAsync(a4, 4, a0, 0, 4 * KiB, s);
  Report("cudaMemcpyPeerAsync(0->4,s)", r);
  r = cudaMemcpyPeerAsync(a1, 1, a0, 0, 4 * KiB, s3);
  Report("cudaMemcpyPeerAsync(0->1,s3)", r);
  r = cudaMemcpyPeerAsync(a1, 1, a0, 0, 16, bogus);
  Report("cudaMemcpyPeerAsync(bogus)", r);  // 400
  r = cudaMemcpy(a1, a0, 8 * KiB, cudaMemcpyDefault);
  Report("cudaMemcpy(0->1 default)", r, Kv("sum", Sum(a1, 8 * KiB)));
  r = cudaMemcpy(a1, a0, 16, static_cast<cudaMemcpyKind>(7));
  Report("cudaMemcpy(bad kind)", r);  // 21
  r = cudaMemcpy(a1, host.data(), 16, cudaMemcpyDeviceToDevice);
  Report("cudaMemcpy(host as dev)", r);  // 1
  r = cudaMemcpy(b0, a0, 64 * KiB, cudaMemcpyDeviceToDevice);
  Report("cudaMemcpy(same dev)", r, Kv("sum", Sum(b0, 64 * KiB)));
  r = cudaMemcpy(a4, a0, 2 * MiB, cudaMemcpyDefault);
  Report("cudaMemcpy(past end)", r);  // 1
  r = cudaMemcpy_ptds(a4, a0, 4 * KiB, cudaMemcpyDefault);
  Report("cudaMemcpy_ptds(0->4)", r, Kv("sum", Sum(a4, 4 * KiB)));
  r = cudaMemcpyAsync(a1, a0, 4 * KiB, cudaMemcpyDeviceToDevice, s2);
  Report("cudaMemcpyAsync(0->1,s2)", r);
  r = cudaMemcpyAsync(a1, a0, 4 * KiB, cudaMemcpyDeviceToDevice, bogus);
  Report("cudaMemcpyAsync(bogus)", r);  // 400
  r = cudaMemcpyAsync_ptsz(a4, a0, 4 * KiB, cudaMemcpyDeviceToDevice, nullptr);
  Report("cudaMemcpyAsync_ptsz(0->4)", r);
  r = cudaMemcpy2D(a1, 256, a0, 256, 128, 16, cudaMemcpyDeviceToDevice);
  Report("cudaMemcpy2D(0->1)", r, Kv("sum", Sum(a1, 4 * KiB)));
  r = cudaMemcpy2D(a1, 64, a0, 256, 128, 16, cudaMemcpyDeviceToDevice);
  Report("cudaMemcpy2D(width>pitch)", r);  // 12
  r = cudaMemcpy2D_ptds(a4, 256, a0, 256, 128, 16, cudaMemcpyDefault);
  Report("cudaMemcpy2D_ptds(0->4)", r);
  r = cudaMemcpy2DAsync(a4, 256, a0, 256, 200, 8, cudaMemcpyDeviceToDevice, s);
  Report("cudaMemcpy2DAsync(0->4,s)", r);
  r = cudaMemcpy2DAsync(a4, 256, a0, 256, 200, 8, static_cast<cudaMemcpyKind>(9), s);
  Report("cudaMemcpy2DAsync(bad kind)", r);  // 21
  r = cudaMemcpy2DAsync_ptsz(a1, 512, a0, 512, 100, 4, cudaMemcpyDeviceToDevice, s2);
  Report("cudaMemcpy2DAsync_ptsz(0->1)", r);
  cudaMemcpy3DPeerParms p3 = Parms3D(a1, 1, a0, 0);
  r = cudaMemcpy3DPeer(&p3);
  Report("cudaMemcpy3DPeer(0->1)", r, Kv("sum", Sum(a1, 4 * KiB)));
  cudaMemcpy3DPeerParms p3bad = Parms3D(a1, 1, a0, 99);
  r = cudaMemcpy3DPeer(&p3bad);
  Report("cudaMemcpy3DPeer(bad dev)", r);  // 101
  cudaMemcpy3DPeerParms p3far = Parms3D(a1, 1, a0, 0);
  p3far.extent = cudaExtent{64, 4, 1024};  // past the end of both 1 MiB allocations
  r = cudaMemcpy3DPeer(&p3far);
  Report("cudaMemcpy3DPeer(past end)", r);  // 1
  r = cudaMemcpy3DPeer(nullptr);
  Report("cudaMemcpy3DPeer(null)", r);  // 1
  r = cudaMemcpy3DPeerAsync(nullptr, s);
  Report("cudaMemcpy3DPeerAsync(null)", r);  // 1
  cudaMemcpy3DPeerParms p34 = Parms3D(a4, 4, a0, 0);
  r = cudaMemcpy3DPeer_ptds(&p34);
  Report("cudaMemcpy3DPeer_ptds(0->4)", r);
  r = cudaMemcpy3DPeerAsync(&p3, s);
  Report("cudaMemcpy3DPeerAsync(0->1,s)", r);
  r = cudaMemcpy3DPeerAsync_ptsz(&p34, nullptr);
  Report("cudaMemcpy3DPeerAsync_ptsz(0->4)", r);
  r = cudaStreamSynchronize(s);
  Report("cudaStreamSynchronize(s)", r, Kv("sum1", Sum(a1, 8 * KiB)) + " " + Kv("sum4", Sum(a4, 8 * KiB)));

  // IPC: export works; opening in the exporting process is refused (201); bad pointers fail.
  cudaIpcMemHandle_t h;
  std::memset(&h, 0, sizeof h);
  r = cudaIpcGetMemHandle(&h, a0);
  Report("cudaIpcGetMemHandle(dev0)", r);
  cudaIpcMemHandle_t hbad;
  std::memset(&hbad, 0, sizeof hbad);
  r = cudaIpcGetMemHandle(&hbad, host.data());
  Report("cudaIpcGetMemHandle(host)", r);  // 1
  void* opened = reinterpret_cast<void*>(0x1);
  r = cudaIpcOpenMemHandle(&opened, h, cudaIpcMemLazyEnablePeerAccess);
  Report("cudaIpcOpenMemHandle(own)", r, Kv("set", opened != reinterpret_cast<void*>(0x1)));  // 201
  r = cudaIpcOpenMemHandle(&opened, hbad, cudaIpcMemLazyEnablePeerAccess);
  Report("cudaIpcOpenMemHandle(garbage)", r);  // 1
  r = cudaIpcCloseMemHandle(host.data());
  Report("cudaIpcCloseMemHandle(host)", r);  // 1

  // Stream capture: captured copies become graph nodes; the shim must add none of its own.
  r = cudaStreamBeginCapture(s3, cudaStreamCaptureModeGlobal);
  Report("cudaStreamBeginCapture(s3)", r);
  r = cudaMemcpyAsync(a1, a0, 4 * KiB, cudaMemcpyDeviceToDevice, s3);
  Report("cudaMemcpyAsync(captured)", r);
  r = cudaMemcpyPeerAsync(a4, 4, a0, 0, 4 * KiB, s3);
  Report("cudaMemcpyPeerAsync(captured)", r);
  r = cudaStreamEndCapture(s3, nullptr);
  Report("cudaStreamEndCapture(s3,null)", r);  // 1: the capture goes on
  cudaGraph_t g = nullptr;
  r = cudaStreamEndCapture(s3, &g);
  size_t nodes = 777;
  cudaError_t rn = cudaGraphGetNodes(g, nullptr, &nodes);
  Report("cudaStreamEndCapture(s3)", r, Kv("nodes_rc", rn) + " " + Kv("nodes", static_cast<long long>(nodes)));
  cudaGraphDestroy(g);
  r = cudaStreamBeginCapture_ptsz(s2, cudaStreamCaptureModeThreadLocal);
  Report("cudaStreamBeginCapture_ptsz(s2)", r);
  r = cudaMemcpy2DAsync(a1, 256, a0, 256, 128, 4, cudaMemcpyDeviceToDevice, s2);
  Report("cudaMemcpy2DAsync(captured)", r);
  cudaGraph_t g2 = nullptr;
  r = cudaStreamEndCapture_ptsz(s2, &g2);
  nodes = 777;
  rn = cudaGraphGetNodes(g2, nullptr, &nodes);
  Report("cudaStreamEndCapture_ptsz(s2)", r, Kv("nodes_rc", rn) + " " + Kv("nodes", static_cast<long long>(nodes)));
  cudaGraphDestroy(g2);
  r = cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal);
  Report("cudaStreamBeginCapture(legacy)", r);  // 900
  cudaGraph_t g3 = nullptr;
  r = cudaStreamEndCapture(s, &g3);
  Report("cudaStreamEndCapture(none)", r, Kv("null", g3 == nullptr));  // 401
  // A capture invalidated by a synchronisation, then ended.
  r = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  Report("cudaStreamBeginCapture(s)", r);
  r = cudaStreamSynchronize(s);
  Report("cudaStreamSynchronize(capturing)", r);  // 900
  r = cudaMemcpyPeerAsync(a1, 1, a0, 0, 4 * KiB, s);
  Report("cudaMemcpyPeerAsync(invalidated)", r);  // 901
  cudaGraph_t g4 = nullptr;
  r = cudaStreamEndCapture(s, &g4);
  Report("cudaStreamEndCapture(invalidated)", r, Kv("null", g4 == nullptr));  // 901
  r = cudaGetLastError();
  Report("cudaGetLastError", r);

  // Stream-ordered allocation.
  void* m = nullptr;
  r = cudaMallocAsync(&m, 64 * KiB, s);
  Report("cudaMallocAsync(s)", r, Kv("null", m == nullptr));
  r = cudaMemcpyAsync(m, a0, 64 * KiB, cudaMemcpyDefault, s);
  Report("cudaMemcpyAsync(to pool mem)", r);
  r = cudaMemcpyPeerAsync(a1, 1, m, 0, 4 * KiB, s);
  Report("cudaMemcpyPeerAsync(from pool mem)", r);
  r = cudaFreeAsync(m, s);
  Report("cudaFreeAsync(s)", r);
  void* mb = nullptr;
  r = cudaMallocAsync(&mb, 16, bogus);
  Report("cudaMallocAsync(bogus)", r, Kv("null", mb == nullptr));  // 400
  r = cudaFreeAsync(host.data(), s);
  Report("cudaFreeAsync(host)", r);  // 1
  void* mp = nullptr;
  r = cudaMallocAsync_ptsz(&mp, 64 * KiB, nullptr);
  Report("cudaMallocAsync_ptsz", r, Kv("null", mp == nullptr));
  r = cudaFreeAsync_ptsz(mp, nullptr);
  Report("cudaFreeAsync_ptsz", r);
  r = cudaStreamSynchronize(s);
  Report("cudaStreamSynchronize(s)", r);

  // Disable, then a copy of the same pair goes host-staged; then tear down.
  r = cudaDeviceDisablePeerAccess(1);
  Report("cudaDeviceDisablePeerAccess(1)", r);
  r = cudaDeviceDisablePeerAccess(1);
  Report("cudaDeviceDisablePeerAccess(1) again", r);  // 705
  r = cudaMemcpyPeer(a1, 1, a0, 0, 4 * KiB);
  Report("cudaMemcpyPeer(0->1 disabled)", r, Kv("sum", Sum(a1, 4 * KiB)));
  r = cudaStreamDestroy(s);
  Report("cudaStreamDestroy(s)", r);
  r = cudaStreamDestroy(s2);
  Report("cudaStreamDestroy(s2)", r);
  r = cudaStreamDestroy(s3);
  Report("cudaStreamDestroy(s3)", r);
  r = cudaStreamDestroy(nullptr);
  Report("cudaStreamDestroy(null)", r);
  r = cudaFree(host.data());
  Report("cudaFree(host)", r);  // 1
  r = cudaFree(a0);
  Report("cudaFree(a0)", r);
  r = cudaFree(b0);
  Report("cudaFree(b0)", r);
  r = cudaFree(a1);
  Report("cudaFree(a1)", r);
  r = cudaFree(a4);
  Report("cudaFree(a4)", r);
  r = cudaFree(nullptr);
  Report("cudaFree(null)", r);
  // The last call fails, so the final sticky error is the script's own.
  r = cudaMemcpyPeer(a1, 1, a0, 0, 16);
  Report("cudaMemcpyPeer(freed)", r);
  r = cudaGetLastError();
  std::printf("final cudaGetLastError=%d peek=%d\n", static_cast<int>(r), static_cast<int>(cudaPeekAtLastError()));
  return 0;
}

// --- helpers for the trace workloads --------------------------------------------------------------

using p2ptrace::test::AllocOn;

// `pairs`: known pairs on demo-8gpu (0-3 and 4-7 are NVLink islands; cross-island pairs cannot peer).
//   0->1  direct (peer access enabled 0->1): 3 x 1 MiB cudaMemcpyPeer + 1 x 64 MiB   = 4 calls, 67 MiB
//   0->4  host-staged:  2 x 4 MiB cudaMemcpyPeerAsync on a stream + 1 x 64 MiB       = 3 calls, 72 MiB
//   2->3  host-staged (capable, never enabled): 1 x 2 MiB cudaMemcpy(cudaMemcpyDefault)
//   0->0  same device: 5 x 1 MiB cudaMemcpyAsync D2D (counted, not a pair)
int Pairs() {
  void* src0 = AllocOn(0, 64 * MiB);
  void* other0 = AllocOn(0, MiB);
  void* dst1 = AllocOn(1, 64 * MiB);
  void* buf2 = AllocOn(2, 2 * MiB);
  void* buf3 = AllocOn(3, 2 * MiB);
  void* dst4 = AllocOn(4, 64 * MiB);
  P2PTRACE_CHECK(cudaSetDevice(0));
  P2PTRACE_CHECK(cudaDeviceEnablePeerAccess(1, 0));
  for (int i = 0; i < 3; ++i) P2PTRACE_CHECK(cudaMemcpyPeer(dst1, 1, src0, 0, MiB));
  cudaStream_t s;
  P2PTRACE_CHECK(cudaStreamCreate(&s));
  for (int i = 0; i < 2; ++i) P2PTRACE_CHECK(cudaMemcpyPeerAsync(dst4, 4, src0, 0, 4 * MiB, s));
  P2PTRACE_CHECK(cudaMemcpy(buf3, buf2, 2 * MiB, cudaMemcpyDefault));
  for (int i = 0; i < 5; ++i) P2PTRACE_CHECK(cudaMemcpyAsync(other0, src0, MiB, cudaMemcpyDeviceToDevice, s));
  P2PTRACE_CHECK(cudaMemcpyPeer(dst1, 1, src0, 0, 64 * MiB));
  P2PTRACE_CHECK(cudaMemcpyPeer(dst4, 4, src0, 0, 64 * MiB));
  P2PTRACE_CHECK(cudaStreamSynchronize(s));
  P2PTRACE_CHECK(cudaDeviceSynchronize());
  P2PTRACE_CHECK(cudaStreamDestroy(s));
  std::printf("pairs done pid=%d\n", static_cast<int>(getpid()));
  return 0;
}

// `hostcopies`: copies between pageable host memory and devices (cudaMemcpyDefault) are not pairs,
// wherever the host memory lies — also in the same aligned 2 MiB block as a device allocation, when
// the runtime leaves free pages there: those are mapped as anonymous host memory.
int HostCopies() {
  void* dev4 = AllocOn(4, MiB);
  auto d = reinterpret_cast<uintptr_t>(dev4);
  uintptr_t block = d & ~((uintptr_t{1} << 21) - 1);
  // Every free page of the block becomes host memory (so no later allocation lands there either).
  void* host = nullptr;
  for (uintptr_t a = block; a < block + (uintptr_t{2} << 20); a += 4 * KiB) {
    if (a + 4 * KiB > d && a < d + MiB) continue;  // the device allocation itself
    void* p = mmap(reinterpret_cast<void*>(a), 4 * KiB, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == reinterpret_cast<void*>(a)) {
      if (host == nullptr) host = p;
    } else if (p != MAP_FAILED) {
      munmap(p, 4 * KiB);  // a kernel that ignores the flag
    }
  }
  // The simulated runtime keeps each GPU's memory in a reserved range of its own (as CUDA's unified
  // addressing does), so usually no page is free there: then ordinary host memory it is.
  static char fallback[4 * KiB];
  if (host == nullptr) host = fallback;
  std::memset(host, 5, 4 * KiB);
  void* dev1 = AllocOn(1, MiB);
  P2PTRACE_CHECK(cudaSetDevice(0));
  P2PTRACE_CHECK(cudaMemcpy(dev1, host, 4 * KiB, cudaMemcpyDefault));  // host -> device 1
  P2PTRACE_CHECK(cudaMemcpy(host, dev1, 4 * KiB, cudaMemcpyDefault));  // device 1 -> host
  P2PTRACE_CHECK(cudaMemcpy(dev4, host, 4 * KiB, cudaMemcpyDefault));  // host -> device 4
  P2PTRACE_CHECK(cudaDeviceSynchronize());
  std::printf("hostcopies done\n");
  return 0;
}

// Peer access 0->1 and two 4 KiB buffers, for the copy loops below.
struct PeerBuffers {
  void* src0;
  void* dst1;
};
PeerBuffers SetUpPeer01(size_t dst_bytes = 4 * KiB) {
  PeerBuffers b{AllocOn(0, 4 * KiB), AllocOn(1, dst_bytes)};
  P2PTRACE_CHECK(cudaSetDevice(0));
  P2PTRACE_CHECK(cudaDeviceEnablePeerAccess(1, 0));
  return b;
}

void Copies01(const PeerBuffers& b, int n) {
  for (int i = 0; i < n; ++i) P2PTRACE_CHECK(cudaMemcpyPeer(b.dst1, 1, b.src0, 0, 4 * KiB));
}

int Crash(int n, const std::string& how) {
  PeerBuffers b = SetUpPeer01();
  Copies01(b, n);
  std::printf("copied %d\n", n);
  std::fflush(stdout);
  if (how == "kill") {
    kill(getpid(), SIGKILL);
  } else if (how == "segv") {
    int* volatile nowhere = nullptr;
    *nowhere = 1;  // a real invalid write, not a raise()
  } else if (how == "abort") {
    std::abort();
  } else if (how == "_exit") {
    _exit(7);
  }
  std::fprintf(stderr, "shim_workload: unknown crash kind %s\n", how.c_str());
  return 2;
}

// Parent: 3 copies, fork, 7 copies after the child ended. Child (no exec): 5 copies, then _exit(0).
int Fork() {
  PeerBuffers b = SetUpPeer01();
  Copies01(b, 3);
  std::fflush(stdout);
  pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    Copies01(b, 5);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  Copies01(b, 7);
  std::printf("parent=%d child=%d child_status=%d\n", static_cast<int>(getpid()), static_cast<int>(child), status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

// Parent: 2 copies, then fork + exec of this program's `pairs`.
int ForkExec() {
  PeerBuffers b = SetUpPeer01();
  Copies01(b, 2);
  std::fflush(stdout);
  pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    execl("/proc/self/exe", "shim_workload", "pairs", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("parent=%d child=%d child_status=%d\n", static_cast<int>(getpid()), static_cast<int>(child), status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int Threads(int threads, int copies) {
  PeerBuffers b = SetUpPeer01(static_cast<size_t>(threads) * 4 * KiB);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&b, t, copies] {
      P2PTRACE_CHECK(cudaSetDevice(0));
      cudaStream_t s;
      P2PTRACE_CHECK(cudaStreamCreate(&s));
      void* dst = static_cast<char*>(b.dst1) + static_cast<size_t>(t) * 4 * KiB;
      for (int i = 0; i < copies; ++i) P2PTRACE_CHECK(cudaMemcpyPeerAsync(dst, 1, b.src0, 0, 4 * KiB, s));
      P2PTRACE_CHECK(cudaStreamSynchronize(s));
      P2PTRACE_CHECK(cudaStreamDestroy(s));
    });
  }
  for (std::thread& t : pool) t.join();
  std::printf("threads %d x %d done\n", threads, copies);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "script") return Script();
  if (cmd == "pairs") return Pairs();
  if (cmd == "hostcopies") return HostCopies();
  if (cmd == "crash" && argc == 4) return Crash(std::atoi(argv[2]), argv[3]);
  if (cmd == "fork") return Fork();
  if (cmd == "forkexec") return ForkExec();
  if (cmd == "threads" && argc == 4) return Threads(std::atoi(argv[2]), std::atoi(argv[3]));
  std::fprintf(stderr,
               "usage: shim_workload script | pairs | hostcopies | crash N kill|segv|abort|_exit | fork | forkexec | threads T N\n");
  return 64;
}
