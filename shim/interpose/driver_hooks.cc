// What each intercepted driver function does around the real call (the list: driver_functions.h),
// under the runtime hooks' rules (cuda_hooks.cc): the real function is called exactly once with the
// caller's arguments and its result is returned unchanged. Copies share the runtime's accounting
// (TraceApiCopy): a pair's bytes are one sum whichever API moved them.
//
// A runtime call that cudart carries out through the driver is seen once, as the runtime call:
// cudart reaches libcuda through addresses it takes from its own handle (dlopen, then
// cuGetProcAddress), never through the global symbols exported here; the audit module, likewise,
// leaves cudart's and NCCL's own dlsym calls alone (DESIGN.md §4).
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <iterator>

#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"
#include "shim/interpose/cuda_hooks.h"
#include "shim/interpose/device_memory.h"
#include "shim/interpose/driver_functions.h"
#include "shim/interpose/memory_map.h"
#include "shim/base/bind.h"
#include "shim/preflight.h"
#include "shim/record/graphs.h"
#include "shim/record/trace_writer.h"

// The audit module's way of telling the shim it handed out a wrapper; the entry points say the same.
extern "C" void p2ptrace_audit_bound(uint32_t capture_flag);

namespace p2ptrace::shim {
namespace {

const CudaRuntime& Driver() { return Runtime(Node::kDriver); }

// Driver results in the runtime's type, for the shared accounting: both use 0 for success and the
// value is kept (records store it as it was; readers know the API by the record's api).
cudaError_t AsRuntime(CUresult r) { return static_cast<cudaError_t>(r); }

template <typename F, typename... A>
CUresult DriverCopy(const ApiCopy& c, F real, A... args) {
  const BoundCall<F, A...> call{real, {args...}};
  return static_cast<CUresult>(TraceApiCopy(Driver(), c, &decltype(call)::Invoke, &call));
}

const void* Ptr(CUdeviceptr p) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(p)); }

ApiCopy Linear(uint8_t api, uint32_t flags, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return ApiCopy{api, flags, Ptr(dst), Ptr(src), -1, -1, n, s};
}


// The device of a context: cuCtxGetDevice_v2 where the driver has it (12.8+), else with the context
// current for a moment (pushed and popped: the thread's stack is as it was).
int ContextDevice(CUcontext ctx) {
  using GetV2 = CUresult (*)(CUdevice*, CUcontext);
  using Get = CUresult (*)(CUdevice*);
  using Push = CUresult (*)(CUcontext);
  using Pop = CUresult (*)(CUcontext*);
  static constinit RealFunction get_v2_fn{"cuCtxGetDevice_v2", Library::kDriver};
  static constinit RealFunction get_fn{"cuCtxGetDevice", Library::kDriver};
  static constinit RealFunction push_fn{"cuCtxPushCurrent_v2", Library::kDriver};
  static constinit RealFunction pop_fn{"cuCtxPopCurrent_v2", Library::kDriver};
  auto get_v2 = get_v2_fn.As<GetV2>();
  auto get = get_fn.As<Get>();
  auto push = push_fn.As<Push>();
  auto pop = pop_fn.As<Pop>();
  CUdevice d = -1;
  if (ctx == nullptr) return -1;
  if (get_v2 != nullptr) return get_v2(&d, ctx) == CUDA_SUCCESS ? d : -1;
  if (get == nullptr || push == nullptr || pop == nullptr || push(ctx) != CUDA_SUCCESS) return -1;
  if (get(&d) != CUDA_SUCCESS) d = -1;
  CUcontext popped = nullptr;
  pop(&popped);
  return d;
}

// A 3D peer copy between two devices' linear memory is traced; arrays and host sides are not.
bool DeviceSide(CUmemorytype t) { return t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED; }
ApiCopy Copy3D(uint8_t api, uint32_t flags, const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  ApiCopy c{api, flags, Ptr(p->dstDevice), Ptr(p->srcDevice), -1, -1, 0, s};
  c.bytes = static_cast<uint64_t>(p->WidthInBytes) * p->Height * p->Depth;
  return c;
}

}  // namespace

