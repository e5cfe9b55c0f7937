// `p2ptrace doctor [--json]` (DESIGN.md §7): probe this node now (probe/probe.h: sysfs, procfs, NVML
// and CUDA, loaded with dlopen), predict every GPU pair's path with its causes (core/predict.h) and
// print the warnings a job would get at start. Honours P2PTRACE_SYSROOT. On a machine without an
// NVIDIA driver or GPU it says so and what it checked.
#pragma once

#include <iosfwd>
#include <string>

#include "nlohmann/json.hpp"

namespace p2ptrace::cli {

struct DoctorOptions {
  bool json = false;
  std::string sysroot;  // --sysroot, else P2PTRACE_SYSROOT, else /
  bool cuda = true;     // --no-cuda: do not load libcudart
  std::string prometheus;  // --prometheus FILE: also write the prediction for node_exporter (tools/prometheus.h)
};

int RunDoctor(const DoctorOptions& options, std::ostream& out, std::ostream& err);

}  // namespace p2ptrace::cli
