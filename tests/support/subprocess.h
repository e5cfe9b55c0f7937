// Runs a program in a child process with a modified environment and captures what it printed.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace p2ptrace::testing {

struct RunResult {
  int exit_code = -1;   // valid when signal == 0
  int signal = 0;       // the signal that killed it, or 0
  std::string out, err;
  long max_rss_kb = 0;  // the child's peak resident memory (getrusage's ru_maxrss)
};

// env: variables to set (a nullopt value unsets the variable); everything else is inherited.
using Env = std::map<std::string, std::optional<std::string>>;

// A running child with stdout and stderr captured; for tests that talk to it while it runs.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const Env& env = {});
  pid_t pid() const { return pid_; }
  const std::string& out() const { return text_[0]; }
  // Reads until `done` holds for what stdout has so far, or the output ends (or 30 s pass quietly).
  void ReadUntil(const std::function<bool(const std::string&)>& done);
  // Reads everything, waits for the exit.
  RunResult Finish();

 private:
  bool ReadOnce();
  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::string text_[2];
};

inline RunResult RunProgram(const std::vector<std::string>& argv, const Env& env = {}) {
  return ChildProcess(argv, env).Finish();
}

// Directory the test may write into; removed at exit.
std::string TempDir();
void WriteFile(const std::string& path, const std::string& text);
// The whole file, bytes as they are; "" when it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace p2ptrace::testing
