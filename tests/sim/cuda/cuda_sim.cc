// The simulated CUDA driver: a drop-in libcuda.so.1 (soname libcuda.so.1, unversioned, exactly the
// real export list) on the same engine as the simulated runtimes. It OWNS the process's one
// simulated state (sim_engine.h): the runtimes dlopen it and call p2psim_driver() for it, so
// memory, contexts, the current device and peer mappings are the same through either API.
// Contexts are primary contexts only (CUcontext = Context*, one per device); CUdevice is the
// ordinal. Functions taking 32-bit device pointers (the pre-3.2 bare cuMemAlloc, cuMemcpyHtoD, ...)
// stay "not simulated" stubs, as does everything else not defined here.
#define __CUDA_API_VERSION_INTERNAL  // declare every variant (cuMemAlloc and cuMemAlloc_v2), no renaming macros
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

#include "tests/sim/common/sim_engine.h"

#define SIM_API extern "C" __attribute__((visibility("default")))

namespace {

using p2ptrace::Gpu;
using p2ptrace::Host;

struct ErrorEntry { int code; const char* name; const char* text; };
constexpr ErrorEntry kErrors[] = {
#include "cu_result_table.inc"
};
struct ProcVersion { const char* name; int version; };
constexpr ProcVersion kProcVersions[] = {
#include "cu_proc_table.inc"
};

// ---------------------------------------------------------------------------------------------
// The process's simulated state, shared with the runtimes through p2psim_driver().

std::mutex g_mu;
State* g_state = nullptr;
std::once_flag g_once;
// Allocated once per thread and never freed: a thread_local object would be destroyed at exit()
// before the atexit handlers and static destructors (torch's among them) that still call CUDA.
thread_local ThreadData* t_data = nullptr;

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
      auto c = std::make_unique<Context>();
      c->device = static_cast<int>(d);
      st->primary.push_back(std::move(c));
    }
  }
  pthread_atfork(Prefork, Postfork, PostforkChild);
  g_state = st;
}

State* StateOnce() {
  std::call_once(g_once, Init);
  return g_state;
}
ThreadData* ThreadOf() {
  if (t_data == nullptr) t_data = new ThreadData();
  return t_data;
}

const Shared kShared{kSharedAbi, sizeof(State), sizeof(ThreadData), StateOnce, &g_mu, ThreadOf};
struct SetShared { SetShared() { g_shared = &kShared; } } g_set_shared;

// ---------------------------------------------------------------------------------------------
// Entry helpers

// The engine's codes are the runtime's; the driver shares their numbers except for these.
CUresult Cu(cudaError_t e) {
  switch (e) {
    case cudaErrorInvalidPitchValue: case cudaErrorInvalidMemcpyDirection: return CUDA_ERROR_INVALID_VALUE;
    default: return static_cast<CUresult>(e);
  }
}

// After cuInit (or the runtime's own initialisation); CUDA_ERROR_NOT_INITIALIZED before.
#define DRV_ENTER()                                         \
  State& st = *StateOnce();                                 \
  if (!st.ok || !st.driver_init) return CUDA_ERROR_NOT_INITIALIZED

// As above, with a current, live context `ctx`.
#define DRV_CTX()                                           \
  DRV_ENTER();                                              \
  Context* ctx = Current();                                 \
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;    \
  if (!ctx->active) return CUDA_ERROR_CONTEXT_IS_DESTROYED

Context* KnownContext(State& st, CUcontext c) {
  for (auto& p : st.primary)
    if (reinterpret_cast<CUcontext>(p.get()) == c) return p.get();
  return nullptr;
}

bool ValidCuDevice(const State& st, CUdevice d) { return ValidDevice(st, static_cast<int>(d)); }

void* Ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

CUresult Copy(State& st, CUdeviceptr dst, CUdeviceptr src, size_t n, cudaMemcpyKind kind, CUstream s,
              bool ptsz, bool sync) {
  std::unique_lock<std::mutex> lock(Mu());
  // A synchronous copy without a stream is ordered after both devices' work, as cudaMemcpy is.
  return Cu(::Copy(st, lock, Ptr(dst), Ptr(src), Linear(n), kind, reinterpret_cast<cudaStream_t>(s), ptsz, sync,
                   sync && !ptsz));
}

CUresult PeerCopy(State& st, CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                  CUstream s, bool ptsz, bool sync) {
  Context* d = KnownContext(st, dst_ctx);
  Context* c = KnownContext(st, src_ctx);
  if (d == nullptr || c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::unique_lock<std::mutex> lock(Mu());
  return Cu(::Copy(st, lock, Ptr(dst), Ptr(src), Linear(n), cudaMemcpyDeviceToDevice,
                   reinterpret_cast<cudaStream_t>(s), ptsz, sync, sync && !ptsz));
}

// ---------------------------------------------------------------------------------------------
// cuGetProcAddress: the name's variant for the requested CUDA version, from cudaTypedefs.h's
// versions (the k-th version of a name is its bare symbol for k = 1, then _v2, _v3, ...), then the
// _ptds/_ptsz flavour for the per-thread default stream. Found in this library's own exports, so
// a name the sim does not model resolves to its "not simulated" stub, as a real name must resolve.

void* OwnSymbol(const std::string& name) {
  static void* self = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(&OwnSymbol), &info);
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }();
  if (self == nullptr) return nullptr;
  void* f = dlsym(self, name.c_str());
  Dl_info mine{}, found{};
  if (f == nullptr || !dladdr(reinterpret_cast<void*>(&OwnSymbol), &mine) || !dladdr(f, &found) ||
      mine.dli_fbase != found.dli_fbase)
    return nullptr;  // only this library's exports (dlsym also searches its dependencies)
  return f;
}

CUresult ProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult* status) {
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == nullptr || pfn == nullptr || (flags & ~3ull) != 0) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  std::vector<int> versions;
  for (const ProcVersion& p : kProcVersions)
    if (std::strcmp(p.name, symbol) == 0) versions.push_back(p.version);
  std::sort(versions.begin(), versions.end());
  versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
  std::string base = symbol, chosen;
  if (versions.empty()) {
    if (OwnSymbol(base) != nullptr) chosen = base;
  } else {
    int k = static_cast<int>(std::upper_bound(versions.begin(), versions.end(), version) - versions.begin());
    if (k == 0) {
      if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    }
    for (; k >= 1 && chosen.empty(); --k) {
      std::string name = k == 1 ? base : base + "_v" + std::to_string(k);
      if (OwnSymbol(name) != nullptr) chosen = name;
    }
  }
  if (chosen.empty()) return CUDA_ERROR_NOT_FOUND;
  void* f = nullptr;
  if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    f = OwnSymbol(chosen + "_ptds");
    if (f == nullptr) f = OwnSymbol(chosen + "_ptsz");
  }
  if (f == nullptr) f = OwnSymbol(chosen);
  *pfn = f;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

// The one extra export: the shared state, for the simulated runtimes (sim_engine.h).
SIM_API const Shared* p2psim_driver(void) { return &kShared; }

// =============================================================================================
// Initialisation, versions, errors

SIM_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& st = *StateOnce();
  if (!st.ok) return CUDA_ERROR_NOT_INITIALIZED;
  if (st.visible.empty()) return CUDA_ERROR_NO_DEVICE;
  st.driver_init = true;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDriverGetVersion(int* v) {
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = kDriverVersion;
  return CUDA_SUCCESS;
}

// The driver's error log (CUDA 12.9+; PyTorch registers a callback at CUDA init). The sim's driver
// logs nothing, so a callback is kept and never called; the log is always empty.
struct LogCallback { CUlogsCallback fn; void* data; };
std::mutex g_log_mu;
std::set<LogCallback*> g_log_callbacks;

