// Sampled copy timing: a pooled pair of timing events recorded on the copy's own stream around
// it, resolved later by one background thread (cudaEventQuery, then cudaEventElapsedTime), so the
// caller never waits. The result lands in a TIMING record and the pair's timed counters.
//
// The calling thread takes no lock and makes no system call in the steady state: event pairs come
// from a lock-free pool of at most kPairsPerDevice per (runtime node, device), made on first need;
// finished timings go to the resolver through a lock-free bounded queue; the resolver is woken only
// when it sleeps. When no pair is free (the resolver has not caught up) or the queue is full, the
// copy is simply not timed and the header's `timings_skipped` counts it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "shim/base/cuda_runtime.h"

namespace p2ptrace::shim {

struct TimedCopy {
  const CudaRuntime* rt = nullptr;
  int device = -1;  // where the events live: the stream's device
  cudaEvent_t start = nullptr, end = nullptr;
  int src = -1, dst = -1, path = 0;
  uint8_t transport = 0;
  uint64_t bytes = 0;
  uint32_t seq = 0;
  int slot = -1;  // the pair's place in its pool (CopyTimer's own)
  void* pool = nullptr;  // that pool (CopyTimer's own)
};

class CopyTimer {
 public:
  // Event pairs per (runtime node, device) at most: what may be in flight at once.
  static constexpr int kPairsPerDevice = 64;

  // Records the start event on `stream` (on `device`). False when this copy cannot be timed (no
  // free event pair, a capture is running, the device is unknown); nothing was recorded then, and
  // the skip is counted in the header.
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

  // The runtime of `node` was unloaded (interpose/unload.h, under UnloadMutex()): its event pools are
  // forgotten (never freed, never called again); timings in flight on it are dropped by the resolver.
  static void ForgetRuntime(Node node);
};

}  // namespace p2ptrace::shim
