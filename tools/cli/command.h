// One CLI command: its flags, parsed into the object, and what it runs. main.cc lists the commands in
// one table (commands.h); each command's file defines its flags and its run, nothing else.
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace p2ptrace::cli {

class Command {
 public:
  virtual ~Command() = default;
  // Declares the command's arguments, flags, help footer and checks on its subcommand. The parsed
  // values land in the object, which outlives the parse.
  virtual void Define(CLI::App& command) = 0;
  // Runs the parsed command. Returns the exit status: 0 ok, 1 findings, 2 usage or input errors
  // (`run`: the job's own status).
  virtual int Run() = 0;
};

struct CommandEntry {
  const char* name;
  const char* summary;  // CLI11's one-line description
  const char* usage;    // its lines in `p2ptrace --help`; "" for a command not listed there
  std::unique_ptr<Command> (*make)();
  // A command whose arguments CLI11 must not touch (`run`: everything after `--` is the job's):
  // it parses argv itself, from argv[2]. Null for the others.
  int (*parse_and_run)(int argc, char** argv) = nullptr;
};

}  // namespace p2ptrace::cli
