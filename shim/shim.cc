// libp2ptrace.so's entry: read the settings before main. Everything else happens lazily, at the
// first intercepted call (libraries such as cudart are often loaded after this runs).
#include <string>

#include "shim/config.h"
#include "shim/record/trace_writer.h"

namespace {

void WarnOnce(const std::string& message) { p2ptrace::shim::Warn(message); }

__attribute__((constructor)) void P2ptraceInit() {
  p2ptrace::shim::Config config = p2ptrace::shim::ReadConfig(WarnOnce);
  // Processes started by this one trace into the same directory (torchrun's ranks, for one).
  setenv("P2PTRACE_DIR", config.dir.c_str(), 0);
  p2ptrace::shim::TraceWriter::Configure(config);
}

}  // namespace
