#include "core/node_probe.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "core/causes.h"
#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"

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

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      if (i > start) out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// Causes that are a setting the user made (an NCCL_* variable), not the node or NCCL's own choice.
bool IsUserSetting(std::string_view id) { return id.substr(0, 4) == "env-"; }

// Causes that only restate a gate (what the driver or CUDA answered) rather than why.
bool IsGate(std::string_view id) { return id == "nvml-p2p-status" || id == "cuda-no-peer-access" || id == "unknown"; }

std::string Clean(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r' || c == '\x1f') c = ' ';
  return s;
}

int ToInt(std::string_view s, int fallback) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() ? v : fallback;
}

}  // namespace

// --- parsers -------------------------------------------------------------------------------------

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

// --- the probe -------------------------------------------------------------------------------------

const ProbedGpu* NodeProbe::Gpu(int index) const {
  for (const ProbedGpu& g : gpus)
    if (g.index == index) return &g;
  return nullptr;
}

const ProbedPair* NodeProbe::Pair(int a, int b) const {
  for (const ProbedPair& p : pairs)
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return &p;
  return nullptr;
}

std::string PathFromChains(const ProbedGpu& a, const ProbedGpu& b) {
  if (a.root.empty() || b.root.empty()) return "";
  if (a.root == b.root) {
    for (size_t i = 0; i < a.bridges.size(); ++i)
      for (size_t j = 0; j < b.bridges.size(); ++j)
        if (a.bridges[i] == b.bridges[j]) return i == 0 && j == 0 ? "PIX" : "PXB";
    return "PHB";
  }
  if (a.numa_node >= 0 && a.numa_node == b.numa_node) return "NODE";
  return "SYS";
}

std::string AcsCommand(const std::vector<std::string>& bridges) {
  if (bridges.empty()) return "sudo lspci -vvv | grep -B5 -A10 'Access Control Services'";
  std::string cmd;
  for (const std::string& b : bridges)
    cmd += (cmd.empty() ? "" : "; ") + std::string("sudo lspci -vvv -s ") + b + " | grep -A3 'Access Control Services'";
  return cmd;
}

NodeFacts FactsFromProbe(const NodeProbe& probe) {
  NodeFacts f;
  f.cpu_vendor = probe.cpu_vendor;
  f.env = probe.env;
  f.iommu = probe.iommu;
  f.virtualization = probe.virtualization;
  f.gdr = probe.gdr;
  f.rdma_nics = probe.rdma_nics;
  f.communicator = probe.communicator;
  f.nccl_version = probe.nccl_version;
  f.nccl_version_note = probe.nccl_version_note;
  for (const ProbeStep& s : probe.steps)
    if (s.status == "ok") f.sources.push_back(s.name);
  for (const ProbedGpu& g : probe.gpus) {
    GpuFacts gf;
    gf.index = g.index;
    gf.name = g.name;
    gf.bus_id = g.bus_id;
    if (!g.name.empty()) gf.consumer = IsConsumerGpu(g.name);
    gf.mig = g.mig;
    gf.pcie = g.pcie;
    gf.hostname = g.hostname ? g.hostname : std::optional<std::string>(probe.hostname);
    gf.boot_id = g.boot_id ? g.boot_id : std::optional<std::string>(probe.boot_id);
    if (gf.hostname && gf.hostname->empty()) gf.hostname.reset();
    if (gf.boot_id && gf.boot_id->empty()) gf.boot_id.reset();
    gf.shm_dev = g.shm_dev ? g.shm_dev : probe.shm_dev;
    gf.shm_bytes = g.shm_bytes ? g.shm_bytes : probe.shm_bytes;
    f.gpus.push_back(std::move(gf));
  }
  for (const ProbedPair& p : probe.pairs) {
    PairFacts pf;
    pf.a = p.a;
    pf.b = p.b;
    pf.link = p.link;
    pf.nvlinks_present = p.nvlinks_present;
    pf.nvlinks_active = p.nvlinks_active;
    pf.nvml_read = p.nvml_read;
    pf.nvml_write = p.nvml_write;
    pf.cuda_can_access = p.cuda_can_access;
    pf.acs_redirect = p.acs_redirect;
    pf.split_iommu_groups = p.split_iommu_groups;
    f.pairs.push_back(std::move(pf));
  }
  return f;
}

