// The node probes (DESIGN.md §3, §4): sysfs, procfs, NVML through dlopen and, when the caller hands
// them over, CUDA's peer queries. A library of its own below the shim and the CLI, which both link it
// (shim/preflight.cc inside the traced process, `p2ptrace doctor`), so it depends on core, libc and
// libdl only. Every path is read under the sysroot
// (P2PTRACE_SYSROOT, "" for /); each probe is bounded (files by size, NVML by a deadline on a
// helper thread) and failure tolerant: what fails is recorded as a step, never thrown.
#pragma once

#include <string>

#include "core/node_probe.h"

namespace p2ptrace::probe {

// CUDA runtime functions (cudaError_t as int), already known to work in this process: the shim
// passes the real ones of a runtime that has answered the application; doctor, the ones it loaded.
struct CudaQueries {
  int (*GetDeviceCount)(int*) = nullptr;
  int (*DeviceGetPCIBusId)(char*, int, int) = nullptr;
  int (*CanAccessPeer)(int*, int, int) = nullptr;
  int (*GetP2PAttribute)(int*, int, int, int) = nullptr;  // (value, attr, src, dst)
};

struct ProbeOptions {
  std::string sysroot;                  // "" for /
  const CudaQueries* cuda = nullptr;    // null: CUDA is not asked
  int nvml_timeout_ms = 3000;           // NVML can stall for seconds on a sick driver
  bool nvml = true;
  bool gpu_processes = false;           // ask NVML which processes use each GPU (doctor --test)
};

NodeProbe GatherNodeProbe(const ProbeOptions& options);

// Whether an environment variable belongs to the allow-list the trace may record (NCCL_*, CUDA_*,
// TORCH_NCCL_*, launcher rank variables).
bool AllowedEnvName(const std::string& name);

}  // namespace p2ptrace::probe
