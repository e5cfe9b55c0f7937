// The producer side of the trace (include/p2ptrace/trace_format.h): one MAP_SHARED file per
// process, opened at the first event, appended to lock-free by each thread in a chunk of its own,
// with exact per-pair counters updated by atomic adds. Crash-safe by construction: a record is in
// the page cache once Append returns.
#pragma once

#include <sys/resource.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>

#include "p2ptrace/trace_format.h"
#include "shim/base/config.h"

namespace p2ptrace::shim {

namespace detail {
extern constinit uint64_t g_no_chunk;  // a `used` for a thread with no chunk: with capacity 0, nothing fits
// This thread's chunk: its header's `used` (the records follow it directly), read and published by
// this thread alone.
struct ThreadChunk {
  uint64_t* used = &g_no_chunk;
  uint64_t capacity = 0;  // 0: none claimed yet (or a fork child's, reset: the parent's file is not ours)
};
static_assert(offsetof(p2ptrace_chunk_header, used) + sizeof(uint64_t) == sizeof(p2ptrace_chunk_header));
extern constinit thread_local ThreadChunk t_chunk __attribute__((tls_model("initial-exec")));
extern std::atomic<uint64_t> g_generation;  // bumped when a file opens (and in a fork child)
extern std::atomic<int> g_state;            // 0 closed, 1 open, 2 disabled
// P2PTRACE_CAPTURE_*_DLSYM: what libp2ptrace_audit.so has handed out through dlsym (audit_bound.cc).
extern std::atomic<uint32_t> g_dlsym_capture;
extern std::atomic<uint32_t> g_seq;       // from 1: 0 is an untimed copy's "no seq needed"
extern constinit SampleSpec g_sample;       // config().sample, where hot paths read it without a guard
}  // namespace detail

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The CPU's own counter, for the copy fast path's record time: one instruction where clock_gettime
// is a call (which costs the caller its argument registers) plus ~20 ns. Records stamped with it
// carry P2PTRACE_COPY_TICKS; readers convert with the chunk's CLOCK anchors (trace_format.h).
#if defined(__x86_64__)
inline uint64_t CpuTicks() { return __builtin_ia32_rdtsc(); }
constexpr bool kCpuTicks = true;
#elif defined(__aarch64__)
inline uint64_t CpuTicks() {
  uint64_t t;
  asm volatile("mrs %0, cntvct_el0" : "=r"(t));
  return t;
}
constexpr bool kCpuTicks = true;
#else
inline uint64_t CpuTicks() { return MonotonicNs(); }
constexpr bool kCpuTicks = false;
#endif

// The counter and the clock read together (a conversion anchor): the clock is read on both sides
// of the counter and the pair retried when they lie far apart (the thread was preempted between).
struct TickAnchor {
  uint64_t ticks = 0, ns = 0;
};
inline TickAnchor ReadTickAnchor() {
  TickAnchor a;
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint64_t before = MonotonicNs();
    a.ticks = CpuTicks();
    uint64_t after = MonotonicNs();
    a.ns = before + (after - before) / 2;
    if (after - before < 2000) break;
  }
  return a;
}

class TraceWriter {
 public:
  // Called once from the constructor; nothing is opened yet.
  static void Configure(const Config& config);
  static const Config& config();

  // True when events can be recorded: opens the file at the first call. False for good when the
  // directory is unusable (after one warning) or tracing is disabled.
  static bool Ready() {
    int s = detail::g_state.load(std::memory_order_acquire);
    return s == 1 || (s == 0 && Open());
  }

  // Ready() without opening: for hot paths that call nothing.
  static bool IsOpen() { return detail::g_state.load(std::memory_order_acquire) == 1; }

  static uint32_t NextSeq() { return detail::g_seq.fetch_add(1, std::memory_order_relaxed); }

