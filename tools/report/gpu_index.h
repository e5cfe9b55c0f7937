// Each host's own numbering of its GPUs, so that every output names a GPU as nvidia-smi does
// (GpuName: "GPU4"), never by a process's CUDA ordinal. Bus ids are normalised where they are read
// (Trace::BusId, the preflight block, NCCL's log): here they are keys as they come.
#pragma once

#include <map>
#include <set>
#include <string>

#include "core/preflight_block.h"
#include "tools/report/report.h"

namespace p2ptrace::cli {

// A bus id in the normalised form ("0000:1a:00.0"), not a stand-in such as "device3".
bool IsBusId(const std::string& bus);

class GpuIndex {
 public:
  // A GPU as the job-start probe numbered it (NVML's index, or the PCI order of the node's GPUs
  // when NVML did not answer); the first number a bus id gets stands.
  void AddProbed(const std::string& host, const std::string& bus, const PreflightGpu& gpu);
  // A GPU seen by a process that saw them all (no CUDA_VISIBLE_DEVICES): a host without a probe is
  // numbered in the PCI order of these.
  void AddVisible(const std::string& host, const std::string& bus);
  // The GPU named: its host's index and model where known, else -1 (named by its bus id).
  GpuRef Ref(const std::string& host, const std::string& bus, int cuda = -1) const;

 private:
  std::map<std::string, std::map<std::string, PreflightGpu>> probed_;  // host -> bus -> GPU
  std::map<std::string, std::set<std::string>> visible_;               // host -> bus ids, in PCI order
};

}  // namespace p2ptrace::cli
