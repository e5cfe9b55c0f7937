// What each intercepted CUDA function does around the real call (the list: cuda_functions.h).
// Rules every hook keeps: the real function is called exactly once with the caller's arguments and
// its result is returned unchanged; the shim never calls cudaGetLastError; its own CUDA calls go
// to the same runtime (node) as the intercepted call and are made only where they cannot fail
// (so they cannot leave a sticky error behind); a query that switches the device switches it back.
#include "shim/interpose/cuda_hooks.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "p2ptrace/vocabulary.h"
#include "shim/interpose/memory_map.h"
#include "shim/record/copy_timer.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {

// The trace generation (file) each runtime node was last described in (NoteRuntime, after a
// successful call); a fork child's new file must be described again.
std::atomic<uint64_t> g_runtime_noted[static_cast<int>(Node::kCount)];

bool RuntimeAnswered(const CudaRuntime& rt) {
  return g_runtime_noted[static_cast<int>(rt.node)].load(std::memory_order_relaxed) ==
         detail::g_generation.load(std::memory_order_relaxed);
}

namespace {

constexpr int kMaxDev = P2PTRACE_MAX_DEVICES;
constexpr uint8_t kPeerByApi = 1, kPeerByIpc = 2;

// Peer mappings in force, per direction [from][to], as the wrapped calls changed them.
std::atomic<uint8_t> g_peer[kMaxDev][kMaxDev];
// The transport of a direct copy per pair; 0 until first needed.
std::atomic<uint8_t> g_link[kMaxDev][kMaxDev];

std::mutex g_slow_mu;  // slow paths only

// Streams the application created, with their device (for timing events on the right device).
std::mutex g_streams_mu;
std::unordered_map<cudaStream_t, int>& Streams() {
  static auto* m = new std::unordered_map<cudaStream_t, int>();
  return *m;
}

bool ValidDevice(int d) { return d >= 0 && d < kMaxDev; }

int CurrentDevice(const CudaRuntime& rt) {
  int d = -1;
  return rt.GetDevice(&d) == cudaSuccess ? d : -1;
}

// Once per runtime node and trace file: what the header should say about it. Called only after a
// call of that runtime succeeded, so the runtime's own queries here cannot fail and leave an error.
void NoteRuntime(const CudaRuntime& rt) {
  uint64_t gen = detail::g_generation.load(std::memory_order_relaxed);
  if (g_runtime_noted[static_cast<int>(rt.node)].load(std::memory_order_relaxed) == gen) return;
  std::lock_guard<std::mutex> lock(g_slow_mu);
  if (g_runtime_noted[static_cast<int>(rt.node)].exchange(gen) == gen) return;
  p2ptrace_file_header* h = TraceWriter::header();
  if (h == nullptr || !rt.complete) return;
  for (int a = 0; a < kMaxDev; ++a)  // links learnt before this file opened (a fork child's)
    for (int b = 0; b < kMaxDev; ++b) h->direct_transport[a][b] = g_link[a][b].load(std::memory_order_relaxed);
  static const uint32_t kFlag[] = {P2PTRACE_CAPTURE_CUDART_11, P2PTRACE_CAPTURE_CUDART_12, P2PTRACE_CAPTURE_CUDART_13};
  __atomic_fetch_or(&h->capture_flags, kFlag[static_cast<int>(rt.node)], __ATOMIC_RELAXED);
  int v = 0;
  if (rt.RuntimeGetVersion(&v) == cudaSuccess) h->cuda_runtime_version = v;
  if (rt.DriverGetVersion(&v) == cudaSuccess) h->cuda_driver_version = v;
  int n = 0;
  if (rt.GetDeviceCount(&n) == cudaSuccess) {
    h->device_count = n;
    for (int d = 0; d < n && d < kMaxDev; ++d) {
      char bus[32] = {};
      if (rt.DeviceGetPCIBusId(bus, sizeof bus, d) != cudaSuccess) continue;
      for (char* c = bus; *c; ++c) *c = static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
      size_t len = std::min(std::strlen(bus), sizeof h->bus_id[d] - 1);  // "0000:1a:00.0" fits
      std::memcpy(h->bus_id[d], bus, len);
      h->bus_id[d][len] = '\0';
    }
  }
}

// Whether to record, given the intercepted call's result.
bool Ready(const CudaRuntime& rt, cudaError_t r) {
  if (!TraceWriter::Ready()) return false;
  if (r == cudaSuccess) NoteRuntime(rt);
  return true;
}

// --- NVML, for the link type of a direct pair ---------------------------------------------------

struct Nvml {
  bool ok = false;
  int (*GetHandleByPciBusId)(const char*, void**) = nullptr;
  int (*GetP2PStatus)(void*, void*, int, int*) = nullptr;
};

const Nvml& LoadNvml() {
  static Nvml nvml = [] {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return n;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    n.GetHandleByPciBusId = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.GetP2PStatus = reinterpret_cast<int (*)(void*, void*, int, int*)>(dlsym(lib, "nvmlDeviceGetP2PStatus"));
    n.ok = init && n.GetHandleByPciBusId && n.GetP2PStatus && init() == 0;
    return n;
  }();
  return nvml;
}

__attribute__((noinline, cold)) uint8_t ResolveLink(const CudaRuntime& rt, int a, int b) {
  std::lock_guard<std::mutex> lock(g_slow_mu);
  if (uint8_t t = g_link[a][b].load(std::memory_order_relaxed)) return t;
  uint8_t t = P2PTRACE_TRANSPORT_P2P;  // direct, link unknown
  char bus_a[32] = {}, bus_b[32] = {};
  const Nvml& nvml = LoadNvml();
  if (nvml.ok && rt.DeviceGetPCIBusId(bus_a, sizeof bus_a, a) == cudaSuccess &&
      rt.DeviceGetPCIBusId(bus_b, sizeof bus_b, b) == cudaSuccess) {
    void *ha = nullptr, *hb = nullptr;
    int nvlink = -1, read = -1;
    constexpr int kNvmlP2PCapsRead = 0, kNvmlP2PCapsNvlink = 2;
    if (nvml.GetHandleByPciBusId(bus_a, &ha) == 0 && nvml.GetHandleByPciBusId(bus_b, &hb) == 0 &&
        nvml.GetP2PStatus(ha, hb, kNvmlP2PCapsNvlink, &nvlink) == 0) {
      t = nvlink == 0 ? P2PTRACE_TRANSPORT_NVLINK : P2PTRACE_TRANSPORT_PCIE_P2P;
      if (p2ptrace_file_header* h = TraceWriter::header()) {
        __atomic_fetch_or(&h->capture_flags, static_cast<uint32_t>(P2PTRACE_CAPTURE_NVML_LINKS), __ATOMIC_RELAXED);
        // Whether the driver allows P2P at all: what "expected" means for a host-staged pair.
        if (nvml.GetP2PStatus(ha, hb, kNvmlP2PCapsRead, &read) == 0 && read >= 0 && read < 7)
          h->nvml_p2p_status[a][b] = h->nvml_p2p_status[b][a] = static_cast<uint8_t>(read + 1);
      }
    }
  }
  g_link[a][b].store(t, std::memory_order_relaxed);
  g_link[b][a].store(t, std::memory_order_relaxed);
  if (p2ptrace_file_header* h = TraceWriter::header()) h->direct_transport[a][b] = h->direct_transport[b][a] = t;
  return t;
}

// The path a copy a→b takes now: direct when either side mapped the other.
inline __attribute__((always_inline)) uint8_t PathNow(const CudaRuntime& rt, int a, int b, int* path) {
  bool direct = (g_peer[a][b].load(std::memory_order_relaxed) | g_peer[b][a].load(std::memory_order_relaxed)) != 0;
  *path = direct ? 0 : 1;
  uint8_t t = g_link[a][b].load(std::memory_order_relaxed);
  if (t == 0) t = ResolveLink(rt, a, b);  // once per pair: what a direct copy would use
  return direct ? t : static_cast<uint8_t>(P2PTRACE_TRANSPORT_HOST_STAGED);
}

// --- copies ----------------------------------------------------------------------------------------

struct Copy {
  uint8_t api;
  uint32_t flags;          // p2ptrace_copy_flag
  const void* dst;
  const void* src;
  int dst_dev = -1, src_dev = -1;  // given by the call (peer copies), else looked up
  uint64_t bytes;
  cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
  cudaStream_t stream = nullptr;  // the stream it runs on: 0 is the legacy default stream
};

bool HostSide(cudaMemcpyKind k) {
  return k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToHost || k == cudaMemcpyHostToHost;
}

// Where timing events for this copy go: the stream's device, when the shim knows it.
int StreamDevice(const CudaRuntime& rt, cudaStream_t stream) {
  uintptr_t s = reinterpret_cast<uintptr_t>(stream);
  if (s == 0 || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return CurrentDevice(rt);
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = Streams().find(stream);
  return it == Streams().end() ? -1 : it->second;
}

inline __attribute__((always_inline)) bool Sampled(const p2ptrace_pair_counters* counter, uint64_t bytes) {
  static const SampleSpec& s = TraceWriter::config().sample;  // the config never moves
  if (!s.enabled) return false;
  uint64_t n = __atomic_load_n(&counter->calls, __ATOMIC_RELAXED);
  return n < s.first || n % s.every == 0 || bytes >= s.min_bytes;
}

inline __attribute__((always_inline)) void AccountAt(p2ptrace_pair_counters* c, cudaError_t r, uint64_t bytes) {
  if (c == nullptr) return;
  if (r == cudaSuccess) {
    AddRelaxed(&c->calls, 1);
    AddRelaxed(&c->bytes, bytes);
  } else {
    AddRelaxed(&c->errors, 1);
  }
}

inline __attribute__((always_inline)) void Account(int src, int dst, int path, cudaError_t r, uint64_t bytes) {
  AccountAt(TraceWriter::Counter(src, dst, path), r, bytes);
}

inline __attribute__((always_inline)) void WriteCopy(const Copy& c, int src, int dst, uint8_t transport,
                                                     cudaError_t r, uint32_t seq, uint32_t flags) {
  p2ptrace_copy_record rec{};
  rec.bytes = c.bytes;
  rec.stream = reinterpret_cast<uintptr_t>(c.stream);
  rec.result = r;
  rec.api = c.api;
  rec.src_device = static_cast<int8_t>(src);
  rec.dst_device = static_cast<int8_t>(dst);
  rec.transport = transport;
  rec.flags = c.flags | flags;
  TraceWriter::Append(rec, P2PTRACE_RECORD_COPY, seq);
}


// The current device, asked only of a runtime known to answer (see TraceCopy).
int NotedDevice(const CudaRuntime& rt) { return RuntimeAnswered(rt) ? CurrentDevice(rt) : -1; }

// Counts and records a copy whose sides were found after the fact.
void RecordAfter(const CudaRuntime& rt, const Copy& c, int src, int dst, cudaError_t r) {
  if (src == dst) {
    Account(src, src, 0, r, c.bytes);
    return;
  }
  int path = 0;
  uint8_t transport = PathNow(rt, src, dst, &path);
  Account(src, dst, path, r, c.bytes);
  WriteCopy(c, src, dst, transport, r, TraceWriter::NextSeq(), 0);
}

// TraceCopy's rare path (a side not known, or the runtime not yet heard from), after the copy
// returned r. Out of line, and given the copy's fields rather than the Copy: a Copy whose address
// escapes anywhere in TraceCopy is built in memory on every call (bench/README.md).
__attribute__((noinline)) cudaError_t AfterUnknownSide(const CudaRuntime& rt, uint8_t api, uint32_t flags,
                                                       const void* dst_ptr, const void* src_ptr, uint64_t bytes,
                                                       cudaStream_t stream, int src, int dst, cudaError_t r) {
  const Copy c{api, flags, dst_ptr, src_ptr, src, dst, bytes, cudaMemcpyDeviceToDevice, stream};
  if (r != cudaSuccess) {
    if (ValidDevice(src) && ValidDevice(dst) && src != dst) {
      Account(src, dst, 1, r, c.bytes);
      WriteCopy(c, src, dst, P2PTRACE_TRANSPORT_UNKNOWN, r, TraceWriter::NextSeq(), 0);
    }
    return r;
  }
  NoteRuntime(rt);
  // A side the shim did not allocate: ask the runtime now that the copy succeeded.
  for (auto [p, dev] : {std::pair{c.src, &src}, std::pair{c.dst, &dst}}) {
    if (*dev != MemoryMap::kUnknown) continue;
    cudaPointerAttributes a{};
    if (rt.PointerGetAttributes(&a, p) != cudaSuccess) return r;
    *dev = a.type == cudaMemoryTypeDevice ? a.device : MemoryMap::kHost;
    MemoryMap::Learn(p, *dev);
  }
  if (ValidDevice(src) && ValidDevice(dst)) RecordAfter(rt, c, src, dst, r);
  return r;
}

template <typename Call>
cudaError_t TraceCopy(const CudaRuntime& rt, Copy c, Call&& real) {
  if (!TraceWriter::Ready() || HostSide(c.kind)) return real();
  int src = c.src_dev >= 0 ? c.src_dev : MemoryMap::Lookup(c.src);
  int dst = c.dst_dev >= 0 ? c.dst_dev : MemoryMap::Lookup(c.dst);
  if (src >= 0 && src == dst) {  // the common case, not a pair: count and go
    cudaError_t r = real();
    if (r == cudaSuccess) Account(src, src, 0, r, c.bytes);
    return r;
  }
  // Until the runtime has answered a call successfully, the shim asks it nothing before the call
  // (its question could fail first and leave an error behind for the application to see).
  if (!ValidDevice(src) || !ValidDevice(dst) || !RuntimeAnswered(rt))
    return AfterUnknownSide(rt, c.api, c.flags, c.dst, c.src, c.bytes, c.stream, src, dst, real());
  int path = 0;
  uint8_t transport = PathNow(rt, src, dst, &path);
  uint32_t seq = TraceWriter::NextSeq();
  p2ptrace_pair_counters* counter = TraceWriter::Counter(src, dst, path);
  cudaError_t r;
  uint32_t timed_flag = 0;
  if (counter && Sampled(counter, c.bytes)) {
    TimedCopy t;
    bool timed = CopyTimer::Begin(rt, StreamDevice(rt, c.stream), c.stream, &t);
    r = real();
    if (timed) {
      t.src = src;
      t.dst = dst;
      t.path = path;
      t.transport = transport;
      t.bytes = c.bytes;
      t.seq = seq;
      CopyTimer::End(c.stream, r == cudaSuccess, &t);
      if (r == cudaSuccess) timed_flag = P2PTRACE_COPY_TIMED;
    }
  } else {
    r = real();
  }
  AccountAt(counter, r, c.bytes);
  WriteCopy(c, src, dst, transport, r, seq, timed_flag);
  return r;
}

void WritePeer(uint8_t api, int device, int peer, cudaError_t r, int value, int attr) {
  p2ptrace_peer_record rec{};
  rec.api = api;
  rec.device = static_cast<int8_t>(device);
  rec.peer = static_cast<int8_t>(peer);
  rec.result = r;
  rec.value = value;
  rec.attr = attr;
  TraceWriter::Append(rec, P2PTRACE_RECORD_PEER, TraceWriter::NextSeq());
}

void WriteIpc(uint8_t api, int device, int owner, cudaError_t r, const void* address) {
  p2ptrace_ipc_record rec{};
  rec.api = api;
  rec.device = static_cast<int8_t>(device);
  rec.owner_device = static_cast<int8_t>(owner);
  rec.result = r;
  rec.address = reinterpret_cast<uintptr_t>(address);
  TraceWriter::Append(rec, P2PTRACE_RECORD_IPC, TraceWriter::NextSeq());
}

cudaStream_t PerThread(cudaStream_t s) { return s == nullptr ? cudaStreamPerThread : s; }


uint64_t Bytes3D(const cudaMemcpy3DPeerParms* p) {
  return p ? static_cast<uint64_t>(p->extent.width) * p->extent.height * p->extent.depth : 0;
}

}  // namespace

// ================================================================================================
// Bookkeeping


namespace hooks {

// A process that allocates device memory "used CUDA": its trace exists even if it never copies.
static void NoteAlloc(const CudaRuntime& rt, cudaError_t r, void** p, size_t n) {
  if (r == cudaSuccess && p != nullptr && *p != nullptr) {
    MemoryMap::Add(*p, n, CurrentDevice(rt));
    Ready(rt, r);
  }
}

cudaError_t cudaMalloc(const CudaRuntime& rt, Real<decltype(&::cudaMalloc)> real, void** p, size_t n) {
  cudaError_t r = real(p, n);
  NoteAlloc(rt, r, p, n);
  return r;
}
cudaError_t cudaMallocAsync(const CudaRuntime& rt, Real<decltype(&::cudaMallocAsync)> real, void** p, size_t n,
                            cudaStream_t s) {
  cudaError_t r = real(p, n, s);
  NoteAlloc(rt, r, p, n);
  return r;
}
cudaError_t cudaMallocAsync_ptsz(const CudaRuntime& rt, Real<decltype(&::cudaMallocAsync_ptsz)> real, void** p,
                                 size_t n, cudaStream_t s) {
  cudaError_t r = real(p, n, s);
  NoteAlloc(rt, r, p, n);
  return r;
}

// The range leaves the map before the real free: afterwards the address may already be reused.
cudaError_t cudaFree(const CudaRuntime&, Real<decltype(&::cudaFree)> real, void* p) {
  MemoryMap::Remove(p);
  return real(p);
}
cudaError_t cudaFreeAsync(const CudaRuntime&, Real<decltype(&::cudaFreeAsync)> real, void* p, cudaStream_t s) {
  MemoryMap::Remove(p);
  return real(p, s);
}
cudaError_t cudaFreeAsync_ptsz(const CudaRuntime&, Real<decltype(&::cudaFreeAsync_ptsz)> real, void* p,
                               cudaStream_t s) {
  MemoryMap::Remove(p);
  return real(p, s);
}

static void NoteStream(const CudaRuntime& rt, cudaError_t r, cudaStream_t* s) {
  if (r != cudaSuccess || s == nullptr) return;
  int d = CurrentDevice(rt);
  std::lock_guard<std::mutex> lock(g_streams_mu);
  Streams()[*s] = d;
}
cudaError_t cudaStreamCreate(const CudaRuntime& rt, Real<decltype(&::cudaStreamCreate)> real, cudaStream_t* s) {
  cudaError_t r = real(s);
  NoteStream(rt, r, s);
  return r;
}
cudaError_t cudaStreamCreateWithFlags(const CudaRuntime& rt, Real<decltype(&::cudaStreamCreateWithFlags)> real,
                                      cudaStream_t* s, unsigned int f) {
  cudaError_t r = real(s, f);
  NoteStream(rt, r, s);
  return r;
}
cudaError_t cudaStreamCreateWithPriority(const CudaRuntime& rt, Real<decltype(&::cudaStreamCreateWithPriority)> real,
                                         cudaStream_t* s, unsigned int f, int prio) {
  cudaError_t r = real(s, f, prio);
  NoteStream(rt, r, s);
  return r;
}
cudaError_t cudaStreamDestroy(const CudaRuntime&, Real<decltype(&::cudaStreamDestroy)> real, cudaStream_t s) {
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    Streams().erase(s);
  }
  return real(s);
}

cudaError_t cudaStreamBeginCapture(const CudaRuntime&, Real<decltype(&::cudaStreamBeginCapture)> real,
                                   cudaStream_t s, cudaStreamCaptureMode m) {
  CopyTimer::CaptureBegan();  // before the capture starts, so no event lands inside it
  cudaError_t r = real(s, m);
  if (r != cudaSuccess) CopyTimer::CaptureEnded();
  return r;
}
cudaError_t cudaStreamBeginCapture_ptsz(const CudaRuntime&, Real<decltype(&::cudaStreamBeginCapture_ptsz)> real,
                                        cudaStream_t s, cudaStreamCaptureMode m) {
  CopyTimer::CaptureBegan();
  cudaError_t r = real(s, m);
  if (r != cudaSuccess) CopyTimer::CaptureEnded();
  return r;
}
// A capture ends with EndCapture whether it succeeded or was invalidated; IllegalState: none was running.
cudaError_t cudaStreamEndCapture(const CudaRuntime&, Real<decltype(&::cudaStreamEndCapture)> real, cudaStream_t s,
                                 cudaGraph_t* g) {
  cudaError_t r = real(s, g);
  if (r != cudaErrorIllegalState && r != cudaErrorInvalidResourceHandle && r != cudaErrorInvalidValue)
    CopyTimer::CaptureEnded();
  return r;
}
cudaError_t cudaStreamEndCapture_ptsz(const CudaRuntime&, Real<decltype(&::cudaStreamEndCapture_ptsz)> real,
                                      cudaStream_t s, cudaGraph_t* g) {
  cudaError_t r = real(s, g);
  if (r != cudaErrorIllegalState && r != cudaErrorInvalidResourceHandle && r != cudaErrorInvalidValue)
    CopyTimer::CaptureEnded();
  return r;
}

// ================================================================================================
// Peer capability and access

cudaError_t cudaDeviceCanAccessPeer(const CudaRuntime& rt, Real<decltype(&::cudaDeviceCanAccessPeer)> real, int* can,
                                    int dev, int peer) {
  cudaError_t r = real(can, dev, peer);
  if (Ready(rt, r))
    WritePeer(P2PTRACE_API_cudaDeviceCanAccessPeer, dev, peer, r, r == cudaSuccess && can ? *can : -1, 0);
  return r;
}

cudaError_t cudaDeviceGetP2PAttribute(const CudaRuntime& rt, Real<decltype(&::cudaDeviceGetP2PAttribute)> real,
                                      int* v, cudaDeviceP2PAttr a, int src, int dst) {
  cudaError_t r = real(v, a, src, dst);
  if (Ready(rt, r))
    WritePeer(P2PTRACE_API_cudaDeviceGetP2PAttribute, src, dst, r, r == cudaSuccess && v ? *v : -1,
              static_cast<int>(a));
  return r;
}

cudaError_t cudaDeviceEnablePeerAccess(const CudaRuntime& rt, Real<decltype(&::cudaDeviceEnablePeerAccess)> real,
                                       int peer, unsigned int flags) {
  cudaError_t r = real(peer, flags);
  if (!Ready(rt, r)) return r;
  int d = NotedDevice(rt);
  // 704 means it was already on: either way the mapping exists now.
  if ((r == cudaSuccess || r == cudaErrorPeerAccessAlreadyEnabled) && ValidDevice(d) && ValidDevice(peer))
    g_peer[d][peer].fetch_or(kPeerByApi, std::memory_order_relaxed);
  WritePeer(P2PTRACE_API_cudaDeviceEnablePeerAccess, d, peer, r, static_cast<int>(flags), 0);
  return r;
}

cudaError_t cudaDeviceDisablePeerAccess(const CudaRuntime& rt, Real<decltype(&::cudaDeviceDisablePeerAccess)> real,
                                        int peer) {
  cudaError_t r = real(peer);
  if (!Ready(rt, r)) return r;
  int d = NotedDevice(rt);
  if ((r == cudaSuccess || r == cudaErrorPeerAccessNotEnabled) && ValidDevice(d) && ValidDevice(peer))
    g_peer[d][peer].fetch_and(static_cast<uint8_t>(~kPeerByApi), std::memory_order_relaxed);
  WritePeer(P2PTRACE_API_cudaDeviceDisablePeerAccess, d, peer, r, 0, 0);
  return r;
}

// Pools are stream-ordered memory; the access it grants is recorded, not modelled per pointer.
cudaError_t cudaMemPoolSetAccess(const CudaRuntime& rt, Real<decltype(&::cudaMemPoolSetAccess)> real,
                                 cudaMemPool_t pool, const cudaMemAccessDesc* d, size_t n) {
  cudaError_t r = real(pool, d, n);
  if (!Ready(rt, r) || d == nullptr) return r;
  for (size_t i = 0; i < n; ++i)
    if (d[i].location.type == cudaMemLocationTypeDevice)
      WritePeer(P2PTRACE_API_cudaMemPoolSetAccess, -1, d[i].location.id, r, static_cast<int>(d[i].flags), 0);
  return r;
}

// ================================================================================================
// Copies

cudaError_t cudaMemcpyPeer(const CudaRuntime& rt, Real<decltype(&::cudaMemcpyPeer)> real, void* dst, int dd,
                           const void* src, int sd, size_t n) {
  Copy c{P2PTRACE_API_cudaMemcpyPeer, 0, dst, src, dd, sd, n, cudaMemcpyDeviceToDevice, nullptr};
  return TraceCopy(rt, c, [&] { return real(dst, dd, src, sd, n); });
}
cudaError_t cudaMemcpyPeerAsync(const CudaRuntime& rt, Real<decltype(&::cudaMemcpyPeerAsync)> real, void* dst, int dd,
                                const void* src, int sd, size_t n, cudaStream_t s) {
  Copy c{P2PTRACE_API_cudaMemcpyPeerAsync, P2PTRACE_COPY_ASYNC, dst, src, dd, sd, n, cudaMemcpyDeviceToDevice, s};
  return TraceCopy(rt, c, [&] { return real(dst, dd, src, sd, n, s); });
}
cudaError_t cudaMemcpy(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy)> real, void* dst, const void* src, size_t n,
                       cudaMemcpyKind k) {
  Copy c{P2PTRACE_API_cudaMemcpy, 0, dst, src, -1, -1, n, k, nullptr};
  return TraceCopy(rt, c, [&] { return real(dst, src, n, k); });
}
cudaError_t cudaMemcpy_ptds(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy_ptds)> real, void* dst,
                            const void* src, size_t n, cudaMemcpyKind k) {
  Copy c{P2PTRACE_API_cudaMemcpy, P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, -1, -1, n, k, cudaStreamPerThread};
  return TraceCopy(rt, c, [&] { return real(dst, src, n, k); });
}
cudaError_t cudaMemcpyAsync(const CudaRuntime& rt, Real<decltype(&::cudaMemcpyAsync)> real, void* dst,
                            const void* src, size_t n, cudaMemcpyKind k, cudaStream_t s) {
  Copy c{P2PTRACE_API_cudaMemcpyAsync, P2PTRACE_COPY_ASYNC, dst, src, -1, -1, n, k, s};
  return TraceCopy(rt, c, [&] { return real(dst, src, n, k, s); });
}
// In the _ptsz entry points stream 0 is the per-thread default stream.
cudaError_t cudaMemcpyAsync_ptsz(const CudaRuntime& rt, Real<decltype(&::cudaMemcpyAsync_ptsz)> real, void* dst,
                                 const void* src, size_t n, cudaMemcpyKind k, cudaStream_t s) {
  Copy c{P2PTRACE_API_cudaMemcpyAsync, P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, -1, -1, n, k,
         PerThread(s)};
  return TraceCopy(rt, c, [&] { return real(dst, src, n, k, s); });
}
cudaError_t cudaMemcpy2D(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy2D)> real, void* dst, size_t dp,
                         const void* src, size_t sp, size_t w, size_t h, cudaMemcpyKind k) {
  Copy c{P2PTRACE_API_cudaMemcpy2D, 0, dst, src, -1, -1, uint64_t{w} * h, k, nullptr};
  return TraceCopy(rt, c, [&] { return real(dst, dp, src, sp, w, h, k); });
}
cudaError_t cudaMemcpy2D_ptds(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy2D_ptds)> real, void* dst, size_t dp,
                              const void* src, size_t sp, size_t w, size_t h, cudaMemcpyKind k) {
  Copy c{P2PTRACE_API_cudaMemcpy2D, P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, -1, -1, uint64_t{w} * h, k,
         cudaStreamPerThread};
  return TraceCopy(rt, c, [&] { return real(dst, dp, src, sp, w, h, k); });
}
cudaError_t cudaMemcpy2DAsync(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy2DAsync)> real, void* dst, size_t dp,
                              const void* src, size_t sp, size_t w, size_t h, cudaMemcpyKind k, cudaStream_t s) {
  Copy c{P2PTRACE_API_cudaMemcpy2DAsync, P2PTRACE_COPY_ASYNC, dst, src, -1, -1, uint64_t{w} * h, k, s};
  return TraceCopy(rt, c, [&] { return real(dst, dp, src, sp, w, h, k, s); });
}
cudaError_t cudaMemcpy2DAsync_ptsz(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy2DAsync_ptsz)> real, void* dst,
                                   size_t dp, const void* src, size_t sp, size_t w, size_t h, cudaMemcpyKind k,
                                   cudaStream_t s) {
  Copy c{P2PTRACE_API_cudaMemcpy2DAsync, P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, -1, -1,
         uint64_t{w} * h, k, PerThread(s)};
  return TraceCopy(rt, c, [&] { return real(dst, dp, src, sp, w, h, k, s); });
}

