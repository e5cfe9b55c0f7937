#include "tools/pair_test.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "fmt/format.h"
#include "tools/cuda_runtime.h"

namespace p2ptrace::cli {
namespace {

constexpr int kHostToDevice = 1, kDeviceToHost = 2;  // cudaMemcpyKind
constexpr int kNotReady = 600;                       // cudaErrorNotReady
constexpr size_t kLatencyBytes = 8;
constexpr int kMaxReps = 256;
constexpr double kStableSeconds = 0.01;  // copies this long are timed well by events (~0.5 us resolution)
constexpr int kLatencyCopies = 20;

using Clock = std::chrono::steady_clock;

// One test's CUDA state, given back in its destructor.
class Pair {
 public:
  Pair(const CudaCopies& c, TestGpu src, TestGpu dst)
      : c_(c), src_(src.ordinal), dst_(dst.ordinal), src_name_(src.index), dst_name_(dst.index) {}
  ~Pair() {
    c_.SetDevice(src_);
    for (void* e : {events_[0], events_[1], join_})
      if (e) c_.EventDestroy(e);
    for (void* s : {stream_, back_})
      if (s) c_.StreamDestroy(s);
    if (a_) c_.Free(a_);
    if (host_) c_.FreeHost(host_);
    if (enabled_) c_.DisablePeer(dst_);  // the test enabled it: disabled again, as it was found
    c_.SetDevice(dst_);
    if (b_) c_.Free(b_);
  }