SIM_API CUresult cuLogsRegisterCallback(CUlogsCallback fn, void* data, CUlogsCallbackHandle* out) {
  if (fn == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_log_mu);
  auto* cb = new LogCallback{fn, data};
  g_log_callbacks.insert(cb);
  *out = reinterpret_cast<CUlogsCallbackHandle>(cb);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle handle) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  auto* cb = reinterpret_cast<LogCallback*>(handle);
  if (g_log_callbacks.erase(cb) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete cb;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuLogsCurrent(CUlogIterator* iterator, unsigned int flags) {
  if (iterator == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *iterator = 0;  // no entry logged yet
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char** s) {
  if (s == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorEntry& e : kErrors)
    if (e.code == error) { *s = e.name; return CUDA_SUCCESS; }
  *s = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorString(CUresult error, const char** s) {
  if (s == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorEntry& e : kErrors)
    if (e.code == error) { *s = e.text; return CUDA_SUCCESS; }
  *s = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* status) {
  return ProcAddress(symbol, pfn, version, flags, status);
}
SIM_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return ProcAddress(symbol, pfn, version, flags, nullptr);
}

// =============================================================================================
// Devices

SIM_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  DRV_ENTER();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(st, ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int* count) {
  DRV_ENTER();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = DeviceCount(st);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  DRV_ENTER();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidCuDevice(st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", GpuOf(st, dev).name.c_str());
  return CUDA_SUCCESS;
}

static CUresult Uuid(CUuuid* uuid, CUdevice dev) {
  DRV_ENTER();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidCuDevice(st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  DeviceUuid(st, dev, reinterpret_cast<unsigned char*>(uuid->bytes));
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return Uuid(uuid, dev); }
SIM_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return Uuid(uuid, dev); }

SIM_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  DRV_ENTER();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidCuDevice(st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = DeviceMemory(st, dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice dev) {
  DRV_ENTER();
  return Cu(DeviceAttribute(st, value, attr, dev));
}

SIM_API CUresult cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  DRV_ENTER();
  return Cu(FormatBusId(st, bus_id, len, dev));
}

SIM_API CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* bus_id) {
  DRV_ENTER();
  int d = 0;
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = Cu(DeviceByBusId(st, &d, bus_id));
  if (r == CUDA_SUCCESS) *dev = d;
  return r;
}

SIM_API CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  DRV_ENTER();
  return Cu(CanAccessPeer(st, can, dev, peer));
}

SIM_API CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst) {
  DRV_ENTER();
  return Cu(P2PAttribute(st, value, attr, src, dst));
}

// =============================================================================================
// Primary contexts

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  DRV_ENTER();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidCuDevice(st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(Mu());
  Context& c = *st.primary[dev];
  ++c.refs;
  c.active = true;
  NoteUse(st, dev);
  *pctx = reinterpret_cast<CUcontext>(&c);
  return CUDA_SUCCESS;
}

