// Loading every trace of a job directory, with one clear line per file that cannot be used.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/nccl_log.h"
#include "core/trace_reader.h"

namespace p2ptrace::cli {

struct NcclLogFile {
  std::string path;
  NcclLog log;
};

struct LoadedTraces {
  std::vector<Trace> traces;
  std::vector<NcclLogFile> nccl_logs;  // nccl.<host>.<pid>.log: NCCL's own lines, tapped by the shim
  std::vector<std::string> problems;  // "FILE: what is wrong", one per skipped file
};

// DIR: every *.p2ptrace file in it (not recursive); a file path: that one file. Fails only when
// the path itself cannot be read; files that are not usable become `problems`.
absl::StatusOr<LoadedTraces> LoadTraces(const std::string& path);

}  // namespace p2ptrace::cli
