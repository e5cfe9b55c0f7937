// Reads the node's link health (core/link_health.h): every NVLink's state, speed and error counters
// and every PCIe port on the GPUs' way to their roots (trained vs maximum generation and width, the
// GPU's replay counter, the kernel's AER counts), for the GPUs a probe found. NVML must have answered
// that probe (its nvmlInit stays in force); sysfs is read under the probe's sysroot. A few calls per
// link, never on a CUDA or NCCL call's path: the shim reads at job start and at exit.
#pragma once

#include <string>

#include "core/link_health.h"
#include "core/node_probe.h"

namespace p2ptrace::probe {

// `when` names the reading ("start", "exit", "before GPU0 -> GPU1"). NVML's part runs under
// `nvml_timeout_ms` (a sick driver can stall); what could not be read is a note.
LinkHealth ReadLinkHealth(const NodeProbe& probe, const std::string& when, int nvml_timeout_ms = 2000);

}  // namespace p2ptrace::probe