namespace driver_hooks {

// ================================================================================================
// Bookkeeping: driver allocations enter the shim's pointer map as the runtime's do.

// A process that allocates device memory uses CUDA: its trace opens (CuPy, whose statically linked
// runtime reaches the driver through the shim's cuGetProcAddress, allocates this way).
CUresult cuMemAlloc_v2(CUresult (*real)(CUdeviceptr*, size_t), CUdeviceptr* p, size_t n) {
  CUresult r = real(p, n);
  if (r == CUDA_SUCCESS && p != nullptr && *p != 0) {
    int d = -1;
    NoteDeviceMemory(Driver(), cudaSuccess, Ptr(*p), n, Driver().GetDevice(&d) == cudaSuccess ? d : -1);
  }
  return r;
}
// The range leaves the map before the real free: afterwards the address may already be reused.
CUresult cuMemFree_v2(CUresult (*real)(CUdeviceptr), CUdeviceptr p) {
  MemoryMap::Remove(Ptr(p));
  return real(p);
}

// ================================================================================================
// Memory the program maps or takes from pools (device_memory.h): its owner, and the peers granted it.

// cuMemCreate makes physical memory, which is nobody's address yet: cuMemMap gives it one.
CUresult cuMemCreate(CUresult (*real)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                      unsigned long long),
                     CUmemGenericAllocationHandle* h, size_t n, const CUmemAllocationProp* prop, unsigned long long f) {
  CUresult r = real(h, n, prop, f);
  if (r == CUDA_SUCCESS) NoteDeviceMemory(Driver(), cudaSuccess, nullptr, n, -1);  // the process uses CUDA
  return r;
}

// The owner of a mapped handle: its allocation properties (a handle the call just mapped: the query
// cannot fail, and the driver keeps no last error).
CUresult cuMemMap(CUresult (*real)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long),
                  CUdeviceptr p, size_t n, size_t offset, CUmemGenericAllocationHandle h, unsigned long long f) {
  CUresult r = real(p, n, offset, h, f);
  if (r != CUDA_SUCCESS) return r;
  using Props = CUresult (*)(CUmemAllocationProp*, CUmemGenericAllocationHandle);
  static constinit RealFunction props_fn{"cuMemGetAllocationPropertiesFromHandle", Library::kDriver};
  auto props = props_fn.As<Props>();
  CUmemAllocationProp prop{};
  int device = props != nullptr && props(&prop, h) == CUDA_SUCCESS && prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE
                   ? prop.location.id
                   : -1;
  NoteDeviceMemory(Driver(), cudaSuccess, Ptr(p), n, device);
  return r;
}
// Forgotten before the real call (the range may be mapped again at once); back when it failed.
CUresult cuMemUnmap(CUresult (*real)(CUdeviceptr, size_t), CUdeviceptr p, size_t n) {
  int device = MemoryMap::Lookup(Ptr(p));
  ForgetDeviceMemory(Ptr(p));
  CUresult r = real(p, n);
  if (r != CUDA_SUCCESS && device >= 0) NoteDeviceMemory(Driver(), cudaSuccess, Ptr(p), n, device);
  return r;
}

static_assert(CU_MEM_LOCATION_TYPE_DEVICE == 1);  // NoteAccessList reads the runtime's value
CUresult cuMemSetAccess(CUresult (*real)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t), CUdeviceptr p,
                        size_t n, const CUmemAccessDesc* d, size_t count) {
  CUresult r = real(p, n, d, count);
  int owner = MemoryMap::Lookup(Ptr(p));
  NoteAccessList(Driver(), P2PTRACE_API_cuMemSetAccess, owner >= 0 ? owner : -1, d, count, AsRuntime(r));
  return r;
}

