// Folds a job's traces, NCCL logs and preflight blocks into a Report, one at a time: memory grows with
// pairs, processes and communicators, never with events. The CUDA side (copies, call sites, costs,
// the pairs' causes) is folded here; NCCL's in nccl_fold.h; the stopped-job analysis in stopped.h.
#pragma once

#include <memory>
#include <string>

#include "core/trace_reader.h"
#include "tools/report/report.h"
#include "tools/report/traces.h"

namespace p2ptrace::cli {

// Folds traces and NCCL logs into a Report, one at a time; keeps nothing of their records.
class ReportBuilder {
 public:
  explicit ReportBuilder(std::string path);
  ~ReportBuilder();
  void AddTrace(const Trace& trace);  // its records, then EndTrace
  // Streaming, as ReadTrace's visitor: one trace's records, then the trace itself (header,
  // counters, environment) once read; AbandonTrace when reading it failed half-way.
  void AddRecord(const TraceRecord& record);
  void EndTrace(const Trace& trace);
  void AbandonTrace();
  void AddNcclLog(const NcclLogFile& log);
  // An NCCL operation or init still open this long after its call is stuck (default 60 s).
  void SetStallSeconds(double seconds);
  void AddProblem(std::string problem) ;      // a file that was skipped
  void AddPartial(std::string partial);       // a file that was used in part
  Report Finish();                            // once, after every Add

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace p2ptrace::cli