// The last reference gone, the context is destroyed with its memory and peer mappings.
static CUresult Release(CUdevice dev) {
  DRV_ENTER();
  if (!ValidCuDevice(st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  {
    std::lock_guard<std::mutex> lock(Mu());
    Context& c = *st.primary[dev];
    if (c.refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--c.refs > 0) return CUDA_SUCCESS;
  }
  ResetDevice(st, dev);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return Release(dev); }
SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return Release(dev); }

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  DRV_ENTER();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidCuDevice(st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(Mu());
  *flags = st.primary[dev]->flags;
  *active = st.primary[dev]->active ? 1 : 0;
  return CUDA_SUCCESS;
}

static CUresult Reset(CUdevice dev) {
  DRV_ENTER();
  if (!ValidCuDevice(st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (T().in_host_func) return CUDA_ERROR_NOT_PERMITTED;
  ResetDevice(st, dev);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return Reset(dev); }
SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return Reset(dev); }

static CUresult SetFlags(CUdevice dev, unsigned int flags) {
  DRV_ENTER();
  if (!ValidCuDevice(st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  if ((flags & ~0xffu) != 0 || (flags & CU_CTX_SCHED_MASK) == 3 || (flags & CU_CTX_SCHED_MASK) > 4)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  st.primary[dev]->flags = flags;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) { return SetFlags(dev, flags); }
SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) { return SetFlags(dev, flags); }

// =============================================================================================
// The context stack (per thread, shared with the runtimes: its top is cudaGetDevice's device)

SIM_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  DRV_ENTER();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(Current());
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  DRV_ENTER();
  auto& stack = T().ctx_stack;
  if (ctx == nullptr) {  // unbinds the current context
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  Context* c = KnownContext(st, ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (stack.empty()) stack.push_back(c);
  else stack.back() = c;
  return CUDA_SUCCESS;
}

static CUresult Push(CUcontext ctx) {
  DRV_ENTER();
  Context* c = KnownContext(st, ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  T().ctx_stack.push_back(c);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxPushCurrent(CUcontext ctx) { return Push(ctx); }
SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return Push(ctx); }

static CUresult Pop(CUcontext* pctx) {
  DRV_ENTER();
  auto& stack = T().ctx_stack;
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxPopCurrent(CUcontext* pctx) { return Pop(pctx); }
SIM_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) { return Pop(pctx); }

SIM_API CUresult cuCtxGetDevice(CUdevice* dev) {
  DRV_CTX();
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *dev = ctx->device;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxGetDevice_v2(CUdevice* dev, CUcontext c) {
  if (c == nullptr) return cuCtxGetDevice(dev);
  DRV_ENTER();
  Context* k = KnownContext(st, c);
  if (k == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *dev = k->device;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSynchronize(void) {
  DRV_CTX();
  return Cu(DeviceSync(st, ctx->device));
}
SIM_API CUresult cuCtxSynchronize_v2(CUcontext c) {
  if (c == nullptr) return cuCtxSynchronize();
  DRV_ENTER();
  Context* k = KnownContext(st, c);
  if (k == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return Cu(DeviceSync(st, k->device));
}

SIM_API CUresult cuCtxGetApiVersion(CUcontext c, unsigned int* version) {
  DRV_ENTER();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (c == nullptr ? Current() == nullptr : KnownContext(st, c) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;  // every context since CUDA 3.2's API
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  DRV_CTX();
  Context* p = KnownContext(st, peer);
  if (p == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return Cu(EnablePeer(st, ctx->device, p->device, flags));
}

SIM_API CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  DRV_CTX();
  Context* p = KnownContext(st, peer);
  if (p == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return Cu(DisablePeer(st, ctx->device, p->device));
}

// =============================================================================================
// Memory

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  DRV_CTX();
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (T().in_host_func) return CUDA_ERROR_NOT_PERMITTED;
  std::lock_guard<std::mutex> lock(Mu());
  void* p = nullptr;
  CUresult r = Cu(AllocDevice(st, &p, bytes));
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<uintptr_t>(p);
  return r;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr p) {
  DRV_CTX();
  if (T().in_host_func) return CUDA_ERROR_NOT_PERMITTED;
  std::lock_guard<std::mutex> lock(Mu());
  return Cu(FreeKind(st, Ptr(p), Alloc::kDevice));
}

SIM_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  DRV_CTX();
  MemInfo(st, ctx->device, free_bytes, total);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  DRV_CTX();
  if (pp == nullptr || (flags & ~7u) != 0) return CUDA_ERROR_INVALID_VALUE;  // PORTABLE|DEVICEMAP|WRITECOMBINED
  return Cu(HostAlloc(st, pp, bytes));
}
SIM_API CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

SIM_API CUresult cuMemFreeHost(void* p) {
  DRV_CTX();
  std::lock_guard<std::mutex> lock(Mu());
  return Cu(FreeKind(st, p, Alloc::kHostPinned));
}

namespace {
// The reservation holding a VMM mapping's address.
std::map<uintptr_t, Reservation>::const_iterator ReservationAt(const State& st, uintptr_t p) {
  return std::prev(st.reservations.upper_bound(p));
}

// One attribute of a known allocation (`w`); the caller holds the lock.
CUresult PointerAttribute(State& st, const Where& w, void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  bool device = w.alloc->kind != Alloc::kHostPinned;
  int ordinal = device ? OrdinalOf(st, w.host_gpu) : -1;
  if (ordinal < 0) ordinal = CurDev();  // pinned memory, or IPC memory of a GPU this process cannot see
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:  // none for VMM and pool memory (CUDA 13 answers null)
      *static_cast<CUcontext*>(data) = w.alloc->kind == Alloc::kVmm || w.alloc->kind == Alloc::kPool
                                           ? nullptr
                                           : reinterpret_cast<CUcontext>(st.primary[ordinal].get());
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = Ptr(ptr); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = ordinal; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = w.base; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *static_cast<unsigned*>(data) = w.alloc->kind == Alloc::kDevice; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:  // for VMM memory: its reservation (as CUDA 13 answers)
      *static_cast<CUdeviceptr*>(data) =
          w.alloc->kind == Alloc::kVmm ? ReservationAt(st, w.base)->first : w.base;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) =
          w.alloc->kind == Alloc::kVmm ? ReservationAt(st, w.base)->second.size : w.alloc->size;
      break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = 1; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: {  // what the VMM handle or the pool allows; none otherwise
      unsigned types = 0;
      if (w.alloc->kind == Alloc::kVmm) types = st.vmm.at(w.alloc->vmm).handle_types;
      if (w.alloc->kind == Alloc::kPool) types = w.alloc->pool->handle_types;
      *static_cast<unsigned long long*>(data) = types;
      break;
    }
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {  // the current context's device's access to the memory
      int me = CurDev(), a = DeviceAccess(st, w, Ptr(ptr), 1, me);
      if (a < 0)  // memory peer access governs: its own device, or a peer with access enabled
        a = !device || OrdinalOf(st, w.host_gpu) == me || st.peer_on[me][ordinal] ? kAccessReadWrite : kAccessNone;
      *static_cast<unsigned*>(data) = static_cast<unsigned>(a);
      break;
    }
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) =
          w.alloc->kind == Alloc::kPool ? reinterpret_cast<CUmemoryPool>(w.alloc->pool) : nullptr;
      break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *static_cast<CUdeviceptr*>(data) = w.base; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *static_cast<size_t*>(data) = w.alloc->size; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}
}  // namespace

SIM_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  DRV_ENTER();
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  Where w = Locate(st, Ptr(ptr));
  if (!w.known) return CUDA_ERROR_INVALID_VALUE;  // not memory CUDA knows
  return PointerAttribute(st, w, data, attr, ptr);
}

// Unlike the singular form, memory CUDA does not know is no error: its attributes read as null.
SIM_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr) {
  DRV_ENTER();
  if (attrs == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  Where w = Locate(st, Ptr(ptr));
  for (unsigned i = 0; i < n; ++i) {
    if (data[i] == nullptr) continue;
    if (!w.known) {
      switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data[i]) = -2; break;  // CU_DEVICE_INVALID
        case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data[i]) = nullptr; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        case CU_POINTER_ATTRIBUTE_BUFFER_ID:
          *static_cast<unsigned long long*>(data[i]) = 0; break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER: case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
          *static_cast<void**>(data[i]) = nullptr; break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
          *static_cast<size_t*>(data[i]) = 0; break;
        default: *static_cast<unsigned*>(data[i]) = 0; break;
      }
      continue;
    }
    CUresult r = PointerAttribute(st, w, data[i], attrs[i], ptr);
    if (r == CUDA_ERROR_INVALID_VALUE) *static_cast<void**>(data[i]) = nullptr;  // host pointer of device memory
    else if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// =============================================================================================
// Virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess, …), as
// JAX/XLA and torch's expandable segments use it. A handle is a memfd (like cudaMalloc's memory);
// a reservation is an inaccessible 2 MiB-aligned range outside the devices' arenas; a mapping maps
// the memfd there and is device memory of the handle's device to the rest of the sim (pointer
// attributes, cudaMemcpyDefault, memsets), reachable by no device until cuMemSetAccess says so.
// None of these needs a current context.

extern "C" int p2psim_unsupported(const char*, int, const char*);

namespace {
static_assert(sizeof(CUmemAccessDesc) == sizeof(cudaMemAccessDesc) &&
              sizeof(CUmemLocation) == sizeof(cudaMemLocation) && sizeof(CUmemPoolProps) == sizeof(cudaMemPoolProps));

CUresult NotSimulated(const char* what) {
  return static_cast<CUresult>(p2psim_unsupported(what, CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"));
}

// A cuMemCreate / granularity property: pinned memory of a visible device; handle types POSIX file
// descriptor and fabric (exporting them is not simulated). Host memory is not simulated. The codes
// are CUDA 13's (measured on an H200, driver 580).
CUresult CheckProp(const State& st, const CUmemAllocationProp* prop, const char* host_what) {
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST || prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    return NotSimulated(host_what);
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(st, prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  constexpr unsigned kTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC;
  if (static_cast<unsigned>(prop->requestedHandleTypes) & ~kTypes) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// A handle the program may name: one whose memory exists. Released while still mapped it can still
// be queried and mapped again (as CUDA 13 lets it), until its last mapping goes.
VmmHandle* LiveHandle(State& st, CUmemGenericAllocationHandle id) {
  auto it = st.vmm.find(id);
  return it == st.vmm.end() ? nullptr : &it->second;
}

// The physical memory goes when it is released and unmapped everywhere.
void MaybeFreeHandle(State& st, unsigned long long id) {
  auto it = st.vmm.find(id);
  if (it == st.vmm.end() || it->second.refs > 0 || it->second.mappings > 0) return;
  close(it->second.fd);
  st.vmm.erase(it);
}

// The mappings that exactly tile [ptr, ptr + size) (whole mappings, no hole), or none.
std::vector<std::map<uintptr_t, Alloc>::iterator> Mappings(State& st, CUdeviceptr ptr, size_t size) {
  std::vector<std::map<uintptr_t, Alloc>::iterator> out;
  uintptr_t at = ptr, end = ptr + size;
  if (size == 0 || end < at) return out;
  for (auto it = st.allocs.find(at); it != st.allocs.end() && it->first == at && it->second.kind == Alloc::kVmm; ++it) {
    out.push_back(it);
    at += it->second.size;
    if (at >= end) break;
  }
  if (at != end) out.clear();
  return out;
}

// The range goes back to its reservation (inaccessible), the handle loses a mapping.
void UnmapOne(State& st, std::map<uintptr_t, Alloc>::iterator it) {
  mmap(reinterpret_cast<void*>(it->first), it->second.size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  unsigned long long id = it->second.vmm;
  --st.vmm.at(id).mappings;
  st.allocs.erase(it);
  MaybeFreeHandle(st, id);
}

const Reservation* ReservationOf(const State& st, uintptr_t p, size_t size) {
  auto it = st.reservations.upper_bound(p);
  if (it == st.reservations.begin()) return nullptr;
  --it;
  return p + size <= it->first + it->second.len && p + size >= p ? &it->second : nullptr;
}
}  // namespace

SIM_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  DRV_ENTER();
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckProp(st, prop, "cuMemGetAllocationGranularity of host memory"); r != CUDA_SUCCESS) return r;
  *granularity = kGranule;  // 2 MiB, minimum and recommended, as on a real GPU
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  DRV_ENTER();
  if (handle == nullptr || prop == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckProp(st, prop, "cuMemCreate of host memory"); r != CUDA_SUCCESS) return r;
  if (size == 0 || size % kGranule != 0) return CUDA_ERROR_INVALID_VALUE;
  // A fabric handle needs an IMEX channel, which no simulated node has (CUDA: not permitted, 800;
  // XLA and torch then ask for a POSIX file descriptor).
  if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) return CUDA_ERROR_NOT_PERMITTED;
  if (size > DeviceMemory(st, prop->location.id)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = DeviceMemfd(size);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(Mu());
  unsigned long long id = 0x4000 + ++st.vmm_ids;  // opaque, never 0
  VmmHandle& h = st.vmm[id];
  h.size = size;
  h.device = prop->location.id;
  h.host_gpu = st.visible[h.device];
  h.fd = fd;
  h.handle_types = static_cast<unsigned>(prop->requestedHandleTypes);
  h.compression = prop->allocFlags.compressionType;
  h.gdr_capable = prop->allocFlags.gpuDirectRDMACapable;
  h.usage = prop->allocFlags.usage;
  *handle = id;
  return CUDA_SUCCESS;
}

// Drops the program's reference; the memory goes now or with the last mapping of it.
SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  DRV_ENTER();
  std::lock_guard<std::mutex> lock(Mu());
  VmmHandle* h = LiveHandle(st, handle);
  if (h == nullptr || h->refs <= 0) return CUDA_ERROR_INVALID_VALUE;  // CUDA: undefined (it crashes); the sim says so
  --h->refs;
  MaybeFreeHandle(st, handle);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  DRV_ENTER();
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  const VmmHandle* h = LiveHandle(st, handle);
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = static_cast<CUmemAllocationHandleType>(h->handle_types);
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = h->device;
  prop->allocFlags.compressionType = h->compression;
  prop->allocFlags.gpuDirectRDMACapable = h->gdr_capable;
  prop->allocFlags.usage = h->usage;
  return CUDA_SUCCESS;
}

// The handle mapped at any address of a mapping, with a reference the program must release.
SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  DRV_ENTER();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  Where w = Locate(st, addr);
  if (!w.known || w.alloc->kind != Alloc::kVmm) return CUDA_ERROR_INVALID_VALUE;
  ++st.vmm.at(w.alloc->vmm).refs;
  *handle = w.alloc->vmm;
  return CUDA_SUCCESS;
}

// `addr` is a hint (taken when it is free and aligned); the size whole 2 MiB granules (CUDA 13
// refuses 4 KiB or 2 MiB + 4 KiB with 1, though cuda.h says host pages).
SIM_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
  DRV_ENTER();
  auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (ptr == nullptr || size == 0 || flags != 0 || size % kGranule != 0 || addr % page != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;  // a power of two, or 0
  size_t align = std::max(alignment, kGranule), len = RoundUp(size, kGranule);
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  uintptr_t base = 0;
  if (addr != 0 && addr % align == 0) {
    void* r = mmap(Ptr(addr), len, PROT_NONE, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (r == Ptr(addr)) base = addr;
    else if (r != MAP_FAILED) munmap(r, len);
  }
  if (base == 0) {
    if (len + align < len) return CUDA_ERROR_OUT_OF_MEMORY;
    void* r = mmap(nullptr, len + align, PROT_NONE, kFlags, -1, 0);
    if (r == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    auto raw = reinterpret_cast<uintptr_t>(r);
    base = RoundUp(raw, align);
    if (base > raw) munmap(r, base - raw);
    if (raw + len + align > base + len) munmap(Ptr(base + len), raw + len + align - (base + len));
  }
  std::lock_guard<std::mutex> lock(Mu());
  st.reservations[base] = Reservation{size, len};
  *ptr = base;
  return CUDA_SUCCESS;
}

// The range as reserved, with nothing mapped in it any more (else 1, as CUDA 13 answers).
SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  DRV_ENTER();
  std::lock_guard<std::mutex> lock(Mu());
  auto it = st.reservations.find(ptr);
  if (it == st.reservations.end() || (size != it->second.size && size != it->second.len))
    return CUDA_ERROR_INVALID_VALUE;
  size_t len = it->second.len;
  auto a = st.allocs.lower_bound(ptr);
  if (a != st.allocs.end() && a->first < ptr + len) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  munmap(Ptr(ptr), len);
  st.reservations.erase(it);
  return CUDA_SUCCESS;
}

// Maps the whole of the handle's memory over an unmapped part of a reservation; no device may touch
// it yet. Codes as CUDA 13 gives them: flags, an unknown handle, an address outside any reservation
// → 1; an offset (cuda.h: "currently must be zero"), a size other than the handle's (no partial
// mappings), a misaligned address, a range already mapped → 801.
SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  DRV_ENTER();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  VmmHandle* h = LiveHandle(st, handle);
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ReservationOf(st, ptr, std::max<size_t>(size, 1)) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (offset != 0 || size != h->size || ptr % kGranule != 0) return CUDA_ERROR_NOT_SUPPORTED;
  auto next = st.allocs.lower_bound(ptr);
  if (next != st.allocs.end() && next->first < ptr + size) return CUDA_ERROR_NOT_SUPPORTED;  // already mapped
  if (next != st.allocs.begin() && std::prev(next)->first + std::prev(next)->second.size > ptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  void* p = mmap(Ptr(ptr), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Alloc a;
  a.size = size;
  a.kind = Alloc::kVmm;
  a.host_gpu = h->host_gpu;
  a.vmm = handle;
  a.vmm_offset = offset;
  a.access.assign(DeviceCount(st), kAccessNone);
  st.allocs[ptr] = std::move(a);
  ++h->mappings;
  return CUDA_SUCCESS;
}

// Whole mappings only (one call may unmap several side by side; part of one or a hole → 1); a
// released handle's memory goes with its last mapping. A reserved range with nothing mapped in it
// unmaps as a no-op (CUDA 13 returns success).
SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  DRV_ENTER();
  std::lock_guard<std::mutex> lock(Mu());
  auto maps = Mappings(st, ptr, size);
  if (maps.empty() && size != 0 && ReservationOf(st, ptr, size) != nullptr) {
    auto a = st.allocs.lower_bound(ptr);
    bool none = (a == st.allocs.end() || a->first >= ptr + size) &&
                (a == st.allocs.begin() || std::prev(a)->first + std::prev(a)->second.size <= ptr);
    if (none) return CUDA_SUCCESS;
  }
  if (maps.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (auto it : maps) UnmapOne(st, it);
  return CUDA_SUCCESS;
}

// Per mapping and device: none, read or read-write. The range must be whole mappings with no hole
// (else 1); a device other than the memory's own needs a peer-capable pair (cudaDeviceCanAccessPeer),
// else CUDA_ERROR_INVALID_DEVICE; the other codes as CheckAccessDesc. Every descriptor is checked
// before any applies.
SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  DRV_ENTER();
  if (desc == nullptr && count != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  auto maps = Mappings(st, ptr, size);
  if (maps.empty()) return CUDA_ERROR_INVALID_VALUE;
  auto descs = reinterpret_cast<const cudaMemAccessDesc*>(desc);
  for (auto it : maps)
    for (size_t i = 0; i < count; ++i)
      if (cudaError_t r = CheckAccessDesc(st, descs[i], st.vmm.at(it->second.vmm).device, false); r != cudaSuccess)
        return Cu(r);
  for (auto it : maps)
    for (size_t i = 0; i < count; ++i)
      it->second.access[desc[i].location.id] = static_cast<unsigned char>(desc[i].flags);
  return CUDA_SUCCESS;
}

// A host location reads "none"; an unknown device → 101; an unmapped address → 1 (CUDA 13's codes).
SIM_API CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  DRV_ENTER();
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool host = HostLocation(location->type);
  if (!host && location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!host && !ValidDevice(st, location->id)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(Mu());
  Where w = Locate(st, Ptr(ptr));
  if (!w.known || w.alloc->kind != Alloc::kVmm) return CUDA_ERROR_INVALID_VALUE;
  *flags = host ? kAccessNone : w.alloc->access[location->id];
  return CUDA_SUCCESS;
}

// The allocation (for VMM memory: the mapping) holding an address.
static CUresult AddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  DRV_CTX();
  std::lock_guard<std::mutex> lock(Mu());
  Where w = Locate(st, Ptr(ptr));
  if (!w.known || w.alloc->kind == Alloc::kHostPinned) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = w.base;
  if (size) *size = w.alloc->size;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  return AddressRange(base, size, ptr);
}

// =============================================================================================
// Stream-ordered memory pools: the engine's, shared with the runtime (CUmemoryPool = cudaMemPool_t).

#define DRV_POOL(p) reinterpret_cast<cudaMemPool_t>(p)

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  DRV_ENTER();
  return Cu(DevicePool(st, reinterpret_cast<cudaMemPool_t*>(pool), dev, 0));
}
SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  DRV_ENTER();
  return Cu(DevicePool(st, reinterpret_cast<cudaMemPool_t*>(pool), dev, 1));
}
SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  DRV_ENTER();
  return Cu(SetDevicePool(st, dev, DRV_POOL(pool)));
}
// CUDA 13's location-based forms: pinned device memory only (managed and host pools are not simulated).
static CUresult LocationPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type, int which,
                             const char* what) {
  DRV_ENTER();
  if (location == nullptr || (which < 2 && pool == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_MEM_ALLOCATION_TYPE_MANAGED || location->type == CU_MEM_LOCATION_TYPE_HOST ||
      location->type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    return NotSimulated(what);
  if (type != CU_MEM_ALLOCATION_TYPE_PINNED || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(st, location->id)) return CUDA_ERROR_INVALID_DEVICE;
  if (which == 2) return Cu(SetDevicePool(st, location->id, DRV_POOL(*pool)));
  return Cu(DevicePool(st, reinterpret_cast<cudaMemPool_t*>(pool), location->id, which));
}
SIM_API CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  return LocationPool(pool, location, type, 0, "cuMemGetDefaultMemPool of managed or host memory");
}
SIM_API CUresult cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  return LocationPool(pool, location, type, 1, "cuMemGetMemPool of managed or host memory");
}
SIM_API CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool pool) {
  return LocationPool(&pool, location, type, 2, "cuMemSetMemPool of managed or host memory");
}
SIM_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  DRV_ENTER();
  bool host = false;
  CUresult r = Cu(PoolCreate(st, reinterpret_cast<cudaMemPool_t*>(pool),
                             reinterpret_cast<const cudaMemPoolProps*>(props), &host));
  return host ? NotSimulated("cuMemPoolCreate of host memory") : r;
}
SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  DRV_ENTER();
  return Cu(PoolDestroy(st, DRV_POOL(pool)));
}
SIM_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  DRV_ENTER();
  return Cu(PoolSetAccess(st, DRV_POOL(pool), reinterpret_cast<const cudaMemAccessDesc*>(map), count));
}
SIM_API CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location) {
  DRV_ENTER();
  static_assert(sizeof(CUmemAccess_flags) == sizeof(int));
  return Cu(PoolGetAccess(st, reinterpret_cast<int*>(flags), DRV_POOL(pool),
                          reinterpret_cast<const cudaMemLocation*>(location)));
}
SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  DRV_ENTER();
  return Cu(PoolAttribute(st, DRV_POOL(pool), attr, value, true));
}
SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  DRV_ENTER();
  return Cu(PoolAttribute(st, DRV_POOL(pool), attr, value, false));
}
SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t) {
  DRV_ENTER();
  return Cu(PoolTrim(st, DRV_POOL(pool)));
}

