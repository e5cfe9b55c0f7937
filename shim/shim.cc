// libp2ptrace.so's entry: read the settings before main. Everything else happens lazily, at the
// first intercepted call (libraries such as cudart are often loaded after this runs).
#include <string>

#include "shim/base/config.h"
#include "shim/nccl_log_tap.h"
#include "shim/record/call_sites.h"
#include "shim/record/trace_writer.h"

namespace {

void WarnOnce(const std::string& message) { p2ptrace::shim::Warn(message); }

__attribute__((constructor)) void P2ptraceInit() {
  p2ptrace::shim::Config config = p2ptrace::shim::ReadConfig(WarnOnce);
  p2ptrace::shim::TraceWriter::Configure(config);
  if (config.disabled) return;
  // Nothing is created and nothing in the process changes here: the trace directory, the trace,
  // P2PTRACE_DIR for the children and the NCCL log tap all wait for the first CUDA or NCCL call,
  // so that a shell, a launcher or `ls` under LD_PRELOAD is left exactly as it was.
  // P2PTRACE_STACKS: backtrace()'s first call (it loads libgcc_s) happens here, before any wrapped call.
  if (config.stack_depth > 0) p2ptrace::shim::StartCallSites(config.stack_depth, WarnOnce);
  p2ptrace::shim::InstallNcclLogTapHooks();
}

}  // namespace