  // Fills `m`; false when a copy timed out (the pair's GPUs are then left alone).
  bool Run(PairMeasurement* m, const PairTestOptions& o) {
    int can = 0;
    if (int r = c_.CanAccessPeer(&can, src_, dst_); r != 0) return Fail(m, "cudaDeviceCanAccessPeer", r);
    m->can_access = can != 0;
    if (!Check(m, "cudaSetDevice", c_.SetDevice(src_))) return true;
    if (m->can_access) {
      m->enable_result = c_.EnablePeer(dst_, 0);
      enabled_ = m->enable_result == 0;
    }
    if (!Check(m, "cudaStreamCreateWithFlags", c_.StreamCreate(&stream_, 1 /* non-blocking */))) return true;
    for (void*& e : events_)
      if (!Check(m, "cudaEventCreate", c_.EventCreate(&e))) return true;
    size_t bytes = o.copy_bytes;
    // The destination's side: its buffer, and a stream and an event of its own for the copies back
    // (an event is recorded only on a stream of its device).
    if (!Check(m, "cudaMalloc", c_.Malloc(&a_, bytes)) || !Check(m, "cudaMallocHost", c_.MallocHost(&host_, bytes)) ||
        !Check(m, "cudaSetDevice", c_.SetDevice(dst_)) || !Check(m, "cudaMalloc", c_.Malloc(&b_, bytes)) ||
        !Check(m, "cudaStreamCreateWithFlags", c_.StreamCreate(&back_, 1)) ||
        !Check(m, "cudaEventCreate", c_.EventCreate(&join_)) ||
        // What the destination held before, unlike anything sent: a write that never lands shows.
        !Check(m, "cudaMemset", c_.Memset(b_, 0xA5, bytes)) || !Check(m, "cudaSetDevice", c_.SetDevice(src_)))
      return true;
    // A pattern of the pair's own, different in every 8 bytes, so that another pair's data left
    // behind, or a block landing at the wrong offset, cannot pass for it.
    auto* h = static_cast<uint64_t*>(host_);
    const uint64_t seed = (static_cast<uint64_t>(src_) << 32 | static_cast<uint64_t>(dst_)) + 1;
    for (size_t i = 0; i < bytes / 8; ++i) h[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    if (!Check(m, "cudaMemcpy", c_.Memcpy(a_, host_, bytes, kHostToDevice))) return true;

    // Peer copy (staged by the runtime itself when peer access is off): one copy (it also warms the
    // path up), then as many as take kStableSeconds by its time, timed together (nvbandwidth repeats
    // too). Counted from the first rather than doubled: a third of the copies, which the simulated
    // node moves for real on the CPU.
    double seconds = 0;
    size_t n = bytes;
    int reps = 1;
    auto copies = [&] {
      for (int i = 0; i < reps; ++i)
        if (int r = c_.MemcpyPeerAsync(b_, dst_, a_, src_, n, stream_); r != 0) return r;
      return 0;
    };
    if (!Time(m, o, Name("the copy"), copies, &seconds)) return !m->timed_out;
    if (seconds < kStableSeconds) {
      reps = static_cast<int>(std::min<double>(kMaxReps, std::ceil(kStableSeconds / seconds)));
      if (!Time(m, o, Name("the copies"), copies, &seconds)) return !m->timed_out;
    }
    if (m->can_access) m->gbps = static_cast<double>(n) * reps / seconds * 1e-9;
    // The data, read back from the destination into the host buffer's second use.
    std::unique_ptr<unsigned char[]> got(new unsigned char[n]);
    if (!Check(m, "cudaSetDevice", c_.SetDevice(dst_)) || !Check(m, "cudaMemcpy", c_.Memcpy(got.get(), b_, n, kDeviceToHost)) ||
        !Check(m, "cudaSetDevice", c_.SetDevice(src_)))
      return true;
    m->data_ok = std::memcmp(got.get(), host_, n) == 0;
    m->data_checked = true;
    // Both ways at once, half the bytes each way (a_'s first half to b_, b_'s second half back),
    // the destination's stream forked from and joined to the source's so one pair of events spans both.
    double both = 0;
    if (m->can_access) {
      size_t half = n / 2;
      if (!Time(m, o, fmt::format("the copies both ways (GPU{} <-> GPU{})", src_name_, dst_name_), [&] {
            if (int r = c_.StreamWaitEvent(back_, events_[0], 0); r != 0) return r;
            for (int i = 0; i < reps; ++i) {
              if (int r = c_.MemcpyPeerAsync(b_, dst_, a_, src_, half, stream_); r != 0) return r;
              if (int r = c_.MemcpyPeerAsync(static_cast<char*>(a_) + half, src_, static_cast<char*>(b_) + half, dst_, half, back_); r != 0)
                return r;
            }
            if (int r = c_.EventRecord(join_, back_); r != 0) return r;
            return c_.StreamWaitEvent(stream_, join_, 0);
          }, &both))
        return !m->timed_out;
      m->bidir_gbps = 2.0 * half * reps / both * 1e-9;
    }
    // Staged through pinned host memory: device to host, then host to device, one after the other.
    double d2h = 0, h2d = 0;
    if (!Time(m, o, fmt::format("the copy GPU{} -> host", src_name_), [&] { return c_.MemcpyAsync(host_, a_, n, kDeviceToHost, stream_); }, &d2h))
      return !m->timed_out;
    if (!Time(m, o, fmt::format("the copy host -> GPU{}", dst_name_), [&] { return c_.MemcpyAsync(b_, host_, n, kHostToDevice, stream_); }, &h2d))
      return !m->timed_out;
    m->staged_gbps = n / (d2h + h2d) * 1e-9;
    if (!m->can_access) m->gbps = -1;
    // A small copy's time, averaged.
    double small = 0;
    if (!Time(m, o, Name("the small copies"), [&] {
          for (int i = 0; i < kLatencyCopies; ++i)
            if (int r = c_.MemcpyPeerAsync(b_, dst_, a_, src_, kLatencyBytes, stream_); r != 0) return r;
          return 0;
        }, &small))
      return !m->timed_out;
    m->latency_us = small / kLatencyCopies * 1e6;
    return true;
  }

 private:
  bool Fail(PairMeasurement* m, const char* call, int r) {
    m->error = fmt::format("{}: {} ({})", call, r, c_.ErrorString ? c_.ErrorString(r) : "");
    return true;
  }
  bool Check(PairMeasurement* m, const char* call, int r) {
    if (r != 0) Fail(m, call, r);
    return r == 0;
  }
  std::string Name(const char* what) const { return fmt::format("{} GPU{} -> GPU{}", what, src_name_, dst_name_); }
  // Times `issue` on the stream between two events; polls, never blocks past the limit. `what`
  // names the copies should they not finish.
  template <typename Issue>
  bool Time(PairMeasurement* m, const PairTestOptions& o, const std::string& what, Issue issue, double* seconds) {
    if (!Check(m, "cudaEventRecord", c_.EventRecord(events_[0], stream_))) return false;
    if (!Check(m, "copy", issue())) return false;
    if (!Check(m, "cudaEventRecord", c_.EventRecord(events_[1], stream_))) return false;
    Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(o.copy_limit_seconds));
    for (int r;;) {
      r = c_.EventQuery(events_[1]);
      if (r == 0) break;
      if (r != kNotReady) return Check(m, "cudaEventQuery", r);
      if (Clock::now() > deadline) {
        m->timed_out = true;
        m->stalled_copy = what;
        abandoned_ = true;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    float ms = 0;
    if (!Check(m, "cudaEventElapsedTime", c_.EventElapsed(&ms, events_[0], events_[1]))) return false;
    *seconds = ms > 0 ? ms * 1e-3 : 1e-9;
    return true;
  }

  const CudaCopies& c_;
  int src_, dst_;            // CUDA ordinals in this process
  int src_name_, dst_name_;  // the node's indices, for messages
  void *a_ = nullptr, *b_ = nullptr, *host_ = nullptr, *stream_ = nullptr, *back_ = nullptr, *join_ = nullptr;
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
            BindCuda(lib, "cudaStreamWaitEvent", &StreamWaitEvent) && BindCuda(lib, "cudaMemset", &Memset);
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
        auto* pair = new Pair(cuda, s, d);
        pair->Run(&m, o);
        if (pair->abandoned_) hung.insert(s.index), hung.insert(d.index);  // leaked on purpose: its memory may still be written
        else delete pair;
      }
      out.push_back(m);
      if (progress) progress(++done, total);
    }
  return out;
}

}  // namespace p2ptrace::cli