// Stream-ordered allocation (0 bytes: null, as CUDA 13 answers).
static CUresult AllocAsync(CUdeviceptr* dptr, size_t size, bool from_pool, CUmemoryPool pool, CUstream s, bool ptsz) {
  DRV_CTX();
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  void* p = nullptr;
  CUresult r = Cu(PoolAlloc(st, &p, size, from_pool, DRV_POOL(pool), reinterpret_cast<cudaStream_t>(s), ptsz));
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<uintptr_t>(p);
  return r;
}
SIM_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) {
  return AllocAsync(dptr, size, false, nullptr, s, false);
}
SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream s) {
  return AllocAsync(dptr, size, false, nullptr, s, true);
}
SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream s) {
  return AllocAsync(dptr, size, true, pool, s, false);
}
SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream s) {
  return AllocAsync(dptr, size, true, pool, s, true);
}
static CUresult FreeAsync(CUdeviceptr p, CUstream s, bool ptsz) {
  DRV_CTX();
  std::lock_guard<std::mutex> lock(Mu());
  return Cu(PoolFree(st, Ptr(p), reinterpret_cast<cudaStream_t>(s), ptsz));
}
SIM_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return FreeAsync(p, s, false); }
SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return FreeAsync(p, s, true); }
#undef DRV_POOL

