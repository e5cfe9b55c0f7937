// `p2ptrace run [--dir D] [--json] -- CMD …`: run CMD with the shim preloaded, then report.
#pragma once

#include <string>
#include <vector>

namespace p2ptrace::cli {

struct RunOptions {
  std::string dir;  // empty: ./p2ptrace-<timestamp>
  bool json = false;
  std::vector<std::string> command;
};

// Returns the process exit code: CMD's own when it failed; 1 when CMD succeeded but nothing could be
// traced (say, a statically linked CUDA runtime); 0 otherwise.
int Run(const RunOptions& options, const std::string& self_exe);

// Where libp2ptrace.so is: $P2PTRACE_LIB, else <dir of the p2ptrace binary>/../lib/libp2ptrace.so.
std::string ShimPath(const std::string& self_exe);


}  // namespace p2ptrace::cli
