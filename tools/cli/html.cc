// `p2ptrace html DIR -o FILE`: the report as one self-contained page (tools/formats/html.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "tools/cli/commands.h"
#include "tools/formats/html.h"
#include "tools/report/load.h"

namespace p2ptrace::cli {
namespace {

class HtmlCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("DIR", path_, "directory of trace files (P2PTRACE_DIR of the job)")->required();
    c.add_option("-o,--output", out_file_, "the HTML file to write")->required();
    c.footer(
        "One file, inline CSS/JS/SVG: a heatmap matrix per host (hover or click a cell: its transports, GB/s and\n"
        "causes), GB/s per pair against the path's expectation, the fallbacks with their fixes and the time they\n"
        "cost, and a timeline summary. Open it in any browser; it loads nothing from the network.");
  }

  int Run() override {
    std::optional<Report> rep = LoadReportOrSay(path_, "p2ptrace", std::cerr, isatty(2));
    if (!rep) return 2;
    std::string html = RenderHtml(*rep);
    std::ofstream out(out_file_, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(html.data(), static_cast<std::streamsize>(html.size())) || !out.flush()) {
      std::cerr << "p2ptrace html: " << out_file_ << ": cannot write: " << std::strerror(errno) << "\n";
      return 2;
    }
    return 0;
  }

 private:
  std::string path_, out_file_;
};

}  // namespace

std::unique_ptr<Command> MakeHtmlCommand() { return std::make_unique<HtmlCommand>(); }

}  // namespace p2ptrace::cli