// Stream-ordered allocations: from the stream's device's current pool, or the pool named.
template <typename F, typename... A>
CUresult AllocAsync(F real, CUdeviceptr* p, size_t n, int device, A... args) {
  CUresult r = real(p, n, args...);
  if (r == CUDA_SUCCESS && p != nullptr) NoteDeviceMemory(Driver(), cudaSuccess, Ptr(*p), n, device);
  return r;
}
CUresult cuMemAllocAsync(CUresult (*real)(CUdeviceptr*, size_t, CUstream), CUdeviceptr* p, size_t n, CUstream s) {
  return AllocAsync(real, p, n, StreamDeviceOf(Driver(), s), s);
}
CUresult cuMemAllocAsync_ptsz(CUresult (*real)(CUdeviceptr*, size_t, CUstream), CUdeviceptr* p, size_t n,
                              CUstream s) {
  return AllocAsync(real, p, n, StreamDeviceOf(Driver(), PerThread(s)), s);
}
CUresult cuMemAllocFromPoolAsync(CUresult (*real)(CUdeviceptr*, size_t, CUmemoryPool, CUstream), CUdeviceptr* p,
                                 size_t n, CUmemoryPool pool, CUstream s) {
  return AllocAsync(real, p, n, PoolDevice(pool), pool, s);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUresult (*real)(CUdeviceptr*, size_t, CUmemoryPool, CUstream),
                                      CUdeviceptr* p, size_t n, CUmemoryPool pool, CUstream s) {
  return AllocAsync(real, p, n, PoolDevice(pool), pool, s);
}
CUresult cuMemFreeAsync(CUresult (*real)(CUdeviceptr, CUstream), CUdeviceptr p, CUstream s) {
  ForgetDeviceMemory(Ptr(p));
  return real(p, s);
}
CUresult cuMemFreeAsync_ptsz(CUresult (*real)(CUdeviceptr, CUstream), CUdeviceptr p, CUstream s) {
  ForgetDeviceMemory(Ptr(p));
  return real(p, s);
}

CUresult cuMemPoolCreate(CUresult (*real)(CUmemoryPool*, const CUmemPoolProps*), CUmemoryPool* pool,
                         const CUmemPoolProps* props) {
  CUresult r = real(pool, props);
  if (r == CUDA_SUCCESS && pool != nullptr && props != nullptr && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
    NotePool(Driver(), cudaSuccess, *pool, props->location.id);
  return r;
}
CUresult cuMemPoolDestroy(CUresult (*real)(CUmemoryPool), CUmemoryPool pool) {
  int device = PoolDevice(pool);
  ForgetPool(pool);
  CUresult r = real(pool);
  if (r != CUDA_SUCCESS && device >= 0) NotePool(Driver(), cudaSuccess, pool, device);
  return r;
}
CUresult cuDeviceGetDefaultMemPool(CUresult (*real)(CUmemoryPool*, CUdevice), CUmemoryPool* pool, CUdevice dev) {
  CUresult r = real(pool, dev);
  if (r == CUDA_SUCCESS && pool != nullptr) NotePool(Driver(), cudaSuccess, *pool, dev);
  return r;
}
CUresult cuDeviceGetMemPool(CUresult (*real)(CUmemoryPool*, CUdevice), CUmemoryPool* pool, CUdevice dev) {
  CUresult r = real(pool, dev);
  if (r == CUDA_SUCCESS && pool != nullptr) NotePool(Driver(), cudaSuccess, *pool, dev);
  return r;
}
CUresult cuMemPoolSetAccess(CUresult (*real)(CUmemoryPool, const CUmemAccessDesc*, size_t), CUmemoryPool pool,
                            const CUmemAccessDesc* d, size_t count) {
  CUresult r = real(pool, d, count);
  NoteAccessList(Driver(), P2PTRACE_API_cuMemPoolSetAccess, PoolDevice(pool), d, count, AsRuntime(r));
  return r;
}

// ================================================================================================
// Peer capability and access

CUresult cuDeviceCanAccessPeer(CUresult (*real)(int*, CUdevice, CUdevice), int* can, CUdevice dev, CUdevice peer) {
  CUresult r = real(can, dev, peer);
  const CudaRuntime& rt = Driver();
  if (ReadyAfter(rt, AsRuntime(r)))
    RecordPeerCall(P2PTRACE_API_cuDeviceCanAccessPeer, dev, peer, AsRuntime(r), r == CUDA_SUCCESS && can ? *can : -1, 0);
  if (r == CUDA_SUCCESS) PreflightFromCuda(rt);
  return r;
}

CUresult cuDeviceGetP2PAttribute(CUresult (*real)(int*, CUdevice_P2PAttribute, CUdevice, CUdevice), int* v,
                                 CUdevice_P2PAttribute a, CUdevice src, CUdevice dst) {
  CUresult r = real(v, a, src, dst);
  const CudaRuntime& rt = Driver();
  if (ReadyAfter(rt, AsRuntime(r)))
    RecordPeerCall(P2PTRACE_API_cuDeviceGetP2PAttribute, src, dst, AsRuntime(r), r == CUDA_SUCCESS && v ? *v : -1,
                   static_cast<int>(a));
  if (r == CUDA_SUCCESS) PreflightFromCuda(rt);
  return r;
}

// The current context's device maps the peer context's device's memory.
CUresult cuCtxEnablePeerAccess(CUresult (*real)(CUcontext, unsigned int), CUcontext peer, unsigned int flags) {
  CUresult r = real(peer, flags);
  const CudaRuntime& rt = Driver();
  if (!ReadyAfter(rt, AsRuntime(r))) return r;
  bool mapped = r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;  // either way it exists now
  if (mapped) PreflightFromCuda(rt);
  int d = AnsweredDevice(rt), p = ContextDevice(peer);
  if (mapped) PeerMappingChanged(d, p, kPeerByApi, true);
  RecordPeerCall(P2PTRACE_API_cuCtxEnablePeerAccess, d, p, AsRuntime(r), static_cast<int>(flags), 0);
  return r;
}

CUresult cuCtxDisablePeerAccess(CUresult (*real)(CUcontext), CUcontext peer) {
  CUresult r = real(peer);
  const CudaRuntime& rt = Driver();
  if (!ReadyAfter(rt, AsRuntime(r))) return r;
  int d = AnsweredDevice(rt), p = ContextDevice(peer);
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED) PeerMappingChanged(d, p, kPeerByApi, false);
  RecordPeerCall(P2PTRACE_API_cuCtxDisablePeerAccess, d, p, AsRuntime(r), 0, 0);
  return r;
}

