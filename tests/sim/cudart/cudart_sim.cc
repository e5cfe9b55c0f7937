// The simulated CUDA runtime: a drop-in libcudart.so.13 / libcudart.so.12 driven by a topology
// file (DESIGN.md §9). Built twice from this source; P2PSIM_CUDART_MAJOR picks the flavour.
// Device memory is host memory (memfd, so IPC handles really share bytes across processes), copies
// move real bytes at once, and every stream keeps a simulated clock that advances by
// bytes / the path's bandwidth. What is not modelled is a weak stub (generated) that returns
// cudaErrorNotSupported.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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
#include "tests/sim/common/sim_topology.h"

#ifndef P2PSIM_CUDART_MAJOR
#define P2PSIM_CUDART_MAJOR 13
#endif

#define SIM_API extern "C" __attribute__((visibility("default")))

namespace {

using p2ptrace::Gpu;
using p2ptrace::Host;

constexpr int kRuntimeVersion = P2PSIM_CUDART_MAJOR == 13 ? 13000 : 12080;
constexpr int kDriverVersion = 13000;
constexpr int kMaxPeers = 8;               // peers one device can map at once (cudaErrorTooManyPeers)
constexpr double kKernelSeconds = 5e-6;    // what a kernel launch costs on the simulated clock

struct ErrorEntry { int code; const char* name; const char* text; };
constexpr ErrorEntry kErrors[] = {
#include "cuda_error_table.inc"
};

// ---------------------------------------------------------------------------------------------
// State

struct Stream {
  int device = 0;
  unsigned flags = 0;  // cudaStreamNonBlocking
  int priority = 0;
  bool legacy = false, per_thread = false;
  double t = 0;        // simulated time when its queued work completes
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  int capture_nodes = 0;
  unsigned long long capture_id = 0;  // of the capture sequence, unique in the process
  struct Graph* capture_graph = nullptr;  // the graph being built while capturing
  int pending_host_funcs = 0;
};

struct Event {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
  double t = 0;
};

struct Graph { int nodes = 0; };

struct Alloc {
  size_t size = 0;
  enum Kind { kDevice, kHostPinned, kIpc } kind = kDevice;
  int host_gpu = -1;   // the owning GPU (host index); -1 for pinned host memory
  int fd = -1;         // memfd backing device memory (exported through IPC)
  int ipc_refs = 0;    // opens of the same handle in this process
  bool ipc_direct = false;
  std::string ipc_key; // "pid:fd" of the exporter, to recognise a second open of the same handle
};

// Device memory of one GPU lives in its own reserved address range, as with CUDA's unified
// addressing: a device allocation never shares a 2 MiB granule with host memory or another GPU's.
struct Arena {
  uintptr_t base = 0;
  size_t capacity = 0, bump = 0;
  std::map<size_t, size_t> free;  // offset -> length, coalesced
};

struct HostFunc { Stream* stream; cudaHostFn_t fn; void* data; cudaStreamCallback_t cb; cudaStream_t handle; };

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
  std::map<uintptr_t, Alloc> allocs;          // base address -> allocation
  std::map<int, Arena> arenas;                 // host GPU index -> its address range
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
};

std::mutex g_mu;  // guards State; never held while user code (host functions) runs
State* g_state = nullptr;
std::once_flag g_once;

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local bool t_in_host_func = false;
// cudaThreadExchangeStreamCaptureMode's per-thread mode; the sim records it but does not forbid
// unsafe calls during another thread's global-mode capture.
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;
unsigned long long g_capture_ids = 0;
thread_local std::map<int, Stream*> t_per_thread;
struct LaunchConfig { dim3 grid, block; size_t shmem; void* stream; };
thread_local std::vector<LaunchConfig> t_launch_stack;

void Prefork() { g_mu.lock(); }
void Postfork() { g_mu.unlock(); }
void PostforkChild() {
  g_mu.unlock();
  // The worker thread did not survive the fork; pending host functions belong to the parent.
  if (g_state != nullptr) {
    g_state->worker_running = false;
    g_state->host_funcs.clear();
    for (Stream* s : g_state->streams) s->pending_host_funcs = 0;
    for (auto& s : g_state->legacy) s->pending_host_funcs = 0;
  }
}

std::vector<int> VisibleDevices(const Host& host) {
  std::vector<int> all;
  for (const Gpu& g : host.gpus) all.push_back(g.index);
  std::sort(all.begin(), all.end());
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return all;
  // Like CUDA: a comma-separated list of indices; the list ends at the first invalid or repeated entry.
  std::vector<int> out;
  std::string s(env);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || host.FindGpu(static_cast<int>(v)) == nullptr ||
        std::find(out.begin(), out.end(), v) != out.end())
      break;
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void Init() {
  auto* st = new State();
  const char* path = std::getenv("P2PSIM_TOPOLOGY");
  if (path == nullptr || *path == '\0') {
    st->error = "P2PSIM_TOPOLOGY is not set; it must name the simulated node's topology file";
  } else if (p2psim::LoadTopology(path, &st->topo, &st->error)) {
    st->host = p2psim::SelectHost(st->topo, &st->error);
    st->ok = st->host != nullptr;
  }
  if (!st->ok) {
    std::fprintf(stderr, "p2psim: %s; every CUDA call returns cudaErrorInitializationError\n", st->error.c_str());
  } else {
    st->visible = VisibleDevices(*st->host);
    size_t n = st->visible.size();
    st->peer_on.assign(n, std::vector<char>(n, 0));
    for (size_t d = 0; d < n; ++d) {
      auto s = std::make_unique<Stream>();
      s->device = static_cast<int>(d);
      s->legacy = true;
      st->legacy.push_back(std::move(s));
    }
  }
  pthread_atfork(Prefork, Postfork, PostforkChild);
  g_state = st;
}

State& S() {
  std::call_once(g_once, Init);
  return *g_state;
}

cudaError_t Ret(cudaError_t e) {
  // CUDA keeps the last error per thread until cudaGetLastError reads it; "not ready" is no error.
  if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
  return e;
}

// Every API entry starts here: the topology must have loaded.
#define SIM_ENTER()                                                   \
  State& st = S();                                                    \
  if (!st.ok) return Ret(cudaErrorInitializationError);               \
  if (st.visible.empty()) return Ret(cudaErrorNoDevice)

#define SIM_NO_HOST_FUNC() \
  if (t_in_host_func) return Ret(cudaErrorNotPermitted)

int DeviceCount(const State& st) { return static_cast<int>(st.visible.size()); }
bool ValidDevice(const State& st, int d) { return d >= 0 && d < DeviceCount(st); }
const Gpu& GpuOf(const State& st, int ordinal) { return *st.host->FindGpu(st.visible[ordinal]); }
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
  if (t <= SimNow(st)) return true;
  if (st.topo.time_scale == 0) st.host_now = t;
  return false;
}

Stream* Legacy(State& st, int device) { return st.legacy[device].get(); }

