#include "shim/record/copy_timer.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "shim/base/bind.h"
#include "shim/base/fd.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

constexpr int kPairs = CopyTimer::kPairsPerDevice;
static_assert(kPairs == 64, "one bit per pair in a 64-bit mask");
constexpr uint32_t kQueueSize = 1024;  // timings in flight to the resolver; a power of two
constexpr int64_t kPollNs = 1000000;   // the resolver looks again at most this often while work is pending
constexpr int64_t kDrainNs = 500000000;

struct EventPair {
  cudaEvent_t start, end;
};

// The event pairs of one (runtime node, device). A pair is in exactly one of: `free`, `unmade`
// (no events: never made, or let go after an error), or held by a copy in flight. Bit masks: a
// taker clears a bit with one CAS, the resolver gives one back with one fetch_or; `pair[i]` is
// written only by whoever took bit i from `unmade`, and published by the release of bit i.
struct Pool {
  std::atomic<uint64_t> free{0};
  std::atomic<uint64_t> unmade{~uint64_t{0}};
  EventPair pair[kPairs] = {};
};
std::atomic<Pool*> g_pools[static_cast<int>(Node::kCount)][P2PTRACE_MAX_DEVICES];

// Finished copies on their way to the resolver: a bounded multi-producer queue (Vyukov's), with
// the resolver its only consumer. A cell stores its sequence number minus its index, so that the
// whole queue starts as zeros: constant-initialised, usable before any constructor has run.
struct Cell {
  std::atomic<uint32_t> seq;  // Vyukov's sequence - index
  TimedCopy t;
};
struct Queue {
  alignas(64) std::atomic<uint32_t> tail;  // next position to fill
  alignas(64) std::atomic<uint32_t> head;  // next position to take (resolver only)
  alignas(64) Cell cells[kQueueSize];
};
constinit Queue g_queue{};  // trivially destructible: a detached resolver may outlive static destructors

constexpr uint32_t kMask = kQueueSize - 1;
uint32_t LoadSeq(uint32_t pos, std::memory_order o) { return g_queue.cells[pos & kMask].seq.load(o) + (pos & kMask); }
void StoreSeq(uint32_t pos, uint32_t v, std::memory_order o) { g_queue.cells[pos & kMask].seq.store(v - (pos & kMask), o); }

void ResetQueue() {
  for (Cell& c : g_queue.cells) c.seq.store(0, std::memory_order_relaxed);
  g_queue.tail.store(0, std::memory_order_relaxed);
  g_queue.head.store(0, std::memory_order_relaxed);
}

// The resolver's state, also its futex word. Producers look at it once per queued copy and make
// a system call only to wake it from kAsleep (or to start it).
enum : int { kNotStarted = 0, kBusy = 1, kAsleep = 2 };
std::atomic<int> g_state{kNotStarted};
std::atomic<int> g_done{0};  // the resolver has exited (futex word for Drain)
std::atomic<bool> g_stop{false};
std::atomic<int64_t> g_deadline{0};  // monotonic ns after which a stopping resolver gives up

// Nothing is timed while this is nonzero: stream captures running, plus kStopped after Drain.
constexpr int kStopped = 1 << 24;
std::atomic<int> g_blockers{0};

std::mutex g_mu;  // slow paths only: making pools, starting the resolver

