// A program for copy_timer_test: linked to the real cudart only (never to the shim), it makes
// timed copies in patterns that stress the shim's copy timer.
//   timer_workload churn N   N rounds: create a stream (alternately on device 0 and device 2),
//                            one peer copy on it (0->1 or 2->3), destroy the stream 8 rounds later
//   timer_workload alternate N BYTES EVERY BIG
//                            N synchronous peer copies alternating 0->1 and 2->3 (the pattern a
//                            1-in-2k sampler would lock onto), BYTES each, every EVERY-th one BIG
//                            bytes instead (EVERY 0: none); 50 us apart
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>

#include "tests/support/cuda_check.h"

namespace {

using p2ptrace::test::AllocOn;

int Churn(int rounds) {
  constexpr size_t kBytes = 4096;
  void* src[2] = {AllocOn(0, kBytes), AllocOn(2, kBytes)};
  void* dst[2] = {AllocOn(1, kBytes), AllocOn(3, kBytes)};
  std::deque<cudaStream_t> live;
  for (int i = 0; i < rounds; ++i) {
    int side = i % 2, device = side * 2;
    P2PTRACE_CHECK(cudaSetDevice(device));
    cudaStream_t s;
    P2PTRACE_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    live.push_back(s);
    P2PTRACE_CHECK(cudaMemcpyPeerAsync(dst[side], device + 1, src[side], device, kBytes, s));
    if (live.size() > 8) {
      P2PTRACE_CHECK(cudaStreamSynchronize(live.front()));
      P2PTRACE_CHECK(cudaStreamDestroy(live.front()));
      live.pop_front();
    }
  }
  for (cudaStream_t s : live) {
    P2PTRACE_CHECK(cudaStreamSynchronize(s));
    P2PTRACE_CHECK(cudaStreamDestroy(s));
  }
  std::printf("churn %d done\n", rounds);
  return 0;
}

int Alternate(int copies, size_t bytes, int every, size_t big) {
  size_t most = std::max(bytes, big);
  void* src[2] = {AllocOn(0, most), AllocOn(2, most)};
  void* dst[2] = {AllocOn(1, most), AllocOn(3, most)};
  for (int i = 0; i < copies; ++i) {
    int side = i % 2;
    size_t n = every > 0 && i % every == every - 1 ? big : bytes;
    P2PTRACE_CHECK(cudaMemcpyPeer(dst[side], side * 2 + 1, src[side], side * 2, n));
    usleep(50);  // the shim's resolver thread keeps up: its event pairs are free again
  }
  std::printf("alternate %d done\n", copies);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "churn" && argc == 3) return Churn(std::atoi(argv[2]));
  if (cmd == "alternate" && argc == 6)
    return Alternate(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10), std::atoi(argv[4]),
                     std::strtoull(argv[5], nullptr, 10));
  std::fprintf(stderr, "usage: timer_workload churn N | alternate N BYTES EVERY BIG\n");
  return 64;
}
