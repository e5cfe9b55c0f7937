// Each host's job-start check (the preflight block every traced process writes: the node's GPUs,
// links and predicted pairs), held against the report's pairs: which link a pair crossed, and the
// causes the prediction foresaw for it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/preflight_block.h"
#include "tools/report/gpu_index.h"
#include "tools/report/report.h"

namespace p2ptrace::cli {

class NodePredictions {
 public:
  // One process's block for `host`; its GPUs' numbering goes to `gpus`. Bus ids are normalised here.
  void Add(const std::string& host, const PreflightBlock& block, GpuIndex& gpus);
  // NVML answered the host's probe: a PCIe link there then means no NVLink.
  bool NvmlAnswered(const std::string& host) const;
  // A direct pair's link from the node's facts (NV<n> → NVLink; a PCIe path where NVML answered → PCIe P2P).
  void NameLink(PairEntry& e) const;
  // Each NET side of the pair gets the PCIe path from its GPU to the NIC it used and to the nearest
  // NIC, as its host's probe found them.
  void NameNearestNics(PairEntry& e) const;
  // The prediction's causes, after the pair's own, where the pair took the path it foresaw.
  void ApplyTo(PairEntry& e) const;
  // The host's fastest RDMA NIC with an active port, else its fastest NIC (a port that is down has
  // the rate it would carry once up), as its probe read it (gbps -1: none known).
  struct NicRate {
    std::string name;
    int gbps = -1;
    std::string state;
  };
  NicRate FastestNic(const std::string& host) const;
  // Each host's warnings, once per host however many processes wrote the block.
  std::vector<Report::Preflight> Warnings() const;

 private:
  struct Host {
    std::string boot_id;
    bool nvml = false;
    std::map<std::pair<std::string, std::string>, std::string> links;  // (bus, bus), both orders -> "NV6"
    std::vector<PreflightPair> pairs;  // the first process's prediction of a pair stands
    std::vector<std::string> warnings;
    NicRate active, any;
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> nic_paths;  // GPU bus -> (NIC, path)…
  };
  const Host* Of(const std::string& host) const;
  const PreflightPair* PredictionFor(const PairEntry& e) const;
  std::string BlockHost(const PreflightPair* p) const;  // the host whose block holds `p`
  std::map<std::string, Host> hosts_;  // by the trace's host
};

}  // namespace p2ptrace::cli
