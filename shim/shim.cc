// libp2ptrace.so's entry: read the settings before main. Everything else happens lazily, at the
// first intercepted call (libraries such as cudart are often loaded after this runs).
#include <cstdlib>
#include <string>

#include "shim/config.h"
#include "shim/record/trace_writer.h"

namespace {

void WarnOnce(const std::string& message) { p2ptrace::shim::Warn(message); }

// NCCL states the transport of each (channel, peer) only in its INFO lines. When the user asked
// for no NCCL output at all, have NCCL write them to a file in the trace directory, where the viewer
// reads them: the user sees exactly what they saw before (nothing). A user's own NCCL_DEBUG or
// NCCL_DEBUG_FILE is left alone. Ranks started by this process inherit the tap and its marker.
void TapNcclLog(const p2ptrace::shim::Config& config) {
  const char* mode = std::getenv("P2PTRACE_NCCL_LOG");
  if (mode != nullptr && std::string(mode) == "off") return;
  if (mode != nullptr && *mode && std::string(mode) != "auto")
    WarnOnce(std::string("P2PTRACE_NCCL_LOG=") + mode + " is not auto or off; using auto");
  if (std::getenv("P2PTRACE_NCCL_TAP") != nullptr) return;  // inherited from a traced parent
  if (std::getenv("NCCL_DEBUG") != nullptr || std::getenv("NCCL_DEBUG_FILE") != nullptr) return;
  // NCCL writes to stdout when it cannot open the file: the directory must exist first.
  if (!p2ptrace::shim::MakeDirs(config.dir)) return;
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", (config.dir + "/nccl.%h.%p.log").c_str(), 1);
  setenv("P2PTRACE_NCCL_TAP", "1", 1);
}

__attribute__((constructor)) void P2ptraceInit() {
  p2ptrace::shim::Config config = p2ptrace::shim::ReadConfig(WarnOnce);
  p2ptrace::shim::TraceWriter::Configure(config);
  if (config.disabled) return;
  // Processes started by this one trace into the same directory (torchrun's ranks, for one).
  setenv("P2PTRACE_DIR", config.dir.c_str(), 0);
  TapNcclLog(config);
}

}  // namespace
