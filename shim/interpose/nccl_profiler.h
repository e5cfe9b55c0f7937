// p2ptrace as NCCL's profiler plugin (DESIGN.md §4, "NCCL's own timers"): libp2ptrace.so exports
// ncclProfiler_v4 … v7, and NCCL, told to load it, reports each sampled send, receive and
// collective with the GPU start and stop time of every channel its kernel ran on. The shim sums
// those into one NCCL_KERNEL record per operation: a time per GPU pair, inside groups too.
#pragma once

namespace p2ptrace::shim {

// Once, at the process's first NCCL call, before NCCL reads its environment (`nccl_version`:
// ncclGetVersion's code). Sets NCCL_PROFILER_PLUGIN to the shim, where the NCCL has kernel timers
// (2.27+), the trace is open and timing is on, unless the program set a plugin of its own (then one
// warning, and its plugin stays) or the user reads NCCL's INFO lines (NCCL would log loading the
// shim where it logs something else bare: no output may change). P2PTRACE_NCCL_PROFILER=off leaves
// NCCL's profiler alone.
void StartNcclProfiler(int nccl_version);

// Whether NCCL's kernel timers sample the operations (a communicator of this process has the shim
// as its profiler, timing on): then the wrappers put no timing event on NCCL's stream.
bool NcclKernelTimersMeasure();

// Whether the wrappers choose which calls NCCL's kernel timers measure (the shim is NCCL's plugin,
// with no program's plugin to forward to). Then a sampled call is made between these two, which
// open the sample window: the shim's bits in NCCL's one mask for the process, which NCCL copies
// into each operation at its call. The window closes when the call's first operation is launched
// (NCCL's P2p or Coll event on this thread), or at the latest when the call returns: an operation
// outside the sample costs NCCL no timer work, unless another thread calls it in that short time
// (DESIGN.md §4). False when no window opened (a capture runs in the process): the call is untimed.
bool NcclSamplesByCall();
bool BeginKernelSample();
void EndKernelSample();
// Before a call captured into a graph: waits (boundedly) for an open window to close, so that its
// operation takes no timer work into the graph.
void AwaitNoKernelSample();

// Before a communicator's init: where NCCL unloaded the plugin (its last communicator was freed),
// the shim's name stands in NCCL_PROFILER_PLUGIN again, so that NCCL loads it for this one (it reads
// the variable at every load); given back as at the first init.
void RearmNcclProfiler();

// NCCL has read NCCL_PROFILER_PLUGIN (a communicator's init returned or NCCL initialised the
// plugin): the program's environment becomes its own again. Cheap when there is nothing to do.
void ReturnNcclProfilerEnvironment();

}  // namespace p2ptrace::shim
