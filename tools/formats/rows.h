// `p2ptrace export DIR --rows FILE`: the job as newline-delimited JSON rows for a fleet's query
// engine (DuckDB, Spark SQL, Trino, …): one row per (job, host, GPU pair) and one per (job,
// communicator, NCCL operation), each carrying the job's identity (its scheduler's job id, hosts,
// GPU models, versions) so that rows of many jobs can be concatenated and queried together.
// Schema "p2ptrace.rows/1": docs/ROWS.md. A value nothing measured is null, never 0.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/node_probe.h"
#include "core/pair_verdict.h"
#include "core/scheduler.h"
#include "nlohmann/json.hpp"
#include "tools/report/report.h"

namespace p2ptrace::cli {

inline constexpr const char* kRowsSchema = "p2ptrace.rows/1";

// What the report does not keep of each process: who started it (its recorded environment) and
// the trace format it was written in. Keyed by (host, pid) as ProcessInfo.
struct ProcessOrigin {
  SchedulerIds ids;
  int format_major = 0, format_minor = 0;
};
using ProcessOrigins = std::map<std::pair<std::string, int>, ProcessOrigin>;

// Every row of the job: its pairs (as Report::pairs, one row per directional pair), then its NCCL
// operations (as Report::nccl_ops).
std::vector<nlohmann::json> BuildRows(const Report& report, const ProcessOrigins& origins);

// `doctor --test --rows FILE`: one row per tested ordered pair, kind "test" (docs/ROWS.md), the
// scheduler's ids from this process's environment (in a SLURM prolog: the job about to run), the
// time the test ran, and each pair's regression against --baseline ("" none; absent: none asked).
std::vector<nlohmann::json> BuildTestRows(const NodeProbe& probe, const std::vector<JudgedPair>& pairs,
                                          const SchedulerIds& ids, uint64_t unix_ns,
                                          const std::map<std::pair<int, int>, std::string>* regressions);
// NDJSON text of rows, one per line.
std::string RowsText(const std::vector<nlohmann::json>& rows);

}  // namespace p2ptrace::cli
