// The simulated CUDA runtime: a drop-in libcudart.so.13 / libcudart.so.12 driven by a topology
// file (DESIGN.md §9). Built twice from this source; P2PSIM_CUDART_MAJOR picks the flavour.
// Device memory is host memory (memfd, so IPC handles really share bytes across processes), copies
// move real bytes at once, and every stream keeps a simulated clock that advances by
// bytes / the path's bandwidth. What is not modelled is a weak stub (generated) that returns
// cudaErrorNotSupported. The engine is common/sim_engine.h; its state belongs to the simulated
// driver (libcuda.so.1), which this runtime opens at its first call, as the real one does.
#include "tests/sim/common/sim_engine.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <utility>

#ifndef P2PSIM_CUDART_MAJOR
#define P2PSIM_CUDART_MAJOR 13
#endif

#define SIM_API extern "C" __attribute__((visibility("default")))

namespace {

using p2ptrace::Gpu;
using p2ptrace::Host;

constexpr int kRuntimeVersion = P2PSIM_CUDART_MAJOR == 13 ? 13000 : 12080;
struct ErrorEntry { int code; const char* name; const char* text; };
constexpr ErrorEntry kErrors[] = {
#include "cuda_error_table.inc"
};

thread_local cudaError_t t_last_error = cudaSuccess;
// cudaThreadExchangeStreamCaptureMode's per-thread mode; the sim records it but does not forbid
// unsafe calls during another thread's global-mode capture.
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;
struct LaunchConfig { dim3 grid, block; size_t shmem; void* stream; };
thread_local std::vector<LaunchConfig> t_launch_stack;

// The driver, reached like the real runtime reaches it: dlopen("libcuda.so.1") and dlsym on that
// handle (never RTLD_DEFAULT, so an LD_PRELOAD interposer does not see the runtime's own use of it).
struct Driver {
  const Shared* shared = nullptr;
  using GetProc = int (*)(const char*, void**, int, unsigned long long, int*);
  GetProc get_proc = nullptr;  // cuGetProcAddress_v2, for cudaGetDriverEntryPoint*
};
Driver g_driver;
std::once_flag g_driver_once;

void LoadDriver() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return;
  auto shared_fn = reinterpret_cast<const Shared* (*)()>(dlsym(h, "p2psim_driver"));
  auto get_proc = reinterpret_cast<Driver::GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  const Shared* sh = shared_fn ? shared_fn() : nullptr;
  if (sh == nullptr || sh->abi != kSharedAbi || sh->state_size != sizeof(State) ||
      sh->thread_size != sizeof(ThreadData)) {
    std::fprintf(stderr, "p2psim: libcuda.so.1 is not the simulated driver of this build; "
                         "every CUDA call returns cudaErrorInsufficientDriver\n");
    return;
  }
  g_driver.shared = sh;
  g_driver.get_proc = get_proc;
  g_shared = sh;
}

// The state, or null without a (matching) driver: cudaErrorInsufficientDriver, like the real one.
State* StateOrNull() {
  std::call_once(g_driver_once, LoadDriver);
  if (g_shared == nullptr) return nullptr;
  State& st = S();
  if (st.ok && !st.visible.empty() && !st.driver_init) st.driver_init = true;  // the runtime initialises the driver
  return &st;
}

cudaError_t Ret(cudaError_t e) {
  // CUDA keeps the last error per thread until cudaGetLastError reads it; "not ready" is no error.
  if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
  return e;
}

// P2PSIM_CUDA_STUCK=NAME[@N]: the N-th call (1 when not said) of the runtime's NAME never returns,
// as a call stuck in the driver does (a free or a synchronous copy behind work that never
// finishes, after an Xid): what callers that must bound every wait are tested with.
void MaybeStuck(const char* name) {
  static const std::pair<std::string, long> stuck = [] {
    const char* v = std::getenv("P2PSIM_CUDA_STUCK");
    std::string s = v ? v : "";
    size_t at = s.find('@');
    return std::pair<std::string, long>{s.substr(0, at), at == std::string::npos ? 1 : std::atol(s.c_str() + at + 1)};
  }();
  static std::atomic<long> calls{0};
  if (stuck.first.empty() || stuck.first != name || ++calls != stuck.second) return;
  for (;;) pause();
}

// API entries that need no context start here: driver present, topology loaded, a device visible.
#define SIM_ENTER_NOCTX()                                             \
  MaybeStuck(__func__);                                               \
  State* st_ptr = StateOrNull();                                      \
  if (st_ptr == nullptr) return Ret(cudaErrorInsufficientDriver);     \
  State& st = *st_ptr;                                                \
  if (!st.ok) return Ret(cudaErrorInitializationError);               \
  if (st.visible.empty()) return Ret(cudaErrorNoDevice)

