#include "shim/record/graphs.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shim/record/handle_table.h"
#include "shim/record/trace_dir.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim::graphs {

std::atomic<int> g_captures{0};

namespace {

// Captures, graphs and ids change rarely (once per capture, instantiation, destruction): one lock.
std::mutex g_mu;
uint32_t g_next_id = 1;  // under g_mu
struct Capture {
  uintptr_t origin;
  Node node;
  unsigned long long runtime_id;  // the runtime's id of the capture sequence (0: it did not say)
  uint32_t graph_id;
  bool recorded;  // a copy or NCCL operation of it was recorded: only then are its launches
};
std::vector<Capture>& Captures() {  // running; under g_mu
  static auto* v = new std::vector<Capture>();
  return *v;
}
std::unordered_map<uintptr_t, uint32_t>& Graphs() {  // cudaGraph_t -> graph id; under g_mu
  static auto* m = new std::unordered_map<uintptr_t, uint32_t>();
  return *m;
}
// Exec -> graph id: read by every launch without a lock. More live execs of captured graphs than
// it holds (3072): the rest's launches go unrecorded.
constinit HandleTable<uint32_t, 4096> g_execs;
std::atomic<uint64_t> g_launches{0};

// The runtime's id of the capture `stream` takes part in, 0 when it is not capturing; false when
// the runtime cannot say. cudaStreamGetCaptureInfo's plain symbol is the 11.x three-argument form
// in cudart 11 and 12, and takes graph, dependencies and edges too in 13.
bool RuntimeCaptureId(const CudaRuntime& rt, cudaStream_t stream, unsigned long long* id) {
  if (rt.StreamGetCaptureInfo == nullptr) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long seq = 0;
  cudaError_t r;
  if (rt.node == Node::kCudart13) {
    using Fn = cudaError_t (*)(cudaStream_t, cudaStreamCaptureStatus*, unsigned long long*, cudaGraph_t*,
                               const cudaGraphNode_t**, const cudaGraphEdgeData**, size_t*);
    r = reinterpret_cast<Fn>(rt.StreamGetCaptureInfo)(stream, &status, &seq, nullptr, nullptr, nullptr, nullptr);
  } else {
    using Fn = cudaError_t (*)(cudaStream_t, cudaStreamCaptureStatus*, unsigned long long*);
    r = reinterpret_cast<Fn>(rt.StreamGetCaptureInfo)(stream, &status, &seq);
  }
  if (r != cudaSuccess) return false;
  // Invalidated: still part of a capture, whose graph will never exist.
  *id = status == cudaStreamCaptureStatusNone ? 0 : (seq != 0 ? seq : ~0ull);
  return true;
}

template <typename Fill>
void Write(uint8_t event, Fill&& fill) {
  if (!TraceWriter::Ready()) return;
  TraceWriter::Emit<p2ptrace_graph_record>(P2PTRACE_RECORD_GRAPH, 0, [&](p2ptrace_graph_record& rec) {
    rec.event = event;
    fill(rec);
  });
}

uint32_t GraphIdLocked(cudaGraph_t graph) {
  auto it = Graphs().find(reinterpret_cast<uintptr_t>(graph));
  return it == Graphs().end() ? 0 : it->second;
}

}  // namespace

void CaptureStarting() { g_captures.fetch_add(1, std::memory_order_relaxed); }

void CaptureStarted(const CudaRuntime& rt, cudaStream_t origin, cudaError_t r) {
  if (r != cudaSuccess) {
    g_captures.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  KeepErrno keep;
  unsigned long long id = 0;
  RuntimeCaptureId(rt, origin, &id);  // the stream just began capturing: the query cannot fail
  std::lock_guard<std::mutex> lock(g_mu);
  Captures().push_back({reinterpret_cast<uintptr_t>(origin), rt.node, id, g_next_id++, false});
}

void CaptureEnded(Node node, cudaStream_t origin, cudaError_t r, cudaGraph_t graph) {
  KeepErrno keep;
  uint32_t id = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& v = Captures();
    auto it = std::find_if(v.begin(), v.end(), [&](const Capture& c) {
      return c.origin == reinterpret_cast<uintptr_t>(origin) && c.node == node;
    });
    if (it == v.end()) return;  // not a capture the shim saw begin (or EndCapture failed before ending it)
    id = it->graph_id;
    // A graph of kernels only (most of them) is not tracked: its launches cost one lookup, no record.
    if (r == cudaSuccess && graph != nullptr && it->recorded) Graphs()[reinterpret_cast<uintptr_t>(graph)] = id;
    v.erase(it);
    g_captures.fetch_sub(1, std::memory_order_relaxed);
  }
  Write(P2PTRACE_GRAPH_END_CAPTURE, [&](p2ptrace_graph_record& rec) {
    rec.handle = r == cudaSuccess ? reinterpret_cast<uintptr_t>(graph) : 0;
    rec.stream = reinterpret_cast<uintptr_t>(origin);
    rec.graph_id = id;
    rec.result = r;
  });
}

