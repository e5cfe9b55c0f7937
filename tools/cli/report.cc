// `p2ptrace report DIR`: the merged view of a job's traces, as text or JSON.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "tools/cli/commands.h"
#include "tools/formats/json.h"
#include "tools/formats/text.h"
#include "tools/report/load.h"

namespace p2ptrace::cli {
namespace {

class ReportCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("DIR", path_, "directory of trace files (P2PTRACE_DIR of the job)")->required();
    c.add_flag("--json", json_, "print the report as JSON (DESIGN.md §7 schema)");
    c.add_option("--stall", options_.stall_seconds, "an NCCL operation still unfinished this many seconds after "
                 "its call is stuck (the stopped finding; default 60)")->check(CLI::Range(0.0, 604800.0));
  }

  int Run() override {
    std::optional<Report> rep = LoadReportOrSay(path_, "p2ptrace", std::cerr, isatty(2), options_);
    if (!rep) return 2;
    if (json_) {
      WriteJson(*rep, std::cout);
      std::cout << "\n";
    } else {
      std::cout << RenderText(*rep, isatty(1) && std::getenv("NO_COLOR") == nullptr);
    }
    return 0;
  }

 private:
  std::string path_;
  bool json_ = false;
  StreamOptions options_;
};

}  // namespace

std::unique_ptr<Command> MakeReportCommand() { return std::make_unique<ReportCommand>(); }

}  // namespace p2ptrace::cli
