// One rank of a job whose processes are in many communicators at once, as PyTorch makes them: the
// world (ncclCommInitRank), a subgroup split from it (ncclCommSplit, eager), a group created lazily
// right before its first collective, the split destroyed and made again, two communicators created
// in one ncclGroupStart/End, and send/recv on the world long after its init. Every collective's
// result is checked. Linked to the real libnccl.so.2 and libcudart (RUNPATH); runs on the sim.
//   nccl_comms_workload DIR      (RANK, WORLD_SIZE, LOCAL_RANK from the launcher)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/nccl_check.h"

namespace {

// Rank 0 publishes the id under `name`; the others wait for it.
ncclUniqueId ShareId(int rank, const std::string& dir, const std::string& name) {
  return p2ptrace::test::ShareNcclId(rank, dir + "/" + name + ".id", 60);
}

constexpr size_t kCount = 256;

// An allreduce of (rank + 1) over `comm`: every element must be the sum over its ranks.
void AllReduce(ncclComm_t comm, float* buf) {
  int rank = 0, nranks = 0;
  P2PTRACE_NCCL_CHECK(ncclCommUserRank(comm, &rank));
  P2PTRACE_NCCL_CHECK(ncclCommCount(comm, &nranks));
  std::vector<float> h(kCount, float(rank + 1));
  cudaMemcpy(buf, h.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
  P2PTRACE_NCCL_CHECK(ncclAllReduce(buf, buf, kCount, ncclFloat32, ncclSum, comm, nullptr));
  cudaMemcpy(h.data(), buf, kCount * sizeof(float), cudaMemcpyDeviceToHost);
  float want = float(nranks * (nranks + 1) / 2);
  for (float v : h)
    if (v != want) {
      std::fprintf(stderr, "nccl_comms_workload: allreduce gave %g, expected %g\n", double(v), double(want));
      std::exit(1);
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string dir = argv[1];
  const int rank = p2ptrace::test::EnvInt("RANK", 0), nranks = p2ptrace::test::EnvInt("WORLD_SIZE", 1);
  cudaSetDevice(p2ptrace::test::EnvInt("LOCAL_RANK", rank));
  float* buf = nullptr;
  if (cudaMalloc(&buf, 2 * kCount * sizeof(float)) != cudaSuccess) return 2;

  ncclComm_t world = nullptr, split = nullptr, lazy = nullptr, again = nullptr, a = nullptr, b = nullptr;
  P2PTRACE_NCCL_CHECK(ncclCommInitRank(&world, nranks, ShareId(rank, dir, "world"), rank));
  P2PTRACE_NCCL_CHECK(ncclCommSplit(world, 0, rank, &split, nullptr));  // new_group(all ranks), eager
  AllReduce(world, buf);
  AllReduce(split, buf);
  P2PTRACE_NCCL_CHECK(ncclCommInitRank(&lazy, nranks, ShareId(rank, dir, "lazy"), rank));  // lazy init: then used at once
  AllReduce(lazy, buf);
  P2PTRACE_NCCL_CHECK(ncclCommDestroy(split));
  P2PTRACE_NCCL_CHECK(ncclCommSplit(world, 0, rank, &again, nullptr));
  AllReduce(again, buf);
  ncclUniqueId id_a = ShareId(rank, dir, "a"), id_b = ShareId(rank, dir, "b");
  P2PTRACE_NCCL_CHECK(ncclGroupStart());
  P2PTRACE_NCCL_CHECK(ncclCommInitRank(&a, nranks, id_a, rank));
  P2PTRACE_NCCL_CHECK(ncclCommInitRank(&b, nranks, id_b, rank));
  P2PTRACE_NCCL_CHECK(ncclGroupEnd());
  AllReduce(a, buf);
  AllReduce(b, buf);
  // send/recv around the ring on the world, long after its init.
  P2PTRACE_NCCL_CHECK(ncclGroupStart());
  P2PTRACE_NCCL_CHECK(ncclSend(buf, kCount, ncclFloat32, (rank + 1) % nranks, world, nullptr));
  P2PTRACE_NCCL_CHECK(ncclRecv(buf + kCount, kCount, ncclFloat32, (rank + nranks - 1) % nranks, world, nullptr));
  P2PTRACE_NCCL_CHECK(ncclGroupEnd());
  for (ncclComm_t c : {b, a, again, lazy, world}) P2PTRACE_NCCL_CHECK(ncclCommDestroy(c));
  std::printf("ok\n");
  return 0;
}
