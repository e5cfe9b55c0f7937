// The simulated GPU engine (State, streams, memory, copies), compiled into libcuda.so.1 and both
// libcudart fakes. Its DATA exists once per process, in libcuda.so.1: as with real CUDA, where the
// runtime sits on the driver, one allocation map, one set of contexts and peer mappings serve both
// APIs. libcuda.so.1 exports ONE extra symbol, p2psim_driver, returning `Shared` below; the
// runtimes reach it the way the real runtime reaches the driver (dlopen + dlsym on that handle).
// Sharing data rather than calling into the driver keeps the engine as it was and keeps the
// runtime's work off the driver's exported API, where an LD_PRELOAD interposer would see it.
// Every library compiles this same header with the same compiler, so the layouts agree;
// kSharedAbi and sizeof checks catch a stale mix.
#pragma once
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/sim/common/gpu_model.h"
#include "tests/sim/common/gpu_users.h"
#include "tests/sim/common/sim_links.h"
#include "tests/sim/common/sim_topology.h"

// Each library uses only part of the engine.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

namespace {


using p2ptrace::Gpu;
using p2ptrace::Host;

// Device memory's bytes, moved and set as a GPU would. Under ThreadSanitizer the check of every
// byte of a range was nearly all of a simulated copy's time (a 32 MiB copy: about a second); these
// bytes are the simulated GPU's, which no shim code reads, so there they move by loops it does not
// instrument.
#if defined(__SANITIZE_THREAD__)
__attribute__((no_sanitize("thread"))) void MoveBytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  size_t gap = d < s ? size_t(s - d) : size_t(d - s);
  if (gap >= 8 && reinterpret_cast<uintptr_t>(d) % 8 == 0 && reinterpret_cast<uintptr_t>(s) % 8 == 0) {
    size_t words = n / 8;  // a word at a time (unoptimized builds): no word overlaps its source
    auto* dw = reinterpret_cast<uint64_t*>(d);
    auto* sw = reinterpret_cast<const uint64_t*>(s);
    if (d < s) {
      for (size_t i = 0; i < words; ++i) dw[i] = sw[i];
      for (size_t i = words * 8; i < n; ++i) d[i] = s[i];
    } else {
      for (size_t i = n; i-- > words * 8;) d[i] = s[i];
      for (size_t i = words; i-- > 0;) dw[i] = sw[i];
    }
  } else if (d < s) {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  } else {
    for (size_t i = n; i-- > 0;) d[i] = s[i];
  }
}
__attribute__((no_sanitize("thread"))) void SetBytes(void* dst, unsigned char value, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = value;
}
#else
void MoveBytes(void* dst, const void* src, size_t n) { std::memmove(dst, src, n); }
void SetBytes(void* dst, unsigned char value, size_t n) { std::memset(dst, value, n); }
#endif

constexpr int kDriverVersion = 13000;
constexpr int kMaxPeers = 8;               // peers one device can map at once (cudaErrorTooManyPeers)
constexpr double kKernelSeconds = 5e-6;    // what a kernel launch costs on the simulated clock

// ---------------------------------------------------------------------------------------------
// State

struct Stream {
  int device = 0;
  unsigned flags = 0;  // cudaStreamNonBlocking
  int priority = 0;
  bool legacy = false, per_thread = false;
  double t = 0;        // simulated time when its queued work completes
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;      // of the capture sequence, unique in the process
  struct Graph* capture_graph = nullptr;  // the graph being built while capturing
  bool capture_origin = false;            // began the capture (else joined it through an event wait)
  bool capture_into = false;              // capturing into a graph the program made (BeginCaptureToGraph)
  size_t capture_kept = 0;                // that graph's work before the capture (kept if it is invalidated)
  int capture_kept_nodes = 0;
  int pending_host_funcs = 0;
};

struct Event {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
  double t = 0;
  unsigned long long capture_id = 0;  // recorded during that capture: a stream that waits joins it
};

struct Rows {  // a 2D/3D copy flattened to rows
  size_t width = 0, height = 1, spitch = 0, dpitch = 0;
};

// What a captured operation does when its graph is launched: a copy moves its bytes then (not at
// capture, as on a real GPU); other work (a kernel, an NCCL kernel's time) only takes time.
struct GraphWork {
  bool copy = false;
  void* dst = nullptr;
  const void* src = nullptr;
  Rows rows;
  double seconds = 0;
  bool enabled = true;  // cudaGraphNodeSetEnabled (in an exec); false also for a removed node's work
  // Work another simulated library captured (the NCCL's operations): run at each launch, outside
  // the lock, on the launch's stream (p2psim_capture_replay).
  void (*replay)(void* ctx, cudaStream_t stream) = nullptr;
  std::shared_ptr<void> replay_ctx;
};
// A user object (cudaUserObjectCreate): its destructor runs, on the host-function thread, when the
// last reference (the program's, graphs', execs') is gone. torch's and NCCL's captures use them.
struct UserObject {
  void* ptr = nullptr;
  cudaHostFn_t destroy = nullptr;
  unsigned refs = 0;
};
using UserRefs = std::map<UserObject*, unsigned>;
struct Graph {
  int nodes = 0;  // every captured node (waits and event records too)
  std::vector<GraphWork> work;
  UserRefs user_refs;  // the graph's references to user objects
};
// An instantiated graph: its own copy of the work (cudaGraphExecUpdate replaces it) and its own
// references to its graph's user objects.
struct GraphExec {
  int nodes = 0;
  std::vector<GraphWork> work;
  UserRefs user_refs;
  const Graph* from = nullptr;  // the graph it was made from (or updated to): whose nodes it has
};
// A node added by the program (copy or child graph): its graph's work items [first, first + count).
// Captured work has no node handles in the sim.
struct NodeInfo {
  Graph* graph = nullptr;
  size_t first = 0, count = 0;
  cudaGraphNodeType type = cudaGraphNodeTypeMemcpy;
};

// What a device may do with memory whose access is set per device (VMM mappings, memory pools):
// CUmemAccess_flags / cudaMemAccessFlags.
constexpr unsigned char kAccessNone = 0, kAccessRead = 1, kAccessReadWrite = 3;

// A stream-ordered memory pool (CUmemoryPool / cudaMemPool_t is a MemPool*): device memory of its
// device, reachable from other devices only as cuMemPoolSetAccess says (peer access does not apply).
struct MemPool {
  int device = 0;                     // ordinal
  bool is_default = false;            // the device's own pool: never destroyed
  bool destroyed = false;             // cuMemPoolDestroy with allocations outstanding: goes with the last
  unsigned handle_types = 0;          // CUmemAllocationHandleType bits
  size_t max_size = 0;                // 0: no limit (else rounded up to the 32 MiB chunk)
  std::vector<unsigned char> access;  // per ordinal; the pool's own device always read-write
  size_t live = 0, used = 0, used_high = 0, granules = 0, reserved = 0, reserved_high = 0;
  unsigned long long release_threshold = 0;
  int reuse[3] = {1, 1, 1};           // the three CU_MEMPOOL_ATTR_REUSE_* switches
};

// A physical allocation made by cuMemCreate (CUmemGenericAllocationHandle = its id in State::vmm).
// Its memory goes when the handle is released AND no mapping is left, as in CUDA.
struct VmmHandle {
  size_t size = 0;
  int device = 0;                // ordinal (the prop's location id)
  int host_gpu = -1;
  int fd = -1;                   // memfd, like a cudaMalloc allocation's
  unsigned handle_types = 0;     // requestedHandleTypes
  unsigned char compression = 0, gdr_capable = 0;
  unsigned short usage = 0;
  int refs = 1;                  // cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease
  int mappings = 0;              // cuMemMap - cuMemUnmap
};

struct Alloc {
  size_t size = 0;
  // kVmm: one cuMemMap of a VmmHandle; kPool: an allocation from a MemPool.
  enum Kind { kDevice, kHostPinned, kIpc, kVmm, kPool } kind = kDevice;
  int host_gpu = -1;   // the owning GPU (host index); -1 for pinned host memory
  int fd = -1;         // memfd backing device memory (exported through IPC); -1 for kVmm (the handle's)
  int ipc_refs = 0;    // opens of the same handle in this process
  bool ipc_direct = false;
  std::string ipc_key; // "pid:fd" of the exporter, to recognise a second open of the same handle
  unsigned long long vmm = 0;         // kVmm: the handle mapped
  size_t vmm_offset = 0;              // kVmm: offset into the handle's memory
  std::vector<unsigned char> access;  // kVmm: per ordinal (cuMemSetAccess); none after cuMemMap
  MemPool* pool = nullptr;            // kPool
};

// A cuMemAddressReserve'd range: 2 MiB aligned and a whole number of 2 MiB granules, so a granule
// mapped with a device's memory never holds host memory or another device's.
struct Reservation {
  size_t size = 0;   // as asked (cuMemAddressFree must name it)
  size_t len = 0;    // reserved: size rounded up to the granule
};

// Device memory of one GPU lives in its own reserved address range, as with CUDA's unified
// addressing: a device allocation never shares a 2 MiB granule with host memory or another GPU's.
struct Arena {
  uintptr_t base = 0;
  size_t capacity = 0, bump = 0;
  std::map<size_t, size_t> free;  // offset -> length, coalesced
};

// A host function queued on a stream; with stream null, a user object's destructor.
struct HostFunc { Stream* stream; cudaHostFn_t fn; void* data; cudaStreamCallback_t cb; cudaStream_t handle; };

// A device's primary context (the only kind the sim has; CUcontext is a Context*).
struct Context {
  int device = 0;
  unsigned flags = 0;
  int refs = 0;                     // cuDevicePrimaryCtxRetain minus Release, + the runtime's one
  std::atomic<bool> runtime_ref{false};  // the runtime holds its reference (taken at its first use)
  std::atomic<bool> active{false};  // read without the lock by the runtime's fast path
};