// ================================================================================================
// Copies: the devices from the pointers (with unified addressing a pointer names its device; a
// peer copy's contexts are those pointers' devices' contexts).

#define P2PTRACE_DRIVER_COPY(name, params, args, describe)                       \
  template <typename F>                                                           \
  CUresult name(F real, P2PTRACE_UNPAREN params) {                                \
    return DriverCopy(describe, real, P2PTRACE_UNPAREN args);                     \
  }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"  // the contexts: the pointers say the devices
P2PTRACE_DRIVER_COPY(cuMemcpyPeer, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),
                     (dst, dc, src, sc, n), Linear(P2PTRACE_API_cuMemcpyPeer, 0, dst, src, n, nullptr))
P2PTRACE_DRIVER_COPY(cuMemcpyPeer_ptds, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),
                     (dst, dc, src, sc, n),
                     Linear(P2PTRACE_API_cuMemcpyPeer, P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, n, CU_STREAM_PER_THREAD))
P2PTRACE_DRIVER_COPY(cuMemcpyPeerAsync,
                     (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
                     (dst, dc, src, sc, n, s), Linear(P2PTRACE_API_cuMemcpyPeerAsync, P2PTRACE_COPY_ASYNC, dst, src, n, s))
P2PTRACE_DRIVER_COPY(cuMemcpyPeerAsync_ptsz,
                     (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
                     (dst, dc, src, sc, n, s),
                     Linear(P2PTRACE_API_cuMemcpyPeerAsync, P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM, dst,
                            src, n, PerThread(s)))
#pragma GCC diagnostic pop
P2PTRACE_DRIVER_COPY(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n),
                     Linear(P2PTRACE_API_cuMemcpy, 0, dst, src, n, nullptr))
P2PTRACE_DRIVER_COPY(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n),
                     Linear(P2PTRACE_API_cuMemcpy, P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, n, CU_STREAM_PER_THREAD))
P2PTRACE_DRIVER_COPY(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),
                     Linear(P2PTRACE_API_cuMemcpyAsync, P2PTRACE_COPY_ASYNC, dst, src, n, s))
P2PTRACE_DRIVER_COPY(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),
                     Linear(P2PTRACE_API_cuMemcpyAsync, P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM, dst, src,
                            n, PerThread(s)))
P2PTRACE_DRIVER_COPY(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n),
                     Linear(P2PTRACE_API_cuMemcpyDtoD, 0, dst, src, n, nullptr))
P2PTRACE_DRIVER_COPY(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n),
                     Linear(P2PTRACE_API_cuMemcpyDtoD, P2PTRACE_COPY_PER_THREAD_STREAM, dst, src, n,
                            CU_STREAM_PER_THREAD))
P2PTRACE_DRIVER_COPY(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
                     (dst, src, n, s), Linear(P2PTRACE_API_cuMemcpyDtoDAsync, P2PTRACE_COPY_ASYNC, dst, src, n, s))
P2PTRACE_DRIVER_COPY(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
                     (dst, src, n, s),
                     Linear(P2PTRACE_API_cuMemcpyDtoDAsync, P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM, dst,
                            src, n, PerThread(s)))