Stream* PerThread(State& st, int device) {
  Stream*& s = t_per_thread[device];
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
  if (raw == 0) return ptsz ? PerThread(st, t_device) : Legacy(st, t_device);
  if (handle == cudaStreamLegacy) return Legacy(st, t_device);
  if (handle == cudaStreamPerThread) return PerThread(st, t_device);
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

bool InBounds(const Where& w, const void* p, size_t bytes) {
  if (!w.known) return true;  // pageable host memory: the caller's business, as with CUDA
  return reinterpret_cast<uintptr_t>(p) + bytes <= w.base + w.alloc->size;
}

constexpr size_t kGranule = 2u << 20;
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

cudaError_t AllocDevice(State& st, void** ptr, size_t size) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  if (size == 0) { *ptr = nullptr; return cudaSuccess; }
  if (size > DeviceMemory(st, t_device)) return cudaErrorMemoryAllocation;
  int fd = memfd_create("p2psim-device-memory", 0);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    return cudaErrorMemoryAllocation;
  }
  void* p = ArenaMap(st, st.visible[t_device], fd, size);
  if (p == nullptr) { close(fd); return cudaErrorMemoryAllocation; }
  Alloc a;
  a.size = size;
  a.kind = Alloc::kDevice;
  a.host_gpu = st.visible[t_device];
  a.fd = fd;
  st.allocs[reinterpret_cast<uintptr_t>(p)] = a;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t FreeKind(State& st, void* p, Alloc::Kind kind) {
  if (p == nullptr) return cudaSuccess;
  auto it = st.allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == st.allocs.end() || it->second.kind != kind) return cudaErrorInvalidValue;
  if (kind == Alloc::kDevice) ArenaUnmap(st, it->second.host_gpu, p, it->second.size);
  else munmap(p, it->second.size);
  if (it->second.fd >= 0) close(it->second.fd);
  st.allocs.erase(it);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Copies

bool PeerDirect(const State& st, int gpu_a, int gpu_b) {
  int a = OrdinalOf(st, gpu_a), b = OrdinalOf(st, gpu_b);
  if (a < 0 || b < 0) return false;
  return st.peer_on[a][b] || st.peer_on[b][a];
}

