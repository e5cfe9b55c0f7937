// What each intercepted CUDA function does around the real call (the list: cuda_functions.h).
// Rules every hook keeps: the real function is called exactly once with the caller's arguments and
// its result is returned unchanged; the shim never calls cudaGetLastError; its own CUDA calls go
// to the same runtime (node) as the intercepted call and are made only where they cannot fail
// (so they cannot leave a sticky error behind); a query that switches the device switches it back.
#include "shim/interpose/cuda_hooks.h"


#include <atomic>
#include <mutex>

#include "p2ptrace/vocabulary.h"
#include "shim/interpose/cuda_wrap.h"
#include "shim/interpose/device_memory.h"
#include "shim/interpose/memory_map.h"
#include "shim/preflight.h"
#include "shim/record/graphs.h"
#include "shim/record/trace_writer.h"

// cudaGetDriverEntryPoint is deprecated, not gone: programs built against CUDA 12 still call it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace p2ptrace::shim {

namespace hooks {

// cudart 12's cudaGraphAddNode (CUDA 12.2's form: no edge data; cuda_graph_functions.h).
using GraphAddNode12Fn = cudaError_t (*)(cudaGraphNode_t*, cudaGraph_t, const cudaGraphNode_t*, size_t,
                                         cudaGraphNodeParams*);

// ================================================================================================
// Bookkeeping

// A process that allocates device memory "used CUDA": its trace exists even if it never copies.
static void NoteAlloc(NodeRuntime rt, cudaError_t r, void** p, size_t n) {
  if (r == cudaSuccess && p != nullptr && *p != nullptr) {
    MemoryMap::Add(*p, n, CurrentDevice(rt));
    if (ReadyAfter(rt, r)) PreflightIfNccl(rt);  // an NCCL job: warn before its first collective
  }
}

cudaError_t cudaMalloc(NodeRuntime rt, Real<decltype(&::cudaMalloc)> real, void** p, size_t n) {
  cudaError_t r = real(p, n);
  NoteAlloc(rt, r, p, n);
  return r;
}
cudaError_t cudaMallocAsync(NodeRuntime rt, Real<decltype(&::cudaMallocAsync)> real, void** p, size_t n,
                            cudaStream_t s) {
  cudaError_t r = real(p, n, s);
  NoteAlloc(rt, r, p, n);
  return r;
}
cudaError_t cudaMallocAsync_ptsz(NodeRuntime rt, Real<decltype(&::cudaMallocAsync_ptsz)> real, void** p,
                                 size_t n, cudaStream_t s) {
  cudaError_t r = real(p, n, s);
  NoteAlloc(rt, r, p, n);
  return r;
}
// Pools (device_memory.h): an allocation is its pool's device's memory.
cudaError_t cudaMallocFromPoolAsync(NodeRuntime rt, Real<decltype(&::cudaMallocFromPoolAsync)> real, void** p,
                                    size_t n, cudaMemPool_t pool, cudaStream_t s) {
  cudaError_t r = real(p, n, pool, s);
  if (r == cudaSuccess && p != nullptr) NoteDeviceMemory(rt, r, *p, n, PoolDevice(pool));
  return r;
}
cudaError_t cudaMallocFromPoolAsync_ptsz(NodeRuntime rt, Real<decltype(&::cudaMallocFromPoolAsync_ptsz)> real,
                                         void** p, size_t n, cudaMemPool_t pool, cudaStream_t s) {
  cudaError_t r = real(p, n, pool, s);
  if (r == cudaSuccess && p != nullptr) NoteDeviceMemory(rt, r, *p, n, PoolDevice(pool));
  return r;
}
cudaError_t cudaMemPoolCreate(NodeRuntime rt, Real<decltype(&::cudaMemPoolCreate)> real, cudaMemPool_t* pool,
                              const cudaMemPoolProps* props) {
  cudaError_t r = real(pool, props);
  if (r == cudaSuccess && pool != nullptr && props != nullptr && props->location.type == cudaMemLocationTypeDevice)
    NotePool(rt, r, *pool, props->location.id);
  return r;
}
// Forgotten before the real call (the handle may be reused at once); kept when CUDA refuses (a
// device's default pool cannot be destroyed).
cudaError_t cudaMemPoolDestroy(NodeRuntime rt, Real<decltype(&::cudaMemPoolDestroy)> real, cudaMemPool_t pool) {
  int device = PoolDevice(pool);
  ForgetPool(pool);
  cudaError_t r = real(pool);
  if (r != cudaSuccess && device >= 0) NotePool(rt, cudaSuccess, pool, device);
  return r;
}
cudaError_t cudaDeviceGetDefaultMemPool(NodeRuntime rt, Real<decltype(&::cudaDeviceGetDefaultMemPool)> real,
                                        cudaMemPool_t* pool, int dev) {
  cudaError_t r = real(pool, dev);
  if (r == cudaSuccess && pool != nullptr) NotePool(rt, r, *pool, dev);
  return r;
}
cudaError_t cudaDeviceGetMemPool(NodeRuntime rt, Real<decltype(&::cudaDeviceGetMemPool)> real, cudaMemPool_t* pool,
                                 int dev) {
  cudaError_t r = real(pool, dev);
  if (r == cudaSuccess && pool != nullptr) NotePool(rt, r, *pool, dev);
  return r;
}

// The range leaves the map before the real free: afterwards the address may already be reused.
cudaError_t cudaFree(NodeRuntime, Real<decltype(&::cudaFree)> real, void* p) {
  MemoryMap::Remove(p);
  return real(p);
}
cudaError_t cudaFreeAsync(NodeRuntime, Real<decltype(&::cudaFreeAsync)> real, void* p, cudaStream_t s) {
  MemoryMap::Remove(p);
  return real(p, s);
}
cudaError_t cudaFreeAsync_ptsz(NodeRuntime, Real<decltype(&::cudaFreeAsync_ptsz)> real, void* p,
                               cudaStream_t s) {
  MemoryMap::Remove(p);
  return real(p, s);
}

cudaError_t cudaStreamCreate(NodeRuntime rt, Real<decltype(&::cudaStreamCreate)> real, cudaStream_t* s) {
  cudaError_t r = real(s);
  StreamCreated(rt, r, s);
  return r;
}
cudaError_t cudaStreamCreateWithFlags(NodeRuntime rt, Real<decltype(&::cudaStreamCreateWithFlags)> real,
                                      cudaStream_t* s, unsigned int f) {
  cudaError_t r = real(s, f);
  StreamCreated(rt, r, s);
  return r;
}
cudaError_t cudaStreamCreateWithPriority(NodeRuntime rt, Real<decltype(&::cudaStreamCreateWithPriority)> real,
                                         cudaStream_t* s, unsigned int f, int prio) {
  cudaError_t r = real(s, f, prio);
  StreamCreated(rt, r, s);
  return r;
}
cudaError_t cudaStreamDestroy(NodeRuntime, Real<decltype(&::cudaStreamDestroy)> real, cudaStream_t s) {
  StreamDestroying(s);
  return real(s);
}

static cudaError_t BeginCapture(NodeRuntime rt, cudaError_t (*real)(cudaStream_t, cudaStreamCaptureMode),
                                cudaStream_t s, cudaStreamCaptureMode m, cudaStream_t named) {
  CaptureBeginning();
  cudaError_t r = real(s, m);
  CaptureBegun(rt, named, r);
  return r;
}
cudaError_t cudaStreamBeginCapture(NodeRuntime rt, Real<decltype(&::cudaStreamBeginCapture)> real,
                                   cudaStream_t s, cudaStreamCaptureMode m) {
  return BeginCapture(rt, real, s, m, s);
}
cudaError_t cudaStreamBeginCapture_ptsz(NodeRuntime rt, Real<decltype(&::cudaStreamBeginCapture_ptsz)> real,
                                        cudaStream_t s, cudaStreamCaptureMode m) {
  return BeginCapture(rt, real, s, m, PerThread(s));
}
// Into the program's graph (CUDA 12.3+): the captured work is added to it, and EndCapture returns it.
static cudaError_t BeginCaptureToGraph(NodeRuntime rt,
                                       cudaError_t (*real)(cudaStream_t, cudaGraph_t, const cudaGraphNode_t*,
                                                           const cudaGraphEdgeData*, size_t, cudaStreamCaptureMode),
                                       cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* d,
                                       const cudaGraphEdgeData* e, size_t n, cudaStreamCaptureMode m,
                                       cudaStream_t named) {
  CaptureBeginning();
  cudaError_t r = real(s, g, d, e, n, m);
  CaptureBegun(rt, named, r, g);
  return r;
}
cudaError_t cudaStreamBeginCaptureToGraph(NodeRuntime rt, Real<decltype(&::cudaStreamBeginCaptureToGraph)> real,
                                          cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* d,
                                          const cudaGraphEdgeData* e, size_t n, cudaStreamCaptureMode m) {
  return BeginCaptureToGraph(rt, real, s, g, d, e, n, m, s);
}
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(NodeRuntime rt,
                                               Real<decltype(&::cudaStreamBeginCaptureToGraph_ptsz)> real,
                                               cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* d,
                                               const cudaGraphEdgeData* e, size_t n, cudaStreamCaptureMode m) {
  return BeginCaptureToGraph(rt, real, s, g, d, e, n, m, PerThread(s));
}
// A capture ends with EndCapture whether it succeeded or was invalidated; IllegalState: none was
// running (the driver's codes are the same).
static cudaError_t EndCapture(NodeRuntime rt, cudaError_t (*real)(cudaStream_t, cudaGraph_t*), cudaStream_t s,
                              cudaGraph_t* g, cudaStream_t named) {
  unsigned long long id = graphs::AnyCapture() ? graphs::CaptureIdOf(rt, named) : 0;
  cudaError_t r = real(s, g);
  CaptureEnding(named, id, r, g);
  return r;
}
cudaError_t cudaStreamEndCapture(NodeRuntime rt, Real<decltype(&::cudaStreamEndCapture)> real, cudaStream_t s,
                                 cudaGraph_t* g) {
  return EndCapture(rt, real, s, g, s);
}
cudaError_t cudaStreamEndCapture_ptsz(NodeRuntime rt, Real<decltype(&::cudaStreamEndCapture_ptsz)> real,
                                      cudaStream_t s, cudaGraph_t* g) {
  return EndCapture(rt, real, s, g, PerThread(s));
}

// ================================================================================================
// Graphs (cudart 12 and 13): which exec replays which capture, and each launch of one.

cudaError_t cudaGraphInstantiate(NodeRuntime, Real<decltype(&::cudaGraphInstantiate)> real, cudaGraphExec_t* e,
                                 cudaGraph_t g, unsigned long long f) {
  cudaError_t r = real(e, g, f);
  graphs::Instantiated(r, e, g);
  return r;
}
cudaError_t cudaGraphInstantiateWithFlags(NodeRuntime, Real<decltype(&::cudaGraphInstantiateWithFlags)> real,
                                          cudaGraphExec_t* e, cudaGraph_t g, unsigned long long f) {
  cudaError_t r = real(e, g, f);
  graphs::Instantiated(r, e, g);
  return r;
}
cudaError_t cudaGraphInstantiateWithParams(NodeRuntime, Real<decltype(&::cudaGraphInstantiateWithParams)> real,
                                           cudaGraphExec_t* e, cudaGraph_t g, cudaGraphInstantiateParams* p) {
  cudaError_t r = real(e, g, p);
  graphs::Instantiated(r, e, g);
  return r;
}
cudaError_t cudaGraphInstantiateWithParams_ptsz(NodeRuntime,
                                                Real<decltype(&::cudaGraphInstantiateWithParams_ptsz)> real,
                                                cudaGraphExec_t* e, cudaGraph_t g, cudaGraphInstantiateParams* p) {
  cudaError_t r = real(e, g, p);
  graphs::Instantiated(r, e, g);
  return r;
}
cudaError_t cudaGraphExecUpdate(NodeRuntime, Real<decltype(&::cudaGraphExecUpdate)> real, cudaGraphExec_t e,
                                cudaGraph_t g, cudaGraphExecUpdateResultInfo* i) {
  cudaError_t r = real(e, g, i);
  graphs::ExecUpdated(r, e, g);
  return r;
}
// Forgotten before the real call: afterwards the handle may already be reused.
cudaError_t cudaGraphExecDestroy(NodeRuntime, Real<decltype(&::cudaGraphExecDestroy)> real, cudaGraphExec_t e) {
  graphs::ExecDestroyed(cudaSuccess, e);
  return real(e);
}
cudaError_t cudaGraphDestroy(NodeRuntime, Real<decltype(&::cudaGraphDestroy)> real, cudaGraph_t g) {
  graphs::GraphDestroyed(cudaSuccess, g);
  return real(g);
}

// Graphs built node by node: a copy node between devices, a child graph, a clone (graphs.h).
static const void* At(const cudaPitchedPtr& p, const cudaPos& pos) {
  return static_cast<const char*>(p.ptr) + pos.z * p.pitch * p.ysize + pos.y * p.pitch + pos.x;
}
// A 3D copy node (its own call's or a generic node's parameters); arrays and host sides move
// nothing between GPUs.
static void MemcpyNodeAdded(NodeRuntime rt, uint8_t api, cudaGraph_t g, const cudaMemcpy3DParms* p, cudaError_t r) {
  if (r == cudaSuccess && p != nullptr && p->srcArray == nullptr && p->dstArray == nullptr && !HostSide(p->kind))
    RecordGraphNodeCopy(rt,
                        ApiCopy{api, 0, At(p->dstPtr, p->dstPos), At(p->srcPtr, p->srcPos), -1, -1,
                                static_cast<uint64_t>(p->extent.width) * p->extent.height * p->extent.depth, nullptr},
                        g, r);
}
cudaError_t cudaGraphAddMemcpyNode(NodeRuntime rt, Real<decltype(&::cudaGraphAddMemcpyNode)> real, cudaGraphNode_t* n,
                                   cudaGraph_t g, const cudaGraphNode_t* d, size_t nd, const cudaMemcpy3DParms* p) {
  cudaError_t r = real(n, g, d, nd, p);
  MemcpyNodeAdded(rt, P2PTRACE_API_cudaGraphAddMemcpyNode, g, p, r);
  return r;
}
// The generic node call (CUDA 12.2+): a copy node or a child graph is followed as its own call is.
static void GenericNodeAdded(NodeRuntime rt, cudaGraph_t g, const cudaGraphNodeParams* p, cudaError_t r) {
  if (r != cudaSuccess || p == nullptr) return;
  if (p->type == cudaGraphNodeTypeMemcpy) MemcpyNodeAdded(rt, P2PTRACE_API_cudaGraphAddNode, g, &p->memcpy.copyParams, r);
  if (p->type == cudaGraphNodeTypeGraph) graphs::ChildAdded(r, g, p->graph.graph);
}
cudaError_t cudaGraphAddNode12(NodeRuntime rt, GraphAddNode12Fn real, cudaGraphNode_t* n, cudaGraph_t g,
                               const cudaGraphNode_t* d, size_t nd, cudaGraphNodeParams* p) {
  cudaError_t r = real(n, g, d, nd, p);
  GenericNodeAdded(rt, g, p, r);
  return r;
}
cudaError_t cudaGraphAddNode_v2(NodeRuntime rt, Real<decltype(&::cudaGraphAddNode_v2)> real, cudaGraphNode_t* n,
                                cudaGraph_t g, const cudaGraphNode_t* d, const cudaGraphEdgeData* e, size_t nd,
                                cudaGraphNodeParams* p) {
  cudaError_t r = real(n, g, d, e, nd, p);
  GenericNodeAdded(rt, g, p, r);
  return r;
}
cudaError_t cudaGraphAddNode(NodeRuntime rt, Real<decltype(&::cudaGraphAddNode)> real, cudaGraphNode_t* n,
                             cudaGraph_t g, const cudaGraphNode_t* d, const cudaGraphEdgeData* e, size_t nd,
                             cudaGraphNodeParams* p) {
  cudaError_t r = real(n, g, d, e, nd, p);
  GenericNodeAdded(rt, g, p, r);
  return r;
}
cudaError_t cudaGraphAddMemcpyNode1D(NodeRuntime rt, Real<decltype(&::cudaGraphAddMemcpyNode1D)> real,
                                     cudaGraphNode_t* n, cudaGraph_t g, const cudaGraphNode_t* d, size_t nd, void* dst,
                                     const void* src, size_t count, cudaMemcpyKind kind) {
  cudaError_t r = real(n, g, d, nd, dst, src, count, kind);
  if (r == cudaSuccess && !HostSide(kind))
    RecordGraphNodeCopy(rt, ApiCopy{P2PTRACE_API_cudaGraphAddMemcpyNode1D, 0, dst, src, -1, -1, count, nullptr}, g, r);
  return r;
}
cudaError_t cudaGraphCreate(NodeRuntime, Real<decltype(&::cudaGraphCreate)> real, cudaGraph_t* g, unsigned int flags) {
  cudaError_t r = real(g, flags);
  graphs::GraphCreated(r, g);
  return r;
}
cudaError_t cudaGraphAddChildGraphNode(NodeRuntime, Real<decltype(&::cudaGraphAddChildGraphNode)> real,
                                       cudaGraphNode_t* n, cudaGraph_t g, const cudaGraphNode_t* d, size_t nd,
                                       cudaGraph_t child) {
  cudaError_t r = real(n, g, d, nd, child);
  graphs::ChildAdded(r, g, child);
  return r;
}
cudaError_t cudaGraphClone(NodeRuntime, Real<decltype(&::cudaGraphClone)> real, cudaGraph_t* clone, cudaGraph_t g) {
  cudaError_t r = real(clone, g);
  graphs::Cloned(r, clone, g);
  return r;
}

// Changes to nodes that may already be recorded (cuda_hooks.h).
#define P2PTRACE_RUNTIME_ALTER_HOOK(name, exec, params, args, relevant) \
  P2PTRACE_ALTER_HOOK(cudaError_t, ([[maybe_unused]] NodeRuntime rt, Real<decltype(&::name)> real), name, exec, params, args, relevant)
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphExecMemcpyNodeSetParams, e, (cudaGraphExec_t e, cudaGraphNode_t n, const cudaMemcpy3DParms* p),
                    (e, n, p), true)
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphExecMemcpyNodeSetParams1D, e,
                    (cudaGraphExec_t e, cudaGraphNode_t n, void* dst, const void* src, size_t count, cudaMemcpyKind k),
                    (e, n, dst, src, count, k), true)
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphExecNodeSetParams, e, (cudaGraphExec_t e, cudaGraphNode_t n, cudaGraphNodeParams* p),
                    (e, n, p), p != nullptr && ReplayedNodeType(p->type))
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphExecChildGraphNodeSetParams, e, (cudaGraphExec_t e, cudaGraphNode_t n, cudaGraph_t c),
                    (e, n, c), true)
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphNodeSetEnabled, e, (cudaGraphExec_t e, cudaGraphNode_t n, unsigned int on), (e, n, on),
                    graphs::ExecGraph(e) != 0 && ReplayedNode(rt, n))
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphMemcpyNodeSetParams, nullptr, (cudaGraphNode_t n, const cudaMemcpy3DParms* p), (n, p), true)
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphMemcpyNodeSetParams1D, nullptr,
                    (cudaGraphNode_t n, void* dst, const void* src, size_t count, cudaMemcpyKind k),
                    (n, dst, src, count, k), true)
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphNodeSetParams, nullptr, (cudaGraphNode_t n, cudaGraphNodeParams* p), (n, p),
                    p != nullptr && ReplayedNodeType(p->type))
