// One process, several devices: ncclCommInitAll, then one allreduce per device in a group, checked.
// Linked to the real libnccl.so.2 and libcudart (RUNPATH); runs on the simulated node.
//   nccl_init_all [NDEV] [kill]   kill: SIGKILL itself right after the group (a crash test)
//   nccl_init_all NDEV late-env NAME=VALUE   ask NCCL its version (as a framework does when it
//                                 sets NCCL up), allocate, then set NAME=VALUE, then init: a
//                                 setting NCCL reads that the job-start check (at the first
//                                 allocation of a process that called NCCL) could not have seen
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int ndev = argc > 1 ? std::atoi(argv[1]) : 2;
  bool kill_after_group = argc > 2 && std::string(argv[2]) == "kill";
  bool late_env = argc > 3 && std::string(argv[2]) == "late-env";
  const size_t count = 1024;
  std::vector<ncclComm_t> comms(ndev);
  if (!late_env && ncclCommInitAll(comms.data(), ndev, nullptr) != ncclSuccess) return 2;
  int version = 0;
  if (late_env && ncclGetVersion(&version) != ncclSuccess) return 2;
  std::vector<float*> bufs(ndev);
  for (int d = 0; d < ndev; ++d) {
    std::vector<float> h(count, float(d + 1));
    if (cudaSetDevice(d) != cudaSuccess || cudaMalloc(&bufs[d], count * sizeof(float)) != cudaSuccess) return 2;
    cudaMemcpy(bufs[d], h.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  }
  if (late_env) {
    putenv(argv[3]);
    if (ncclCommInitAll(comms.data(), ndev, nullptr) != ncclSuccess) return 2;
  }
  ncclGroupStart();
  for (int d = 0; d < ndev; ++d) ncclAllReduce(bufs[d], bufs[d], count, ncclFloat32, ncclSum, comms[d], nullptr);
  if (ncclGroupEnd() != ncclSuccess) return 2;
  if (kill_after_group) raise(SIGKILL);
  float want = float(ndev * (ndev + 1) / 2);
  for (int d = 0; d < ndev; ++d) {
    std::vector<float> h(count);
    cudaSetDevice(d);
    cudaMemcpy(h.data(), bufs[d], count * sizeof(float), cudaMemcpyDeviceToHost);
    for (float v : h)
      if (v != want) {
        std::fprintf(stderr, "device %d: got %g, expected %g\n", d, double(v), double(want));
        return 1;
      }
    ncclCommDestroy(comms[d]);
  }
  std::printf("ok\n");
  return 0;
}
