// Which processes use which simulated GPU, across processes, as NVML's
// nvmlDeviceGetComputeRunningProcesses lists them: the simulated driver notes a process when it
// first activates a GPU's primary context; the simulated NVML lists the noted processes that are
// still alive. One file per (host, GPU, process) in the sim's shared directory ($P2PSIM_NCCL_DIR,
// default /dev/shm) under p2psim-gpu-users/, holding the process's start time so that a pid reused
// by a later process is not taken for it. A process's files go at its exit; a killed one's, when
// next listed.
#pragma once

#include <string>
#include <vector>

namespace p2psim {

void NoteGpuUser(const std::string& host, int host_gpu);
std::vector<unsigned> GpuUsers(const std::string& host, int host_gpu);

}  // namespace p2psim