// Seconds a copy of `bytes` takes between two places (host GPU index, -1 for host memory).
double CopySeconds(const State& st, const Where& src, const Where& dst, size_t bytes) {
  double gbps;
  int a = src.host_gpu, b = dst.host_gpu;
  if (a < 0 && b < 0) {
    gbps = st.topo.bandwidth.host_staged;
  } else if (a < 0 || b < 0) {
    gbps = p2psim::HostDeviceBandwidth(*st.host->FindGpu(a < 0 ? b : a));
  } else if (a == b) {
    gbps = p2psim::kDeviceLocalGbps;
  } else {
    bool ipc_direct = (src.alloc && src.alloc->kind == Alloc::kIpc && src.alloc->ipc_direct) ||
                      (dst.alloc && dst.alloc->kind == Alloc::kIpc && dst.alloc->ipc_direct);
    bool direct = ipc_direct || PeerDirect(st, a, b);
    if (direct) {
      auto [it, added] = st.direct_gbps.try_emplace({a, b}, 0.0);
      if (added) it->second = p2psim::DirectBandwidth(st.topo, *st.host, a, b);
      gbps = it->second;
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
bool Captured(Stream* s, cudaError_t* result) {
  if (s->capture == cudaStreamCaptureStatusActive) {
    ++s->capture_nodes;
    *result = cudaSuccess;
    return true;
  }
  if (s->capture == cudaStreamCaptureStatusInvalidated) {
    *result = cudaErrorStreamCaptureInvalidated;
    return true;
  }
  return false;
}

struct Rows {  // a 2D/3D copy flattened to rows
  size_t width = 0, height = 1, spitch = 0, dpitch = 0;
};

// One copy on one stream. `sync`: the host waits for it (cudaMemcpy, cudaMemcpyPeer, …);
// no_stream: issued without a stream argument (ordered after both devices' work).
cudaError_t Copy(State& st, std::unique_lock<std::mutex>& lock, void* dst, const void* src, Rows rows,
                 cudaMemcpyKind kind, cudaStream_t handle, bool ptsz, bool sync, bool no_stream) {
  if (t_in_host_func) return cudaErrorNotPermitted;
  if (static_cast<int>(kind) < 0 || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  if (rows.width > rows.spitch || rows.width > rows.dpitch) return cudaErrorInvalidPitchValue;
  size_t bytes = rows.width * rows.height;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  Where ws = Locate(st, src), wd = Locate(st, dst);
  if ((ClaimsDevice(kind, true) && ws.host_gpu < 0) || (ClaimsDevice(kind, false) && wd.host_gpu < 0))
    return cudaErrorInvalidValue;
  size_t span_s = rows.spitch * (rows.height - 1) + rows.width;
  size_t span_d = rows.dpitch * (rows.height - 1) + rows.width;
  if (!InBounds(ws, src, span_s) || !InBounds(wd, dst, span_d)) return cudaErrorInvalidValue;
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  for (size_t r = 0; r < rows.height; ++r)
    std::memmove(static_cast<char*>(dst) + r * rows.dpitch, static_cast<const char*>(src) + r * rows.spitch, rows.width);
  int other = -1;
  if (no_stream) other = OrdinalOf(st, ws.host_gpu == st.visible[s->device] ? wd.host_gpu : ws.host_gpu);
  double end = Enqueue(st, s, CopySeconds(st, ws, wd, bytes), other);
  if (sync) WaitUntil(st, lock, end);
  return cudaSuccess;
}

Rows Linear(size_t count) { return Rows{count, 1, count, count}; }

cudaError_t PeerCopy(State& st, std::unique_lock<std::mutex>& lock, void* dst, int dst_dev, const void* src,
                     int src_dev, size_t count, cudaStream_t stream, bool sync) {
  if (!ValidDevice(st, dst_dev) || !ValidDevice(st, src_dev)) return cudaErrorInvalidDevice;
  return Copy(st, lock, dst, src, Linear(count), cudaMemcpyDeviceToDevice, stream, false, sync, sync);
}

cudaError_t Memset(State& st, std::unique_lock<std::mutex>& lock, void* p, int value, size_t count,
                   cudaStream_t handle, bool ptsz, bool sync) {
  if (t_in_host_func) return cudaErrorNotPermitted;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (count == 0) return cudaSuccess;
  Where w = Locate(st, p);
  if (!w.known || !InBounds(w, p, count)) return cudaErrorInvalidValue;
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  std::memset(p, value, count);
  double end = Enqueue(st, s, static_cast<double>(count) / (p2psim::kDeviceLocalGbps * 1e9));
  if (sync) WaitUntil(st, lock, end);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Host functions: run in order by one worker thread, never under the state lock.

void Worker() {
  State& st = *g_state;
  std::unique_lock<std::mutex> lock(g_mu);
  for (;;) {
    st.work_cv.wait(lock, [&] { return !st.host_funcs.empty(); });
    HostFunc f = st.host_funcs.front();
    st.host_funcs.pop_front();
    lock.unlock();
    t_in_host_func = true;
    if (f.fn) f.fn(f.data);
    else f.cb(f.handle, cudaSuccess, f.data);
    t_in_host_func = false;
    lock.lock();
    if (st.streams.count(f.stream) || f.stream->legacy) --f.stream->pending_host_funcs;
    st.cv.notify_all();
  }
}

cudaError_t QueueHostFunc(State& st, cudaStream_t handle, bool ptsz, cudaHostFn_t fn, cudaStreamCallback_t cb, void* data) {
  if (fn == nullptr && cb == nullptr) return cudaErrorInvalidValue;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  if (!st.worker_running) {
    st.worker_running = true;
    std::thread(Worker).detach();
  }
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
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  e->recorded = true;
  e->t = StartTime(st, s);
  return cudaSuccess;
}

cudaError_t Launch(State& st, cudaStream_t handle, bool ptsz) {
  if (t_in_host_func) return cudaErrorNotPermitted;
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  Enqueue(st, s, kKernelSeconds);  // device code does not run on the simulated node
  return cudaSuccess;
}

// The IPC handle: which process exported which memfd, for which GPU of which simulated host.
struct IpcHandle {
  char magic[8];
  int32_t pid, fd;
  uint64_t size;
  int32_t host_gpu;
  char host[36];
};
static_assert(sizeof(IpcHandle) <= sizeof(cudaIpcMemHandle_t));
constexpr char kIpcMagic[8] = {'p', '2', 'p', 's', 'i', 'm', '1', 0};

// cudaDeviceProp's layout moved between CUDA 12 and 13 (13 dropped clockRate, computeMode and
// others): the 12 flavour writes CUDA 12.8's struct, mirrored here from its driver_types.h
// (nvidia-cuda-runtime-cu12 12.8.90); the asserts pin the offsets real programs read.
struct DeviceProp12 {
  char name[256]; cudaUUID_t uuid; char luid[8]; unsigned int luidDeviceNodeMask;
  size_t totalGlobalMem, sharedMemPerBlock; int regsPerBlock, warpSize; size_t memPitch;
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate; size_t totalConstMem;
  int major, minor; size_t textureAlignment, texturePitchAlignment;
  int deviceOverlap, multiProcessorCount, kernelExecTimeoutEnabled, integrated, canMapHostMemory, computeMode;
  int maxTexture1D, maxTexture1DMipmap, maxTexture1DLinear, maxTexture2D[2], maxTexture2DMipmap[2],
      maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap,
      maxTexture1DLayered[2], maxTexture2DLayered[3], maxTextureCubemapLayered[2], maxSurface1D, maxSurface2D[2],
      maxSurface3D[3], maxSurface1DLayered[2], maxSurface2DLayered[3], maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount,
      unifiedAddressing, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize,
      maxThreadsPerMultiProcessor, streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported,
      singleToDoublePrecisionPerfRatio, pageableMemoryAccess, concurrentManagedAccess, computePreemptionSupported,
      canUseHostPointerForRegisteredMem, cooperativeLaunch, cooperativeMultiDeviceLaunch;
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor,
      accessPolicyMaxWindowSize;
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupported, sparseCudaArraySupported, hostRegisterReadOnlySupported,
      timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
  unsigned int gpuDirectRDMAFlushWritesOptions; int gpuDirectRDMAWritesOrdering;
  unsigned int memoryPoolSupportedHandleTypes;
  int deferredMappingCudaArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers, reserved[63];
};
static_assert(sizeof(DeviceProp12) == 1032 && offsetof(DeviceProp12, uuid) == 256 &&
              offsetof(DeviceProp12, totalGlobalMem) == 288 && offsetof(DeviceProp12, major) == 360 &&
              offsetof(DeviceProp12, multiProcessorCount) == 388 && offsetof(DeviceProp12, pciBusID) == 584 &&
              offsetof(DeviceProp12, managedMemory) == 652);
#if P2PSIM_CUDART_MAJOR == 13
using DeviceProp = cudaDeviceProp;
#else
using DeviceProp = DeviceProp12;
#endif

template <typename T>
void Put(void* base, size_t off, T v) { std::memcpy(static_cast<char*>(base) + off, &v, sizeof v); }

struct BusId { unsigned domain = 0, bus = 0, device = 0, function = 0; };
BusId ParseBus(const std::string& s) {
  BusId b;
  std::sscanf(s.c_str(), "%x:%x:%x.%x", &b.domain, &b.bus, &b.device, &b.function);
  return b;
}


}  // namespace

// =============================================================================================
// Errors and versions (these work even when the topology failed to load)

SIM_API const char* cudaGetErrorName(cudaError_t error) {
  for (const ErrorEntry& e : kErrors)
    if (e.code == error) return e.name;
  return "unrecognized error code";
}

SIM_API const char* cudaGetErrorString(cudaError_t error) {
  for (const ErrorEntry& e : kErrors)
    if (e.code == error) return e.text;
  return "unrecognized error code";
}

SIM_API cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

SIM_API cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

SIM_API cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return Ret(cudaErrorInvalidValue);
  *v = kRuntimeVersion;
  return cudaSuccess;
}

SIM_API cudaError_t cudaDriverGetVersion(int* v) {
  if (v == nullptr) return Ret(cudaErrorInvalidValue);
  if (!S().ok) return Ret(cudaErrorInitializationError);
  *v = kDriverVersion;
  return cudaSuccess;
}

// =============================================================================================
// Devices

SIM_API cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Ret(cudaErrorInvalidValue);
  State& st = S();
  if (!st.ok) return Ret(cudaErrorInitializationError);
  *count = DeviceCount(st);
  return st.visible.empty() ? Ret(cudaErrorNoDevice) : cudaSuccess;
}

SIM_API cudaError_t cudaSetDevice(int device) {
  SIM_ENTER();
  if (!ValidDevice(st, device)) return Ret(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

SIM_API cudaError_t cudaGetDevice(int* device) {
  SIM_ENTER();
  if (device == nullptr) return Ret(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}

SIM_API cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  SIM_ENTER();
  return ValidDevice(st, device) ? cudaSuccess : Ret(cudaErrorInvalidDevice);
}

SIM_API cudaError_t cudaSetDeviceFlags(unsigned int) { SIM_ENTER(); return cudaSuccess; }
SIM_API cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  SIM_ENTER();
  if (flags == nullptr) return Ret(cudaErrorInvalidValue);
  *flags = 0;
  return cudaSuccess;
}

// Every field of cudaDeviceProp from the same attribute table as cudaDeviceGetAttribute.
template <typename P>
void FillFrom(P* p, const State& st, const Gpu& g) {
  const p2psim::GpuModel& m = p2psim::ModelOf(g.name);
  BusId b = ParseBus(g.bus_id);
  auto at = [&](int attr) { return p2psim::DeviceAttribute(m, attr, b.domain, b.bus, b.device); };
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "%s", g.name.c_str());
  // A stable UUID derived from host and bus id.
  unsigned char uuid[16] = {};
  std::string key = st.host->name + "/" + g.bus_id;
  for (size_t i = 0; i < key.size(); ++i) uuid[i % 16] = static_cast<unsigned char>(uuid[i % 16] * 31 + key[i]);
  std::memcpy(&p->uuid, uuid, 16);
  p->totalGlobalMem = m.memory;
  p->sharedMemPerBlock = at(cudaDevAttrMaxSharedMemoryPerBlock);
  p->regsPerBlock = at(cudaDevAttrMaxRegistersPerBlock);
  p->warpSize = at(cudaDevAttrWarpSize);
  p->memPitch = at(cudaDevAttrMaxPitch);
  p->maxThreadsPerBlock = at(cudaDevAttrMaxThreadsPerBlock);
  for (int i = 0; i < 3; ++i) {
    p->maxThreadsDim[i] = at(cudaDevAttrMaxBlockDimX + i);
    p->maxGridSize[i] = at(cudaDevAttrMaxGridDimX + i);
  }
  p->totalConstMem = at(cudaDevAttrTotalConstantMemory);
  p->major = m.major;
  p->minor = m.minor;
  p->textureAlignment = at(cudaDevAttrTextureAlignment);
  p->texturePitchAlignment = at(cudaDevAttrTexturePitchAlignment);
  p->multiProcessorCount = m.sms;
  p->canMapHostMemory = 1;
  p->surfaceAlignment = at(cudaDevAttrSurfaceAlignment);
  p->concurrentKernels = 1;
  p->ECCEnabled = at(cudaDevAttrEccEnabled);
  p->pciBusID = static_cast<int>(b.bus);
  p->pciDeviceID = static_cast<int>(b.device);
  p->pciDomainID = static_cast<int>(b.domain);
  p->asyncEngineCount = at(cudaDevAttrAsyncEngineCount);
  p->unifiedAddressing = 1;
  p->memoryBusWidth = m.memory_bus_bits;
  p->l2CacheSize = m.l2_bytes;
  p->persistingL2CacheMaxSize = at(cudaDevAttrMaxPersistingL2CacheSize);
  p->maxThreadsPerMultiProcessor = m.max_threads_per_sm;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = p->localL1CacheSupported = 1;
  p->sharedMemPerMultiprocessor = m.smem_per_sm;
  p->regsPerMultiprocessor = at(cudaDevAttrMaxRegistersPerMultiprocessor);
  p->managedMemory = 1;
  p->concurrentManagedAccess = 1;
  p->computePreemptionSupported = 1;
  p->canUseHostPointerForRegisteredMem = 1;
  p->cooperativeLaunch = 1;
  p->sharedMemPerBlockOptin = m.smem_per_block_optin;
  p->maxBlocksPerMultiProcessor = m.max_blocks_per_sm;
  p->accessPolicyMaxWindowSize = at(cudaDevAttrMaxAccessPolicyWindowSize);
  p->reservedSharedMemPerBlock = at(cudaDevAttrReservedSharedMemoryPerBlock);
  p->hostRegisterSupported = p->sparseCudaArraySupported = p->hostRegisterReadOnlySupported = 1;
  p->timelineSemaphoreInteropSupported = p->memoryPoolsSupported = 1;
  p->memoryPoolSupportedHandleTypes = at(cudaDevAttrMemoryPoolSupportedHandleTypes);
  p->deferredMappingCudaArraySupported = p->ipcEventSupported = 1;
  p->clusterLaunch = at(cudaDevAttrClusterLaunch);
  if constexpr (requires { p->clockRate; }) {  // CUDA 12's fields that 13 dropped
    p->clockRate = m.clock_khz;
    p->memoryClockRate = m.memory_clock_khz;
    p->deviceOverlap = 1;
    p->singleToDoublePrecisionPerfRatio = at(cudaDevAttrSingleToDoublePrecisionPerfRatio);
    p->cooperativeMultiDeviceLaunch = 1;
  }
}

static cudaError_t FillProps(void* prop, int device) {
  SIM_ENTER();
  if (prop == nullptr) return Ret(cudaErrorInvalidValue);
  if (!ValidDevice(st, device)) return Ret(cudaErrorInvalidDevice);
  FillFrom(static_cast<DeviceProp*>(prop), st, GpuOf(st, device));
  return cudaSuccess;
}

#if P2PSIM_CUDART_MAJOR == 13
SIM_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) { return FillProps(prop, device); }
#else
SIM_API cudaError_t cudaGetDeviceProperties_v2(void* prop, int device) { return FillProps(prop, device); }
SIM_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) { return FillProps(prop, device); }
#endif