// Every other entry: as above, and the thread has a current context (device 0's primary unless
// cudaSetDevice or the driver chose one), as the runtime binds one at first use.
#define SIM_ENTER()   \
  SIM_ENTER_NOCTX();  \
  RuntimeContext(st)

#define SIM_NO_HOST_FUNC() \
  if (T().in_host_func) return Ret(cudaErrorNotPermitted)

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
  State* st = StateOrNull();
  if (st == nullptr) { *v = 0; return cudaSuccess; }  // no driver: version 0, as CUDA reports it
  if (!st->ok) return Ret(cudaErrorInitializationError);
  *v = kDriverVersion;
  return cudaSuccess;
}

// =============================================================================================
// Devices

SIM_API cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Ret(cudaErrorInvalidValue);
  State* st = StateOrNull();
  if (st == nullptr) { *count = 0; return Ret(cudaErrorInsufficientDriver); }
  if (!st->ok) return Ret(cudaErrorInitializationError);
  *count = DeviceCount(*st);
  return st->visible.empty() ? Ret(cudaErrorNoDevice) : cudaSuccess;
}

// CUDA 12's runtime makes the device's primary context current at once. P2PSIM_CUDART_SET_DEVICE=lazy
// behaves as CUDA 11's did: the context is bound at the next runtime call that needs one, so a driver
// call made in between still runs in the context that was current before.
bool LazySetDevice() {
  static const bool lazy = [] {
    const char* v = std::getenv("P2PSIM_CUDART_SET_DEVICE");
    return v != nullptr && std::strcmp(v, "lazy") == 0;
  }();
  return lazy;
}

SIM_API cudaError_t cudaSetDevice(int device) {
  SIM_ENTER_NOCTX();
  if (!ValidDevice(st, device)) return Ret(cudaErrorInvalidDevice);
  if (LazySetDevice()) {
    T().set_device = device;
    return cudaSuccess;
  }
  T().set_device = -1;
  UseDevice(st, device);
  return cudaSuccess;
}

// The device cudaSetDevice named, else the current context's (0 when the thread has none; that
// creates no context).
SIM_API cudaError_t cudaGetDevice(int* device) {
  SIM_ENTER_NOCTX();
  if (device == nullptr) return Ret(cudaErrorInvalidValue);
  *device = T().set_device >= 0 ? T().set_device : CurDev();
  return cudaSuccess;
}

// Brings up the device's primary context without making it current.
SIM_API cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  SIM_ENTER_NOCTX();
  if (!ValidDevice(st, device)) return Ret(cudaErrorInvalidDevice);
  RuntimeRetain(st, device);
  return cudaSuccess;
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
void FillFrom(P* p, const State& st, int device) {
  const Gpu& g = GpuOf(st, device);
  const p2psim::GpuModel& m = p2psim::ModelOf(g.name);
  BusId b = ParseBus(g.bus_id);
  auto at = [&](int attr) { return p2psim::DeviceAttribute(m, attr, b.domain, b.bus, b.device); };
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "%s", g.name.c_str());
  unsigned char uuid[16];
  DeviceUuid(st, device, uuid);
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
  SIM_ENTER_NOCTX();
  if (prop == nullptr) return Ret(cudaErrorInvalidValue);
  if (!ValidDevice(st, device)) return Ret(cudaErrorInvalidDevice);
  FillFrom(static_cast<DeviceProp*>(prop), st, device);
  return cudaSuccess;
}

#if P2PSIM_CUDART_MAJOR == 13
SIM_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) { return FillProps(prop, device); }
#else
SIM_API cudaError_t cudaGetDeviceProperties_v2(void* prop, int device) { return FillProps(prop, device); }
SIM_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) { return FillProps(prop, device); }
#endif

SIM_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  SIM_ENTER_NOCTX();
  return Ret(DeviceAttribute(st, value, attr, device));
}

SIM_API cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  SIM_ENTER_NOCTX();
  return Ret(FormatBusId(st, bus_id, len, device));
}

SIM_API cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* bus_id) {
  SIM_ENTER_NOCTX();
  return Ret(DeviceByBusId(st, device, bus_id));
}

SIM_API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  SIM_ENTER();
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

SIM_API cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  SIM_ENTER();
  MemInfo(st, CurDev(), free_bytes, total);
  return cudaSuccess;
}

SIM_API cudaError_t cudaDeviceSynchronize(void) {
  SIM_ENTER();
  return Ret(DeviceSync(st, CurDev()));
}

SIM_API cudaError_t cudaDeviceReset(void) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  ResetDevice(st, CurDev());
  return cudaSuccess;
}

// =============================================================================================
// Peer access

