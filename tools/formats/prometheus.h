// `p2ptrace doctor --prometheus FILE` and `p2ptrace export DIR --prometheus FILE`: the node's GPU
// pairs as node_exporter's textfile collector reads them (Prometheus text format 0.0.4), written
// atomically (a temporary file in FILE's directory, then rename), so that a scrape never sees half a
// file. The metric names, labels and units are listed in README.md ("Prometheus").
//
// doctor writes the prediction (source="doctor"): each directional pair's available class and
// whether it falls back, with the cause. export writes what the job did (source="job"): per pair
// and API (cuda copies, nccl) the class available (the report's expected) and used, bytes, calls,
// measured bandwidth, the fallback with its causes, and the time it lost. Both write the node gauge
// p2ptrace_node_pairs_without_p2p. Nothing unmeasured gets a sample: no timed call, no bandwidth.
#pragma once

#include <iosfwd>
#include <string>

#include <vector>

#include "core/link_health.h"
#include "core/node_network.h"
#include "core/node_probe.h"
#include "core/pair_verdict.h"
#include "core/predict.h"
#include "tools/report/report.h"

namespace p2ptrace::cli {

// The text format for doctor's probe and prediction, with the node's side of the network (each
// RDMA NIC's port, each GPU's NIC and the path NCCL would take to another node, with its cause).
std::string PrometheusFromDoctor(const NodeProbe& probe, const Prediction& prediction, const NodeNetwork& network,
                                 const LinkHealth& links);
// The text format for `doctor --test`'s pairs (source="test"), measured at `unix_seconds`: families
// of their own, so that its file and doctor's can sit side by side in one collector directory.
std::string PrometheusFromTest(const NodeProbe& probe, const std::vector<JudgedPair>& pairs, double unix_seconds);
// The text format for a job's report.
std::string PrometheusFromReport(const Report& report);

// "00000000:1A:00.0", as nvidia-smi's pci.bus_id (and DCGM exporter's pci_bus_id label) write it,
// for any form NormalizeBusId reads; text that is no PCI address comes back as it is.
std::string NvidiaSmiBusId(const std::string& bus_id);

}  // namespace p2ptrace::cli