SIM_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  SIM_ENTER();
  if (value == nullptr) return Ret(cudaErrorInvalidValue);
  if (!ValidDevice(st, device)) return Ret(cudaErrorInvalidDevice);
  const Gpu& g = GpuOf(st, device);
  BusId b = ParseBus(g.bus_id);
  *value = p2psim::DeviceAttribute(p2psim::ModelOf(g.name), attr, b.domain, b.bus, b.device);
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  SIM_ENTER();
  if (bus_id == nullptr || len <= 0) return Ret(cudaErrorInvalidValue);
  if (!ValidDevice(st, device)) return Ret(cudaErrorInvalidDevice);
  BusId b = ParseBus(GpuOf(st, device).bus_id);
  std::snprintf(bus_id, static_cast<size_t>(len), "%04X:%02X:%02X.%X", b.domain, b.bus, b.device, b.function);
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* bus_id) {
  SIM_ENTER();
  if (device == nullptr || bus_id == nullptr) return Ret(cudaErrorInvalidValue);
  BusId want{};
  unsigned parts[4] = {};
  int n = std::sscanf(bus_id, "%x:%x:%x.%x", &parts[0], &parts[1], &parts[2], &parts[3]);
  if (n == 3 || n == 4) want = {parts[0], parts[1], parts[2], n == 4 ? parts[3] : 0};
  else if (std::sscanf(bus_id, "%x:%x.%x", &parts[1], &parts[2], &parts[3]) == 3) want = {0, parts[1], parts[2], parts[3]};
  else return Ret(cudaErrorInvalidValue);
  for (int d = 0; d < DeviceCount(st); ++d) {
    BusId b = ParseBus(GpuOf(st, d).bus_id);
    if (b.domain == want.domain && b.bus == want.bus && b.device == want.device) { *device = d; return cudaSuccess; }
  }
  return Ret(cudaErrorInvalidDevice);
}

SIM_API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  SIM_ENTER();
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

SIM_API cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  size_t used = 0;
  for (auto& [base, a] : st.allocs)
    if (a.kind == Alloc::kDevice && a.host_gpu == st.visible[t_device]) used += a.size;
  size_t memory = DeviceMemory(st, t_device);
  if (free_bytes) *free_bytes = memory - std::min(used, memory);
  if (total) *total = memory;
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceSynchronize(void) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::unique_lock<std::mutex> lock(g_mu);
  double t = Legacy(st, t_device)->t;
  std::vector<Stream*> mine{Legacy(st, t_device)};
  for (Stream* s : st.streams)
    if (s->device == t_device) mine.push_back(s);
  for (Stream* s : mine) {
    DrainHostFuncs(st, lock, s);
    t = std::max(t, s->t);
  }
  WaitUntil(st, lock, t);
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceReset(void) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(g_mu);
  int d = t_device;
  int gpu = st.visible[d];
  for (auto it = st.allocs.begin(); it != st.allocs.end();) {
    if (it->second.kind == Alloc::kDevice && it->second.host_gpu == gpu) {
      ArenaUnmap(st, gpu, reinterpret_cast<void*>(it->first), it->second.size);
      close(it->second.fd);
      it = st.allocs.erase(it);
    } else {
      ++it;
    }
  }
  // The device's context goes, and with it every peer mapping from or to it.
  std::fill(st.peer_on[d].begin(), st.peer_on[d].end(), 0);
  for (auto& row : st.peer_on) row[d] = 0;
  return cudaSuccess;
}

// =============================================================================================
// Peer access