struct State {
  bool ok = false;
  std::string error;
  p2psim::Topology topo;
  const Host* host = nullptr;
  std::vector<int> visible;                   // ordinal -> host GPU index
  std::vector<std::vector<char>> peer_on;     // [from ordinal][to ordinal]
  std::vector<std::unique_ptr<Stream>> legacy;
  std::set<Stream*> streams;                  // user streams and per-thread streams
  std::set<Event*> events;
  std::set<Graph*> graphs;
  std::set<GraphExec*> execs;
  std::set<UserObject*> user_objects;
  std::map<uintptr_t, NodeInfo> nodes;        // node handle -> what it is
  std::map<uintptr_t, Alloc> allocs;          // base address -> allocation
  std::map<int, Arena> arenas;                 // host GPU index -> its address range
  std::map<unsigned long long, VmmHandle> vmm; // cuMemCreate handles (released ones while still mapped)
  unsigned long long vmm_ids = 0;
  std::map<uintptr_t, Reservation> reservations;  // cuMemAddressReserve, by base address
  std::set<MemPool*> pools;                   // every pool, default ones included
  std::set<int> noted_gpus;                   // ordinals this process is listed on (gpu_users.h)
  std::map<int, MemPool*> default_pool, current_pool;  // per ordinal (made at first use)
  // DirectBandwidth per (host GPU, host GPU), computed once: it walks the PCIe tree with string
  // compares, whose instruction count varies with heap addresses from run to run, which would
  // blur the shim's per-call cost that bench/run_bench.py measures (shim minus bare).
  mutable std::map<std::pair<int, int>, double> direct_gbps;
  double host_now = 0;                        // the host thread's simulated clock
  std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
  std::deque<HostFunc> host_funcs;
  bool worker_running = false;
  std::condition_variable cv;                 // host functions done
  std::condition_variable work_cv;            // host functions queued
  std::atomic<bool> driver_init{false};       // cuInit succeeded (or the runtime initialised)
  std::vector<std::unique_ptr<Context>> primary;  // per ordinal
  unsigned long long capture_ids = 0;         // the last capture sequence's id
  unsigned long long node_ids = 0;            // graph node tokens handed out
};

// Per thread, shared by driver and runtimes: the context stack (top = current context; its device
// is cudaGetDevice's answer), per-thread default streams, and "inside a host function".
// The last error stays per runtime library, as in CUDA.
struct ThreadData {
  std::vector<Context*> ctx_stack;
  std::map<int, Stream*> per_thread;
  bool in_host_func = false;
  int set_device = -1;  // cudaSetDevice's device not bound yet (CUDA 11's runtime: RuntimeContext)
};

constexpr int kSharedAbi = 6;  // bump when State, ThreadData, Context or Shared change
struct Shared {
  int abi;
  size_t state_size, thread_size;
  State* (*state)();      // loads the topology on the first call
  std::mutex* mu;         // guards State; never held while user code (host functions) runs
  ThreadData* (*thread)();
};

const Shared* g_shared = nullptr;  // this library's view, set before any State access
std::mutex& Mu() { return *g_shared->mu; }
ThreadData& T() { return *g_shared->thread(); }
State& S() { return *g_shared->state(); }

Context* Current() {
  auto& stack = T().ctx_stack;
  return stack.empty() ? nullptr : stack.back();
}
int CurDev() {
  Context* c = Current();
  return c ? c->device : 0;
}

// Makes `device`'s primary context current (replacing the top of the stack) and active, holding the
// runtime's reference, as cudaSetDevice and the runtime's first use of a device do.
// The runtime's hold on a device's primary context (cudaInitDevice, and every use of the device).
// NVML lists a process on a GPU once it activated the GPU's primary context (under the lock).
void NoteUse(State& st, int device) {
  if (st.noted_gpus.insert(device).second) p2psim::NoteGpuUser(st.host->name, st.visible[device]);
}

void RuntimeRetain(State& st, int device) {
  Context* c = st.primary[device].get();
  if (c->active && c->runtime_ref) return;
  std::lock_guard<std::mutex> lock(Mu());
  if (!c->runtime_ref) { c->runtime_ref = true; ++c->refs; }
  c->active = true;
  NoteUse(st, device);
}

void UseDevice(State& st, int device) {
  Context* c = st.primary[device].get();
  auto& stack = T().ctx_stack;
  if (stack.empty()) stack.push_back(c);
  else stack.back() = c;
  RuntimeRetain(st, device);
}

// The runtime's implicit context: the device cudaSetDevice named where it has not bound it yet; none
// current -> device 0's primary; an inactive one comes back.
void RuntimeContext(State& st) {
  if (int set = T().set_device; set >= 0) {
    T().set_device = -1;
    UseDevice(st, set);
    return;
  }
  Context* c = Current();
  if (c == nullptr || !c->active || !c->runtime_ref) UseDevice(st, c ? c->device : 0);
}

int DeviceCount(const State& st) { return static_cast<int>(st.visible.size()); }
bool ValidDevice(const State& st, int d) { return d >= 0 && d < DeviceCount(st); }
const Gpu& GpuOf(const State& st, int ordinal) { return *st.host->FindGpu(st.visible[ordinal]); }
// The GPU model's memory (tests/sim/common/gpu_model), as totalGlobalMem and cuDeviceTotalMem say.
size_t DeviceMemory(const State& st, int ordinal) { return p2psim::ModelOf(GpuOf(st, ordinal).name).memory; }
int OrdinalOf(const State& st, int host_gpu) {
  for (size_t i = 0; i < st.visible.size(); ++i)
    if (st.visible[i] == host_gpu) return static_cast<int>(i);
  return -1;
}

// ---------------------------------------------------------------------------------------------
// The simulated clock

double WallSeconds(const State& st) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - st.wall0).count();
}

double SimNow(const State& st) {
  double now = st.host_now;
  if (st.topo.time_scale > 0) now = std::max(now, WallSeconds(st) / st.topo.time_scale);
  return now;
}

// The host waits until simulated time t (sleeping time_scale × the wait when time_scale > 0).
void WaitUntil(State& st, std::unique_lock<std::mutex>& lock, double t) {
  if (std::isinf(t)) {  // work that never completes (p2psim_stream_hang): the caller waits for ever
    lock.unlock();
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (st.topo.time_scale > 0) {
    double wall_target = t * st.topo.time_scale;
    double wait = wall_target - WallSeconds(st);
    if (wait > 0) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      lock.lock();
    }
  }
  st.host_now = std::max(st.host_now, t);
}

// Work finishing at t is done when the host clock has passed it. With time_scale 0 a poll that
// finds it pending moves the host clock there, so pollers see "not ready" once and then progress.
bool Completed(State& st, double t) {
  if (std::isinf(t)) return false;  // never (p2psim_stream_hang); the host clock stays where it is
  if (t <= SimNow(st)) return true;
  if (st.topo.time_scale == 0) st.host_now = t;
  return false;
}

Stream* Legacy(State& st, int device) { return st.legacy[device].get(); }

Stream* PerThread(State& st, int device) {
  Stream*& s = T().per_thread[device];
  if (s == nullptr || !st.streams.count(s)) {
    s = new Stream();
    s->device = device;
    s->per_thread = true;
    st.streams.insert(s);
  }
  return s;
}

// Maps a cudaStream_t to its simulated stream; ptsz: a null handle means the per-thread stream.
Stream* Resolve(State& st, cudaStream_t handle, bool ptsz) {
  auto raw = reinterpret_cast<uintptr_t>(handle);
  if (raw == 0) return ptsz ? PerThread(st, CurDev()) : Legacy(st, CurDev());
  if (handle == cudaStreamLegacy) return Legacy(st, CurDev());
  if (handle == cudaStreamPerThread) return PerThread(st, CurDev());
  auto* s = reinterpret_cast<Stream*>(handle);
  return st.streams.count(s) ? s : nullptr;
}

bool Blocking(const Stream* s) { return !(s->flags & cudaStreamNonBlocking); }

// When work queued on s can start: after s's own work, and CUDA's legacy-stream rules: the legacy
// stream waits for every blocking stream of its device and they wait for it. `other` is the second
// device of a copy issued without a stream, which is ordered after that device's work as well.
double StartTime(State& st, Stream* s, int other = -1) {
  double t = std::max(s->t, SimNow(st));
  auto device_work = [&](int d) {
    t = std::max(t, Legacy(st, d)->t);
    for (Stream* o : st.streams)
      if (o->device == d && Blocking(o)) t = std::max(t, o->t);
  };
  if (s->legacy) {
    device_work(s->device);
    if (other >= 0 && other != s->device) device_work(other);
  } else if (Blocking(s)) {
    t = std::max(t, Legacy(st, s->device)->t);
  }
  return t;
}

// Queues `seconds` of work on s; returns when it completes on the simulated clock.
double Enqueue(State& st, Stream* s, double seconds, int other = -1) {
  s->t = StartTime(st, s, other) + seconds;
  return s->t;
}

// ---------------------------------------------------------------------------------------------
// Memory

struct Where {
  bool known = false;         // a CUDA allocation or mapping
  Alloc* alloc = nullptr;
  uintptr_t base = 0;
  int host_gpu = -1;          // -1: host memory
};

Where Locate(State& st, const void* p) {
  Where w;
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = st.allocs.upper_bound(addr);
  if (it != st.allocs.begin()) {
    --it;
    if (addr < it->first + std::max<size_t>(it->second.size, 1)) {
      w.known = true;
      w.alloc = &it->second;
      w.base = it->first;
      w.host_gpu = it->second.host_gpu;
    }
  }
  return w;
}

// A VMM mapping and the ones mapped right after it: [p, p + bytes) may run across them (torch's
// expandable segments map a tensor's memory as several handles side by side). Calls fn on each
// mapping the span touches, stopping when fn returns false; returns whether the span is all mapped.
template <typename Fn>
bool ForEachMapping(const State& st, const Where& w, const void* p, size_t bytes, Fn fn) {
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + std::max<size_t>(bytes, 1);
  for (auto it = st.allocs.find(w.base); it != st.allocs.end() && it->second.kind == Alloc::kVmm; ++it) {
    if (!fn(it->second)) return true;
    uintptr_t next = it->first + it->second.size;
    if (end <= next) return true;
    auto following = std::next(it);
    if (following == st.allocs.end() || following->first != next) return false;  // a hole
  }
  return false;
}

// An address in a device's arena or a VMM reservation that no allocation or mapping holds.
bool Unbacked(const State& st, const void* p) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  for (const auto& [gpu, a] : st.arenas)
    if (a.base != 0 && addr >= a.base && addr < a.base + a.capacity) return true;
  auto it = st.reservations.upper_bound(addr);
  return it != st.reservations.begin() && addr < std::prev(it)->first + std::prev(it)->second.len;
}

bool InBounds(const State& st, const Where& w, const void* p, size_t bytes) {
  if (!w.known) return true;  // pageable host memory: the caller's business, as with CUDA
  if (w.alloc->kind == Alloc::kVmm) return ForEachMapping(st, w, p, bytes, [](const Alloc&) { return true; });
  return reinterpret_cast<uintptr_t>(p) + bytes <= w.base + w.alloc->size;
}

