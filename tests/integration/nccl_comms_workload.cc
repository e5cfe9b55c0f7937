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

namespace {

#define NCCL_OK(call)                                                                        \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess) {                                                                 \
      std::fprintf(stderr, "nccl_comms_workload: %s failed: %s\n", #call, ncclGetErrorString(r_)); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// Rank 0 publishes the id under `name` (write, then rename); the others wait for it.
ncclUniqueId ShareId(int rank, const std::string& dir, const std::string& name) {
  ncclUniqueId id;
  std::string path = dir + "/" + name + ".id";
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    std::ofstream(path + ".tmp", std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof id);
    if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) std::exit(2);
    return id;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(reinterpret_cast<char*>(&id), sizeof id)) return id;
    if (std::chrono::steady_clock::now() > deadline) std::exit(2);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

constexpr size_t kCount = 256;

// An allreduce of (rank + 1) over `comm`: every element must be the sum over its ranks.
void AllReduce(ncclComm_t comm, float* buf) {
  int rank = 0, nranks = 0;
  NCCL_OK(ncclCommUserRank(comm, &rank));
  NCCL_OK(ncclCommCount(comm, &nranks));
  std::vector<float> h(kCount, float(rank + 1));
  cudaMemcpy(buf, h.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
  NCCL_OK(ncclAllReduce(buf, buf, kCount, ncclFloat32, ncclSum, comm, nullptr));
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
  const int rank = EnvInt("RANK", 0), nranks = EnvInt("WORLD_SIZE", 1);
  cudaSetDevice(EnvInt("LOCAL_RANK", rank));
  float* buf = nullptr;
  if (cudaMalloc(&buf, 2 * kCount * sizeof(float)) != cudaSuccess) return 2;

  ncclComm_t world = nullptr, split = nullptr, lazy = nullptr, again = nullptr, a = nullptr, b = nullptr;
  NCCL_OK(ncclCommInitRank(&world, nranks, ShareId(rank, dir, "world"), rank));
  NCCL_OK(ncclCommSplit(world, 0, rank, &split, nullptr));  // new_group(all ranks), eager
  AllReduce(world, buf);
  AllReduce(split, buf);
  NCCL_OK(ncclCommInitRank(&lazy, nranks, ShareId(rank, dir, "lazy"), rank));  // lazy init: then used at once
  AllReduce(lazy, buf);
  NCCL_OK(ncclCommDestroy(split));
  NCCL_OK(ncclCommSplit(world, 0, rank, &again, nullptr));
  AllReduce(again, buf);
  ncclUniqueId id_a = ShareId(rank, dir, "a"), id_b = ShareId(rank, dir, "b");
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclCommInitRank(&a, nranks, id_a, rank));
  NCCL_OK(ncclCommInitRank(&b, nranks, id_b, rank));
  NCCL_OK(ncclGroupEnd());
  AllReduce(a, buf);
  AllReduce(b, buf);
  // send/recv around the ring on the world, long after its init.
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(buf, kCount, ncclFloat32, (rank + 1) % nranks, world, nullptr));
  NCCL_OK(ncclRecv(buf + kCount, kCount, ncclFloat32, (rank + nranks - 1) % nranks, world, nullptr));
  NCCL_OK(ncclGroupEnd());
  for (ncclComm_t c : {b, a, again, lazy, world}) NCCL_OK(ncclCommDestroy(c));
  std::printf("ok\n");
  return 0;
}
