// What the shim's CUDA hooks share with the rest of the shim. Each hook (cuda_hooks.cc) is
// hooks::name(runtime, real function, the call's arguments) → the real function's result.
#pragma once

#include <cstdint>
#include <tuple>

#include "shim/interpose/cuda_functions.h"
#include "shim/interpose/cuda_graph_functions.h"
#include "shim/base/cuda_runtime.h"
#include "shim/record/graphs.h"
#include "shim/record/process_uses.h"
#include "p2ptrace/trace_format.h"

namespace p2ptrace::shim {

template <typename F>
using Real = F;

// --- What the copy engine (cuda_copies.cc) shares with the other hooks, the driver's included -------

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
// The real call, made exactly once by shared code that knows neither the function nor its
// arguments (TraceApiCopy, TracedGraphLaunch): invoke(call) returns its result.
using InvokeReal = cudaError_t (*)(const void* call);
// A real call bound to its arguments: BoundCall<F, A...>{real, {args...}} with &BoundCall::Invoke.
template <typename F, typename... A>
struct BoundCall {
  F real;
  std::tuple<A...> args;
  static cudaError_t Invoke(const void* call) {
    const auto& k = *static_cast<const BoundCall*>(call);
    return static_cast<cudaError_t>(std::apply(k.real, k.args));  // CUresult: the same codes
  }
};
// Counts, records and samples for timing a copy through the runtime copies' own PairCopy (one pair
// counter per pair whichever API moved the bytes; capture-aware), without their fast path. Returns
// the real call's result.
cudaError_t TraceApiCopy(const CudaRuntime& rt, const ApiCopy& c, InvokeReal invoke, const void* call);
// Whether to record after a call of rt that returned r: opens the trace, describes rt in it.
bool ReadyAfter(const CudaRuntime& rt, cudaError_t r);
// rt's current device when rt is known to answer, else -1.
int AnsweredDevice(const CudaRuntime& rt);
// How a peer mapping came to be: cudaDeviceEnablePeerAccess/cuCtxEnablePeerAccess, an IPC handle
// opened with lazy peer access, access granted to mapped or pool memory (device_memory.h).
enum PeerMapping : uint8_t { kPeerByApi = 1, kPeerByIpc = 2, kPeerByAccess = 4 };
// A peer mapping from `from` to `to` made (set) or undone, by `how`: the pair's copies go direct
// while either side maps the other. Ignored unless both are valid, different devices.
void PeerMappingChanged(int from, int to, uint8_t how, bool set);
// The device a stream's work runs on, when the shim knows the stream (its current device for the
// default streams); -1 otherwise.
int StreamDeviceOf(const CudaRuntime& rt, cudaStream_t s);
void RecordPeerCall(uint8_t api, int device, int peer, cudaError_t r, int value, int attr);
void RecordIpcCall(uint8_t api, int device, int owner, cudaError_t r, const void* address);
// rt's current device, asked (only after one of rt's calls succeeded); -1 when it cannot say.
int CurrentDevice(const CudaRuntime& rt);
// A copy of this kind has a host side: not peer traffic.
inline bool HostSide(cudaMemcpyKind k) {
  return k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToHost || k == cudaMemcpyHostToHost;
}
inline bool ValidDevice(int d) { return d >= 0 && d < P2PTRACE_MAX_DEVICES; }
// In the _ptsz/_ptds entry points stream 0 is the per-thread default stream (the driver's
// CU_STREAM_PER_THREAD is the same handle).
inline cudaStream_t PerThread(cudaStream_t s) { return s == nullptr ? cudaStreamPerThread : s; }
// A copy added to `graph` as a node through any API (the call returned r): recorded with the
// graph's id when it is between two devices, as a captured copy (graphs.h).
void RecordGraphNodeCopy(const CudaRuntime& rt, const ApiCopy& a, cudaGraph_t graph, cudaError_t r);
// Whether a change to graph node `n` can change what replays move: a copy or a child graph node
// (one whose type the runtime cannot say counts too); for node parameters, by their type field.
// Ask only about a node a call just used successfully (the query then cannot fail).
bool ReplayedNode(const CudaRuntime& rt, cudaGraphNode_t n);
inline bool ReplayedNodeType(int type) { return type == cudaGraphNodeTypeMemcpy || type == cudaGraphNodeTypeGraph; }
// Streams made and destroyed through any API: copies on a known stream can be timed.
void StreamCreated(const CudaRuntime& rt, cudaError_t r, const cudaStream_t* s);
void StreamDestroying(cudaStream_t s);
// Stream captures and graph launches, whichever API (graphs.h says what is recorded). A capture
// begins: CaptureBeginning() before the real call, CaptureBegun(rt, stream, r) after it; it ends:
// CaptureEnding(stream, graphs::CaptureIdOf(rt, stream) read before it, r, graph) after the real
// end call. `stream` names the per-thread stream by
// its handle. A launch of an exec whose graph id is not 0 goes to TracedGraphLaunch when sampling
// or while a capture runs, else is recorded with graphs::RecordLaunch.
void CaptureBeginning();
void CaptureBegun(const CudaRuntime& rt, cudaStream_t stream, cudaError_t r, cudaGraph_t into = nullptr);
void CaptureEnding(cudaStream_t stream, unsigned long long runtime_id, cudaError_t r, const cudaGraph_t* graph);
cudaError_t TracedGraphLaunch(const CudaRuntime& rt, uint32_t id, cudaGraphExec_t exec, cudaStream_t stream,
                              InvokeReal invoke, const void* call);
// The shim's wrapper of a driver function handed out by address (cuGetProcAddress,
// cudaGetDriverEntryPoint*), or `fn` itself when the shim wraps no function there.
void* DriverWrapperFor(void* fn);

}  // namespace p2ptrace::shim

// A hook of either API for a change to a node that may already be recorded: the copies replays
// count stay what was recorded, and the trace says a node changed (graphs.h NodeAltered; nothing
// when the shim recorded nothing). `head`: the hook's leading parameters, in parentheses (the
// runtime's take its node first); `exec`: the exec changed, or nullptr for a graph's node `n`;
// `relevant`: whether the change can alter what replays move.
#define P2PTRACE_ALTER_HOOK(Ret, head, name, exec, params, args, relevant)                     \
  Ret name(P2PTRACE_UNPAREN head, P2PTRACE_UNPAREN params) {                                \
    Ret r = real(P2PTRACE_UNPAREN args);                                                    \
    if (r == Ret{} && (relevant)) graphs::NodeAltered(exec, n, P2PTRACE_API_##name, cudaSuccess); \
    return r;                                                                               \
  }