// Of any type: asking a node's type before it is gone could fail, and leave the runtime's last error.
P2PTRACE_RUNTIME_ALTER_HOOK(cudaGraphDestroyNode, nullptr, (cudaGraphNode_t n), (n), true)
#undef P2PTRACE_RUNTIME_ALTER_HOOK

// A launch of an exec the shim knows nothing of costs one lookup.
inline __attribute__((always_inline)) cudaError_t Launch(NodeRuntime rt, cudaError_t (*real)(cudaGraphExec_t, cudaStream_t),
                                                         cudaGraphExec_t e, cudaStream_t s, cudaStream_t named) {
  uint32_t id = graphs::ExecGraph(e);
  if (__builtin_expect(id == 0, 1)) return real(e, s);
  if (__builtin_expect(detail::g_sample.enabled || graphs::AnyCapture(), 0)) {
    const BoundCall<decltype(real), cudaGraphExec_t, cudaStream_t> call{real, {e, s}};
    return TracedGraphLaunch(rt, id, e, named, &decltype(call)::Invoke, &call);
  }
  cudaError_t r = real(e, s);
  graphs::RecordLaunch(id, e, named, r, nullptr);
  return r;
}
cudaError_t cudaGraphLaunch(NodeRuntime rt, Real<decltype(&::cudaGraphLaunch)> real, cudaGraphExec_t e, cudaStream_t s) {
  return Launch(rt, real, e, s, s);
}
cudaError_t cudaGraphLaunch_ptsz(NodeRuntime rt, Real<decltype(&::cudaGraphLaunch_ptsz)> real, cudaGraphExec_t e,
                                 cudaStream_t s) {
  return Launch(rt, real, e, s, PerThread(s));
}

