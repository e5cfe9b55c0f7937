// `p2psim sysroot`: a simulated host's /proc, /sys and /etc facts written into a directory, laid
// out like Linux, so probes read them unchanged through P2PTRACE_SYSROOT (DESIGN.md §9).
#pragma once

#include <string>

#include "core/topology.h"
#include "tests/sim/common/sim_topology.h"

namespace p2psim {

// Writes `host`'s facts under `dir`, creating it if missing. The subtrees it generates (the PCI
// tree, IOMMU groups, /proc/driver/nvidia, …) are rebuilt on every call, so rerunning with another
// topology leaves nothing stale; single files are overwritten. A tmpfs cannot live in a directory,
// so /dev/shm is described in `dir`/p2psim/dev_shm ("size_mb N" and "device N" lines).
// On failure returns false with a one-line `error`.
// With the topology, each GPU's and switch's AER totals and a switch's own `pcie` link come from it.
bool WriteSysroot(const Topology& topo, const p2ptrace::Host& host, const std::string& dir, std::string* error);
bool WriteSysroot(const p2ptrace::Host& host, const std::string& dir, std::string* error);

// The IOMMU and PCI rules WriteSysroot follows, for the usage text.
extern const char kSysrootRules[];

}  // namespace p2psim
