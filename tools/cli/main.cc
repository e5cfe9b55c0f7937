// p2ptrace: the post-mortem viewer and launcher (DESIGN.md §7).
// Exit codes: 0 ok; 1 findings; 2 usage or input errors; `run`: the job's own status.
#include <unistd.h>

#include <climits>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "core/printable.h"
#include "tools/cli/run.h"
#include "tools/cli/synth.h"
#include "tools/cli/watch.h"
#include "tools/common/version.h"
#include "tools/doctor/nccl_choice.h"
#include "tools/doctor/node_check.h"
#include "tools/doctor/node_proof.h"
#include "tools/explain/explain.h"
#include "tools/formats/dump.h"
#include "tools/formats/html.h"
#include "tools/formats/json.h"
#include "tools/formats/perfetto.h"
#include "tools/formats/prometheus.h"
#include "tools/formats/rows.h"
#include "tools/formats/text.h"
#include "tools/report/diff.h"
#include "tools/report/report.h"
#include "tools/report/traces.h"

namespace {

using namespace p2ptrace::cli;

constexpr const char* kUsage = R"(p2ptrace: which path GPU-to-GPU traffic took, and why

  p2ptrace run [--dir D] [--json] -- CMD …   run CMD with libp2ptrace.so preloaded, then print the report
  p2ptrace report DIR [--json] [--stall S]   merged view of every trace in DIR (or one trace file); a hung or
                                             dead job leads with who stopped first
  p2ptrace watch DIR [--interval S] [--stall S] [--once] [--json]
                                             follow a running job: says when a communicator makes no progress
  p2ptrace dump FILE [--json]                one trace file, record by record (--json: JSON lines)
  p2ptrace doctor [--json] [--prometheus F] probe this node now: paths each GPU pair will take, and why
  p2ptrace explain FILE… [--json]            explain NCCL_DEBUG=INFO logs and `nvidia-smi topo -m`: paths per pair, and why
  p2ptrace html DIR -o FILE                  the report as one self-contained page: pair heatmaps, GB/s, causes
  p2ptrace export DIR --perfetto OUT         the job as a timeline for ui.perfetto.dev (Chrome trace JSON)
  p2ptrace export DIR --prometheus FILE      the job's GPU pairs for node_exporter's textfile collector
  p2ptrace export DIR --rows FILE            one JSON row per pair and NCCL operation, for fleet SQL (DuckDB, Spark, Trino)
  p2ptrace diff A B [--json]                 what changed between two runs; exit 1 when a pair got worse
  p2ptrace synth --ranks N --events M --out DIR   a synthetic job's traces (demos, tests, benchmarks)

Run `p2ptrace COMMAND --help` for the options of a command; `p2ptrace --version` prints the version.
)";

