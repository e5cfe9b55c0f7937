// `doctor --test`'s verdict on one ordered GPU pair (DESIGN.md §7): what was measured,
// against what the pair's link class should give and the node's probes say. Pure: the CLI measures,
// this judges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/causes.h"
#include "core/link_health.h"
#include "core/predict.h"

namespace p2ptrace {

// One ordered pair as measured: peer access asked and enabled, copies timed, data checked.
struct PairMeasurement {
  int src = -1, dst = -1;        // the node's GPU indices
  bool can_access = false;       // cudaDeviceCanAccessPeer(src, dst)
  int enable_result = -1;        // cudaDeviceEnablePeerAccess's result; 704: it was already enabled; -1 not asked
  double gbps = -1;              // one direction, peer access on (-1: not measured)
  double bidir_gbps = -1;        // both directions at once, summed
  double staged_gbps = -1;       // the same copy staged through pinned host memory
  double latency_us = -1;        // a small copy's time
  bool data_ok = true;           // the destination held what was sent (when data_checked)
  bool data_checked = false;     // the destination was read back and compared
  bool timed_out = false;        // a copy did not finish within its time limit
  std::string stalled_copy;      // which: "the copy one way", "the copies both ways", …
  bool tested = true;            // false: skipped, a GPU of the pair hung earlier (`error` says which)
  // The copy by the source's own cores (kernel stores through peer access, as NCCL's kernels
  // write), counted on the destination: of sm_words, sm_differing did not arrive as sent.
  bool sm_checked = false;
  uint64_t sm_words = 0, sm_differing = 0;
  std::string sm_note;           // why it was not made ("not checked: …"), when it was not
  std::string error;             // a CUDA call that failed during the test ("cudaMemcpyPeerAsync: 700 (…)"), "" none
};

// Measured at least this fraction of the class's low figure: the catalog's figures are what
// healthy hardware measures, so 0.8 leaves room for a busy host without passing a downtrained link.
constexpr double kPassFraction = 0.8;

struct PairVerdict {
  std::string verdict;  // "pass", "fail", "expected", or "untested" (a GPU of the pair hung earlier)
  int transport = 0;    // p2ptrace_transport the copies took (peer access on: the link's class)
  Bandwidth expected;   // what that class should give; 0/0 when no figure
  std::vector<CauseHit> causes;  // why not, from the probes (and the test's own findings)
  std::string reason;   // one line: "52.1 GB/s, below 80% of 25-25 GB/s (PCIe Gen4 x16)"
};

// `predicted`: the job-start prediction for the pair (its best class, link, causes); null when the
// probes could not place it. `pcie_gen`: the PCIe generation the pair's links are built for (their
// maximum: a link trained below it should fail, not be judged by its lower rate), 0 unknown.
// Only the probes' causes that bear on a CUDA copy are named (not NCCL's settings or choices).
PairVerdict JudgePair(const PairMeasurement& m, const PairPrediction* predicted, int pcie_gen);

struct JudgedPair {
  PairMeasurement measured;
  PairVerdict verdict;
  // The links the pair's copies crossed that counted errors while it was tested, or that were
  // trained low (core/link_health.h); empty when nothing changed or no reading was taken.
  std::vector<LinkChange> link_changes;
};

// Charges to `pair` what changed on the links it crosses between `before` and `after` (the readings
// around its test; `link` its nvidia-smi label, as the route of a direct copy). A pair that failed
// below its class's rate names `link-errors` / `link-downtrained` first, in place of the
// `p2p-degraded` that said no cause was found.
void ChargeLinkChanges(JudgedPair* pair, const LinkHealth& before, const LinkHealth& after, const std::string& link);

// A previous run's result for one ordered pair, from a good node of the same kind (`--baseline`).
struct PairBaseline {
  int src = -1, dst = -1;
  std::string transport;  // TransportName of the class its copies took
  double gbps = -1, bidir_gbps = -1;  // -1: not measured
};

// How far below the baseline a figure may fall before it is a regression, by default (15%: the
// run-to-run spread of a healthy link is a few percent; a lane lost or a generation down is 50%).
constexpr double kBaselineTolerance = 0.15;

// Why `now` regressed against `before` ("" when it did not): its copies took another class (peer
// access lost, NVLink to PCIe), or one way or both ways fell more than `tolerance` below.
std::string RegressionOf(const PairBaseline& before, const JudgedPair& now, double tolerance);

}  // namespace p2ptrace
