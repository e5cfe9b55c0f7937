// What the process has been seen to use, as the wrappers learn it: which CUDA runtimes have answered
// it in the current trace file, and the NCCL it called. Read by the job-start check, the NCCL hooks
// and the copy hooks alike.
#pragma once

#include <atomic>

#include "shim/base/cuda_runtime.h"

namespace p2ptrace::shim {

// Whether this runtime node answered one of the application's calls successfully and was
// described in the current trace file: from then on the shim's own calls to it cannot fail and
// leave an error behind. A fork child's new file must be described again.
bool NodeAnswered(Node node);
inline bool RuntimeAnswered(const CudaRuntime& rt) { return NodeAnswered(rt.node); }
// Marks `node` answered in the current file; true when this call did (the caller then describes it).
bool MarkNodeAnswered(Node node);
// Its library was unloaded: a runtime loaded again there is described again.
void ForgetNodeAnswered(Node node);

// The runtime the application itself uses: one that has answered it, newest cudart first, then the
// driver when `or_driver`; null when none has.
const CudaRuntime* AnsweredRuntime(bool or_driver);

// NCCL: whether this process has called NCCL (a wrapped function; NCCL loaded but never called, as
// a framework loads it, does not count: such a process moves data with CUDA copies), and the version
// code the real ncclGetVersion gave at that first call (0 unknown).
namespace detail {
extern std::atomic<bool> g_nccl_called;
}
inline bool NcclCalled() { return detail::g_nccl_called.load(std::memory_order_acquire); }  // every NCCL call asks
int LoadedNcclVersion();
void NoteNcclCalled(int version);

}  // namespace p2ptrace::shim