SIM_API cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  SIM_ENTER();
  if (can == nullptr) return Ret(cudaErrorInvalidValue);
  if (!ValidDevice(st, device) || !ValidDevice(st, peer)) return Ret(cudaErrorInvalidDevice);
  *can = device != peer && p2psim::PeerCapable(st.topo, *st.host, st.visible[device], st.visible[peer]);
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attr, int src, int dst) {
  SIM_ENTER();
  if (value == nullptr) return Ret(cudaErrorInvalidValue);
  if (!ValidDevice(st, src) || !ValidDevice(st, dst) || src == dst) return Ret(cudaErrorInvalidDevice);
  int a = st.visible[src], b = st.visible[dst];
  bool capable = p2psim::PeerCapable(st.topo, *st.host, a, b);
  bool nvlink = p2ptrace::ClassifyGpuPath(*st.host, a, b).type == p2ptrace::PathType::kNVLink;
  switch (static_cast<int>(attr)) {
    case cudaDevP2PAttrPerformanceRank: *value = nvlink ? 0 : 1; break;
    case cudaDevP2PAttrAccessSupported: *value = capable; break;
    case cudaDevP2PAttrNativeAtomicSupported: *value = capable && nvlink; break;
    case cudaDevP2PAttrCudaArrayAccessSupported: *value = capable && nvlink; break;
    case 5: *value = 0; break;  // cudaDevP2PAttrOnlyPartialNativeAtomicSupported
    default: return Ret(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(g_mu);
  int d = t_device;
  if (!ValidDevice(st, peer) || peer == d) return Ret(cudaErrorInvalidDevice);
  if (flags != 0) return Ret(cudaErrorInvalidValue);
  if (!p2psim::PeerCapable(st.topo, *st.host, st.visible[d], st.visible[peer])) return Ret(cudaErrorPeerAccessUnsupported);
  if (st.peer_on[d][peer]) return Ret(cudaErrorPeerAccessAlreadyEnabled);
  if (std::count(st.peer_on[d].begin(), st.peer_on[d].end(), 1) >= kMaxPeers) return Ret(cudaErrorTooManyPeers);
  st.peer_on[d][peer] = 1;
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(g_mu);
  int d = t_device;
  if (!ValidDevice(st, peer) || peer == d) return Ret(cudaErrorInvalidDevice);
  if (!st.peer_on[d][peer]) return Ret(cudaErrorPeerAccessNotEnabled);
  st.peer_on[d][peer] = 0;
  return cudaSuccess;
}

// =============================================================================================
// Memory

SIM_API cudaError_t cudaMalloc(void** ptr, size_t size) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(AllocDevice(st, ptr, size));
}

SIM_API cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(g_mu);
  if (Resolve(st, stream, false) == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  return Ret(AllocDevice(st, ptr, size));
}

SIM_API cudaError_t cudaFree(void* ptr) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(FreeKind(st, ptr, Alloc::kDevice));
}

SIM_API cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(g_mu);
  if (Resolve(st, stream, false) == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  return Ret(FreeKind(st, ptr, Alloc::kDevice));
}

SIM_API cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  if (ptr == nullptr || (flags & ~0xfu) != 0) return Ret(cudaErrorInvalidValue);
  if (size == 0) { *ptr = nullptr; return cudaSuccess; }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Ret(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(g_mu);
  Alloc a;
  a.size = size;
  a.kind = Alloc::kHostPinned;
  st.allocs[reinterpret_cast<uintptr_t>(p)] = a;
  *ptr = p;
  return cudaSuccess;
}

SIM_API cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }

SIM_API cudaError_t cudaFreeHost(void* ptr) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(FreeKind(st, ptr, Alloc::kHostPinned));
}

SIM_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  SIM_ENTER();
  if (attr == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  Where w = Locate(st, ptr);
  std::memset(attr, 0, sizeof *attr);
  if (!w.known) {
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = cudaInvalidDeviceId;
    attr->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  if (w.alloc->kind == Alloc::kHostPinned) {
    attr->type = cudaMemoryTypeHost;
    attr->device = t_device;
    attr->devicePointer = const_cast<void*>(ptr);
    attr->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  attr->type = cudaMemoryTypeDevice;
  int ordinal = OrdinalOf(st, w.host_gpu);
  // IPC memory of a GPU this process cannot see is attributed to the device that opened it.
  attr->device = ordinal >= 0 ? ordinal : t_device;
  attr->devicePointer = const_cast<void*>(ptr);
  return cudaSuccess;
}

// =============================================================================================
// Copies and memsets

#define SIM_COPY_PROLOGUE() \
  SIM_ENTER();              \
  std::unique_lock<std::mutex> lock(g_mu)

SIM_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  SIM_COPY_PROLOGUE();
  return Ret(Copy(st, lock, dst, src, Linear(count), kind, nullptr, false, true, true));
}
SIM_API cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  SIM_COPY_PROLOGUE();
  return Ret(Copy(st, lock, dst, src, Linear(count), kind, nullptr, true, true, false));
}
SIM_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t s) {
  SIM_COPY_PROLOGUE();
  return Ret(Copy(st, lock, dst, src, Linear(count), kind, s, false, false, false));
}
SIM_API cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t s) {
  SIM_COPY_PROLOGUE();
  return Ret(Copy(st, lock, dst, src, Linear(count), kind, s, true, false, false));
}
SIM_API cudaError_t cudaMemcpyPeer(void* dst, int dst_dev, const void* src, int src_dev, size_t count) {
  SIM_COPY_PROLOGUE();
  return Ret(PeerCopy(st, lock, dst, dst_dev, src, src_dev, count, nullptr, true));
}
SIM_API cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_dev, const void* src, int src_dev, size_t count,
                                        cudaStream_t s) {
  SIM_COPY_PROLOGUE();
  return Ret(PeerCopy(st, lock, dst, dst_dev, src, src_dev, count, s, false));
}
SIM_API cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                 size_t height, cudaMemcpyKind kind) {
  SIM_COPY_PROLOGUE();
  return Ret(Copy(st, lock, dst, src, Rows{width, height, spitch, dpitch}, kind, nullptr, false, true, true));
}
SIM_API cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                      size_t height, cudaMemcpyKind kind) {
  SIM_COPY_PROLOGUE();
  return Ret(Copy(st, lock, dst, src, Rows{width, height, spitch, dpitch}, kind, nullptr, true, true, false));
}
SIM_API cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                      size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  SIM_COPY_PROLOGUE();
  return Ret(Copy(st, lock, dst, src, Rows{width, height, spitch, dpitch}, kind, s, false, false, false));
}
SIM_API cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                           size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  SIM_COPY_PROLOGUE();
  return Ret(Copy(st, lock, dst, src, Rows{width, height, spitch, dpitch}, kind, s, true, false, false));
}

// 3D peer copies of linear (pitched) memory; CUDA arrays are not simulated.
static cudaError_t Copy3DPeer(const cudaMemcpy3DPeerParms* p, cudaStream_t s, bool ptsz, bool sync) {
  SIM_COPY_PROLOGUE();
  if (p == nullptr) return Ret(cudaErrorInvalidValue);
  if (p->srcArray != nullptr || p->dstArray != nullptr) return Ret(cudaErrorNotSupported);
  if (!ValidDevice(st, p->srcDevice) || !ValidDevice(st, p->dstDevice)) return Ret(cudaErrorInvalidDevice);
  const cudaExtent& e = p->extent;
  size_t sslice = p->srcPtr.pitch * p->srcPtr.ysize, dslice = p->dstPtr.pitch * p->dstPtr.ysize;
  for (size_t z = 0; z < e.depth; ++z) {
    const char* src = static_cast<const char*>(p->srcPtr.ptr) + (p->srcPos.z + z) * sslice +
                      p->srcPos.y * p->srcPtr.pitch + p->srcPos.x;
    char* dst = static_cast<char*>(p->dstPtr.ptr) + (p->dstPos.z + z) * dslice + p->dstPos.y * p->dstPtr.pitch +
                p->dstPos.x;
    cudaError_t r = Copy(st, lock, dst, src, Rows{e.width, e.height, p->srcPtr.pitch, p->dstPtr.pitch},
                         cudaMemcpyDeviceToDevice, s, ptsz, sync, sync && !ptsz);
    if (r != cudaSuccess) return Ret(r);
  }
  return cudaSuccess;
}
SIM_API cudaError_t cudaMemcpy3DPeer(const cudaMemcpy3DPeerParms* p) { return Copy3DPeer(p, nullptr, false, true); }
SIM_API cudaError_t cudaMemcpy3DPeer_ptds(const cudaMemcpy3DPeerParms* p) { return Copy3DPeer(p, nullptr, true, true); }
SIM_API cudaError_t cudaMemcpy3DPeerAsync(const cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  return Copy3DPeer(p, s, false, false);
}
SIM_API cudaError_t cudaMemcpy3DPeerAsync_ptsz(const cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  return Copy3DPeer(p, s, true, false);
}