static Copy Copy3D(uint8_t api, uint32_t flags, const cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  return Copy{api, flags, p->dstPtr.ptr, p->srcPtr.ptr, p->dstDevice, p->srcDevice, Bytes3D(p),
              cudaMemcpyDeviceToDevice, s};
}
cudaError_t cudaMemcpy3DPeer(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy3DPeer)> real,
                             const cudaMemcpy3DPeerParms* p) {
  if (p == nullptr) return real(p);
  return TraceCopy(rt, Copy3D(P2PTRACE_API_cudaMemcpy3DPeer, 0, p, nullptr), [&] { return real(p); });
}
cudaError_t cudaMemcpy3DPeer_ptds(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy3DPeer_ptds)> real,
                                  const cudaMemcpy3DPeerParms* p) {
  if (p == nullptr) return real(p);
  return TraceCopy(rt, Copy3D(P2PTRACE_API_cudaMemcpy3DPeer, P2PTRACE_COPY_PER_THREAD_STREAM, p, cudaStreamPerThread),
                   [&] { return real(p); });
}
cudaError_t cudaMemcpy3DPeerAsync(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy3DPeerAsync)> real,
                                  const cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  if (p == nullptr) return real(p, s);
  return TraceCopy(rt, Copy3D(P2PTRACE_API_cudaMemcpy3DPeerAsync, P2PTRACE_COPY_ASYNC, p, s), [&] { return real(p, s); });
}
cudaError_t cudaMemcpy3DPeerAsync_ptsz(const CudaRuntime& rt, Real<decltype(&::cudaMemcpy3DPeerAsync_ptsz)> real,
                                       const cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  if (p == nullptr) return real(p, s);
  return TraceCopy(rt,
                   Copy3D(P2PTRACE_API_cudaMemcpy3DPeerAsync, P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM,
                          p, PerThread(s)),
                   [&] { return real(p, s); });
}

