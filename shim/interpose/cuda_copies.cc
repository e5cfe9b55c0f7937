// The copy engine: which pair every copy is between, the route it takes (peer mappings, the link),
// the pair's counters and records, the fast path every copy hook is inlined into, and the copy
// hooks and their wrappers (the copy list of cuda_functions.h). What the other hooks, the driver's
// included, share of it is in cuda_hooks.h.
// Every hook keeps the rules written at the top of cuda_hooks.cc.
#include "shim/interpose/cuda_hooks.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cstring>
#include <iterator>
#include <mutex>

#include "p2ptrace/vocabulary.h"
#include "shim/base/fd.h"
#include "shim/interpose/cuda_wrap.h"
#include "shim/interpose/memory_map.h"
#include "shim/interpose/nccl_watchdog.h"
#include "probe/nvml.h"
#include "shim/preflight.h"
#include "shim/record/call_sites.h"
#include "shim/record/copy_timer.h"
#include "shim/record/graphs.h"
#include "shim/record/handle_table.h"
#include "shim/record/trace_writer.h"

// cudaGetDriverEntryPoint is deprecated, not gone: programs built against CUDA 12 still call it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace p2ptrace::shim {

namespace {

constexpr int kMaxDev = P2PTRACE_MAX_DEVICES;


// Peer mappings in force, per direction [from][to], as the wrapped calls changed them.
std::atomic<uint8_t> g_peer[kMaxDev][kMaxDev];
// The transport of a direct copy per pair; 0 until first needed.
std::atomic<uint8_t> g_link[kMaxDev][kMaxDev];
// What a copy a→b records now, in one byte so the hot path makes one load: the transport, with
// kStaged set when it goes through the host; 0 until first needed. Derived from g_peer and g_link
// (SetRoute), rewritten whenever either changes.
constexpr uint8_t kStaged = 0x80;
std::atomic<uint8_t> g_route[kMaxDev][kMaxDev];

std::mutex g_slow_mu;  // slow paths only

// What the copy fast path (OtherCopy) needs of a pair, per runtime node, in one word: the record's
// device and transport bytes (the tag, high half) and the offset of the pair's counters in the
// trace (low half); 0 sends the copy down the slow path. Set there (Fasten, under g_slow_mu) once
// everything the word stands for holds: the trace open, the node's runtime heard from in this
// file, the route resolved; cleared when a route changes (SetRoutes) and in a fork child.
constexpr int kNodes = static_cast<int>(Node::kCount);
// Indexed by PairOf(src, dst): 128 x 128, so that the fast path needs no range check (only pairs of
// devices below kMaxDev are ever set; the untouched rest stays zero pages).
constinit std::atomic<uint64_t> g_fast[kNodes][128 * 128]{};

// Caller holds g_slow_mu.
void ForgetFastPair(int a, int b) {
  for (auto& node : g_fast) {
    node[a << 7 | b].store(0, std::memory_order_relaxed);
    node[b << 7 | a].store(0, std::memory_order_relaxed);
  }
}
void ForgetFastPairs() {  // also a fork child, single-threaded: its file and counters are new
  for (auto& node : g_fast)
    for (int a = 0; a < kMaxDev; ++a)
      for (int b = 0; b < kMaxDev; ++b) node[a << 7 | b].store(0, std::memory_order_relaxed);
}
// A capture begins: every pair's copies take the slow path until no capture runs (Fasten reopens
// them), so that the fast path needs no capture check. Under g_slow_mu after the capture count rose:
// a Fasten either ran before (its word cleared here) or sees the count.
void ShutFastPairs() {
  std::lock_guard<std::mutex> lock(g_slow_mu);
  ForgetFastPairs();
}

// Streams the application created, with their device (for timing events on the right device),
// read by timed copies without a lock, written under g_streams_mu at stream create and destroy. A
// stream missed while the table is rebuilt, or past its capacity, goes untimed (counted as skipped).
std::mutex g_streams_mu;
constinit HandleTable<int, 4096> g_streams;
constexpr int kDriverStream = 1 << 16;  // added to the device of a stream made through the driver


// Once per runtime node and trace file: what the header should say about it. Called only after a
// call of that runtime succeeded, so the runtime's own queries here cannot fail and leave an error.
void NoteRuntime(const CudaRuntime& rt) {
  KeepErrno keep;
  if (NodeAnswered(rt.node)) return;
  std::lock_guard<std::mutex> lock(g_slow_mu);
  if (!MarkNodeAnswered(rt.node)) return;
  p2ptrace_file_header* h = TraceWriter::header();
  if (h == nullptr || !rt.complete) return;
  for (int a = 0; a < kMaxDev; ++a)  // links learnt before this file opened (a fork child's)
    for (int b = 0; b < kMaxDev; ++b) h->direct_transport[a][b] = g_link[a][b].load(std::memory_order_relaxed);
  static const uint32_t kFlag[] = {P2PTRACE_CAPTURE_CUDART_11, P2PTRACE_CAPTURE_CUDART_12, P2PTRACE_CAPTURE_CUDART_13,
                                   P2PTRACE_CAPTURE_DRIVER};
  static_assert(std::size(kFlag) == static_cast<size_t>(Node::kCount));
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

// NVML's answer to "may a→b copy directly, and over NVLink" needs nvmlInit once (probe/nvml.h).
const probe::NvmlApi* InitNvml() {
  static const probe::NvmlApi* nvml = [] {
    const probe::NvmlApi* n = probe::LoadNvml();
    return n && n->Init && n->GetHandleByPciBusId && n->GetP2P && n->Init() == 0 ? n : nullptr;
  }();
  return nvml;
}

__attribute__((noinline, cold)) uint8_t ResolveLink(const CudaRuntime& rt, int a, int b) {
  std::lock_guard<std::mutex> lock(g_slow_mu);
  if (uint8_t t = g_link[a][b].load(std::memory_order_relaxed)) return t;
  uint8_t t = P2PTRACE_TRANSPORT_P2P;  // direct, link unknown
  char bus_a[32] = {}, bus_b[32] = {};
  const probe::NvmlApi* nvml = InitNvml();
  if (nvml != nullptr && rt.DeviceGetPCIBusId(bus_a, sizeof bus_a, a) == cudaSuccess &&
      rt.DeviceGetPCIBusId(bus_b, sizeof bus_b, b) == cudaSuccess) {
    void *ha = nullptr, *hb = nullptr;
    int nvlink = -1, read = -1;
    constexpr int kNvmlP2PCapsRead = 0, kNvmlP2PCapsNvlink = 2;
    if (nvml->GetHandleByPciBusId(bus_a, &ha) == 0 && nvml->GetHandleByPciBusId(bus_b, &hb) == 0 &&
        nvml->GetP2P(ha, hb, kNvmlP2PCapsNvlink, &nvlink) == 0) {
      t = nvlink == 0 ? P2PTRACE_TRANSPORT_NVLINK : P2PTRACE_TRANSPORT_PCIE_P2P;
      if (p2ptrace_file_header* h = TraceWriter::header()) {
        __atomic_fetch_or(&h->capture_flags, static_cast<uint32_t>(P2PTRACE_CAPTURE_NVML_LINKS), __ATOMIC_RELAXED);
        // Whether the driver allows P2P at all: what "expected" means for a host-staged pair.
        if (nvml->GetP2P(ha, hb, kNvmlP2PCapsRead, &read) == 0 && read >= 0 && read < 7)
          h->nvml_p2p_status[a][b] = h->nvml_p2p_status[b][a] = static_cast<uint8_t>(read + 1);
      }
    }
  }
  g_link[a][b].store(t, std::memory_order_relaxed);
  g_link[b][a].store(t, std::memory_order_relaxed);
  if (p2ptrace_file_header* h = TraceWriter::header()) h->direct_transport[a][b] = h->direct_transport[b][a] = t;
  return t;
}

// Recomputes the route of a→b and b→a from the peer mappings and the link (caller holds
// g_slow_mu): direct when either side mapped the other.
void SetRoutes(int a, int b) {
  uint8_t link = g_link[a][b].load(std::memory_order_relaxed);
  if (link == 0) return;  // resolved at the first copy
  bool direct = (g_peer[a][b].load(std::memory_order_relaxed) | g_peer[b][a].load(std::memory_order_relaxed)) != 0;
  uint8_t route = direct ? link : static_cast<uint8_t>(P2PTRACE_TRANSPORT_HOST_STAGED | kStaged);
  g_route[a][b].store(route, std::memory_order_relaxed);
  g_route[b][a].store(route, std::memory_order_relaxed);
  ForgetFastPair(a, b);
}

// A peer mapping from `from` to `to` appeared (or, with set=false, went away).
void ChangePeer(int from, int to, uint8_t how, bool set) {
  std::lock_guard<std::mutex> lock(g_slow_mu);
  if (set) g_peer[from][to].fetch_or(how, std::memory_order_relaxed);
  else g_peer[from][to].fetch_and(static_cast<uint8_t>(~how), std::memory_order_relaxed);
  SetRoutes(from, to);
}

__attribute__((noinline, cold)) uint8_t ResolveRoute(const CudaRuntime& rt, int a, int b) {
  KeepErrno keep;
  ResolveLink(rt, a, b);
  uint8_t route;
  {
    std::lock_guard<std::mutex> lock(g_slow_mu);
    SetRoutes(a, b);
    route = g_route[a][b].load(std::memory_order_relaxed);
  }
  PreflightCopyRoute(rt, a, b, (route & kStaged) == 0);  // the pair's first copy: warn before it runs
  return route;
}

// The route of a copy a→b now: one load, once per pair a resolution.
inline __attribute__((always_inline)) uint8_t Route(const CudaRuntime& rt, int a, int b) {
  uint8_t route = g_route[a][b].load(std::memory_order_relaxed);
  return __builtin_expect(route != 0, 1) ? route : ResolveRoute(rt, a, b);
}
inline int RoutePath(uint8_t route) { return route & kStaged ? 1 : 0; }
inline uint8_t RouteTransport(uint8_t route) { return route & static_cast<uint8_t>(~kStaged); }

// --- copies ----------------------------------------------------------------------------------------

constexpr int kLookUp = INT_MIN;  // a Copy's device that is found from its pointer

struct Copy {
  uint8_t api;
  uint32_t flags;          // p2ptrace_copy_flag
  const void* dst;
  const void* src;
  int dst_dev = kLookUp, src_dev = kLookUp;  // given by the call (peer copies), else kLookUp
  uint64_t bytes;
  cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
  cudaStream_t stream = nullptr;  // the stream it runs on: 0 is the legacy default stream
};


// Where timing events for this copy go: the stream's device, when the shim knows it.
int StreamDevice(const CudaRuntime& rt, cudaStream_t stream) {
  uintptr_t s = reinterpret_cast<uintptr_t>(stream);
  if (s == 0 || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return CurrentDevice(rt);
  int d = g_streams.Lookup(s, -1);
  if (d >= kDriverStream) return rt.node == Node::kDriver ? d - kDriverStream : -1;
  return d;
}

inline __attribute__((always_inline)) void AccountAt(p2ptrace_pair_counters* c, cudaError_t r, uint64_t bytes) {
  if (r == cudaSuccess) {
    AddRelaxed(&c->calls, 1);
    AddRelaxed(&c->bytes, bytes);
  } else {
    AddRelaxed(&c->errors, 1);
  }
}

inline __attribute__((always_inline)) void WriteCopy(const Copy& c, int src, int dst, uint8_t transport,
                                                     cudaError_t r, uint32_t seq, uint32_t flags) {
  // Fields by value: a Copy whose address escapes is built in memory on every call.
  uint32_t site = CallSitesEnabled() ? CaptureCallSite() : 0;  // before Emit (it may write a text block)
  uint64_t bytes = c.bytes;
  auto stream = reinterpret_cast<uintptr_t>(c.stream);
  uint8_t api = c.api;
  flags |= c.flags;
  TraceWriter::Emit<p2ptrace_copy_record>(P2PTRACE_RECORD_COPY, seq, [=](p2ptrace_copy_record& rec) {
    rec.bytes = bytes;
    rec.stream = stream;
    rec.result = r;
    rec.api = api;
    rec.src_device = static_cast<int8_t>(src);
    rec.dst_device = static_cast<int8_t>(dst);
    rec.transport = transport;
    rec.flags = flags;
    rec.site = site;
  });
}

// The current device, asked only of a runtime known to answer (see TraceCopy).
int NotedDevice(const CudaRuntime& rt) { return RuntimeAnswered(rt) ? CurrentDevice(rt) : -1; }

// The real copy, called from out-of-line code: a lambda, by reference.
struct RealCopy {
  cudaError_t (*invoke)(const void*);
  const void* call;
  cudaError_t operator()() const { return invoke(call); }
};
template <typename Call>
RealCopy RefTo(const Call& call) {
  return {[](const void* f) { return (*static_cast<const Call*>(f))(); }, &call};
}

// Counts and records a pair copy (src != dst, both valid) that returned r. One issued on a
// capturing stream became a graph node and moved nothing: recorded with its graph id, not counted
// (the graph's launches replay it).
void RecordPairCopy(const CudaRuntime& rt, const Copy& c, int src, int dst, cudaError_t r) {
  uint8_t route = Route(rt, src, dst);
  uint32_t graph = 0;
  if (r == cudaSuccess && graphs::AnyCapture() && (c.flags & P2PTRACE_COPY_ASYNC) &&
      graphs::CapturedOn(rt, c.stream, &graph)) {
    WriteCopy(c, src, dst, RouteTransport(route), r, graph, P2PTRACE_COPY_CAPTURED);
    return;
  }
  AccountAt(TraceWriter::Counter(src, dst, RoutePath(route)), r, c.bytes);
  WriteCopy(c, src, dst, RouteTransport(route), r, 0, 0);
}

// While a capture runs anywhere, an async pair copy is recorded after asking whether it was captured
// (untimed: nothing is timed while a capture runs, CopyTimer).
__attribute__((noinline)) cudaError_t CaptureAwareCopy(const CudaRuntime& rt, const Copy& c, int src, int dst,
                                                      RealCopy real) {
  cudaError_t r = real();
  KeepErrno keep;
  RecordPairCopy(rt, c, src, dst, r);
  return r;
}

// The device (or MemoryMap::kHost) of each side the shim did not allocate, asked of the runtime and
// remembered: call only after a call with these pointers succeeded. False when the runtime could not say.
static bool LearnSides(const CudaRuntime& rt, const void* src, int* src_dev, const void* dst, int* dst_dev) {
  for (auto [p, dev] : {std::pair{src, src_dev}, std::pair{dst, dst_dev}}) {
    if (*dev != MemoryMap::kUnknown) continue;
    cudaPointerAttributes a{};
    if (rt.PointerGetAttributes(&a, p) != cudaSuccess) return false;
    *dev = a.type == cudaMemoryTypeDevice ? a.device : MemoryMap::kHost;
    MemoryMap::Learn(p, *dev);
  }
  return true;
}

// The rare path (a side not known, or the runtime not yet heard from), after the copy returned r.
__attribute__((noinline)) cudaError_t AfterUnknownSide(const CudaRuntime& rt, Copy c, int src, int dst,
                                                       cudaError_t r) {
  KeepErrno keep;
  if (r != cudaSuccess) {
    if (ValidDevice(src) && ValidDevice(dst) && src != dst) {
      AccountAt(TraceWriter::Counter(src, dst, 1), r, c.bytes);
      WriteCopy(c, src, dst, P2PTRACE_TRANSPORT_UNKNOWN, r, 0, 0);
    }
    return r;
  }
  NoteRuntime(rt);
  // A side the shim did not allocate: ask the runtime now that the copy succeeded.
  if (!LearnSides(rt, c.src, &src, c.dst, &dst)) return r;
  if (ValidDevice(src) && ValidDevice(dst) && src != dst) RecordPairCopy(rt, c, src, dst, r);
  return r;
}

// A sampled pair copy: the real call between two timing events on its stream.
__attribute__((noinline)) cudaError_t TimedPairCopy(const CudaRuntime& rt, Copy c, int src, int dst,
                                                    uint8_t route, p2ptrace_pair_counters* counter, RealCopy real) {
  TimedCopy t;
  bool timed = CopyTimer::Begin(rt, StreamDevice(rt, c.stream), c.stream, &t);
  cudaError_t r = real();
  uint32_t timed_flag = 0, seq = 0;  // a seq only for a timed copy: its TIMING record's key
  if (timed) {
    seq = TraceWriter::NextSeq();
    t.src = src;
    t.dst = dst;
    t.path = RoutePath(route);
    t.transport = RouteTransport(route);
    t.bytes = c.bytes;
    t.seq = seq;
    CopyTimer::End(c.stream, r == cudaSuccess, &t);
    if (r == cudaSuccess) timed_flag = P2PTRACE_COPY_TIMED;
  }
  AccountAt(counter, r, c.bytes);
  WriteCopy(c, src, dst, RouteTransport(route), r, timed_flag ? seq : 0, timed_flag);
  return r;
}

// What TraceCopy found, handed to the out-of-line part through the thread instead of as extra
// arguments: with exactly the wrapper's own arguments, the jump there is a tail call and the
// wrapper never needs a stack frame.
struct Pending {
  void* real;
  uint32_t pair;  // src << 7 | dst: the call's devices or QuickLookup's answers, each < 128 (PairOf)
  // Untimed fast-path copies before the next timed one (CopySampled); here to share the
  // thread-local block's address with the rest. Below 0: time this one (the slow path restarts it).
  int32_t countdown;
  uint64_t rng;  // xorshift state for the countdown's restarts; 0 until seeded
};
constinit thread_local Pending t_pending __attribute__((tls_model("initial-exec"))) = {nullptr, 0, 0, 0};
// A side QuickLookup could not tell (two values: equal answers are then one proven device), or a
// peer copy's device outside [0, 126). MemoryMap owners never reach them (kMaxOwner).
constexpr int kSrcNotProven = 126, kDstNotProven = 127;
static_assert(MemoryMap::kMaxOwner < kSrcNotProven);
constexpr uint32_t PairOf(int src, int dst) { return static_cast<uint32_t>(src) << 7 | static_cast<uint32_t>(dst); }

// Whether a pair copy is timed (P2PTRACE_SAMPLE K:N:SIZE): each pair's first K copies (before
// its fast path opens: Fasten), every copy of at least SIZE bytes, and one in N on average: a
// per-thread countdown the fast path decrements, restarted at a random value in [N/2, 3N/2) so that
// no regular pattern of pairs always escapes it (an exact 1-in-N per pair would need the pair's
// counter before the call, which costs the fast path a saved register).
__attribute__((noinline)) int32_t RestartCountdown() {
  const SampleSpec& s = detail::g_sample;
  if (!s.enabled) return INT32_MAX;
  if (s.every <= 1) return 0;
  uint64_t& x = t_pending.rng;
  if (x == 0) x = reinterpret_cast<uintptr_t>(&x) ^ (uint64_t{static_cast<uint32_t>(gettid())} << 32) ^ MonotonicNs();
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  uint64_t n = s.every / 2 + x % s.every;  // the timed one's place, from 1
  return static_cast<int32_t>(std::clamp<uint64_t>(n, 1, INT32_MAX) - 1);
}
inline bool CopySampled(const p2ptrace_pair_counters* counter, uint64_t bytes) {
  bool due = t_pending.countdown < 0;
  if (due) t_pending.countdown = RestartCountdown();
  const SampleSpec& s = detail::g_sample;
  return s.enabled && (due || bytes >= s.min_bytes || __atomic_load_n(&counter->calls, __ATOMIC_RELAXED) < s.first);
}

// A copy between two known, different devices of this runtime: count, record, maybe time.
template <typename Describe, typename F, typename... A>
inline __attribute__((always_inline)) cudaError_t PairCopy(const CudaRuntime& rt, const Copy& c, int src, int dst,
                                                           F* real, A... args) {
  if (__builtin_expect(graphs::AnyCapture(), 0) && (c.flags & P2PTRACE_COPY_ASYNC))
    return CaptureAwareCopy(rt, c, src, dst, RefTo([&] { return real(args...); }));
  uint8_t route = Route(rt, src, dst);
  p2ptrace_pair_counters* counter = TraceWriter::Counter(src, dst, RoutePath(route));
  if (__builtin_expect(CopySampled(counter, c.bytes), 0))
    return TimedPairCopy(rt, c, src, dst, route, counter, RefTo([&] { return real(args...); }));
  cudaError_t r = real(args...);
  AccountAt(counter, r, c.bytes);
  WriteCopy(c, src, dst, RouteTransport(route), r, 0, 0);  // no seq: only a timed copy needs one
  return r;
}

// The fast path's word for a pair with a resolved route (caller holds g_slow_mu, the trace open).
uint64_t FastWord(int src, int dst, uint8_t route) {
  static_assert(offsetof(p2ptrace_copy_record, src_device) == offsetof(p2ptrace_copy_record, api) + 1 &&
                offsetof(p2ptrace_copy_record, dst_device) == offsetof(p2ptrace_copy_record, api) + 2 &&
                offsetof(p2ptrace_copy_record, transport) == offsetof(p2ptrace_copy_record, api) + 3);
  uint32_t tag = uint32_t{static_cast<uint8_t>(src)} << 8 | uint32_t{static_cast<uint8_t>(dst)} << 16 |
                 uint32_t{RouteTransport(route)} << 24;  // with the api byte: the record's four bytes (little-endian)
  auto offset = reinterpret_cast<uintptr_t>(TraceWriter::Counter(src, dst, RoutePath(route))) -
                reinterpret_cast<uintptr_t>(TraceWriter::Counters());
  return uint64_t{tag} << 32 | offset;
}
inline p2ptrace_pair_counters* FastCounter(uint64_t fast) {
  return reinterpret_cast<p2ptrace_pair_counters*>(reinterpret_cast<char*>(TraceWriter::Counters()) +
                                                   static_cast<uint32_t>(fast));
}

// The fast path's copy record, whole: no seq (only a timed copy needs one), the time in CPU ticks.
inline __attribute__((always_inline)) void PutCopy(p2ptrace_copy_record* rec, uint64_t ticks, uint32_t tag,
                                                   uint32_t flags, uint64_t bytes, uintptr_t stream, cudaError_t r) {
  constexpr uint64_t kHead = P2PTRACE_RECORD_COPY | uint64_t{sizeof(p2ptrace_copy_record)} << 16;  // type, size, seq 0
  std::memcpy(&rec->h, &kHead, sizeof kHead);
  rec->h.time_ns = ticks;
  rec->bytes = bytes;
  rec->stream = stream;
  rec->result = r;
  std::memcpy(&rec->api, &tag, sizeof tag);
  rec->flags = flags | (kCpuTicks ? P2PTRACE_COPY_TICKS : 0);
}
// The same when this thread's chunk is full: Emit claims the next one.
__attribute__((noinline)) cudaError_t RecordCopyInNewChunk(uint64_t ticks, uint32_t tag, uint32_t flags,
                                                           uint64_t bytes, uintptr_t stream, cudaError_t r) {
  TraceWriter::EmitAt<p2ptrace_copy_record>(P2PTRACE_RECORD_COPY, 0, ticks, [&](p2ptrace_copy_record& rec) {
    PutCopy(&rec, ticks, tag, flags, bytes, stream, r);
  });
  return r;
}

// After a pair copy took the slow path: lets the pair's next copies through this node take the
// fast one, if nothing needs the slow one any more.
__attribute__((noinline, cold)) void Fasten(Node node, int src, int dst) {
  std::lock_guard<std::mutex> lock(g_slow_mu);
  static bool registered = (pthread_atfork(nullptr, nullptr, ForgetFastPairs), true);
  (void)registered;
  uint8_t route = g_route[src][dst].load(std::memory_order_relaxed);
  // Call sites need every copy's stack: the fast path stays shut. So it does while a capture runs
  // (a copy may become a graph node: PairCopy asks), which costs the fast path no check of its own.
  if (route == 0 || !TraceWriter::IsOpen() || !NodeAnswered(node) || CallSitesEnabled() || graphs::AnyCapture()) return;
  const SampleSpec& s = detail::g_sample;
  if (s.enabled && __atomic_load_n(&TraceWriter::Counter(src, dst, RoutePath(route))->calls, __ATOMIC_RELAXED) < s.first)
    return;  // its first K copies are timed here
  g_fast[static_cast<int>(node)][src << 7 | dst].store(FastWord(src, dst, route), std::memory_order_relaxed);
}

// Every copy that is not plainly within one device, out of line (TraceCopy and OtherCopy jump
// here with t_pending set): a pair of devices this runtime knows, or a side the shim has yet to
// learn, a runtime not yet heard from, a trace not yet open, a copy to time.
template <typename Describe, Node kNode, typename F, typename... A>
__attribute__((noinline)) cudaError_t SlowCopy(A... args) {
  const Pending p = t_pending;
  F* real = reinterpret_cast<F*>(p.real);
  const Copy c = Describe{}(args...);
  int src = static_cast<int>(p.pair >> 7), dst = static_cast<int>(p.pair & 127);
  if (c.src_dev != kLookUp) {  // a peer copy: its devices as the call names them
    src = c.src_dev;
    dst = c.dst_dev;
  }
  if (__builtin_expect(TraceWriter::IsOpen() && static_cast<unsigned>(src | dst) < kMaxDev && NodeAnswered(kNode), 1)) {
    cudaError_t r = PairCopy<Describe>(Runtime(kNode), c, src, dst, real, args...);
    if (g_fast[static_cast<int>(kNode)][PairOf(src, dst)].load(std::memory_order_relaxed) == 0) Fasten(kNode, src, dst);
    return r;
  }
  if (!TraceWriter::Ready()) return real(args...);  // opens the trace at the first pair copy
  if (c.src_dev == kLookUp) {
    if (src == kSrcNotProven) src = MemoryMap::Lookup(c.src);
    if (dst == kDstNotProven) dst = MemoryMap::Lookup(c.dst);
  }
  if (src >= 0 && src == dst) return real(args...);
  const CudaRuntime& rt = Runtime(kNode);
  // Until the runtime has answered a call successfully, the shim asks it nothing before the call
  // (its question could fail first and leave an error behind for the application to see).
  if (!ValidDevice(src) || !ValidDevice(dst) || !RuntimeAnswered(rt))
    return AfterUnknownSide(rt, c, src, dst, real(args...));
  return PairCopy<Describe>(rt, c, src, dst, real, args...);
}

// A pair copy, out of line (TraceCopy jumps here with t_pending set): the common case of a pair
// already seen through this node, untimed, in as few instructions as possible (bench.budgets.copies:
// 100 over the bare call, the wrapper's lookups included): one word per pair says everything, the
// counters take two atomic adds, the record is written in place after the call (no seq: only a
// timed copy needs one). Anything else goes to SlowCopy.
template <typename Describe, Node kNode, typename F, typename... A>
__attribute__((noinline)) cudaError_t OtherCopy(A... args) {
  Pending& p = t_pending;
  uint64_t fast = g_fast[static_cast<int>(kNode)][p.pair].load(std::memory_order_relaxed);
  const Copy c = Describe{}(args...);
  if (__builtin_expect(fast == 0 || c.bytes >= detail::g_sample.min_bytes || (p.countdown -= 1) < 0, 0))
    return SlowCopy<Describe, kNode, F>(args...);  // to be timed (CopySampled), or not fast yet
  cudaError_t r = reinterpret_cast<F*>(p.real)(args...);
  // Only fast, bytes and stream live across the call: what derives from `fast` is recomputed
  // (cheaper than keeping it in a saved register), and every later call is a tail call.
  asm("" : "+r"(fast));
  AccountAt(FastCounter(fast), r, c.bytes);
  uint64_t ticks = CpuTicks();
  uint32_t tag = static_cast<uint32_t>(fast >> 32) | c.api;
  auto stream = reinterpret_cast<uintptr_t>(c.stream);
  TraceWriter::Slot slot;
  if (__builtin_expect(!TraceWriter::Reserve<p2ptrace_copy_record>(&slot), 0))
    return RecordCopyInNewChunk(ticks, tag, c.flags, c.bytes, stream, r);
  PutCopy(TraceWriter::At<p2ptrace_copy_record>(slot), ticks, tag, c.flags, c.bytes, stream, r);
  TraceWriter::Publish<p2ptrace_copy_record>(slot);
  return r;
}

// The part of every copy hook inlined into its exported wrapper. A copy within one device (the
// common case) or with a host side is not peer traffic: the real function is tail-called and
// nothing is counted. Everything else jumps out of line. No call but tail calls: no stack frame.
template <typename Describe, typename F, typename... A>
inline __attribute__((always_inline)) cudaError_t TraceCopy(NodeRuntime rt, Describe describe, F* real,
                                                            A... args) {
  // The pointer map works whether or not the trace is open: only the way out checks that.
  const Copy c = describe(args...);
  if (HostSide(c.kind)) return real(args...);
  int src, dst;
  if (c.src_dev == kLookUp) {
    bool in = MemoryMap::InTable(c.src, c.dst);
    src = in ? MemoryMap::QuickLookup(c.src, kSrcNotProven) : kSrcNotProven;
    dst = in ? MemoryMap::QuickLookup(c.dst, kDstNotProven) : kDstNotProven;
  } else {  // a peer copy names them
    src = static_cast<unsigned>(c.src_dev) < kSrcNotProven ? c.src_dev : kSrcNotProven;
    dst = static_cast<unsigned>(c.dst_dev) < kSrcNotProven ? c.dst_dev : kDstNotProven;
  }
  if (src == dst) return real(args...);
  t_pending.real = reinterpret_cast<void*>(real);  // field by field: the countdown stays
  t_pending.pair = PairOf(src, dst);
  switch (rt.node) {  // a constant in each wrapper: one direct jump
    case Node::kCudart11: return OtherCopy<Describe, Node::kCudart11, F>(args...);
    case Node::kCudart12: return OtherCopy<Describe, Node::kCudart12, F>(args...);
    default: return OtherCopy<Describe, Node::kCudart13, F>(args...);
  }
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



uint64_t Bytes3D(const cudaMemcpy3DPeerParms* p) {
  return p ? static_cast<uint64_t>(p->extent.width) * p->extent.height * p->extent.depth : 0;
}

}  // namespace

// ================================================================================================
// For the driver's hooks (cuda_hooks.h)

cudaError_t TraceApiCopy(const CudaRuntime& rt, const ApiCopy& a, InvokeReal invoke, const void* call) {
  RealCopy real{invoke, call};
  if (!TraceWriter::Ready()) return real();
  Copy c{a.api, a.flags, a.dst, a.src, kLookUp, kLookUp, a.bytes, cudaMemcpyDeviceToDevice, a.stream};
  int src = a.src_dev >= 0 ? a.src_dev : MemoryMap::Lookup(a.src);
  int dst = a.dst_dev >= 0 ? a.dst_dev : MemoryMap::Lookup(a.dst);
  if (src >= 0 && src == dst) return real();  // within one device: not peer traffic
  if (src == MemoryMap::kHost || dst == MemoryMap::kHost) return real();
  if (!ValidDevice(src) || !ValidDevice(dst) || !RuntimeAnswered(rt)) return AfterUnknownSide(rt, c, src, dst, real());
  return PairCopy<void>(rt, c, src, dst, invoke, call);  // the runtime copies' own accounting
}

bool ReadyAfter(const CudaRuntime& rt, cudaError_t r) { return Ready(rt, r); }
int AnsweredDevice(const CudaRuntime& rt) { return NotedDevice(rt); }

int CurrentDevice(const CudaRuntime& rt) {
  int d = -1;
  return rt.GetDevice(&d) == cudaSuccess ? d : -1;
}

void PeerMappingChanged(int from, int to, uint8_t how, bool set) {
  if (ValidDevice(from) && ValidDevice(to) && from != to) ChangePeer(from, to, how, set);
}

int StreamDeviceOf(const CudaRuntime& rt, cudaStream_t s) { return StreamDevice(rt, s); }

void RecordPeerCall(uint8_t api, int device, int peer, cudaError_t r, int value, int attr) {
  WritePeer(api, device, peer, r, value, attr);
}

void RecordIpcCall(uint8_t api, int device, int owner, cudaError_t r, const void* address) {
  p2ptrace_ipc_record rec{};
  rec.api = api;
  rec.device = static_cast<int8_t>(device);
  rec.owner_device = static_cast<int8_t>(owner);
  rec.result = r;
  rec.address = reinterpret_cast<uintptr_t>(address);
  TraceWriter::Append(rec, P2PTRACE_RECORD_IPC, TraceWriter::NextSeq());
}

// A copy added to `graph` as a node (the call returned r): recorded like a captured copy of the
// graph's id when it is between two devices; nothing moved yet (the launches replay it).
void RecordGraphNodeCopy(const CudaRuntime& rt, const ApiCopy& a, cudaGraph_t graph, cudaError_t r) {
  if (r != cudaSuccess || graph == nullptr || !Ready(rt, r)) return;
  KeepErrno keep;
  NoteRuntime(rt);
  int src = MemoryMap::Lookup(a.src), dst = MemoryMap::Lookup(a.dst);
  if (!LearnSides(rt, a.src, &src, a.dst, &dst)) return;
  if (!ValidDevice(src) || !ValidDevice(dst) || src == dst) return;
  Copy c{a.api, a.flags, a.dst, a.src, dst, src, a.bytes, cudaMemcpyDeviceToDevice, nullptr};
  WriteCopy(c, src, dst, RouteTransport(Route(rt, src, dst)), r, graphs::NodeAdded(graph), P2PTRACE_COPY_CAPTURED);
}

bool ReplayedNode(const CudaRuntime& rt, cudaGraphNode_t n) {
  KeepErrno keep;
  cudaGraphNodeType type = cudaGraphNodeTypeCount;
  if (rt.GraphNodeGetType == nullptr || rt.GraphNodeGetType(n, &type) != cudaSuccess) return true;
  return ReplayedNodeType(type);
}

// A stream's device, for timing copies on it: the current device's when it was made.
void StreamCreated(const CudaRuntime& rt, cudaError_t r, const cudaStream_t* s) {
  if (r != cudaSuccess || s == nullptr) return;
  int d = CurrentDevice(rt);
  if (d < 0) return;
  // A driver stream may belong to a context of the program's own (cuCtxCreate), where the runtime's
  // timing events cannot be recorded: only driver calls time on it (their events are the driver's).
  if (rt.node == Node::kDriver) d += kDriverStream;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  g_streams.Put(reinterpret_cast<uintptr_t>(*s), d);
}
// Forgotten before the real call: afterwards the handle may already be reused.
void StreamDestroying(cudaStream_t s) {
  NcclWatchdogStreamGone(reinterpret_cast<uintptr_t>(s));
  std::lock_guard<std::mutex> lock(g_streams_mu);
  g_streams.Erase(reinterpret_cast<uintptr_t>(s));
}

// ================================================================================================
// Captures and graph launches, shared with the driver's hooks (cuda_hooks.h). Nothing is timed while
// a capture runs (CopyTimer), and graphs.h learns each capture's id.

void CaptureBeginning() {
  CopyTimer::CaptureBegan();  // before the capture starts, so no event lands inside it
  graphs::CaptureStarting();
  ShutFastPairs();
}
void CaptureBegun(const CudaRuntime& rt, cudaStream_t named, cudaError_t r, cudaGraph_t into) {
  if (r != cudaSuccess) CopyTimer::CaptureEnded();
  graphs::CaptureStarted(rt, named, r, into);
}
// A capture ends with a graph or invalidated; any other answer (no capture, the wrong stream or
// thread, a stub driver's 34) left it as it was. Timing resumes only for a capture the shim saw begin.
void CaptureEnding(cudaStream_t named, unsigned long long runtime_id, cudaError_t r, const cudaGraph_t* g) {
  if (r != cudaSuccess && r != cudaErrorStreamCaptureInvalidated) return;
  if (graphs::CaptureEnded(named, runtime_id, r, r == cudaSuccess && g ? *g : nullptr)) CopyTimer::CaptureEnded();
}
// Launched into a capturing stream the graph runs nothing now: the new graph holds its work (INCLUDE).
cudaError_t TracedGraphLaunch(const CudaRuntime& rt, uint32_t id, cudaGraphExec_t e, cudaStream_t named,
                              InvokeReal invoke, const void* call) {
  if (graphs::AnyCapture()) {
    cudaError_t r = invoke(call);
    uint32_t outer = 0;
    KeepErrno keep;
    if (r == cudaSuccess && graphs::CapturedOn(rt, named, &outer)) graphs::LaunchCaptured(outer, id, e);
    else graphs::RecordLaunch(id, e, named, r, nullptr);
    return r;
  }
  TimedCopy t;
  bool timed = detail::g_sample.enabled && graphs::BeginLaunchTiming(rt, StreamDevice(rt, named), named, &t);
  cudaError_t r = invoke(call);
  graphs::RecordLaunch(id, e, named, r, timed ? &t : nullptr);
  return r;
}

namespace hooks {

// ================================================================================================
// Copies. Each hook is inlined into its exported wrapper (TraceCopy); Describe_<name> says what
// the call copies, from its own arguments.
#define P2PTRACE_COPY_HOOK(name, params, args, ...)                                                           \
  struct Describe_##name {                                                                                    \
    Copy operator() params const { return Copy{__VA_ARGS__}; }                                                \
  };                                                                                                          \
  inline __attribute__((always_inline)) cudaError_t name(NodeRuntime rt, Real<decltype(&::name)> real, \
                                                         P2PTRACE_UNPAREN params) {                           \
    return TraceCopy(rt, Describe_##name{}, real, P2PTRACE_UNPAREN args);                                     \
  }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"  // a Describe needs only some of the arguments
P2PTRACE_COPY_HOOK(cudaMemcpyPeer, (void* dst, int dd, const void* src, int sd, size_t n), (dst, dd, src, sd, n),
                   P2PTRACE_API_cudaMemcpyPeer, 0, dst, src, dd, sd, n, cudaMemcpyDeviceToDevice, nullptr)
P2PTRACE_COPY_HOOK(cudaMemcpyPeerAsync, (void* dst, int dd, const void* src, int sd, size_t n, cudaStream_t s),
                   (dst, dd, src, sd, n, s), P2PTRACE_API_cudaMemcpyPeerAsync, P2PTRACE_COPY_ASYNC, dst, src, dd, sd,
                   n, cudaMemcpyDeviceToDevice, s)
P2PTRACE_COPY_HOOK(cudaMemcpy, (void* dst, const void* src, size_t n, cudaMemcpyKind k), (dst, src, n, k),
                   P2PTRACE_API_cudaMemcpy, 0, dst, src, kLookUp, kLookUp, n, k, nullptr)
P2PTRACE_COPY_HOOK(cudaMemcpy_ptds, (void* dst, const void* src, size_t n, cudaMemcpyKind k), (dst, src, n, k),
                   P2PTRACE_API_cudaMemcpy, P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, kLookUp, kLookUp, n, k,
                   cudaStreamPerThread)
P2PTRACE_COPY_HOOK(cudaMemcpyAsync, (void* dst, const void* src, size_t n, cudaMemcpyKind k, cudaStream_t s),
                   (dst, src, n, k, s), P2PTRACE_API_cudaMemcpyAsync, P2PTRACE_COPY_ASYNC, dst, src, kLookUp, kLookUp, n, k, s)
// In the _ptsz entry points stream 0 is the per-thread default stream.
P2PTRACE_COPY_HOOK(cudaMemcpyAsync_ptsz, (void* dst, const void* src, size_t n, cudaMemcpyKind k, cudaStream_t s),
                   (dst, src, n, k, s), P2PTRACE_API_cudaMemcpyAsync,
                   P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, kLookUp, kLookUp, n, k, PerThread(s))
P2PTRACE_COPY_HOOK(cudaMemcpy2D,
                   (void* dst, size_t dp, const void* src, size_t sp, size_t w, size_t h, cudaMemcpyKind k),
                   (dst, dp, src, sp, w, h, k), P2PTRACE_API_cudaMemcpy2D, 0, dst, src, kLookUp, kLookUp, uint64_t{w} * h, k,
                   nullptr)
P2PTRACE_COPY_HOOK(cudaMemcpy2D_ptds,
                   (void* dst, size_t dp, const void* src, size_t sp, size_t w, size_t h, cudaMemcpyKind k),
                   (dst, dp, src, sp, w, h, k), P2PTRACE_API_cudaMemcpy2D, P2PTRACE_COPY_PER_THREAD_STREAM, dst, src,
                   kLookUp, kLookUp, uint64_t{w} * h, k, cudaStreamPerThread)
P2PTRACE_COPY_HOOK(cudaMemcpy2DAsync,
                   (void* dst, size_t dp, const void* src, size_t sp, size_t w, size_t h, cudaMemcpyKind k,
                    cudaStream_t s),
                   (dst, dp, src, sp, w, h, k, s), P2PTRACE_API_cudaMemcpy2DAsync, P2PTRACE_COPY_ASYNC, dst, src, kLookUp,
                   kLookUp, uint64_t{w} * h, k, s)
P2PTRACE_COPY_HOOK(cudaMemcpy2DAsync_ptsz,
                   (void* dst, size_t dp, const void* src, size_t sp, size_t w, size_t h, cudaMemcpyKind k,
                    cudaStream_t s),
                   (dst, dp, src, sp, w, h, k, s), P2PTRACE_API_cudaMemcpy2DAsync,
                   P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, kLookUp, kLookUp, uint64_t{w} * h, k,
                   PerThread(s))

// A null parameter block is passed on untouched (described as a host-side copy: not traced).
inline Copy Copy3D(uint8_t api, uint32_t flags, const cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  if (p == nullptr) return Copy{api, flags, nullptr, nullptr, kLookUp, kLookUp, 0, cudaMemcpyHostToHost, s};
  return Copy{api, flags, p->dstPtr.ptr, p->srcPtr.ptr, p->dstDevice, p->srcDevice, Bytes3D(p),
              cudaMemcpyDeviceToDevice, s};
}
P2PTRACE_COPY_HOOK(cudaMemcpy3DPeer, (const cudaMemcpy3DPeerParms* p), (p),
                   Copy3D(P2PTRACE_API_cudaMemcpy3DPeer, 0, p, nullptr))
P2PTRACE_COPY_HOOK(cudaMemcpy3DPeer_ptds, (const cudaMemcpy3DPeerParms* p), (p),
                   Copy3D(P2PTRACE_API_cudaMemcpy3DPeer, P2PTRACE_COPY_PER_THREAD_STREAM, p, cudaStreamPerThread))
P2PTRACE_COPY_HOOK(cudaMemcpy3DPeerAsync, (const cudaMemcpy3DPeerParms* p, cudaStream_t s), (p, s),
                   Copy3D(P2PTRACE_API_cudaMemcpy3DPeerAsync, P2PTRACE_COPY_ASYNC, p, s))
P2PTRACE_COPY_HOOK(cudaMemcpy3DPeerAsync_ptsz, (const cudaMemcpy3DPeerParms* p, cudaStream_t s), (p, s),
                   Copy3D(P2PTRACE_API_cudaMemcpy3DPeerAsync, P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM,
                          p, PerThread(s)))
#pragma GCC diagnostic pop
#undef P2PTRACE_COPY_HOOK

}  // namespace hooks
}  // namespace p2ptrace::shim

// The exported wrappers of the copy functions, one per runtime version node (cuda_wrap.h): each
// copy hook is inlined into its wrapper.
P2PTRACE_CUDA_COPY_FUNCTIONS(P2PTRACE_WRAP_11)
P2PTRACE_CUDA_COPY_FUNCTIONS(P2PTRACE_WRAP_12)
P2PTRACE_CUDA_COPY_FUNCTIONS(P2PTRACE_WRAP_13)