// The access device `ordinal` has to [p, p + bytes) when that memory's access is set per device: the
// least over the VMM mappings it spans, or the pool's; -1 for other memory (cudaMalloc'd, IPC, host),
// which peer access governs.
int DeviceAccess(const State& st, const Where& w, const void* p, size_t bytes, int ordinal) {
  if (!w.known || ordinal < 0 || ordinal >= DeviceCount(st)) return -1;
  if (w.alloc->kind == Alloc::kPool) return w.alloc->pool->access[ordinal];
  if (w.alloc->kind != Alloc::kVmm) return -1;
  int least = kAccessReadWrite;
  ForEachMapping(st, w, p, bytes, [&](const Alloc& a) {
    least = std::min<int>(least, a.access[ordinal]);
    return true;
  });
  return least;
}
// Whether that memory's per-device access lets `ordinal` do `need` (false for other memory).
bool Granted(const State& st, const Where& w, const void* p, size_t bytes, int ordinal, unsigned char need) {
  int a = DeviceAccess(st, w, p, bytes, ordinal);
  return a >= 0 && (a & need) == need;
}

constexpr size_t kGranule = 2u << 20;
constexpr size_t kPoolChunk = 32u << 20;
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Maps `size` bytes of `fd` into the GPU's range (allocation granularity 2 MiB, like cudaMalloc's).
void* ArenaMap(State& st, int host_gpu, int fd, size_t size) {
  Arena& a = st.arenas[host_gpu];
  if (a.base == 0) {
    // Room for fragmentation and IPC mappings; P2PSIM_ARENA_GB shrinks it for tools such as
    // valgrind that cannot reserve hundreds of GiB of address space.
    a.capacity = RoundUp(p2psim::ModelOf(st.host->FindGpu(host_gpu)->name).memory, kGranule) * 2;
    if (const char* gb = std::getenv("P2PSIM_ARENA_GB"); gb && std::atoi(gb) > 0)
      a.capacity = std::min(a.capacity, static_cast<size_t>(std::atoi(gb)) << 30);
    void* r = mmap(nullptr, a.capacity + kGranule, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return nullptr;
    a.base = RoundUp(reinterpret_cast<uintptr_t>(r), kGranule);
  }
  size_t len = RoundUp(size, kGranule), off = SIZE_MAX;
  for (auto it = a.free.begin(); it != a.free.end(); ++it)
    if (it->second >= len) {
      off = it->first;
      if (it->second > len) a.free[off + len] = it->second - len;
      a.free.erase(it);
      break;
    }
  if (off == SIZE_MAX) {
    if (a.bump + len > a.capacity) return nullptr;
    off = a.bump;
    a.bump += len;
  }
  void* p = mmap(reinterpret_cast<void*>(a.base + off), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void ArenaUnmap(State& st, int host_gpu, void* p, size_t size) {
  Arena& a = st.arenas[host_gpu];
  size_t len = RoundUp(size, kGranule), off = reinterpret_cast<uintptr_t>(p) - a.base;
  // Keep the range reserved: map inaccessible memory over it instead of unmapping.
  mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  auto next = a.free.lower_bound(off);
  if (next != a.free.end() && next->first == off + len) {
    len += next->second;
    a.free.erase(next);
  }
  auto prev = a.free.lower_bound(off);
  if (prev != a.free.begin() && (--prev)->first + prev->second == off) {
    prev->second += len;
    return;
  }
  a.free[off] = len;
}

// A memfd of `size` bytes: the memory of a device allocation (sparse until written).
int DeviceMemfd(size_t size) {
  int fd = memfd_create("p2psim-device-memory", 0);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// Device memory of `ordinal` in its arena (cudaMalloc's: kDevice; a pool's: kPool).
cudaError_t AllocOn(State& st, int ordinal, void** ptr, size_t size, Alloc::Kind kind = Alloc::kDevice,
                    MemPool* pool = nullptr) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  if (size == 0) { *ptr = nullptr; return cudaSuccess; }
  if (size > DeviceMemory(st, ordinal)) return cudaErrorMemoryAllocation;
  int fd = DeviceMemfd(size);
  if (fd < 0) return cudaErrorMemoryAllocation;
  void* p = ArenaMap(st, st.visible[ordinal], fd, size);
  if (p == nullptr) { close(fd); return cudaErrorMemoryAllocation; }
  Alloc a;
  a.size = size;
  a.kind = kind;
  a.host_gpu = st.visible[ordinal];
  a.fd = fd;
  a.pool = pool;
  st.allocs[reinterpret_cast<uintptr_t>(p)] = a;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t AllocDevice(State& st, void** ptr, size_t size) { return AllocOn(st, CurDev(), ptr, size); }

void DropPool(State& st, MemPool* pool);

// Frees what cudaMalloc (kDevice, which also frees pool memory, as cudaFree does) or cudaHostAlloc
// (kHostPinned) made; VMM mappings and IPC memory are not theirs to free.
cudaError_t FreeKind(State& st, void* p, Alloc::Kind kind) {
  if (p == nullptr) return cudaSuccess;
  auto it = st.allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == st.allocs.end()) return cudaErrorInvalidValue;
  Alloc& a = it->second;
  if (a.kind != kind && !(kind == Alloc::kDevice && a.kind == Alloc::kPool)) return cudaErrorInvalidValue;
  if (kind == Alloc::kDevice) ArenaUnmap(st, a.host_gpu, p, a.size);
  else munmap(p, a.size);
  if (a.fd >= 0) close(a.fd);
  MemPool* pool = a.kind == Alloc::kPool ? a.pool : nullptr;
  if (pool != nullptr) {
    pool->used -= std::min(pool->used, a.size);
    pool->granules -= std::min(pool->granules, RoundUp(a.size, kGranule));
    pool->reserved = RoundUp(pool->granules, kPoolChunk);
    --pool->live;
  }
  st.allocs.erase(it);
  if (pool != nullptr && pool->destroyed && pool->live == 0) DropPool(st, pool);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Stream-ordered memory pools (both APIs; CUmemoryPool and cudaMemPool_t are one type). An
// allocation is made at once and freed at once (copies move their bytes at once too, so the stream
// order holds). A pool reserves device memory in 32 MiB chunks (as an H200 under CUDA 13 does: a
// first 1 MiB allocation reserves 32 MiB, a 40 MiB one 64 MiB); "reserved" is what live
// allocations need in such chunks (nothing is kept after a free: the release threshold is moot).

MemPool* NewPool(State& st, int ordinal) {
  auto* p = new MemPool();
  p->device = ordinal;
  p->access.assign(DeviceCount(st), kAccessNone);
  p->access[ordinal] = kAccessReadWrite;  // its own device, always
  st.pools.insert(p);
  return p;
}
MemPool* DefaultPool(State& st, int ordinal) {
  MemPool*& p = st.default_pool[ordinal];
  if (p == nullptr) {
    p = NewPool(st, ordinal);
    p->is_default = true;
  }
  return p;
}
MemPool* CurrentPool(State& st, int ordinal) {
  MemPool*& p = st.current_pool[ordinal];
  if (p == nullptr) p = DefaultPool(st, ordinal);
  return p;
}
// A pool the program may name (not destroyed).
MemPool* KnownPool(const State& st, cudaMemPool_t handle) {
  auto* p = reinterpret_cast<MemPool*>(handle);
  return st.pools.count(p) && !p->destroyed ? p : nullptr;
}
void DropPool(State& st, MemPool* pool) {
  st.pools.erase(pool);
  delete pool;
}

// cudaMemPoolCreate / cuMemPoolCreate (the two props structs have one layout): pinned device memory
// of a visible device; host pools are not simulated (`*host` set, the caller says so).
cudaError_t PoolCreate(State& st, cudaMemPool_t* out, const cudaMemPoolProps* props, bool* host) {
  *host = false;
  if (out == nullptr || props == nullptr) return cudaErrorInvalidValue;
  if (props->allocType != cudaMemAllocationTypePinned) return cudaErrorInvalidValue;
  if (props->location.type == cudaMemLocationTypeHost || props->location.type == cudaMemLocationTypeHostNuma) {
    *host = true;
    return cudaErrorNotSupported;
  }
  if (props->location.type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
  if (!ValidDevice(st, props->location.id)) return cudaErrorInvalidValue;  // (CUDA 13: 1, not 101)
  constexpr unsigned kHandleTypes = cudaMemHandleTypePosixFileDescriptor | cudaMemHandleTypeFabric;
  if (static_cast<unsigned>(props->handleTypes) & ~kHandleTypes) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(Mu());
  MemPool* p = NewPool(st, props->location.id);
  p->handle_types = static_cast<unsigned>(props->handleTypes);
  p->max_size = props->maxSize;
  *out = reinterpret_cast<cudaMemPool_t>(p);
  return cudaSuccess;
}

// A device's pool can never be destroyed; another goes when its last allocation is freed. A
// destroyed current pool gives way to the device's default one.
cudaError_t PoolDestroy(State& st, cudaMemPool_t handle) {
  std::lock_guard<std::mutex> lock(Mu());
  MemPool* p = KnownPool(st, handle);
  if (p == nullptr || p->is_default) return cudaErrorInvalidValue;
  if (st.current_pool[p->device] == p) st.current_pool[p->device] = DefaultPool(st, p->device);
  p->destroyed = true;
  if (p->live == 0) DropPool(st, p);
  return cudaSuccess;
}

// `which`: 0 the default pool, 1 the current one.
cudaError_t DevicePool(State& st, cudaMemPool_t* out, int device, int which) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if (!ValidDevice(st, device)) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(Mu());
  *out = reinterpret_cast<cudaMemPool_t>(which == 0 ? DefaultPool(st, device) : CurrentPool(st, device));
  return cudaSuccess;
}

// The pool must be the device's own.
cudaError_t SetDevicePool(State& st, int device, cudaMemPool_t handle) {
  if (!ValidDevice(st, device)) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(Mu());
  MemPool* p = KnownPool(st, handle);
  if (p == nullptr || p->device != device) return cudaErrorInvalidValue;
  st.current_pool[device] = p;
  return cudaSuccess;
}

// Under the lock: `size` bytes from the pool named (from_pool) or the current pool of the stream's
// device, in stream order on `handle` (the pool may be another device's). Size 0 gives null (both
// APIs, as CUDA 13 does).
cudaError_t PoolAlloc(State& st, void** ptr, size_t size, bool from_pool, cudaMemPool_t pool_handle,
                      cudaStream_t handle, bool ptsz) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  if (ptr == nullptr) return cudaErrorInvalidValue;
  MemPool* pool = from_pool ? KnownPool(st, pool_handle) : nullptr;
  if (from_pool && pool == nullptr) return cudaErrorInvalidValue;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (pool == nullptr) pool = CurrentPool(st, s->device);
  if (size == 0) { *ptr = nullptr; return cudaSuccess; }
  size_t granules = RoundUp(size, kGranule);
  if (pool->max_size != 0 && RoundUp(pool->granules + granules, kPoolChunk) > RoundUp(pool->max_size, kPoolChunk))
    return cudaErrorMemoryAllocation;
  if (cudaError_t r = AllocOn(st, pool->device, ptr, size, Alloc::kPool, pool); r != cudaSuccess) return r;
  ++pool->live;
  pool->used += size;
  pool->granules += granules;
  pool->reserved = RoundUp(pool->granules, kPoolChunk);
  pool->used_high = std::max(pool->used_high, pool->used);
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  return cudaSuccess;
}

// cudaFreeAsync / cuMemFreeAsync: pool memory (or cudaMalloc'd memory, freed at once as well).
cudaError_t PoolFree(State& st, void* p, cudaStream_t handle, bool ptsz) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  if (Resolve(st, handle, ptsz) == nullptr) return cudaErrorInvalidResourceHandle;
  return FreeKind(st, p, Alloc::kDevice);
}

bool HostLocation(int type) { return type == cudaMemLocationTypeHost || type == cudaMemLocationTypeHostNuma; }

// One access descriptor's checks (shared by pools and VMM ranges; the CUDA structs have one layout),
// with the codes CUDA 13 returns (measured on an H200, driver 580): a host location → 801 (device
// memory cannot be granted to the host), another non-device one → 1; an unknown device → 1 for a
// VMM range, 101 for a pool; a bad flag → 1; for a pool, read-only → 801 and revoking its own
// device → 101. A device other than the owner needs a peer-capable pair, else 101 (unmeasured: one
// GPU; CUDA's code for the incapable pair).
cudaError_t CheckAccessDesc(const State& st, const cudaMemAccessDesc& d, int owner, bool pool) {
  if (HostLocation(d.location.type)) return cudaErrorNotSupported;
  if (d.location.type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
  if (!ValidDevice(st, d.location.id)) return pool ? cudaErrorInvalidDevice : cudaErrorInvalidValue;
  unsigned f = static_cast<unsigned>(d.flags);
  if (f != kAccessNone && f != kAccessRead && f != kAccessReadWrite) return cudaErrorInvalidValue;
  if (pool && f == kAccessRead) return cudaErrorNotSupported;
  if (pool && d.location.id == owner && f == kAccessNone) return cudaErrorInvalidDevice;
  if (d.location.id != owner && f != kAccessNone &&
      !p2psim::PeerCapable(st.topo, *st.host, st.visible[owner], st.visible[d.location.id]))
    return cudaErrorInvalidDevice;
  return cudaSuccess;
}

// cudaMemPoolSetAccess / cuMemPoolSetAccess: all descriptors checked before any applies; the pool's
// own device keeps read-write.
cudaError_t PoolSetAccess(State& st, cudaMemPool_t handle, const cudaMemAccessDesc* map, size_t count) {
  std::lock_guard<std::mutex> lock(Mu());
  MemPool* p = KnownPool(st, handle);
  if (p == nullptr || (map == nullptr && count != 0)) return cudaErrorInvalidValue;
  for (size_t i = 0; i < count; ++i)
    if (cudaError_t r = CheckAccessDesc(st, map[i], p->device, true); r != cudaSuccess) return r;
  for (size_t i = 0; i < count; ++i) p->access[map[i].location.id] = static_cast<unsigned char>(map[i].flags);
  return cudaSuccess;
}

// A host location reads "none" (pools of device memory); an unknown device → 1.
cudaError_t PoolGetAccess(State& st, int* flags, cudaMemPool_t handle, const cudaMemLocation* location) {
  std::lock_guard<std::mutex> lock(Mu());
  MemPool* p = KnownPool(st, handle);
  if (p == nullptr || flags == nullptr || location == nullptr) return cudaErrorInvalidValue;
  if (HostLocation(location->type)) { *flags = kAccessNone; return cudaSuccess; }
  if (location->type != cudaMemLocationTypeDevice || !ValidDevice(st, location->id)) return cudaErrorInvalidValue;
  *flags = p->access[location->id];
  return cudaSuccess;
}

// cudaMemPoolAttr and CUmemPool_attribute number the attributes alike. The reuse switches and the
// release threshold are kept (nothing is held back in the sim, so they change nothing); the
// high-water marks can only be reset to 0.
cudaError_t PoolAttribute(State& st, cudaMemPool_t handle, int attr, void* value, bool set) {
  std::lock_guard<std::mutex> lock(Mu());
  MemPool* p = KnownPool(st, handle);
  if (p == nullptr || value == nullptr) return cudaErrorInvalidValue;
  auto u64 = static_cast<unsigned long long*>(value);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies: {
      int& r = p->reuse[attr - cudaMemPoolReuseFollowEventDependencies];
      if (set) r = *static_cast<int*>(value) != 0;
      else *static_cast<int*>(value) = r;
      return cudaSuccess;
    }
    case cudaMemPoolAttrReleaseThreshold:
      if (set) p->release_threshold = *u64;
      else *u64 = p->release_threshold;
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent:
      if (set) return cudaErrorInvalidValue;
      *u64 = attr == cudaMemPoolAttrUsedMemCurrent ? p->used : p->reserved;
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh: {
      size_t& high = attr == cudaMemPoolAttrUsedMemHigh ? p->used_high : p->reserved_high;
      if (!set) { *u64 = high; return cudaSuccess; }
      if (*u64 != 0) return cudaErrorInvalidValue;
      high = attr == cudaMemPoolAttrUsedMemHigh ? p->used : p->reserved;
      return cudaSuccess;
    }
    default:
      return cudaErrorInvalidValue;
  }
}

// Nothing is held back, so there is nothing to trim.
cudaError_t PoolTrim(State& st, cudaMemPool_t handle) {
  std::lock_guard<std::mutex> lock(Mu());
  return KnownPool(st, handle) ? cudaSuccess : cudaErrorInvalidValue;
}

// ---------------------------------------------------------------------------------------------
// Copies

bool PeerDirect(const State& st, int gpu_a, int gpu_b) {
  int a = OrdinalOf(st, gpu_a), b = OrdinalOf(st, gpu_b);
  if (a < 0 || b < 0) return false;
  return st.peer_on[a][b] || st.peer_on[b][a];
}

// The bytes a copy's rows span on each side.
size_t SrcSpan(const Rows& r) { return r.spitch * (r.height - 1) + r.width; }
size_t DstSpan(const Rows& r) { return r.dpitch * (r.height - 1) + r.width; }

// Seconds a copy takes between two places (host GPU index, -1 for host memory). Between two GPUs it
// is direct when peer access is on between them (either way), the memory came through IPC, or the
// memory of one side lets the other side's device at it (VMM mappings and pools: cuMemSetAccess,
// cuMemPoolSetAccess; read for the source, read-write for the destination); else host-staged.
// `*direct`: the copy went GPU to GPU without the host.
// The copy is charged to the links it crosses first (sim_links.h: a fault's counters grow, and the
// copy that fires a PCIe downtrain already runs at the narrowed rate).
double CopySeconds(const State& st, const Where& src, const void* sp, const Where& dst, const void* dp,
                   const Rows& rows, bool* direct_copy = nullptr) {
  size_t bytes = rows.width * rows.height;
  double gbps;
  int a = src.host_gpu, b = dst.host_gpu;
  if (a < 0 && b < 0) {
    gbps = st.topo.bandwidth.host_staged;
  } else if (a < 0 || b < 0) {
    p2psim::ChargeTransfer(st.topo, *st.host, a, b, false, bytes);
    gbps = p2psim::HostDeviceBandwidth(st.topo, *st.host, a < 0 ? b : a);
  } else if (a == b) {
    gbps = p2psim::kDeviceLocalGbps;
  } else {
    bool ipc_direct = (src.alloc && src.alloc->kind == Alloc::kIpc && src.alloc->ipc_direct) ||
                      (dst.alloc && dst.alloc->kind == Alloc::kIpc && dst.alloc->ipc_direct);
    bool granted = Granted(st, src, sp, SrcSpan(rows), OrdinalOf(st, b), kAccessRead) ||
                   Granted(st, dst, dp, DstSpan(rows), OrdinalOf(st, a), kAccessReadWrite);
    bool direct = ipc_direct || PeerDirect(st, a, b) || granted;
    if (direct_copy) *direct_copy = direct;
    p2psim::ChargeTransfer(st.topo, *st.host, a, b, direct, bytes);
    if (direct && st.topo.link_faults.empty()) {
      auto [it, added] = st.direct_gbps.try_emplace({a, b}, 0.0);
      if (added) it->second = p2psim::DirectBandwidth(st.topo, *st.host, a, b);
      gbps = it->second;
    } else if (direct) {  // a PCIe downtrain changes the rate while the process runs
      gbps = p2psim::DirectBandwidth(st.topo, *st.host, a, b);
    } else {
      gbps = st.topo.bandwidth.host_staged;
    }
  }
  return static_cast<double>(bytes) / (gbps * 1e9);
}

bool ClaimsDevice(cudaMemcpyKind kind, bool src_side) {
  switch (kind) {
    case cudaMemcpyHostToDevice: return !src_side;
    case cudaMemcpyDeviceToHost: return src_side;
    case cudaMemcpyDeviceToDevice: return true;
    default: return false;
  }
}

// Work queued on a capturing stream becomes a graph node instead of running; on a stream whose
// capture was invalidated it fails. Returns true when the caller must return `*result` at once.
bool Captured(Stream* s, cudaError_t* result, const GraphWork* work = nullptr) {
  if (s->capture == cudaStreamCaptureStatusActive) {
    ++s->capture_graph->nodes;
    if (work != nullptr) s->capture_graph->work.push_back(*work);
    *result = cudaSuccess;
    return true;
  }
  if (s->capture == cudaStreamCaptureStatusInvalidated) {
    *result = cudaErrorStreamCaptureInvalidated;
    return true;
  }
  return false;
}

// One copy on one stream. `sync`: the host waits for it (cudaMemcpy, cudaMemcpyPeer, …);
// no_stream: issued without a stream argument (ordered after both devices' work).
// A copy's direction and pitches, and then its two sides, whether it runs now or as a graph node.
cudaError_t CheckShape(const Rows& rows, cudaMemcpyKind kind) {
  if (static_cast<int>(kind) < 0 || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  if (rows.width > rows.spitch || rows.width > rows.dpitch) return cudaErrorInvalidPitchValue;
  return cudaSuccess;
}
cudaError_t CheckSides(State& st, void* dst, const void* src, const Rows& rows, cudaMemcpyKind kind, Where* ws,
                       Where* wd) {
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  *ws = Locate(st, src), *wd = Locate(st, dst);
  // Device address space with nothing there (freed, or reserved and not mapped) is no host memory.
  if ((!ws->known && Unbacked(st, src)) || (!wd->known && Unbacked(st, dst))) return cudaErrorInvalidValue;
  if ((ClaimsDevice(kind, true) && ws->host_gpu < 0) || (ClaimsDevice(kind, false) && wd->host_gpu < 0))
    return cudaErrorInvalidValue;
  size_t span_s = SrcSpan(rows), span_d = DstSpan(rows);
  if (!InBounds(st, *ws, src, span_s) || !InBounds(st, *wd, dst, span_d)) return cudaErrorInvalidValue;
  // Memory with per-device access needs a device of the copy that may touch it: its own device
  // (a local or host-staged copy) or the other side's GPU (a direct copy). VMM memory no device was
  // given access to (cuMemMap alone) fails so.
  auto usable = [&](const Where& w, const void* p, size_t span, int other_gpu, unsigned char need) {
    int owner = OrdinalOf(st, w.host_gpu);
    if (DeviceAccess(st, w, p, span, owner) < 0) return true;
    if (Granted(st, w, p, span, owner, need)) return true;
    int other = other_gpu >= 0 ? OrdinalOf(st, other_gpu) : -1;
    return other >= 0 && other != owner && Granted(st, w, p, span, other, need);
  };
  if (!usable(*ws, src, span_s, wd->host_gpu, kAccessRead) || !usable(*wd, dst, span_d, ws->host_gpu, kAccessReadWrite))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t Copy(State& st, std::unique_lock<std::mutex>& lock, void* dst, const void* src, Rows rows,
                 cudaMemcpyKind kind, cudaStream_t handle, bool ptsz, bool sync, bool no_stream) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  if (cudaError_t r = CheckShape(rows, kind); r != cudaSuccess) return r;
  size_t bytes = rows.width * rows.height;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (bytes == 0) return cudaSuccess;
  Where ws, wd;
  if (cudaError_t r = CheckSides(st, dst, src, rows, kind, &ws, &wd); r != cudaSuccess) return r;
  GraphWork node{true, dst, src, rows, 0};
  if (cudaError_t r = cudaSuccess; Captured(s, &r, &node)) return r;  // moves nothing until launched
  for (size_t r = 0; r < rows.height; ++r)
    MoveBytes(static_cast<char*>(dst) + r * rows.dpitch, static_cast<const char*>(src) + r * rows.spitch, rows.width);
  int other = -1;
  if (no_stream) other = OrdinalOf(st, ws.host_gpu == st.visible[s->device] ? wd.host_gpu : ws.host_gpu);
  bool direct = false;
  double end = Enqueue(st, s, CopySeconds(st, ws, src, wd, dst, rows, &direct), other);
  if (direct)
    if (const p2psim::CopyFault* f = p2psim::FindCopyFault(st.topo, *st.host, ws.host_gpu, wd.host_gpu)) {
      if (f->fault == "hang") {
        end = s->t = HUGE_VAL;  // never completes: events behind it stay not ready
      } else if (f->fault == "corrupt") {  // one bit of a word in every 64 KiB that arrived
        for (size_t r = 0; r < rows.height; ++r)
          for (size_t off = 0; off < rows.width; off += 64 << 10) static_cast<char*>(dst)[r * rows.dpitch + off] ^= 1;
      }
    }
  if (sync) WaitUntil(st, lock, end);
  return cudaSuccess;
}

Rows Linear(size_t count) { return Rows{count, 1, count, count}; }

cudaError_t PeerCopy(State& st, std::unique_lock<std::mutex>& lock, void* dst, int dst_dev, const void* src,
                     int src_dev, size_t count, cudaStream_t stream, bool sync) {
  if (!ValidDevice(st, dst_dev) || !ValidDevice(st, src_dev)) return cudaErrorInvalidDevice;
  return Copy(st, lock, dst, src, Linear(count), cudaMemcpyDeviceToDevice, stream, false, sync, sync);
}

// `count` elements of `elem` bytes (1: cudaMemset's bytes; 2, 4: the driver's cuMemsetD16/D32)
// set to `value`'s low bytes.
cudaError_t Memset(State& st, std::unique_lock<std::mutex>& lock, void* p, unsigned value, size_t elems,
                   cudaStream_t handle, bool ptsz, bool sync, unsigned elem = 1) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (elem > 1 && reinterpret_cast<uintptr_t>(p) % elem != 0) return cudaErrorInvalidValue;  // misaligned
  size_t count = elems * elem;
  if (count == 0) return cudaSuccess;
  Where w = Locate(st, p);
  if (!w.known || !InBounds(st, w, p, count)) return cudaErrorInvalidValue;
  // The stream's device writes: memory with per-device access must let it.
  if (DeviceAccess(st, w, p, count, s->device) >= 0 && !Granted(st, w, p, count, s->device, kAccessReadWrite))
    return cudaErrorInvalidValue;
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  if (elem == 1) {
    SetBytes(p, static_cast<unsigned char>(value), count);
  } else {
    for (size_t i = 0; i < elems; ++i) std::memcpy(static_cast<char*>(p) + i * elem, &value, elem);  // little-endian
  }
  double end = Enqueue(st, s, static_cast<double>(count) / (p2psim::kDeviceLocalGbps * 1e9));
  if (sync) WaitUntil(st, lock, end);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Host functions: run in order by one worker thread, never under the state lock.

void Worker() {
  State& st = S();
  std::unique_lock<std::mutex> lock(Mu());
  for (;;) {
    st.work_cv.wait(lock, [&] { return !st.host_funcs.empty(); });
    HostFunc f = st.host_funcs.front();
    st.host_funcs.pop_front();
    lock.unlock();
    T().in_host_func = true;
    if (f.fn) f.fn(f.data);
    else f.cb(f.handle, cudaSuccess, f.data);
    T().in_host_func = false;
    lock.lock();
    if (f.stream != nullptr && (st.streams.count(f.stream) || f.stream->legacy)) --f.stream->pending_host_funcs;
    st.cv.notify_all();
  }
}

void StartWorker(State& st) {
  if (st.worker_running) return;
  st.worker_running = true;
  std::thread(Worker).detach();
}

// Drops `n` references of user object u (under the lock); at zero its destructor is queued for the
// host-function thread (as CUDA runs it on a thread of its own: never under the caller's locks).
void DropUserRefs(State& st, UserObject* u, unsigned n) {
  if (!st.user_objects.count(u)) return;
  u->refs -= std::min(n, u->refs);
  if (u->refs != 0) return;
  st.user_objects.erase(u);
  StartWorker(st);
  st.host_funcs.push_back(HostFunc{nullptr, u->destroy, u->ptr, nullptr, nullptr});
  st.work_cv.notify_one();
  delete u;
}
void DropAllUserRefs(State& st, UserRefs& refs) {
  for (auto [u, n] : refs) DropUserRefs(st, u, n);
  refs.clear();
}
void TakeUserRefs(const UserRefs& from, UserRefs* to) {
  for (auto [u, n] : from) {
    u->refs += n;
    (*to)[u] += n;
  }
}

cudaError_t UserObjectCreate(State& st, UserObject** out, void* ptr, cudaHostFn_t destroy, unsigned refs, unsigned flags) {
  if (out == nullptr || destroy == nullptr || refs == 0 || flags != cudaUserObjectNoDestructorSync)
    return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(Mu());
  auto* u = new UserObject{ptr, destroy, refs};
  st.user_objects.insert(u);
  *out = u;
  return cudaSuccess;
}
cudaError_t UserObjectRetain(State& st, UserObject* u, unsigned n) {
  std::lock_guard<std::mutex> lock(Mu());
  if (n == 0 || !st.user_objects.count(u)) return cudaErrorInvalidValue;
  u->refs += n;
  return cudaSuccess;
}
cudaError_t UserObjectRelease(State& st, UserObject* u, unsigned n) {
  std::lock_guard<std::mutex> lock(Mu());
  if (n == 0 || !st.user_objects.count(u)) return cudaErrorInvalidValue;
  DropUserRefs(st, u, n);
  return cudaSuccess;
}
// A graph the program may name: made, or still being captured (cudaStreamGetCaptureInfo gives it).
bool KnownGraph(const State& st, Graph* g) {
  if (st.graphs.count(g)) return true;
  for (Stream* s : st.streams)
    if (s->capture_graph == g) return true;
  return false;
}
// The graph takes n references: new ones, or (cudaGraphUserObjectMove) the caller's.
cudaError_t GraphRetainUserObject(State& st, cudaGraph_t graph, UserObject* u, unsigned n, unsigned flags) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = reinterpret_cast<Graph*>(graph);
  if (n == 0 || (flags & ~unsigned{cudaGraphUserObjectMove}) || !KnownGraph(st, g) || !st.user_objects.count(u))
    return cudaErrorInvalidValue;
  if (!(flags & cudaGraphUserObjectMove)) u->refs += n;
  g->user_refs[u] += n;
  return cudaSuccess;
}
cudaError_t GraphReleaseUserObject(State& st, cudaGraph_t graph, UserObject* u, unsigned n) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = reinterpret_cast<Graph*>(graph);
  if (n == 0 || !KnownGraph(st, g) || !st.user_objects.count(u)) return cudaErrorInvalidValue;
  auto it = g->user_refs.find(u);
  if (it == g->user_refs.end() || it->second < n) return cudaErrorInvalidValue;
  if ((it->second -= n) == 0) g->user_refs.erase(it);
  DropUserRefs(st, u, n);
  return cudaSuccess;
}

cudaError_t QueueHostFunc(State& st, cudaStream_t handle, bool ptsz, cudaHostFn_t fn, cudaStreamCallback_t cb, void* data) {
  if (fn == nullptr && cb == nullptr) return cudaErrorInvalidValue;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  StartWorker(st);
  ++s->pending_host_funcs;
  st.host_funcs.push_back(HostFunc{s, fn, data, cb, handle});
  st.work_cv.notify_one();
  return cudaSuccess;
}

void DrainHostFuncs(State& st, std::unique_lock<std::mutex>& lock, Stream* s) {
  st.cv.wait(lock, [&] { return s->pending_host_funcs == 0 || !st.worker_running; });
}

cudaError_t SyncStream(State& st, std::unique_lock<std::mutex>& lock, Stream* s) {
  if (s->capture != cudaStreamCaptureStatusNone) {
    s->capture = cudaStreamCaptureStatusInvalidated;
    return cudaErrorStreamCaptureUnsupported;
  }
  DrainHostFuncs(st, lock, s);
  WaitUntil(st, lock, StartTime(st, s));
  return cudaSuccess;
}

cudaError_t EventRecord(State& st, cudaEvent_t ev, cudaStream_t handle, bool ptsz) {
  auto* e = reinterpret_cast<Event*>(ev);
  if (!st.events.count(e)) return cudaErrorInvalidResourceHandle;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (s->device != e->device) return cudaErrorInvalidResourceHandle;  // event and stream on one device
  e->capture_id = s->capture == cudaStreamCaptureStatusActive ? s->capture_id : 0;
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  e->recorded = true;
  e->t = StartTime(st, s);
  return cudaSuccess;
}

cudaError_t Launch(State& st, cudaStream_t handle, bool ptsz) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  GraphWork node{false, nullptr, nullptr, {}, kKernelSeconds};
  if (cudaError_t r = cudaSuccess; Captured(s, &r, &node)) return r;
  Enqueue(st, s, kKernelSeconds);  // device code does not run on the simulated node
  return cudaSuccess;
}


