#include "shim/record/graphs.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shim/record/handle_table.h"
#include "shim/base/fd.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim::graphs {

std::atomic<int> g_captures{0};

namespace {

// Captures, graphs and ids change rarely (once per capture, instantiation, destruction): one lock.
std::mutex g_mu;
uint32_t g_next_id = 1;  // under g_mu
struct Capture {
  uintptr_t origin;  // the stream that began it: a CUstream whichever API began and ends it
  unsigned long long runtime_id;  // the runtime's id of the capture sequence (0: it did not say)
  uint32_t graph_id;
  bool recorded;  // a copy or NCCL operation of it was recorded: only then are its launches
  uintptr_t into;  // the program's graph it appends to (BeginCaptureToGraph); 0: a new graph
};
std::vector<Capture>& Captures() {  // running; under g_mu
  static auto* v = new std::vector<Capture>();
  return *v;
}
// A graph the shim recorded work of: its id, and whether that id's work is fixed (an exec, a clone
// or a parent took it: a node added later needs a new id, which INCLUDEs this one).
struct GraphState {
  uint32_t id;
  bool fixed;
};
std::unordered_map<uintptr_t, GraphState>& Graphs() {  // cudaGraph_t -> its state; under g_mu
  static auto* m = new std::unordered_map<uintptr_t, GraphState>();
  return *m;
}
// Exec -> graph id: read by every launch without a lock. More live execs of captured graphs than
// it holds (3072): the rest's launches go unrecorded.
constinit HandleTable<uint32_t, 4096> g_execs;
std::atomic<uint64_t> g_launches{0};

// The runtime's id of the capture `stream` takes part in, 0 when it is not capturing; false when
// the runtime cannot say. The id is the driver's, so one capture has one id whichever API asks.
// cudaStreamGetCaptureInfo's plain symbol is the 11.x three-argument form in cudart 11 and 12 (and
// cuStreamGetCaptureInfo's in every driver), and takes graph, dependencies and edges too in 13.
bool RuntimeCaptureId(const CudaRuntime& rt, cudaStream_t stream, unsigned long long* id) {
  if (rt.StreamGetCaptureInfo == nullptr) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;  // CUstreamCaptureStatus's values
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
  return it == Graphs().end() ? 0 : it->second.id;
}

// Its id's work is now another's too (instantiated, cloned, made a child): kept as it is.
void FixLocked(cudaGraph_t graph) {
  if (auto it = Graphs().find(reinterpret_cast<uintptr_t>(graph)); it != Graphs().end()) it->second.fixed = true;
}

// The id new work of `graph` goes to: its own while not fixed; else a new one, which includes the
// old (*included = the old id, to be written as INCLUDE). A graph not known yet gets a new id.
uint32_t GrowingIdLocked(cudaGraph_t graph, uint32_t* included) {
  *included = 0;
  auto [it, fresh] = Graphs().try_emplace(reinterpret_cast<uintptr_t>(graph), GraphState{0, false});
  if (fresh || it->second.fixed) {
    if (!fresh) *included = it->second.id;
    it->second = {g_next_id++, false};
  }
  return it->second.id;
}

void WriteInclude(cudaGraph_t graph, uint32_t id, uint32_t included) {
  Write(P2PTRACE_GRAPH_INCLUDE, [&](p2ptrace_graph_record& rec) {
    rec.handle = reinterpret_cast<uintptr_t>(graph);
    rec.graph_id = id;
    rec.included_id = included;
  });
}

}  // namespace

// A fork child gets a fresh gate: the thread that may have held it did not come along.
std::mutex* g_gate = nullptr;
std::mutex& CaptureGate() {
  static bool made = [] {
    g_gate = new std::mutex();
    pthread_atfork(nullptr, nullptr, [] { g_gate = new std::mutex(); });  // the old one is leaked, never used again
    return true;
  }();
  (void)made;
  return *g_gate;
}

void CaptureStarting() {
  g_captures.fetch_add(1, std::memory_order_seq_cst);
  std::lock_guard<std::mutex> wait_for_watchdog(CaptureGate());  // it holds it across one event call
}

