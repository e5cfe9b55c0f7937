// The watchdog thread (nccl_watchdog.h). It learns what to watch by reading this process's own
// trace as the CLI would (records are complete once a chunk's `used` covers them), so the NCCL
// wrappers do nothing for it: the record each call already writes is the whole interface.
#include "shim/interpose/nccl_watchdog.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "p2ptrace/trace_format.h"
#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"
#include "shim/base/bind.h"
#include "shim/base/fd.h"
#include "shim/interpose/cuda_hooks.h"
#include "shim/nccl_log_tap.h"
#include "shim/record/graphs.h"
#include "shim/record/process_uses.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

constexpr size_t kMaxStreams = 256;     // streams watched; more are only beaten for
constexpr size_t kMaxOpen = 4096;       // unfinished operations remembered per stream (oldest go first)
constexpr size_t kMaxConnections = 4096;

struct OpInfo {
  const p2ptrace_nccl_op_record* rec = nullptr;  // where it lies in the mapping: its result may still change
  uint64_t raw_time = 0;  // as recorded (CPU ticks when P2PTRACE_NCCL_TICKS)
  uint64_t ns = 0;        // CLOCK_MONOTONIC
  uint64_t comm = 0, bytes = 0, seq = 0;
  int32_t peer = -1;
  uint8_t api = 0, datatype = 0, flags = 0;
};

struct StreamState {
  uint64_t stream = 0;
  std::deque<OpInfo> open;  // not known finished, oldest first
  const CudaRuntime* rt = nullptr;
  cudaEvent_t event = nullptr;
  bool outstanding = false;  // `event` recorded behind `covered`, not yet seen complete
  bool no_events = false;    // a default stream, its device unknown, or an event call failed
  OpInfo covered;
  bool stall_reported = false;  // a stall line was printed, and the stream has not moved since
  const p2ptrace_nccl_op_record* stalled = nullptr;  // the operation it named, when still in its call
};

struct CommInfo {
  uint64_t id_hash = 0, ops = 0;
  int rank = -1, nranks = -1, device = -1;
};

struct Connection {
  std::string comm, transport;
  int src = -1, dst = -1;
};

struct State {
  uint64_t generation = 0;
  std::vector<uint64_t> cursors;  // per chunk: bytes of records already read
  std::vector<StreamState> streams;
  std::unordered_map<uint64_t, CommInfo> comms;
  std::vector<Connection> connections;
  std::vector<const p2ptrace_nccl_comm_record*> entered;  // inits on record whose result is pending
  std::unordered_map<uint64_t, int> destroyed;  // per id hash: its communicators destroyed, not yet forgotten
  uint64_t last_comm = 0;  // the last operation's communicator and stream (element addresses are stable:
  CommInfo* last_info = nullptr;  // unordered_map nodes; `streams` reserved, never grown past kMaxStreams)
  StreamState* last_stream = nullptr;
  State() { streams.reserve(kMaxStreams); }
};

// Streams the program destroyed since the thread last looked (StreamDestroying): the thread holds
// g_gone_mu while it makes its event calls, so a destroy waits for one in flight and none follows.
std::mutex* g_gone_mu = new std::mutex();  // a fork child's is new (ForkChild)
std::vector<uint64_t>* g_gone = new std::vector<uint64_t>();

// What the thread knew of a destroyed stream goes: its handle may come back as a new stream.
void ForgetGone(State& s) {
  for (uint64_t gone : *g_gone)
    for (StreamState& st : s.streams)
      if (st.stream == gone) {
        st.open.clear();
        st.outstanding = false;
        st.covered = OpInfo{};
        st.stall_reported = false;
        st.stalled = nullptr;
      }
  g_gone->clear();
}

// Starting and the thread's sleep; a fork child gets fresh ones (ForkChild), never a copy held by a
// thread that did not come along.
std::mutex* g_mu = new std::mutex();
std::condition_variable* g_wake = new std::condition_variable();
std::mutex& Mu() { return *g_mu; }
std::condition_variable& Wake() { return *g_wake; }
std::atomic<bool> g_started{false};  // read unlocked by StreamDestroying
std::atomic<bool> g_stop{false};
State* g_state = nullptr;  // the thread's own (a fork child makes a new one)

