// What a simulated GPU reports about itself: compute capability, SMs, memory, caches and limits of
// its model, as the real part does (public deviceQuery / data-sheet figures), so that programs which
// size their kernels from device attributes (PyTorch's reductions divide by the warp size) run.
// One table serves cudaDeviceGetAttribute, cudaGetDeviceProperties and the driver's
// cuDeviceGetAttribute (their attribute numbers are the same by CUDA's design).
#pragma once

#include <cstddef>
#include <string>

namespace p2psim {

struct GpuModel {
  const char* key;                 // matched as a substring of the GPU's name, first match wins
  int major, minor;                // compute capability
  int sms;
  size_t memory;                   // bytes, as totalGlobalMem reports them
  int l2_bytes;
  int clock_khz, memory_clock_khz, memory_bus_bits;
  int max_threads_per_sm, max_blocks_per_sm;
  int smem_per_sm, smem_per_block_optin;  // bytes
  bool nvlink_capable;                    // data-center parts
};

// The model of a GPU by its name (e.g. "NVIDIA H100 80GB HBM3"); an unknown name gets the H100's
// figures, the topology file's default GPU.
const GpuModel& ModelOf(const std::string& name);

// The value of CUDA device attribute `attr` (cudaDeviceAttr / CUdevice_attribute numbering) for a
// GPU of `model` at PCI `domain:bus:device`. Attributes the sim does not model read as 0 (absent),
// never as an error, like a feature the part lacks.
int DeviceAttribute(const GpuModel& model, int attr, unsigned domain, unsigned bus, unsigned device);

}  // namespace p2psim