// =============================================================================================
// Copies: synchronous ones on the context's legacy stream (the _ptds flavour: its per-thread
// stream); a null stream of an _ptsz copy is the per-thread stream.

#define DRV_COPY(dst, src, n, kind, stream, ptsz, sync) \
  DRV_CTX();                                            \
  return Copy(st, dst, src, n, kind, stream, ptsz, sync)

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  DRV_COPY(dst, src, n, cudaMemcpyDefault, nullptr, false, true);
}
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  DRV_COPY(dst, src, n, cudaMemcpyDefault, nullptr, true, true);
}
SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  DRV_COPY(dst, src, n, cudaMemcpyDefault, s, false, false);
}
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  DRV_COPY(dst, src, n, cudaMemcpyDefault, s, true, false);
}

#define HOST(p) static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p))
SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  DRV_COPY(dst, HOST(src), n, cudaMemcpyHostToDevice, nullptr, false, true);
}
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  DRV_COPY(dst, HOST(src), n, cudaMemcpyHostToDevice, nullptr, true, true);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  DRV_COPY(dst, HOST(src), n, cudaMemcpyHostToDevice, s, false, false);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  DRV_COPY(dst, HOST(src), n, cudaMemcpyHostToDevice, s, true, false);
}
SIM_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  DRV_COPY(HOST(dst), src, n, cudaMemcpyDeviceToHost, nullptr, false, true);
}
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  DRV_COPY(HOST(dst), src, n, cudaMemcpyDeviceToHost, nullptr, true, true);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  DRV_COPY(HOST(dst), src, n, cudaMemcpyDeviceToHost, s, false, false);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  DRV_COPY(HOST(dst), src, n, cudaMemcpyDeviceToHost, s, true, false);
}
#undef HOST
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  DRV_COPY(dst, src, n, cudaMemcpyDeviceToDevice, nullptr, false, true);
}
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  DRV_COPY(dst, src, n, cudaMemcpyDeviceToDevice, nullptr, true, true);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  DRV_COPY(dst, src, n, cudaMemcpyDeviceToDevice, s, false, false);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  DRV_COPY(dst, src, n, cudaMemcpyDeviceToDevice, s, true, false);
}

SIM_API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n) {
  DRV_CTX();
  return PeerCopy(st, dst, dc, src, sc, n, nullptr, false, true);
}
SIM_API CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n) {
  DRV_CTX();
  return PeerCopy(st, dst, dc, src, sc, n, nullptr, true, true);
}
SIM_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
                                   CUstream s) {
  DRV_CTX();
  return PeerCopy(st, dst, dc, src, sc, n, s, false, false);
}
SIM_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
                                        CUstream s) {
  DRV_CTX();
  return PeerCopy(st, dst, dc, src, sc, n, s, true, false);
}

// A 3D peer copy between devices' linear memory, slice by slice like cudaMemcpy3DPeer; arrays and
// host sides are not simulated.
CUresult Copy3DPeer(State& st, const CUDA_MEMCPY3D_PEER* p, CUstream s, bool ptsz, bool sync) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcMemoryType != CU_MEMORYTYPE_DEVICE || p->dstMemoryType != CU_MEMORYTYPE_DEVICE)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (KnownContext(st, p->dstContext) == nullptr || KnownContext(st, p->srcContext) == nullptr)
    return CUDA_ERROR_INVALID_CONTEXT;
  size_t sslice = p->srcPitch * p->srcHeight, dslice = p->dstPitch * p->dstHeight;
  std::unique_lock<std::mutex> lock(Mu());
  for (size_t z = 0; z < p->Depth; ++z) {
    CUdeviceptr src = p->srcDevice + (p->srcZ + z) * sslice + p->srcY * p->srcPitch + p->srcXInBytes;
    CUdeviceptr dst = p->dstDevice + (p->dstZ + z) * dslice + p->dstY * p->dstPitch + p->dstXInBytes;
    cudaError_t r = ::Copy(st, lock, Ptr(dst), Ptr(src), Rows{p->WidthInBytes, p->Height, p->srcPitch, p->dstPitch},
                           cudaMemcpyDeviceToDevice, reinterpret_cast<cudaStream_t>(s), ptsz, sync, sync && !ptsz);
    if (r != cudaSuccess) return Cu(r);
  }
  return CUDA_SUCCESS;
}
SIM_API CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) {
  DRV_CTX();
  return Copy3DPeer(st, p, nullptr, false, true);
}
SIM_API CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* p) {
  DRV_CTX();
  return Copy3DPeer(st, p, nullptr, true, true);
}
SIM_API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  DRV_CTX();
  return Copy3DPeer(st, p, s, false, false);
}
SIM_API CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  DRV_CTX();
  return Copy3DPeer(st, p, s, true, false);
}

// =============================================================================================
// Memsets of 8-, 16- and 32-bit elements (on the legacy stream, or the per-thread one for _ptds).

static CUresult MemsetD(CUdeviceptr p, unsigned value, size_t n, unsigned elem, CUstream s, bool ptsz, bool sync) {
  DRV_CTX();
  std::unique_lock<std::mutex> lock(Mu());
  return Cu(Memset(st, lock, Ptr(p), value, n, reinterpret_cast<cudaStream_t>(s), ptsz, sync, elem));
}
#define DRV_MEMSET(name, T, elem, stream_arg, stream, ptsz, sync)          \
  SIM_API CUresult name(CUdeviceptr p, T v, size_t n stream_arg) {           \
    return MemsetD(p, v, n, elem, stream, ptsz, sync);                       \
  }
#define NO_STREAM
#define COMMA_STREAM , CUstream s
DRV_MEMSET(cuMemsetD8_v2, unsigned char, 1, NO_STREAM, nullptr, false, true)
DRV_MEMSET(cuMemsetD8_v2_ptds, unsigned char, 1, NO_STREAM, nullptr, true, true)
DRV_MEMSET(cuMemsetD16_v2, unsigned short, 2, NO_STREAM, nullptr, false, true)
DRV_MEMSET(cuMemsetD16_v2_ptds, unsigned short, 2, NO_STREAM, nullptr, true, true)
DRV_MEMSET(cuMemsetD32_v2, unsigned int, 4, NO_STREAM, nullptr, false, true)
DRV_MEMSET(cuMemsetD32_v2_ptds, unsigned int, 4, NO_STREAM, nullptr, true, true)
DRV_MEMSET(cuMemsetD8Async, unsigned char, 1, COMMA_STREAM, s, false, false)
DRV_MEMSET(cuMemsetD8Async_ptsz, unsigned char, 1, COMMA_STREAM, s, true, false)
DRV_MEMSET(cuMemsetD16Async, unsigned short, 2, COMMA_STREAM, s, false, false)
DRV_MEMSET(cuMemsetD16Async_ptsz, unsigned short, 2, COMMA_STREAM, s, true, false)
DRV_MEMSET(cuMemsetD32Async, unsigned int, 4, COMMA_STREAM, s, false, false)
DRV_MEMSET(cuMemsetD32Async_ptsz, unsigned int, 4, COMMA_STREAM, s, true, false)
#undef NO_STREAM
#undef COMMA_STREAM
#undef DRV_MEMSET