std::string SelfExe(const char* argv0) {
  char buf[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : argv0;
}

int RunCommand(int argc, char** argv) {
  RunOptions o;
  int i = 2;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") { ++i; break; }
    if (a == "--help" || a == "-h") {
      std::cout << "usage: p2ptrace run [--dir D] [--json] -- CMD …\n\n"
                   "Runs CMD with LD_PRELOAD=libp2ptrace.so and P2PTRACE_DIR=D (default ./p2ptrace-<time>),\n"
                   "waits for it, then prints the report of what every process recorded. Exits with CMD's\n"
                   "status, always (128+N when a signal N ended it); when nothing could be traced (e.g. a static\n"
                   "cudart) it says so on stderr.\n";
      return 0;
    }
    if (a == "--json") o.json = true;
    else if (a == "--dir" && i + 1 < argc) o.dir = argv[++i];
    else if (a.rfind("--dir=", 0) == 0) o.dir = a.substr(6);
    else {
      std::cerr << "p2ptrace run: unexpected '" << a << "' (usage: p2ptrace run [--dir D] [--json] -- CMD …)\n";
      return 2;
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) {
    std::cerr << "p2ptrace run: no command (usage: p2ptrace run [--dir D] [--json] -- CMD …)\n";
    return 2;
  }
  return Run(o, SelfExe(argv[0]));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V") || !std::strcmp(argv[1], "version")) {
    std::cout << "p2ptrace " << VersionText() << "\n";
    return 0;
  }
  if (!std::strcmp(argv[1], "run")) return RunCommand(argc, argv);

  CLI::App app{"p2ptrace: which path GPU-to-GPU traffic took, and why"};
  app.require_subcommand(1);
  std::string path;
  bool json = false;
  auto* report = app.add_subcommand("report", "merged view of every trace in DIR (or one trace file)");
  report->add_option("DIR", path, "directory of trace files (P2PTRACE_DIR of the job)")->required();
  report->add_flag("--json", json, "print the report as JSON (DESIGN.md §7 schema)");
  double stall = 60;
  report->add_option("--stall", stall, "an NCCL operation still unfinished this many seconds after its call is "
                     "stuck (the stopped finding; default 60)")->check(CLI::Range(0.0, 604800.0));
  WatchOptions watch_options;
  auto* watch = app.add_subcommand("watch", "follow a running job's traces: progress per communicator, and who stopped "
                                   "when one makes none (ends when every process has exited)");
  watch->add_option("DIR", path, "the job's trace directory (P2PTRACE_DIR)")->required();
  watch->add_option("--interval", watch_options.interval_seconds, "seconds between looks (default 5)")
      ->check(CLI::Range(0.1, 3600.0));
  watch->add_option("--stall", watch_options.stall_seconds, "seconds without progress before a communicator is "
                    "called stuck (default 60)")->check(CLI::Range(0.0, 604800.0));
  watch->add_flag("--once", watch_options.once, "look once and exit");
  watch->add_flag("--json", watch_options.json, "one JSON object per look");
  auto* dump = app.add_subcommand("dump", "one trace file, record by record");
  dump->add_option("FILE", path, "a .p2ptrace file")->required();
  dump->add_flag("--json", json, "JSON lines: header, counters, records");
  std::vector<std::string> files;
  ExplainOptions explain_options;
  auto* explain = app.add_subcommand("explain", "explain NCCL_DEBUG=INFO logs and `nvidia-smi topo -m`: paths per pair, and why");
  explain->add_option("FILE", files, "NCCL logs (NCCL_DEBUG=INFO output, any NCCL 2.x), `nvidia-smi topo -m` and "
                      "`topo -p2p r|w` output; each file's kind is told by its content")->required();
  explain->add_flag("--json", json, "print the explanation as JSON (DESIGN.md §7 schema)");
  explain->add_option("--env", explain_options.env, "NAME=VALUE the job ran with (repeatable), e.g. NCCL_P2P_LEVEL=SYS");
  explain->add_option("--nccl-version", explain_options.nccl_version, "the job's NCCL (default: the log's, else the newest rules)");
  explain->add_option("--cpu-vendor", explain_options.cpu_vendor, "intel, intel-bdw (Broadwell or older), amd, arm");
  explain->add_option("--gpus", explain_options.gpus, "the communicator's GPUs as the matrix numbers them, e.g. 0,1 "
                      "(as CUDA_VISIBLE_DEVICES; default: all)");
  std::string html_out;
  auto* html = app.add_subcommand("html", "the report as one self-contained HTML page (no network access)");
  html->add_option("DIR", path, "directory of trace files (P2PTRACE_DIR of the job)")->required();
  html->add_option("-o,--output", html_out, "the HTML file to write")->required();
  html->footer(
      "One file, inline CSS/JS/SVG: a heatmap matrix per host (hover or click a cell: its transports, GB/s and\n"
      "causes), GB/s per pair against the path's expectation, the fallbacks with their fixes and the time they\n"
      "cost, and a timeline summary. Open it in any browser; it loads nothing from the network.");
  std::string perfetto_out;
  ExportOptions export_options;
  auto* exporter = app.add_subcommand(
      "export", "the job for other tools: a Perfetto timeline, Prometheus metrics, fleet rows for SQL");
  exporter->add_option("DIR", path, "directory of trace files (P2PTRACE_DIR of the job)")->required();
  exporter->add_option("--perfetto", perfetto_out, "write the Chrome trace-event JSON to this file")->option_text("OUT");
  std::string prometheus_out;
  exporter->add_option("--prometheus", prometheus_out,
                       "write the job's GPU pairs in Prometheus text format for node_exporter's textfile collector "
                       "(atomically: a temporary file in the same directory, then rename); '-': stdout")
      ->option_text("FILE");
  std::string rows_out;  // tools/formats/rows.h
  exporter->add_option("--rows", rows_out, "write newline-delimited JSON rows (p2ptrace.rows/1: one per pair and "
                       "per NCCL operation, for DuckDB/Spark/Trino) to this file, atomically; '-': stdout")
      ->option_text("FILE");
  exporter->add_option("--max-slices", export_options.max_slices,
                       "keep at most this many slices (every k-th per track past it; 0: all)")
      ->capture_default_str();
  exporter->footer(
      "Open OUT in https://ui.perfetto.dev or chrome://tracing: a process per rank (host, rank, GPU), a track per\n"
      "GPU pair or NCCL peer with a slice per timed copy or operation, arrows from each ncclSend to its ncclRecv,\n"
      "GB/s counters per pair, and a 'p2ptrace job' process holding the pair matrix and the findings.\n"
      "--prometheus FILE: per GPU pair the path class available and used, bytes, calls, measured bytes/s, a\n"
      "fallback gauge with its cause, seconds lost, and the host's pairs without P2P (metric list:\n"
      "docs/OPERATIONS.md, \"Prometheus\").\n"
      "--rows FILE: the schema, and the same fleet questions in DuckDB, Spark SQL and Trino: docs/ROWS.md.\n"
      "At least one of --perfetto, --prometheus and --rows. Several are written one after another\n"
      "(prometheus, rows, then perfetto); the first that fails ends the command with its error.");
  std::string path_b;
  auto* differ = app.add_subcommand("diff", "what changed between two runs; exit 1 when a pair got worse");
  differ->add_option("A", path, "the earlier run's trace directory")->required();
  differ->add_option("B", path_b, "the later run's trace directory")->required();
  differ->add_flag("--json", json, "print the changes as JSON");
  differ->footer(
      "Lists GPU pairs whose transport class changed or whose GB/s moved by more than 20%, pairs that appeared or\n"
      "vanished, causes that appeared or vanished, NCCL operations whose busbw moved by more than 20%, and call\n"
      "sites (P2PTRACE_STACKS; matched by their frames) whose host-staged bytes appeared or grew by more than 20%.\n"
      "Exit status: 1 when any pair got worse (worse class, newly falling back, or 20% slower) or a call site\n"
      "newly stages through the host, 0 otherwise,\n"
      "2 when A or B holds no usable trace: usable as a node-acceptance gate in CI.");
  // doctor --test --nccl's worker, one per GPU (tools/doctor/nccl_choice.h); not for users, so not listed.
  int nccl_rank = 0, nccl_ranks = 0, nccl_device = 0;
  std::string nccl_dir;
  double nccl_limit = 60;
  auto* nccl_worker = app.add_subcommand("_nccl-rank", "")->group("");
  nccl_worker->add_option("rank", nccl_rank)->required();
  nccl_worker->add_option("nranks", nccl_ranks)->required();
  nccl_worker->add_option("device", nccl_device)->required();
  nccl_worker->add_option("dir", nccl_dir)->required();
  nccl_worker->add_option("limit", nccl_limit)->required();
  SynthOptions synth_options;
  auto* synth = app.add_subcommand("synth", "a synthetic job's traces (demos, tests, benchmarks)");
  synth->add_option("--ranks", synth_options.ranks, "ranks (one process and one GPU each)")->required();
  synth->add_option("--events", synth_options.events, "timed operations per rank (copies and NCCL calls)")->required();
  synth->add_option("--out", synth_options.out, "directory to write into (created when missing)")->required();
  synth->add_option("--hosts", synth_options.hosts, "hosts (default: as few as --gpus-per-host allows)");
  synth->add_option("--gpus-per-host", synth_options.gpus_per_host, "GPUs per host")->capture_default_str();
  synth->add_option("--seed", synth_options.seed, "the same seed writes the same files")->capture_default_str();
  synth->add_option("--stop-rank", synth_options.stop_rank, "a job that hung: this rank stopped, the others wait in "
                    "one more allreduce (the report's stopped finding)");
  synth->add_option("--scenario", synth_options.scenario,
                    "healthy (NVLink, NCCL P2P and IB GDR), pcie (PCIe P2P), fallback (peer access never enabled: "
                    "host-staged copies; NCCL_P2P_DISABLE=1: NCCL over SHM)")
      ->capture_default_str();
  synth->add_flag("--stacks", synth_options.stacks,
                  "call sites, as P2PTRACE_STACKS records them: copies, allreduce and send/recv from three program "
                  "locations");
  synth->add_option("--host-names", synth_options.host_names, "the hosts' names, comma-separated (default node0, …)");
  synth->add_option("--job-id", synth_options.job_id, "the job id the trace headers carry (default synth-SCENARIO-SEED)");
  synth->add_option("--env", synth_options.env, "NAME=VALUE in every rank's recorded environment (repeatable; "
                    "{host} and {rank} are the rank's), e.g. SLURM_JOB_ID=42");
  synth->add_option("--start-time", synth_options.start_time, "when the job started, seconds since 1970 (UTC)")
      ->capture_default_str();
  synth->footer(
      "Writes one trace per rank in the real format (trace_format.h) and the NCCL log its shim would have tapped, so that\n"
      "report, html, export and diff run on them. Ranks 0..N-1 fill hosts in order; each rank copies to the other\n"
      "GPUs of its host and runs an NCCL ring (send to rank+1, recv from rank-1, allreduce).");
  DoctorOptions doctor_options;
  auto* doctor = app.add_subcommand("doctor", "probe this node now: GPUs, links, predicted paths, causes, warnings");
  doctor->add_flag("--json", json, "print the result as JSON (DESIGN.md §7 schema)");
  doctor->add_option("--sysroot", doctor_options.sysroot, "read /proc and /sys under this directory (default: "
                     "P2PTRACE_SYSROOT, else /)");
  doctor->add_flag("--no-cuda", [&](int64_t) { doctor_options.cuda = false; }, "do not load libcudart");
  doctor->add_option("--prometheus", doctor_options.prometheus,
                     "also write the prediction (with --test: the measured pairs) in Prometheus text format for "
                     "node_exporter's textfile collector, e.g. /var/lib/node_exporter/textfile_collector/p2ptrace.prom "
                     "(atomically: a temporary file in the same directory, then rename)")
      ->option_text("FILE");
  doctor->add_flag("--test", doctor_options.test, "measure every ordered GPU pair now (peer access, GB/s with it and "
                   "staged through the host, small-copy latency, the data checked) and judge each: pass, fail with "
                   "its causes, or expected where the node rules P2P out. Do not run it beside a job");
  doctor->add_option("--gpus", doctor_options.gpus, "with --test: the GPUs to test, by the node's index "
                     "(nvidia-smi's), e.g. --gpus 0,1,2")->delimiter(',');
  doctor->add_option("--time-limit", doctor_options.copy_limit_seconds, "with --test: seconds one copy, or any "
                     "CUDA call of the test, may take before its pair fails (default 10; a call that never returns "
                     "ends the test, the pairs after it untested)")->check(CLI::Range(0.1, 3600.0));
  doctor->add_flag("--allow-busy", doctor_options.allow_busy, "with --test: test GPUs that other processes use "
                   "(NVML lists them), or whose processes NVML cannot list (no NVML); refused otherwise, exit 2: "
                   "a job there is slowed and the figures read low");
  doctor->add_option("--rows", doctor_options.rows, "with --test: also write each pair as a fleet row (NDJSON, "
                     "schema p2ptrace.rows/1, kind \"test\"; docs/ROWS.md), atomically; - for stdout")
      ->option_text("FILE");
  doctor->add_option("--baseline", doctor_options.baseline, "with --test: compare with FILE, a previous --json of a "
                     "good node of the same kind; a pair slower by more than --tolerance, or of another class, "
                     "regressed (exit 1)")
      ->option_text("FILE");
  doctor->add_flag("--nccl", doctor_options.nccl, "with --test: also what NCCL chooses for every pair on this node, "
                   "with its environment (one process per GPU; NCCL's own connection lines), beside the prediction");
  double tolerance_pct = p2ptrace::kBaselineTolerance * 100;
  auto* tolerance = doctor->add_option("--tolerance", tolerance_pct, "with --baseline: percent below the baseline a "
                                       "figure may fall (default 15)")->check(CLI::Range(0.0, 100.0));
  doctor->footer(
      "--prometheus FILE: per directional GPU pair the path class available and a fallback gauge with its cause,\n"
      "and the node's pairs without P2P (metric list and a cron/systemd recipe: docs/OPERATIONS.md, \"Prometheus\").\n"
      "Exit status: 0, 1 when an error-severity cause holds, 2 when FILE cannot be written (nothing is left behind).\n"
      "With --test: 0 when every pair passes or is expected, 1 when one fails (or, with --baseline, regressed),\n"
      "2 when nothing could be tested (no CUDA runtime or GPU, GPUs in use without --allow-busy, a bad --baseline).\n"
      "Recipes for a SLURM prolog, a Kubernetes Job and cron: docs/OPERATIONS.md, \"Proving a node\".");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (explain->parsed()) {
    explain_options.json = json;
    return RunExplain(files, explain_options, std::cout, std::cerr);
  }
  if (doctor->parsed()) {
    doctor_options.json = json;
    doctor_options.baseline_tolerance = tolerance_pct / 100;
    if (doctor_options.test) {
      if (tolerance->count() && doctor_options.baseline.empty()) {
        std::cerr << "p2ptrace doctor: --tolerance needs --baseline\n";
        return 2;
      }
      return RunDoctorTest(doctor_options, std::cout, std::cerr, isatty(2));
    }
    for (const char* flag : {"--gpus", "--time-limit", "--allow-busy", "--rows", "--baseline", "--tolerance", "--nccl"})
      if (doctor->count(flag)) {
        std::cerr << "p2ptrace doctor: " << flag << " needs --test\n";
        return 2;
      }
    return RunDoctor(doctor_options, std::cout, std::cerr);
  }
  if (synth->parsed()) return RunSynth(synth_options, std::cout, std::cerr);
  if (nccl_worker->parsed()) return RunNcclRank(nccl_rank, nccl_ranks, nccl_device, nccl_dir, nccl_limit);
  if (exporter->parsed()) {
    if (perfetto_out.empty() && prometheus_out.empty() && rows_out.empty()) {
      std::cerr << "p2ptrace export: nothing to write (give --perfetto OUT, --prometheus FILE and/or --rows FILE)\n";
      return 2;
    }
    if (!prometheus_out.empty())
      if (int code = RunExportPrometheus(path, prometheus_out, std::cerr, isatty(2)); code != 0) return code;
    if (!rows_out.empty())
      if (int code = RunRowsExport(path, rows_out, std::cerr, isatty(2)); code != 0) return code;
    if (!perfetto_out.empty()) return RunExport(path, perfetto_out, export_options, std::cerr, isatty(2));
    return 0;
  }
  if (html->parsed()) return RunHtml(path, html_out, std::cerr, isatty(2));
  if (differ->parsed()) return RunDiff(path, path_b, json, std::cout, std::cerr, isatty(2));

  if (watch->parsed()) return RunWatch(path, watch_options, std::cout, std::cerr);
  if (report->parsed()) {
    StreamOptions report_options;
    report_options.stall_seconds = stall;
    std::optional<Report> rep = LoadReportOrSay(path, "p2ptrace", std::cerr, isatty(2), report_options);
    if (!rep) return 2;
    if (json) {
      WriteJson(*rep, std::cout);
      std::cout << "\n";
    }
    else std::cout << RenderText(*rep, isatty(1) && std::getenv("NO_COLOR") == nullptr);
    return 0;
  }
  auto loaded = LoadTraces(path);
  if (!loaded.ok()) {
    std::cerr << "p2ptrace: " << p2ptrace::Printable(std::string(loaded.status().message()), false) << "\n";
    return 2;
  }
  PrintLoadProblems(*loaded, std::cerr);
  if (loaded->traces.empty()) {
    std::cerr << "p2ptrace: no usable trace in " << p2ptrace::Printable(path, false) << "\n";
    return 2;
  }
  if (json) DumpJson(loaded->traces.front(), std::cout);
  else DumpText(loaded->traces.front(), std::cout);
  return 0;
}
