// What the shim costs per untimed NCCL call (bench.budgets.nccl: at most 150 instructions over the
// bare call when NCCL's log file has not grown). Linked to the toolkit's libnccl, run against the
// simulated libnccl.so.2 (LD_LIBRARY_PATH), bare or under LD_PRELOAD=libp2ptrace.so, by
// run_bench.py --nccl under callgrind:  nccl_overhead KIND N  — setup, 64 warm-up calls, N calls.
//   version    ncclGetVersion: the wrapper alone (nothing recorded)
//   allreduce  ncclAllReduce of 1024 floats on a 1-rank communicator (an operation record; untimed
//              with P2PTRACE_SAMPLE=off)
//   pair       nccl_overhead pair N BYTES: an allreduce of BYTES on a 2-rank communicator (both ranks
//              in this thread, ncclCommInitAll on GPUs 0 and 1): each iteration is ncclGroupStart,
//              one ncclAllReduce per rank, ncclGroupEnd (run_bench.py --nccl-path)
// Both modes start one idle thread first. A real NCCL process always has several (NCCL's proxy
// threads, CUDA's); the simulated NCCL has none, and glibc's single-thread shortcuts (no
// cancellation bookkeeping around open/write/close, no atomics in malloc) in the sim's per-call file
// I/O would otherwise end, bare vs shim, when the shim's first thread (its node probe) starts:
// ~280 instructions per call that are the sim's, not the wrapper's (run_bench.py --nccl --no-thread
// shows them).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <unistd.h>

namespace {

int Fail(const char* what, int r) {
  std::fprintf(stderr, "nccl_overhead: %s failed: %d\n", what, r);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: nccl_overhead version|allreduce N | pair N BYTES\n");
    return 2;
  }
  if (std::getenv("NCCL_OVERHEAD_NO_THREAD") == nullptr) std::thread([] { pause(); }).detach();
  const char* kind = argv[1];
  long n = std::atol(argv[2]);
  int version = 0;
  if (std::strcmp(kind, "version") == 0) {
    for (long i = 0; i < 64 + n; ++i)
      if (ncclResult_t r = ncclGetVersion(&version); r != ncclSuccess) return Fail("ncclGetVersion", r);
    std::printf("version %d\n", version);
    return 0;
  }
  if (std::strcmp(kind, "pair") == 0) {
    size_t bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 4096;
    int devs[2] = {0, 1};
    ncclComm_t comms[2];
    if (ncclResult_t r = ncclCommInitAll(comms, 2, devs); r != ncclSuccess) return Fail("ncclCommInitAll", r);
    cudaStream_t streams[2];
    float* bufs[2];
    for (int i = 0; i < 2; ++i)
      if (cudaSetDevice(i) != cudaSuccess || cudaStreamCreate(&streams[i]) != cudaSuccess ||
          cudaMalloc(&bufs[i], bytes) != cudaSuccess)
        return Fail("cuda setup", i);
    for (long i = 0; i < 64 + n; ++i) {
      ncclGroupStart();
      for (int r = 0; r < 2; ++r)
        if (ncclResult_t e = ncclAllReduce(bufs[r], bufs[r], bytes / 4, ncclFloat32, ncclSum, comms[r], streams[r]);
            e != ncclSuccess)
          return Fail("ncclAllReduce", e);
      if (ncclResult_t e = ncclGroupEnd(); e != ncclSuccess) return Fail("ncclGroupEnd", e);
    }
    for (int r = 0; r < 2; ++r) {
      cudaStreamSynchronize(streams[r]);
      ncclCommDestroy(comms[r]);
    }
    std::printf("pair done\n");
    return 0;
  }
  if (std::strcmp(kind, "allreduce") != 0) return Fail(kind, -1);
  if (cudaError_t e = cudaSetDevice(0); e != cudaSuccess) return Fail("cudaSetDevice", e);
  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return Fail("ncclGetUniqueId", r);
  if (ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0); r != ncclSuccess) return Fail("ncclCommInitRank", r);
  cudaStream_t stream;
  float* buf = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess || cudaMalloc(&buf, 4096) != cudaSuccess) return Fail("cuda setup", 0);
  for (long i = 0; i < 64 + n; ++i)
    if (ncclResult_t r = ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, stream); r != ncclSuccess)
      return Fail("ncclAllReduce", r);
  cudaStreamSynchronize(stream);
  ncclCommDestroy(comm);
  std::printf("allreduce done\n");
  return 0;
}
