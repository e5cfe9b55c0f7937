// The commands of `p2ptrace`, one file each under tools/cli/, listed in main.cc's table.
#pragma once

#include <memory>

#include "tools/cli/command.h"

namespace p2ptrace::cli {

int RunCommandLine(int argc, char** argv);  // run.cc: `run [--dir D] [--json] -- CMD …`
std::unique_ptr<Command> MakeReportCommand();
std::unique_ptr<Command> MakeWatchCommand();
std::unique_ptr<Command> MakeDumpCommand();
std::unique_ptr<Command> MakeDoctorCommand();
std::unique_ptr<Command> MakeExplainCommand();
std::unique_ptr<Command> MakeHtmlCommand();
std::unique_ptr<Command> MakeExportCommand();
std::unique_ptr<Command> MakeDiffCommand();
std::unique_ptr<Command> MakeSynthCommand();
std::unique_ptr<Command> MakeNcclRankCommand();

}  // namespace p2ptrace::cli