#undef P2PTRACE_DRIVER_COPY

// A null block, an array or a host side: passed on untouched, not traced.
template <typename F, typename... A>
CUresult Copy3DPeer(F real, const CUDA_MEMCPY3D_PEER* p, const ApiCopy& c, A... args) {
  if (p == nullptr || !DeviceSide(p->srcMemoryType) || !DeviceSide(p->dstMemoryType)) return real(args...);
  return DriverCopy(c, real, args...);
}
#define P2PTRACE_DRIVER_3D(name, api, flags, stream, params, args)                                        \
  template <typename F>                                                                                    \
  CUresult name(F real, P2PTRACE_UNPAREN params) {                                                         \
    return Copy3DPeer(real, p, p ? Copy3D(api, flags, p, stream) : ApiCopy{}, P2PTRACE_UNPAREN args);       \
  }
P2PTRACE_DRIVER_3D(cuMemcpy3DPeer, P2PTRACE_API_cuMemcpy3DPeer, 0, nullptr, (const CUDA_MEMCPY3D_PEER* p), (p))
P2PTRACE_DRIVER_3D(cuMemcpy3DPeer_ptds, P2PTRACE_API_cuMemcpy3DPeer, P2PTRACE_COPY_PER_THREAD_STREAM,
                   CU_STREAM_PER_THREAD, (const CUDA_MEMCPY3D_PEER* p), (p))
P2PTRACE_DRIVER_3D(cuMemcpy3DPeerAsync, P2PTRACE_API_cuMemcpy3DPeerAsync, P2PTRACE_COPY_ASYNC, s,
                   (const CUDA_MEMCPY3D_PEER* p, CUstream s), (p, s))
P2PTRACE_DRIVER_3D(cuMemcpy3DPeerAsync_ptsz, P2PTRACE_API_cuMemcpy3DPeerAsync,
                   P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_PER_THREAD_STREAM, PerThread(s),
                   (const CUDA_MEMCPY3D_PEER* p, CUstream s), (p, s))
#undef P2PTRACE_DRIVER_3D

// ================================================================================================
// Streams: a driver stream's copies and graph launches are timed like a runtime stream's.

CUresult cuStreamCreate(CUresult (*real)(CUstream*, unsigned int), CUstream* s, unsigned int flags) {
  CUresult r = real(s, flags);
  StreamCreated(Driver(), AsRuntime(r), s);
  return r;
}
CUresult cuStreamCreateWithPriority(CUresult (*real)(CUstream*, unsigned int, int), CUstream* s, unsigned int flags,
                                    int priority) {
  CUresult r = real(s, flags, priority);
  StreamCreated(Driver(), AsRuntime(r), s);
  return r;
}
CUresult cuStreamDestroy(CUresult (*real)(CUstream), CUstream s) {
  StreamDestroying(s);
  return real(s);
}
CUresult cuStreamDestroy_v2(CUresult (*real)(CUstream), CUstream s) {
  StreamDestroying(s);
  return real(s);
}

// ================================================================================================
// Stream capture and graphs: the runtime's bookkeeping (cuda_hooks.h, graphs.h). One capture has
// one id whichever API asks, so a driver copy is captured into a graph the runtime began, and back.