Prediction PredictNode(const NodeProbe& probe, bool cuda_copies) {
  NodeFacts facts = FactsFromProbe(probe);
  facts.cuda_copies = cuda_copies;
  Prediction pred = Predict(facts);
  for (PairPrediction& pp : pred.pairs) {
    const ProbedPair* pr = probe.Pair(pp.a, pp.b);
    const ProbedGpu* ga = probe.Gpu(pp.a);
    const ProbedGpu* gb = probe.Gpu(pp.b);
    for (CauseHit& c : pp.causes) {
      if (c.id == "nvml-p2p-status" && !probe.regkeys.evidence.empty()) {
        bool applies = probe.regkeys.p2p_disabled_all;
        for (const ProbedGpu* g : {ga, gb})
          if (g && std::find(probe.regkeys.p2p_disabled.begin(), probe.regkeys.p2p_disabled.end(), g->bus_id) !=
                       probe.regkeys.p2p_disabled.end())
            applies = true;
        if (applies) c.evidence.push_back("/proc/driver/nvidia/params " + probe.regkeys.evidence);
      } else if (c.id == "iommu-enabled") {
        std::string ev = "/proc/cmdline";
        ev += probe.cmdline.iommu_tokens.empty() ? " names no IOMMU mode" : ": " + probe.cmdline.iommu_tokens;
        for (const ProbedGpu* g : {ga, gb})
          if (g && !g->iommu_group_type.empty()) {
            ev += "; GPU" + std::to_string(g->index) + "'s IOMMU group " + std::to_string(g->iommu_group) + " has type " +
                  g->iommu_group_type;
            break;
          }
        c.evidence.push_back(ev);
      } else if (c.id == "acs-suspected" && pr) {
        std::vector<std::string> bridges;
        for (const ProbedGpu* g : {ga, gb})
          if (g)
            for (const std::string& b : g->bridges)
              if (std::find(bridges.begin(), bridges.end(), b) == bridges.end()) bridges.push_back(b);
        if (ga && gb)
          c.evidence.push_back("GPU" + std::to_string(ga->index) + " is in IOMMU group " + std::to_string(ga->iommu_group) +
                               ", GPU" + std::to_string(gb->index) + " in group " + std::to_string(gb->iommu_group) +
                               " although they share a PCIe switch");
        c.evidence.push_back("ACS control unknown (config space not readable); run: " + AcsCommand(bridges));
      } else if (c.id == "acs-redirect" && pr && !pr->acs_bridges.empty()) {
        std::string list;
        for (const std::string& b : pr->acs_bridges) list += (list.empty() ? "" : ", ") + b;
        c.evidence.push_back("ACSCtl ReqRedir+/CmpltRedir+ on bridge " + list + " (read from its config space)");
      } else if (c.id == "virtualized" && !probe.virtualization_evidence.empty()) {
        c.evidence.push_back(probe.virtualization_evidence);
      }
    }
  }
  return pred;
}

// --- warnings ----------------------------------------------------------------------------------------

bool PairWarns(const PairPrediction& p) {
  if (p.fallback || p.init_error) return true;
  for (const CauseHit& c : p.causes) {
    if (c.role != "risk") continue;
    const CauseInfo* info = FindCause(c.id);
    if (info && info->severity != Severity::kInfo) return true;
  }
  return false;
}

const CauseHit* HeadlineCause(const PairPrediction& p) {
  if (p.fallback || p.init_error) {
    // A setting the user made leads (NCCL_SHM_DISABLE sending a pair NCCL deliberately put on SHM
    // to TCP sockets): undoing it is the step that pays, and it is theirs to take.
    for (const CauseHit& c : p.causes)
      if ((c.role == "decided" || c.role == "contributes") && IsUserSetting(c.id)) return &c;
    for (const CauseHit& c : p.causes)
      if ((c.role == "decided" || c.role == "contributes") && !IsGate(c.id)) return &c;
    for (const CauseHit& c : p.causes)
      if (c.role == "decided") return &c;
  }
  for (const CauseHit& c : p.causes) {
    const CauseInfo* info = FindCause(c.id);
    if (c.role == "risk" && info && info->severity != Severity::kInfo) return &c;
  }
  return p.causes.empty() ? nullptr : &p.causes.front();
}