template <typename V>
void Put(void* base, size_t off, V v) { std::memcpy(static_cast<char*>(base) + off, &v, sizeof v); }

struct BusId { unsigned domain = 0, bus = 0, device = 0, function = 0; };
BusId ParseBus(const std::string& s) {
  BusId b;
  std::sscanf(s.c_str(), "%x:%x:%x.%x", &b.domain, &b.bus, &b.device, &b.function);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Operations both APIs expose, so the runtime and the driver give the same answers. Each takes the
// lock itself unless it says otherwise; codes are cudaError_t, whose numbers the driver's CUresult
// shares for every code returned here (a driver wrapper maps the two runtime-only ones).

// A stable UUID derived from host and bus id.
void DeviceUuid(const State& st, int device, unsigned char uuid[16]) {
  std::memset(uuid, 0, 16);
  std::string key = st.host->name + "/" + GpuOf(st, device).bus_id;
  for (size_t i = 0; i < key.size(); ++i) uuid[i % 16] = static_cast<unsigned char>(uuid[i % 16] * 31 + key[i]);
}

// cudaDeviceAttr and CUdevice_attribute number the attributes alike; the values are the GPU
// model's (tests/sim/common/gpu_model).
cudaError_t DeviceAttribute(const State& st, int* value, int attr, int device) {
  if (value == nullptr) return cudaErrorInvalidValue;
  if (!ValidDevice(st, device)) return cudaErrorInvalidDevice;
  const Gpu& g = GpuOf(st, device);
  BusId b = ParseBus(g.bus_id);
  *value = p2psim::DeviceAttribute(p2psim::ModelOf(g.name), attr, b.domain, b.bus, b.device);
  return cudaSuccess;
}

// "0000:1A:00.0", upper case, like CUDA.
cudaError_t FormatBusId(const State& st, char* bus_id, int len, int device) {
  if (bus_id == nullptr || len <= 0) return cudaErrorInvalidValue;
  if (!ValidDevice(st, device)) return cudaErrorInvalidDevice;
  BusId b = ParseBus(GpuOf(st, device).bus_id);
  std::snprintf(bus_id, static_cast<size_t>(len), "%04X:%02X:%02X.%X", b.domain, b.bus, b.device, b.function);
  return cudaSuccess;
}

cudaError_t DeviceByBusId(const State& st, int* device, const char* bus_id) {
  if (device == nullptr || bus_id == nullptr) return cudaErrorInvalidValue;
  BusId want{};
  unsigned parts[4] = {};
  int n = std::sscanf(bus_id, "%x:%x:%x.%x", &parts[0], &parts[1], &parts[2], &parts[3]);
  if (n == 3 || n == 4) want = {parts[0], parts[1], parts[2], n == 4 ? parts[3] : 0};
  else if (std::sscanf(bus_id, "%x:%x.%x", &parts[1], &parts[2], &parts[3]) == 3) want = {0, parts[1], parts[2], parts[3]};
  else return cudaErrorInvalidValue;
  for (int d = 0; d < DeviceCount(st); ++d) {
    BusId b = ParseBus(GpuOf(st, d).bus_id);
    if (b.domain == want.domain && b.bus == want.bus && b.device == want.device) { *device = d; return cudaSuccess; }
  }
  return cudaErrorInvalidDevice;
}

void MemInfo(State& st, int device, size_t* free_bytes, size_t* total) {
  std::lock_guard<std::mutex> lock(Mu());
  size_t used = 0;
  for (auto& [base, a] : st.allocs)
    if ((a.kind == Alloc::kDevice || a.kind == Alloc::kPool) && a.host_gpu == st.visible[device]) used += a.size;
  for (auto& [id, h] : st.vmm)  // physical VMM memory, mapped or not
    if (h.device == device) used += h.size;
  size_t memory = DeviceMemory(st, device);
  if (free_bytes) *free_bytes = memory - std::min(used, memory);
  if (total) *total = memory;
}

cudaError_t DeviceSync(State& st, int device) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  std::unique_lock<std::mutex> lock(Mu());
  double t = Legacy(st, device)->t;
  std::vector<Stream*> mine{Legacy(st, device)};
  for (Stream* s : st.streams)
    if (s->device == device) mine.push_back(s);
  for (Stream* s : mine) {
    DrainHostFuncs(st, lock, s);
    t = std::max(t, s->t);
  }
  WaitUntil(st, lock, t);
  return cudaSuccess;
}