SIM_API cudaError_t cudaMemset(void* p, int value, size_t count) {
  SIM_COPY_PROLOGUE();
  return Ret(Memset(st, lock, p, value, count, nullptr, false, true));
}
SIM_API cudaError_t cudaMemset_ptds(void* p, int value, size_t count) {
  SIM_COPY_PROLOGUE();
  return Ret(Memset(st, lock, p, value, count, nullptr, true, true));
}
SIM_API cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t s) {
  SIM_COPY_PROLOGUE();
  return Ret(Memset(st, lock, p, value, count, s, false, false));
}
SIM_API cudaError_t cudaMemsetAsync_ptsz(void* p, int value, size_t count, cudaStream_t s) {
  SIM_COPY_PROLOGUE();
  return Ret(Memset(st, lock, p, value, count, s, true, false));
}

// =============================================================================================
// Streams

static cudaError_t CreateStream(cudaStream_t* out, unsigned flags, int priority) {
  SIM_ENTER();
  if (out == nullptr || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  auto* s = new Stream();
  s->device = t_device;
  s->flags = flags;
  s->priority = std::clamp(priority, -5, 0);
  st.streams.insert(s);
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}
SIM_API cudaError_t cudaStreamCreate(cudaStream_t* s) { return CreateStream(s, 0, 0); }
SIM_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) { return CreateStream(s, flags, 0); }
SIM_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  return CreateStream(s, flags, priority);
}

SIM_API cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  SIM_ENTER();
  std::unique_lock<std::mutex> lock(g_mu);
  auto* s = reinterpret_cast<Stream*>(handle);
  if (handle == nullptr || !st.streams.count(s) || s->per_thread) return Ret(cudaErrorInvalidResourceHandle);
  DrainHostFuncs(st, lock, s);  // CUDA lets queued work finish; the handle dies at once
  st.streams.erase(s);
  delete s;
  return cudaSuccess;
}

static cudaError_t StreamSync(cudaStream_t handle, bool ptsz) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::unique_lock<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  return Ret(SyncStream(st, lock, s));
}
SIM_API cudaError_t cudaStreamSynchronize(cudaStream_t s) { return StreamSync(s, false); }
SIM_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return StreamSync(s, true); }

static cudaError_t StreamQuery(cudaStream_t handle, bool ptsz) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  if (s->capture != cudaStreamCaptureStatusNone) {
    s->capture = cudaStreamCaptureStatusInvalidated;
    return Ret(cudaErrorStreamCaptureUnsupported);
  }
  if (s->pending_host_funcs > 0) return cudaErrorNotReady;
  return Completed(st, StartTime(st, s)) ? cudaSuccess : cudaErrorNotReady;
}
SIM_API cudaError_t cudaStreamQuery(cudaStream_t s) { return StreamQuery(s, false); }
SIM_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return StreamQuery(s, true); }

static cudaError_t StreamWaitEvent(cudaStream_t handle, cudaEvent_t ev, unsigned flags, bool ptsz) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, ptsz);
  auto* e = reinterpret_cast<Event*>(ev);
  if (s == nullptr || !st.events.count(e)) return Ret(cudaErrorInvalidResourceHandle);
  if (flags & ~1u) return Ret(cudaErrorInvalidValue);
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  if (e->recorded) s->t = std::max(s->t, e->t);
  return cudaSuccess;
}
SIM_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return StreamWaitEvent(s, e, flags, false);
}
SIM_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return StreamWaitEvent(s, e, flags, true);
}

static cudaError_t StreamGet(cudaStream_t handle, bool ptsz, unsigned* flags, int* priority, int* device) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  if (flags) *flags = s->flags;
  if (priority) *priority = s->priority;
  if (device) *device = s->device;
  return cudaSuccess;
}
SIM_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int* f) {
  return f ? StreamGet(s, false, f, nullptr, nullptr) : Ret(cudaErrorInvalidValue);
}
SIM_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int* f) {
  return f ? StreamGet(s, true, f, nullptr, nullptr) : Ret(cudaErrorInvalidValue);
}
SIM_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int* p) {
  return p ? StreamGet(s, false, nullptr, p, nullptr) : Ret(cudaErrorInvalidValue);
}
SIM_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int* p) {
  return p ? StreamGet(s, true, nullptr, p, nullptr) : Ret(cudaErrorInvalidValue);
}
SIM_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int* d) {
  return d ? StreamGet(s, false, nullptr, nullptr, d) : Ret(cudaErrorInvalidValue);
}
SIM_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int* d) {
  return d ? StreamGet(s, true, nullptr, nullptr, d) : Ret(cudaErrorInvalidValue);
}

// Stream capture: captured work is counted into the graph, not executed; graphs do not launch.
static cudaError_t BeginCapture(cudaStream_t handle, cudaStreamCaptureMode mode, bool ptsz) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  if (s->legacy) return Ret(cudaErrorStreamCaptureUnsupported);
  if (mode > cudaStreamCaptureModeRelaxed) return Ret(cudaErrorInvalidValue);
  if (s->capture != cudaStreamCaptureStatusNone) return Ret(cudaErrorIllegalState);
  s->capture = cudaStreamCaptureStatusActive;
  s->capture_nodes = 0;
  s->capture_id = ++g_capture_ids;
  s->capture_graph = new Graph{};
  return cudaSuccess;
}
SIM_API cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m) { return BeginCapture(s, m, false); }
SIM_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, cudaStreamCaptureMode m) { return BeginCapture(s, m, true); }

static cudaError_t EndCapture(cudaStream_t handle, cudaGraph_t* graph, bool ptsz) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  if (graph == nullptr) return Ret(cudaErrorInvalidValue);
  if (s->capture == cudaStreamCaptureStatusNone) return Ret(cudaErrorIllegalState);
  bool invalidated = s->capture == cudaStreamCaptureStatusInvalidated;
  s->capture = cudaStreamCaptureStatusNone;
  Graph* g = std::exchange(s->capture_graph, nullptr);
  if (invalidated) { delete g; *graph = nullptr; return Ret(cudaErrorStreamCaptureInvalidated); }
  g->nodes = s->capture_nodes;
  st.graphs.insert(g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}
SIM_API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) { return EndCapture(s, g, false); }
SIM_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* g) { return EndCapture(s, g, true); }

static cudaError_t IsCapturing(cudaStream_t handle, cudaStreamCaptureStatus* status, bool ptsz) {
  SIM_ENTER();
  if (status == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  *status = s->capture;
  return cudaSuccess;
}
SIM_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* c) { return IsCapturing(s, c, false); }
SIM_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, cudaStreamCaptureStatus* c) { return IsCapturing(s, c, true); }

