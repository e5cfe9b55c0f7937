// One NCCL log file read and parsed, bounded: what both a job's loading and `explain` read.
#pragma once

#include <cstdint>
#include <string>

#include "core/nccl_log.h"
#include "core/status.h"

namespace p2ptrace::cli {

// An NCCL log is read up to this size: its connection lines come first (at init), and memory and
// time stay bounded whatever the directory holds.
inline constexpr uint64_t kMaxNcclLogBytes = uint64_t{256} << 20;
// One NCCL log file parsed (a regular file only, up to kMaxNcclLogBytes); the error names the file.
// A longer file is parsed up to the cap and `partial` says so ("FILE: what was lost").
Expected<NcclLog> ReadNcclLogFile(const std::string& path, std::string* partial = nullptr);

}  // namespace p2ptrace::cli
