// `p2ptrace watch DIR`: the stopped-job view while the job runs (DESIGN.md §7). Re-reads the trace
// directory every --interval seconds and prints one status line per look, and the stopped finding
// (who stopped, what it was doing, who waits on which pair) when a communicator has made no progress
// for --stall seconds or a process stopped. Ends when every process has exited (0), at --once, or
// at Ctrl-C.
#pragma once

#include <ostream>
#include <string>

namespace p2ptrace::cli {

struct WatchOptions {
  double interval_seconds = 5;
  double stall_seconds = 60;
  bool once = false;
  bool json = false;  // one JSON object per look (JSON lines)
};

int RunWatch(const std::string& dir, const WatchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace p2ptrace::cli
