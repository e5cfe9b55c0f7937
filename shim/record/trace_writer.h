// The producer side of the trace (include/p2ptrace/trace_format.h): one MAP_SHARED file per
// process, opened at the first event, appended to lock-free by each thread in a chunk of its own,
// with exact per-pair counters updated by atomic adds. Crash-safe by construction: a record is in
// the page cache once Append returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <ctime>

#include "p2ptrace/trace_format.h"
#include "shim/config.h"

namespace p2ptrace::shim {

namespace detail {
struct ThreadChunk {
  unsigned char* records = nullptr;  // first byte after the chunk header
  uint64_t* used = nullptr;          // the chunk header's `used`, published with release stores
  uint64_t fill = 0;                 // this thread's copy of *used
  uint64_t capacity = 0;
  uint64_t generation = 0;           // the file this chunk belongs to
};
extern constinit thread_local ThreadChunk t_chunk __attribute__((tls_model("initial-exec")));
extern std::atomic<uint64_t> g_generation;  // bumped when a file opens (and in a fork child)
extern std::atomic<int> g_state;            // 0 closed, 1 open, 2 disabled
extern std::atomic<uint32_t> g_seq;
extern constinit SampleSpec g_sample;       // config().sample, where hot paths read it without a guard
}  // namespace detail

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
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
  // False when the record was dropped (counted in the header).
  template <typename R, typename Fill>
  static bool Emit(uint16_t type, uint32_t seq, Fill&& fill) {
    static_assert(sizeof(R) % 8 == 0 && sizeof(R) < 65536);
    uint64_t now = MonotonicNs();
    detail::ThreadChunk& c = detail::t_chunk;
    if (c.generation != detail::g_generation.load(std::memory_order_relaxed) || c.fill + sizeof(R) > c.capacity) {
      if (!ClaimChunk()) return false;  // counted as dropped
    }
    R* r = reinterpret_cast<R*>(c.records + c.fill);
    r->h.type = type;
    r->h.size = sizeof(R);
    r->h.seq = seq;
    r->h.time_ns = now;
    fill(*r);
    c.fill += sizeof(R);
    __atomic_store_n(c.used, c.fill, __ATOMIC_RELEASE);
    return true;
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

  // Exact totals of (src, dst, path); null when a device number is out of the table's range.
  static p2ptrace_pair_counters* Counter(int src, int dst, int path) {
    if (static_cast<unsigned>(src) >= P2PTRACE_MAX_DEVICES || static_cast<unsigned>(dst) >= P2PTRACE_MAX_DEVICES)
      return nullptr;
    return counters_ + (src * P2PTRACE_MAX_DEVICES + dst) * 2 + path;
  }
  static p2ptrace_file_header* header() { return header_; }

  // The process is going away normally: say so in the header.
  static void MarkExited();
  static void ForgetMapping();  // fork child: the parent's file is not ours

 private:
  static bool Open();
  static bool ClaimChunk();
  static p2ptrace_file_header* header_;
  static p2ptrace_pair_counters* counters_;
};

inline void AddRelaxed(uint64_t* counter, uint64_t v) { __atomic_fetch_add(counter, v, __ATOMIC_RELAXED); }

// mkdir -p; true when `dir` is a directory afterwards.
bool MakeDirs(const std::string& dir);

// One line on stderr, "p2ptrace: warning: …". Async-signal-unsafe; not for signal handlers.
void Warn(const std::string& message);

}  // namespace p2ptrace::shim