template <typename T>
T Load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

// A tick-stamped time in CLOCK_MONOTONIC ns, from the header's start and calibration anchors.
uint64_t ToNs(const p2ptrace_file_header* h, uint64_t raw, bool ticks) {
  if (!ticks) return raw;
  if (h->calib_ticks <= h->start_ticks || h->calib_monotonic_ns <= h->start_monotonic_ns) return MonotonicNs();
  double rate = double(h->calib_monotonic_ns - h->start_monotonic_ns) / double(h->calib_ticks - h->start_ticks);
  return h->start_monotonic_ns + static_cast<uint64_t>((double(raw) - double(h->start_ticks)) * rate);
}

StreamState* StreamOf(State& s, uint64_t stream) {
  for (StreamState& st : s.streams)
    if (st.stream == stream) return &st;
  if (s.streams.size() >= kMaxStreams) return nullptr;
  s.streams.push_back(StreamState{});
  s.streams.back().stream = stream;
  // The legacy and per-thread default streams: another thread's event there would make the
  // program's next work wait for it (legacy), or land on the watchdog's own stream (per-thread).
  uintptr_t v = stream;
  s.streams.back().no_events = v == 0 || v == reinterpret_cast<uintptr_t>(cudaStreamLegacy) ||
                               v == reinterpret_cast<uintptr_t>(cudaStreamPerThread);
  return &s.streams.back();
}

// A communicator of `id_hash` was destroyed (its record names no address): once as many were as this
// process made with that hash (ncclCommInitAll's share one), what the thread knew of them goes, so
// that a job re-creating its communicators for days keeps nothing per generation.
void Forget(State& s, uint64_t id_hash) {
  int made = 0;
  for (const auto& [comm, c] : s.comms) made += c.id_hash == id_hash;
  if (++s.destroyed[id_hash] < made) return;
  s.destroyed.erase(id_hash);
  for (auto it = s.comms.begin(); it != s.comms.end();) {
    if (it->second.id_hash != id_hash) {
      ++it;
      continue;
    }
    char text[32];
    snprintf(text, sizeof text, "%p", reinterpret_cast<void*>(it->first));
    std::erase_if(s.connections, [&](const Connection& k) { return k.comm == text; });
    it = s.comms.erase(it);
  }
  s.last_comm = 0;
  s.last_info = nullptr;
}

void TakeRecord(State& s, const p2ptrace_file_header* h, const unsigned char* at, uint16_t type) {
  if (type == P2PTRACE_RECORD_NCCL_OP) {
    const auto* r = reinterpret_cast<const p2ptrace_nccl_op_record*>(at);
    uint8_t flags = Load(&r->flags);
    if (flags & P2PTRACE_NCCL_CAPTURED) return;  // runs at its graph's launches, not now
    OpInfo op;
    op.rec = r;
    op.raw_time = r->h.time_ns;
    op.ns = ToNs(h, op.raw_time, flags & P2PTRACE_NCCL_TICKS);
    op.comm = r->comm;
    op.bytes = r->bytes;
    op.peer = r->peer;
    op.api = r->api;
    op.datatype = r->datatype;
    op.flags = flags;
    // The same communicator and stream as the last operation, nearly always: no lookup then.
    if (op.comm != s.last_comm || s.last_info == nullptr) s.last_comm = op.comm, s.last_info = &s.comms[op.comm];
    op.seq = ++s.last_info->ops;  // as readers number a communicator's operations
    StreamState* st = s.last_stream != nullptr && s.last_stream->stream == r->stream ? s.last_stream : StreamOf(s, r->stream);
    s.last_stream = st;
    if (st == nullptr) return;
    if (st->open.size() >= kMaxOpen) st->open.pop_front();
    st->open.push_back(op);
  } else if (type == P2PTRACE_RECORD_NCCL_COMM) {
    const auto* r = reinterpret_cast<const p2ptrace_nccl_comm_record*>(at);
    // An init still running: its fields are filled in place before its result; looked at again later.
    int32_t result = Load(&r->result);
    if (result == P2PTRACE_RESULT_PENDING) {
      if (s.entered.size() < 64) s.entered.push_back(r);
      return;
    }
    if (result == 0 && (r->api == P2PTRACE_NCCL_CommDestroy || r->api == P2PTRACE_NCCL_CommAbort)) Forget(s, r->id_hash);
    if (result != 0 || r->comm == 0 || r->api > P2PTRACE_NCCL_CommSplit) return;
    CommInfo& c = s.comms[r->comm];
    c.id_hash = r->id_hash;
    c.rank = r->rank;
    c.nranks = r->nranks;
    c.device = r->cuda_device;
  } else if (type == P2PTRACE_RECORD_NCCL_CONN && s.connections.size() < kMaxConnections) {
    const auto* r = reinterpret_cast<const p2ptrace_nccl_conn_record*>(at);
    s.connections.push_back({std::string(r->comm, strnlen(r->comm, sizeof r->comm)),
                             std::string(r->transport, strnlen(r->transport, sizeof r->transport)), r->src_rank,
                             r->dst_rank});
  }
}