static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free);
int* Word(std::atomic<int>& a) { return reinterpret_cast<int*>(&a); }
void FutexWait(std::atomic<int>& a, int expected, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  syscall(SYS_futex, Word(a), FUTEX_WAIT_PRIVATE, expected, timeout_ns >= 0 ? &ts : nullptr, nullptr, 0);
}
void FutexWake(std::atomic<int>& a) { syscall(SYS_futex, Word(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0); }

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void CountSkip() {
  if (p2ptrace_file_header* h = TraceWriter::header()) AddRelaxed(&h->timings_skipped, 1);
}

Pool& PoolOf(const TimedCopy& t) { return *static_cast<Pool*>(t.pool); }

void Release(const TimedCopy& t) {
  PoolOf(t).free.fetch_or(uint64_t{1} << t.slot, std::memory_order_release);
}

// Takes the lowest free pair; -1 when none is.
inline int TakeFree(Pool& p) {
  uint64_t m = p.free.load(std::memory_order_relaxed);
  while (m != 0) {
    if (p.free.compare_exchange_weak(m, m & (m - 1), std::memory_order_acquire, std::memory_order_relaxed))
      return __builtin_ctzll(m);
  }
  return -1;
}

bool Enqueue(const TimedCopy& t) {
  uint32_t pos = g_queue.tail.load(std::memory_order_relaxed);
  for (;;) {
    auto dif = static_cast<int32_t>(LoadSeq(pos, std::memory_order_acquire) - pos);
    if (dif == 0) {
      if (g_queue.tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        g_queue.cells[pos & kMask].t = t;
        // seq_cst, and so is the load of g_state after it: either the resolver sees this copy
        // before it sleeps, or the producer sees it asleep and wakes it.
        StoreSeq(pos, pos + 1, std::memory_order_seq_cst);
        return true;
      }
    } else if (dif < 0) {
      return false;  // full
    } else {
      pos = g_queue.tail.load(std::memory_order_relaxed);
    }
  }
}

// Resolver only.
bool QueueHasWork() {
  uint32_t pos = g_queue.head.load(std::memory_order_relaxed);
  return LoadSeq(pos, std::memory_order_seq_cst) == pos + 1;
}
bool Dequeue(TimedCopy* out) {
  uint32_t pos = g_queue.head.load(std::memory_order_relaxed);
  if (LoadSeq(pos, std::memory_order_acquire) != pos + 1) return false;
  *out = g_queue.cells[pos & kMask].t;
  StoreSeq(pos, pos + kQueueSize, std::memory_order_release);
  g_queue.head.store(pos + 1, std::memory_order_relaxed);
  return true;
}

void Publish(const TimedCopy& t, float ms) {
  if (!TraceWriter::Ready() || ms < 0) return;
  uint64_t ns = static_cast<uint64_t>(static_cast<double>(ms) * 1e6 + 0.5);
  if (p2ptrace_pair_counters* c = TraceWriter::Counter(t.src, t.dst, t.path)) {
    AddRelaxed(&c->timed_calls, 1);
    AddRelaxed(&c->timed_bytes, t.bytes);
    AddRelaxed(&c->timed_ns, ns);
  }
  p2ptrace_timing_record r{};
  r.bytes = t.bytes;
  r.duration_ns = ns;
  r.src_device = static_cast<int8_t>(t.src);
  r.dst_device = static_cast<int8_t>(t.dst);
  r.transport = t.transport;
  TraceWriter::Append(r, P2PTRACE_RECORD_TIMING, t.seq);
}

// One copy: true when it is done with (published, or its events let go).
bool Resolve(const TimedCopy& t) {
  // Never inside a runtime that is being unloaded, nor in one that was (its table is retired).
  std::lock_guard<std::recursive_mutex> lock(UnloadMutex());
  if (t.rt->retired.load(std::memory_order_acquire)) return true;  // dropped: its events went with it
  cudaError_t q = t.rt->EventQuery(t.end);
  if (q == cudaErrorNotReady) return false;
  float ms = -1;
  if (q == cudaSuccess && t.rt->EventElapsedTime(&ms, t.start, t.end) == cudaSuccess) {
    Publish(t, ms);
    Release(t);
  } else {  // the events are no good any more (device error): let them go, the slot may be remade
    t.rt->EventDestroy(t.start);
    t.rt->EventDestroy(t.end);
    PoolOf(t).unmade.fetch_or(uint64_t{1} << t.slot, std::memory_order_release);
  }
  return true;
}

bool PastDeadline() { return g_stop.load(std::memory_order_acquire) && NowNs() > g_deadline.load(std::memory_order_relaxed); }

// Takes what was queued, resolves what completed, and polls again at most every kPollNs while
// anything is pending; sleeps (futex) when nothing is. Stopping: until all is resolved or the
// deadline passes, after which it makes no CUDA call (the runtime is about to be torn down).
void* ResolverMain(void*) {
  std::vector<TimedCopy> pending;
  pending.reserve(256);
  for (;;) {
    TimedCopy t;
    while (Dequeue(&t)) pending.push_back(t);
    size_t kept = 0;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (PastDeadline()) break;
      if (!Resolve(pending[i])) pending[kept++] = pending[i];
    }
    if (PastDeadline()) break;
    pending.resize(kept);  // (left as is when broken off: nothing more is resolved then)
    bool stopping = g_stop.load(std::memory_order_acquire);
    if (stopping && pending.empty() && !QueueHasWork()) break;
    if (!pending.empty() || stopping) {
      FutexWait(g_state, kBusy, kPollNs);  // a plain 1 ms nap (Drain may cut it short)
      continue;
    }
    g_state.store(kAsleep, std::memory_order_seq_cst);
    if (QueueHasWork() || g_stop.load(std::memory_order_seq_cst)) {
      g_state.store(kBusy, std::memory_order_relaxed);
      continue;
    }
    FutexWait(g_state, kAsleep, -1);
    g_state.store(kBusy, std::memory_order_relaxed);
  }
  g_done.store(1, std::memory_order_release);
  FutexWake(g_done);
  return nullptr;
}