// cudaDeviceReset / cuDevicePrimaryCtxReset: the device's primary context goes, with its memory and
// every peer mapping from or to it; the next use of the device brings up a fresh one.
void ResetDevice(State& st, int d) {
  std::lock_guard<std::mutex> lock(Mu());
  int gpu = st.visible[d];
  for (auto it = st.allocs.begin(); it != st.allocs.end();) {
    if ((it->second.kind == Alloc::kDevice || it->second.kind == Alloc::kPool) && it->second.host_gpu == gpu) {
      ArenaUnmap(st, gpu, reinterpret_cast<void*>(it->first), it->second.size);
      close(it->second.fd);
      it = st.allocs.erase(it);
    } else {
      ++it;
    }
  }
  // The device's pools go with their memory but for its default pool, which starts afresh. (VMM
  // handles and mappings are the process's, not the context's: they stay.)
  for (auto it = st.pools.begin(); it != st.pools.end();) {
    MemPool* p = *it;
    if (p->device != d) { ++it; continue; }
    if (p->is_default) {
      p->access.assign(DeviceCount(st), kAccessNone);
      p->access[d] = kAccessReadWrite;
      p->live = p->used = p->used_high = p->granules = p->reserved = p->reserved_high = 0;
      ++it;
      continue;
    }
    it = st.pools.erase(it);
    delete p;
  }
  st.current_pool.erase(d);
  std::fill(st.peer_on[d].begin(), st.peer_on[d].end(), 0);
  for (auto& row : st.peer_on) row[d] = 0;
  Context& c = *st.primary[d];
  c.active = false;
  c.refs = 0;
  c.runtime_ref = false;
}