// Every record written since the last look, chunk by chunk.
void Scan(State& s) {
  const p2ptrace_file_header* h = TraceWriter::header();
  if (h == nullptr || !TraceWriter::IsOpen()) return;
  uint64_t generation = detail::g_generation.load(std::memory_order_acquire);
  if (generation != s.generation) s = State{}, s.generation = generation;
  uint64_t n_chunks = (h->file_size - h->chunks_offset) / h->chunk_size;
  uint64_t claimed = std::min<uint64_t>(Load(&h->chunks_claimed), n_chunks);
  if (s.cursors.size() < claimed) s.cursors.resize(claimed, 0);
  std::vector<const p2ptrace_nccl_comm_record*> entered;
  entered.swap(s.entered);
  for (const p2ptrace_nccl_comm_record* r : entered)
    TakeRecord(s, h, reinterpret_cast<const unsigned char*>(r), P2PTRACE_RECORD_NCCL_COMM);
  const auto* base = reinterpret_cast<const unsigned char*>(h);
  for (uint64_t c = 0; c < claimed; ++c) {
    const auto* ch = reinterpret_cast<const p2ptrace_chunk_header*>(base + h->chunks_offset + c * h->chunk_size);
    if (Load(&ch->magic) != P2PTRACE_CHUNK_MAGIC) continue;  // claimed, not begun: next time
    uint64_t used = std::min<uint64_t>(Load(&ch->used), h->chunk_size - sizeof *ch);
    const unsigned char* records = reinterpret_cast<const unsigned char*>(ch + 1);
    uint64_t& pos = s.cursors[c];
    while (pos + sizeof(p2ptrace_record_header) <= used) {
      const auto* rh = reinterpret_cast<const p2ptrace_record_header*>(records + pos);
      uint16_t type = rh->type, size = rh->size;
      if (size < sizeof *rh || size % 8 != 0 || pos + size > used) break;
      if ((type == P2PTRACE_RECORD_NCCL_OP && size >= sizeof(p2ptrace_nccl_op_record)) ||
          (type == P2PTRACE_RECORD_NCCL_COMM && size >= sizeof(p2ptrace_nccl_comm_record)) ||
          (type == P2PTRACE_RECORD_NCCL_CONN && size >= sizeof(p2ptrace_nccl_conn_record)))
        TakeRecord(s, h, records + pos, type);
      pos += size;
    }
  }
}

