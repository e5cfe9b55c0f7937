// The NCCL log tap (DESIGN.md §4): chooses NCCL_DEBUG / NCCL_DEBUG_FILE before NCCL reads them, so
// that NCCL's transport lines land in a file of the trace directory, and, when the user asked NCCL
// for output on stdout, forwards from that file exactly the lines their own setting would have shown.
#pragma once

#include "shim/config.h"

namespace p2ptrace::shim {

// Once, from the shim's constructor.
void StartNcclLogTap(const Config& config);

// Forwards to stdout what NCCL wrote since the last call (an fstat when it wrote nothing). Any
// thread, any time; does nothing unless this process forwards. Called by the forwarding thread, at
// exit, and meant for the NCCL wrappers when a call returns: then every line NCCL printed during a
// call reaches stdout before the program's next own output, as it would have without the tap.
void PumpNcclLog();

}  // namespace p2ptrace::shim