template <typename F, typename... A>
CUresult BeginCapture(F real, CUstream named, A... args) {
  CaptureBeginning();
  CUresult r = real(args...);
  CaptureBegun(Driver(), named, AsRuntime(r));
  return r;
}
// Into the program's graph (CUDA 12.3+): the captured work is added to it.
template <typename F>
CUresult BeginCaptureToGraph(F real, CUstream named, CUstream s, CUgraph g, const CUgraphNode* d,
                             const CUgraphEdgeData* e, size_t n, CUstreamCaptureMode m) {
  CaptureBeginning();
  CUresult r = real(s, g, d, e, n, m);
  CaptureBegun(Driver(), named, AsRuntime(r), g);  // a CUgraph is a cudaGraph_t
  return r;
}
CUresult cuStreamBeginCaptureToGraph(CUresult (*real)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*,
                                                      size_t, CUstreamCaptureMode),
                                     CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e, size_t n,
                                     CUstreamCaptureMode m) {
  return BeginCaptureToGraph(real, s, s, g, d, e, n, m);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUresult (*real)(CUstream, CUgraph, const CUgraphNode*,
                                                           const CUgraphEdgeData*, size_t, CUstreamCaptureMode),
                                          CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e,
                                          size_t n, CUstreamCaptureMode m) {
  return BeginCaptureToGraph(real, PerThread(s), s, g, d, e, n, m);
}
CUresult cuStreamBeginCapture(CUresult (*real)(CUstream), CUstream s) { return BeginCapture(real, s, s); }
CUresult cuStreamBeginCapture_ptsz(CUresult (*real)(CUstream), CUstream s) {
  return BeginCapture(real, PerThread(s), s);
}
CUresult cuStreamBeginCapture_v2(CUresult (*real)(CUstream, CUstreamCaptureMode), CUstream s, CUstreamCaptureMode m) {
  return BeginCapture(real, s, s, m);
}
CUresult cuStreamBeginCapture_v2_ptsz(CUresult (*real)(CUstream, CUstreamCaptureMode), CUstream s,
                                      CUstreamCaptureMode m) {
  return BeginCapture(real, PerThread(s), s, m);
}
CUresult EndCapture(CUresult (*real)(CUstream, CUgraph*), CUstream s, CUgraph* g, CUstream named) {
  unsigned long long id = graphs::AnyCapture() ? graphs::CaptureIdOf(Driver(), named) : 0;
  CUresult r = real(s, g);
  CaptureEnding(named, id, AsRuntime(r), g);
  return r;
}
CUresult cuStreamEndCapture(CUresult (*real)(CUstream, CUgraph*), CUstream s, CUgraph* g) {
  return EndCapture(real, s, g, s);
}
CUresult cuStreamEndCapture_ptsz(CUresult (*real)(CUstream, CUgraph*), CUstream s, CUgraph* g) {
  return EndCapture(real, s, g, PerThread(s));
}

template <typename F, typename... A>
CUresult Instantiate(F real, CUgraphExec* x, CUgraph g, A... rest) {
  CUresult r = real(x, g, rest...);
  graphs::Instantiated(AsRuntime(r), x, g);
  return r;
}
CUresult cuGraphInstantiate(CUresult (*real)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t), CUgraphExec* x,
                            CUgraph g, CUgraphNode* e, char* log, size_t n) {
  return Instantiate(real, x, g, e, log, n);
}
CUresult cuGraphInstantiate_v2(CUresult (*real)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t), CUgraphExec* x,
                               CUgraph g, CUgraphNode* e, char* log, size_t n) {
  return Instantiate(real, x, g, e, log, n);
}
CUresult cuGraphInstantiateWithFlags(CUresult (*real)(CUgraphExec*, CUgraph, unsigned long long), CUgraphExec* x,
                                     CUgraph g, unsigned long long f) {
  return Instantiate(real, x, g, f);
}
CUresult cuGraphInstantiateWithParams(CUresult (*real)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*),
                                      CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return Instantiate(real, x, g, p);
}
CUresult cuGraphInstantiateWithParams_ptsz(CUresult (*real)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*),
                                           CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return Instantiate(real, x, g, p);
}
CUresult cuGraphExecUpdate(CUresult (*real)(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*),
                           CUgraphExec x, CUgraph g, CUgraphNode* e, CUgraphExecUpdateResult* u) {
  CUresult r = real(x, g, e, u);
  graphs::ExecUpdated(AsRuntime(r), x, g);
  return r;
}
CUresult cuGraphExecUpdate_v2(CUresult (*real)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*), CUgraphExec x,
                              CUgraph g, CUgraphExecUpdateResultInfo* i) {
  CUresult r = real(x, g, i);
  graphs::ExecUpdated(AsRuntime(r), x, g);
  return r;
}
// Forgotten before the real call: afterwards the handle may already be reused.
CUresult cuGraphExecDestroy(CUresult (*real)(CUgraphExec), CUgraphExec x) {
  graphs::ExecDestroyed(cudaSuccess, x);
  return real(x);
}
CUresult cuGraphDestroy(CUresult (*real)(CUgraph), CUgraph g) {
  graphs::GraphDestroyed(cudaSuccess, g);
  return real(g);
}