// ================================================================================================
// IPC

cudaError_t cudaIpcGetMemHandle(const CudaRuntime& rt, Real<decltype(&::cudaIpcGetMemHandle)> real,
                                cudaIpcMemHandle_t* h, void* p) {
  cudaError_t r = real(h, p);
  if (Ready(rt, r)) WriteIpc(P2PTRACE_API_cudaIpcGetMemHandle, NotedDevice(rt), MemoryMap::Lookup(p), r, p);
  return r;
}

cudaError_t cudaIpcOpenMemHandle(const CudaRuntime& rt, Real<decltype(&::cudaIpcOpenMemHandle)> real, void** p,
                                 cudaIpcMemHandle_t h, unsigned int f) {
  cudaError_t r = real(p, h, f);
  if (!Ready(rt, r)) return r;
  int d = NotedDevice(rt), owner = -1;
  if (r == cudaSuccess && p != nullptr) {
    cudaPointerAttributes a{};
    if (rt.PointerGetAttributes(&a, *p) == cudaSuccess && a.type == cudaMemoryTypeDevice) {
      owner = a.device;
      MemoryMap::Learn(*p, owner);
      // cudaIpcMemLazyEnablePeerAccess maps the owner's memory into this device: copies go direct.
      if ((f & cudaIpcMemLazyEnablePeerAccess) && ValidDevice(d) && ValidDevice(owner) && owner != d)
        g_peer[d][owner].fetch_or(kPeerByIpc, std::memory_order_relaxed);
    }
  }
  WriteIpc(P2PTRACE_API_cudaIpcOpenMemHandle, d, owner, r, p ? *p : nullptr);
  return r;
}