// =============================================================================================
// Streams and events (the runtime's objects: a CUstream is a cudaStream_t, a CUevent a cudaEvent_t)

SIM_API CUresult cuStreamCreate(CUstream* s, unsigned int flags) {
  DRV_CTX();
  return Cu(CreateStream(st, reinterpret_cast<cudaStream_t*>(s), flags, 0));
}
SIM_API CUresult cuStreamCreateWithPriority(CUstream* s, unsigned int flags, int priority) {
  DRV_CTX();
  return Cu(CreateStream(st, reinterpret_cast<cudaStream_t*>(s), flags, priority));
}
SIM_API CUresult cuStreamDestroy(CUstream s) {
  DRV_CTX();
  return Cu(DestroyStream(st, reinterpret_cast<cudaStream_t>(s)));
}
SIM_API CUresult cuStreamDestroy_v2(CUstream s) { return cuStreamDestroy(s); }
SIM_API CUresult cuStreamSynchronize(CUstream s) {
  DRV_CTX();
  return Cu(SyncHandle(st, reinterpret_cast<cudaStream_t>(s), false));
}
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream s) {
  DRV_CTX();
  return Cu(SyncHandle(st, reinterpret_cast<cudaStream_t>(s), true));
}

SIM_API CUresult cuEventCreate(CUevent* e, unsigned int flags) {
  DRV_CTX();
  return Cu(CreateEvent(st, reinterpret_cast<cudaEvent_t*>(e), flags));
}
SIM_API CUresult cuEventDestroy(CUevent e) {
  DRV_ENTER();
  return Cu(DestroyEvent(st, reinterpret_cast<cudaEvent_t>(e)));
}
SIM_API CUresult cuEventDestroy_v2(CUevent e) { return cuEventDestroy(e); }
SIM_API CUresult cuEventRecord(CUevent e, CUstream s) {
  DRV_CTX();
  return Cu(RecordEvent(st, reinterpret_cast<cudaEvent_t>(e), reinterpret_cast<cudaStream_t>(s), false));
}
SIM_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) {
  DRV_CTX();
  return Cu(RecordEvent(st, reinterpret_cast<cudaEvent_t>(e), reinterpret_cast<cudaStream_t>(s), true));
}
SIM_API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) {
  if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
  return cuEventRecord(e, s);
}
SIM_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags) {
  if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
  return cuEventRecord_ptsz(e, s);
}
SIM_API CUresult cuEventSynchronize(CUevent e) {
  DRV_ENTER();
  return Cu(EventSync(st, reinterpret_cast<cudaEvent_t>(e)));
}
SIM_API CUresult cuEventQuery(CUevent e) {
  DRV_ENTER();
  return Cu(QueryEvent(st, reinterpret_cast<cudaEvent_t>(e)));
}
SIM_API CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  DRV_ENTER();
  return Cu(ElapsedTime(st, ms, reinterpret_cast<cudaEvent_t>(a), reinterpret_cast<cudaEvent_t>(b)));
}
SIM_API CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) { return cuEventElapsedTime(ms, a, b); }

// =============================================================================================
// Stream capture and graphs: the engine's, as the runtime's (a CUgraph is a cudaGraph_t). The
// legacy forms keep their exports: cuStreamBeginCapture without a mode (global), the five-argument
// cuGraphInstantiate(_v2), the four-argument cuGraphExecUpdate.

#define DRV_STREAM(s) reinterpret_cast<cudaStream_t>(s)
#define DRV_EVENT(e) reinterpret_cast<cudaEvent_t>(e)
#define DRV_GRAPH(g) reinterpret_cast<cudaGraph_t>(g)
#define DRV_EXEC(x) reinterpret_cast<cudaGraphExec_t>(x)

SIM_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  DRV_CTX();
  return Cu(WaitEventOn(st, DRV_STREAM(s), DRV_EVENT(e), flags, false));
}
SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
  DRV_CTX();
  return Cu(WaitEventOn(st, DRV_STREAM(s), DRV_EVENT(e), flags, true));
}

SIM_API CUresult cuStreamQuery(CUstream s) {
  DRV_CTX();
  return Cu(QueryStream(st, DRV_STREAM(s), false));
}
SIM_API CUresult cuStreamQuery_ptsz(CUstream s) {
  DRV_CTX();
  return Cu(QueryStream(st, DRV_STREAM(s), true));
}

SIM_API CUresult cuStreamBeginCapture(CUstream s) {
  DRV_CTX();
  return Cu(CaptureBegin(st, DRV_STREAM(s), CU_STREAM_CAPTURE_MODE_GLOBAL, false));
}
SIM_API CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  DRV_CTX();
  return Cu(CaptureBegin(st, DRV_STREAM(s), CU_STREAM_CAPTURE_MODE_GLOBAL, true));
}
SIM_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  DRV_CTX();
  return Cu(CaptureBegin(st, DRV_STREAM(s), mode, false));
}
SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  DRV_CTX();
  return Cu(CaptureBegin(st, DRV_STREAM(s), mode, true));
}
SIM_API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData*,
                                             size_t n, CUstreamCaptureMode mode) {
  DRV_CTX();
  return Cu(CaptureBegin(st, DRV_STREAM(s), mode, false, DRV_GRAPH(g), n, deps));
}
SIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* deps,
                                                  const CUgraphEdgeData*, size_t n, CUstreamCaptureMode mode) {
  DRV_CTX();
  return Cu(CaptureBegin(st, DRV_STREAM(s), mode, true, DRV_GRAPH(g), n, deps));
}
SIM_API CUresult cuStreamEndCapture(CUstream s, CUgraph* g) {
  DRV_CTX();
  return Cu(CaptureEnd(st, DRV_STREAM(s), reinterpret_cast<cudaGraph_t*>(g), false));
}
SIM_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  DRV_CTX();
  return Cu(CaptureEnd(st, DRV_STREAM(s), reinterpret_cast<cudaGraph_t*>(g), true));
}

static CUresult DrvCaptureInfo(CUstream s, bool ptsz, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* g,
                               const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* n) {
  DRV_CTX();
  static_assert(sizeof(cuuint64_t) == sizeof(unsigned long long));
  return Cu(CaptureQuery(st, DRV_STREAM(s), ptsz, reinterpret_cast<cudaStreamCaptureStatus*>(status),
                        reinterpret_cast<unsigned long long*>(id), reinterpret_cast<cudaGraph_t*>(g),
                        reinterpret_cast<const cudaGraphNode_t**>(deps), reinterpret_cast<const cudaGraphEdgeData**>(edges),
                        n));
}
SIM_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  return DrvCaptureInfo(s, false, status, nullptr, nullptr, nullptr, nullptr, nullptr);
}
SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  return DrvCaptureInfo(s, true, status, nullptr, nullptr, nullptr, nullptr, nullptr);
}
SIM_API CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return DrvCaptureInfo(s, false, status, id, nullptr, nullptr, nullptr, nullptr);
}
SIM_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return DrvCaptureInfo(s, true, status, id, nullptr, nullptr, nullptr, nullptr);
}
SIM_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* g,
                                           const CUgraphNode** deps, size_t* n) {
  return DrvCaptureInfo(s, false, status, id, g, deps, nullptr, n);
}
SIM_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                CUgraph* g, const CUgraphNode** deps, size_t* n) {
  return DrvCaptureInfo(s, true, status, id, g, deps, nullptr, n);
}
SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* g,
                                           const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* n) {
  return DrvCaptureInfo(s, false, status, id, g, deps, edges, n);
}
SIM_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                CUgraph* g, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                                                size_t* n) {
  return DrvCaptureInfo(s, true, status, id, g, deps, edges, n);
}

