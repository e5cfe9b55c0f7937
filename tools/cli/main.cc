// p2ptrace: the post-mortem viewer and launcher (DESIGN.md §7). One table of commands; each command's
// flags and run live in its own file (commands.h).
// Exit codes: 0 ok; 1 findings; 2 usage or input errors; `run`: the job's own status.
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/cli/commands.h"
#include "tools/common/version.h"

namespace {

using namespace p2ptrace::cli;

// In `p2ptrace --help` order.
const CommandEntry kCommands[] = {
    {"run", "", "  p2ptrace run [--dir D] [--json] -- CMD …   run CMD with libp2ptrace.so preloaded, then print the report\n",
     nullptr, RunCommandLine},
    {"report", "merged view of every trace in DIR (or one trace file)",
     "  p2ptrace report DIR [--json] [--stall S]   merged view of every trace in DIR (or one trace file); a hung or\n"
     "                                             dead job leads with who stopped first\n",
     MakeReportCommand},
    {"watch", "follow a running job's traces: progress per communicator, and who stopped when one makes none (ends "
              "when every process has exited)",
     "  p2ptrace watch DIR [--interval S] [--stall S] [--once] [--json]\n"
     "                                             follow a running job: says when a communicator makes no progress\n",
     MakeWatchCommand},
    {"dump", "one trace file, record by record",
     "  p2ptrace dump FILE [--json]                one trace file, record by record (--json: JSON lines)\n",
     MakeDumpCommand},
    {"doctor", "probe this node now: GPUs, links, predicted paths, causes, warnings",
     "  p2ptrace doctor [--json] [--prometheus F] probe this node now: paths each GPU pair will take, and why\n",
     MakeDoctorCommand},
    {"explain", "explain NCCL_DEBUG=INFO logs and `nvidia-smi topo -m`: paths per pair, and why",
     "  p2ptrace explain FILE… [--json]            explain NCCL_DEBUG=INFO logs and `nvidia-smi topo -m`: paths per "
     "pair, and why\n",
     MakeExplainCommand},
    {"html", "the report as one self-contained HTML page (no network access)",
     "  p2ptrace html DIR -o FILE                  the report as one self-contained page: pair heatmaps, GB/s, causes\n",
     MakeHtmlCommand},
    {"export", "the job for other tools: a Perfetto timeline, Prometheus metrics, fleet rows for SQL",
     "  p2ptrace export DIR --perfetto OUT         the job as a timeline for ui.perfetto.dev (Chrome trace JSON)\n"
     "  p2ptrace export DIR --prometheus FILE      the job's GPU pairs for node_exporter's textfile collector\n"
     "  p2ptrace export DIR --rows FILE            one JSON row per pair and NCCL operation, for fleet SQL (DuckDB, "
     "Spark, Trino)\n",
     MakeExportCommand},
    {"diff", "what changed between two runs; exit 1 when a pair got worse",
     "  p2ptrace diff A B [--json]                 what changed between two runs; exit 1 when a pair got worse\n",
     MakeDiffCommand},
    {"synth", "a synthetic job's traces (demos, tests, benchmarks)",
     "  p2ptrace synth --ranks N --events M --out DIR   a synthetic job's traces (demos, tests, benchmarks)\n",
     MakeSynthCommand},
    // doctor --test --nccl's worker, one process per GPU: not for users, so not listed.
    {"_nccl-rank", "", "", MakeNcclRankCommand},
};

std::string Usage() {
  std::string text = "p2ptrace: which path GPU-to-GPU traffic took, and why\n\n";
  for (const CommandEntry& c : kCommands) text += c.usage;
  return text +
         "\nRun `p2ptrace COMMAND --help` for the options of a command; `p2ptrace --version` prints the version.\n";
}

bool Is(const char* arg, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (!std::strcmp(arg, n)) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || Is(argv[1], {"--help", "-h", "help"})) {
    std::cout << Usage();
    return argc < 2 ? 2 : 0;
  }
  if (Is(argv[1], {"--version", "-V", "version"})) {
    std::cout << "p2ptrace " << VersionText() << "\n";
    return 0;
  }
  for (const CommandEntry& c : kCommands)
    if (c.parse_and_run != nullptr && !std::strcmp(argv[1], c.name)) return c.parse_and_run(argc, argv);

  CLI::App app{"p2ptrace: which path GPU-to-GPU traffic took, and why"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, std::unique_ptr<Command>>> commands;
  for (const CommandEntry& c : kCommands) {
    if (c.make == nullptr) continue;
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    if (!*c.usage) sub->group("");
    commands.emplace_back(sub, c.make());
    commands.back().second->Define(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (auto& [sub, command] : commands)
    if (sub->parsed()) return command->Run();
  return 2;  // require_subcommand(1) makes this unreachable
}
