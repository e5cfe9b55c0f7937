// The job's link health (core/link_health.h) read twice per process: at job start, right after the
// job-start check's probe, and at exit, so the report can charge what changed to the pairs that
// used each link. Off every CUDA and NCCL call's path: a few NVML calls per link, twice.
#pragma once

#include "core/node_probe.h"

namespace p2ptrace::shim {

// Reads and records the start reading, once per process (later calls do nothing), and arranges the
// exit reading. Keeps its own copy of what it needs from `probe`.
void RecordLinkReadings(const NodeProbe& probe);

}  // namespace p2ptrace::shim