// Graphs built node by node: a copy node between two devices' memory, a child graph, a clone.
void MemcpyNodeAdded(uint8_t api, CUgraph g, const CUDA_MEMCPY3D* p, CUresult r) {
  if (r == CUDA_SUCCESS && p != nullptr && DeviceSide(p->srcMemoryType) && DeviceSide(p->dstMemoryType)) {
    CUdeviceptr src = p->srcDevice + p->srcZ * p->srcPitch * p->srcHeight + p->srcY * p->srcPitch + p->srcXInBytes;
    CUdeviceptr dst = p->dstDevice + p->dstZ * p->dstPitch * p->dstHeight + p->dstY * p->dstPitch + p->dstXInBytes;
    ApiCopy c{api, 0, Ptr(dst), Ptr(src), -1, -1, static_cast<uint64_t>(p->WidthInBytes) * p->Height * p->Depth,
              nullptr};
    RecordGraphNodeCopy(Driver(), c, g, AsRuntime(r));
  }
}
CUresult cuGraphAddMemcpyNode(CUresult (*real)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_MEMCPY3D*,
                                               CUcontext),
                              CUgraphNode* n, CUgraph g, const CUgraphNode* d, size_t nd, const CUDA_MEMCPY3D* p,
                              CUcontext ctx) {
  CUresult r = real(n, g, d, nd, p, ctx);
  MemcpyNodeAdded(P2PTRACE_API_cuGraphAddMemcpyNode, g, p, r);
  return r;
}
// The generic node call: a copy node or a child graph is followed as its own call is.
void GenericNodeAdded(CUgraph g, const CUgraphNodeParams* p, CUresult r) {
  if (r != CUDA_SUCCESS || p == nullptr) return;
  if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) MemcpyNodeAdded(P2PTRACE_API_cuGraphAddNode, g, &p->memcpy.copyParams, r);
  if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) graphs::ChildAdded(cudaSuccess, g, p->graph.graph);
}
CUresult cuGraphAddNode(CUresult (*real)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*),
                        CUgraphNode* n, CUgraph g, const CUgraphNode* d, size_t nd, CUgraphNodeParams* p) {
  CUresult r = real(n, g, d, nd, p);
  GenericNodeAdded(g, p, r);
  return r;
}
CUresult cuGraphAddNode_v2(CUresult (*real)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                                            CUgraphNodeParams*),
                           CUgraphNode* n, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e, size_t nd,
                           CUgraphNodeParams* p) {
  CUresult r = real(n, g, d, e, nd, p);
  GenericNodeAdded(g, p, r);
  return r;
}
CUresult cuGraphCreate(CUresult (*real)(CUgraph*, unsigned int), CUgraph* g, unsigned int flags) {
  CUresult r = real(g, flags);
  graphs::GraphCreated(AsRuntime(r), g);
  return r;
}
CUresult cuGraphAddChildGraphNode(CUresult (*real)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraph),
                                  CUgraphNode* n, CUgraph g, const CUgraphNode* d, size_t nd, CUgraph child) {
  CUresult r = real(n, g, d, nd, child);
  graphs::ChildAdded(AsRuntime(r), g, child);
  return r;
}
CUresult cuGraphClone(CUresult (*real)(CUgraph*, CUgraph), CUgraph* clone, CUgraph g) {
  CUresult r = real(clone, g);
  graphs::Cloned(AsRuntime(r), clone, g);
  return r;
}

// Changes to nodes that may already be recorded, as the runtime's (cuda_hooks.h).
#define P2PTRACE_DRIVER_ALTER_HOOK(name, exec, params, args, relevant) \
  P2PTRACE_ALTER_HOOK(CUresult, (CUresult(*real) params), name, exec, params, args, relevant)
P2PTRACE_DRIVER_ALTER_HOOK(cuGraphExecMemcpyNodeSetParams, x,
                    (CUgraphExec x, CUgraphNode n, const CUDA_MEMCPY3D* p, CUcontext ctx), (x, n, p, ctx), true)
P2PTRACE_DRIVER_ALTER_HOOK(cuGraphExecNodeSetParams, x, (CUgraphExec x, CUgraphNode n, CUgraphNodeParams* p), (x, n, p),
                    p != nullptr && ReplayedNodeType(p->type))
P2PTRACE_DRIVER_ALTER_HOOK(cuGraphExecChildGraphNodeSetParams, x, (CUgraphExec x, CUgraphNode n, CUgraph c), (x, n, c), true)
P2PTRACE_DRIVER_ALTER_HOOK(cuGraphNodeSetEnabled, x, (CUgraphExec x, CUgraphNode n, unsigned int on), (x, n, on),
                    graphs::ExecGraph(x) != 0 && ReplayedNode(Driver(), n))