// The resolver blocks every signal: the application's handlers must never run on it. Caller holds g_mu.
void StartResolver() {
  g_state.store(kBusy, std::memory_order_relaxed);  // also when it cannot start: no further attempts
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t tid;
  if (pthread_create(&tid, nullptr, ResolverMain, nullptr) == 0) pthread_detach(tid);
  else g_done.store(1, std::memory_order_relaxed);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

__attribute__((noinline, cold)) void WakeResolver() {
  int s = g_state.load(std::memory_order_seq_cst);
  if (s == kNotStarted) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_state.load(std::memory_order_relaxed) == kNotStarted && !g_stop.load(std::memory_order_relaxed))
      StartResolver();
  } else if (s == kAsleep && g_state.compare_exchange_strong(s, kBusy, std::memory_order_seq_cst)) {
    FutexWake(g_state);
  }
}

void ForkPrepare() { g_mu.lock(); }
void ForkParent() { g_mu.unlock(); }
// The resolver did not survive the fork, and the parent's events are not the child's to use
// (they are forgotten, not destroyed). Only this thread exists now: plain resets are safe.
void ForkChild() {
  g_mu.unlock();
  g_state.store(kNotStarted, std::memory_order_relaxed);
  g_done.store(0, std::memory_order_relaxed);
  g_stop.store(false, std::memory_order_relaxed);
  g_blockers.fetch_and(kStopped - 1, std::memory_order_relaxed);
  ResetQueue();
  for (auto& per_node : g_pools)
    for (auto& pool : per_node)
      if (Pool* p = pool.load(std::memory_order_relaxed)) {
        p->free.store(0, std::memory_order_relaxed);
        p->unmade.store(~uint64_t{0}, std::memory_order_relaxed);
      }
}

void AtExit() { CopyTimer::Drain(); }

// Caller holds g_mu.
void InitOnce() {
  static bool done = [] {
    pthread_atfork(ForkPrepare, ForkParent, ForkChild);
    std::atexit(AtExit);  // registered after cudart initialised: runs before its teardown
    return true;
  }();
  (void)done;
}