SIM_API cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  SIM_ENTER_NOCTX();
  return Ret(CanAccessPeer(st, can, device, peer));
}

SIM_API cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attr, int src, int dst) {
  SIM_ENTER_NOCTX();
  return Ret(P2PAttribute(st, value, attr, src, dst));
}

SIM_API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  SIM_ENTER();
  return Ret(EnablePeer(st, CurDev(), peer, flags));
}

SIM_API cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  SIM_ENTER();
  return Ret(DisablePeer(st, CurDev(), peer));
}

// =============================================================================================
// Memory

SIM_API cudaError_t cudaMalloc(void** ptr, size_t size) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(AllocDevice(st, ptr, size));
}


SIM_API cudaError_t cudaFree(void* ptr) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(FreeKind(st, ptr, Alloc::kDevice));
}

// =============================================================================================
// Stream-ordered allocation and memory pools: the engine's, shared with the driver (a pool made
// through one API is the other's too). cudaMallocAsync takes the current pool of the stream's device.

static cudaError_t MallocAsync(void** ptr, size_t size, bool from_pool, cudaMemPool_t pool, cudaStream_t s, bool ptsz) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(PoolAlloc(st, ptr, size, from_pool, pool, s, ptsz));
}
SIM_API cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t s) {
  return MallocAsync(ptr, size, false, nullptr, s, false);
}
SIM_API cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t s) {
  return MallocAsync(ptr, size, false, nullptr, s, true);
}
SIM_API cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  return MallocAsync(ptr, size, true, pool, s, false);
}
SIM_API cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  return MallocAsync(ptr, size, true, pool, s, true);
}

static cudaError_t FreeAsync(void* ptr, cudaStream_t s, bool ptsz) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(PoolFree(st, ptr, s, ptsz));
}
SIM_API cudaError_t cudaFreeAsync(void* ptr, cudaStream_t s) { return FreeAsync(ptr, s, false); }
SIM_API cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t s) { return FreeAsync(ptr, s, true); }

SIM_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  SIM_ENTER_NOCTX();
  return Ret(DevicePool(st, pool, device, 0));
}
SIM_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  SIM_ENTER_NOCTX();
  return Ret(DevicePool(st, pool, device, 1));
}
SIM_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  SIM_ENTER_NOCTX();
  return Ret(SetDevicePool(st, device, pool));
}
extern "C" int p2psim_unsupported(const char*, int, const char*);
static cudaError_t NotSimulated(const char* what) {
  return Ret(static_cast<cudaError_t>(p2psim_unsupported(what, cudaErrorNotSupported, "cudaErrorNotSupported")));
}
#if P2PSIM_CUDART_MAJOR == 13
// CUDA 13's location-based forms: pinned device memory only (managed and host pools are not simulated).
static cudaError_t LocationPool(cudaMemPool_t* pool, cudaMemLocation* location, cudaMemAllocationType type, int which,
                                const char* what) {
  SIM_ENTER_NOCTX();
  if (location == nullptr || (which < 2 && pool == nullptr)) return Ret(cudaErrorInvalidValue);
  if (type == cudaMemAllocationTypeManaged || location->type == cudaMemLocationTypeHost ||
      location->type == cudaMemLocationTypeHostNuma)
    return NotSimulated(what);
  if (type != cudaMemAllocationTypePinned || location->type != cudaMemLocationTypeDevice)
    return Ret(cudaErrorInvalidValue);
  if (which == 2) return Ret(SetDevicePool(st, location->id, *pool));
  return Ret(DevicePool(st, pool, location->id, which));
}
SIM_API cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t* pool, cudaMemLocation* location,
                                             cudaMemAllocationType type) {
  return LocationPool(pool, location, type, 0, "cudaMemGetDefaultMemPool of managed or host memory");
}
SIM_API cudaError_t cudaMemGetMemPool(cudaMemPool_t* pool, cudaMemLocation* location, cudaMemAllocationType type) {
  return LocationPool(pool, location, type, 1, "cudaMemGetMemPool of managed or host memory");
}
SIM_API cudaError_t cudaMemSetMemPool(cudaMemLocation* location, cudaMemAllocationType type, cudaMemPool_t pool) {
  return LocationPool(&pool, location, type, 2, "cudaMemSetMemPool of managed or host memory");
}
#endif
SIM_API cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  SIM_ENTER_NOCTX();
  bool host = false;
  cudaError_t r = PoolCreate(st, pool, props, &host);
  return host ? NotSimulated("cudaMemPoolCreate of host memory") : Ret(r);
}
SIM_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  SIM_ENTER_NOCTX();
  return Ret(PoolDestroy(st, pool));
}
SIM_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* map, size_t count) {
  SIM_ENTER_NOCTX();
  return Ret(PoolSetAccess(st, pool, map, count));
}
SIM_API cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t pool, cudaMemLocation* location) {
  SIM_ENTER_NOCTX();
  static_assert(sizeof(cudaMemAccessFlags) == sizeof(int));
  return Ret(PoolGetAccess(st, reinterpret_cast<int*>(flags), pool, location));
}
SIM_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  SIM_ENTER_NOCTX();
  return Ret(PoolAttribute(st, pool, attr, value, true));
}
SIM_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  SIM_ENTER_NOCTX();
  return Ret(PoolAttribute(st, pool, attr, value, false));
}
SIM_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t) {
  SIM_ENTER_NOCTX();
  return Ret(PoolTrim(st, pool));
}

