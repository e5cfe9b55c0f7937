// A job directory (or one trace file) → Report: listed, each file read and folded as it comes (one
// file's records in memory at a time), the problems said, progress shown on a terminal.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tools/report/report.h"
#include "tools/report/traces.h"

namespace p2ptrace::cli {

Report BuildReport(const std::string& path, const LoadedTraces& traces);

struct StreamOptions {
  // Called after each file with (files done, files in all); the caller decides whether to show it.
  std::function<void(size_t, size_t)> progress;
  // Another fold riding on the same read (export counts its events this way): each record of a
  // trace as it is decoded, then the trace once read whole (`on_trace`), or `on_abandon` when
  // reading it failed half-way.
  std::function<void(const TraceRecord&)> on_record;
  std::function<void(const Trace&)> on_trace;
  std::function<void()> on_abandon;
  // When the command started (LoadReport's progress shows once the whole run, not this read, has
  // taken a second); the default: when the read starts.
  std::chrono::steady_clock::time_point started{};
  double stall_seconds = 60;  // ReportBuilder::SetStallSeconds
};

// "p2ptrace: reading 120 of 8192 files (1%)" on `err`, redrawn at most every 100 ms, once the run
// has taken a second, and only when `enabled` (stderr is a terminal); the line is erased by Clear
// (or the destructor) so that what follows starts clean.
class ProgressLine {
 public:
  ProgressLine(std::ostream& err, bool enabled, std::string what = "reading",
               std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now());
  ~ProgressLine() { Clear(); }
  void Update(size_t done, size_t total, const char* unit = "files");
  void Clear();
  std::function<void(size_t, size_t)> Callback() {
    return [this](size_t done, size_t total) { Update(done, total); };
  }

 private:
  std::ostream& err_;
  bool enabled_, shown_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point start_, last_;
};
// Lists DIR (or one trace file) and folds its files one by one: only one file's records are in
// memory at a time. Fails only when the path cannot be listed; unusable files become problems.
absl::StatusOr<Report> StreamReport(const std::string& path, const StreamOptions& options = {});
// `report`, `html`, `diff` and `run` load this way: StreamReport, the load problems on `err`
// (capped), progress on `err` when it is a terminal and the run takes over a second. Exit 2 with
// one line when nothing usable remains.
// `options`' progress is replaced by that line; its other hooks are passed on.
absl::StatusOr<Report> LoadReport(const std::string& path, std::ostream& err, bool err_is_tty,
                                  StreamOptions options = {});
// LoadReport for a command: when nothing usable remains, the one line "WHO: why" on `err` and
// nullopt, and the command exits 2.
std::optional<Report> LoadReportOrSay(const std::string& path, std::string_view who, std::ostream& err,
                                      bool err_is_tty, StreamOptions options = {});

}  // namespace p2ptrace::cli
