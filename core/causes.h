// The cause catalog (DESIGN.md §5): why a GPU pair takes a worse path than its topology allows, or
// why its path is at risk. Each cause has a stable id, a severity, a title, the fix and, where a
// user should confirm before changing a machine, the check to run (../shared/seeds/: disabling P2P
// is a diagnostic, never the fix). Pure data: the predictor (core/predict.h), the shim's warnings
// and the CLI all print from here.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace p2ptrace {

enum class Severity { kInfo, kWarning, kError };
std::string_view SeverityName(Severity s);  // "info" | "warning" | "error"

struct CauseInfo {
  std::string_view id;        // "env-p2p-disabled", … (stable)
  Severity severity;
  std::string_view title;     // one line: what is wrong
  std::string_view fix;       // what to change
  std::string_view confirm;   // how to confirm it is this cause before changing anything ("" if obvious)
};

// Every cause, in the order DESIGN.md §5 lists them (plus the ones NCCL's own messages name).
std::span<const CauseInfo> AllCauses();
// The entry for an id, or nullptr.
const CauseInfo* FindCause(std::string_view id);
// The catalog id for a refusal kind of core/nccl_log.h (`nvml-p2p-disabled` → `nvml-p2p-status`);
// the kind itself when it is already an id.
std::string_view CauseForNcclRefusal(std::string_view kind);

// Expected bandwidth of a transport class, one direction, GB/s, from DESIGN.md §1's figures.
struct Bandwidth {
  double low = 0, high = 0;  // 0/0: no figure
  std::string basis;         // what the figure assumes ("NV12 at ~20 GB/s per link", "PCIe Gen4 x16")
};
// `link` is the topology cell ("NV12", "PIX", "" unknown); `pcie_gen` 0 when unknown.
Bandwidth ExpectedBandwidth(int transport_class, std::string_view link, int pcie_gen);
// "shm (~6-40 GB/s) instead of nvlink (NV12, ~240 GB/s): ~6-40x less bandwidth"; "" when either
// class has no figure or the taken class is not worse.
std::string ImpactText(int taken_class, int best_class, std::string_view link, int pcie_gen);

}  // namespace p2ptrace
