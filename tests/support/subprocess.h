// Runs a program in a child process with a modified environment and captures what it printed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace p2ptrace::testing {

struct RunResult {
  int exit_code = -1;   // valid when signal == 0
  int signal = 0;       // the signal that killed it, or 0
  std::string out, err;
};

// env: variables to set (a nullopt value unsets the variable); everything else is inherited.
RunResult RunProgram(const std::vector<std::string>& argv,
              const std::map<std::string, std::optional<std::string>>& env = {});

// Directory the test may write into; removed at exit.
std::string TempDir();
void WriteFile(const std::string& path, const std::string& text);

}  // namespace p2ptrace::testing
