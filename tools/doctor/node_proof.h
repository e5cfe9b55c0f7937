// `p2ptrace doctor --test` (DESIGN.md §7): prove the node before jobs run on it. Probes
// and predicts as `doctor` does, then measures every ordered GPU pair (tools/doctor/pair_measure.h) and judges
// each (core/pair_verdict.h): text (a matrix as `nvidia-smi topo -m` lays it out, GB/s and verdicts,
// then each failing pair with its causes and fix) or --json. Exit 0 when every pair passes or is
// expected, 1 when one fails, 2 when nothing could be tested.
#pragma once

#include <iosfwd>

#include "tools/doctor/node_check.h"

namespace p2ptrace::cli {

int RunDoctorTest(const DoctorOptions& options, std::ostream& out, std::ostream& err, bool err_is_tty);

}  // namespace p2ptrace::cli