// No free pair: make one, up to kPairs per pool (the pool too, the first time). -1 when the pool
// is at its cap or the events cannot be made.
__attribute__((noinline, cold)) int MakePair(const CudaRuntime& rt, int device, Pool** out) {
  std::atomic<Pool*>& slot = g_pools[static_cast<int>(rt.node)][device];
  Pool* pool = slot.load(std::memory_order_acquire);
  if (pool == nullptr) {
    std::lock_guard<std::mutex> lock(g_mu);
    InitOnce();
    pool = slot.load(std::memory_order_relaxed);
    if (pool == nullptr) {
      pool = new Pool();
      slot.store(pool, std::memory_order_release);
    }
  }
  *out = pool;
  if (int i = TakeFree(*pool); i >= 0) return i;
  uint64_t m = pool->unmade.load(std::memory_order_relaxed);
  int i = -1;
  while (m != 0 && i < 0)
    if (pool->unmade.compare_exchange_weak(m, m & (m - 1), std::memory_order_acquire, std::memory_order_relaxed))
      i = __builtin_ctzll(m);
  if (i < 0) return -1;
  // Events belong to the device current when they are made: switch there for a moment.
  EventPair ev{};
  int current = -1;
  bool ok = rt.GetDevice(&current) == cudaSuccess && (current == device || rt.SetDevice(device) == cudaSuccess);
  if (ok) {
    ok = rt.EventCreateWithFlags(&ev.start, cudaEventDefault) == cudaSuccess;
    if (ok && rt.EventCreateWithFlags(&ev.end, cudaEventDefault) != cudaSuccess) {
      rt.EventDestroy(ev.start);
      ok = false;
    }
    if (current != device) rt.SetDevice(current);
  }
  if (!ok) {
    pool->unmade.fetch_or(uint64_t{1} << i, std::memory_order_release);
    return -1;
  }
  pool->pair[i] = ev;
  if (p2ptrace_file_header* h = TraceWriter::header()) AddRelaxed(&h->timing_event_pairs, 1);
  return i;
}

}  // namespace

void CopyTimer::ForgetRuntime(Node node) {
  for (std::atomic<Pool*>& pool : g_pools[static_cast<int>(node)]) pool.store(nullptr, std::memory_order_release);
}

void CopyTimer::CaptureBegan() { g_blockers.fetch_add(1, std::memory_order_relaxed); }
void CopyTimer::CaptureEnded() { g_blockers.fetch_sub(1, std::memory_order_relaxed); }

bool CopyTimer::Begin(const CudaRuntime& rt, int device, cudaStream_t stream, TimedCopy* t) {
  KeepErrno keep;
  if (g_blockers.load(std::memory_order_relaxed) != 0 || static_cast<unsigned>(device) >= P2PTRACE_MAX_DEVICES ||
      !rt.complete) {
    CountSkip();
    return false;
  }
  Pool* pool = g_pools[static_cast<int>(rt.node)][device].load(std::memory_order_acquire);
  int slot = pool != nullptr ? TakeFree(*pool) : -1;
  if (__builtin_expect(slot < 0, 0)) {
    // All made and none free (the resolver has not caught up): skip without the slow path.
    if ((pool != nullptr && pool->unmade.load(std::memory_order_relaxed) == 0) ||
        (slot = MakePair(rt, device, &pool)) < 0) {
      CountSkip();
      return false;
    }
  }
  t->rt = &rt;
  t->device = device;
  t->slot = slot;
  t->pool = pool;
  t->start = pool->pair[slot].start;
  t->end = pool->pair[slot].end;
  if (rt.EventRecord(t->start, stream) != cudaSuccess) {
    Release(*t);
    CountSkip();
    return false;
  }
  return true;
}

void CopyTimer::End(cudaStream_t stream, bool copy_succeeded, TimedCopy* t) {
  KeepErrno keep;
  if (!copy_succeeded) {
    Release(*t);
    return;
  }
  if (t->rt->EventRecord(t->end, stream) != cudaSuccess || !Enqueue(*t)) {
    Release(*t);
    CountSkip();
    return;
  }
  if (__builtin_expect(g_state.load(std::memory_order_seq_cst) != kBusy, 0)) WakeResolver();
}

void CopyTimer::Drain() {
  g_blockers.fetch_or(kStopped, std::memory_order_relaxed);  // nothing more is timed
  if (g_state.load(std::memory_order_acquire) == kNotStarted) return;
  // Give queued copies up to half a second to complete, then the resolver stops for good.
  int64_t deadline = NowNs() + kDrainNs;
  g_deadline.store(deadline, std::memory_order_relaxed);
  g_stop.store(true, std::memory_order_seq_cst);
  g_state.exchange(kBusy, std::memory_order_seq_cst);  // a resolver about to sleep does not
  FutexWake(g_state);
  for (int64_t now = NowNs(); g_done.load(std::memory_order_acquire) == 0 && now < deadline + kPollNs; now = NowNs())
    FutexWait(g_done, 0, deadline + kPollNs - now);
}

}  // namespace p2ptrace::shim
