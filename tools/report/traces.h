// Loading every trace of a job directory, with one clear line per file that cannot be used (or is
// used only in part), and memory bounded however many or however large the files are.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/nccl_log.h"
#include "core/trace_reader.h"
#include "tools/common/nccl_log_file.h"

namespace p2ptrace::cli {

struct NcclLogFile {
  std::string path;
  NcclLog log;
};

struct LoadedTraces {
  std::vector<Trace> traces;
  std::vector<NcclLogFile> nccl_logs;  // nccl.<host>.<pid>.log: NCCL's own lines, tapped by the shim
  std::vector<std::string> problems;  // "FILE: what is wrong", one per skipped file
  std::vector<std::string> partial;   // "FILE: what was lost", one per file used in part
};

struct LoadOptions {
  // Records kept in memory per file and over all files; past them a file is read for its header
  // and exact pair counters only (and says so in `partial`). ~90 bytes per record.
  uint64_t max_records_per_file = 8'000'000;
  uint64_t max_records_total = 40'000'000;
};

// The files of a job, each list sorted: DIR's *.p2ptrace files (or the one file `path` names) and
// its nccl.*.log files.
struct JobFiles {
  std::vector<std::string> traces, nccl_logs;
};
absl::StatusOr<JobFiles> ListJobFiles(const std::string& path);
// Adds the user's own NCCL_DEBUG_FILE that `t` recorded (%h, %p resolved), when it exists and is
// not listed yet: it is read where the user put it.
void AddUserNcclLog(const Trace& t, JobFiles* files);
// What a usable file lost, in one line naming it ("FILE: what was lost"); "" when it is whole.
std::string PartialLine(const Trace& t);

// Whether the executable at `path` carries its own copy of the CUDA runtime (nvcc's default
// --cudart static), whose calls LD_PRELOAD cannot reach; nullopt when it cannot be read (not
// here, not a regular file).
std::optional<bool> CarriesStaticCudart(const std::string& path);

// The one walk over a job's files (ListJobFiles, then the users' own NCCL_DEBUG_FILEs the traces
// recorded), every loader's: each trace file read (its records handed to `on_record` as they are
// decoded when that is set, else kept in the Trace), then each NCCL log. A file that cannot be used
// becomes a problem, one used in part a partial line ("FILE: why"). Fails only when the path itself
// cannot be read.
struct JobVisitor {
  std::function<ReadOptions()> read_options;           // per trace file, asked before reading it
  std::function<void(const TraceRecord&)> on_record;
  std::function<void(Trace&&)> on_trace;               // read (whole or in part)
  std::function<void()> on_abandon;                    // failed after records were handed out
  std::function<void(NcclLogFile&&)> on_nccl_log;
  std::function<void(std::string)> on_problem, on_partial;
  std::function<void(size_t done, size_t total)> progress;  // after each file
};
absl::Status VisitJob(const std::string& path, const JobVisitor& visit);

// DIR: every *.p2ptrace file in it (not recursive); a file path: that one file. Fails only when
// the path itself cannot be read; files that are not usable become `problems`.
absl::StatusOr<LoadedTraces> LoadTraces(const std::string& path, const LoadOptions& options = {});

// The skipped and partly used files on `err`, one line each ("p2ptrace: skipped FILE: why"), at
// most `max_lines` of each kind, then one line with the counts.
void PrintLoadProblems(const LoadedTraces& loaded, std::ostream& err, size_t max_lines = 20);
void PrintLoadProblems(const std::vector<std::string>& problems, const std::vector<std::string>& partial,
                       size_t used, std::ostream& err, size_t max_lines = 20);

}  // namespace p2ptrace::cli
