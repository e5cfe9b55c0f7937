// The shim's settings (DESIGN.md §8), read once from the environment in the constructor.
// A malformed value gets one warning on stderr and its default; the job always runs on.
#pragma once

#include <cstdint>
#include <string>

namespace p2ptrace::shim {

struct SampleSpec {
  bool enabled = true;
  uint32_t first = 8;                 // time the first K copies of each pair…
  uint32_t every = 64;                // …then 1 in N…
  uint64_t min_bytes = 16ull << 20;   // …and every copy at least this large

  // Whether the n-th (from 0) of a counted stream of calls, of `bytes`, is in the sample.
  bool Takes(uint64_t n, uint64_t bytes) const { return n < first || n % every == 0 || bytes >= min_bytes; }
};

struct Config {
  std::string dir;        // absolute; where this process's trace goes
  SampleSpec sample;
  uint64_t max_bytes = 64ull << 20;   // P2PTRACE_MAX_MB
  std::string sysroot;    // P2PTRACE_SYSROOT, "" for /
  std::string warn = "node";  // P2PTRACE_WARN: node (once per node), rank (every process), off
  bool disabled = false;  // P2PTRACE_DISABLE=1: the shim passes everything through and records nothing
  int stack_depth = 0;    // P2PTRACE_STACKS: application frames kept per call site; 0 off
  // P2PTRACE_HANG_S: an NCCL operation unfinished this long gets one line on stderr; 0 never.
  double hang_seconds = 300;
  // P2PTRACE_HEARTBEAT_MS: the watchdog's period (heartbeat, completion checks); 0 no watchdog.
  uint32_t heartbeat_ms = 1000;
  bool nccl_log = true;         // P2PTRACE_NCCL_LOG: auto (NCCL's INFO lines tapped into the trace) or off
  bool nccl_profiler = true;    // P2PTRACE_NCCL_PROFILER=off: NCCL operations timed by CUDA events instead
  // P2PTRACE_RANK_WAIT_MS: how long the job-start probe waits for the other ranks' identities.
  int rank_wait_ms = 2000;
  int nvml_timeout_ms = 3000;   // P2PTRACE_NVML_TIMEOUT_MS: how long the job-start probe waits for NVML
};

// Parses the environment. `warn` receives each warning line (without the "p2ptrace: warning: ").
Config ReadConfig(void (*warn)(const std::string&));

// "K:N:SIZE" (e.g. "8:64:16M"), "all", or "off". False when malformed.
bool ParseSample(const std::string& text, SampleSpec* out);
// "64", "1.5" … megabytes. False when malformed or out of range.
bool ParseMaxMb(const std::string& text, uint64_t* bytes);
// "16M", "4096", "1G", "512K".
bool ParseSize(const std::string& text, uint64_t* bytes);
// P2PTRACE_STACKS: "0"/"off" → 0, "1"/"on" → kDefaultStackDepth, "N" (2..kMaxStackDepth) → N frames.
// False when malformed or out of range.
constexpr int kDefaultStackDepth = 8, kMaxStackDepth = 32;
bool ParseStacks(const std::string& text, int* depth);
// P2PTRACE_HANG_S: seconds, "0" off (fractions allowed, at most a week). False when malformed.
bool ParseHangSeconds(const std::string& text, double* seconds);

}  // namespace p2ptrace::shim