namespace {

std::string GpuLabel(const NodeProbe& probe, int index) {
  const ProbedGpu* g = probe.Gpu(index);
  if (g && g->hostname && *g->hostname != probe.hostname) return *g->hostname + " GPU" + std::to_string(g->cuda >= 0 ? g->cuda : index);
  return "GPU" + std::to_string(index);
}

}  // namespace

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

namespace {

// What happens to a pair, as its warning says it: "shm instead of pcie_p2p", "NCCL init error instead
// of nvlink", "pcie_p2p at risk (slow or hanging) instead of pcie_p2p at full speed".
std::string ChangeText(const PairPrediction& p) {
  std::string taken(TransportName(p.transport)), best(TransportName(p.best));
  if (p.fallback) return taken + " instead of " + best;
  if (p.init_error) return "NCCL init error instead of " + best;
  return taken + " at risk (slow or hanging) instead of " + best + " at full speed";
}

}  // namespace

std::string WarningLine(std::string_view host, std::string_view gpu_a, std::string_view gpu_b, int rank_a, int rank_b,
                        const PairPrediction& p, std::string_view note) {
  std::string line = "p2ptrace: warning: " + std::string(host) + " " + std::string(gpu_a) + " -> " + std::string(gpu_b);
  if (rank_a >= 0 && rank_b >= 0) line += " (ranks " + std::to_string(rank_a) + "->" + std::to_string(rank_b) + ")";
  line += ": " + ChangeText(p);
  if (!note.empty()) line += " (" + std::string(note) + ")";
  if (const CauseHit* head = HeadlineCause(p)) {
    line += " [" + head->id + "] " + Join(head->evidence, "; ");
    std::vector<std::string> also;
    for (const CauseHit& c : p.causes)
      if (&c != head && c.role != "context") also.push_back(c.id);
    if (!also.empty()) line += " (also: " + Join(also, ", ") + ")";
    if (!p.impact.empty()) line += "; " + p.impact;
    if (const CauseInfo* info = FindCause(head->id)) line += "; fix: " + std::string(info->fix);
  }
  return Clean(line);
}

std::string GpuSetText(std::vector<int> gpus) {
  std::sort(gpus.begin(), gpus.end());
  gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
  std::string out = "GPU";
  for (size_t i = 0; i < gpus.size();) {
    size_t j = i;
    while (j + 1 < gpus.size() && gpus[j + 1] == gpus[j] + 1) ++j;
    out += (i == 0 ? "" : ",") + std::to_string(gpus[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(gpus[j]);
    i = j + 1;
  }
  return out;
}

std::string PairSetText(std::vector<std::pair<int, int>> pairs, size_t max_parts) {
  for (auto& [a, b] : pairs)
    if (a > b) std::swap(a, b);
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  std::map<int, std::set<int>> nb;  // neighbours, both ways
  for (auto [a, b] : pairs) nb[a].insert(b), nb[b].insert(a);
  // Connected groups of GPUs, in the order of their lowest GPU.
  std::vector<std::vector<int>> groups;
  std::set<int> seen;
  for (const auto& [start, unused] : nb) {
    if (seen.count(start)) continue;
    std::vector<int> group, todo{start};
    seen.insert(start);
    while (!todo.empty()) {
      int g = todo.back();
      todo.pop_back();
      group.push_back(g);
      for (int n : nb[g])
        if (seen.insert(n).second) todo.push_back(n);
    }
    std::sort(group.begin(), group.end());
    groups.push_back(std::move(group));
  }
  std::vector<std::string> parts;
  for (const std::vector<int>& group : groups) {
    size_t edges = 0;
    for (int g : group) edges += nb[g].size();
    edges /= 2;
    if (group.size() == 2) {
      parts.push_back("GPU" + std::to_string(group[0]) + " <-> GPU" + std::to_string(group[1]));
      continue;
    }
    if (edges == group.size() * (group.size() - 1) / 2) {  // a clique
      parts.push_back("every pair of " + GpuSetText(group));
      continue;
    }
    // Complete bipartite: two sets, each GPU's partners exactly the other set.
    std::map<std::set<int>, std::vector<int>> by_partners;
    for (int g : group) by_partners[nb[g]].push_back(g);
    if (by_partners.size() == 2) {
      auto first = by_partners.begin(), second = std::next(first);
      std::set<int> a(first->second.begin(), first->second.end()), b(second->second.begin(), second->second.end());
      if (first->first == b && second->first == a) {
        // The smaller set first (one GPU against the others reads as such), else the lower GPUs.
        bool a_first = a.size() != b.size() ? a.size() < b.size() : *a.begin() < *b.begin();
        parts.push_back(GpuSetText(a_first ? first->second : second->second) + " <-> " +
                        GpuSetText(a_first ? second->second : first->second));
        continue;
      }
    }
    // Otherwise rows: each GPU with its higher partners, GPUs of equal rows together.
    std::vector<std::pair<std::set<int>, std::vector<int>>> rows;
    for (int g : group) {
      std::set<int> higher(nb[g].upper_bound(g), nb[g].end());
      if (higher.empty()) continue;
      auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == higher; });
      if (it == rows.end()) rows.push_back({higher, {g}});
      else it->second.push_back(g);
    }
    for (const auto& [higher, from] : rows)
      parts.push_back(GpuSetText(from) + " <-> " + GpuSetText(std::vector<int>(higher.begin(), higher.end())));
  }
  std::string out;
  for (size_t i = 0; i < parts.size() && i < max_parts; ++i) out += (i ? "; " : "") + parts[i];
  if (parts.size() > max_parts) out += "; …";
  return out;
}