// cudaStreamGetCaptureInfo in all its ABI forms: the status, the capture sequence's id and its
// graph; the sim's graphs have no dependency nodes, so the dependency set is always empty.
static cudaError_t CaptureInfo(cudaStream_t handle, bool ptsz, cudaStreamCaptureStatus* status,
                               unsigned long long* id, cudaGraph_t* graph, const cudaGraphNode_t** deps,
                               const cudaGraphEdgeData** edges, size_t* num_deps) {
  SIM_ENTER();
  if (status == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, ptsz);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  *status = s->capture;
  bool active = s->capture == cudaStreamCaptureStatusActive;
  if (id) *id = active ? s->capture_id : 0;
  if (graph) *graph = active ? reinterpret_cast<cudaGraph_t>(s->capture_graph) : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (num_deps) *num_deps = 0;
  return cudaSuccess;
}
#if P2PSIM_CUDART_MAJOR == 13
SIM_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* c, unsigned long long* id,
                                             cudaGraph_t* g, const cudaGraphNode_t** d,
                                             const cudaGraphEdgeData** e, size_t* n) {
  return CaptureInfo(s, false, c, id, g, d, e, n);
}
SIM_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t s, cudaStreamCaptureStatus* c, unsigned long long* id,
                                                  cudaGraph_t* g, const cudaGraphNode_t** d,
                                                  const cudaGraphEdgeData** e, size_t* n) {
  return CaptureInfo(s, true, c, id, g, d, e, n);
}
#else
// CUDA 12: the plain name is the 11.x three-argument form, _v2 adds graph and dependencies, _v3
// edge data.
// (The CUDA 13 header declares the plain names with 7 arguments: these take their symbol by label.)
SIM_API cudaError_t CaptureInfo11(cudaStream_t s, cudaStreamCaptureStatus* c, unsigned long long* id)
    __asm__("cudaStreamGetCaptureInfo");
SIM_API cudaError_t CaptureInfo11Ptsz(cudaStream_t s, cudaStreamCaptureStatus* c, unsigned long long* id)
    __asm__("cudaStreamGetCaptureInfo_ptsz");
SIM_API cudaError_t CaptureInfo11(cudaStream_t s, cudaStreamCaptureStatus* c, unsigned long long* id) {
  return CaptureInfo(s, false, c, id, nullptr, nullptr, nullptr, nullptr);
}
SIM_API cudaError_t CaptureInfo11Ptsz(cudaStream_t s, cudaStreamCaptureStatus* c, unsigned long long* id) {
  return CaptureInfo(s, true, c, id, nullptr, nullptr, nullptr, nullptr);
}
SIM_API cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t s, cudaStreamCaptureStatus* c, unsigned long long* id,
                                                cudaGraph_t* g, const cudaGraphNode_t** d, size_t* n) {
  return CaptureInfo(s, false, c, id, g, d, nullptr, n);
}
SIM_API cudaError_t cudaStreamGetCaptureInfo_v2_ptsz(cudaStream_t s, cudaStreamCaptureStatus* c,
                                                     unsigned long long* id, cudaGraph_t* g,
                                                     const cudaGraphNode_t** d, size_t* n) {
  return CaptureInfo(s, true, c, id, g, d, nullptr, n);
}
SIM_API cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t s, cudaStreamCaptureStatus* c, unsigned long long* id,
                                                cudaGraph_t* g, const cudaGraphNode_t** d,
                                                const cudaGraphEdgeData** e, size_t* n) {
  return CaptureInfo(s, false, c, id, g, d, e, n);
}
SIM_API cudaError_t cudaStreamGetCaptureInfo_v3_ptsz(cudaStream_t s, cudaStreamCaptureStatus* c,
                                                     unsigned long long* id, cudaGraph_t* g,
                                                     const cudaGraphNode_t** d, const cudaGraphEdgeData** e,
                                                     size_t* n) {
  return CaptureInfo(s, true, c, id, g, d, e, n);
}
#endif

SIM_API cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  SIM_ENTER();
  if (mode == nullptr || *mode > cudaStreamCaptureModeRelaxed) return Ret(cudaErrorInvalidValue);
  std::swap(*mode, t_capture_mode);
  return cudaSuccess;
}

SIM_API cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  auto* g = reinterpret_cast<Graph*>(graph);
  if (!st.graphs.erase(g)) return Ret(cudaErrorInvalidValue);
  delete g;
  return cudaSuccess;
}

SIM_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  auto* g = reinterpret_cast<Graph*>(graph);
  if (!st.graphs.count(g) || count == nullptr || nodes != nullptr) return Ret(cudaErrorInvalidValue);
  *count = static_cast<size_t>(g->nodes);
  return cudaSuccess;
}

// =============================================================================================
// Events

SIM_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int flags) {
  SIM_ENTER();
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (out == nullptr || (flags & ~kKnown) != 0) return Ret(cudaErrorInvalidValue);
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  auto* e = new Event();
  e->device = t_device;
  e->flags = flags;
  st.events.insert(e);
  *out = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}
SIM_API cudaError_t cudaEventCreate(cudaEvent_t* out) { return cudaEventCreateWithFlags(out, 0); }

SIM_API cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  auto* e = reinterpret_cast<Event*>(ev);
  if (!st.events.erase(e)) return Ret(cudaErrorInvalidResourceHandle);
  delete e;
  return cudaSuccess;
}

SIM_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(EventRecord(st, e, s, false));
}
SIM_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(EventRecord(st, e, s, true));
}
SIM_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  SIM_ENTER();
  if (flags & ~1u) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(EventRecord(st, e, s, false));
}
SIM_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  SIM_ENTER();
  if (flags & ~1u) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(EventRecord(st, e, s, true));
}

SIM_API cudaError_t cudaEventQuery(cudaEvent_t ev) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  auto* e = reinterpret_cast<Event*>(ev);
  if (!st.events.count(e)) return Ret(cudaErrorInvalidResourceHandle);
  if (!e->recorded) return cudaSuccess;  // CUDA: an event never recorded counts as complete
  return Completed(st, e->t) ? cudaSuccess : cudaErrorNotReady;
}

SIM_API cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::unique_lock<std::mutex> lock(g_mu);
  auto* e = reinterpret_cast<Event*>(ev);
  if (!st.events.count(e)) return Ret(cudaErrorInvalidResourceHandle);
  if (e->recorded) WaitUntil(st, lock, e->t);
  return cudaSuccess;
}

static cudaError_t ElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  SIM_ENTER();
  if (ms == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  auto* start = reinterpret_cast<Event*>(a);
  auto* end = reinterpret_cast<Event*>(b);
  if (!st.events.count(start) || !st.events.count(end)) return Ret(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return Ret(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return Ret(cudaErrorInvalidResourceHandle);
  double now = SimNow(st);
  if (start->t > now || end->t > now) return Ret(cudaErrorNotReady);
  *ms = static_cast<float>((end->t - start->t) * 1e3);
  return cudaSuccess;
}
SIM_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { return ElapsedTime(ms, a, b); }
#if P2PSIM_CUDART_MAJOR == 12
SIM_API cudaError_t cudaEventElapsedTime_v2(float* ms, cudaEvent_t a, cudaEvent_t b) { return ElapsedTime(ms, a, b); }
#endif

// =============================================================================================
// Host functions and kernels

SIM_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(QueueHostFunc(st, s, false, fn, nullptr, data));
}
SIM_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* data) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(QueueHostFunc(st, s, true, fn, nullptr, data));
}
SIM_API cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void* data, unsigned int flags) {
  SIM_ENTER();
  if (flags != 0) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(QueueHostFunc(st, s, false, nullptr, cb, data));
}
SIM_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t s, cudaStreamCallback_t cb, void* data, unsigned int flags) {
  SIM_ENTER();
  if (flags != 0) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(QueueHostFunc(st, s, true, nullptr, cb, data));
}

