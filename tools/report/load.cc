#include "tools/report/load.h"

#include <utility>

#include "core/printable.h"
#include "fmt/format.h"
#include "tools/report/builder.h"

namespace p2ptrace::cli {

Report BuildReport(const std::string& path, const LoadedTraces& loaded) {
  ReportBuilder b(path);
  for (const std::string& p : loaded.problems) b.AddProblem(p);
  for (const std::string& p : loaded.partial) b.AddPartial(p);
  for (const Trace& t : loaded.traces) b.AddTrace(t);
  for (const NcclLogFile& f : loaded.nccl_logs) b.AddNcclLog(f);
  return b.Finish();
}

absl::StatusOr<Report> StreamReport(const std::string& path, const StreamOptions& options) {
  ReportBuilder b(path);
  b.SetStallSeconds(options.stall_seconds);
  JobVisitor v;
  // Records go straight into the fold as they are decoded; none is kept.
  v.on_record = [&](const TraceRecord& r) {
    b.AddRecord(r);
    if (options.on_record) options.on_record(r);
  };
  v.on_abandon = [&] {
    b.AbandonTrace();
    if (options.on_abandon) options.on_abandon();
  };
  v.on_trace = [&](Trace&& t) {
    b.EndTrace(t);
    if (options.on_trace) options.on_trace(t);
  };
  v.on_nccl_log = [&](NcclLogFile&& f) { b.AddNcclLog(std::move(f)); };
  v.on_problem = [&](std::string p) { b.AddProblem(p); };
  v.on_partial = [&](std::string p) { b.AddPartial(p); };
  v.progress = options.progress;
  if (absl::Status st = VisitJob(path, v); !st.ok()) return st;
  return b.Finish();
}

ProgressLine::ProgressLine(std::ostream& err, bool enabled, std::string what, std::chrono::steady_clock::time_point started)
    : err_(err), enabled_(enabled), what_(std::move(what)), start_(started), last_(started) {}

void ProgressLine::Update(size_t done, size_t total, const char* unit) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::seconds(1) || (now - last_ < std::chrono::milliseconds(100) && done < total)) return;
  last_ = now;
  shown_ = true;
  err_ << fmt::format("\rp2ptrace: {} {} of {} {} ({:.0f}%)", what_, done, total, unit,
                      total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0)
       << std::flush;
}

void ProgressLine::Clear() {
  if (shown_) err_ << "\r\033[K" << std::flush;  // the progress line gives way to what follows
  shown_ = false;
}

absl::StatusOr<Report> LoadReport(const std::string& path, std::ostream& err, bool err_is_tty, StreamOptions options) {
  ProgressLine progress(err, err_is_tty, "reading",
                        options.started == std::chrono::steady_clock::time_point{} ? std::chrono::steady_clock::now()
                                                                                    : options.started);
  options.progress = progress.Callback();
  absl::StatusOr<Report> rep = StreamReport(path, options);
  progress.Clear();
  if (!rep.ok()) return rep;
  PrintLoadProblems(rep->problems, rep->partial, rep->processes.size(), err);
  if (rep->processes.empty()) return absl::NotFoundError("no usable trace in " + path);
  return rep;
}

std::optional<Report> LoadReportOrSay(const std::string& path, std::string_view who, std::ostream& err,
                                      bool err_is_tty, StreamOptions options) {
  absl::StatusOr<Report> rep = LoadReport(path, err, err_is_tty, std::move(options));
  if (rep.ok()) return std::move(*rep);
  err << who << ": " << Printable(std::string(rep.status().message()), false) << "\n";
  return std::nullopt;
}

}  // namespace p2ptrace::cli
