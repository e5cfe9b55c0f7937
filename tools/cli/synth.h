// `p2ptrace synth`: a synthetic job's traces in the real on-disk format (trace_format.h), plus
// the NCCL log each rank's shim would have tapped (NCCL 2.28's lines), for demos, tests and
// benchmarks of report, html, export and diff. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

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
  // Fleet tests and demos: the hosts' names in order (comma-separated; default node0, node1, …), the
  // job id the headers carry (default synth-<scenario>-<seed>), and variables every rank's
  // recorded environment holds (NAME=VALUE; "{host}" and "{rank}" in VALUE are the rank's own),
  // e.g. a scheduler's: SLURM_JOB_ID=42, SLURMD_NODENAME={host}.
  std::string host_names;
  std::string job_id;
  std::vector<std::string> env;
  uint64_t start_time = 1767225600;  // when rank 0 started, seconds since 1970 (UTC); default 2026-01-01
  // A job that hung (the stopped finding): every rank then calls one more allreduce and waits in it
  // (still in the call, beating 60 s on), except this rank, which stopped beating before calling
  // it. -1: the job exited normally.
  int stop_rank = -1;
};

// Writes `ranks` trace files and, when ranks > 1, one nccl.<host>.<pid>.log per rank into `out`.
// InvalidArgument for options that make no job; an I/O error naming the file otherwise.
absl::Status WriteSyntheticJob(const SynthOptions& options);

// The `synth` command: writes the job, says where on `out`; exit 0, or 2 with one line on `err`.
int RunSynth(const SynthOptions& options, std::ostream& out, std::ostream& err);

}  // namespace p2ptrace::cli