void WriteProgress(uint64_t stream, const OpInfo& op, uint8_t state, uint64_t waited_ms) {
  TraceWriter::Emit<p2ptrace_nccl_progress_record>(P2PTRACE_RECORD_NCCL_PROGRESS, 0,
                                                    [&](p2ptrace_nccl_progress_record& r) {
                                                      r.stream = stream;
                                                      r.comm = op.comm;
                                                      r.through = op.raw_time;
                                                      if (op.flags & P2PTRACE_NCCL_TICKS) r.flags = P2PTRACE_PROGRESS_TICKS;
                                                      r.waited_ms = waited_ms;
                                                      r.state = state;
                                                    });
}

// Under CaptureGate with no capture running, and UnloadMutex: the runtime cannot go away meanwhile.
void CheckStream(State& s, StreamState& st) {
  // Operations that failed never reached the GPU: nothing to wait for.
  while (!st.open.empty()) {
    int32_t r = Load(&st.open.front().rec->result);
    if (r == 0 || r == P2PTRACE_RESULT_PENDING) break;
    st.open.pop_front();
  }
  if (st.no_events || st.rt == nullptr || st.rt->retired.load(std::memory_order_acquire)) return;
  const CudaRuntime& rt = *st.rt;
  if (st.outstanding) {
    cudaError_t q = rt.EventQuery(st.event);
    if (q == cudaErrorNotReady) return;
    st.outstanding = false;
    if (q != cudaSuccess) {  // a device error: the stream's work is lost, watched no more
      st.no_events = true;
      return;
    }
    WriteProgress(st.stream, st.covered, P2PTRACE_PROGRESS_DONE, 0);
    st.stall_reported = false;
    while (!st.open.empty() && st.open.front().raw_time <= st.covered.raw_time) st.open.pop_front();
  }
  // Behind the newest operation whose call returned (its work is queued); one still inside its call
  // may or may not be queued yet, so the event claims nothing of it.
  const OpInfo* returned = nullptr;
  for (auto it = st.open.rbegin(); it != st.open.rend() && returned == nullptr; ++it)
    if (Load(&it->rec->result) == 0) returned = &*it;
  if (returned == nullptr || (st.covered.rec != nullptr && returned->raw_time <= st.covered.raw_time)) return;
  const OpInfo& newest = *returned;
  if (st.event == nullptr) {
    int device = StreamDeviceOf(rt, reinterpret_cast<cudaStream_t>(st.stream));
    if (device < 0) device = s.comms[newest.comm].device;
    if (device < 0 || rt.SetDevice(device) != cudaSuccess ||
        rt.EventCreateWithFlags(&st.event, cudaEventDisableTiming) != cudaSuccess) {
      st.event = nullptr;
      st.no_events = true;
      return;
    }
  }
  // A capture the shim did not see (a runtime reached through a handle it was not told of): an event
  // recorded there would join the program's graph. Asked right before; the next beat tries again.
  if (graphs::StreamCapturing(rt, reinterpret_cast<cudaStream_t>(st.stream))) return;
  if (rt.EventRecord(st.event, reinterpret_cast<cudaStream_t>(st.stream)) != cudaSuccess) {
    st.no_events = true;  // the stream is gone, or of a context the runtime cannot reach
    return;
  }
  st.outstanding = true;
  st.covered = newest;
}

std::string Bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) snprintf(buf, sizeof buf, "%.1f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20)) snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1ull << 20));
  else if (b >= 1024) snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  else snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  return buf;
}

