// CUDA graphs (trace format 1.5, trace_format.h): which stream captures are running, the graph id
// of each, and which instantiated graph (exec) replays which id. A copy or NCCL operation captured
// into a graph is recorded once, flagged, with the graph id; each launch of an exec of that graph
// is one GRAPH record, and readers replay the id's captured work once per launch.
//
// The runtime's and the driver's launch wrappers share this: a launch is
//   uint32_t id = graphs::ExecGraph(exec);            // 0: not a graph the shim saw captured
//   if (id == 0) return real(...);
//   sampling or a capture running: TracedGraphLaunch (cuda_hooks.h: timing, a launch into a capture)
//   else r = real(...); graphs::RecordLaunch(id, exec, stream, r, nullptr);
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <cstdint>

#include "shim/base/cuda_runtime.h"
#include "shim/record/copy_timer.h"

namespace p2ptrace::shim::graphs {

// Stream captures begun and not yet ended, process-wide: while zero nothing can be captured, and
// that one relaxed load is all an NCCL operation pays for graphs (a copy's fast path pays nothing:
// it is shut while a capture runs, cuda_hooks.cc ShutFastPairs).
// (Hidden: one PC-relative load, no GOT.)
extern std::atomic<int> g_captures __attribute__((visibility("hidden")));
inline bool AnyCapture() { return g_captures.load(std::memory_order_relaxed) != 0; }

// Around cudaStreamBeginCapture: Starting before the real call (so that work issued once it
// returns sees a capture running), Started after it with its result. `into`: the program's graph a
// capture appends to (cudaStreamBeginCaptureToGraph), null for a capture that makes a new graph.
void CaptureStarting();
// Held by a thread of the shim's own while it records or queries an event outside the program's
// calls (the NCCL watchdog), having seen no capture running: CaptureStarting waits for it, so that
// a capture never begins in the middle (an event there would join or invalidate it). Never destroyed.
std::mutex& CaptureGate();
void CaptureStarted(const CudaRuntime& rt, cudaStream_t origin, cudaError_t r, cudaGraph_t into = nullptr);
// The runtime's id of the capture `stream` takes part in (0: none, or it cannot say), read before
// the end call to tell apart captures on two threads' per-thread streams (one handle).
unsigned long long CaptureIdOf(const CudaRuntime& rt, cudaStream_t stream);
// After an end call on `origin` that ended its capture (graph: what it returned, null when it
// failed); runtime_id from CaptureIdOf. False when the shim did not see that capture begin.
bool CaptureEnded(cudaStream_t origin, unsigned long long runtime_id, cudaError_t r, cudaGraph_t graph);

// Whether `stream` is capturing now (its own capture or one it joined through an event wait),
// asked of the runtime; *graph_id is the shim's id of that capture (0: one the shim did not see
// begin). Call only after a call on `stream` succeeded (the query then cannot fail).
bool CapturedOn(const CudaRuntime& rt, cudaStream_t stream, uint32_t* graph_id);

// Whether `stream` takes part in a capture, seen by the shim or not, as the runtime says now; true
// when it cannot say (nothing is then recorded there).
bool StreamCapturing(const CudaRuntime& rt, cudaStream_t stream);

// Instantiation, update and destruction, after the real call returned r.
void Instantiated(cudaError_t r, const cudaGraphExec_t* exec, cudaGraph_t graph);
void ExecUpdated(cudaError_t r, cudaGraphExec_t exec, cudaGraph_t graph);
void ExecDestroyed(cudaError_t r, cudaGraphExec_t exec);
void GraphDestroyed(cudaError_t r, cudaGraph_t graph);

// Graphs built node by node (trace minor 6). NodeAdded: the graph id a copy just added to `graph` as
// a node is recorded with (a new one, INCLUDE-ing the old, when the graph's work was already taken
// by an exec, a clone or a parent). ChildAdded and Cloned, after the real call returned r.
uint32_t NodeAdded(cudaGraph_t graph);
// A graph just made (cudaGraphCreate): whatever the shim knew of an earlier graph at that handle is gone.
void GraphCreated(cudaError_t r, const cudaGraph_t* graph);
// An exec of graph id exec_graph_id launched into a stream capturing capture_id: the capture's graph
// holds the exec's work (INCLUDE).
void LaunchCaptured(uint32_t capture_id, uint32_t exec_graph_id, const void* exec);
void ChildAdded(cudaError_t r, cudaGraph_t parent, cudaGraph_t child);
void Cloned(cudaError_t r, const cudaGraph_t* clone, cudaGraph_t original);

// A node of a recorded graph may no longer be what was recorded (trace minor 7): its parameters
// changed, or it was disabled or removed, by `api` (p2ptrace_api), in `exec` (null: in its graph).
// Replays still count what was recorded, and the report says so. Written only when it can matter:
// for an exec, one that replays recorded work; for a graph's node, while any graph holds some.
void NodeAltered(const void* exec, const void* node, int api, cudaError_t r);

// The graph id an exec replays, lock-free; 0 for an exec of a graph the shim did not see captured.
uint32_t ExecGraph(const void* exec);

// Whether this launch is timed (P2PTRACE_SAMPLE, like NCCL operations): then the start event is
// recorded on `stream` (on `device`). False when not sampled or not timeable.
bool BeginLaunchTiming(const CudaRuntime& rt, int device, cudaStream_t stream, TimedCopy* t);
// The LAUNCH record of exec (of graph_id) on stream, which returned `result` (a cudaError_t or
// CUresult: equal codes); `timing` from BeginLaunchTiming, or null.
void RecordLaunch(uint32_t graph_id, const void* exec, const void* stream, int result, TimedCopy* timing);

}  // namespace p2ptrace::shim::graphs
