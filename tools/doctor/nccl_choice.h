// `doctor --test --nccl`: what NCCL itself chooses on this node for every GPU pair, with
// the node's environment. One process per tested GPU, as a job runs (this CLI run again as a hidden
// `_nccl-rank` worker), each with NCCL loaded at run time (libnccl.so.2: the CLI links none) and
// NCCL_DEBUG=INFO into a file of its own; they form one communicator, send to and receive from every
// peer and run one allreduce, so that NCCL connects every pair; NCCL's own connection lines are then
// read (core/nccl_log.h). Everything runs under a time limit: a job that never connects is killed
// and said so.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tools/doctor/pair_measure.h"

namespace p2ptrace::cli {

struct NcclPairChoice {
  int src = -1, dst = -1;           // the node's GPU indices
  std::set<int> classes;            // p2ptrace_transport of its connections (one normally)
  std::set<std::string> transports; // NCCL's words ("P2P/CUMEM/read", "SHM/direct/direct")
};

struct NcclChoice {
  std::string error;                // why NCCL's choice is not known ("" when it is)
  bool not_installed = false;       // the workers found no libnccl.so.2 (said, not a failure of the node)
  std::string version;              // as NCCL printed it ("2.28.9+cuda13.0")
  std::map<std::pair<int, int>, NcclPairChoice> pairs;  // ordered pairs NCCL connected
  std::vector<std::string> warnings;  // NCCL's WARN lines
  std::vector<std::string> env;       // "NCCL_P2P_LEVEL=NVL" as NCCL echoed what it read
};

// Runs the workers on `gpus` (CUDA ordinal and node index each), `limit_seconds` for all of it.
NcclChoice RunNcclChoice(const std::vector<TestGpu>& gpus, double limit_seconds);

// The hidden worker: rank `rank` of `nranks` on CUDA device `device`; the unique id travels through
// `dir` (rank 0 writes it). Exit 0 when its part is done.
int RunNcclRank(int rank, int nranks, int device, const std::string& dir, double limit_seconds);

}  // namespace p2ptrace::cli
