#include "tests/sim/common/sim_topology.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/sim/common/sim_links.h"

namespace p2psim {
namespace {

using nlohmann::json;
using p2ptrace::Host;

// Validation failure carrying the field path; caught once in ParseTopology.
struct FieldError {
  std::string field, problem;
};

[[noreturn]] void Fail(const std::string& field, const std::string& problem) {
  throw FieldError{field, problem};
}

const json* Member(const json& obj, const std::string& field, const char* key) {
  if (!obj.is_object()) Fail(field, "must be an object");
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string Str(const json& obj, const std::string& field, const char* key, bool required,
                const std::string& fallback = "") {
  const json* v = Member(obj, field, key);
  if (v == nullptr) {
    if (required) Fail(field + "." + key, "missing");
    return fallback;
  }
  if (!v->is_string()) Fail(field + "." + key, "must be a string");
  return v->get<std::string>();
}

double Num(const json& obj, const std::string& field, const char* key, bool required, double fallback) {
  const json* v = Member(obj, field, key);
  if (v == nullptr) {
    if (required) Fail(field + "." + key, "missing");
    return fallback;
  }
  if (!v->is_number()) Fail(field + "." + key, "must be a number");
  return v->get<double>();
}

int Int(const json& obj, const std::string& field, const char* key, bool required, int fallback) {
  const json* v = Member(obj, field, key);
  if (v == nullptr) {
    if (required) Fail(field + "." + key, "missing");
    return fallback;
  }
  if (!v->is_number_integer()) Fail(field + "." + key, "must be an integer");
  return v->get<int>();
}

bool Bool(const json& obj, const std::string& field, const char* key, bool fallback) {
  const json* v = Member(obj, field, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) Fail(field + "." + key, "must be true or false");
  return v->get<bool>();
}

const json& Array(const json& obj, const std::string& field, const char* key) {
  static const json kEmpty = json::array();
  const json* v = Member(obj, field, key);
  if (v == nullptr) return kEmpty;
  if (!v->is_array()) Fail(field + "." + key, "must be an array");
  return *v;
}

std::string OneOf(const json& obj, const std::string& field, const char* key,
                  std::initializer_list<const char*> allowed, const char* fallback) {
  std::string v = Str(obj, field, key, false, fallback);
  for (const char* a : allowed)
    if (v == a) return v;
  std::string list;
  for (const char* a : allowed) list += std::string(list.empty() ? "" : "|") + a;
  Fail(field + "." + key, "unknown value \"" + v + "\" (expected " + list + ")");
}

bool ValidBusId(const std::string& s) {
  // dddd:bb:dd.f, hex
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11})
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ValidWidth(int w) { return w == 1 || w == 2 || w == 4 || w == 8 || w == 16 || w == 32; }

p2ptrace::PcieLink ParsePcie(const json& p, const std::string& pf) {
  p2ptrace::PcieLink l;
  l.gen = Int(p, pf, "gen", false, 5);
  l.width = Int(p, pf, "width", false, 16);
  l.max_gen = Int(p, pf, "max_gen", false, l.gen);
  l.max_width = Int(p, pf, "max_width", false, l.width);
  if (l.gen < 1 || l.gen > 6) Fail(pf + ".gen", "unknown PCIe generation " + std::to_string(l.gen));
  if (l.max_gen < 1 || l.max_gen > 6) Fail(pf + ".max_gen", "unknown PCIe generation " + std::to_string(l.max_gen));
  for (int w : {l.width, l.max_width})
    if (!ValidWidth(w)) Fail(pf + (w == l.width ? ".width" : ".max_width"), "unknown PCIe width " + std::to_string(w));
  return l;
}

// A count: a non-negative integer, 0 when absent.
uint64_t Count(const json& obj, const std::string& field, const char* key) {
  const json* v = Member(obj, field, key);
  if (v == nullptr) return 0;
  if (!v->is_number_unsigned()) Fail(field + "." + key, "must be a non-negative integer");
  return v->get<uint64_t>();
}

std::string CounterList(int from, int to) {
  std::string list;
  for (int i = from; i < to; ++i)
    list += std::string(list.empty() ? "" : i + 1 == to ? " or " : ", ") + CounterName(static_cast<LinkCounter>(i));
  return list;
}

LinkCounter CounterNamed(const std::string& name, const std::string& field) {
  LinkCounter c;
  if (!ParseCounterName(name, &c))
    Fail(field, "unknown counter \"" + name + "\" (expected " + CounterList(0, kLinkCounters) + ")");
  return c;
}

Aer ParseAer(const json& entry, const std::string& f) {
  Aer aer;
  if (const json* a = Member(entry, f, "aer")) {
    std::string af = f + ".aer";
    if (!a->is_object()) Fail(af, "must be an object");
    aer.correctable = Count(*a, af, "correctable");
    aer.nonfatal = Count(*a, af, "nonfatal");
    aer.fatal = Count(*a, af, "fatal");
  }
  return aer;
}

std::string LinkCountText(const Host& h, int gpu) {
  size_t n = Lanes(h, gpu).size();
  return n == 0 ? "GPU " + std::to_string(gpu) + " has no NVLink"
                : "GPU " + std::to_string(gpu) + " has " + std::to_string(n) + " NVLinks (0.." + std::to_string(n - 1) + ")";
}

// A GPU entry's link-health fields (its NVLinks known: they come after the GPUs).
GpuLinks ParseGpuLinks(const json& gj, const std::string& gf, const Host& h, const p2ptrace::Gpu& g) {
  GpuLinks out;
  out.nvlink_version = Int(gj, gf, "nvlink_version", false, NvLinkGenerationOf(g.name));
  if (out.nvlink_version < 1 || out.nvlink_version > 5)
    Fail(gf + ".nvlink_version", "unknown NVLink generation " + std::to_string(out.nvlink_version) + " (1..5)");
  const json& unsupported = Array(gj, gf, "unsupported_counters");
  for (size_t i = 0; i < unsupported.size(); ++i) {
    std::string uf = gf + ".unsupported_counters[" + std::to_string(i) + "]";
    if (!unsupported[i].is_string()) Fail(uf, "must be a string");
    out.unsupported |= 1u << static_cast<int>(CounterNamed(unsupported[i].get<std::string>(), uf));
  }
  if (const json* c = Member(gj, gf, "counters")) {
    std::string cf = gf + ".counters";
    if (!c->is_object()) Fail(cf, "must be an object");
    for (auto it = c->begin(); it != c->end(); ++it)
      if (it.key() != "pcie_replay" && it.key() != "nvlink")
        Fail(cf + "." + it.key(), "unknown key (expected pcie_replay or nvlink)");
    out.pcie_replay = Count(*c, cf, "pcie_replay");
    const json& links = Array(*c, cf, "nvlink");
    size_t lanes = Lanes(h, g.index).size();
    for (size_t i = 0; i < links.size(); ++i) {
      std::string lf = cf + ".nvlink[" + std::to_string(i) + "]";
      int link = Int(links[i], lf, "link", true, 0);
      if (link < 0 || size_t(link) >= lanes) Fail(lf + ".link", "no link " + std::to_string(link) + ": " + LinkCountText(h, g.index));
      if (out.nvlink.count(link)) Fail(lf + ".link", "link " + std::to_string(link) + " is given twice");
      std::array<uint64_t, kNvLinkCounters> values{};
      for (auto it = links[i].begin(); it != links[i].end(); ++it) {
        if (it.key() == "link") continue;
        LinkCounter k = CounterNamed(it.key(), lf + "." + it.key());
        if (k == LinkCounter::kPcieReplay) Fail(lf + ".pcie_replay", "a PCIe counter: give it as counters.pcie_replay");
        values[static_cast<size_t>(k)] = Count(links[i], lf, it.key().c_str());
      }
      out.nvlink[link] = values;
    }
  }
  out.aer = ParseAer(gj, gf);
  return out;
}

void ParseHostLinks(const json& hj, const std::string& hf, const Host& h, Topology* t) {
  const json& gpus = Array(hj, hf, "gpus");
  for (size_t i = 0; i < gpus.size() && i < h.gpus.size(); ++i)
    t->gpu_links[{h.name, h.gpus[i].index}] = ParseGpuLinks(gpus[i], hf + ".gpus[" + std::to_string(i) + "]", h, h.gpus[i]);
  const json& sws = Array(hj, hf, "switches");
  for (size_t i = 0; i < sws.size() && i < h.switches.size(); ++i) {
    std::string sf = hf + ".switches[" + std::to_string(i) + "]";
    SwitchLinks s;
    s.aer = ParseAer(sws[i], sf);
    if (const json* p = Member(sws[i], sf, "pcie")) {
      s.has_pcie = true;
      s.pcie = ParsePcie(*p, sf + ".pcie");
    }
    t->switch_links[{h.name, h.switches[i].id}] = s;
  }
}

LinkFault ParseLinkFault(const json& j, const std::string& f, const Topology& t) {
  LinkFault lf;
  lf.host = Str(j, f, "host", true);
  const Host* h = t.FindHost(lf.host);
  if (h == nullptr) Fail(f + ".host", "unknown host \"" + lf.host + "\"");
  lf.gpu = Int(j, f, "gpu", true, 0);
  const p2ptrace::Gpu* g = h->FindGpu(lf.gpu);
  if (g == nullptr) Fail(f + ".gpu", "no GPU " + std::to_string(lf.gpu) + " on host " + lf.host);
  const GpuLinks& links = t.LinksOf(*h, lf.gpu);
  if (Member(j, f, "nvlink")) {
    lf.nvlink = Int(j, f, "nvlink", true, 0);
    if (lf.nvlink < 0 || size_t(lf.nvlink) >= Lanes(*h, lf.gpu).size())
      Fail(f + ".nvlink", "no link " + std::to_string(lf.nvlink) + ": " + LinkCountText(*h, lf.gpu));
    for (const char* key : {"pcie_gen", "pcie_width"})
      if (Member(j, f, key)) Fail(f + "." + key, "an NVLink storm (nvlink) cannot also be a PCIe fault; give it its own entry");
    bool nv5 = links.nvlink_version >= 5;
    std::string name = Str(j, f, "counter", false, nv5 ? "effective_errors" : "replay");
    LinkCounter c = CounterNamed(name, f + ".counter");
    if (c == LinkCounter::kPcieReplay) Fail(f + ".counter", "pcie_replay is a PCIe counter; an NVLink storm grows an NVLink one");
    if (nv5 ? IsLegacyNvLinkCounter(c) : IsNvLinkFieldCounter(c))
      Fail(f + ".counter", "\"" + name + "\" is not an NVLink " + std::to_string(links.nvlink_version) + " counter (GPU " +
                               std::to_string(lf.gpu) + "'s: " + (nv5 ? CounterList(4, 9) : CounterList(0, 4)) + ")");
    lf.counter = static_cast<int>(c);
    lf.per_gb = Num(j, f, "per_gb", true, 0);
    if (!(lf.per_gb > 0)) Fail(f + ".per_gb", "must be > 0");
    lf.slowdown = Num(j, f, "slowdown", false, 1);
    if (!(lf.slowdown > 0 && lf.slowdown <= 1)) Fail(f + ".slowdown", "must be > 0 and <= 1");
    return lf;
  }
  lf.pcie_gen = Int(j, f, "pcie_gen", false, 0);
  lf.pcie_width = Int(j, f, "pcie_width", false, 0);
  if (Member(j, f, "pcie_gen") && (lf.pcie_gen < 1 || lf.pcie_gen > g->pcie.gen))
    Fail(f + ".pcie_gen", "must be 1.." + std::to_string(g->pcie.gen) + " (a downtrain from GPU " + std::to_string(lf.gpu) +
                              "'s Gen" + std::to_string(g->pcie.gen) + ")");
  if (Member(j, f, "pcie_width") && (!ValidWidth(lf.pcie_width) || lf.pcie_width > g->pcie.width))
    Fail(f + ".pcie_width", "must be a PCIe width up to " + std::to_string(g->pcie.width) + " (a downtrain from GPU " +
                                std::to_string(lf.gpu) + "'s x" + std::to_string(g->pcie.width) + ")");
  if (Member(j, f, "counter")) {
    std::string name = Str(j, f, "counter", true);
    if (CounterNamed(name, f + ".counter") != LinkCounter::kPcieReplay)
      Fail(f + ".counter", "\"" + name + "\" is an NVLink counter: give the link as \"nvlink\"");
    lf.counter = static_cast<int>(LinkCounter::kPcieReplay);
    lf.per_gb = Num(j, f, "per_gb", true, 0);
    if (!(lf.per_gb > 0)) Fail(f + ".per_gb", "must be > 0");
  }
  if (lf.counter < 0 && lf.pcie_gen == 0 && lf.pcie_width == 0)
    Fail(f, "names no fault (expected nvlink, pcie_gen, pcie_width or counter)");
  return lf;
}

Host ParseHost(const json& h, const std::string& f, std::map<std::string, std::string>* bus_ids) {
  Host host;
  host.name = Str(h, f, "name", true);
  if (host.name.empty()) Fail(f + ".name", "must not be empty");
  host.boot_id = Str(h, f, "boot_id", false, "00000000-0000-0000-0000-" + std::string(12 - std::min<size_t>(12, host.name.size()), '0') + host.name.substr(0, 12));
  host.kernel_cmdline = Str(h, f, "kernel_cmdline", false, "BOOT_IMAGE=/vmlinuz ro quiet");
  host.cpu_vendor = OneOf(h, f, "cpu_vendor", {"intel", "amd", "arm"}, "intel");
  std::string virt = OneOf(h, f, "virtualization", {"none", "passthrough", "vgpu"}, "none");
  host.virtualization = virt == "passthrough" ? p2ptrace::Virtualization::kPassthrough
                        : virt == "vgpu"      ? p2ptrace::Virtualization::kVgpu
                                              : p2ptrace::Virtualization::kNone;
  host.dev_shm_mb = static_cast<long>(Num(h, f, "dev_shm_mb", false, 65536));
  if (host.dev_shm_mb < 0) Fail(f + ".dev_shm_mb", "must not be negative");
  host.shm_device = static_cast<long>(Num(h, f, "shm_device", false, 1));
  host.gdr = Bool(h, f, "gdr", false);
  host.libibverbs = Bool(h, f, "libibverbs", true);
  host.peermem_registered = Bool(h, f, "peermem_registered", true);
  host.dmabuf = Bool(h, f, "dmabuf", false);
  host.config_space_readable = Bool(h, f, "config_space_readable", false);

  std::set<std::string> ids;
  const json& cpus = Array(h, f, "cpus");
  for (size_t i = 0; i < cpus.size(); ++i) {
    std::string cf = f + ".cpus[" + std::to_string(i) + "]";
    std::string id = Str(cpus[i], cf, "id", true);
    if (!ids.insert(id).second) Fail(cf + ".id", "duplicate id \"" + id + "\"");
    host.cpus.push_back(id);
  }
  if (host.cpus.empty()) {  // a host has at least one socket
    host.cpus.push_back("cpu0");
    ids.insert("cpu0");
  }
  const json& sws = Array(h, f, "switches");
  for (size_t i = 0; i < sws.size(); ++i) {
    std::string sf = f + ".switches[" + std::to_string(i) + "]";
    p2ptrace::PcieSwitch sw;
    sw.id = Str(sws[i], sf, "id", true);
    sw.parent = Str(sws[i], sf, "parent", true);
    sw.acs_redirect = Bool(sws[i], sf, "acs_redirect", false);
    if (!ids.insert(sw.id).second) Fail(sf + ".id", "duplicate id \"" + sw.id + "\"");
    host.switches.push_back(sw);
  }
  for (size_t i = 0; i < host.switches.size(); ++i) {
    std::string sf = f + ".switches[" + std::to_string(i) + "]";
    if (host.switches[i].parent == host.switches[i].id) Fail(sf + ".parent", "a switch cannot be its own parent");
    if (!ids.count(host.switches[i].parent))
      Fail(sf + ".parent", "unknown CPU or switch \"" + host.switches[i].parent + "\"");
    if (p2ptrace::PcieAncestors(host, host.switches[i].id).empty())
      Fail(sf + ".parent", "the chain of parents does not reach a CPU (a cycle?)");
  }
  const json& gpus = Array(h, f, "gpus");
  if (gpus.empty()) Fail(f + ".gpus", "a host needs at least one GPU");
  std::set<int> indices;
  for (size_t i = 0; i < gpus.size(); ++i) {
    std::string gf = f + ".gpus[" + std::to_string(i) + "]";
    p2ptrace::Gpu g;
    g.index = Int(gpus[i], gf, "index", true, 0);
    if (g.index < 0) Fail(gf + ".index", "must not be negative");
    if (!indices.insert(g.index).second) Fail(gf + ".index", "duplicate GPU index " + std::to_string(g.index));
    g.name = Str(gpus[i], gf, "name", false, "NVIDIA H100 80GB HBM3");
    g.bus_id = Lower(Str(gpus[i], gf, "bus_id", true));
    if (!ValidBusId(g.bus_id)) Fail(gf + ".bus_id", "\"" + g.bus_id + "\" is not a PCI address like 0000:1a:00.0");
    auto [it, fresh] = bus_ids->emplace(host.name + "/" + g.bus_id, gf);
    if (!fresh) Fail(gf + ".bus_id", "duplicate bus id " + g.bus_id + " (also " + it->second + ")");
    g.parent = Str(gpus[i], gf, "parent", false, host.cpus.front());
    if (!ids.count(g.parent)) Fail(gf + ".parent", "unknown CPU or switch \"" + g.parent + "\"");
    g.mig = Bool(gpus[i], gf, "mig", false);
    g.p2p_regkey_disabled = Bool(gpus[i], gf, "p2p_regkey_disabled", false);
    if (const json* p = Member(gpus[i], gf, "pcie")) {
      g.pcie = ParsePcie(*p, gf + ".pcie");
    } else {
      g.pcie = {5, 16, 5, 16};
    }
    host.gpus.push_back(g);
  }
  const json& links = Array(h, f, "nvlinks");
  for (size_t i = 0; i < links.size(); ++i) {
    std::string lf = f + ".nvlinks[" + std::to_string(i) + "]";
    p2ptrace::NvLink l;
    l.a = Int(links[i], lf, "a", true, 0);
    l.b = Int(links[i], lf, "b", true, 0);
    for (auto [key, v] : {std::pair{"a", l.a}, std::pair{"b", l.b}})
      if (!indices.count(v)) Fail(lf + "." + key, "no GPU " + std::to_string(v) + " on host " + host.name);
    if (l.a == l.b) Fail(lf + ".b", "a GPU cannot link to itself");
    if (host.FindNvLink(l.a, l.b)) Fail(lf, "duplicate NVLink entry for GPUs " + std::to_string(l.a) + " and " + std::to_string(l.b));
    l.links = Int(links[i], lf, "links", false, 1);
    l.active = Int(links[i], lf, "active", false, l.links);
    if (l.links < 1 || l.links > 36) Fail(lf + ".links", "must be 1..36");
    if (l.active < 0 || l.active > l.links) Fail(lf + ".active", "must be 0..links");
    host.nvlinks.push_back(l);
  }
  const json& nics = Array(h, f, "nics");
  for (size_t i = 0; i < nics.size(); ++i) {
    std::string nf = f + ".nics[" + std::to_string(i) + "]";
    p2ptrace::Nic n;
    n.name = Str(nics[i], nf, "name", true);
    n.parent = Str(nics[i], nf, "parent", false, host.cpus.front());
    if (!ids.count(n.parent)) Fail(nf + ".parent", "unknown CPU or switch \"" + n.parent + "\"");
    n.kind = OneOf(nics[i], nf, "kind", {"ib", "roce", "eth"}, "ib");
    n.state = OneOf(nics[i], nf, "state", {"ACTIVE", "DOWN", "INIT"}, "ACTIVE");
    n.rate_gbps = static_cast<int>(Num(nics[i], nf, "rate_gbps", false, n.kind == "ib" ? 200 : 100));
    host.nics.push_back(n);
  }
  return host;
}

template <typename Override>
void CheckPairRef(const Topology& t, const Override& o, const std::string& f) {
  const Host* h = t.FindHost(o.host);
  if (h == nullptr) Fail(f + ".host", "unknown host \"" + o.host + "\"");
  if (!h->FindGpu(o.a)) Fail(f + ".a", "no GPU " + std::to_string(o.a) + " on host " + o.host);
  if (!h->FindGpu(o.b)) Fail(f + ".b", "no GPU " + std::to_string(o.b) + " on host " + o.host);
}

}  // namespace

const Host* Topology::FindHost(const std::string& name) const {
  for (const Host& h : hosts)
    if (h.name == name) return &h;
  return nullptr;
}

const GpuLinks& Topology::LinksOf(const Host& host, int gpu) const {
  static const GpuLinks kNone;
  auto it = gpu_links.find({host.name, gpu});
  return it == gpu_links.end() ? kNone : it->second;
}

const SwitchLinks* Topology::SwitchLinksOf(const Host& host, const std::string& id) const {
  auto it = switch_links.find({host.name, id});
  return it == switch_links.end() ? nullptr : &it->second;
}

bool ParseTopology(const std::string& text, const std::string& path, Topology* out, std::string* error) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    *error = path + ": not valid JSON (byte " + std::to_string(e.byte) + ")";
    return false;
  }
  Topology t;
  t.path = path;
  try {
    if (!doc.is_object()) Fail("(top level)", "must be an object");
    int version = Int(doc, "(top level)", "version", true, 1);
    if (version != 1) Fail("version", "unsupported version " + std::to_string(version) + " (this sim reads version 1)");
    const json& hosts = Array(doc, "(top level)", "hosts");
    if (hosts.empty()) Fail("hosts", "at least one host is required");
    std::map<std::string, std::string> bus_ids;
    for (size_t i = 0; i < hosts.size(); ++i) {
      std::string hf = "hosts[" + std::to_string(i) + "]";
      Host h = ParseHost(hosts[i], hf, &bus_ids);
      if (t.FindHost(h.name)) Fail(hf + ".name", "duplicate host \"" + h.name + "\"");
      ParseHostLinks(hosts[i], hf, h, &t);
      t.hosts.push_back(std::move(h));
    }
    if (const json* bw = Member(doc, "(top level)", "bandwidth_gbps")) {
      Bandwidths& b = t.bandwidth;
      for (auto [key, slot] : {std::pair{"nvlink_per_link", &b.nvlink_per_link}, {"pcie_p2p", &b.pcie_p2p},
                               {"host_staged", &b.host_staged}, {"shm", &b.shm}, {"net_gdr", &b.net_gdr},
                               {"net_ib", &b.net_ib}, {"net_socket", &b.net_socket}}) {
        *slot = Num(*bw, "bandwidth_gbps", key, false, *slot);
        if (!(*slot > 0)) Fail(std::string("bandwidth_gbps.") + key, "must be > 0");
      }
    }
    const json& po = Array(doc, "(top level)", "pair_overrides");
    for (size_t i = 0; i < po.size(); ++i) {
      std::string f = "pair_overrides[" + std::to_string(i) + "]";
      PairOverride o{Str(po[i], f, "host", true), Int(po[i], f, "a", true, 0), Int(po[i], f, "b", true, 0),
                     Num(po[i], f, "gbps", true, 0)};
      CheckPairRef(t, o, f);
      if (!(o.gbps > 0)) Fail(f + ".gbps", "must be > 0");
      t.pair_overrides.push_back(o);
    }
    const json& pa = Array(doc, "(top level)", "peer_access");
    for (size_t i = 0; i < pa.size(); ++i) {
      std::string f = "peer_access[" + std::to_string(i) + "]";
      PeerAccessOverride o{Str(pa[i], f, "host", true), Int(pa[i], f, "a", true, 0), Int(pa[i], f, "b", true, 0),
                           Bool(pa[i], f, "supported", false)};
      if (!Member(pa[i], f, "supported")) Fail(f + ".supported", "missing");
      CheckPairRef(t, o, f);
      t.peer_access.push_back(o);
    }
    const json& cf = Array(doc, "(top level)", "copy_faults");
    for (size_t i = 0; i < cf.size(); ++i) {
      std::string f = "copy_faults[" + std::to_string(i) + "]";
      CopyFault o{Str(cf[i], f, "host", true), Int(cf[i], f, "a", true, 0), Int(cf[i], f, "b", true, 0),
                  Str(cf[i], f, "fault", true)};
      CheckPairRef(t, o, f);
      if (o.a == o.b) Fail(f + ".b", "must differ from a");
      if (o.fault != "corrupt" && o.fault != "hang" && o.fault != "sm-lost")
        Fail(f + ".fault", "\"" + o.fault + "\": expected corrupt, hang or sm-lost");
      t.copy_faults.push_back(o);
    }
    const json& lf = Array(doc, "(top level)", "link_faults");
    for (size_t i = 0; i < lf.size(); ++i)
      t.link_faults.push_back(ParseLinkFault(lf[i], "link_faults[" + std::to_string(i) + "]", t));
    t.time_scale = Num(doc, "(top level)", "time_scale", false, 0);
    if (t.time_scale < 0) Fail("time_scale", "must be >= 0");
  } catch (const FieldError& e) {
    *error = path + ": " + e.field + ": " + e.problem;
    return false;
  } catch (const json::exception& e) {  // e.g. an integer out of range
    *error = path + ": " + e.what();
    return false;
  }
  *out = std::move(t);
  return true;
}