cudaError_t CanAccessPeer(const State& st, int* can, int device, int peer) {
  if (can == nullptr) return cudaErrorInvalidValue;
  if (!ValidDevice(st, device) || !ValidDevice(st, peer)) return cudaErrorInvalidDevice;
  *can = device != peer && p2psim::PeerCapable(st.topo, *st.host, st.visible[device], st.visible[peer]);
  return cudaSuccess;
}

// cudaDeviceP2PAttr and CUdevice_P2PAttribute number the attributes alike.
cudaError_t P2PAttribute(const State& st, int* value, int attr, int src, int dst) {
  if (value == nullptr) return cudaErrorInvalidValue;
  if (!ValidDevice(st, src) || !ValidDevice(st, dst) || src == dst) return cudaErrorInvalidDevice;
  int a = st.visible[src], b = st.visible[dst];
  bool capable = p2psim::PeerCapable(st.topo, *st.host, a, b);
  bool nvlink = p2ptrace::ClassifyGpuPath(*st.host, a, b).type == p2ptrace::PathType::kNVLink;
  switch (attr) {
    case cudaDevP2PAttrPerformanceRank: *value = nvlink ? 0 : 1; break;
    case cudaDevP2PAttrAccessSupported: *value = capable; break;
    case cudaDevP2PAttrNativeAtomicSupported: *value = capable && nvlink; break;
    case cudaDevP2PAttrCudaArrayAccessSupported: *value = capable && nvlink; break;
    case 5: *value = 0; break;  // OnlyPartialNativeAtomicSupported
    default: return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// Peer access is per direction, from device d's context to peer's memory.
cudaError_t EnablePeer(State& st, int d, int peer, unsigned flags) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  std::lock_guard<std::mutex> lock(Mu());
  if (!ValidDevice(st, peer) || peer == d) return cudaErrorInvalidDevice;
  if (flags != 0) return cudaErrorInvalidValue;
  if (!p2psim::PeerCapable(st.topo, *st.host, st.visible[d], st.visible[peer])) return cudaErrorPeerAccessUnsupported;
  if (st.peer_on[d][peer]) return cudaErrorPeerAccessAlreadyEnabled;
  if (std::count(st.peer_on[d].begin(), st.peer_on[d].end(), 1) >= kMaxPeers) return cudaErrorTooManyPeers;
  st.peer_on[d][peer] = 1;
  return cudaSuccess;
}

cudaError_t DisablePeer(State& st, int d, int peer) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  std::lock_guard<std::mutex> lock(Mu());
  if (!ValidDevice(st, peer) || peer == d) return cudaErrorInvalidDevice;
  if (!st.peer_on[d][peer]) return cudaErrorPeerAccessNotEnabled;
  st.peer_on[d][peer] = 0;
  return cudaSuccess;
}