cudaError_t cudaIpcCloseMemHandle(const CudaRuntime& rt, Real<decltype(&::cudaIpcCloseMemHandle)> real, void* p) {
  int owner = MemoryMap::Lookup(p);
  cudaError_t r = real(p);
  if (Ready(rt, r)) WriteIpc(P2PTRACE_API_cudaIpcCloseMemHandle, NotedDevice(rt), owner, r, p);
  return r;
}

}  // namespace hooks
}  // namespace p2ptrace::shim

// ================================================================================================
// The exported wrappers: every function of cuda_functions.h, once per runtime version node, bound
// with .symver to that node (cudaMemcpyPeer@libcudart.so.12, cudaMemcpyPeer@@libcudart.so.13, …).
// A caller linked against cudart 12 thus reaches the wrapper that calls cudart 12, and never the
// other runtime loaded in the same process (notes/interposer.md E4). Unversioned references bind to
// the @@libcudart.so.13 one, which falls back to whatever cudart is loaded.
// The wrapper's first call resolves the real function and the runtime table out of line (slow),
// so that the common path has no call to keep registers across: two loads, then the hook.
using p2ptrace::shim::CachedReal;
using p2ptrace::shim::Node;
using p2ptrace::shim::Runtime;

#define P2PTRACE_WRAP(node, suffix, version, name, params, args)                                         \
  static std::atomic<void*> p2pw_slot_##name##_##suffix;                                                 \
  __attribute__((noinline, cold)) static cudaError_t p2pw_slow_##name##_##suffix params {                \
    auto real =                                                                                          \
        reinterpret_cast<decltype(&::name)>(CachedReal(&p2pw_slot_##name##_##suffix, #name, node));      \
    if (real == nullptr) return cudaErrorSharedObjectSymbolNotFound;                                     \
    return p2ptrace::shim::hooks::name(Runtime(node), real, P2PTRACE_UNPAREN args);                      \
  }                                                                                                      \
  extern "C" __attribute__((visibility("default"))) cudaError_t p2pw_##name##_##suffix params {          \
    void* real = p2pw_slot_##name##_##suffix.load(std::memory_order_acquire);                            \
    const p2ptrace::shim::CudaRuntime* rt =                                                              \
        p2ptrace::shim::g_runtimes[static_cast<int>(node)].load(std::memory_order_acquire);              \
    if (__builtin_expect(real == nullptr || rt == nullptr, 0))                                           \
      return p2pw_slow_##name##_##suffix(P2PTRACE_UNPAREN args);                                         \
    return p2ptrace::shim::hooks::name(*rt, reinterpret_cast<decltype(&::name)>(real),                   \
                                       P2PTRACE_UNPAREN args);                                           \
  }                                                                                                      \
  __asm__(".symver p2pw_" #name "_" #suffix ", " #name version);

#define P2PTRACE_WRAP_11(name, params, args) P2PTRACE_WRAP(Node::kCudart11, 11, "@libcudart.so.11.0", name, params, args)
#define P2PTRACE_WRAP_12(name, params, args) P2PTRACE_WRAP(Node::kCudart12, 12, "@libcudart.so.12", name, params, args)
#define P2PTRACE_WRAP_13(name, params, args) P2PTRACE_WRAP(Node::kCudart13, 13, "@@libcudart.so.13", name, params, args)

P2PTRACE_CUDA_FUNCTIONS(P2PTRACE_WRAP_11)
P2PTRACE_CUDA_FUNCTIONS(P2PTRACE_WRAP_12)
P2PTRACE_CUDA_FUNCTIONS(P2PTRACE_WRAP_13)