void CaptureStarted(const CudaRuntime& rt, cudaStream_t origin, cudaError_t r, cudaGraph_t into) {
  if (r != cudaSuccess) {
    g_captures.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  KeepErrno keep;
  unsigned long long id = 0;
  RuntimeCaptureId(rt, origin, &id);  // the stream just began capturing: the query cannot fail
  std::lock_guard<std::mutex> lock(g_mu);
  Captures().push_back({reinterpret_cast<uintptr_t>(origin), id, g_next_id++, false, reinterpret_cast<uintptr_t>(into)});
}

unsigned long long CaptureIdOf(const CudaRuntime& rt, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return 0;  // never captures; asking would be an error
  KeepErrno keep;
  unsigned long long id = 0;
  if (!RuntimeCaptureId(rt, stream, &id) || id == ~0ull) return 0;  // invalidated: no sequence id to match
  return id;
}

bool CaptureEnded(cudaStream_t origin, unsigned long long runtime_id, cudaError_t r, cudaGraph_t graph) {
  KeepErrno keep;
  uint32_t id = 0, holder = 0, included = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& v = Captures();
    // By the runtime's sequence id when it was read (two threads' per-thread streams share one
    // handle), else by the stream that began it.
    auto it = std::find_if(v.begin(), v.end(), [&](const Capture& c) { return runtime_id != 0 && c.runtime_id == runtime_id; });
    if (it == v.end())
      it = std::find_if(v.begin(), v.end(),
                        [&](const Capture& c) { return c.origin == reinterpret_cast<uintptr_t>(origin); });
    if (it == v.end()) return false;  // not a capture the shim saw begin
    id = it->graph_id;
    // A graph of kernels only (most of them) is not tracked: its launches cost one lookup, no record.
    // A capture into the program's graph is one more part of that graph's work: the graph's id
    // includes the capture's (a failed capture's id never runs, and the graph keeps what it had).
    if (r == cudaSuccess && graph != nullptr && it->recorded) {
      auto g = reinterpret_cast<uintptr_t>(graph);
      if (it->into == 0 || !Graphs().count(g)) Graphs()[g] = {id, false};
      else holder = GrowingIdLocked(graph, &included);
    }
    v.erase(it);
    g_captures.fetch_sub(1, std::memory_order_relaxed);
  }
  Write(P2PTRACE_GRAPH_END_CAPTURE, [&](p2ptrace_graph_record& rec) {
    rec.handle = r == cudaSuccess ? reinterpret_cast<uintptr_t>(graph) : 0;
    rec.stream = reinterpret_cast<uintptr_t>(origin);
    rec.graph_id = id;
    rec.result = r;
  });
  if (included != 0) WriteInclude(graph, holder, included);
  if (holder != 0) WriteInclude(graph, holder, id);
  return true;
}

bool StreamCapturing(const CudaRuntime& rt, cudaStream_t stream) {
  unsigned long long id = 0;
  return !RuntimeCaptureId(rt, stream, &id) || id != 0;
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
    if (c.runtime_id == id) {  // a driver copy joins a capture the runtime began, and back
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
    FixLocked(graph);
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
    FixLocked(graph);
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
    id = it->second.id;
    Graphs().erase(it);
  }
  KeepErrno keep;
  Write(P2PTRACE_GRAPH_DESTROY, [&](p2ptrace_graph_record& rec) {
    rec.handle = g;
    rec.graph_id = id;
  });
}

void GraphCreated(cudaError_t r, const cudaGraph_t* graph) {
  if (r != cudaSuccess || graph == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  Graphs().erase(reinterpret_cast<uintptr_t>(*graph));  // a handle reused after a destruction the shim did not see
}

void LaunchCaptured(uint32_t capture_id, uint32_t exec_graph_id, const void* exec) {
  if (capture_id == 0 || exec_graph_id == 0) return;
  KeepErrno keep;
  Write(P2PTRACE_GRAPH_INCLUDE, [&](p2ptrace_graph_record& rec) {
    rec.handle = reinterpret_cast<uintptr_t>(exec);
    rec.graph_id = capture_id;
    rec.included_id = exec_graph_id;
  });
}

uint32_t NodeAdded(cudaGraph_t graph) {
  KeepErrno keep;
  uint32_t id, included;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    id = GrowingIdLocked(graph, &included);
  }
  if (included != 0) WriteInclude(graph, id, included);
  return id;
}

void ChildAdded(cudaError_t r, cudaGraph_t parent, cudaGraph_t child) {
  if (r != cudaSuccess) return;
  KeepErrno keep;
  uint32_t id, included, child_id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if ((child_id = GraphIdLocked(child)) == 0) return;  // nothing the shim recorded is in it
    FixLocked(child);  // the parent holds a copy of the child as it is now
    id = GrowingIdLocked(parent, &included);
  }
  if (included != 0) WriteInclude(parent, id, included);
  WriteInclude(parent, id, child_id);
}

void Cloned(cudaError_t r, const cudaGraph_t* clone, cudaGraph_t original) {
  if (r != cudaSuccess || clone == nullptr) return;
  KeepErrno keep;
  uint32_t id, original_id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if ((original_id = GraphIdLocked(original)) == 0) return;
    FixLocked(original);
    id = g_next_id++;
    Graphs()[reinterpret_cast<uintptr_t>(*clone)] = {id, false};
  }
  WriteInclude(*clone, id, original_id);
}

void NodeAltered(const void* exec, const void* node, int api, cudaError_t r) {
  if (r != cudaSuccess) return;
  uint32_t id = 0;
  if (exec != nullptr) {
    if ((id = ExecGraph(exec)) == 0) return;
  } else {
    std::lock_guard<std::mutex> lock(g_mu);
    if (Graphs().empty()) return;
  }
  KeepErrno keep;
  Write(P2PTRACE_GRAPH_ALTERED, [&](p2ptrace_graph_record& rec) {
    rec.handle = reinterpret_cast<uintptr_t>(exec != nullptr ? exec : node);
    rec.graph_id = id;
    rec.api = static_cast<uint16_t>(api);
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
