// A program for copy_timer_test: linked to the real cudart only (never to the shim), it makes
// timed copies in patterns that stress the shim's copy timer.
//   timer_workload churn N   N rounds: create a stream (alternately on device 0 and device 2),
//                            one peer copy on it (0->1 or 2->3), destroy the stream 8 rounds later
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>

namespace {

#define CHECK(call)                                                                       \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, static_cast<int>(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

void* Alloc(int device, size_t bytes) {
  void* p = nullptr;
  CHECK(cudaSetDevice(device));
  CHECK(cudaMalloc(&p, bytes));
  return p;
}

int Churn(int rounds) {
  constexpr size_t kBytes = 4096;
  void* src[2] = {Alloc(0, kBytes), Alloc(2, kBytes)};
  void* dst[2] = {Alloc(1, kBytes), Alloc(3, kBytes)};
  std::deque<cudaStream_t> live;
  for (int i = 0; i < rounds; ++i) {
    int side = i % 2, device = side * 2;
    CHECK(cudaSetDevice(device));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    live.push_back(s);
    CHECK(cudaMemcpyPeerAsync(dst[side], device + 1, src[side], device, kBytes, s));
    if (live.size() > 8) {
      CHECK(cudaStreamSynchronize(live.front()));
      CHECK(cudaStreamDestroy(live.front()));
      live.pop_front();
    }
  }
  for (cudaStream_t s : live) {
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
  }
  std::printf("churn %d done\n", rounds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "churn" && argc == 3) return Churn(std::atoi(argv[2]));
  std::fprintf(stderr, "usage: timer_workload churn N\n");
  return 64;
}