// ================================================================================================
// Peer capability and access

cudaError_t cudaDeviceCanAccessPeer(NodeRuntime rt, Real<decltype(&::cudaDeviceCanAccessPeer)> real, int* can,
                                    int dev, int peer) {
  cudaError_t r = real(can, dev, peer);
  if (ReadyAfter(rt, r))
    RecordPeerCall(P2PTRACE_API_cudaDeviceCanAccessPeer, dev, peer, r, r == cudaSuccess && can ? *can : -1, 0);
  if (r == cudaSuccess) PreflightFromCuda(rt);
  return r;
}

cudaError_t cudaDeviceGetP2PAttribute(NodeRuntime rt, Real<decltype(&::cudaDeviceGetP2PAttribute)> real,
                                      int* v, cudaDeviceP2PAttr a, int src, int dst) {
  cudaError_t r = real(v, a, src, dst);
  if (ReadyAfter(rt, r))
    RecordPeerCall(P2PTRACE_API_cudaDeviceGetP2PAttribute, src, dst, r, r == cudaSuccess && v ? *v : -1,
              static_cast<int>(a));
  if (r == cudaSuccess) PreflightFromCuda(rt);
  return r;
}

cudaError_t cudaDeviceEnablePeerAccess(NodeRuntime rt, Real<decltype(&::cudaDeviceEnablePeerAccess)> real,
                                       int peer, unsigned int flags) {
  cudaError_t r = real(peer, flags);
  if (!ReadyAfter(rt, r)) return r;
  if (r == cudaSuccess || r == cudaErrorPeerAccessAlreadyEnabled) PreflightFromCuda(rt);
  int d = AnsweredDevice(rt);
  // 704 means it was already on: either way the mapping exists now.
  if ((r == cudaSuccess || r == cudaErrorPeerAccessAlreadyEnabled) && ValidDevice(d) && ValidDevice(peer))
    PeerMappingChanged(d, peer, kPeerByApi, true);
  RecordPeerCall(P2PTRACE_API_cudaDeviceEnablePeerAccess, d, peer, r, static_cast<int>(flags), 0);
  return r;
}

