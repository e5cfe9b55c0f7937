#include "core/link_health.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>

#include "core/fields.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace {

const NvLinkHealth* LinkHealth::NvLink(int gpu, int link) const {
  for (const NvLinkHealth& l : nvlinks)
    if (l.gpu == gpu && l.link == link) return &l;
  return nullptr;
}

const PciePortHealth* LinkHealth::Port(std::string_view bus_id) const {
  for (const PciePortHealth& p : pcie)
    if (p.bus_id == bus_id) return &p;
  return nullptr;
}

namespace {

// "replay=12,crc_flit=-": "-" is unsupported, never 0.
std::string CountersText(const std::vector<LinkCounter>& counters) {
  std::string out;
  for (const LinkCounter& c : counters)
    out += (out.empty() ? "" : ",") + OneLine(c.name) + "=" + (c.value ? std::to_string(*c.value) : "-");
  return out;
}

std::vector<LinkCounter> ParseCounters(std::string_view text) {
  std::vector<LinkCounter> out;
  for (std::string_view item : Split(text, ',')) {
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    LinkCounter c{std::string(item.substr(0, eq)), std::nullopt};
    std::string_view v = item.substr(eq + 1);
    uint64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec == std::errc() && p == v.data() + v.size()) c.value = n;
    out.push_back(std::move(c));
  }
  return out;
}

