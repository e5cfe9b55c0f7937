// The job-start warnings (DESIGN.md §2): one line per cause, the same format wherever a pair warns
// (the shim at job start and later, `doctor`, the report).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/node_probe.h"
#include "core/predict.h"

namespace p2ptrace {

// "a; b; c": the evidence of a cause, the ids of others, as warning lines write them.
std::string Join(const std::vector<std::string>& v, std::string_view sep);
// How a warning names a GPU of the probe: "GPU3", or "node1 GPU0" for another host's (its own number).
std::string GpuLabel(const NodeProbe& probe, int index);

// Whether a pair deserves a warning line: it falls back, or a warning/error-severity risk holds.
bool PairWarns(const PairPrediction& p);
// "GPU0-3,6" for {0, 1, 2, 3, 6}: GPU indices as ranges, ascending.
std::string GpuSetText(std::vector<int> gpus);
// Compact names for a set of GPU pairs (either order; duplicates ignored), per connected group of
// GPUs: "GPU0 <-> GPU1", "GPU0-3 <-> GPU4-7" (every pair between two sets, the smaller set first,
// else the one with the lower GPUs), "every pair of GPU0-3"
// (every pair within a set), else rows "GPU0 <-> GPU2-3" of GPUs with the same partners; parts joined
// by "; ", at most `max_parts` of them, then "; …".
std::string PairSetText(std::vector<std::pair<int, int>> pairs, size_t max_parts = 4);
// One line per cause (DESIGN.md §2): the pairs that warn, grouped by their headline cause, each
// group as `p2ptrace: warning: <host> <pairs>[, N pairs][ (ranks r<->s)]: <class> instead of
// <expected>[ (<pairs>), instead of <expected2> (<pairs2>)…] [<cause-id>] <evidence>[ (also: …)];
// <impact>[; <impact2>…]; fix: <fix>` (a path change per distinct change, with its pairs when
// there are several), N counting both directions (as the report lists pairs) when more than one
// GPU pair; groups in the order of their first pair. Or the single `p2ptrace: all N GPU pairs on
// <host> can use NVLink/P2P` line. No trailing newlines.
std::vector<std::string> WarningLines(const NodeProbe& probe, const Prediction& prediction);
// One pair's line, as in WarningLines (ranks left out when either is -1; no host when the GPU names
// carry theirs), with `note` in parentheses after the classes when not empty: the one format every
// warning of a pair uses.
std::string WarningLine(std::string_view host, std::string_view gpu_a, std::string_view gpu_b, int rank_a, int rank_b,
                        const PairPrediction& p, std::string_view note = "");
// The cause a pair's warning names: the most specific of the ones that decided or contributed.
const CauseHit* HeadlineCause(const PairPrediction& p);

}  // namespace p2ptrace
