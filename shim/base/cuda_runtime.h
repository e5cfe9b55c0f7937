// The real runtime functions the shim itself calls, per runtime node, so that its own calls go to
// the same runtime as the call it intercepted (never mixing cudart 12 and 13 state). The driver's
// node (a program that uses only libcuda.so.1) has the same table, made of driver calls.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>

#include "shim/base/bind.h"

namespace p2ptrace::shim {

struct CudaRuntime {
  Node node;
  cudaError_t (*GetDevice)(int*);
  cudaError_t (*SetDevice)(int);
  cudaError_t (*GetDeviceCount)(int*);
  cudaError_t (*DeviceGetPCIBusId)(char*, int, int);
  cudaError_t (*PointerGetAttributes)(cudaPointerAttributes*, const void*);
  cudaError_t (*EventCreateWithFlags)(cudaEvent_t*, unsigned int);
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*EventQuery)(cudaEvent_t);
  cudaError_t (*EventElapsedTime)(float*, cudaEvent_t, cudaEvent_t);
  cudaError_t (*EventDestroy)(cudaEvent_t);
  cudaError_t (*RuntimeGetVersion)(int*);
  cudaError_t (*DriverGetVersion)(int*);
  bool complete;  // every pointer above was found
  // For the job-start check; may be null.
  cudaError_t (*CanAccessPeer)(int*, int, int);
  cudaError_t (*GetP2PAttribute)(int*, cudaDeviceP2PAttr, int, int);
  // cudaStreamGetCaptureInfo (the driver: cuStreamGetCaptureInfo), whose signature depends on the
  // node (graphs.cc); null when absent.
  void* StreamGetCaptureInfo;
  // cudaGraphNodeGetType (the driver: cuGraphNodeGetType, same values); null when absent.
  cudaError_t (*GraphNodeGetType)(cudaGraphNode_t, cudaGraphNodeType*);
  // Set when its library was unloaded (RetireRuntime, under UnloadMutex()): the table is then
  // replaced, never freed, and a timing in flight that still holds it drops its events.
  std::atomic<bool> retired;
};

const CudaRuntime& ResolveRuntime(Node node);
extern std::atomic<const CudaRuntime*> g_runtimes[static_cast<int>(Node::kCount)];

// Its library was unloaded: the node's table is retired and resolved again at the node's next call.
void RetireRuntime(Node node);

// Resolved at the first intercepted call of that node (again after the library was unloaded).
inline const CudaRuntime& Runtime(Node node) {
  const CudaRuntime* rt = g_runtimes[static_cast<int>(node)].load(std::memory_order_acquire);
  return __builtin_expect(rt != nullptr, 1) ? *rt : ResolveRuntime(node);
}

}  // namespace p2ptrace::shim
