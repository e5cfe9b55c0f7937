// A measured rate as every output may print it (DESIGN.md §7): bytes over their measured time, and
// never a figure no hardware can reach. The fastest GPU memory of 2026 moves about 8 TB/s (B300's
// HBM3e) and the widest link 1.8 TB/s (NVLink 5, both directions); a rate above kMaxPlausibleGbps is
// a timing fault (a timer that missed the work, a one-rank NCCL operation that moved nothing) and is
// said as such instead of printed.
#pragma once

#include <cstdint>
#include <string>

namespace p2ptrace {

inline constexpr double kMaxPlausibleGbps = 10000;

// `bytes` over `ns` in GB/s; -1 when nothing was timed or the figure is above kMaxPlausibleGbps.
double MeasuredGbps(uint64_t bytes, uint64_t ns);

// Why a timed figure is withheld ("timed at 17185.3 GB/s, above what any link or memory moves
// (10000 GB/s): not a transfer rate"); "" when it is shown or nothing was timed.
std::string WithheldRateNote(uint64_t bytes, uint64_t ns);

}  // namespace p2ptrace
