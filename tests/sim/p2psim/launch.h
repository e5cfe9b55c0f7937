// `p2psim launch`: one process per rank across simulated hosts, with torchrun's environment, each
// rank's output prefixed with its number, and the worst child status as the exit status.
#pragma once

#include <string>
#include <vector>

#include "tests/sim/common/sim_topology.h"

namespace p2psim {

struct HostRanks {
  std::string host;
  int ranks = 0;
};

struct LaunchOptions {
  std::string topology;  // as given
  std::string dir;       // empty: a fresh p2psim-XXXXXX under $TMPDIR or /tmp
  std::vector<HostRanks> hosts;
  std::vector<std::string> command;
};

// Parses the arguments after "launch". On misuse returns false with a one-line `error`.
bool ParseLaunchArgs(const std::vector<std::string>& args, LaunchOptions* out, std::string* error);

// Writes each host's sysroot under <dir>/sysroot/<host>, runs the ranks and forwards their output.
// Every host in `options` must exist in `topo`. Returns p2psim's exit status: 128+signal for the
// first rank reaped that died of a signal, else the highest exit code; 1 when p2psim itself fails.
int Launch(const Topology& topo, const LaunchOptions& options);

}  // namespace p2psim
