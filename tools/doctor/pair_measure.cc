#include "tools/doctor/pair_measure.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "fmt/format.h"
#include "tools/doctor/cuda_loader.h"

namespace p2ptrace::cli {
namespace {

constexpr int kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3;  // cudaMemcpyKind
constexpr int kNotReady = 600;                       // cudaErrorNotReady
constexpr size_t kLatencyBytes = 8;
constexpr int kMaxReps = 256;
constexpr double kStableSeconds = 0.01;  // copies this long are timed well by events (~0.5 us resolution)
constexpr int kLatencyCopies = 20;

using Clock = std::chrono::steady_clock;

// The test's CUDA calls run on one thread; this one watches them. A call that has not returned
// within the limit (a free, a peer enable or anything else stuck in the driver cannot be
// interrupted, nor waited for) ends the test: options.on_stuck gets every pair, that one failed with
// the call named and those after it untested, and ends the process.
class CallWatch {
 public:
  explicit CallWatch(const PairTestOptions& o) : o_(o), thread_([this] { Watch(); }) {}
  ~CallWatch() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // `call()` with `what` ("cudaFree on GPU1") and the pair's measurement so far on record.
  template <typename Call>
  int Bounded(std::string what, const PairMeasurement& m, Call call) {
    {
      std::lock_guard<std::mutex> l(mu_);
      what_ = std::move(what);
      pair_ = m;
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.copy_limit_seconds));
      armed_ = true;
    }
    int r = call();
    std::lock_guard<std::mutex> l(mu_);
    armed_ = false;
    return r;
  }
  void Done(const PairMeasurement& m) {
    std::lock_guard<std::mutex> l(mu_);
    done_.push_back(m);
  }

 private:
  void Watch() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      cv_.wait_for(l, std::chrono::milliseconds(50));
      if (!armed_ || Clock::now() <= deadline_) continue;
      std::vector<PairMeasurement> all = done_;
      pair_.timed_out = true;
      pair_.stalled_copy = what_;
      all.push_back(pair_);
      for (const TestGpu& s : o_.gpus)
        for (const TestGpu& d : o_.gpus) {
          if (s.ordinal == d.ordinal || std::any_of(all.begin(), all.end(), [&](const PairMeasurement& m) {
                return m.src == s.index && m.dst == d.index;
              }))
            continue;
          PairMeasurement rest;
          rest.src = s.index, rest.dst = d.index, rest.tested = false;
          rest.error = fmt::format("the test stopped: {} never returned", what_);
          all.push_back(rest);
        }
      l.unlock();
      if (o_.on_stuck) o_.on_stuck(std::move(all));
      _exit(1);  // never go on beside a CUDA call that may still return
    }
  }

  const PairTestOptions& o_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  Clock::time_point deadline_;
  std::string what_;
  PairMeasurement pair_;
  std::vector<PairMeasurement> done_;
  std::thread thread_;  // last: started once the rest is built
};

// One test's CUDA state, given back in its destructor. Every CUDA call goes through Call (bounded by
// the watch); every wait for the GPU polls an event against the time limit, so a copy that never
// finishes fails its pair instead of stopping the test.
class Pair {
 public:
  Pair(const CudaCopies& c, CallWatch& watch, TestGpu src, TestGpu dst)
      : c_(c), watch_(watch), src_(src.ordinal), dst_(dst.ordinal), src_name_(src.index), dst_name_(dst.index) {
    m_.src = src.index, m_.dst = dst.index;
  }
  ~Pair() {
    Call("cudaSetDevice", c_.SetDevice, src_);
    for (void* e : {events_[0], events_[1], join_})
      if (e) Call("cudaEventDestroy", c_.EventDestroy, e);
    for (void* s : {stream_, back_})
      if (s) Call("cudaStreamDestroy", c_.StreamDestroy, s);
    if (a_) Call("cudaFree", c_.Free, a_);
    if (count_) {
      Call("cudaSetDevice", c_.SetDevice, dst_);
      Call("cudaFree", c_.Free, count_);
      Call("cudaSetDevice", c_.SetDevice, src_);
    }
    if (host_) Call("cudaFreeHost", c_.FreeHost, host_);
    if (enabled_) Call("cudaDeviceDisablePeerAccess", c_.DisablePeer, dst_);  // the test enabled it: disabled again, as it was found
    Call("cudaSetDevice", c_.SetDevice, dst_);
    if (b_) Call("cudaFree", c_.Free, b_);
  }