bool LoadTopology(const std::string& path, Topology* out, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot open the topology file";
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseTopology(ss.str(), path, out, error);
}

P2PStatus PeerStatus(const Topology& topo, const Host& host, int a, int b) {
  for (const PeerAccessOverride& o : topo.peer_access)
    if (o.host == host.name && ((o.a == a && o.b == b) || (o.a == b && o.b == a)))
      return o.supported ? P2PStatus::kOk : P2PStatus::kNotSupported;
  const p2ptrace::Gpu* ga = host.FindGpu(a);
  const p2ptrace::Gpu* gb = host.FindGpu(b);
  if (ga == nullptr || gb == nullptr || a == b) return P2PStatus::kNotSupported;
  if (p2ptrace::IsConsumerGpu(ga->name) || p2ptrace::IsConsumerGpu(gb->name)) return P2PStatus::kGpuNotSupported;
  if (ga->mig || gb->mig) return P2PStatus::kNotSupported;
  if (ga->p2p_regkey_disabled || gb->p2p_regkey_disabled) return P2PStatus::kDisabledByRegkey;
  if (host.virtualization != p2ptrace::Virtualization::kNone) return P2PStatus::kChipsetNotSupported;
  p2ptrace::GpuPath path = p2ptrace::ClassifyGpuPath(host, a, b);
  if (path.type == p2ptrace::PathType::kSYS) return P2PStatus::kIohTopologyNotSupported;
  return P2PStatus::kOk;
}

