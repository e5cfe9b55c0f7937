#include "core/topology.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace p2ptrace {

std::string_view PathTypeName(PathType type) {
  switch (type) {
    case PathType::kNVLink: return "NV";
    case PathType::kPIX: return "PIX";
    case PathType::kPXB: return "PXB";
    case PathType::kPHB: return "PHB";
    case PathType::kNODE: return "NODE";
    case PathType::kSYS: return "SYS";
  }
  return "SYS";
}

std::optional<PathType> ParsePathType(std::string_view text) {
  if (text.size() > 2 && text.substr(0, 2) == "NV") {
    int links = 0;
    auto [p, ec] = std::from_chars(text.data() + 2, text.data() + text.size(), links);
    if (ec == std::errc() && p == text.data() + text.size() && links > 0) return PathType::kNVLink;
    return std::nullopt;
  }
  if (text == "PIX") return PathType::kPIX;
  if (text == "PXB") return PathType::kPXB;
  if (text == "PHB") return PathType::kPHB;
  if (text == "NODE") return PathType::kNODE;
  if (text == "SYS" || text == "SOC") return PathType::kSYS;  // SOC: drivers before 2017
  return std::nullopt;
}

const Gpu* Host::FindGpu(int index) const {
  for (const Gpu& g : gpus)
    if (g.index == index) return &g;
  return nullptr;
}

const PcieSwitch* Host::FindSwitch(std::string_view id) const {
  for (const PcieSwitch& s : switches)
    if (s.id == id) return &s;
  return nullptr;
}

bool Host::IsCpu(std::string_view id) const {
  return std::find(cpus.begin(), cpus.end(), id) != cpus.end();
}

const NvLink* Host::FindNvLink(int a, int b) const {
  for (const NvLink& l : nvlinks)
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return &l;
  return nullptr;
}

std::string GpuPath::Label() const {
  if (type == PathType::kNVLink) return "NV" + std::to_string(nvlinks);
  return std::string(PathTypeName(type));
}

std::vector<std::string> PcieAncestors(const Host& host, std::string_view parent) {
  std::vector<std::string> chain;
  std::string cur(parent);
  // Bounded walk: a cycle in a malformed file must not hang us.
  for (size_t step = 0; step <= host.switches.size() + 1; ++step) {
    chain.push_back(cur);
    if (host.IsCpu(cur)) return chain;
    const PcieSwitch* sw = host.FindSwitch(cur);
    if (sw == nullptr) return {};
    cur = sw->parent;
  }
  return {};
}

namespace {

// Two devices' PCIe chains up to their CPUs and where they first meet (ia == ca.size(): never).
struct Chains {
  std::vector<std::string> ca, cb;
  size_t ia = 0, ib = 0;
};

Chains Meet(const Host& host, std::string_view parent_a, std::string_view parent_b) {
  Chains c{PcieAncestors(host, parent_a), PcieAncestors(host, parent_b)};
  c.ia = c.ca.size();
  c.ib = c.cb.size();
  for (size_t i = 0; i < c.ca.size() && c.ia == c.ca.size(); ++i)
    for (size_t j = 0; j < c.cb.size(); ++j)
      if (c.ca[i] == c.cb[j]) { c.ia = i; c.ib = j; break; }
  return c;
}

PathType TypeOf(const Host& host, const Chains& c) {
  if (c.ia == c.ca.size()) return PathType::kSYS;
  if (c.ia == 0 && c.ib == 0 && !host.IsCpu(c.ca[0])) return PathType::kPIX;
  return host.IsCpu(c.ca[c.ia]) ? PathType::kPHB : PathType::kPXB;
}

}  // namespace

PathType ClassifyPciePath(const Host& host, std::string_view parent_a, std::string_view parent_b) {
  return TypeOf(host, Meet(host, parent_a, parent_b));
}

GpuPath ClassifyGpuPath(const Host& host, int a, int b) {
  GpuPath path;
  const Gpu* ga = host.FindGpu(a);
  const Gpu* gb = host.FindGpu(b);
  if (ga == nullptr || gb == nullptr) return path;
  // The switches between each GPU and the lowest common ancestor carry the peer traffic.
  Chains c = Meet(host, ga->parent, gb->parent);
  auto redirects = [&](const std::vector<std::string>& chain, size_t upto) {
    for (size_t i = 0; i < chain.size() && i <= upto; ++i)
      if (const PcieSwitch* sw = host.FindSwitch(chain[i]); sw && sw->acs_redirect) return true;
    return false;
  };
  path.acs_redirect = redirects(c.ca, c.ia) || redirects(c.cb, c.ib);
  path.type = path.pcie = TypeOf(host, c);
  if (const NvLink* l = host.FindNvLink(a, b); l != nullptr && l->links > 0) {
    path.type = PathType::kNVLink;
    path.nvlinks = l->links;
    path.active_links = l->active;
  }
  return path;
}

static bool HasToken(std::string_view cmdline, std::string_view token) {
  size_t pos = 0;
  while ((pos = cmdline.find(token, pos)) != std::string_view::npos) {
    bool start = pos == 0 || std::isspace(static_cast<unsigned char>(cmdline[pos - 1]));
    size_t end = pos + token.size();
    bool stop = end == cmdline.size() || std::isspace(static_cast<unsigned char>(cmdline[end]));
    if (start && stop) return true;
    pos = end;
  }
  return false;
}

bool IommuTranslating(std::string_view cmdline) {
  bool on = HasToken(cmdline, "intel_iommu=on") || HasToken(cmdline, "amd_iommu=on");
  bool passthrough = HasToken(cmdline, "iommu=pt") || HasToken(cmdline, "iommu=off");
  return on && !passthrough;
}

bool IsConsumerGpu(std::string_view name) {
  return name.find("GeForce") != std::string_view::npos ||
         name.find("TITAN") != std::string_view::npos;
}

}  // namespace p2ptrace