  // Writes one record (R starts with p2ptrace_record_header) in place in this thread's chunk:
  // stamps its header (type, size, seq, the time now), lets `fill` set the other fields, then
  // publishes it. Chunk memory comes from a fresh file, so fields `fill` leaves alone are zero.
  // Returns the record where it lies in the mapping (a field may still be updated in place, as an
  // NCCL call's result when it returns); null when it was dropped (counted in the header).
  template <typename R, typename Fill>
  static R* Emit(uint16_t type, uint32_t seq, Fill&& fill) {
    return EmitAt<R>(type, seq, MonotonicNs(), fill);
  }
  // Emit with the record's time given (e.g. in CPU ticks: see CpuTicks).
  template <typename R, typename Fill>
  static R* EmitAt(uint16_t type, uint32_t seq, uint64_t now, Fill&& fill) {
    static_assert(sizeof(R) % 8 == 0 && sizeof(R) < 65536);
    Slot slot;
    if (__builtin_expect(!Reserve<R>(&slot), 0)) {
      if (!ClaimChunk()) return nullptr;  // counted as dropped
      Reserve<R>(&slot);
    }
    R* r = At<R>(slot);
    r->h.type = type;
    r->h.size = sizeof(R);
    r->h.seq = seq;
    r->h.time_ns = now;
    fill(*r);
    Publish<R>(slot);
    return r;
  }

  // For a hot path that writes its record itself, in three steps: Reserve (false: no room, then
  // Emit claims a chunk), write every field of At (the memory is zero), Publish.
  struct Slot {
    uint64_t* used;
    uint64_t fill;
  };
  template <typename R>
  static bool Reserve(Slot* s) {
    const detail::ThreadChunk& c = detail::t_chunk;
    s->used = c.used;
    s->fill = *c.used;
    return s->fill + sizeof(R) <= c.capacity;
  }
  template <typename R>
  static R* At(const Slot& s) {
    return reinterpret_cast<R*>(reinterpret_cast<unsigned char*>(s.used + 1) + s.fill);
  }
  template <typename R>
  static void Publish(const Slot& s) {
    __atomic_store_n(s.used, s.fill + sizeof(R), __ATOMIC_RELEASE);
  }

  // Appends a record built elsewhere (its header is stamped as by Emit).
  template <typename R>
  static void Append(const R& r, uint16_t type, uint32_t seq) {
    Emit<R>(type, seq, [&](R& out) {
      p2ptrace_record_header h = out.h;
      std::memcpy(&out, &r, sizeof(R));
      out.h = h;
    });
  }

  // The counters table (null until the file is open): for the copy fast path's precomputed offsets.
  static p2ptrace_pair_counters* Counters() { return counters_; }

  // Exact totals of (src, dst, path); null when a device number is out of the table's range.
  static p2ptrace_pair_counters* Counter(int src, int dst, int path) {
    if (static_cast<unsigned>(src) >= P2PTRACE_MAX_DEVICES || static_cast<unsigned>(dst) >= P2PTRACE_MAX_DEVICES)
      return nullptr;
    return counters_ + (src * P2PTRACE_MAX_DEVICES + dst) * 2 + path;
  }
  static p2ptrace_file_header* header() { return header_; }
  // The host this process's files are named after (trace files, the NCCL log tap's): the sysroot's
  // /proc/sys/kernel/hostname (the simulated host in tests), else gethostname().
  static std::string Host(const Config& c);

  // (Again) the allow-listed environment into the header's block: at open, and after the NCCL log
  // tap set or withdrew its variables, so that the trace holds what NCCL reads.
  static void RecordEnvironment();

  // The process is going away normally (exit's `status`): say so in the header.
  static void MarkExited(int status);
  static void ForgetMapping();  // fork child: the parent's file is not ours

 private:
  static bool Open();
  static bool ClaimChunk();
  static p2ptrace_file_header* header_;
  static p2ptrace_pair_counters* counters_;
};

inline void AddRelaxed(uint64_t* counter, uint64_t v) { __atomic_fetch_add(counter, v, __ATOMIC_RELAXED); }

// RLIMIT_FSIZE's soft limit (RLIM_INFINITY when none): a file the shim writes never grows past it,
// since the kernel answers a write beyond it with SIGXFSZ, which kills the process.
rlim_t FileSizeLimit();

// One line on stderr, "p2ptrace: warning: …". Async-signal-unsafe; not for signal handlers.
void Warn(const std::string& message);

}  // namespace p2ptrace::shim