std::string IntsText(const std::vector<int>& v) {
  std::string out;
  for (int i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

const LinkCounter* FindCounter(const std::vector<LinkCounter>& counters, std::string_view name) {
  for (const LinkCounter& c : counters)
    if (c.name == name) return &c;
  return nullptr;
}

// Counters that grew from `before` to `after` on one link.
template <typename Fill>
void GrownCounters(const std::vector<LinkCounter>& before, const std::vector<LinkCounter>& after, Fill fill,
                   std::vector<LinkChange>* out) {
  for (const LinkCounter& c : after) {
    const LinkCounter* b = FindCounter(before, c.name);
    if (!c.value || b == nullptr || !b->value || *c.value <= *b->value) continue;
    LinkChange ch;
    fill(ch);
    ch.kind = LinkChange::Kind::kErrors;
    ch.counter = c.name;
    ch.before = *b->value;
    ch.after = *c.value;
    out->push_back(std::move(ch));
  }
}

bool Narrow(const PciePortHealth& p) { return p.width > 0 && p.max_width > 0 && p.width < p.max_width; }
bool Slow(const PciePortHealth& p) { return p.gen > 0 && p.max_gen > 0 && p.gen < p.max_gen; }

std::string Trained(const PciePortHealth& p) {
  std::string out;
  if (Narrow(p)) out = "x" + std::to_string(p.width) + " of x" + std::to_string(p.max_width);
  if (Slow(p)) out += (out.empty() ? "" : ", ") + ("Gen" + std::to_string(p.gen) + " of Gen" + std::to_string(p.max_gen));
  return out;
}

// The speed most up NVLinks of a GPU run at: a link below it trained slow.
int UsualSpeed(const LinkHealth& h, int gpu) {
  std::vector<int> speeds;
  for (const NvLinkHealth& l : h.nvlinks)
    if (l.gpu == gpu && l.up && l.speed_mbps > 0) speeds.push_back(l.speed_mbps);
  if (speeds.empty()) return -1;
  std::sort(speeds.begin(), speeds.end());
  return speeds[speeds.size() / 2];
}

std::string GpuBus(const LinkHealth& h, int gpu) {
  for (const PciePortHealth& p : h.pcie)
    if (p.gpu == gpu) return p.bus_id;
  return "";
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool Contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

std::string SerializeLinkHealth(const LinkHealth& h) {
  std::string out = "p2ptrace-links 1\n";
  out += "host\t" + OneLine(h.host) + "\n";
  out += "when\t" + OneLine(h.when) + "\n";
  if (h.read_ms >= 0) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.3f", h.read_ms);
    out += std::string("read_ms\t") + ms + "\n";
  }
  for (const std::string& n : h.notes) out += "note\t" + OneLine(n) + "\n";
  for (const NvLinkHealth& l : h.nvlinks)
    out += "nvlink\t" + std::to_string(l.gpu) + "\t" + std::to_string(l.link) + "\t" + (l.up ? "up" : "down") + "\t" +
           OneLine(l.remote) + "\t" + std::to_string(l.version) + "\t" + std::to_string(l.speed_mbps) + "\t" +
           CountersText(l.counters) + "\n";
  for (const PciePortHealth& p : h.pcie)
    out += "pcie\t" + OneLine(p.bus_id) + "\t" + std::to_string(p.gpu) + "\t" + IntsText(p.below) + "\t" +
           std::to_string(p.gen) + "\t" + std::to_string(p.max_gen) + "\t" + std::to_string(p.width) + "\t" +
           std::to_string(p.max_width) + "\t" + CountersText(p.counters) + "\n";
  return out;
}

Expected<LinkHealth> ParseLinkHealth(std::string_view text) {
  Expected<std::vector<std::string_view>> records = VersionOneRecords(text, "p2ptrace-links", "link reading");
  if (!records.ok()) return records.error();
  LinkHealth h;
  for (std::string_view line : *records) {
    std::vector<std::string_view> f = TabFields(line);
    if (f[0] == "host" && f.size() >= 2) h.host = f[1];
    else if (f[0] == "when" && f.size() >= 2) h.when = f[1];
    else if (f[0] == "note" && f.size() >= 2) h.notes.emplace_back(f[1]);
    else if (f[0] == "read_ms" && f.size() >= 2) {
      double ms = -1;
      auto [p, ec] = std::from_chars(f[1].data(), f[1].data() + f[1].size(), ms);
      if (ec == std::errc() && ms >= 0) h.read_ms = ms;
    } else if (f[0] == "nvlink" && f.size() >= 8) {
      NvLinkHealth l;
      l.gpu = ToInt(f[1], -1);
      l.link = ToInt(f[2], -1);
      l.up = f[3] == "up";
      l.remote = f[4];
      l.version = ToInt(f[5], -1);
      l.speed_mbps = ToInt(f[6], -1);
      l.counters = ParseCounters(f[7]);
      if (l.gpu >= 0 && l.link >= 0) h.nvlinks.push_back(std::move(l));
    } else if (f[0] == "pcie" && f.size() >= 9) {
      PciePortHealth p;
      p.bus_id = f[1];
      p.gpu = ToInt(f[2], -1);
      for (std::string_view g : Split(f[3], ','))
        if (int i = ToInt(g, -1); i >= 0) p.below.push_back(i);
      p.gen = ToInt(f[4], -1);
      p.max_gen = ToInt(f[5], -1);
      p.width = ToInt(f[6], -1);
      p.max_width = ToInt(f[7], -1);
      p.counters = ParseCounters(f[8]);
      if (!p.bus_id.empty()) h.pcie.push_back(std::move(p));
    }
  }
  return h;
}

std::string LinkChange::Where() const {
  if (nvlink) return "GPU" + std::to_string(gpu) + " NVLink " + std::to_string(link);
  if (gpu >= 0) return "GPU" + std::to_string(gpu) + " PCIe (" + bus_id + ")";
  std::string gpus;
  for (int g : below) gpus += (gpus.empty() ? "GPU" : ", GPU") + std::to_string(g);
  return "PCIe bridge " + bus_id + (gpus.empty() ? "" : " (above " + gpus + ")");
}

std::string LinkChange::What() const {
  if (kind == Kind::kErrors)
    return counter + " +" + std::to_string(after - before) + " (" + std::to_string(before) + " -> " + std::to_string(after) + ")";
  return trained + (narrowed_between ? " (narrowed during the job)" : "") +
         (gen_only ? " (a GPU lowers its PCIe generation when idle: a sign only with a slow pair)" : "");
}

std::vector<LinkChange> CompareLinkHealth(const LinkHealth& before, const LinkHealth& after) {
  std::vector<LinkChange> out;
  for (const NvLinkHealth& l : after.nvlinks) {
    auto fill = [&l](LinkChange& ch) {
      ch.nvlink = true;
      ch.gpu = l.gpu;
      ch.link = l.link;
    };
    if (const NvLinkHealth* b = before.NvLink(l.gpu, l.link)) GrownCounters(b->counters, l.counters, fill, &out);
    const NvLinkHealth* was = before.NvLink(l.gpu, l.link);
    int usual = UsualSpeed(after, l.gpu);
    std::string trained;
    if (!l.up && was != nullptr && was->up) trained = "down";
    else if (l.up && usual > 0 && l.speed_mbps > 0 && l.speed_mbps < usual)
      trained = std::to_string(l.speed_mbps) + " MB/s of the " + std::to_string(usual) + " its other links run at";
    if (!trained.empty()) {
      LinkChange ch;
      fill(ch);
      ch.kind = LinkChange::Kind::kDowntrained;
      ch.trained = trained;
      ch.narrowed_between = was != nullptr && (trained == "down" || was->speed_mbps != l.speed_mbps);
      out.push_back(std::move(ch));
    }
  }
  for (const PciePortHealth& p : after.pcie) {
    const PciePortHealth* b = before.Port(p.bus_id);
    auto fill = [&p](LinkChange& ch) {
      ch.gpu = p.gpu;
      ch.bus_id = p.bus_id;
      ch.below = p.below;
    };
    if (b != nullptr) GrownCounters(b->counters, p.counters, fill, &out);
    // The narrower of the two readings: a link that came back up to width is still one to look at.
    const PciePortHealth& low = b != nullptr && Narrow(*b) && !Narrow(p) ? *b : p;
    if (!Narrow(low) && !Slow(low)) continue;
    LinkChange ch;
    fill(ch);
    ch.kind = LinkChange::Kind::kDowntrained;
    ch.trained = Trained(low);
    ch.narrowed_between = b != nullptr && (b->width != p.width || b->gen != p.gen) && b->width > 0 && p.width > 0;
    ch.gen_only = !Narrow(low) && p.gpu >= 0;
    out.push_back(std::move(ch));
  }
  // A link only `before` read (the exit could not read it) keeps its training's evidence.
  for (const PciePortHealth& p : before.pcie)
    if (after.Port(p.bus_id) == nullptr && Narrow(p)) {
      LinkChange ch;
      ch.kind = LinkChange::Kind::kDowntrained;
      ch.gpu = p.gpu;
      ch.bus_id = p.bus_id;
      ch.below = p.below;
      ch.trained = Trained(p);
      out.push_back(std::move(ch));
    }
  return out;
}

std::optional<LinkRoute> RouteOf(int transport, std::string_view link) {
  switch (transport) {
    case P2PTRACE_TRANSPORT_NVLINK:
    case P2PTRACE_TRANSPORT_NVLS: return LinkRoute::kNvLink;
    case P2PTRACE_TRANSPORT_PCIE_P2P: return LinkRoute::kPcieP2p;
    case P2PTRACE_TRANSPORT_P2P:
      if (link.substr(0, 2) == "NV") return LinkRoute::kNvLink;
      if (!link.empty()) return LinkRoute::kPcieP2p;
      return std::nullopt;
    case P2PTRACE_TRANSPORT_SHM:
    case P2PTRACE_TRANSPORT_HOST_STAGED:
    case P2PTRACE_TRANSPORT_NET_GDR:
    case P2PTRACE_TRANSPORT_NET_IB:
    case P2PTRACE_TRANSPORT_NET_SOCKET:
    case P2PTRACE_TRANSPORT_COLLNET: return LinkRoute::kThroughHost;
    default: return std::nullopt;
  }
}

bool PairCrosses(const LinkChange& c, int a, int b, LinkRoute route, const LinkHealth& reading) {
  if (c.nvlink) {
    if (route != LinkRoute::kNvLink || (c.gpu != a && c.gpu != b)) return false;
    int peer = c.gpu == a ? b : a;
    const NvLinkHealth* l = reading.NvLink(c.gpu, c.link);
    if (l == nullptr || l->remote.empty()) return false;  // where it leads is unknown: charge nobody
    std::string peer_bus = GpuBus(reading, peer);
    bool to_gpu = false;  // the remote end is one of the node's GPUs (else an NVSwitch)
    for (const PciePortHealth& p : reading.pcie)
      if (p.gpu >= 0 && p.bus_id == l->remote) to_gpu = true;
    return to_gpu ? !peer_bus.empty() && l->remote == peer_bus : peer >= 0;
  }
  if (route == LinkRoute::kNvLink) return false;
  bool has_a = Contains(c.below, a), has_b = b >= 0 && Contains(c.below, b);
  if (route == LinkRoute::kPcieP2p) return has_a != has_b;  // below the pair's common bridge: one GPU's side
  return has_a || has_b;
}

std::vector<std::string> UnsupportedCounters(const LinkHealth& h) {
  std::map<std::string, std::pair<int, int>> nvlink, pcie;  // name → (unsupported, read)
  for (const NvLinkHealth& l : h.nvlinks)
    for (const LinkCounter& c : l.counters) ++(c.value ? nvlink[c.name].second : nvlink[c.name].first);
  for (const PciePortHealth& p : h.pcie)
    for (const LinkCounter& c : p.counters) ++(c.value ? pcie[c.name].second : pcie[c.name].first);
  std::vector<std::string> out;
  auto list = [&out](const std::map<std::string, std::pair<int, int>>& m, const char* what, const char* unit) {
    std::map<std::pair<int, int>, std::vector<std::string>> groups;
    for (const auto& [name, n] : m)
      if (n.first > 0) groups[n].push_back(name);
    for (const auto& [n, names] : groups)
      out.push_back(std::string(what) + ", " + (n.second == 0 ? "all " : std::to_string(n.first) + " of ") +
                     std::to_string(n.first + n.second) + " " + unit + ": " + Joined(names));
  };
  list(nvlink, "NVLink", "links");
  list(pcie, "PCIe", "ports");
  return out;
}

std::string LinkChangeFix(const LinkChange& c) {
  if (c.kind == LinkChange::Kind::kErrors) {
    if (c.nvlink)
      return "drain the node and run the vendor's NVLink diagnostics (dcgmi diag -r 3 or the field diagnostic); "
             "a link whose errors keep growing is reseated or its GPU/baseboard replaced: the RMA asks for this "
             "counter's readings with their times (`p2ptrace doctor --json`) and nvidia-bug-report.sh";
    return "reseat the GPU (or the riser/cable of that slot) and check the slot's power and airflow; growing AER or "
           "replay counts after that mean a bad card, riser or switch: the RMA asks for these counts and "
           "`lspci -vvv -s " + c.bus_id + "`";
  }
  if (c.nvlink)
    return "a link that trained slow or went down carries less: reset the GPUs (nvidia-smi -r, idle node) or reboot; "
           "when it comes back the same, reseat or replace (the RMA asks for `nvidia-smi nvlink -s` and -e)";
  return "check `lspci -vvv -s " + c.bus_id + "` LnkSta against LnkCap; a link below its width after a reboot is a "
         "reseat (card, riser, cable) or a bad slot; the RMA asks for both lines";
}

}  // namespace p2ptrace