cudaError_t cudaDeviceDisablePeerAccess(NodeRuntime rt, Real<decltype(&::cudaDeviceDisablePeerAccess)> real,
                                        int peer) {
  cudaError_t r = real(peer);
  if (!ReadyAfter(rt, r)) return r;
  int d = AnsweredDevice(rt);
  if ((r == cudaSuccess || r == cudaErrorPeerAccessNotEnabled) && ValidDevice(d) && ValidDevice(peer))
    PeerMappingChanged(d, peer, kPeerByApi, false);
  RecordPeerCall(P2PTRACE_API_cudaDeviceDisablePeerAccess, d, peer, r, 0, 0);
  return r;
}

// Access to a pool's memory granted device by device (device_memory.h): for the pair, not per pointer.
cudaError_t cudaMemPoolSetAccess(NodeRuntime rt, Real<decltype(&::cudaMemPoolSetAccess)> real,
                                 cudaMemPool_t pool, const cudaMemAccessDesc* d, size_t n) {
  cudaError_t r = real(pool, d, n);
  NoteAccessList(rt, P2PTRACE_API_cudaMemPoolSetAccess, PoolDevice(pool), d, n, r);
  return r;
}

// ================================================================================================
// IPC

cudaError_t cudaIpcGetMemHandle(NodeRuntime rt, Real<decltype(&::cudaIpcGetMemHandle)> real,
                                cudaIpcMemHandle_t* h, void* p) {
  cudaError_t r = real(h, p);
  if (ReadyAfter(rt, r)) RecordIpcCall(P2PTRACE_API_cudaIpcGetMemHandle, AnsweredDevice(rt), MemoryMap::Lookup(p), r, p);
  return r;
}

