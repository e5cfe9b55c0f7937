// `p2ptrace doctor`: this node probed now (tools/doctor/node_check.h); with --test every GPU pair
// measured and judged (tools/doctor/node_proof.h).
#include <unistd.h>

#include <cstdint>
#include <iostream>

#include "CLI/CLI.hpp"
#include "tools/cli/commands.h"
#include "tools/doctor/node_check.h"
#include "tools/doctor/node_proof.h"

namespace p2ptrace::cli {
namespace {

class DoctorCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    doctor_ = &c;
    c.add_flag("--json", o_.json, "print the result as JSON (DESIGN.md §7 schema)");
    c.add_option("--sysroot", o_.sysroot, "read /proc and /sys under this directory (default: "
                 "P2PTRACE_SYSROOT, else /)");
    c.add_flag("--no-cuda", [this](int64_t) { o_.cuda = false; }, "do not load libcudart");
    c.add_option("--prometheus", o_.prometheus,
                 "also write the prediction (with --test: the measured pairs) in Prometheus text format for "
                 "node_exporter's textfile collector, e.g. /var/lib/node_exporter/textfile_collector/p2ptrace.prom "
                 "(atomically: a temporary file in the same directory, then rename)")
        ->option_text("FILE");
    c.add_flag("--test", o_.test, "measure every ordered GPU pair now (peer access, GB/s with it and "
               "staged through the host, small-copy latency, the data checked) and judge each: pass, fail with "
               "its causes, or expected where the node rules P2P out. Do not run it beside a job");
    c.add_option("--gpus", o_.gpus, "with --test: the GPUs to test, by the node's index "
                 "(nvidia-smi's), e.g. --gpus 0,1,2")->delimiter(',');
    c.add_option("--time-limit", o_.copy_limit_seconds, "with --test: seconds one copy, or any "
                 "CUDA call of the test, may take before its pair fails (default 10; a call that never returns "
                 "ends the test, the pairs after it untested)")->check(CLI::Range(0.1, 3600.0));
    c.add_flag("--allow-busy", o_.allow_busy, "with --test: test GPUs that other processes use "
               "(NVML lists them), or whose processes NVML cannot list (no NVML); refused otherwise, exit 2: "
               "a job there is slowed and the figures read low");
    c.add_option("--rows", o_.rows, "with --test: also write each pair as a fleet row (NDJSON, "
                 "schema p2ptrace.rows/1, kind \"test\"; docs/ROWS.md), atomically; - for stdout")
        ->option_text("FILE");
    c.add_option("--baseline", o_.baseline, "with --test: compare with FILE, a previous --json of a "
                 "good node of the same kind; a pair slower by more than --tolerance, or of another class, "
                 "regressed (exit 1)")
        ->option_text("FILE");
    c.add_flag("--nccl", o_.nccl, "with --test: also what NCCL chooses for every pair on this node, "
               "with its environment (one process per GPU; NCCL's own connection lines), beside the prediction");
    tolerance_ = c.add_option("--tolerance", tolerance_pct_, "with --baseline: percent below the baseline a "
                              "figure may fall (default 15)")->check(CLI::Range(0.0, 100.0));
    c.footer(
        "--prometheus FILE: per directional GPU pair the path class available and a fallback gauge with its cause,\n"
        "and the node's pairs without P2P (metric list and a cron/systemd recipe: docs/OPERATIONS.md, \"Prometheus\").\n"
        "Exit status: 0, 1 when an error-severity cause holds, 2 when FILE cannot be written (nothing is left behind).\n"
        "With --test: 0 when every pair passes or is expected, 1 when one fails (or, with --baseline, regressed),\n"
        "2 when nothing could be tested (no CUDA runtime or GPU, GPUs in use without --allow-busy, a bad --baseline).\n"
        "Recipes for a SLURM prolog, a Kubernetes Job and cron: docs/OPERATIONS.md, \"Proving a node\".");
  }

  int Run() override {
    o_.baseline_tolerance = tolerance_pct_ / 100;
    if (o_.test) {
      if (tolerance_->count() && o_.baseline.empty()) {
        std::cerr << "p2ptrace doctor: --tolerance needs --baseline\n";
        return 2;
      }
      return RunDoctorTest(o_, std::cout, std::cerr, isatty(2));
    }
    for (const char* flag : {"--gpus", "--time-limit", "--allow-busy", "--rows", "--baseline", "--tolerance", "--nccl"})
      if (doctor_->count(flag)) {
        std::cerr << "p2ptrace doctor: " << flag << " needs --test\n";
        return 2;
      }
    return RunDoctor(o_, std::cout, std::cerr);
  }

 private:
  DoctorOptions o_;
  double tolerance_pct_ = kBaselineTolerance * 100;
  CLI::App* doctor_ = nullptr;
  CLI::Option* tolerance_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> MakeDoctorCommand() { return std::make_unique<DoctorCommand>(); }

}  // namespace p2ptrace::cli