cudaError_t HostAlloc(State& st, void** ptr, size_t size) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  if (size == 0) { *ptr = nullptr; return cudaSuccess; }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(Mu());
  Alloc a;
  a.size = size;
  a.kind = Alloc::kHostPinned;
  st.allocs[reinterpret_cast<uintptr_t>(p)] = a;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t CreateStream(State& st, cudaStream_t* out, unsigned flags, int priority) {
  if (out == nullptr || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(Mu());
  auto* s = new Stream();
  s->device = CurDev();
  s->flags = flags;
  s->priority = std::clamp(priority, -5, 0);
  st.streams.insert(s);
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t DestroyStream(State& st, cudaStream_t handle) {
  std::unique_lock<std::mutex> lock(Mu());
  auto* s = reinterpret_cast<Stream*>(handle);
  if (handle == nullptr || !st.streams.count(s) || s->per_thread) return cudaErrorInvalidResourceHandle;
  DrainHostFuncs(st, lock, s);  // CUDA lets queued work finish; the handle dies at once
  st.streams.erase(s);
  delete s;
  return cudaSuccess;
}

cudaError_t SyncHandle(State& st, cudaStream_t handle, bool ptsz) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  std::unique_lock<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  return SyncStream(st, lock, s);
}

cudaError_t CreateEvent(State& st, cudaEvent_t* out, unsigned flags) {
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (out == nullptr || (flags & ~kKnown) != 0) return cudaErrorInvalidValue;
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(Mu());
  auto* e = new Event();
  e->device = CurDev();
  e->flags = flags;
  st.events.insert(e);
  *out = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t DestroyEvent(State& st, cudaEvent_t ev) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* e = reinterpret_cast<Event*>(ev);
  if (!st.events.erase(e)) return cudaErrorInvalidResourceHandle;
  delete e;
  return cudaSuccess;
}

cudaError_t RecordEvent(State& st, cudaEvent_t e, cudaStream_t s, bool ptsz) {
  std::lock_guard<std::mutex> lock(Mu());
  return EventRecord(st, e, s, ptsz);
}

// Whether an event's work is done (cudaEventQuery, cuEventQuery): never recorded counts as done.
cudaError_t QueryEvent(State& st, cudaEvent_t ev) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* e = reinterpret_cast<Event*>(ev);
  if (!st.events.count(e)) return cudaErrorInvalidResourceHandle;
  if (!e->recorded) return cudaSuccess;
  return Completed(st, e->t) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t EventSync(State& st, cudaEvent_t ev) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  std::unique_lock<std::mutex> lock(Mu());
  auto* e = reinterpret_cast<Event*>(ev);
  if (!st.events.count(e)) return cudaErrorInvalidResourceHandle;
  if (e->recorded) WaitUntil(st, lock, e->t);
  return cudaSuccess;
}

cudaError_t ElapsedTime(State& st, float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(Mu());
  auto* start = reinterpret_cast<Event*>(a);
  auto* end = reinterpret_cast<Event*>(b);
  if (!st.events.count(start) || !st.events.count(end)) return cudaErrorInvalidResourceHandle;
  if ((start->flags | end->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  double now = SimNow(st);
  if (start->t > now || end->t > now) return cudaErrorNotReady;
  *ms = static_cast<float>((end->t - start->t) * 1e3);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Stream capture and graphs, for both APIs (a CUgraph is a cudaGraph_t, a CUgraphExec a
// cudaGraphExec_t): captured work becomes the graph's nodes, not executed; a launch runs the
// graph's copies (moving their bytes then) and advances the stream's clock by all of its work.

// Whether a stream's work is done; asking a capturing stream is illegal and invalidates its capture.
cudaError_t QueryStream(State& st, cudaStream_t handle, bool ptsz) {
  std::lock_guard<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (s->capture != cudaStreamCaptureStatusNone) {
    s->capture = cudaStreamCaptureStatusInvalidated;
    return cudaErrorStreamCaptureUnsupported;
  }
  if (s->pending_host_funcs > 0) return cudaErrorNotReady;
  return Completed(st, StartTime(st, s)) ? cudaSuccess : cudaErrorNotReady;
}

// Waiting for an event recorded in a capture makes the stream join that capture (cross-stream
// capture): its later work goes into the same graph until the origin stream ends the capture.
cudaError_t WaitEventOn(State& st, cudaStream_t handle, cudaEvent_t ev, unsigned flags, bool ptsz) {
  std::lock_guard<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, ptsz);
  auto* e = reinterpret_cast<Event*>(ev);
  if (s == nullptr || !st.events.count(e)) return cudaErrorInvalidResourceHandle;
  if (flags & ~1u) return cudaErrorInvalidValue;
  if (e->capture_id != 0 && s->capture == cudaStreamCaptureStatusNone) {
    for (Stream* o : st.streams)
      if (o->capture_origin && o->capture_id == e->capture_id && o->capture == cudaStreamCaptureStatusActive) {
        // The legacy stream never takes part in a capture: a dependency of it on captured work is
        // refused, and the capture is invalidated (as torch's cross-device copy in a capture meets
        // when the other device's current stream is the default one).
        if (s->legacy) {
          for (Stream* j : st.streams)
            if (j->capture_id == o->capture_id) j->capture = cudaStreamCaptureStatusInvalidated;
          return cudaErrorStreamCaptureImplicit;
        }
        s->capture = cudaStreamCaptureStatusActive;
        s->capture_id = o->capture_id;
        s->capture_graph = o->capture_graph;
        s->capture_origin = false;
        break;
      }
  }
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  if (e->recorded) s->t = std::max(s->t, e->t);
  return cudaSuccess;
}

// A capture into a new graph, or into `into` (cudaStreamBeginCaptureToGraph: its work is appended
// there, and the end call returns that graph; the sim's nodes have no dependencies to check).
cudaError_t CaptureBegin(State& st, cudaStream_t handle, int mode, bool ptsz, cudaGraph_t into = nullptr,
                         size_t num_deps = 0, const void* deps = nullptr) {
  std::lock_guard<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (s->legacy) return cudaErrorStreamCaptureUnsupported;
  if (mode < 0 || mode > cudaStreamCaptureModeRelaxed) return cudaErrorInvalidValue;
  auto* g = reinterpret_cast<Graph*>(into);
  if (into != nullptr && !st.graphs.count(g)) return cudaErrorInvalidValue;
  if (num_deps != 0 && deps == nullptr) return cudaErrorInvalidValue;
  if (s->capture != cudaStreamCaptureStatusNone) return cudaErrorIllegalState;
  s->capture = cudaStreamCaptureStatusActive;
  s->capture_id = ++st.capture_ids;
  s->capture_graph = g != nullptr ? g : new Graph{};
  s->capture_origin = true;
  s->capture_into = g != nullptr;
  s->capture_kept = g != nullptr ? g->work.size() : 0;
  s->capture_kept_nodes = g != nullptr ? g->nodes : 0;
  return cudaSuccess;
}

cudaError_t CaptureEnd(State& st, cudaStream_t handle, cudaGraph_t* graph, bool ptsz) {
  std::lock_guard<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (graph == nullptr) return cudaErrorInvalidValue;
  if (s->capture == cudaStreamCaptureStatusNone) return cudaErrorIllegalState;
  if (!s->capture_origin) return cudaErrorStreamCaptureUnmatched;
  bool invalidated = false;
  for (Stream* o : st.streams)  // the streams that joined end with it
    if (o != s && o->capture != cudaStreamCaptureStatusNone && o->capture_id == s->capture_id) {
      invalidated |= o->capture == cudaStreamCaptureStatusInvalidated;
      o->capture = cudaStreamCaptureStatusNone;
      o->capture_graph = nullptr;
      o->capture_id = 0;
    }
  invalidated |= s->capture == cudaStreamCaptureStatusInvalidated;
  s->capture = cudaStreamCaptureStatusNone;
  s->capture_origin = false;
  Graph* g = std::exchange(s->capture_graph, nullptr);
  bool into = std::exchange(s->capture_into, false);
  if (invalidated) {
    if (into) {  // the program's graph keeps what it had
      g->work.resize(s->capture_kept);
      g->nodes = s->capture_kept_nodes;
    } else {
      DropAllUserRefs(st, g->user_refs);
      delete g;
    }
    *graph = nullptr;
    return cudaErrorStreamCaptureInvalidated;
  }
  st.graphs.insert(g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

// The status, the capture sequence's id and its graph; the sim's graphs have no dependency nodes,
// so the dependency set is always empty. Any output may be null but the status.
cudaError_t CaptureQuery(State& st, cudaStream_t handle, bool ptsz, cudaStreamCaptureStatus* status,
                        unsigned long long* id, cudaGraph_t* graph, const cudaGraphNode_t** deps,
                        const cudaGraphEdgeData** edges, size_t* num_deps) {
  if (status == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  *status = s->capture;
  bool active = s->capture == cudaStreamCaptureStatusActive;
  if (id) *id = active ? s->capture_id : 0;
  if (graph) *graph = active ? reinterpret_cast<cudaGraph_t>(s->capture_graph) : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (num_deps) *num_deps = 0;
  return cudaSuccess;
}

cudaError_t DestroyGraph(State& st, cudaGraph_t graph) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = reinterpret_cast<Graph*>(graph);
  if (!st.graphs.count(g)) return cudaErrorInvalidValue;
  for (Stream* s : st.streams)  // a capture still appends to it
    if (s->capture_graph == g) return cudaErrorIllegalState;
  st.graphs.erase(g);
  DropAllUserRefs(st, g->user_refs);
  std::erase_if(st.nodes, [&](const auto& n) { return n.second.graph == g; });
  delete g;
  return cudaSuccess;
}

cudaError_t InstantiateGraph(State& st, cudaGraphExec_t* exec, cudaGraph_t graph) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = reinterpret_cast<Graph*>(graph);
  if (exec == nullptr || !st.graphs.count(g)) return cudaErrorInvalidValue;
  auto* x = new GraphExec{g->nodes, g->work, {}, g};
  TakeUserRefs(g->user_refs, &x->user_refs);
  st.execs.insert(x);
  *exec = reinterpret_cast<cudaGraphExec_t>(x);
  return cudaSuccess;
}

// The exec takes the graph's work when the two have the same shape (the sim compares node counts):
// false in *same_shape (and cudaErrorGraphExecUpdateFailure) when they differ.
cudaError_t UpdateExec(State& st, cudaGraphExec_t exec, cudaGraph_t graph, bool* same_shape) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* x = reinterpret_cast<GraphExec*>(exec);
  auto* g = reinterpret_cast<Graph*>(graph);
  *same_shape = false;
  if (!st.execs.count(x) || !st.graphs.count(g)) return cudaErrorInvalidValue;
  if (g->nodes != x->nodes) return cudaErrorGraphExecUpdateFailure;
  *same_shape = true;
  x->work = g->work;
  x->from = g;
  return cudaSuccess;
}

cudaError_t DestroyExec(State& st, cudaGraphExec_t exec) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* x = reinterpret_cast<GraphExec*>(exec);
  if (!st.execs.erase(x)) return cudaErrorInvalidValue;
  DropAllUserRefs(st, x->user_refs);
  delete x;
  return cudaSuccess;
}

// A launch runs the exec's work in order on the stream: copies move their bytes now. Launched into
// a capturing stream, the graph's work joins that capture (a child graph on a real GPU).
// One work item of a launch on stream s (under the lock): a copy moves its bytes now.
void RunWork(State& st, Stream* s, const GraphWork& w) {
  double seconds = w.seconds;
  if (w.copy) {
    const Rows& rows = w.rows;
    for (size_t r = 0; r < rows.height; ++r)
      MoveBytes(static_cast<char*>(w.dst) + r * rows.dpitch, static_cast<const char*>(w.src) + r * rows.spitch,
                rows.width);
    seconds = CopySeconds(st, Locate(st, w.src), w.src, Locate(st, w.dst), w.dst, rows);
  }
  Enqueue(st, s, seconds);
}

cudaError_t LaunchExec(State& st, cudaGraphExec_t exec, cudaStream_t handle, bool ptsz) {
  if (T().in_host_func) return cudaErrorNotPermitted;
  std::vector<GraphWork> later;  // the work, when some of it must run outside the lock
  {
    std::lock_guard<std::mutex> lock(Mu());
    auto* x = reinterpret_cast<GraphExec*>(exec);
    if (!st.execs.count(x)) return cudaErrorInvalidValue;
    Stream* s = Resolve(st, handle, ptsz);
    if (s == nullptr) return cudaErrorInvalidResourceHandle;
    if (s->capture == cudaStreamCaptureStatusActive) {
      s->capture_graph->nodes += x->nodes;
      s->capture_graph->work.insert(s->capture_graph->work.end(), x->work.begin(), x->work.end());
      return cudaSuccess;
    }
    if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
    if (std::none_of(x->work.begin(), x->work.end(), [](const GraphWork& w) { return w.replay != nullptr; })) {
      for (const GraphWork& w : x->work)
        if (w.enabled) RunWork(st, s, w);
      return cudaSuccess;
    }
    later = x->work;
  }
  // A replayed NCCL operation waits for its peers' launches and calls back into the sim.
  cudaStream_t named = ptsz && handle == nullptr ? cudaStreamPerThread : handle;
  for (const GraphWork& w : later) {
    if (!w.enabled) continue;
    if (w.replay != nullptr) {
      w.replay(w.replay_ctx.get(), named);
      continue;
    }
    std::lock_guard<std::mutex> lock(Mu());
    if (Stream* s = Resolve(st, handle, ptsz)) RunWork(st, s, w);
  }
  return cudaSuccess;
}

// Another simulated library's work on `handle`: when that stream is capturing, it becomes a node
// that runs replay(ctx, launch stream) at each launch (1; the graph owns ctx, freed with release);
// 0 when the stream is not capturing (the caller runs its work now, and still owns ctx); an error
// when the capture was invalidated (ctx released).
int CaptureReplay(State& st, cudaStream_t handle, void (*replay)(void*, cudaStream_t), void* ctx,
                  void (*release)(void*)) {
  std::lock_guard<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, false);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (s->capture == cudaStreamCaptureStatusNone) return 0;
  GraphWork node;
  node.replay = replay;
  node.replay_ctx = std::shared_ptr<void>(ctx, release);
  cudaError_t r = cudaSuccess;
  Captured(s, &r, &node);
  return r == cudaSuccess ? 1 : r;
}

// Graphs built node by node. Node handles are opaque tokens that name their work in the graph
// (dependencies are ignored: work runs in the order added).
cudaGraphNode_t NewNode(State& st, Graph* g, size_t first, size_t count, cudaGraphNodeType type) {
  auto token = static_cast<uintptr_t>(0x10000 + 16 * ++st.node_ids);
  st.nodes[token] = NodeInfo{g, first, count, type};
  return reinterpret_cast<cudaGraphNode_t>(token);
}
NodeInfo* FindNode(State& st, cudaGraphNode_t node) {
  auto it = st.nodes.find(reinterpret_cast<uintptr_t>(node));
  return it == st.nodes.end() ? nullptr : &it->second;
}
cudaError_t CreateGraph(State& st, cudaGraph_t* graph, unsigned flags) {
  if (graph == nullptr || flags != 0) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = new Graph{};
  st.graphs.insert(g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}
// A copy node: checked as the copy itself would be, moving nothing until a launch.
cudaError_t AddCopyNode(State& st, cudaGraphNode_t* node, cudaGraph_t graph, void* dst, const void* src, Rows rows,
                        cudaMemcpyKind kind) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = reinterpret_cast<Graph*>(graph);
  if (node == nullptr || !st.graphs.count(g)) return cudaErrorInvalidValue;
  if (cudaError_t r = CheckShape(rows, kind); r != cudaSuccess) return r;
  Where ws, wd;
  if (cudaError_t r = CheckSides(st, dst, src, rows, kind, &ws, &wd); r != cudaSuccess) return r;
  ++g->nodes;
  g->work.push_back(GraphWork{true, dst, src, rows, 0});
  *node = NewNode(st, g, g->work.size() - 1, 1, cudaGraphNodeTypeMemcpy);
  return cudaSuccess;
}
// A child graph node holds a copy of the child as it is now.
cudaError_t AddChildNode(State& st, cudaGraphNode_t* node, cudaGraph_t graph, cudaGraph_t child) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = reinterpret_cast<Graph*>(graph);
  auto* c = reinterpret_cast<Graph*>(child);
  if (node == nullptr || !st.graphs.count(g) || !st.graphs.count(c) || g == c) return cudaErrorInvalidValue;
  ++g->nodes;
  size_t first = g->work.size();
  g->work.insert(g->work.end(), c->work.begin(), c->work.end());
  *node = NewNode(st, g, first, c->work.size(), cudaGraphNodeTypeGraph);
  return cudaSuccess;
}
cudaError_t CloneGraph(State& st, cudaGraph_t* clone, cudaGraph_t original) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = reinterpret_cast<Graph*>(original);
  if (clone == nullptr || !st.graphs.count(g)) return cudaErrorInvalidValue;
  auto* c = new Graph{g->nodes, g->work, {}};
  TakeUserRefs(g->user_refs, &c->user_refs);
  st.graphs.insert(c);
  *clone = reinterpret_cast<cudaGraph_t>(c);
  return cudaSuccess;
}

