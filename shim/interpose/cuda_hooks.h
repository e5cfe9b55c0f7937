// What the shim's CUDA hooks share with the rest of the shim. Each hook (cuda_hooks.cc) is
// hooks::name(runtime, real function, the call's arguments) → the real function's result.
#pragma once

#include "shim/interpose/cuda_functions.h"
#include "shim/interpose/cuda_graph_functions.h"
#include "shim/interpose/cuda_runtime.h"

#define P2PTRACE_UNPAREN(...) __VA_ARGS__

namespace p2ptrace::shim {

template <typename F>
using Real = F;

// True once this runtime answered one of the application's calls successfully: from then on the
// shim's own calls to it cannot fail and leave an error behind.
bool RuntimeAnswered(const CudaRuntime& rt);

// --- What the driver's hooks (driver_hooks.cc) share with the runtime's ---------------------------

// A copy made through another API than the runtime's: what it copies. A device of -1 is found from
// its pointer (the shim's map, else the API's own pointer attributes once the copy succeeded).
struct ApiCopy {
  uint8_t api;     // p2ptrace_api
  uint32_t flags;  // p2ptrace_copy_flag
  const void* dst;
  const void* src;
  int dst_dev = -1, src_dev = -1;
  uint64_t bytes = 0;
  cudaStream_t stream = nullptr;
};
// The real call, made exactly once by TraceApiCopy: invoke(call) returns its result.
using InvokeReal = cudaError_t (*)(const void* call);
// Counts, records and samples for timing a copy through the runtime copies' own PairCopy (one pair
// counter per pair whichever API moved the bytes; capture-aware), without their fast path. Returns
// the real call's result.
cudaError_t TraceApiCopy(const CudaRuntime& rt, const ApiCopy& c, InvokeReal invoke, const void* call);
// Whether to record after a call of rt that returned r: opens the trace, describes rt in it.
bool ReadyAfter(const CudaRuntime& rt, cudaError_t r);
// rt's current device when rt is known to answer, else -1.
int AnsweredDevice(const CudaRuntime& rt);
// A peer mapping from `from` to `to` appeared (set) or went away.
void PeerMappingChanged(int from, int to, bool set);
void RecordPeerCall(uint8_t api, int device, int peer, cudaError_t r, int value, int attr);
// The shim's wrapper of a driver function handed out by address (cuGetProcAddress,
// cudaGetDriverEntryPoint*), or `fn` itself when the shim wraps no function there.
void* DriverWrapperFor(void* fn);
// The driver wrappers' cached real functions, forgotten when libcuda is unloaded (driver_hooks.cc).
void ForgetDriverFunctions();


}  // namespace p2ptrace::shim