std::vector<std::string> WarningLines(const NodeProbe& probe, const Prediction& prediction) {
  std::string host = probe.hostname.empty() ? "this node" : probe.hostname;
  // One line per cause (the headline cause of each pair that warns); within it, the pairs of each
  // path change apart when they differ (NVLink pairs and PCIe pairs that both go to SHM).
  struct Change {
    std::string text, impact;
    std::vector<const PairPrediction*> pairs;
  };
  struct Group {
    std::string cause;
    std::vector<Change> changes;
    std::vector<const PairPrediction*> pairs;
  };
  std::vector<Group> groups;
  for (const PairPrediction& p : prediction.pairs) {
    if (!PairWarns(p)) continue;
    const CauseHit* head = HeadlineCause(p);
    std::string cause = head ? head->id : "";
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.cause == cause; });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{cause, {}, {}});
    g->pairs.push_back(&p);
    std::string text = ChangeText(p);
    auto c = std::find_if(g->changes.begin(), g->changes.end(), [&](const Change& x) { return x.text == text; });
    if (c == g->changes.end()) c = g->changes.insert(g->changes.end(), Change{text, p.impact, {}});
    c->pairs.push_back(&p);
  }
  bool foreign = false;  // GPUs of other hosts: named by their labels, pair by pair
  for (const ProbedGpu& g : probe.gpus)
    if (g.hostname && *g.hostname != probe.hostname) foreign = true;
  auto names = [&](const std::vector<const PairPrediction*>& pairs) {
    if (foreign) {
      std::vector<std::string> out;
      for (const PairPrediction* p : pairs) out.push_back(GpuLabel(probe, p->a) + " <-> " + GpuLabel(probe, p->b));
      if (out.size() > 4) out.resize(4), out.push_back("…");
      return Join(out, ", ");
    }
    std::vector<std::pair<int, int>> ab;
    for (const PairPrediction* p : pairs) ab.push_back({p->a, p->b});
    return PairSetText(ab);
  };
  std::vector<std::string> lines;
  for (const Group& g : groups) {
    const PairPrediction& first = *g.pairs.front();
    std::string line = "p2ptrace: warning: " + host + " " + names(g.pairs);
    if (g.pairs.size() > 1) line += ", " + std::to_string(2 * g.pairs.size()) + " pairs";
    const ProbedGpu* ga = probe.Gpu(first.a);
    const ProbedGpu* gb = probe.Gpu(first.b);
    if (g.pairs.size() == 1 && ga && gb && ga->rank >= 0 && gb->rank >= 0)
      line += " (ranks " + std::to_string(ga->rank) + "<->" + std::to_string(gb->rank) + ")";
    line += ": ";
    for (size_t i = 0; i < g.changes.size(); ++i) {
      const Change& c = g.changes[i];
      // A second change of the same class taken reads "…, instead of pcie_p2p (…)".
      std::string text = c.text;
      if (i > 0 && c.pairs.front()->transport == g.changes[i - 1].pairs.front()->transport &&
          text.find(" instead of ") != std::string::npos)
        text = text.substr(text.find(" instead of ") + 1);
      line += (i ? ", " : "") + text + (g.changes.size() > 1 ? " (" + names(c.pairs) + ")" : "");
    }
    if (const CauseHit* head = HeadlineCause(first)) {
      // One pair's evidence stands for all; "e.g." when another pair's differs (it names its GPUs).
      bool same = true;
      std::set<std::string> also_seen;
      std::vector<std::string> also;
      for (const PairPrediction* p : g.pairs) {
        const CauseHit* h = HeadlineCause(*p);
        if (h && h->evidence != head->evidence) same = false;
        for (const CauseHit& c : p->causes)
          if (&c != h && c.role != "context" && also_seen.insert(c.id).second) also.push_back(c.id);
      }
      line += " [" + head->id + "] " + (same ? "" : "e.g. ") + Join(head->evidence, "; ");
      if (!also.empty()) line += " (also: " + Join(also, ", ") + ")";
      std::vector<std::string> impacts;
      for (const Change& c : g.changes)
        if (!c.impact.empty() && std::find(impacts.begin(), impacts.end(), c.impact) == impacts.end())
          impacts.push_back(c.impact);
      if (!impacts.empty()) line += "; " + Join(impacts, "; ");
      if (const CauseInfo* info = FindCause(head->id)) line += "; fix: " + std::string(info->fix);
    }
    lines.push_back(Clean(line));
  }
  // The all-good line only where there are pairs: a node with one GPU (or none visible) has nothing to say.
  if (lines.empty() && !prediction.pairs.empty())
    lines.push_back("p2ptrace: all " + std::to_string(prediction.pairs.size()) + " GPU pairs on " + host +
                    " can use NVLink/P2P");  // DESIGN.md §2's wording, even for one pair
  return lines;
}

