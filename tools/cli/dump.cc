// `p2ptrace dump FILE`: one trace file, record by record, as text or JSON lines.
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "core/printable.h"
#include "tools/cli/commands.h"
#include "tools/formats/dump.h"
#include "tools/report/traces.h"

namespace p2ptrace::cli {
namespace {

class DumpCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("FILE", path_, "a .p2ptrace file")->required();
    c.add_flag("--json", json_, "JSON lines: header, counters, records");
  }

  int Run() override {
    auto loaded = LoadTraces(path_);
    if (!loaded.ok()) {
      std::cerr << "p2ptrace: " << Printable(std::string(loaded.status().message()), false) << "\n";
      return 2;
    }
    PrintLoadProblems(*loaded, std::cerr);
    if (loaded->traces.empty()) {
      std::cerr << "p2ptrace: no usable trace in " << Printable(path_, false) << "\n";
      return 2;
    }
    if (json_) DumpJson(loaded->traces.front(), std::cout);
    else DumpText(loaded->traces.front(), std::cout);
    return 0;
  }

 private:
  std::string path_;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeDumpCommand() { return std::make_unique<DumpCommand>(); }

}  // namespace p2ptrace::cli
