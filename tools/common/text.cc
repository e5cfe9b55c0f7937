#include "tools/common/text.h"

#include <string.h>  // sigabbrev_np

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace p2ptrace::cli {

std::string BytesText(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return fmt::format("{} B", b);
}

// "0-7, 9, 12-15"
std::string RankRanges(const std::vector<int>& sorted) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string CudaVersionText(int v) { return v > 0 ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : "?"; }

// NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 on (nccl.h).
std::string NcclVersionText(int code) {
  if (code <= 0) return "";
  if (code < 10000) return fmt::format("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
}

std::string SignalName(int signal) {
  const char* abbrev = signal > 0 ? sigabbrev_np(signal) : nullptr;
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

}  // namespace p2ptrace::cli