cudaError_t cudaIpcOpenMemHandle(NodeRuntime rt, Real<decltype(&::cudaIpcOpenMemHandle)> real, void** p,
                                 cudaIpcMemHandle_t h, unsigned int f) {
  cudaError_t r = real(p, h, f);
  if (!ReadyAfter(rt, r)) return r;
  int d = AnsweredDevice(rt), owner = -1;
  if (r == cudaSuccess && p != nullptr) {
    cudaPointerAttributes a{};
    if (static_cast<const CudaRuntime&>(rt).PointerGetAttributes(&a, *p) == cudaSuccess && a.type == cudaMemoryTypeDevice) {
      owner = a.device;
      MemoryMap::Learn(*p, owner);
      // cudaIpcMemLazyEnablePeerAccess maps the owner's memory into this device: copies go direct.
      if ((f & cudaIpcMemLazyEnablePeerAccess) && ValidDevice(d) && ValidDevice(owner) && owner != d)
        PeerMappingChanged(d, owner, kPeerByIpc, true);
    }
  }
  RecordIpcCall(P2PTRACE_API_cudaIpcOpenMemHandle, d, owner, r, p ? *p : nullptr);
  return r;
}

cudaError_t cudaIpcCloseMemHandle(NodeRuntime rt, Real<decltype(&::cudaIpcCloseMemHandle)> real, void* p) {
  int owner = MemoryMap::Lookup(p);
  cudaError_t r = real(p);
  if (ReadyAfter(rt, r)) RecordIpcCall(P2PTRACE_API_cudaIpcCloseMemHandle, AnsweredDevice(rt), owner, r, p);
  return r;
}

