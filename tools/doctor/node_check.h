// `p2ptrace doctor [--json]` (DESIGN.md §7): probe this node now (probe/probe.h: sysfs, procfs, NVML
// and CUDA, loaded with dlopen), predict every GPU pair's path with its causes (core/predict.h) and
// print the warnings a job would get at start. Honours P2PTRACE_SYSROOT. On a machine without an
// NVIDIA driver or GPU it says so and what it checked.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/node_probe.h"
#include "core/pair_verdict.h"
#include "core/predict.h"
#include "nlohmann/json.hpp"

namespace p2ptrace::cli {

struct DoctorOptions {
  bool json = false;
  std::string sysroot;  // --sysroot, else P2PTRACE_SYSROOT, else /
  bool cuda = true;     // --no-cuda: do not load libcudart
  std::string prometheus;  // --prometheus FILE: also write the prediction for node_exporter (tools/formats/prometheus.h)
  // --test (tools/doctor/node_proof.h): measure every ordered GPU pair, a verdict each.
  bool test = false;
  std::vector<int> gpus;         // --gpus: the node's GPU indices to test (default all)
  double copy_limit_seconds = 10;  // --time-limit
  bool allow_busy = false;         // --allow-busy: test GPUs other processes use (else refused)
  std::string rows;                // --rows FILE: the pairs as fleet rows (kind "test", docs/ROWS.md)
  std::string baseline;            // --baseline FILE: a previous --json of a good node of the same kind
  double baseline_tolerance = kBaselineTolerance;  // --tolerance PCT / 100
  bool nccl = false;               // --nccl: also what NCCL chooses per pair (tools/doctor/nccl_choice.h)
};

int RunDoctor(const DoctorOptions& options, std::ostream& out, std::ostream& err);

// The node's probes (sysfs, procfs, NVML, CUDA as `options` say); PredictNode (core/node_probe.h)
// makes the prediction by the rules the caller needs.
NodeProbe ProbeNode(const DoctorOptions& options);

}  // namespace p2ptrace::cli