SIM_API cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  SIM_ENTER();
  if (ptr == nullptr || (flags & ~0xfu) != 0) return Ret(cudaErrorInvalidValue);
  return Ret(HostAlloc(st, ptr, size));
}

SIM_API cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }

SIM_API cudaError_t cudaFreeHost(void* ptr) {
  SIM_ENTER();
  SIM_NO_HOST_FUNC();
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(FreeKind(st, ptr, Alloc::kHostPinned));
}

SIM_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  SIM_ENTER();
  if (attr == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(Mu());
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
    attr->device = CurDev();
    attr->devicePointer = const_cast<void*>(ptr);
    attr->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  attr->type = cudaMemoryTypeDevice;
  int ordinal = OrdinalOf(st, w.host_gpu);
  // IPC memory of a GPU this process cannot see is attributed to the device that opened it.
  attr->device = ordinal >= 0 ? ordinal : CurDev();
  attr->devicePointer = const_cast<void*>(ptr);
  return cudaSuccess;
}

// =============================================================================================
// Copies and memsets

#define SIM_COPY_PROLOGUE() \
  SIM_ENTER();              \
  std::unique_lock<std::mutex> lock(Mu())

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

static cudaError_t NewStream(cudaStream_t* out, unsigned flags, int priority) {
  SIM_ENTER();
  return Ret(CreateStream(st, out, flags, priority));
}
SIM_API cudaError_t cudaStreamCreate(cudaStream_t* s) { return NewStream(s, 0, 0); }
SIM_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) { return NewStream(s, flags, 0); }
SIM_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  return NewStream(s, flags, priority);
}

SIM_API cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  SIM_ENTER();
  return Ret(DestroyStream(st, handle));
}

static cudaError_t StreamSync(cudaStream_t handle, bool ptsz) {
  SIM_ENTER();
  return Ret(SyncHandle(st, handle, ptsz));
}
SIM_API cudaError_t cudaStreamSynchronize(cudaStream_t s) { return StreamSync(s, false); }
SIM_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return StreamSync(s, true); }

static cudaError_t StreamQuery(cudaStream_t handle, bool ptsz) {
  SIM_ENTER();
  return Ret(QueryStream(st, handle, ptsz));
}
SIM_API cudaError_t cudaStreamQuery(cudaStream_t s) { return StreamQuery(s, false); }
SIM_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return StreamQuery(s, true); }

static cudaError_t StreamWaitEvent(cudaStream_t handle, cudaEvent_t ev, unsigned flags, bool ptsz) {
  SIM_ENTER();
  return Ret(WaitEventOn(st, handle, ev, flags, ptsz));
}
SIM_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return StreamWaitEvent(s, e, flags, false);
}
SIM_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return StreamWaitEvent(s, e, flags, true);
}

static cudaError_t StreamGet(cudaStream_t handle, bool ptsz, unsigned* flags, int* priority, int* device) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(Mu());
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

// Stream capture: captured work becomes the graph's nodes, not executed; cudaGraphLaunch runs the
// graph's copies (moving their bytes then) and advances the stream's clock by all of its work.
static cudaError_t BeginCapture(cudaStream_t handle, cudaStreamCaptureMode mode, bool ptsz) {
  SIM_ENTER();
  return Ret(CaptureBegin(st, handle, mode, ptsz));
}
SIM_API cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m) { return BeginCapture(s, m, false); }
SIM_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, cudaStreamCaptureMode m) { return BeginCapture(s, m, true); }
static cudaError_t BeginCaptureToGraph(cudaStream_t handle, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                       cudaStreamCaptureMode mode, bool ptsz) {
  SIM_ENTER();
  return Ret(CaptureBegin(st, handle, mode, ptsz, g, n, deps));
}
SIM_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                  const cudaGraphEdgeData*, size_t n, cudaStreamCaptureMode m) {
  return BeginCaptureToGraph(s, g, deps, n, m, false);
}
SIM_API cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                       const cudaGraphEdgeData*, size_t n, cudaStreamCaptureMode m) {
  return BeginCaptureToGraph(s, g, deps, n, m, true);
}

