// Job-start warnings (DESIGN.md §2): once per process, at the first CUDA peer call, the first
// pair copy, the first allocation of a process that loaded NCCL, or NCCL's init, probe the node
// (probe/probe.h), predict every GPU pair's path (core/predict.h) and print one line per pair that
// falls back, or the all-good line, on stderr (P2PTRACE_WARN: node = once per node, rank = every
// process, off). The probes, predictions and causes go into the trace as a text block.
#pragma once

#include "core/nccl_log.h"
#include "shim/base/cuda_runtime.h"

namespace p2ptrace::shim {

// From a CUDA hook, after `rt` returned success to the application (its own queries cannot fail
// then). Cheap after the first call.
void PreflightFromCuda(const CudaRuntime& rt);

// From an allocation: runs the preflight when the process has called NCCL (NCCL jobs allocate their
// buffers before the first collective). Cheap once the preflight ran.
void PreflightIfNccl(const CudaRuntime& rt);

// From NCCL's init wrappers (before the real init: warnings precede the first collective's traffic).
// ncclCommInitAll passes its devices (devlist, or 0..ndev-1 when null): only their pairs are judged.
// False when it left the check for after the init (PreflightAfterNcclInit): a one-GPU init in a
// process whose CUDA runtime has answered nothing yet, which does not know its GPU before the
// communicator exists (the shim asks no CUDA runtime the application has not used).
bool PreflightAtNcclInit(int ndev = 0, const int* devlist = nullptr);
// After such an init: `cuda_device` is the communicator's device (ncclCommCuDevice), -1 unknown.
void PreflightAfterNcclInit(int cuda_device);

// A pair's first copy resolved its route: when it goes through the host although the driver
// allows peer access, the application never enabled it ([peer-access-not-enabled]).
void PreflightCopyRoute(const CudaRuntime& rt, int src, int dst, bool direct);

// A connection NCCL logged (after an operation): when its path is worse than the job-start
// prediction for that GPU pair, one more warning the same way — with the cause when the
// environment NCCL now sees explains it (set after the check), or, for a network connection, the
// cause the process's own NCCL lines show (`log`: core/net_diagnosis.h), else [unknown]. Once per pair.
void PreflightObserveNccl(const Connection& c, const NcclLog& log);

}  // namespace p2ptrace::shim
