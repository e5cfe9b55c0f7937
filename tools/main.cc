// p2ptrace: the post-mortem viewer and launcher (DESIGN.md §7).
// Exit codes: 0 ok; 1 findings (or nothing could be traced); 2 usage or input errors.
#include <unistd.h>

#include <climits>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/dump.h"
#include "tools/explain.h"
#include "tools/report.h"
#include "tools/run.h"
#include "tools/traces.h"

namespace {

using namespace p2ptrace::cli;

constexpr const char* kUsage = R"(p2ptrace: which path GPU-to-GPU traffic took, and why

  p2ptrace run [--dir D] [--json] -- CMD …   run CMD with libp2ptrace.so preloaded, then print the report
  p2ptrace report DIR [--json]               merged view of every trace in DIR (or one trace file)
  p2ptrace dump FILE [--json]                one trace file, record by record (--json: JSON lines)
  p2ptrace explain FILE… [--json]            explain raw NCCL_DEBUG=INFO logs: transport per rank pair, and why

Run `p2ptrace COMMAND --help` for the options of a command.
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
                   "status; 1 when CMD succeeded but nothing could be traced (e.g. static cudart).\n";
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
  if (!std::strcmp(argv[1], "run")) return RunCommand(argc, argv);

  CLI::App app{"p2ptrace: which path GPU-to-GPU traffic took, and why"};
  app.require_subcommand(1);
  std::string path;
  bool json = false;
  auto* report = app.add_subcommand("report", "merged view of every trace in DIR (or one trace file)");
  report->add_option("DIR", path, "directory of trace files (P2PTRACE_DIR of the job)")->required();
  report->add_flag("--json", json, "print the report as JSON (DESIGN.md §7 schema)");
  auto* dump = app.add_subcommand("dump", "one trace file, record by record");
  dump->add_option("FILE", path, "a .p2ptrace file")->required();
  dump->add_flag("--json", json, "JSON lines: header, counters, records");
  std::vector<std::string> files;
  auto* explain = app.add_subcommand("explain", "explain raw NCCL_DEBUG=INFO logs: transport per rank pair, and why");
  explain->add_option("FILE", files, "NCCL logs (NCCL_DEBUG=INFO output, any NCCL 2.x)")->required();
  explain->add_flag("--json", json, "print the explanation as JSON (DESIGN.md §7 schema)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (explain->parsed()) return RunExplain(files, json, std::cout, std::cerr);

  auto loaded = LoadTraces(path);
  if (!loaded.ok()) {
    std::cerr << "p2ptrace: " << loaded.status().message() << "\n";
    return 2;
  }
  for (const std::string& p : loaded->problems) std::cerr << "p2ptrace: skipped " << p << "\n";
  if (loaded->traces.empty()) {
    std::cerr << "p2ptrace: no usable trace in " << path << "\n";
    return 2;
  }
  if (dump->parsed()) {
    if (json) DumpJson(loaded->traces.front(), std::cout);
    else DumpText(loaded->traces.front(), std::cout);
    return 0;
  }
  Report rep = BuildReport(path, *loaded);
  if (json) std::cout << RenderJson(rep).dump(2) << "\n";
  else std::cout << RenderText(rep, isatty(1) && std::getenv("NO_COLOR") == nullptr);
  return 0;
}
