// Job-start warnings (DESIGN.md §2): once per process, at the first CUDA peer call, the first
// pair copy, the first allocation of a process that loaded NCCL, or NCCL's init, probe the node
// (shim/probe.h), predict every GPU pair's path (core/predict.h) and print one line per pair that
// falls back, or the all-good line, on stderr (P2PTRACE_WARN: node = once per node, rank = every
// process, off). The probes, predictions and causes go into the trace as a text block.
#pragma once

#include "shim/interpose/cuda_runtime.h"

namespace p2ptrace::shim {

// From a CUDA hook, after `rt` returned success to the application (its own queries cannot fail
// then). Cheap after the first call.
void PreflightFromCuda(const CudaRuntime& rt);

// From an allocation: runs the preflight when libnccl is loaded in the process (NCCL jobs allocate
// their buffers before the first collective). Cheap once the preflight ran.
void PreflightIfNccl(const CudaRuntime& rt);

// From NCCL's init wrappers (before the real init: warnings precede the first collective's traffic).
void PreflightAtNcclInit();

// A pair's first copy resolved its route: when it goes through the host although the driver
// allows peer access, the application never enabled it ([peer-access-not-enabled]).
void PreflightCopyRoute(const CudaRuntime& rt, int src, int dst, bool direct);

}  // namespace p2ptrace::shim