// ================================================================================================
// Driver entry points

#define P2PTRACE_ENTRY_POINT_HOOK(name, params, args)                                                  \
  cudaError_t name(NodeRuntime, Real<decltype(&::name)> real, const char* s, void** fn, P2PTRACE_UNPAREN params) { \
    cudaError_t r = real(s, fn, P2PTRACE_UNPAREN args);                                                \
    if (r == cudaSuccess && fn != nullptr) *fn = DriverWrapperFor(*fn);                                 \
    return r;                                                                                            \
  }
P2PTRACE_ENTRY_POINT_HOOK(cudaGetDriverEntryPoint, (unsigned long long f, cudaDriverEntryPointQueryResult* q), (f, q))
P2PTRACE_ENTRY_POINT_HOOK(cudaGetDriverEntryPoint_ptsz, (unsigned long long f, cudaDriverEntryPointQueryResult* q),
                          (f, q))
P2PTRACE_ENTRY_POINT_HOOK(cudaGetDriverEntryPointByVersion,
                          (unsigned int v, unsigned long long f, cudaDriverEntryPointQueryResult* q), (v, f, q))
P2PTRACE_ENTRY_POINT_HOOK(cudaGetDriverEntryPointByVersion_ptsz,
                          (unsigned int v, unsigned long long f, cudaDriverEntryPointQueryResult* q), (v, f, q))