SIM_API CUresult cuGraphDestroy(CUgraph g) {
  DRV_ENTER();
  return Cu(DestroyGraph(st, DRV_GRAPH(g)));
}
static CUresult DrvInstantiate(CUgraphExec* x, CUgraph g) {
  DRV_CTX();
  return Cu(InstantiateGraph(st, reinterpret_cast<cudaGraphExec_t*>(x), DRV_GRAPH(g)));
}
static CUresult DrvInstantiateLogged(CUgraphExec* x, CUgraph g, CUgraphNode* err_node, char* log, size_t log_size) {
  CUresult r = DrvInstantiate(x, g);
  if (err_node) *err_node = nullptr;
  if (log && log_size > 0) log[0] = '\0';
  return r;
}
SIM_API CUresult cuGraphInstantiate(CUgraphExec* x, CUgraph g, CUgraphNode* err_node, char* log, size_t log_size) {
  return DrvInstantiateLogged(x, g, err_node, log, log_size);
}
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec* x, CUgraph g, CUgraphNode* err_node, char* log, size_t log_size) {
  return DrvInstantiateLogged(x, g, err_node, log, log_size);
}
SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* x, CUgraph g, unsigned long long) {
  return DrvInstantiate(x, g);
}
static CUresult DrvInstantiateWithParams(CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = DrvInstantiate(x, g);
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  p->hErrNode_out = nullptr;
  return r;
}
SIM_API CUresult cuGraphInstantiateWithParams(CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return DrvInstantiateWithParams(x, g, p);
}
SIM_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return DrvInstantiateWithParams(x, g, p);
}
static CUresult DrvUpdate(CUgraphExec x, CUgraph g, CUgraphExecUpdateResult* result) {
  DRV_CTX();
  bool same_shape = false;
  CUresult r = Cu(UpdateExec(st, DRV_EXEC(x), DRV_GRAPH(g), &same_shape));
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
    *result = same_shape ? CU_GRAPH_EXEC_UPDATE_SUCCESS : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  return r;
}
SIM_API CUresult cuGraphExecUpdate(CUgraphExec x, CUgraph g, CUgraphNode* err_node, CUgraphExecUpdateResult* result) {
  if (err_node == nullptr || result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *err_node = nullptr;
  return DrvUpdate(x, g, result);
}
SIM_API CUresult cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  if (info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memset(info, 0, sizeof *info);
  return DrvUpdate(x, g, &info->result);
}
SIM_API CUresult cuGraphExecDestroy(CUgraphExec x) {
  DRV_ENTER();
  return Cu(DestroyExec(st, DRV_EXEC(x)));
}
SIM_API CUresult cuGraphLaunch(CUgraphExec x, CUstream s) {
  DRV_CTX();
  return Cu(LaunchExec(st, DRV_EXEC(x), DRV_STREAM(s), false));
}
SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec x, CUstream s) {
  DRV_CTX();
  return Cu(LaunchExec(st, DRV_EXEC(x), DRV_STREAM(s), true));
}
SIM_API CUresult cuGraphCreate(CUgraph* g, unsigned int flags) {
  DRV_CTX();
  return Cu(CreateGraph(st, reinterpret_cast<cudaGraph_t*>(g), flags));
}
// Between device (or unified) memory, one slice: the sim's 3D copies are its 2D rows.
// A driver copy node's parameters as the engine's copy (device memory, pitched rows).
static CUresult DrvNodeCopy(const CUDA_MEMCPY3D* p, void** dst, const void** src, Rows* rows) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto device = [](CUmemorytype t) { return t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED; };
  if (!device(p->srcMemoryType) || !device(p->dstMemoryType) || p->Depth != 1) return CUDA_ERROR_NOT_SUPPORTED;
  *src = Ptr(p->srcDevice + p->srcY * p->srcPitch + p->srcXInBytes);
  *dst = Ptr(p->dstDevice + p->dstY * p->dstPitch + p->dstXInBytes);
  *rows = Rows{p->WidthInBytes, p->Height, p->srcPitch ? p->srcPitch : p->WidthInBytes,
               p->dstPitch ? p->dstPitch : p->WidthInBytes};
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph g, const CUgraphNode*, size_t, const CUDA_MEMCPY3D* p,
                                      CUcontext copy_ctx) {
  DRV_CTX();
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (KnownContext(st, copy_ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  void* dst;
  const void* src;
  Rows rows;
  if (CUresult r = DrvNodeCopy(p, &dst, &src, &rows); r != CUDA_SUCCESS) return r;
  return Cu(AddCopyNode(st, reinterpret_cast<cudaGraphNode_t*>(node), DRV_GRAPH(g), dst, src, rows,
                        cudaMemcpyDeviceToDevice));
}
// The generic node call: copy and child graph nodes as their own calls; other kinds are not simulated.
extern "C" int p2psim_unsupported(const char*, int, const char*);
static CUresult DrvAddNode(CUgraphNode* node, CUgraph g, CUgraphNodeParams* p) {
  DRV_CTX();
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
    if (KnownContext(st, p->memcpy.copyCtx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    void* dst;
    const void* src;
    Rows rows;
    if (CUresult r = DrvNodeCopy(&p->memcpy.copyParams, &dst, &src, &rows); r != CUDA_SUCCESS) return r;
    return Cu(AddCopyNode(st, reinterpret_cast<cudaGraphNode_t*>(node), DRV_GRAPH(g), dst, src, rows,
                          cudaMemcpyDeviceToDevice));
  }
  if (p->type == CU_GRAPH_NODE_TYPE_GRAPH)
    return Cu(AddChildNode(st, reinterpret_cast<cudaGraphNode_t*>(node), DRV_GRAPH(g), DRV_GRAPH(p->graph.graph)));
  return static_cast<CUresult>(
      p2psim_unsupported("cuGraphAddNode of this node type", CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"));
}
// CUDA 12.2's form, and 12.3's with edge data.
SIM_API CUresult cuGraphAddNode(CUgraphNode* node, CUgraph g, const CUgraphNode*, size_t, CUgraphNodeParams* p) {
  return DrvAddNode(node, g, p);
}
SIM_API CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph g, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                                   CUgraphNodeParams* p) {
  return DrvAddNode(node, g, p);
}
static CUresult DrvSetMemcpyNode(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p) {
  DRV_CTX();
  void* dst;
  const void* src;
  Rows rows;
  if (CUresult r = DrvNodeCopy(p, &dst, &src, &rows); r != CUDA_SUCCESS) return r;
  return Cu(SetCopyNode(st, DRV_EXEC(exec), reinterpret_cast<cudaGraphNode_t>(node), dst, src, rows,
                        cudaMemcpyDeviceToDevice));
}
SIM_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* p) {
  return DrvSetMemcpyNode(nullptr, node, p);
}
SIM_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p,
                                                CUcontext copy_ctx) {
  {
    DRV_CTX();
    if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (KnownContext(st, copy_ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  }
  return DrvSetMemcpyNode(exec, node, p);
}
SIM_API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  DRV_CTX();
  return Cu(SetChildNode(st, DRV_EXEC(exec), reinterpret_cast<cudaGraphNode_t>(node), DRV_GRAPH(child)));
}
// CUDA 12.2's generic forms: copy nodes as their own calls; a child graph's in an exec; other kinds
// are not simulated.
static CUresult DrvSetNodeParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p) {
  if (p != nullptr && p->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
    {
      DRV_CTX();
      if (KnownContext(st, p->memcpy.copyCtx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    }
    return DrvSetMemcpyNode(exec, node, &p->memcpy.copyParams);
  }
  if (p != nullptr && p->type == CU_GRAPH_NODE_TYPE_GRAPH && exec != nullptr)
    return cuGraphExecChildGraphNodeSetParams(exec, node, p->graph.graph);
  if (p == nullptr) {
    DRV_CTX();
    return CUDA_ERROR_INVALID_VALUE;
  }
  return static_cast<CUresult>(p2psim_unsupported("cuGraph(Exec)NodeSetParams of this node type", CUDA_ERROR_NOT_SUPPORTED,
                                                  "CUDA_ERROR_NOT_SUPPORTED"));
}
SIM_API CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* p) { return DrvSetNodeParams(nullptr, node, p); }
SIM_API CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p) {
  if (exec == nullptr) {
    DRV_CTX();
    return CUDA_ERROR_INVALID_VALUE;
  }
  return DrvSetNodeParams(exec, node, p);
}
SIM_API CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int on) {
  DRV_CTX();
  return Cu(SetNodeEnabled(st, DRV_EXEC(exec), reinterpret_cast<cudaGraphNode_t>(node), on != 0));
}
SIM_API CUresult cuGraphDestroyNode(CUgraphNode node) {
  DRV_CTX();
  return Cu(RemoveNode(st, reinterpret_cast<cudaGraphNode_t>(node)));
}
SIM_API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  DRV_CTX();
  return Cu(NodeType(st, reinterpret_cast<cudaGraphNode_t>(node), reinterpret_cast<cudaGraphNodeType*>(type)));
}
SIM_API CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph g, const CUgraphNode*, size_t, CUgraph child) {
  DRV_CTX();
  return Cu(AddChildNode(st, reinterpret_cast<cudaGraphNode_t*>(node), DRV_GRAPH(g), DRV_GRAPH(child)));
}
SIM_API CUresult cuGraphClone(CUgraph* clone, CUgraph g) {
  DRV_CTX();
  return Cu(CloneGraph(st, reinterpret_cast<cudaGraph_t*>(clone), DRV_GRAPH(g)));
}
// User objects, as the runtime's.
#define DRV_USER_OBJECT(u) reinterpret_cast<UserObject*>(u)
SIM_API CUresult cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned int refs,
                                    unsigned int flags) {
  DRV_CTX();
  return Cu(UserObjectCreate(st, reinterpret_cast<UserObject**>(out), ptr, destroy, refs, flags));
}
SIM_API CUresult cuUserObjectRetain(CUuserObject u, unsigned int n) {
  DRV_CTX();
  return Cu(UserObjectRetain(st, DRV_USER_OBJECT(u), n));
}
SIM_API CUresult cuUserObjectRelease(CUuserObject u, unsigned int n) {
  DRV_CTX();
  return Cu(UserObjectRelease(st, DRV_USER_OBJECT(u), n));
}
SIM_API CUresult cuGraphRetainUserObject(CUgraph g, CUuserObject u, unsigned int n, unsigned int flags) {
  DRV_CTX();
  return Cu(GraphRetainUserObject(st, DRV_GRAPH(g), DRV_USER_OBJECT(u), n, flags));
}
SIM_API CUresult cuGraphReleaseUserObject(CUgraph g, CUuserObject u, unsigned int n) {
  DRV_CTX();
  return Cu(GraphReleaseUserObject(st, DRV_GRAPH(g), DRV_USER_OBJECT(u), n));
}
#undef DRV_USER_OBJECT