// One line for an operation unfinished past P2PTRACE_HANG_S.
void ReportStall(State& s, StreamState& st, const OpInfo& op, bool returned, uint64_t waited_ms) {
  const CommInfo& c = s.comms[op.comm];
  bool p2p = op.api == P2PTRACE_NCCL_Send || op.api == P2PTRACE_NCCL_Recv;
  std::string who = c.rank >= 0 ? "rank " + std::to_string(c.rank) + " of " + std::to_string(c.nranks) : "this process";
  if (c.device >= 0) who += " (GPU" + std::to_string(c.device) + ")";
  char comm_id[32];
  snprintf(comm_id, sizeof comm_id, "%016" PRIx64, c.id_hash);
  std::string line = who + ": " + std::string(NcclApiName(op.api)) + " #" + std::to_string(op.seq) +
                     " of communicator " + std::string(comm_id, 8) + " (" + Bytes(op.bytes) + ") " +
                     (returned ? "has not finished on the GPU " : "has not returned ") + std::to_string(waited_ms / 1000) +
                     " s after it was called; it waits for ";
  line += p2p ? "rank " + std::to_string(op.peer)
              : "every other rank of the communicator" + (c.nranks > 0 ? " (" + std::to_string(c.nranks) + " ranks)" : "");
  // The connections NCCL said this rank uses with them (its INFO lines, read by the log tap).
  char comm_text[32];
  snprintf(comm_text, sizeof comm_text, "%p", reinterpret_cast<void*>(op.comm));
  std::string via;
  int shown = 0;
  for (const Connection& k : s.connections) {
    if (k.comm != comm_text || (k.src != c.rank && k.dst != c.rank) || shown == 4) continue;
    if (p2p && k.src != op.peer && k.dst != op.peer) continue;
    std::string hop = std::to_string(k.src) + " -> " + std::to_string(k.dst) + " via " + k.transport;
    if (via.find(hop) != std::string::npos) continue;  // one line per channel in NCCL's log
    via += std::string(shown++ ? ", " : "") + hop;
  }
  if (!via.empty()) line += "; NCCL connects it " + via;
  line += ". Nothing is changed; `p2ptrace report " + TraceWriter::config().dir + "` tells which rank or pair stopped it.";
  Warn(line);
  WriteProgress(st.stream, op, P2PTRACE_PROGRESS_STALLED, waited_ms);
}

void CheckStalls(State& s, double hang_seconds) {
  if (hang_seconds <= 0) return;
  uint64_t now = MonotonicNs(), limit = static_cast<uint64_t>(hang_seconds * 1e9);
  for (StreamState& st : s.streams) {
    if (st.stalled != nullptr && Load(&st.stalled->result) != P2PTRACE_RESULT_PENDING) {
      st.stall_reported = false;  // the call it named came back
      st.stalled = nullptr;
    }
    if (st.open.empty()) continue;
    // The oldest one the GPU has not finished, or the call still inside NCCL.
    const OpInfo* op = &st.open.front();
    int32_t r = Load(&op->rec->result);
    if (r != 0 && r != P2PTRACE_RESULT_PENDING) continue;
    // Returned, and no event can tell its end (no runtime of the program's to make one with: a
    // driver-only or statically linked program): only a call that never returns is a stall.
    if (r == 0 && (st.no_events || st.rt == nullptr)) {
      op = &st.open.back();
      if (Load(&op->rec->result) != P2PTRACE_RESULT_PENDING) continue;
      r = P2PTRACE_RESULT_PENDING;
    }
    // One line per stall: a stream stays quiet after it until it moves again (its GPU work finished
    // further, or the call returned), not a line for every operation queued behind it.
    if (now < op->ns || now - op->ns < limit || st.stall_reported) continue;
    st.stall_reported = true;
    st.stalled = r == P2PTRACE_RESULT_PENDING ? op->rec : nullptr;
    ReportStall(s, st, *op, r == 0, (now - op->ns) / 1000000);
  }
}

void Beat(p2ptrace_file_header* h) {
  __atomic_store_n(&h->heartbeat_ns, MonotonicNs(), __ATOMIC_RELEASE);
  __atomic_fetch_add(&h->heartbeats, 1u, __ATOMIC_RELAXED);
}

// The user's own NCCL log file is looked at this often (one stat when it did not grow): its
// connections reach the trace, and the job-start check, within this much of NCCL stating them. The
// tap's file needs no look (its lines are read as NCCL writes them): then the thread wakes only to
// beat.
constexpr auto kLogPeriod = std::chrono::milliseconds(50);