#undef P2PTRACE_ENTRY_POINT_HOOK

}  // namespace hooks
}  // namespace p2ptrace::shim

P2PTRACE_CUDA_STATE_FUNCTIONS(P2PTRACE_WRAP_11)
P2PTRACE_CUDA_STATE_FUNCTIONS(P2PTRACE_WRAP_12)
P2PTRACE_CUDA_STATE_FUNCTIONS(P2PTRACE_WRAP_13)
P2PTRACE_CUDA_GRAPH_FUNCTIONS(P2PTRACE_WRAP_12)
P2PTRACE_CUDA_GRAPH_FUNCTIONS(P2PTRACE_WRAP_13)
// cudaGraphAddNode: CUDA 12.2's four-argument form keeps the plain name in cudart 12 (12.3 added
// _v2 with edge data), which is cudart 13's plain form.
P2PTRACE_WRAP_AS(p2ptrace::shim::Node::kCudart12, 12, "@libcudart.so.12", cudaGraphAddNode, cudaGraphAddNode12,
                 p2ptrace::shim::hooks::GraphAddNode12Fn,
                 (cudaGraphNode_t * n, cudaGraph_t g, const cudaGraphNode_t* d, size_t nd, cudaGraphNodeParams* p),
                 (n, g, d, nd, p))
P2PTRACE_WRAP_12(cudaGraphAddNode_v2,
                 (cudaGraphNode_t * n, cudaGraph_t g, const cudaGraphNode_t* d, const cudaGraphEdgeData* e, size_t nd,
                  cudaGraphNodeParams* p),
                 (n, g, d, e, nd, p))
P2PTRACE_WRAP_13(cudaGraphAddNode,
                 (cudaGraphNode_t * n, cudaGraph_t g, const cudaGraphNode_t* d, const cudaGraphEdgeData* e, size_t nd,
                  cudaGraphNodeParams* p),
                 (n, g, d, e, nd, p))