namespace {
// A PCIe link's raw rate, GB/s; an unknown generation counts as Gen5, an unknown width as x16.
double LinkRate(int gen, int width) {
  static constexpr double kPerLane[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.877};  // gen 1..6
  return kPerLane[gen >= 1 && gen <= 6 ? gen : 5] * (width > 0 ? width : 16);
}
}  // namespace

namespace {
double PairBandwidth(const Topology& topo, const Host& host, int a, int b, const p2ptrace::GpuPath& path) {
  for (const PairOverride& o : topo.pair_overrides)
    if (o.host == host.name && ((o.a == a && o.b == b) || (o.a == b && o.b == a))) return o.gbps;
  if (path.type == p2ptrace::PathType::kNVLink) {
    // A bonded set with every link down carries nothing over NVLink; the driver falls back to PCIe.
    if (path.active_links > 0) return path.active_links * topo.bandwidth.nvlink_per_link;
  }
  if (p2ptrace::IommuTranslating(host.kernel_cmdline) || path.acs_redirect) return topo.bandwidth.host_staged;
  // A link that trained below its maximum carries that much less (Gen5 x16 trained at Gen3: a quarter).
  double trained = 1;
  for (int g : {a, b})
    if (host.FindGpu(g) != nullptr) {
      p2ptrace::PcieLink l = CurrentPcie(topo, host, g);
      if (l.max_gen > 0 && l.max_width > 0)
        trained = std::min(trained, LinkRate(l.gen, l.width) / LinkRate(l.max_gen, l.max_width));
    }
  return topo.bandwidth.pcie_p2p * trained;
}
}  // namespace