void* WatchdogMain(void*) {
  const Config& config = TraceWriter::config();
  const bool beating = config.heartbeat_ms > 0;
  const auto period = std::chrono::milliseconds(config.heartbeat_ms);
  auto next_beat = std::chrono::steady_clock::now();
  State& s = *g_state;
  for (;;) {
    {
      auto until = NcclLogToRead() || !beating ? std::chrono::steady_clock::now() + kLogPeriod : next_beat;
      std::unique_lock<std::mutex> lock(Mu());
      if (Wake().wait_until(lock, until, [] { return g_stop.load(); })) return nullptr;
    }
    ReadNcclLog();
    if (!beating || std::chrono::steady_clock::now() < next_beat) continue;
    next_beat = std::chrono::steady_clock::now() + period;
    if (!TraceWriter::IsOpen()) continue;
    if (p2ptrace_file_header* h = TraceWriter::header()) Beat(h);
    KeepErrno keep;
    Scan(s);
    if (const CudaRuntime* rt = AnsweredRuntime(false); rt != nullptr && rt->complete)
      for (StreamState& st : s.streams)
        if (st.rt == nullptr) st.rt = rt;
    {
      // Gate, then the unload lock: a capture waits for these calls, and no library goes meanwhile.
      std::lock_guard<std::mutex> gate(graphs::CaptureGate());
      if (g_stop.load()) return nullptr;  // StopNcclWatchdog: no CUDA call after it returned
      if (!graphs::AnyCapture()) {
        std::lock_guard<std::recursive_mutex> unload(UnloadMutex());
        std::lock_guard<std::mutex> gone(*g_gone_mu);
        ForgetGone(s);
        for (StreamState& st : s.streams) CheckStream(s, st);
      }
    }
    CheckStalls(s, config.hang_seconds);
  }
}

// The thread did not come along: the child starts its own at its first communicator, with locks
// of its own (the parent's may have been held by the thread).
void ForkChild() {
  g_mu = new std::mutex();
  g_wake = new std::condition_variable();
  g_gone_mu = new std::mutex();
  g_gone = new std::vector<uint64_t>();
  g_started = false;
  g_stop.store(false);
  g_state = nullptr;  // the parent's (left alone: its events are not the child's)
}

void AtExit() { StopNcclWatchdog(); }

}  // namespace

void StartNcclWatchdog() {
  static std::atomic<bool> quick{false};  // the common case: one load
  if (quick.load(std::memory_order_acquire) && g_started) return;
  const Config& config = TraceWriter::config();
  if ((config.heartbeat_ms == 0 && !NcclLogToRead()) || !TraceWriter::Ready()) return;
  std::lock_guard<std::mutex> lock(Mu());
  if (g_started || g_stop.load()) return;
  static bool registered = (pthread_atfork(nullptr, nullptr, ForkChild), std::atexit(AtExit), true);
  (void)registered;
  g_started = true;
  g_state = new State();
  if (p2ptrace_file_header* h = TraceWriter::header(); h != nullptr && config.heartbeat_ms > 0) {
    __atomic_store_n(&h->heartbeat_period_ms, config.heartbeat_ms, __ATOMIC_RELAXED);
    Beat(h);
  }
  // Every signal blocked: the program's handlers never run on this thread.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t tid;
  if (pthread_create(&tid, nullptr, WatchdogMain, nullptr) == 0) {
    pthread_setname_np(tid, "p2ptrace");  // what `top -H` and py-spy show for it
    pthread_detach(tid);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  quick.store(true, std::memory_order_release);
}

void NcclWatchdogStreamGone(uintptr_t stream) {
  if (!g_started) return;  // nothing watched yet (a plain load: a stale answer only costs a lock)
  std::lock_guard<std::mutex> lock(*g_gone_mu);
  if (g_gone->size() < 4096) g_gone->push_back(stream);
}

void StopNcclWatchdog() {
  {
    std::lock_guard<std::mutex> lock(Mu());
    g_stop.store(true);
    Wake().notify_all();
  }
  // Waits out a CUDA call the thread is in: it checks g_stop under the gate before making any.
  std::lock_guard<std::mutex> gate(graphs::CaptureGate());
}

}  // namespace p2ptrace::shim