static cudaError_t EndCapture(cudaStream_t handle, cudaGraph_t* graph, bool ptsz) {
  SIM_ENTER();
  return Ret(CaptureEnd(st, handle, graph, ptsz));
}
SIM_API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) { return EndCapture(s, g, false); }
SIM_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* g) { return EndCapture(s, g, true); }

static cudaError_t IsCapturing(cudaStream_t handle, cudaStreamCaptureStatus* status, bool ptsz) {
  SIM_ENTER();
  return Ret(CaptureQuery(st, handle, ptsz, status, nullptr, nullptr, nullptr, nullptr, nullptr));
}
SIM_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* c) { return IsCapturing(s, c, false); }
SIM_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, cudaStreamCaptureStatus* c) { return IsCapturing(s, c, true); }

// cudaStreamGetCaptureInfo in all its ABI forms: the status, the capture sequence's id and its
// graph; the sim's graphs have no dependency nodes, so the dependency set is always empty.
static cudaError_t CaptureInfo(cudaStream_t handle, bool ptsz, cudaStreamCaptureStatus* status,
                               unsigned long long* id, cudaGraph_t* graph, const cudaGraphNode_t** deps,
                               const cudaGraphEdgeData** edges, size_t* num_deps) {
  SIM_ENTER();
  return Ret(CaptureQuery(st, handle, ptsz, status, id, graph, deps, edges, num_deps));
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
  return Ret(DestroyGraph(st, graph));
}

static cudaError_t Instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) {
  SIM_ENTER();
  return Ret(InstantiateGraph(st, exec, graph));
}
SIM_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  return Instantiate(exec, graph);
}
SIM_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  return Instantiate(exec, graph);
}
static cudaError_t InstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph, cudaGraphInstantiateParams* p) {
  if (p == nullptr) return Ret(cudaErrorInvalidValue);
  cudaError_t r = Instantiate(exec, graph);
  p->result_out = r == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
  p->errNode_out = nullptr;
  return r;
}
SIM_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                   cudaGraphInstantiateParams* p) {
  return InstantiateWithParams(exec, graph, p);
}
SIM_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                        cudaGraphInstantiateParams* p) {
  return InstantiateWithParams(exec, graph, p);
}

// The exec takes the graph's work when the two have the same shape (the sim compares node counts).
SIM_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  SIM_ENTER();
  if (info == nullptr) return Ret(cudaErrorInvalidValue);
  bool same_shape = false;
  cudaError_t r = UpdateExec(st, exec, graph, &same_shape);
  if (r != cudaSuccess && r != cudaErrorGraphExecUpdateFailure) return Ret(r);
  std::memset(info, 0, sizeof *info);
  info->result = same_shape ? cudaGraphExecUpdateSuccess : cudaGraphExecUpdateErrorTopologyChanged;
  return Ret(r);
}

SIM_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  SIM_ENTER();
  return Ret(DestroyExec(st, exec));
}

// A launch runs the exec's work in order on the stream: copies move their bytes now. Launched into
// a capturing stream, the graph's work joins that capture (a child graph on a real GPU).
static cudaError_t GraphLaunch(cudaGraphExec_t exec, cudaStream_t handle, bool ptsz) {
  SIM_ENTER();
  return Ret(LaunchExec(st, exec, handle, ptsz));
}
SIM_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) { return GraphLaunch(exec, s, false); }
SIM_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t s) { return GraphLaunch(exec, s, true); }