// --- the preflight block ---------------------------------------------------------------------------

PreflightBlock MakePreflightBlock(const NodeProbe& probe, const Prediction& prediction,
                                  const std::vector<std::string>& warnings) {
  PreflightBlock b;
  b.host = probe.hostname;
  b.boot_id = probe.boot_id;
  b.steps = probe.steps;
  b.warnings = warnings;
  for (const ProbedGpu& g : probe.gpus)
    if (g.index >= 0 && g.index < 100)  // another host's GPUs are numbered from 100 (shim/preflight.cc)
      b.gpus.push_back({g.index, g.bus_id, g.name, g.cuda});
  for (const ProbedPair& p : probe.pairs)
    if (p.a >= 0 && p.a < 100 && p.b >= 0 && p.b < 100 && !p.link.empty()) b.links.push_back({p.a, p.b, p.link});
  for (const PairPrediction& p : prediction.pairs) {
    PreflightPair q;
    q.a = p.a;
    q.b = p.b;
    const ProbedGpu* ga = probe.Gpu(p.a);
    const ProbedGpu* gb = probe.Gpu(p.b);
    if (ga) q.bus_a = ga->bus_id, q.rank_a = ga->rank;
    if (gb) q.bus_b = gb->bus_id, q.rank_b = gb->rank;
    q.link = p.link;
    q.transport = p.transport;
    q.best = p.best;
    q.fallback = p.fallback;
    q.impact = p.impact;
    q.causes = p.causes;
    b.pairs.push_back(std::move(q));
  }
  return b;
}

