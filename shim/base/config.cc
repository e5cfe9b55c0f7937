#include "shim/base/config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>

namespace p2ptrace::shim {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  // Digits only: strtoull alone would take leading blanks and a sign (" 8" or "-1" as a number).
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

// A job id every rank of one launch agrees on, so their traces land in one directory.
std::string JobId() {
  // Open MPI 4 (ORTE) names its job in OMPI_MCA_orte_ess_jobid; Open MPI 5 (PRRTE) in PMIX_NAMESPACE.
  for (const char* name : {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID",
                           "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid"})
    if (const char* v = Env(name)) {
      std::string id = v;
      for (char& c : id)  // one printable path component
        if (c == '/' || c == ' ' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
      return id;
    }
  char buf[64];
  time_t now = time(nullptr);
  struct tm tm {};
  localtime_r(&now, &tm);
  strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return std::string(buf) + "-" + std::to_string(getpid());
}

}  // namespace

bool ParseSize(const std::string& text, uint64_t* bytes) {
  if (text.empty()) return false;
  std::string digits = text;
  uint64_t mult = 1;
  switch (digits.back()) {
    case 'K': case 'k': mult = 1ull << 10; digits.pop_back(); break;
    case 'M': case 'm': mult = 1ull << 20; digits.pop_back(); break;
    case 'G': case 'g': mult = 1ull << 30; digits.pop_back(); break;
    default: break;
  }
  uint64_t v = 0;
  if (!ParseU64(digits, &v) || v > UINT64_MAX / mult) return false;
  *bytes = v * mult;
  return true;
}

bool ParseSample(const std::string& text, SampleSpec* out) {
  if (text == "off") { *out = SampleSpec{}; out->enabled = false; return true; }
  if (text == "all") { *out = SampleSpec{true, UINT32_MAX, 1, 0}; return true; }
  size_t a = text.find(':');
  size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos || text.find(':', b + 1) != std::string::npos) return false;
  uint64_t first = 0, every = 0, min_bytes = 0;
  if (!ParseU64(text.substr(0, a), &first) || !ParseU64(text.substr(a + 1, b - a - 1), &every) ||
      !ParseSize(text.substr(b + 1), &min_bytes) || every == 0 || first > UINT32_MAX || every > UINT32_MAX)
    return false;
  *out = SampleSpec{true, static_cast<uint32_t>(first), static_cast<uint32_t>(every), min_bytes};
  return true;
}

bool ParseMaxMb(const std::string& text, uint64_t* bytes) {
  uint64_t mb = 0;
  if (!ParseU64(text, &mb) || mb < 1 || mb > 65536) return false;
  *bytes = mb << 20;
  return true;
}

bool ParseStacks(const std::string& text, int* depth) {
  if (text == "off" || text == "0") { *depth = 0; return true; }
  if (text == "on" || text == "1") { *depth = kDefaultStackDepth; return true; }
  uint64_t n = 0;
  if (!ParseU64(text, &n) || n > kMaxStackDepth) return false;
  *depth = static_cast<int>(n);
  return true;
}

bool ParseHangSeconds(const std::string& text, double* seconds) {
  // Digits first: strtod would also take leading blanks, signs, "inf" and hex.
  if (text.empty() || text.size() > 32 || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) return false;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !(v >= 0) || v > 7 * 86400.0) return false;  // !(v >= 0): NaN too
  *seconds = v;
  return true;
}

Config ReadConfig(void (*warn)(const std::string&)) {
  Config c;
  if (const char* v = Env("P2PTRACE_DISABLE")) c.disabled = std::string(v) == "1";
  if (const char* v = Env("P2PTRACE_SAMPLE"); v && !ParseSample(v, &c.sample))
    warn(std::string("P2PTRACE_SAMPLE=") + v + " is not K:N:SIZE (e.g. 8:64:16M), all or off; using 8:64:16M");
  if (const char* v = Env("P2PTRACE_MAX_MB"); v && !ParseMaxMb(v, &c.max_bytes))
    warn(std::string("P2PTRACE_MAX_MB=") + v + " is not a whole number of megabytes in 1..65536; using 64");
  if (const char* v = Env("P2PTRACE_STACKS"); v && !ParseStacks(v, &c.stack_depth))
    warn(std::string("P2PTRACE_STACKS=") + v + " is not 0, off, 1, on or a depth up to " +
         std::to_string(kMaxStackDepth) + "; call sites off");
  if (const char* v = Env("P2PTRACE_HANG_S"); v && !ParseHangSeconds(v, &c.hang_seconds))
    warn(std::string("P2PTRACE_HANG_S=") + v + " is not a number of seconds (0 off, at most 604800); using 300");
  if (const char* v = Env("P2PTRACE_HEARTBEAT_MS")) {
    uint64_t ms = 0;
    if (ParseU64(v, &ms) && ms <= 60000) c.heartbeat_ms = static_cast<uint32_t>(ms);
    else warn(std::string("P2PTRACE_HEARTBEAT_MS=") + v + " is not 0 (off) to 60000 milliseconds; using 1000");
  }
  if (const char* v = Env("P2PTRACE_NCCL_LOG")) {
    c.nccl_log = std::string(v) != "off";
    if (c.nccl_log && std::string(v) != "auto")
      warn(std::string("P2PTRACE_NCCL_LOG=") + v + " is not auto or off; using auto");
  }
  if (const char* v = Env("P2PTRACE_NCCL_PROFILER")) c.nccl_profiler = std::string(v) != "off";
  for (auto [name, ms] : {std::pair{"P2PTRACE_RANK_WAIT_MS", &c.rank_wait_ms},
                          std::pair{"P2PTRACE_NVML_TIMEOUT_MS", &c.nvml_timeout_ms}})
    if (const char* v = Env(name)) {
      uint64_t x = 0;
      if (ParseU64(v, &x) && x <= 3600000) *ms = static_cast<int>(x);
      else warn(std::string(name) + "=" + v + " is not 0 to 3600000 milliseconds; using " + std::to_string(*ms));
    }
  if (const char* v = Env("P2PTRACE_SYSROOT")) c.sysroot = v;
  if (const char* v = Env("P2PTRACE_WARN")) {
    std::string w = v;
    if (w == "node" || w == "rank" || w == "off") c.warn = w;
    else warn("P2PTRACE_WARN='" + w + "' is not node, rank or off; using node");
  }
  const char* dir = Env("P2PTRACE_DIR");
  c.dir = dir ? dir : "p2ptrace-" + JobId();
  if (c.dir[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) != nullptr) c.dir = std::string(cwd) + "/" + c.dir;
  }
  return c;
}

}  // namespace p2ptrace::shim