cudaError_t NodeType(State& st, cudaGraphNode_t node, cudaGraphNodeType* type) {
  std::lock_guard<std::mutex> lock(Mu());
  const NodeInfo* n = FindNode(st, node);
  if (n == nullptr || type == nullptr) return cudaErrorInvalidValue;
  *type = n->type;
  return cudaSuccess;
}
// The work of copy node `node` becomes the copy given, in its graph or (exec not null) in an exec
// made from that graph; checked as the copy itself would be.
cudaError_t SetCopyNode(State& st, cudaGraphExec_t exec, cudaGraphNode_t node, void* dst, const void* src, Rows rows,
                        cudaMemcpyKind kind) {
  std::lock_guard<std::mutex> lock(Mu());
  const NodeInfo* n = FindNode(st, node);
  auto* x = reinterpret_cast<GraphExec*>(exec);
  if (n == nullptr || n->type != cudaGraphNodeTypeMemcpy) return cudaErrorInvalidValue;
  if (exec != nullptr && (!st.execs.count(x) || x->from != n->graph || n->first >= x->work.size()))
    return cudaErrorInvalidValue;
  if (cudaError_t r = CheckShape(rows, kind); r != cudaSuccess) return r;
  Where ws, wd;
  if (cudaError_t r = CheckSides(st, dst, src, rows, kind, &ws, &wd); r != cudaSuccess) return r;
  GraphWork& w = exec != nullptr ? x->work[n->first] : n->graph->work[n->first];
  w = GraphWork{true, dst, src, rows, 0, w.enabled};
  return cudaSuccess;
}
// The work of child graph node `node` in an exec made from its graph becomes `child`'s, which must
// have the same shape (CUDA: the same topology and node order; here, as many work items).
cudaError_t SetChildNode(State& st, cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraph_t child) {
  std::lock_guard<std::mutex> lock(Mu());
  const NodeInfo* n = FindNode(st, node);
  auto* x = reinterpret_cast<GraphExec*>(exec);
  auto* c = reinterpret_cast<Graph*>(child);
  if (n == nullptr || n->type != cudaGraphNodeTypeGraph || !st.execs.count(x) || x->from != n->graph ||
      n->first + n->count > x->work.size() || !st.graphs.count(c) || c->work.size() != n->count)
    return cudaErrorInvalidValue;
  for (size_t i = 0; i < n->count; ++i) {
    bool enabled = x->work[n->first + i].enabled;
    x->work[n->first + i] = c->work[i];
    x->work[n->first + i].enabled = enabled;
  }
  return cudaSuccess;
}
// A node of the exec's graph runs at its launches or not.
cudaError_t SetNodeEnabled(State& st, cudaGraphExec_t exec, cudaGraphNode_t node, bool on) {
  std::lock_guard<std::mutex> lock(Mu());
  const NodeInfo* n = FindNode(st, node);
  auto* x = reinterpret_cast<GraphExec*>(exec);
  if (n == nullptr || !st.execs.count(x) || x->from != n->graph || n->first + n->count > x->work.size())
    return cudaErrorInvalidValue;
  for (size_t i = n->first; i < n->first + n->count; ++i) x->work[i].enabled = on;
  return cudaSuccess;
}
// A node leaves its graph (its work stays in place, never run, so later nodes keep their places).
cudaError_t RemoveNode(State& st, cudaGraphNode_t node) {
  std::lock_guard<std::mutex> lock(Mu());
  NodeInfo* n = FindNode(st, node);
  if (n == nullptr) return cudaErrorInvalidValue;
  for (size_t i = n->first; i < n->first + n->count; ++i) n->graph->work[i] = GraphWork{false, nullptr, nullptr, {}, 0, false};
  --n->graph->nodes;
  st.nodes.erase(reinterpret_cast<uintptr_t>(node));
  return cudaSuccess;
}

cudaError_t GraphNodeCount(State& st, cudaGraph_t graph, size_t* count) {
  std::lock_guard<std::mutex> lock(Mu());
  auto* g = reinterpret_cast<Graph*>(graph);
  if (!st.graphs.count(g) || count == nullptr) return cudaErrorInvalidValue;
  *count = static_cast<size_t>(g->nodes);
  return cudaSuccess;
}

}  // namespace

#pragma GCC diagnostic pop