std::string SerializePreflight(const PreflightBlock& b) {
  std::string out = "p2ptrace-preflight 1\n";
  out += "host\t" + Clean(b.host) + "\n";
  out += "boot_id\t" + Clean(b.boot_id) + "\n";
  for (const ProbeStep& s : b.steps)
    out += "probe\t" + Clean(s.name) + "\t" + Clean(s.source) + "\t" + Clean(s.status) + "\t" + Clean(s.detail) + "\n";
  for (const PreflightGpu& g : b.gpus)
    out += "gpu\t" + std::to_string(g.index) + "\t" + Clean(g.bus_id) + "\t" + Clean(g.name) + "\t" + std::to_string(g.cuda) + "\n";
  for (const PreflightLink& l : b.links)
    out += "link\t" + std::to_string(l.a) + "\t" + std::to_string(l.b) + "\t" + Clean(l.link) + "\n";
  for (const PreflightPair& p : b.pairs) {
    out += "pair\t" + std::to_string(p.a) + "\t" + std::to_string(p.b) + "\t" + Clean(p.bus_a) + "\t" + Clean(p.bus_b) +
           "\t" + Clean(p.link) + "\t" + std::to_string(p.rank_a) + "\t" + std::to_string(p.rank_b) + "\t" +
           std::string(TransportName(p.transport)) + "\t" + std::string(TransportName(p.best)) + "\t" +
           (p.fallback ? "1" : "0") + "\t" + Clean(p.impact) + "\n";
    for (const CauseHit& c : p.causes) {
      out += "cause\t" + Clean(c.id) + "\t" + Clean(c.role);
      for (const std::string& e : c.evidence) out += "\t" + Clean(e);
      out += "\n";
    }
  }
  for (const std::string& w : b.warnings) out += "warning\t" + Clean(w) + "\n";
  return out;
}

Expected<PreflightBlock> ParsePreflight(std::string_view text) {
  constexpr std::string_view kMagic = "p2ptrace-preflight ";
  if (text.substr(0, kMagic.size()) != kMagic) return Error{"not a p2ptrace preflight block (no 'p2ptrace-preflight' line)"};
  size_t nl = text.find('\n');
  int version = ToInt(text.substr(kMagic.size(), nl == std::string_view::npos ? std::string_view::npos : nl - kMagic.size()), -1);
  if (version != 1) return Error{"preflight block version is not 1"};
  PreflightBlock b;
  for (std::string_view line : Split(nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1), '\n')) {
    std::vector<std::string_view> f;
    size_t start = 0;
    for (size_t i = 0; i <= line.size(); ++i)
      if (i == line.size() || line[i] == '\t') {
        f.push_back(line.substr(start, i - start));
        start = i + 1;
      }
    if (f.empty()) continue;
    if (f[0] == "host" && f.size() >= 2) b.host = f[1];
    else if (f[0] == "boot_id" && f.size() >= 2) b.boot_id = f[1];
    else if (f[0] == "probe" && f.size() >= 5) b.steps.push_back({std::string(f[1]), std::string(f[2]), std::string(f[3]), std::string(f[4])});
    else if (f[0] == "link" && f.size() >= 4) b.links.push_back({ToInt(f[1], -1), ToInt(f[2], -1), std::string(f[3])});
    else if (f[0] == "gpu" && f.size() >= 5) b.gpus.push_back({ToInt(f[1], -1), std::string(f[2]), std::string(f[3]), ToInt(f[4], -1)});
    else if (f[0] == "pair" && f.size() >= 12) {
      PreflightPair p;
      p.a = ToInt(f[1], -1);
      p.b = ToInt(f[2], -1);
      p.bus_a = f[3];
      p.bus_b = f[4];
      p.link = f[5];
      p.rank_a = ToInt(f[6], -1);
      p.rank_b = ToInt(f[7], -1);
      p.transport = ParseTransport(f[8]).value_or(P2PTRACE_TRANSPORT_UNKNOWN);
      p.best = ParseTransport(f[9]).value_or(P2PTRACE_TRANSPORT_UNKNOWN);
      p.fallback = f[10] == "1";
      p.impact = f[11];
      b.pairs.push_back(std::move(p));
    } else if (f[0] == "cause" && f.size() >= 3 && !b.pairs.empty()) {
      CauseHit c{std::string(f[1]), std::string(f[2]), {}};
      for (size_t i = 3; i < f.size(); ++i) c.evidence.emplace_back(f[i]);
      b.pairs.back().causes.push_back(std::move(c));
    } else if (f[0] == "warning" && f.size() >= 2) {
      b.warnings.emplace_back(f[1]);
    }
  }
  return b;
}

}  // namespace p2ptrace