SIM_API cudaError_t cudaLaunchKernel(const void* func, dim3, dim3, void**, size_t, cudaStream_t s) {
  SIM_ENTER();
  if (func == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(Launch(st, s, false));
}
SIM_API cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3, dim3, void**, size_t, cudaStream_t s) {
  SIM_ENTER();
  if (func == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(Launch(st, s, true));
}
SIM_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void**) {
  SIM_ENTER();
  if (config == nullptr || func == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(Launch(st, config->stream, false));
}
SIM_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void**) {
  SIM_ENTER();
  if (config == nullptr || func == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  return Ret(Launch(st, config->stream, true));
}
SIM_API cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void** a, size_t sh, cudaStream_t s) {
  return cudaLaunchKernel(reinterpret_cast<const void*>(k), g, b, a, sh, s);
}
SIM_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 g, dim3 b, void** a, size_t sh, cudaStream_t s) {
  return cudaLaunchKernel_ptsz(reinterpret_cast<const void*>(k), g, b, a, sh, s);
}

// Kernel registration: the program's fat binary is accepted and never loaded.
static void* g_fatbin_handle[1];
SIM_API void** __cudaRegisterFatBinary(void*) { return g_fatbin_handle; }
SIM_API void __cudaRegisterFatBinaryEnd(void**) {}
SIM_API void __cudaUnregisterFatBinary(void**) {}
SIM_API void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*) {}
SIM_API void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
SIM_API void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}
SIM_API void __cudaRegisterHostVar(void**, const char*, char*, size_t) {}
SIM_API char __cudaInitModule(void**) { return 1; }
SIM_API cudaError_t __cudaGetKernel(cudaKernel_t* k, const void* fun) {
  if (k == nullptr) return Ret(cudaErrorInvalidValue);
  *k = reinterpret_cast<cudaKernel_t>(const_cast<void*>(fun));
  return cudaSuccess;
}
SIM_API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, void* stream) {
  t_launch_stack.push_back({grid, block, shmem, stream});
  return 0;
}
SIM_API cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shmem, void* stream) {
  if (t_launch_stack.empty()) return Ret(cudaErrorMissingConfiguration);
  LaunchConfig c = t_launch_stack.back();
  t_launch_stack.pop_back();
  if (grid) *grid = c.grid;
  if (block) *block = c.block;
  if (shmem) *shmem = c.shmem;
  if (stream) *static_cast<void**>(stream) = c.stream;
  return cudaSuccess;
}

// Driver entry points: the simulated node has no driver to hand out.
static cudaError_t EntryPointNotFound(void** fn, cudaDriverEntryPointQueryResult* status) {
  SIM_ENTER();
  if (fn == nullptr) return Ret(cudaErrorInvalidValue);
  *fn = nullptr;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  return Ret(cudaErrorSymbolNotFound);
}
SIM_API cudaError_t cudaGetDriverEntryPoint(const char*, void** fn, unsigned long long,
                                            cudaDriverEntryPointQueryResult* status) {
  return EntryPointNotFound(fn, status);
}
SIM_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char*, void** fn, unsigned long long,
                                                 cudaDriverEntryPointQueryResult* status) {
  return EntryPointNotFound(fn, status);
}
SIM_API cudaError_t cudaGetDriverEntryPointByVersion(const char*, void** fn, unsigned int, unsigned long long,
                                                     cudaDriverEntryPointQueryResult* status) {
  return EntryPointNotFound(fn, status);
}
SIM_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char*, void** fn, unsigned int, unsigned long long,
                                                          cudaDriverEntryPointQueryResult* status) {
  return EntryPointNotFound(fn, status);
}

// =============================================================================================
// IPC: a handle names the exporting process's memfd; the importer maps it, so bytes are shared.

SIM_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  SIM_ENTER();
  if (handle == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  Where w = Locate(st, ptr);
  if (!w.known || w.alloc->kind != Alloc::kDevice) return Ret(cudaErrorInvalidValue);
  IpcHandle h{};
  std::memcpy(h.magic, kIpcMagic, sizeof h.magic);
  h.pid = getpid();
  h.fd = w.alloc->fd;
  h.size = w.alloc->size;
  h.host_gpu = w.host_gpu;
  std::snprintf(h.host, sizeof h.host, "%s", st.host->name.c_str());
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle, &h, sizeof h);
  return cudaSuccess;
}

SIM_API cudaError_t cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int flags) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  if (ptr == nullptr || (flags & ~static_cast<unsigned>(cudaIpcMemLazyEnablePeerAccess)) != 0)
    return Ret(cudaErrorInvalidValue);
  IpcHandle h;
  std::memcpy(&h, &handle, sizeof h);
  if (std::memcmp(h.magic, kIpcMagic, sizeof h.magic) != 0 || h.host[sizeof h.host - 1] != '\0')
    return Ret(cudaErrorInvalidValue);
  if (h.host != st.host->name) return Ret(cudaErrorInvalidValue);  // IPC does not cross hosts
  if (h.pid == getpid()) return Ret(cudaErrorDeviceUninitialized);  // "invalid device context": CUDA refuses a process its own handle
  std::lock_guard<std::mutex> lock(g_mu);
  int me = st.visible[t_device];
  if (st.host->FindGpu(h.host_gpu) == nullptr) return Ret(cudaErrorInvalidValue);
  bool same_gpu = h.host_gpu == me;
  if (!same_gpu && !p2psim::PeerCapable(st.topo, *st.host, me, h.host_gpu)) return Ret(cudaErrorPeerAccessUnsupported);
  // The same allocation opened twice maps once (reference counted).
  for (auto& [base, a] : st.allocs) {
    if (a.kind == Alloc::kIpc && a.fd < 0 && a.size == h.size && a.host_gpu == h.host_gpu && a.ipc_refs > 0 &&
        a.ipc_key == std::to_string(h.pid) + ":" + std::to_string(h.fd)) {
      ++a.ipc_refs;
      *ptr = reinterpret_cast<void*>(base);
      return cudaSuccess;
    }
  }
  std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Ret(cudaErrorMapBufferObjectFailed);
  void* p = ArenaMap(st, h.host_gpu, fd, h.size);  // in the owner's range, as UVA places it
  close(fd);
  if (p == nullptr) return Ret(cudaErrorMapBufferObjectFailed);
  Alloc a;
  a.size = h.size;
  a.kind = Alloc::kIpc;
  a.host_gpu = h.host_gpu;
  a.ipc_refs = 1;
  a.ipc_direct = !same_gpu;
  a.ipc_key = std::to_string(h.pid) + ":" + std::to_string(h.fd);
  st.allocs[reinterpret_cast<uintptr_t>(p)] = a;
  *ptr = p;
  return cudaSuccess;
}

SIM_API cudaError_t cudaIpcCloseMemHandle(void* ptr) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = st.allocs.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == st.allocs.end() || it->second.kind != Alloc::kIpc) return Ret(cudaErrorInvalidValue);
  if (--it->second.ipc_refs == 0) {
    ArenaUnmap(st, it->second.host_gpu, ptr, it->second.size);
    st.allocs.erase(it);
  }
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Hidden hook for the simulated NCCL (not a CUDA API; found with dlsym, listed as an extra export
// in CMakeLists.txt and the export test): queues `seconds` of work on `stream` of the current
// device, as a NCCL kernel would, so events around an NCCL call measure the simulated transfer.
SIM_API cudaError_t p2psim_stream_advance(cudaStream_t handle, double seconds) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(g_mu);
  Stream* s = Resolve(st, handle, false);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  if (cudaError_t r = cudaSuccess; Captured(s, &r)) return r;
  Enqueue(st, s, seconds > 0 ? seconds : 0);
  return cudaSuccess;
}
