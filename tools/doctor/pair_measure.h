// `doctor --test`'s measurements: every ordered GPU pair's peer access, copy bandwidth
// with peer access on (one way, and both ways at once), the same copy staged through pinned host memory, a small copy's latency and
// the data on the destination, each copy within a time limit. The CUDA runtime is loaded at run time
// (the CLI links none); what the test changed (peer access, memory) is put back as it was.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/pair_verdict.h"
#include "tools/doctor/sm_copy.h"

namespace p2ptrace::cli {

struct TestGpu {
  int ordinal = 0;  // in this process (CUDA_VISIBLE_DEVICES renumbers)
  int index = 0;    // on the node, as nvidia-smi numbers it: what measurements and messages say
};

struct PairTestOptions {
  std::vector<TestGpu> gpus;         // every ordered pair of them is tested
  double copy_limit_seconds = 10;    // a copy not done by then fails its pair (its GPU is left alone after)
  size_t copy_bytes = 32u << 20;     // one copy's size; one copy, then as many (up to 256) as take 10 ms by its time
  // A CUDA call of the test that has not returned within copy_limit_seconds (a synchronous one
  // cannot be interrupted) ends the test: this gets every pair (that one failed with the call named,
  // those after it untested), from another thread, and must end the process (it is ended after).
  std::function<void(std::vector<PairMeasurement>)> on_stuck;
  // The copy by the source's own cores (tools/doctor/sm_copy.h); null: not made (`sm_note` says why).
  SmCopyKernels* sm = nullptr;
  std::string sm_note;
};

// The runtime's functions the test calls; Load finds them in libcudart (13, 12, 11, unversioned).
struct CudaCopies {
  int (*GetDeviceCount)(int*) = nullptr;
  int (*SetDevice)(int) = nullptr;
  int (*CanAccessPeer)(int*, int, int) = nullptr;
  int (*EnablePeer)(int, unsigned) = nullptr;
  int (*DisablePeer)(int) = nullptr;
  int (*Malloc)(void**, size_t) = nullptr;
  int (*Free)(void*) = nullptr;
  int (*MallocHost)(void**, size_t) = nullptr;
  int (*FreeHost)(void*) = nullptr;
  int (*Memcpy)(void*, const void*, size_t, int) = nullptr;
  int (*MemcpyAsync)(void*, const void*, size_t, int, void*) = nullptr;
  int (*MemcpyPeerAsync)(void*, int, const void*, int, size_t, void*) = nullptr;
  int (*StreamCreate)(void**, unsigned) = nullptr;
  int (*StreamDestroy)(void*) = nullptr;
  int (*EventCreate)(void**) = nullptr;
  int (*EventRecord)(void*, void*) = nullptr;
  int (*EventQuery)(void*) = nullptr;
  int (*EventElapsed)(float*, void*, void*) = nullptr;
  int (*EventDestroy)(void*) = nullptr;
  int (*StreamWaitEvent)(void*, void*, unsigned) = nullptr;
  int (*MemsetAsync)(void*, int, size_t, void*) = nullptr;
  const char* (*ErrorString)(int) = nullptr;
  // False with why ("libcudart.so not found", "no CUDA-capable device") when the test cannot run.
  bool Load(std::string* why);
};

// Every ordered pair of options.gpus (PairMeasurement::src/dst: their node indices); `progress(done, total)` after each pair. A pair whose
// copy timed out leaves both its GPUs untested from then on (their work may never finish): those
// pairs say so in `error`.
std::vector<PairMeasurement> MeasurePairs(const CudaCopies& cuda, const PairTestOptions& options,
                                          const std::function<void(size_t, size_t)>& progress);

}  // namespace p2ptrace::cli
