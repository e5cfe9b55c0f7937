// libp2ptrace.so's entry: read the settings before main. Everything else happens lazily, at the
// first intercepted call (libraries such as cudart are often loaded after this runs).
#include <cstdlib>
#include <string>

#include "shim/config.h"
#include "shim/nccl_log_tap.h"
#include "shim/record/call_sites.h"
#include "shim/record/trace_writer.h"

namespace {

void WarnOnce(const std::string& message) { p2ptrace::shim::Warn(message); }

__attribute__((constructor)) void P2ptraceInit() {
  p2ptrace::shim::Config config = p2ptrace::shim::ReadConfig(WarnOnce);
  p2ptrace::shim::TraceWriter::Configure(config);
  if (config.disabled) return;
  // Processes started by this one trace into the same directory (torchrun's ranks, for one).
  setenv("P2PTRACE_DIR", config.dir.c_str(), 0);
  // P2PTRACE_STACKS: backtrace()'s first call (it loads libgcc_s) happens here, before any wrapped call.
  if (config.stack_depth > 0) p2ptrace::shim::StartCallSites(config.stack_depth, WarnOnce);
  // NCCL states the transport of each (channel, peer) only in its INFO lines: have it write them
  // where the viewer reads them, and show the user exactly what their own NCCL_DEBUG would have
  // shown (the policy is in nccl_log_tap.cc).
  p2ptrace::shim::StartNcclLogTap(config);
}

}  // namespace