  // Fills `m`; false when a copy timed out (the pair's GPUs are then left alone).
  bool Run(PairMeasurement* m, const PairTestOptions& o) {
    bool done = Measure(o);
    *m = m_;
    return done;
  }

 private:
  bool Measure(const PairTestOptions& o) {
    PairMeasurement* m = &m_;
    int can = 0;
    if (int r = Call("cudaDeviceCanAccessPeer", c_.CanAccessPeer, &can, src_, dst_); r != 0)
      return Fail(m, "cudaDeviceCanAccessPeer", r);
    m->can_access = can != 0;
    if (!Check(m, "cudaSetDevice", Call("cudaSetDevice", c_.SetDevice, src_))) return true;
    if (m->can_access) {
      m->enable_result = Call("cudaDeviceEnablePeerAccess", c_.EnablePeer, dst_, 0u);
      enabled_ = m->enable_result == 0;
    }
    if (!Check(m, "cudaStreamCreateWithFlags", Call("cudaStreamCreateWithFlags", c_.StreamCreate, &stream_, 1u /* non-blocking */)))
      return true;
    for (void*& e : events_)
      if (!Check(m, "cudaEventCreate", Call("cudaEventCreate", c_.EventCreate, &e))) return true;
    size_t bytes = o.copy_bytes;
    // The destination's side: its buffer, and a stream and an event of its own for the copies back
    // (an event is recorded only on a stream of its device).
    if (!Check(m, "cudaMalloc", Call("cudaMalloc", c_.Malloc, &a_, bytes)) ||
        !Check(m, "cudaMallocHost", Call("cudaMallocHost", c_.MallocHost, &host_, bytes)) ||
        !Check(m, "cudaSetDevice", Call("cudaSetDevice", c_.SetDevice, dst_)) ||
        !Check(m, "cudaMalloc", Call("cudaMalloc", c_.Malloc, &b_, bytes)) ||
        !Check(m, "cudaStreamCreateWithFlags", Call("cudaStreamCreateWithFlags", c_.StreamCreate, &back_, 1u)) ||
        !Check(m, "cudaEventCreate", Call("cudaEventCreate", c_.EventCreate, &join_)))
      return true;
    // What the destination held before, unlike anything sent: a write that never lands shows.
    if (!Await(o, fmt::format("the fill of GPU{}", dst_name_), back_, join_,
               [&] { return Call("cudaMemsetAsync", c_.MemsetAsync, b_, 0xA5, bytes, back_); }))
      return !m->timed_out;
    if (!Check(m, "cudaSetDevice", Call("cudaSetDevice", c_.SetDevice, src_))) return true;
    // A pattern of the pair's own, different in every 8 bytes, so that another pair's data left
    // behind, or a block landing at the wrong offset, cannot pass for it. Kept here too: the pinned
    // buffer takes what is read back.
    auto* h = static_cast<uint64_t*>(host_);
    const uint64_t seed = (static_cast<uint64_t>(src_) << 32 | static_cast<uint64_t>(dst_)) + 1;
    for (size_t i = 0; i < bytes / 8; ++i) h[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    std::unique_ptr<unsigned char[]> sent(new unsigned char[bytes]);
    std::memcpy(sent.get(), host_, bytes);
    if (!Await(o, fmt::format("the copy host -> GPU{}", src_name_), stream_, events_[1],
               [&] { return Call("cudaMemcpyAsync", c_.MemcpyAsync, a_, host_, bytes, kHostToDevice, stream_); }))
      return !m->timed_out;

    // Peer copy (staged by the runtime itself when peer access is off): one copy (it also warms the
    // path up), then as many as take kStableSeconds by its time, timed together (nvbandwidth repeats
    // too). Counted from the first rather than doubled: a third of the copies, which the simulated
    // node moves for real on the CPU.
    double seconds = 0;
    size_t n = bytes;
    int reps = 1;
    auto copies = [&] {
      for (int i = 0; i < reps; ++i)
        if (int r = Call("cudaMemcpyPeerAsync", c_.MemcpyPeerAsync, b_, dst_, a_, src_, n, stream_); r != 0) return r;
      return 0;
    };
    if (!Time(o, Name("the copy"), copies, &seconds)) return !m->timed_out;
    if (seconds < kStableSeconds) {
      reps = static_cast<int>(std::min<double>(kMaxReps, std::ceil(kStableSeconds / seconds)));
      if (!Time(o, Name("the copies"), copies, &seconds)) return !m->timed_out;
    }
    if (m->can_access) m->gbps = static_cast<double>(n) * reps / seconds * 1e-9;
    // The data, read back from the destination into the pinned buffer.
    if (!Check(m, "cudaSetDevice", Call("cudaSetDevice", c_.SetDevice, dst_))) return true;
    if (!Await(o, fmt::format("the copy GPU{} -> host", dst_name_), back_, join_,
               [&] { return Call("cudaMemcpyAsync", c_.MemcpyAsync, host_, b_, n, kDeviceToHost, back_); }))
      return !m->timed_out;
    if (!Check(m, "cudaSetDevice", Call("cudaSetDevice", c_.SetDevice, src_))) return true;
    m->data_ok = std::memcmp(host_, sent.get(), n) == 0;
    m->data_checked = true;
    // The same through the source's own cores, as NCCL's kernels write (peer access on, and the
    // copy engine's data sound: it is the reference).
    if (m->data_ok && m->can_access && (m->enable_result == 0 || m->enable_result == 704)) {
      if (o.sm == nullptr) m->sm_note = o.sm_note;
      else if (!SmCopy(o, *o.sm, n)) return !m->timed_out;
    }
    // Both ways at once, half the bytes each way (a_'s first half to b_, b_'s second half back),
    // the destination's stream forked from and joined to the source's so one pair of events spans both.
    double both = 0;
    if (m->can_access) {
      size_t half = n / 2;
      if (!Time(o, fmt::format("the copies both ways (GPU{} <-> GPU{})", src_name_, dst_name_), [&] {
            if (int r = Call("cudaStreamWaitEvent", c_.StreamWaitEvent, back_, events_[0], 0u); r != 0) return r;
            for (int i = 0; i < reps; ++i) {
              if (int r = Call("cudaMemcpyPeerAsync", c_.MemcpyPeerAsync, b_, dst_, a_, src_, half, stream_); r != 0) return r;
              if (int r = Call("cudaMemcpyPeerAsync", c_.MemcpyPeerAsync, static_cast<void*>(static_cast<char*>(a_) + half), src_,
                               static_cast<const void*>(static_cast<char*>(b_) + half), dst_, half, back_);
                  r != 0)
                return r;
            }
            if (int r = Call("cudaEventRecord", c_.EventRecord, join_, back_); r != 0) return r;
            return Call("cudaStreamWaitEvent", c_.StreamWaitEvent, stream_, join_, 0u);
          }, &both))
        return !m->timed_out;
      m->bidir_gbps = 2.0 * half * reps / both * 1e-9;
    }
    // Staged through pinned host memory: device to host, then host to device, one after the other.
    double d2h = 0, h2d = 0;
    if (!Time(o, fmt::format("the copy GPU{} -> host", src_name_),
              [&] { return Call("cudaMemcpyAsync", c_.MemcpyAsync, host_, a_, n, kDeviceToHost, stream_); }, &d2h))
      return !m->timed_out;
    if (!Time(o, fmt::format("the copy host -> GPU{}", dst_name_),
              [&] { return Call("cudaMemcpyAsync", c_.MemcpyAsync, b_, host_, n, kHostToDevice, stream_); }, &h2d))
      return !m->timed_out;
    m->staged_gbps = n / (d2h + h2d) * 1e-9;
    if (!m->can_access) m->gbps = -1;
    // A small copy's time, averaged.
    double small = 0;
    if (!Time(o, Name("the small copies"), [&] {
          for (int i = 0; i < kLatencyCopies; ++i)
            if (int r = Call("cudaMemcpyPeerAsync", c_.MemcpyPeerAsync, b_, dst_, a_, src_, kLatencyBytes, stream_); r != 0)
              return r;
          return 0;
        }, &small))
      return !m->timed_out;
    m->latency_us = small / kLatencyCopies * 1e6;
    return true;
  }

  // Half the buffer by a kernel on the source into the destination through peer access, compared
  // there with the other half, which holds the pattern the copy engine delivered (copied across on
  // the destination first). False when a wait ran out (the pair abandoned) or a call failed.
  bool SmCopy(const PairTestOptions& o, SmCopyKernels& sm, size_t bytes) {
    PairMeasurement* m = &m_;
    uint64_t words = bytes / 2 / 8;
    size_t half = words * 8;
    void* reference = static_cast<char*>(b_) + half;
    // A device made current for the driver's calls too: cudaSetDevice, then a runtime call that binds
    // its primary context (CUDA 11's cudaSetDevice binds it only at the next call that needs one).
    auto use = [&](int ordinal) {
      return Check(m, "cudaSetDevice", Call("cudaSetDevice", c_.SetDevice, ordinal)) &&
             Check(m, "cudaFree", Call("cudaFree", c_.Free, static_cast<void*>(nullptr)));
    };
    // The kernels in the current device's context.
    auto kernels = [&](int ordinal) -> const SmCopyKernels::Loaded* {
      void* context = nullptr;
      if (Call("cuCtxGetCurrent", sm.CtxGetCurrent, &context) != 0 || context == nullptr) {
        m->sm_note = fmt::format("not checked: no CUDA context current on GPU{}", ordinal == src_ ? src_name_ : dst_name_);
        return nullptr;
      }
      SmCopyKernels::Loaded& k = sm.by_context[context];
      if (k.copy == nullptr) {
        void* module = nullptr;
        if (int r = Call("cuModuleLoadData", sm.ModuleLoadData, &module, static_cast<const void*>(kSmCopyPtx)); r != 0) {
          m->sm_note = fmt::format("not checked: cuModuleLoadData on GPU{} returned {}", ordinal == src_ ? src_name_ : dst_name_, r);
          return nullptr;
        }
        if (int r = Call("cuModuleGetFunction", sm.ModuleGetFunction, &k.copy, module, "p2ptrace_copy_words"); r != 0 ||
            Call("cuModuleGetFunction", sm.ModuleGetFunction, &k.count, module, "p2ptrace_count_differing") != 0) {
          k.copy = k.count = nullptr;
          m->sm_note = "not checked: cuModuleGetFunction failed";
          return nullptr;
        }
      }
      return &k;
    };
    auto launch = [&](void* fn, void* stream, std::initializer_list<void*> params) {
      std::vector<void*> p(params);
      return Call("cuLaunchKernel", sm.LaunchKernel, fn, 256u, 1u, 1u, 256u, 1u, 1u, 0u, stream, p.data(),
                  static_cast<void**>(nullptr));
    };
    // On the destination: the reference half, the target half refilled, the count zeroed.
    if (!use(dst_)) return false;
    const SmCopyKernels::Loaded* at_dst = kernels(dst_);
    if (at_dst == nullptr) return use(src_);
    if (!Check(m, "cudaMalloc", Call("cudaMalloc", c_.Malloc, &count_, size_t{256}))) return false;
    if (!Await(o, fmt::format("the reference copy on GPU{}", dst_name_), back_, join_, [&] {
          if (int r = Call("cudaMemcpyAsync", c_.MemcpyAsync, reference, static_cast<const void*>(b_), half, kDeviceToDevice, back_); r != 0)
            return r;
          if (int r = Call("cudaMemsetAsync", c_.MemsetAsync, b_, 0xA5, half, back_); r != 0) return r;
          return Call("cudaMemsetAsync", c_.MemsetAsync, count_, 0, size_t{4}, back_);
        }))
      return false;
    // On the source: its kernel stores into the destination.
    if (!use(src_)) return false;
    const SmCopyKernels::Loaded* at_src = kernels(src_);
    if (at_src == nullptr) return true;
    if (!Await(o, Name("the kernel's stores"), stream_, events_[1],
               [&] { return launch(at_src->copy, stream_, {&b_, &a_, &words}); }))
      return false;
    // On the destination: the words that differ, counted there, and the count read back.
    if (!use(dst_)) return false;
    if (!Await(o, fmt::format("the check on GPU{}", dst_name_), back_, join_, [&] {
          if (int r = launch(at_dst->count, back_, {&b_, &reference, &words, &count_}); r != 0) return r;
          return Call("cudaMemcpyAsync", c_.MemcpyAsync, host_, static_cast<const void*>(count_), size_t{4}, kDeviceToHost, back_);
        }))
      return false;
    uint32_t differing = 0;
    std::memcpy(&differing, host_, sizeof differing);
    m->sm_checked = true;
    m->sm_words = words;
    m->sm_differing = differing;
    return Check(m, "cudaSetDevice", Call("cudaSetDevice", c_.SetDevice, src_));
  }

  // A CUDA call, under the watch: "cudaFree on GPU1 -> GPU2's test" names it should it never return.
  template <typename... Params, typename... Args>
  int Call(const char* name, int (*fn)(Params...), Args... args) {
    return watch_.Bounded(fmt::format("{} (testing GPU{} -> GPU{})", name, src_name_, dst_name_), m_,
                          [&] { return fn(args...); });
  }
  bool Fail(PairMeasurement* m, const char* call, int r) {
    m->error = fmt::format("{}: {} ({})", call, r, c_.ErrorString ? c_.ErrorString(r) : "");
    return true;
  }
  bool Check(PairMeasurement* m, const char* call, int r) {
    if (r != 0) Fail(m, call, r);
    return r == 0;
  }
  std::string Name(const char* what) const { return fmt::format("{} GPU{} -> GPU{}", what, src_name_, dst_name_); }
  // Waits for `event`, recorded on `stream`, within the limit; polls, never blocks. False (the pair
  // abandoned) when it has not passed by then, or when a call failed (`error` says which).
  bool Wait(const PairTestOptions& o, const std::string& what, void* event) {
    PairMeasurement* m = &m_;
    Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(o.copy_limit_seconds));
    for (int r;;) {
      r = Call("cudaEventQuery", c_.EventQuery, event);
      if (r == 0) return true;
      if (r != kNotReady) return Check(m, "cudaEventQuery", r);
      if (Clock::now() > deadline) {
        m->timed_out = true;
        m->stalled_copy = what;
        abandoned_ = true;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  // Issues work on `stream` and waits for it through `event` (one of that stream's device).
  template <typename Issue>
  bool Await(const PairTestOptions& o, const std::string& what, void* stream, void* event, Issue issue) {
    PairMeasurement* m = &m_;
    if (!Check(m, "copy", issue())) return false;
    if (!Check(m, "cudaEventRecord", Call("cudaEventRecord", c_.EventRecord, event, stream))) return false;
    return Wait(o, what, event);
  }
  // Times `issue` on the source's stream between two events. `what` names the copies should they
  // not finish.
  template <typename Issue>
  bool Time(const PairTestOptions& o, const std::string& what, Issue issue, double* seconds) {
    PairMeasurement* m = &m_;
    if (!Check(m, "cudaEventRecord", Call("cudaEventRecord", c_.EventRecord, events_[0], stream_))) return false;
    if (!Await(o, what, stream_, events_[1], issue)) return false;
    float ms = 0;
    if (!Check(m, "cudaEventElapsedTime", Call("cudaEventElapsedTime", c_.EventElapsed, &ms, events_[0], events_[1])))
      return false;
    *seconds = ms > 0 ? ms * 1e-3 : 1e-9;
    return true;
  }

  const CudaCopies& c_;
  CallWatch& watch_;
  int src_, dst_;            // CUDA ordinals in this process
  int src_name_, dst_name_;  // the node's indices, for messages
  PairMeasurement m_;
  void *a_ = nullptr, *b_ = nullptr, *host_ = nullptr, *stream_ = nullptr, *back_ = nullptr, *join_ = nullptr;
  void* count_ = nullptr;  // on the destination: the words the SM copy got wrong
  void* events_[2] = {nullptr, nullptr};  // on the source: the start (also the fork) and the end
  bool enabled_ = false;

 public:
  bool abandoned_ = false;  // a copy never finished: nothing of it may be freed (the GPU may still write)
};

}  // namespace

bool CudaCopies::Load(std::string* why) {
  void* lib = OpenCudaRuntime(why);
  if (lib == nullptr) return false;
  bool ok = BindCuda(lib, "cudaGetDeviceCount", &GetDeviceCount) && BindCuda(lib, "cudaSetDevice", &SetDevice) &&
            BindCuda(lib, "cudaDeviceCanAccessPeer", &CanAccessPeer) && BindCuda(lib, "cudaDeviceEnablePeerAccess", &EnablePeer) &&
            BindCuda(lib, "cudaDeviceDisablePeerAccess", &DisablePeer) && BindCuda(lib, "cudaMalloc", &Malloc) &&
            BindCuda(lib, "cudaFree", &Free) && BindCuda(lib, "cudaMallocHost", &MallocHost) && BindCuda(lib, "cudaFreeHost", &FreeHost) &&
            BindCuda(lib, "cudaMemcpy", &Memcpy) && BindCuda(lib, "cudaMemcpyAsync", &MemcpyAsync) &&
            BindCuda(lib, "cudaMemcpyPeerAsync", &MemcpyPeerAsync) && BindCuda(lib, "cudaStreamCreateWithFlags", &StreamCreate) &&
            BindCuda(lib, "cudaStreamDestroy", &StreamDestroy) && BindCuda(lib, "cudaEventCreate", &EventCreate) &&
            BindCuda(lib, "cudaEventRecord", &EventRecord) && BindCuda(lib, "cudaEventQuery", &EventQuery) &&
            BindCuda(lib, "cudaEventElapsedTime", &EventElapsed) && BindCuda(lib, "cudaEventDestroy", &EventDestroy) &&
            BindCuda(lib, "cudaStreamWaitEvent", &StreamWaitEvent) && BindCuda(lib, "cudaMemsetAsync", &MemsetAsync);
  BindCuda(lib, "cudaGetErrorString", &ErrorString);
  if (!ok) {
    *why = "the CUDA runtime found lacks a function the test needs";
    return false;
  }
  int n = 0;
  int r = GetDeviceCount(&n);  // before n is read: argument order is unspecified
  *why = NoDeviceWhy(r, n);
  return why->empty();
}

std::vector<PairMeasurement> MeasurePairs(const CudaCopies& cuda, const PairTestOptions& o,
                                          const std::function<void(size_t, size_t)>& progress) {
  std::vector<PairMeasurement> out;
  CallWatch watch(o);
  std::set<int> hung;  // GPUs with a copy that never finished: not touched again
  size_t total = o.gpus.size() * (o.gpus.size() - (o.gpus.empty() ? 0 : 1)), done = 0;
  for (const TestGpu& s : o.gpus)
    for (const TestGpu& d : o.gpus) {
      if (s.ordinal == d.ordinal) continue;
      PairMeasurement m;
      m.src = s.index, m.dst = d.index;
      if (hung.count(s.index) || hung.count(d.index)) {
        m.tested = false;
        m.error = fmt::format("a copy with GPU{} never finished earlier, so the GPU is left alone", hung.count(s.index) ? s.index : d.index);
      } else {
        auto* pair = new Pair(cuda, watch, s, d);
        pair->Run(&m, o);
        if (pair->abandoned_) hung.insert(s.index), hung.insert(d.index);  // leaked on purpose: its memory may still be written
        else delete pair;
      }
      out.push_back(m);
      watch.Done(m);
      if (progress) progress(++done, total);
    }
  return out;
}

}  // namespace p2ptrace::cli