SIM_API cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) {
  SIM_ENTER();
  return Ret(CreateGraph(st, graph, flags));
}
// A 3D copy node's parameters as the engine's copy (pitched rows; arrays and volumes are not simulated).
static cudaError_t NodeCopy(const cudaMemcpy3DParms* p, void** dst, const void** src, Rows* rows) {
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->srcArray != nullptr || p->dstArray != nullptr || p->extent.depth != 1) return cudaErrorNotSupported;
  auto at = [](const cudaPitchedPtr& q, const cudaPos& pos) {
    return static_cast<char*>(q.ptr) + pos.z * q.pitch * q.ysize + pos.y * q.pitch + pos.x;
  };
  *dst = at(p->dstPtr, p->dstPos);
  *src = at(p->srcPtr, p->srcPos);
  *rows = Rows{p->extent.width, p->extent.height, p->srcPtr.pitch, p->dstPtr.pitch};
  return cudaSuccess;
}
SIM_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t*, size_t,
                                           const cudaMemcpy3DParms* p) {
  SIM_ENTER();
  void* dst;
  const void* src;
  Rows rows;
  if (cudaError_t r = NodeCopy(p, &dst, &src, &rows); r != cudaSuccess) return Ret(r);
  return Ret(AddCopyNode(st, node, graph, dst, src, rows, p->kind));
}
SIM_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t*, size_t,
                                             void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  SIM_ENTER();
  return Ret(AddCopyNode(st, node, graph, dst, src, Linear(count), kind));
}
// The generic node call (CUDA 12.2+): copy and child graph nodes as their own calls; other kinds
// (kernels, memsets, …) are not simulated.
extern "C" int p2psim_unsupported(const char*, int, const char*);
static cudaError_t AddNode(cudaGraphNode_t* node, cudaGraph_t graph, cudaGraphNodeParams* p) {
  SIM_ENTER();
  if (p == nullptr) return Ret(cudaErrorInvalidValue);
  if (p->type == cudaGraphNodeTypeMemcpy) {
    void* dst;
    const void* src;
    Rows rows;
    if (cudaError_t r = NodeCopy(&p->memcpy.copyParams, &dst, &src, &rows); r != cudaSuccess) return Ret(r);
    return Ret(AddCopyNode(st, node, graph, dst, src, rows, p->memcpy.copyParams.kind));
  }
  if (p->type == cudaGraphNodeTypeGraph) return Ret(AddChildNode(st, node, graph, p->graph.graph));
  return Ret(static_cast<cudaError_t>(
      p2psim_unsupported("cudaGraphAddNode of this node type", cudaErrorNotSupported, "cudaErrorNotSupported")));
}
#if P2PSIM_CUDART_MAJOR == 13
SIM_API cudaError_t cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t*,
                                     const cudaGraphEdgeData*, size_t, cudaGraphNodeParams* p) {
  return AddNode(node, graph, p);
}
#else
// CUDA 12: the plain name is 12.2's form without edge data (the CUDA 13 header declares the plain
// name with it: this takes its symbol by label), _v2 is 12.3's.
SIM_API cudaError_t AddNode122(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t*, size_t,
                               cudaGraphNodeParams* p) __asm__("cudaGraphAddNode");
SIM_API cudaError_t AddNode122(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t*, size_t,
                               cudaGraphNodeParams* p) {
  return AddNode(node, graph, p);
}
SIM_API cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t*,
                                        const cudaGraphEdgeData*, size_t, cudaGraphNodeParams* p) {
  return AddNode(node, graph, p);
}
#endif

// Changing, disabling and removing nodes the program added.
static cudaError_t SetMemcpyNode(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaMemcpy3DParms* p) {
  SIM_ENTER();
  void* dst;
  const void* src;
  Rows rows;
  if (cudaError_t r = NodeCopy(p, &dst, &src, &rows); r != cudaSuccess) return Ret(r);
  return Ret(SetCopyNode(st, exec, node, dst, src, rows, p->kind));
}
static cudaError_t SetMemcpyNode1D(cudaGraphExec_t exec, cudaGraphNode_t node, void* dst, const void* src, size_t count,
                                   cudaMemcpyKind kind) {
  SIM_ENTER();
  return Ret(SetCopyNode(st, exec, node, dst, src, Linear(count), kind));
}
SIM_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const cudaMemcpy3DParms* p) {
  return SetMemcpyNode(nullptr, node, p);
}
SIM_API cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void* dst, const void* src, size_t count,
                                                   cudaMemcpyKind kind) {
  return SetMemcpyNode1D(nullptr, node, dst, src, count, kind);
}
SIM_API cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                     const cudaMemcpy3DParms* p) {
  return exec != nullptr ? SetMemcpyNode(exec, node, p) : Ret(cudaErrorInvalidValue);
}
SIM_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t exec, cudaGraphNode_t node, void* dst,
                                                       const void* src, size_t count, cudaMemcpyKind kind) {
  return exec != nullptr ? SetMemcpyNode1D(exec, node, dst, src, count, kind) : Ret(cudaErrorInvalidValue);
}
SIM_API cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraph_t child) {
  SIM_ENTER();
  return Ret(SetChildNode(st, exec, node, child));
}
// CUDA 12.2's generic forms: copy nodes as their own calls; a child graph's in an exec; other kinds
// are not simulated.
static cudaError_t SetNodeParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeParams* p) {
  if (p == nullptr) {
    SIM_ENTER();
    return Ret(cudaErrorInvalidValue);
  }
  if (p->type == cudaGraphNodeTypeMemcpy) return SetMemcpyNode(exec, node, &p->memcpy.copyParams);
  if (p->type == cudaGraphNodeTypeGraph && exec != nullptr)
    return cudaGraphExecChildGraphNodeSetParams(exec, node, p->graph.graph);
  return NotSimulated("cudaGraph(Exec)NodeSetParams of this node type");
}
SIM_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, cudaGraphNodeParams* p) {
  return SetNodeParams(nullptr, node, p);
}
SIM_API cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeParams* p) {
  if (exec == nullptr) {
    SIM_ENTER();
    return Ret(cudaErrorInvalidValue);
  }
  return SetNodeParams(exec, node, p);
}
SIM_API cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int on) {
  SIM_ENTER();
  return Ret(SetNodeEnabled(st, exec, node, on != 0));
}
SIM_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
  SIM_ENTER();
  return Ret(RemoveNode(st, node));
}
SIM_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  SIM_ENTER();
  return Ret(NodeType(st, node, type));
}
SIM_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t*,
                                               size_t, cudaGraph_t child) {
  SIM_ENTER();
  return Ret(AddChildNode(st, node, graph, child));
}
SIM_API cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t original) {
  SIM_ENTER();
  return Ret(CloneGraph(st, clone, original));
}

