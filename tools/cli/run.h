// `p2ptrace run [--dir D] [--json] -- CMD …`: run CMD with the shim preloaded, then report.
#pragma once

#include <ostream>
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

// LD_AUDIT for the job: libp2ptrace_audit.so from the shim's directory put before the user's own
// auditors (not twice); the user's value unchanged, after one warning on `warn`, when it is missing.
std::string AuditSetting(const std::string& shim, const char* user_audit, std::ostream& warn);


}  // namespace p2ptrace::cli
