// `p2ptrace export DIR`: the job for other tools, each output by its writer in tools/formats/: a
// Perfetto timeline, Prometheus metrics, fleet rows.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "core/printable.h"
#include "fmt/format.h"
#include "tools/cli/commands.h"
#include "tools/common/output_file.h"
#include "tools/formats/perfetto.h"
#include "tools/formats/prometheus.h"
#include "tools/formats/rows.h"
#include "tools/report/load.h"

namespace p2ptrace::cli {
namespace {

constexpr const char* kWho = "p2ptrace export";

class ExportCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("DIR", path_, "directory of trace files (P2PTRACE_DIR of the job)")->required();
    c.add_option("--perfetto", perfetto_, "write the Chrome trace-event JSON to this file")->option_text("OUT");
    c.add_option("--prometheus", prometheus_,
                 "write the job's GPU pairs in Prometheus text format for node_exporter's textfile collector "
                 "(atomically: a temporary file in the same directory, then rename); '-': stdout")
        ->option_text("FILE");
    c.add_option("--rows", rows_, "write newline-delimited JSON rows (p2ptrace.rows/1: one per pair and "
                 "per NCCL operation, for DuckDB/Spark/Trino) to this file, atomically; '-': stdout")
        ->option_text("FILE");
    c.add_option("--max-slices", options_.max_slices,
                 "keep at most this many slices (every k-th per track past it; 0: all)")
        ->capture_default_str();
    c.footer(
        "Open OUT in https://ui.perfetto.dev or chrome://tracing: a process per rank (host, rank, GPU), a track per\n"
        "GPU pair or NCCL peer with a slice per timed copy or operation, arrows from each ncclSend to its ncclRecv,\n"
        "GB/s counters per pair, and a 'p2ptrace job' process holding the pair matrix and the findings.\n"
        "--prometheus FILE: per GPU pair the path class available and used, bytes, calls, measured bytes/s, a\n"
        "fallback gauge with its cause, seconds lost, and the host's pairs without P2P (metric list:\n"
        "docs/OPERATIONS.md, \"Prometheus\").\n"
        "--rows FILE: the schema, and the same fleet questions in DuckDB, Spark SQL and Trino: docs/ROWS.md.\n"
        "At least one of --perfetto, --prometheus and --rows. Several are written one after another\n"
        "(prometheus, rows, then perfetto); the first that fails ends the command with its error.");
  }

  int Run() override {
    if (perfetto_.empty() && prometheus_.empty() && rows_.empty()) {
      std::cerr << "p2ptrace export: nothing to write (give --perfetto OUT, --prometheus FILE and/or --rows FILE)\n";
      return 2;
    }
    if (!prometheus_.empty())
      if (int code = Prometheus(); code != 0) return code;
    if (!rows_.empty())
      if (int code = Rows(); code != 0) return code;
    return perfetto_.empty() ? 0 : Perfetto();
  }

 private:
  int Prometheus() {
    // Before reading anything: a job of many files should not be read to find the target unwritable.
    if (std::string why = prometheus_ == "-" ? "" : OutputFileProblem(prometheus_); !why.empty()) {
      std::cerr << kWho << ": " << why << "\n";
      return 2;
    }
    std::optional<Report> report = LoadReportOrSay(path_, kWho, std::cerr, isatty(2));
    if (!report) return 2;
    if (std::string why = WriteOutput(prometheus_, PrometheusFromReport(*report)); !why.empty()) {
      std::cerr << kWho << ": " << why << "\n";
      return 2;
    }
    if (prometheus_ == "-") return 0;
    std::cerr << fmt::format("{}: {} GPU pair entr{} -> {}\n", kWho, report->pairs.size(),
                             report->pairs.size() == 1 ? "y" : "ies", Printable(prometheus_, false));
    return 0;
  }

  int Rows() {
    ProcessOrigins origins;
    StreamOptions hooks;
    hooks.started = std::chrono::steady_clock::now();
    hooks.on_trace = [&](const Trace& t) {
      ProcessOrigin& o = origins[{t.Host(), static_cast<int>(t.header.pid)}];
      o.ids = ReadSchedulerIds(t.env);
      o.format_major = t.header.major;
      o.format_minor = t.header.minor;
    };
    std::optional<Report> report = LoadReportOrSay(path_, kWho, std::cerr, isatty(2), hooks);
    if (!report) return 2;
    if (std::string why = WriteOutput(rows_, RowsText(BuildRows(*report, origins))); !why.empty()) {
      std::cerr << kWho << ": " << why << "\n";
      return 2;
    }
    if (rows_ == "-") return 0;
    std::cerr << fmt::format("{}: {} pair row{} and {} operation row{} ({}) -> {}\n", kWho, report->pairs.size(),
                             report->pairs.size() == 1 ? "" : "s", report->nccl_ops.size(),
                             report->nccl_ops.size() == 1 ? "" : "s", kRowsSchema, rows_);
    return 0;
  }

  // Memory: the report (pairs, processes), pass 1's counts, and one file's timings at a time.
  int Perfetto() {
    // The report and pass 1's counts in one read of every file; records are folded, never kept.
    ExportCounts counts;
    StreamOptions hooks;
    hooks.started = std::chrono::steady_clock::now();
    hooks.on_record = [&](const TraceRecord& r) { counts.Add(r); };
    hooks.on_trace = [&](const Trace& t) { counts.EndTrace(t); };
    hooks.on_abandon = [&] { counts.Abandon(); };
    std::optional<Report> report = LoadReportOrSay(path_, kWho, std::cerr, isatty(2), hooks);
    if (!report) return 2;
    std::ofstream out(perfetto_, std::ios::binary | std::ios::trunc);
    if (!out) {
      std::cerr << kWho << ": " << perfetto_ << ": cannot write: " << std::strerror(errno) << "\n";
      return 2;
    }
    ExportStats stats;
    {
      ProgressLine progress(std::cerr, isatty(2), "writing the timeline of", hooks.started);
      stats = WritePerfetto(*report, counts, options_, out, std::cerr,
                            [&](size_t done, size_t total) { progress.Update(done, total, "processes"); });
    }
    out.close();
    if (!out) {
      std::cerr << kWho << ": " << perfetto_ << ": write failed: " << std::strerror(errno) << "\n";
      return 2;
    }
    size_t n = report->processes.size();
    std::cerr << fmt::format("{}: {} process{}, {} slices, {} flows, {} counter samples -> {}{}\n", kWho, n,
                             n == 1 ? "" : "es", stats.slices, stats.flows, stats.counters, perfetto_,
                             stats.stride > 1 ? fmt::format(" (every {}th of {} events: --max-slices)",
                                                            stats.stride, stats.events)
                                              : "");
    return 0;
  }

  std::string path_, perfetto_, prometheus_, rows_;
  ExportOptions options_;
};

}  // namespace

std::unique_ptr<Command> MakeExportCommand() { return std::make_unique<ExportCommand>(); }

}  // namespace p2ptrace::cli