// User objects: references held by the program, graphs and execs (torch's captures retain one).
#define SIM_USER_OBJECT(u) reinterpret_cast<UserObject*>(u)
SIM_API cudaError_t cudaUserObjectCreate(cudaUserObject_t* out, void* ptr, cudaHostFn_t destroy, unsigned int refs,
                                         unsigned int flags) {
  SIM_ENTER();
  return Ret(UserObjectCreate(st, reinterpret_cast<UserObject**>(out), ptr, destroy, refs, flags));
}
SIM_API cudaError_t cudaUserObjectRetain(cudaUserObject_t u, unsigned int n) {
  SIM_ENTER();
  return Ret(UserObjectRetain(st, SIM_USER_OBJECT(u), n));
}
SIM_API cudaError_t cudaUserObjectRelease(cudaUserObject_t u, unsigned int n) {
  SIM_ENTER();
  return Ret(UserObjectRelease(st, SIM_USER_OBJECT(u), n));
}
SIM_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t g, cudaUserObject_t u, unsigned int n, unsigned int flags) {
  SIM_ENTER();
  return Ret(GraphRetainUserObject(st, g, SIM_USER_OBJECT(u), n, flags));
}
SIM_API cudaError_t cudaGraphReleaseUserObject(cudaGraph_t g, cudaUserObject_t u, unsigned int n) {
  SIM_ENTER();
  return Ret(GraphReleaseUserObject(st, g, SIM_USER_OBJECT(u), n));
}
#undef SIM_USER_OBJECT

SIM_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  SIM_ENTER();
  if (nodes != nullptr) return Ret(cudaErrorInvalidValue);  // the sim's graphs have no node handles
  return Ret(GraphNodeCount(st, graph, count));
}

// =============================================================================================
// Events

SIM_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int flags) {
  SIM_ENTER();
  return Ret(CreateEvent(st, out, flags));
}
SIM_API cudaError_t cudaEventCreate(cudaEvent_t* out) { return cudaEventCreateWithFlags(out, 0); }

SIM_API cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  SIM_ENTER();
  return Ret(DestroyEvent(st, ev));
}

SIM_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  SIM_ENTER();
  return Ret(RecordEvent(st, e, s, false));
}
SIM_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  SIM_ENTER();
  return Ret(RecordEvent(st, e, s, true));
}
SIM_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  SIM_ENTER();
  if (flags & ~1u) return Ret(cudaErrorInvalidValue);
  return Ret(RecordEvent(st, e, s, false));
}
SIM_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  SIM_ENTER();
  if (flags & ~1u) return Ret(cudaErrorInvalidValue);
  return Ret(RecordEvent(st, e, s, true));
}

SIM_API cudaError_t cudaEventQuery(cudaEvent_t ev) {
  SIM_ENTER();
  return Ret(QueryEvent(st, ev));
}

SIM_API cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  SIM_ENTER();
  return Ret(EventSync(st, ev));
}

static cudaError_t EventElapsed(float* ms, cudaEvent_t a, cudaEvent_t b) {
  SIM_ENTER();
  return Ret(ElapsedTime(st, ms, a, b));
}
SIM_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { return EventElapsed(ms, a, b); }
#if P2PSIM_CUDART_MAJOR == 12
SIM_API cudaError_t cudaEventElapsedTime_v2(float* ms, cudaEvent_t a, cudaEvent_t b) { return EventElapsed(ms, a, b); }
#endif

// =============================================================================================
// Host functions and kernels

