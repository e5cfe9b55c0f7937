// Sampled copy timing: a pooled pair of timing events recorded on the copy's own stream around
// it, resolved later by one background thread (cudaEventQuery, then cudaEventElapsedTime), so the
// caller never waits. The result lands in a TIMING record and the pair's timed counters.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "shim/interpose/cuda_runtime.h"

namespace p2ptrace::shim {

struct TimedCopy {
  const CudaRuntime* rt = nullptr;
  int device = -1;  // where the events live: the stream's device
  cudaEvent_t start = nullptr, end = nullptr;
  int src = -1, dst = -1, path = 0;
  uint8_t transport = 0;
  uint64_t bytes = 0;
  uint32_t seq = 0;
};

class CopyTimer {
 public:
  // Records the start event on `stream` (on `device`). False when this copy cannot be timed
  // (no pooled event could be made, a capture is running); nothing was recorded then.
  static bool Begin(const CudaRuntime& rt, int device, cudaStream_t stream, TimedCopy* t);
  // After the copy: records the end event and queues it for the resolver, or returns the events
  // to the pool when the copy failed.
  static void End(cudaStream_t stream, bool copy_succeeded, TimedCopy* t);

  // Stream captures in progress anywhere in the process: while any runs, nothing is timed (an
  // event record on the legacy stream would invalidate a global-mode capture).
  static void CaptureBegan();
  static void CaptureEnded();

  // Waits (bounded) for queued timings and stops the resolver; at exit.
  static void Drain();
};

}  // namespace p2ptrace::shim