bool CapturedOn(const CudaRuntime& rt, cudaStream_t stream, uint32_t* graph_id) {
  // The legacy stream never captures (and asking about it during a capture is an error).
  if (stream == nullptr || stream == cudaStreamLegacy) return false;
  // cudart 11's graph functions are not wrapped (graphs.h): its captured calls count once, at capture.
  if (rt.node == Node::kCudart11) return false;
  KeepErrno keep;
  unsigned long long id = 0;
  if (!RuntimeCaptureId(rt, stream, &id) || id == 0) return false;
  *graph_id = 0;
  std::lock_guard<std::mutex> lock(g_mu);
  for (Capture& c : Captures())
    if (c.runtime_id == id && c.node == rt.node) {
      *graph_id = c.graph_id;
      c.recorded = true;  // the caller records it now
    }
  return true;
}

void Instantiated(cudaError_t r, const cudaGraphExec_t* exec, cudaGraph_t graph) {
  if (r != cudaSuccess || exec == nullptr) return;
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if ((id = GraphIdLocked(graph)) == 0) return;  // nothing the shim recorded is in it
    g_execs.Put(reinterpret_cast<uintptr_t>(*exec), id);
  }
  KeepErrno keep;
  Write(P2PTRACE_GRAPH_INSTANTIATE, [&](p2ptrace_graph_record& rec) {
    rec.handle = reinterpret_cast<uintptr_t>(*exec);
    rec.graph_id = id;
  });
}

void ExecUpdated(cudaError_t r, cudaGraphExec_t exec, cudaGraph_t graph) {
  uint32_t id;
  auto e = reinterpret_cast<uintptr_t>(exec);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    bool known = g_execs.Lookup(e, 0) != 0;
    id = GraphIdLocked(graph);
    if (r != cudaSuccess || (!known && id == 0)) return;  // a failed update leaves the exec as it was
    if (id != 0) g_execs.Put(e, id);
    else g_execs.Erase(e);  // it now runs work the shim did not see captured
  }
  KeepErrno keep;
  Write(P2PTRACE_GRAPH_EXEC_UPDATE, [&](p2ptrace_graph_record& rec) {
    rec.handle = e;
    rec.graph_id = id;
  });
}

void ExecDestroyed(cudaError_t r, cudaGraphExec_t exec) {
  auto e = reinterpret_cast<uintptr_t>(exec);
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (r != cudaSuccess || (id = g_execs.Lookup(e, 0)) == 0) return;
    g_execs.Erase(e);
  }
  KeepErrno keep;
  Write(P2PTRACE_GRAPH_EXEC_DESTROY, [&](p2ptrace_graph_record& rec) {
    rec.handle = e;
    rec.graph_id = id;
  });
}

// The graph's id stays valid for its execs (an exec does not depend on its graph once made).
void GraphDestroyed(cudaError_t r, cudaGraph_t graph) {
  auto g = reinterpret_cast<uintptr_t>(graph);
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = Graphs().find(g);
    if (r != cudaSuccess || it == Graphs().end()) return;
    id = it->second;
    Graphs().erase(it);
  }
  KeepErrno keep;
  Write(P2PTRACE_GRAPH_DESTROY, [&](p2ptrace_graph_record& rec) {
    rec.handle = g;
    rec.graph_id = id;
  });
}

uint32_t ExecGraph(const void* exec) { return g_execs.Lookup(reinterpret_cast<uintptr_t>(exec), 0); }

// Sampled like NCCL operations: the first K launches, then one in N (P2PTRACE_SAMPLE).
bool BeginLaunchTiming(const CudaRuntime& rt, int device, cudaStream_t stream, TimedCopy* t) {
  const SampleSpec& s = detail::g_sample;
  if (!s.enabled) return false;
  uint64_t n = g_launches.fetch_add(1, std::memory_order_relaxed);
  if (n >= s.first && (s.every == 0 || n % s.every != 0)) return false;
  return CopyTimer::Begin(rt, device, stream, t);
}

// The record written in place, stamped with the CPU counter (as the copy fast path's).
void RecordLaunch(uint32_t graph_id, const void* exec, const void* stream, int result, TimedCopy* timing) {
  uint32_t seq = 0;
  uint8_t flags = kCpuTicks ? P2PTRACE_GRAPH_TICKS : 0;
  if (timing != nullptr) {
    seq = TraceWriter::NextSeq();
    timing->seq = seq;
    CopyTimer::End(static_cast<cudaStream_t>(const_cast<void*>(stream)), result == cudaSuccess, timing);
    if (result == cudaSuccess) flags |= P2PTRACE_GRAPH_TIMED;
    else seq = 0;
  }
  uint64_t ticks = CpuTicks();
  auto fill = [&](p2ptrace_graph_record& rec) {
    rec.h.type = P2PTRACE_RECORD_GRAPH;
    rec.h.size = sizeof rec;
    rec.h.seq = seq;
    rec.h.time_ns = ticks;
    rec.handle = reinterpret_cast<uintptr_t>(exec);
    rec.stream = reinterpret_cast<uintptr_t>(stream);
    rec.graph_id = graph_id;
    rec.result = result;
    rec.event = P2PTRACE_GRAPH_LAUNCH;
    rec.flags = flags;
  };
  TraceWriter::Slot slot;
  if (__builtin_expect(TraceWriter::Reserve<p2ptrace_graph_record>(&slot), 1)) {
    fill(*TraceWriter::At<p2ptrace_graph_record>(slot));
    TraceWriter::Publish<p2ptrace_graph_record>(slot);
    return;
  }
  TraceWriter::EmitAt<p2ptrace_graph_record>(P2PTRACE_RECORD_GRAPH, seq, ticks, fill);  // claims a chunk
}

}  // namespace p2ptrace::shim::graphs
