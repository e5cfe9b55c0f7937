// `p2ptrace synth`: a synthetic job's traces in the real on-disk format (trace_format.h), plus
// the NCCL log each rank's shim would have tapped (NCCL 2.28's lines), for demos, tests and
// benchmarks of report, html, export and diff. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace p2ptrace::cli {

struct SynthOptions {
  std::string out;          // directory; created when missing
  int ranks = 8;            // one process per rank, one GPU per rank
  int events = 100;         // operations per rank (CUDA peer copies and NCCL operations), all timed
  int hosts = 0;            // 0: as few as gpus_per_host allows
  int gpus_per_host = 8;
  uint64_t seed = 1;
  // healthy:  peer copies over NVLink, NCCL P2P inside a host and IB GPUDirect RDMA between hosts;
  // pcie:     the same over PCIe P2P (no NVLink), at PCIe speed;
  // fallback: peer access never enabled (copies staged through the host) and NCCL_P2P_DISABLE=1
  //           (NCCL through SHM inside a host).
  std::string scenario = "healthy";
  // Call sites as P2PTRACE_STACKS records them: every copy and NCCL operation names one of three
  // program locations (halo exchange copies, allreduce, ring send/recv), described in each file.
  bool stacks = false;
};

// Writes `ranks` trace files and, when ranks > 1, one nccl.<host>.<pid>.log per rank into `out`.
// InvalidArgument for options that make no job; an I/O error naming the file otherwise.
absl::Status WriteSyntheticJob(const SynthOptions& options);

// The `synth` command: writes the job, says where on `out`; exit 0, or 2 with one line on `err`.
int RunSynth(const SynthOptions& options, std::ostream& out, std::ostream& err);

}  // namespace p2ptrace::cli
