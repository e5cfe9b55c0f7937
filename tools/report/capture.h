// How far one process's trace can be trusted: what the shim saw in it (runtimes, driver, NCCL, the
// log tap, graphs) and what an empty or partial answer then means (ProcessInfo's capture_mode, trust).
#pragma once

#include <string>

#include "core/trace_reader.h"
#include "tools/report/report.h"

namespace p2ptrace::cli {

// "exited", "fatal signal 11", or "running or killed".
std::string StateText(const p2ptrace_file_header& h);
// Whether and how the process's NCCL log was seen: "tapped", "user file", or "not seen: why".
std::string NcclLogStatus(const Trace& t);
// Fills p->capture_mode and p->trust from its capture flags and state; again after either changes.
void DescribeCapture(ProcessInfo* p);

}  // namespace p2ptrace::cli