P2PTRACE_DRIVER_ALTER_HOOK(cuGraphMemcpyNodeSetParams, nullptr, (CUgraphNode n, const CUDA_MEMCPY3D* p), (n, p), true)
P2PTRACE_DRIVER_ALTER_HOOK(cuGraphNodeSetParams, nullptr, (CUgraphNode n, CUgraphNodeParams* p), (n, p),
                    p != nullptr && ReplayedNodeType(p->type))
P2PTRACE_DRIVER_ALTER_HOOK(cuGraphDestroyNode, nullptr, (CUgraphNode n), (n), true)  // of any type, as the runtime's
#undef P2PTRACE_DRIVER_ALTER_HOOK

// As cudaGraphLaunch: an exec the shim saw nothing captured into costs one lookup.
inline __attribute__((always_inline)) CUresult Launch(CUresult (*real)(CUgraphExec, CUstream), CUgraphExec x,
                                                      CUstream s, CUstream named) {
  uint32_t id = graphs::ExecGraph(x);
  if (__builtin_expect(id == 0, 1)) return real(x, s);
  if (__builtin_expect(detail::g_sample.enabled || graphs::AnyCapture(), 0)) {
    const BoundCall<decltype(real), CUgraphExec, CUstream> call{real, {x, s}};
    return static_cast<CUresult>(TracedGraphLaunch(Driver(), id, x, named, &decltype(call)::Invoke, &call));
  }
  CUresult r = real(x, s);
  graphs::RecordLaunch(id, x, named, r, nullptr);
  return r;
}
CUresult cuGraphLaunch(CUresult (*real)(CUgraphExec, CUstream), CUgraphExec x, CUstream s) {
  return Launch(real, x, s, s);
}
CUresult cuGraphLaunch_ptsz(CUresult (*real)(CUgraphExec, CUstream), CUgraphExec x, CUstream s) {
  return Launch(real, x, s, PerThread(s));
}

// ================================================================================================
// Entry points: a function the driver hands out by address is the shim's wrapper where it has one.

CUresult cuGetProcAddress(CUresult (*real)(const char*, void**, int, cuuint64_t), const char* sym, void** pfn,
                          int version, cuuint64_t flags) {
  CUresult r = real(sym, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = DriverWrapperFor(*pfn);
  return r;
}
CUresult cuGetProcAddress_v2(CUresult (*real)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*),
                             const char* sym, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  CUresult r = real(sym, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = DriverWrapperFor(*pfn);
  return r;
}

}  // namespace driver_hooks
}  // namespace p2ptrace::shim

// ================================================================================================
// The exported wrappers, by libcuda's own (unversioned) names: bind.h's one wrapper shape.
#define P2PTRACE_DRIVER_WRAP(name, params, args)                                                              \
  static constinit p2ptrace::shim::RealFunction p2pd_real_##name{#name, p2ptrace::shim::Library::kDriver};    \
  using p2pd_fn_##name = CUresult(*) params;                                                                  \
  P2PTRACE_WRAPPER(CUresult, name, p2pd_real_##name, p2pd_fn_##name, CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, \
                   (void)0, p2ptrace::shim::driver_hooks::name(p2p_real, P2PTRACE_UNPAREN args), params, args)
P2PTRACE_DRIVER_FUNCTIONS(P2PTRACE_DRIVER_WRAP)
#undef P2PTRACE_DRIVER_WRAP

namespace {
struct Wrapped {
  p2ptrace::shim::RealFunction* real;
  void* wrapper;
};
#define P2PTRACE_DRIVER_ENTRY(name, params, args) {&p2pd_real_##name, reinterpret_cast<void*>(&name)},
const Wrapped kWrapped[] = {P2PTRACE_DRIVER_FUNCTIONS(P2PTRACE_DRIVER_ENTRY)};
#undef P2PTRACE_DRIVER_ENTRY
}  // namespace

// Matched by address, not by name: the driver picks the version and the per-thread-stream form from
// the caller's version and flags, and only an address equal to the one libcuda exports under a
// wrapped name is the function that wrapper calls. Anything else is handed out as it was.
void* p2ptrace::shim::DriverWrapperFor(void* fn) {
  if (fn == nullptr) return fn;
  for (const Wrapped& w : kWrapped) {
    if (w.real->Get() != fn) continue;
    p2ptrace_audit_bound(P2PTRACE_CAPTURE_DRIVER_ENTRY_POINT);
    return w.wrapper;
  }
  return fn;
}
