// `p2ptrace diff A B`: what changed between two runs (tools/report/diff.h); exit 1 when a pair got worse.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "core/printable.h"
#include "tools/cli/commands.h"
#include "tools/common/json_text.h"
#include "tools/report/diff.h"
#include "tools/report/load.h"

namespace p2ptrace::cli {
namespace {

class DiffCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("A", paths_[0], "the earlier run's trace directory")->required();
    c.add_option("B", paths_[1], "the later run's trace directory")->required();
    c.add_flag("--json", json_, "print the changes as JSON");
    c.footer(
        "Lists GPU pairs whose transport class changed or whose GB/s moved by more than 20%, pairs that appeared or\n"
        "vanished, causes that appeared or vanished, NCCL operations whose busbw moved by more than 20%, and call\n"
        "sites (P2PTRACE_STACKS; matched by their frames) whose host-staged bytes appeared or grew by more than 20%.\n"
        "Exit status: 1 when any pair got worse (worse class, newly falling back, or 20% slower) or a call site\n"
        "newly stages through the host, 0 otherwise,\n"
        "2 when A or B holds no usable trace: usable as a node-acceptance gate in CI.");
  }

  int Run() override {
    Report reports[2];
    StreamOptions options;
    options.started = std::chrono::steady_clock::now();  // progress once both reads together take a second
    for (int i = 0; i < 2; ++i) {
      // Streamed as `report` reads: one file's records at a time, so two runs cost two reports' pairs.
      std::optional<Report> rep = LoadReportOrSay(paths_[i], "p2ptrace diff", std::cerr, isatty(2), options);
      if (!rep) return 2;
      reports[i] = std::move(*rep);
    }
    DiffResult d = DiffReports(reports[0], reports[1]);
    if (json_) std::cout << JsonText(RenderDiffJson(d), 2) << "\n";
    else std::cout << Printable(RenderDiffText(d));  // pair names hold host names from the files
    return d.Worse() ? 1 : 0;
  }

 private:
  std::string paths_[2];
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeDiffCommand() { return std::make_unique<DiffCommand>(); }

}  // namespace p2ptrace::cli