double DirectBandwidth(const Topology& topo, const Host& host, int a, int b) {
  p2ptrace::GpuPath path = p2ptrace::ClassifyGpuPath(host, a, b);
  double gbps = PairBandwidth(topo, host, a, b, path);
  if (path.type == p2ptrace::PathType::kNVLink && path.active_links > 0 && !topo.link_faults.empty())
    gbps *= StormSlowdown(topo, host, a, b);
  return gbps;
}

double HostDeviceBandwidth(const p2ptrace::Gpu& gpu) { return LinkRate(gpu.pcie.gen, gpu.pcie.width) * 0.85; }

double HostDeviceBandwidth(const Topology& topo, const Host& host, int gpu) {
  p2ptrace::PcieLink l = CurrentPcie(topo, host, gpu);
  return LinkRate(l.gen, l.width) * 0.85;
}

const CopyFault* FindCopyFault(const Topology& topo, const Host& host, int a, int b) {
  for (const CopyFault& f : topo.copy_faults)
    if (f.host == host.name && f.a == a && f.b == b) return &f;
  return nullptr;
}

const Host* SelectHost(const Topology& topo, std::string* error) {
  const char* want = std::getenv("P2PSIM_HOST");
  if (want != nullptr && *want != '\0') {
    if (const Host* h = topo.FindHost(want)) return h;
    *error = topo.path + ": P2PSIM_HOST=" + want + " names no host in the file";
    return nullptr;
  }
  if (topo.hosts.size() == 1) return &topo.hosts.front();
  *error = topo.path + ": the file has " + std::to_string(topo.hosts.size()) +
           " hosts; set P2PSIM_HOST to the one this process is on";
  return nullptr;
}

}  // namespace p2psim
