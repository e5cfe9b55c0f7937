#include "core/rate.h"

#include <cstdio>

namespace p2ptrace {
namespace {

double RawGbps(uint64_t bytes, uint64_t ns) { return static_cast<double>(bytes) / static_cast<double>(ns); }

}  // namespace

double MeasuredGbps(uint64_t bytes, uint64_t ns) {
  if (ns == 0) return -1;
  double gbps = RawGbps(bytes, ns);
  return gbps > kMaxPlausibleGbps ? -1 : gbps;
}

std::string WithheldRateNote(uint64_t bytes, uint64_t ns) {
  if (ns == 0 || RawGbps(bytes, ns) <= kMaxPlausibleGbps) return "";
  char text[160];
  std::snprintf(text, sizeof text, "timed at %.1f GB/s, above what any link or memory moves (%.0f GB/s): not a "
                "transfer rate", RawGbps(bytes, ns), kMaxPlausibleGbps);
  return text;
}

}  // namespace p2ptrace