SIM_API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* count) {
  DRV_ENTER();
  if (nodes != nullptr) return CUDA_ERROR_INVALID_VALUE;  // the sim's graphs have no node handles
  return Cu(GraphNodeCount(st, DRV_GRAPH(g), count));
}
#undef DRV_STREAM
#undef DRV_EVENT
#undef DRV_GRAPH
#undef DRV_EXEC

// =============================================================================================
// Modules and launches. A module loaded from PTX text holds the names of its `.entry` functions (a
// cubin or fatbin image is not simulated). A launch costs simulated time and runs no device code,
// as `<<<>>>` launches, except the two kernels of p2ptrace doctor's peer-store check, which the sim
// runs as their PTX does: p2ptrace_copy_words(dst, src, words) copies 8-byte words with the launching
// GPU's own loads and stores (through peer access when another GPU's memory: without it, 700; a
// copy_faults "sm-lost" entry from the launching GPU to dst's drops the stores, where copy-engine
// copies arrive), p2ptrace_count_differing(a, b, words, count) adds the words of a and b that differ
// to the 32-bit *count.

struct SimFunction {
  std::string name;
  const Context* ctx;  // its module's: the context current when the module was loaded
};
struct SimModule {
  std::vector<std::unique_ptr<SimFunction>> functions;
};
std::set<SimModule*>& Modules() {
  static auto* m = new std::set<SimModule*>;  // under Mu(); never freed (used until exit)
  return *m;
}

SIM_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  DRV_CTX();
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::string_view text(static_cast<const char*>(image));
  if (text.find(".version") == std::string_view::npos)
    return static_cast<CUresult>(
        p2psim_unsupported("cuModuleLoadData of a cubin or fatbin", CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"));
  auto m = std::make_unique<SimModule>();
  for (size_t at = text.find(".entry"); at != std::string_view::npos; at = text.find(".entry", at + 6)) {
    size_t begin = text.find_first_not_of(" \t\r\n", at + 6);
    size_t end = begin == std::string_view::npos ? begin : text.find_first_of(" \t\r\n(", begin);
    if (end == std::string_view::npos) return CUDA_ERROR_INVALID_PTX;
    m->functions.push_back(std::make_unique<SimFunction>(SimFunction{std::string(text.substr(begin, end - begin)), ctx}));
  }
  std::lock_guard<std::mutex> lock(Mu());
  *module = reinterpret_cast<CUmodule>(m.get());
  Modules().insert(m.release());
  return CUDA_SUCCESS;
}

SIM_API CUresult cuModuleGetFunction(CUfunction* fn, CUmodule module, const char* name) {
  DRV_CTX();
  if (fn == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  auto* m = reinterpret_cast<SimModule*>(module);
  if (!Modules().count(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (const auto& f : m->functions)
    if (f->name == name) {
      *fn = reinterpret_cast<CUfunction>(f.get());
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuModuleUnload(CUmodule module) {
  DRV_CTX();
  std::lock_guard<std::mutex> lock(Mu());
  auto* m = reinterpret_cast<SimModule*>(module);
  if (!Modules().erase(m)) return CUDA_ERROR_INVALID_HANDLE;
  delete m;
  return CUDA_SUCCESS;
}

// The launching device reaches [p, p + bytes): its own memory, or another GPU's with peer access
// enabled from it; host memory is not simulated for kernels.
bool KernelReaches(const State& st, const Where& w, const void* p, size_t bytes, int ordinal) {
  if (!w.known || w.host_gpu < 0 || !InBounds(st, w, p, bytes)) return false;
  int owner = OrdinalOf(st, w.host_gpu);
  return owner == ordinal || (owner >= 0 && st.peer_on[ordinal][owner]);
}

// Whether the simulated node runs a kernel of that name (doctor --test's two: what they do to memory
// is done). Any other launch is accepted and takes its stream's time, but nothing of its code runs:
// a program that must tell asks here (a real driver has no such symbol).
SIM_API int p2psim_kernel_runs(const char* name) {
  return name != nullptr && (std::strcmp(name, "p2ptrace_copy_words") == 0 || std::strcmp(name, "p2ptrace_count_differing") == 0);
}

CUresult RunKernel(State& st, const SimFunction& f, Stream* s, void** params) {
  int gpu = st.visible[s->device];
  if (p2psim_kernel_runs(f.name.c_str())) {
    if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    void* a = *static_cast<void**>(params[0]);
    void* b = *static_cast<void**>(params[1]);
    uint64_t bytes = *static_cast<uint64_t*>(params[2]) * 8;
    Where wa = Locate(st, a), wb = Locate(st, b);
    if (!KernelReaches(st, wa, a, bytes, s->device) || !KernelReaches(st, wb, b, bytes, s->device))
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (f.name == "p2ptrace_copy_words") {
      const p2psim::CopyFault* fault = p2psim::FindCopyFault(st.topo, *st.host, gpu, wa.host_gpu);
      if (fault == nullptr || fault->fault != "sm-lost") MoveBytes(a, b, bytes);
      for (const Where* w : {&wb, &wa})  // what the kernel reads from and writes to another GPU crosses their link
        if (w->host_gpu != gpu) p2psim::ChargeTransfer(st.topo, *st.host, gpu, w->host_gpu, true, bytes);
      double gbps = wa.host_gpu == gpu ? p2psim::kDeviceLocalGbps : p2psim::DirectBandwidth(st.topo, *st.host, gpu, wa.host_gpu);
      Enqueue(st, s, static_cast<double>(bytes) / (gbps * 1e9));
      return CUDA_SUCCESS;
    }
    void* count = *static_cast<void**>(params[3]);
    Where wc = Locate(st, count);
    if (!KernelReaches(st, wc, count, 4, s->device)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    uint32_t differ = 0, had = 0;
    for (uint64_t i = 0; i < bytes; i += 8) differ += std::memcmp(static_cast<char*>(a) + i, static_cast<char*>(b) + i, 8) != 0;
    std::memcpy(&had, count, 4);
    had += differ;
    std::memcpy(count, &had, 4);
    Enqueue(st, s, 2.0 * static_cast<double>(bytes) / (p2psim::kDeviceLocalGbps * 1e9));
    return CUDA_SUCCESS;
  }
  Enqueue(st, s, kKernelSeconds);  // other device code does not run on the simulated node
  return CUDA_SUCCESS;
}

static CUresult LaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             CUstream stream, void** params, bool ptsz) {
  DRV_CTX();
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Mu());
  const SimFunction* fn = nullptr;
  for (SimModule* m : Modules())
    for (const auto& candidate : m->functions)
      if (reinterpret_cast<CUfunction>(candidate.get()) == f) fn = candidate.get();
  if (fn == nullptr || fn->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;  // a function of another context's module
  Stream* s = Resolve(st, reinterpret_cast<cudaStream_t>(stream), ptsz);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  GraphWork node{false, nullptr, nullptr, {}, kKernelSeconds};
  if (cudaError_t r = cudaSuccess; Captured(s, &r, &node)) return Cu(r);
  return RunKernel(st, *fn, s, params);
}

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                unsigned shared, CUstream s, void** params, void** extra) {
  (void)shared;
  if (extra != nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // only kernelParams are simulated
  return LaunchKernel(f, gx, gy, gz, bx, by, bz, s, params, false);
}
SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shared, CUstream s, void** params, void** extra) {
  (void)shared;
  if (extra != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return LaunchKernel(f, gx, gy, gz, bx, by, bz, s, params, true);
}

