// The pure parsers of the files the node probes read (probe/probe.cc opens them; tests and fuzzers
// feed these text).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/predict.h"

namespace p2ptrace {

struct KernelCmdline {
  IommuMode iommu = IommuMode::kUnknown;  // kUnknown: the line says nothing (the kernel's default)
  std::string iommu_tokens;               // the tokens that decided it, space-separated
  std::string acs_override;               // pcie_acs_override=… value, "" when absent
};
// /proc/cmdline: intel_iommu=on|off, amd_iommu=on|off, iommu=pt|off|nopt, pcie_acs_override=….
KernelCmdline ParseKernelCmdline(std::string_view cmdline);

struct NvidiaRegkeys {
  bool p2p_disabled_all = false;          // RegistryDwords turns PCIe P2P off for every GPU
  std::vector<std::string> p2p_disabled;  // bus ids (lower case) RegistryDwordsPerDevice turns off
  std::string evidence;                   // the setting as written, "" when none applies
  // GrdmaPciTopoCheckOverride, its own `Name: value` line or inside RegistryDwords: on Grace
  // Blackwell (GB200) before driver R595, 1 lets a PCIe NIC attach DMA-BUF handles of GPU memory.
  std::optional<int> grdma_topo_check_override;
};
// /proc/driver/nvidia/params: RegistryDwords / RegistryDwordsPerDevice ("ForceP2P=0x0",
// "RMForceP2PType=…", "pci=0000:1a:00.0;ForceP2P=0x0;").
NvidiaRegkeys ParseNvidiaParams(std::string_view params);

// sysfs current_link_speed / max_link_speed ("32.0 GT/s PCIe", "16 GT/s", "8.0 GT/s") → PCIe
// generation 1-6; 0 when unknown.
int PcieGenFromLinkSpeed(std::string_view text);

struct AcsControl {
  bool present = false;  // the bridge has an ACS capability
  bool request_redirect = false, completion_redirect = false;
  uint16_t control = 0;  // the ACS Control register
  bool Redirects() const { return request_redirect || completion_redirect; }
};
// A bridge's PCI config space as sysfs `config` returns it. nullopt when the extended space (past
// 256 bytes) is not there: an unprivileged read returns only the first 64 bytes.
std::optional<AcsControl> ParseAcsFromConfig(std::span<const uint8_t> config);

// "0000:1A:00.0", "00000000:1a:00.0" (NVML) → "0000:1a:00.0"; "" when it is not a PCI address.
std::string NormalizeBusId(std::string_view text);

}  // namespace p2ptrace
