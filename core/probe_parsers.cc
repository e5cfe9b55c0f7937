#include "core/probe_parsers.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

#include "core/fields.h"

namespace p2ptrace {
namespace {

std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// The quoted value of `Key: "…"` in the params file; "" when absent.
std::string ParamValue(std::string_view params, std::string_view key) {
  size_t pos = 0;
  while ((pos = params.find(key, pos)) != std::string_view::npos) {
    bool line_start = pos == 0 || params[pos - 1] == '\n';
    size_t after = pos + key.size();
    pos = after;
    if (!line_start || after >= params.size() || params[after] != ':') continue;
    size_t eol = params.find('\n', after);
    std::string_view v = params.substr(after + 1, eol == std::string_view::npos ? std::string_view::npos : eol - after - 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.remove_suffix(1);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return std::string(v);
  }
  return "";
}

// "ForceP2P=0x0" (or RMForceP2PType=… naming no P2P) inside a ';'-separated regkey list.
bool DisablesP2p(std::string_view entry) {
  size_t eq = entry.find('=');
  if (eq == std::string_view::npos) return false;
  std::string key = Lower(entry.substr(0, eq));
  std::string_view value = entry.substr(eq + 1);
  if (key != "forcep2p" && key != "rmforcep2ptype") return false;
  long v = std::strtol(std::string(value).c_str(), nullptr, 0);
  // ForceP2P: 0 = off. RMForceP2PType: 0 = none (1 sysmem, 2 bar1 enable it).
  return v == 0 && !value.empty();
}

}  // namespace

KernelCmdline ParseKernelCmdline(std::string_view cmdline) {
  KernelCmdline out;
  bool on = false, off = false, pt = false, nopt = false;
  std::string tokens;
  for (std::string_view w : Words(cmdline)) {
    std::string lw = Lower(w);
    auto note = [&] { tokens += (tokens.empty() ? "" : " ") + std::string(w); };
    if (lw == "intel_iommu=on" || lw == "amd_iommu=on" || lw == "amd_iommu=force_isolation" ||
        lw.rfind("intel_iommu=on,", 0) == 0) {
      on = true;
      note();
    } else if (lw == "intel_iommu=off" || lw == "amd_iommu=off" || lw == "iommu=off") {
      off = true;
      note();
    } else if (lw == "iommu=pt" || lw == "iommu.passthrough=1" || lw == "iommu.passthrough=on") {
      pt = true;
      note();
    } else if (lw == "iommu=nopt" || lw == "iommu.passthrough=0") {
      nopt = true;
      note();
    } else if (lw.rfind("pcie_acs_override=", 0) == 0) {
      out.acs_override = std::string(w.substr(18));
    }
  }
  if (off) out.iommu = IommuMode::kOff;
  else if (pt) out.iommu = IommuMode::kPassthrough;
  else if (on || nopt) out.iommu = IommuMode::kTranslating;
  out.iommu_tokens = tokens;
  return out;
}

NvidiaRegkeys ParseNvidiaParams(std::string_view params) {
  NvidiaRegkeys out;
  std::string global = ParamValue(params, "RegistryDwords");
  for (std::string_view e : Split(global, ';'))
    if (DisablesP2p(e)) {
      out.p2p_disabled_all = true;
      out.evidence = "RegistryDwords: \"" + global + "\"";
    }
  std::string per = ParamValue(params, "RegistryDwordsPerDevice");
  std::string current;
  bool any = false;
  for (std::string_view e : Split(per, ';')) {
    if (e.rfind("pci=", 0) == 0) {
      current = NormalizeBusId(e.substr(4));
    } else if (DisablesP2p(e) && !current.empty()) {
      out.p2p_disabled.push_back(current);
      any = true;
    }
  }
  if (any) out.evidence += std::string(out.evidence.empty() ? "" : "; ") + "RegistryDwordsPerDevice: \"" + per + "\"";
  if (std::string v = ParamValue(params, "GrdmaPciTopoCheckOverride"); !v.empty())
    out.grdma_topo_check_override = std::atoi(v.c_str());
  for (std::string_view e : Split(global, ';'))
    if (e.rfind("GrdmaPciTopoCheckOverride=", 0) == 0)
      out.grdma_topo_check_override = static_cast<int>(std::strtol(std::string(e.substr(26)).c_str(), nullptr, 0));
  return out;
}

int PcieGenFromLinkSpeed(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  double gts = std::strtod(std::string(t.substr(0, std::min<size_t>(t.size(), 16))).c_str(), nullptr);
  if (t.find("GT/s") == std::string_view::npos) return 0;
  if (gts >= 60) return 6;
  if (gts >= 30) return 5;
  if (gts >= 15) return 4;
  if (gts >= 7.5) return 3;
  if (gts >= 4.5) return 2;
  if (gts >= 2) return 1;
  return 0;
}

std::optional<AcsControl> ParseAcsFromConfig(std::span<const uint8_t> config) {
  if (config.size() < 0x104) return std::nullopt;
  auto u16 = [&](size_t off) { return static_cast<uint16_t>(config[off] | (config[off + 1] << 8)); };
  auto u32 = [&](size_t off) {
    return static_cast<uint32_t>(config[off]) | static_cast<uint32_t>(config[off + 1]) << 8 |
           static_cast<uint32_t>(config[off + 2]) << 16 | static_cast<uint32_t>(config[off + 3]) << 24;
  };
  AcsControl out;
  size_t off = 0x100;
  for (int hops = 0; hops < 64 && off >= 0x100 && off + 8 <= config.size(); ++hops) {
    uint32_t header = u32(off);
    if (header == 0 || header == 0xffffffffu) break;
    if ((header & 0xffff) == 0x000d) {  // PCIe extended capability: Access Control Services
      out.present = true;
      out.control = u16(off + 6);
      out.request_redirect = out.control & (1u << 2);
      out.completion_redirect = out.control & (1u << 3);
      return out;
    }
    size_t next = (header >> 20) & 0xffc;
    if (next <= off) break;  // the list only moves forward; anything else is a loop
    off = next;
  }
  return out;
}

std::string NormalizeBusId(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  std::vector<std::string_view> parts = Split(t, ':');
  if (parts.size() != 3) return "";
  std::string_view dom = parts[0], bus = parts[1], devfn = parts[2];
  size_t dot = devfn.find('.');
  if (dot == std::string_view::npos || !IsHex(dom) || dom.size() > 8 || !IsHex(bus) || bus.size() > 2 ||
      !IsHex(devfn.substr(0, dot)) || dot > 2 || devfn.size() != dot + 2 || !IsHex(devfn.substr(dot + 1)))
    return "";
  unsigned long d = std::strtoul(std::string(dom).c_str(), nullptr, 16);
  if (d > 0xffff) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lx:%02lx:%02lx.%c", d, std::strtoul(std::string(bus).c_str(), nullptr, 16),
                std::strtoul(std::string(devfn.substr(0, dot)).c_str(), nullptr, 16),
                static_cast<char>(std::tolower(static_cast<unsigned char>(devfn[dot + 1]))));
  return buf;
}

}  // namespace p2ptrace
