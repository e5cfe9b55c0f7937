#include "shim/record/copy_timer.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

struct EventPair {
  cudaEvent_t start, end;
};

std::mutex g_mu;
// Never destroyed: the detached resolver may still touch it while static destructors run at exit.
std::condition_variable& g_cv = *new std::condition_variable();
std::vector<TimedCopy>* g_pending = nullptr;
// Free events per (runtime node, device).
std::vector<EventPair>* g_pool[static_cast<int>(Node::kCount)][P2PTRACE_MAX_DEVICES];
bool g_thread_running = false;
bool g_stop = false;
bool g_thread_idle = true;
bool g_new_work = false;  // queued since the resolver last looked
std::atomic<int> g_captures{0};

std::vector<EventPair>& Pool(Node node, int device) {
  auto*& p = g_pool[static_cast<int>(node)][device];
  if (p == nullptr) p = new std::vector<EventPair>();
  return *p;
}

void Release(const TimedCopy& t) {
  std::lock_guard<std::mutex> lock(g_mu);
  Pool(t.rt->node, t.device).push_back({t.start, t.end});
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

// One pass over the queue; returns whether anything is still pending.
bool ResolveOnce() {
  std::vector<TimedCopy> work;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    work.swap(*g_pending);
  }
  std::vector<TimedCopy> keep;
  for (const TimedCopy& t : work) {
    cudaError_t q = t.rt->EventQuery(t.end);
    if (q == cudaErrorNotReady) {
      keep.push_back(t);
      continue;
    }
    float ms = -1;
    if (q == cudaSuccess && t.rt->EventElapsedTime(&ms, t.start, t.end) == cudaSuccess) {
      Publish(t, ms);
      Release(t);
    } else {  // the events are no good any more (device error): let them go
      t.rt->EventDestroy(t.start);
      t.rt->EventDestroy(t.end);
    }
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_pending->insert(g_pending->end(), keep.begin(), keep.end());
  return !g_pending->empty();
}

// Polls at most every millisecond while copies are in flight (never spins), and sleeps until new
// work arrives otherwise.
void* ResolverMain(void*) {
  std::unique_lock<std::mutex> lock(g_mu);
  for (;;) {
    if (g_pending->empty()) g_cv.wait(lock, [] { return g_stop || g_new_work; });
    else g_cv.wait_for(lock, std::chrono::milliseconds(1), [] { return g_stop || g_new_work; });
    if (g_stop) break;
    g_new_work = false;
    if (g_pending->empty()) continue;
    g_thread_idle = false;
    lock.unlock();
    ResolveOnce();
    lock.lock();
    g_thread_idle = true;
    g_cv.notify_all();
  }
  g_thread_idle = true;
  g_cv.notify_all();
  return nullptr;
}

// The resolver blocks every signal: the application's handlers must never run on it.
void StartResolver() {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t tid;
  if (pthread_create(&tid, nullptr, ResolverMain, nullptr) == 0) {
    pthread_detach(tid);
    g_thread_running = true;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void ForkPrepare() { g_mu.lock(); }
void ForkParent() { g_mu.unlock(); }
// The resolver did not survive the fork, and the parent's events are not the child's to use.
void ForkChild() {
  g_mu.unlock();
  g_thread_running = false;
  g_stop = false;
  g_thread_idle = true;
  if (g_pending) g_pending->clear();
  for (auto& per_node : g_pool)
    for (auto*& pool : per_node)
      if (pool) pool->clear();
}

void AtExit() { CopyTimer::Drain(); }

void InitOnce() {
  static bool done = [] {
    g_pending = new std::vector<TimedCopy>();
    pthread_atfork(ForkPrepare, ForkParent, ForkChild);
    std::atexit(AtExit);  // registered after cudart initialised: runs before its teardown
    return true;
  }();
  (void)done;
}

}  // namespace

void CopyTimer::CaptureBegan() { g_captures.fetch_add(1, std::memory_order_relaxed); }
void CopyTimer::CaptureEnded() { g_captures.fetch_sub(1, std::memory_order_relaxed); }

bool CopyTimer::Begin(const CudaRuntime& rt, int device, cudaStream_t stream, TimedCopy* t) {
  if (g_captures.load(std::memory_order_relaxed) > 0 || !rt.complete || device < 0 || device >= P2PTRACE_MAX_DEVICES)
    return false;
  InitOnce();
  EventPair ev{};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_stop) return false;
    auto& pool = Pool(rt.node, device);
    if (!pool.empty()) {
      ev = pool.back();
      pool.pop_back();
    }
  }
  if (ev.start == nullptr) {
    // Events belong to the device current when they are made: switch there for a moment.
    int current = -1;
    if (rt.GetDevice(&current) != cudaSuccess) return false;
    if (current != device && rt.SetDevice(device) != cudaSuccess) return false;
    bool ok = rt.EventCreateWithFlags(&ev.start, cudaEventDefault) == cudaSuccess;
    ok = ok && rt.EventCreateWithFlags(&ev.end, cudaEventDefault) == cudaSuccess;
    if (current != device) rt.SetDevice(current);
    if (!ok) return false;
  }
  t->rt = &rt;
  t->device = device;
  t->start = ev.start;
  t->end = ev.end;
  if (rt.EventRecord(ev.start, stream) != cudaSuccess) {
    Release(*t);
    return false;
  }
  return true;
}

void CopyTimer::End(cudaStream_t stream, bool copy_succeeded, TimedCopy* t) {
  if (!copy_succeeded || t->rt->EventRecord(t->end, stream) != cudaSuccess) {
    Release(*t);
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_thread_running) StartResolver();
  g_pending->push_back(*t);
  if (!g_new_work && g_thread_idle) g_cv.notify_all();  // a busy resolver looks again within 1 ms
  g_new_work = true;
}

void CopyTimer::Drain() {
  if (g_pending == nullptr) return;
  // Give queued copies up to half a second to complete, then stop the resolver for good.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  {
    std::unique_lock<std::mutex> lock(g_mu);
    g_stop = true;
    g_cv.notify_all();
    g_cv.wait_until(lock, deadline, [] { return g_thread_idle; });
  }
  while (ResolveOnce() && std::chrono::steady_clock::now() < deadline) usleep(1000);
}

}  // namespace p2ptrace::shim