SIM_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(QueueHostFunc(st, s, false, fn, nullptr, data));
}
SIM_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* data) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(QueueHostFunc(st, s, true, fn, nullptr, data));
}
SIM_API cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void* data, unsigned int flags) {
  SIM_ENTER();
  if (flags != 0) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(QueueHostFunc(st, s, false, nullptr, cb, data));
}
SIM_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t s, cudaStreamCallback_t cb, void* data, unsigned int flags) {
  SIM_ENTER();
  if (flags != 0) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(QueueHostFunc(st, s, true, nullptr, cb, data));
}

SIM_API cudaError_t cudaLaunchKernel(const void* func, dim3, dim3, void**, size_t, cudaStream_t s) {
  SIM_ENTER();
  if (func == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(Launch(st, s, false));
}
SIM_API cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3, dim3, void**, size_t, cudaStream_t s) {
  SIM_ENTER();
  if (func == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(Launch(st, s, true));
}
SIM_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void**) {
  SIM_ENTER();
  if (config == nullptr || func == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(Mu());
  return Ret(Launch(st, config->stream, false));
}
SIM_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void**) {
  SIM_ENTER();
  if (config == nullptr || func == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(Mu());
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

// Driver entry points: libcuda.so.1's functions, found by its cuGetProcAddress_v2 (the driver's flags
// and query results have the runtime's values). `ptsz`: the per-thread-default-stream flavour, where
// cudaEnableDefault means per-thread.
static cudaError_t EntryPoint(const char* symbol, void** fn, int version, unsigned long long flags,
                              cudaDriverEntryPointQueryResult* status, bool ptsz) {
  SIM_ENTER_NOCTX();
  if (symbol == nullptr || fn == nullptr || (flags & ~3ull) != 0) return Ret(cudaErrorInvalidValue);
  if (ptsz && flags == cudaEnableDefault) flags = cudaEnablePerThreadDefaultStream;
  int found = cudaDriverEntryPointSymbolNotFound;
  int r = g_driver.get_proc ? g_driver.get_proc(symbol, fn, version, flags, &found) : 500;
  if (status) *status = static_cast<cudaDriverEntryPointQueryResult>(found);
  if (r == 0) return cudaSuccess;
  *fn = nullptr;
  return Ret(r == 500 ? cudaErrorSymbolNotFound : static_cast<cudaError_t>(r));
}
SIM_API cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                            cudaDriverEntryPointQueryResult* status) {
  return EntryPoint(symbol, fn, kRuntimeVersion, flags, status, false);
}
SIM_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** fn, unsigned long long flags,
                                                 cudaDriverEntryPointQueryResult* status) {
  return EntryPoint(symbol, fn, kRuntimeVersion, flags, status, true);
}
SIM_API cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                                     unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  return EntryPoint(symbol, fn, static_cast<int>(version), flags, status, false);
}
SIM_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** fn, unsigned int version,
                                                          unsigned long long flags,
                                                          cudaDriverEntryPointQueryResult* status) {
  return EntryPoint(symbol, fn, static_cast<int>(version), flags, status, true);
}

// =============================================================================================
// IPC: a handle names the exporting process's memfd; the importer maps it, so bytes are shared.

SIM_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  SIM_ENTER();
  if (handle == nullptr) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(Mu());
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
  std::lock_guard<std::mutex> lock(Mu());
  int me = st.visible[CurDev()];
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
  std::lock_guard<std::mutex> lock(Mu());
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
// Hidden hook too: an NCCL operation issued on a capturing stream runs at each launch of its graph
// instead of now (sim_engine.h CaptureReplay: 1 captured, 0 not capturing, else an error).
SIM_API int p2psim_capture_replay(cudaStream_t handle, void (*replay)(void*, cudaStream_t), void* ctx,
                                  void (*release)(void*)) {
  SIM_ENTER();
  return CaptureReplay(st, handle, replay, ctx, release);
}
// The simulated NCCL's P2PSIM_FAULT hang@S-D: the stream's queued work never completes, as a kernel
// waiting on a transfer that never arrives (ACS redirecting P2P writes): events recorded behind it
// stay not ready, a synchronize waits for ever, streams that wait on it inherit it.
SIM_API cudaError_t p2psim_stream_hang(cudaStream_t handle) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, false);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  s->t = HUGE_VAL;
  return cudaSuccess;
}
SIM_API cudaError_t p2psim_stream_advance(cudaStream_t handle, double seconds) {
  SIM_ENTER();
  std::lock_guard<std::mutex> lock(Mu());
  Stream* s = Resolve(st, handle, false);
  if (s == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  GraphWork node{false, nullptr, nullptr, {}, seconds > 0 ? seconds : 0};  // replayed at each launch
  if (cudaError_t r = cudaSuccess; Captured(s, &r, &node)) return r;
  Enqueue(st, s, seconds > 0 ? seconds : 0);
  return cudaSuccess;
}
