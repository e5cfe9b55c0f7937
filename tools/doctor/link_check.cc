#include "tools/doctor/link_check.h"

#include <map>

#include "fmt/format.h"
#include "probe/link_health.h"
#include "tools/common/link_json.h"

namespace p2ptrace::cli {
namespace {

// "replay 0, recovery 3": a counter summed over links, "-" where no link gave it.
std::string Sums(const std::vector<const std::vector<LinkCounter>*>& lists) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<bool, uint64_t>> sums;  // name → (some link gave it, sum)
  for (const auto* list : lists)
    for (const LinkCounter& c : *list) {
      auto [it, fresh] = sums.emplace(c.name, std::pair<bool, uint64_t>{false, 0});
      if (fresh) order.push_back(c.name);
      if (c.value) it->second = {true, it->second.second + *c.value};
    }
  std::string out;
  for (const std::string& name : order)
    if (sums[name].first) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", name, sums[name].second);
  return out.empty() ? "none given" : out;
}

std::string Trained(const PciePortHealth& p) {
  auto known = [](int v) { return v > 0 ? std::to_string(v) : std::string("?"); };
  return fmt::format("Gen{} x{} (max Gen{} x{})", known(p.gen), known(p.width), known(p.max_gen), known(p.max_width));
}

}  // namespace

LinkCheck CheckLinks(const NodeProbe& probe, const Prediction& prediction) {
  LinkCheck c;
  c.reading = probe::ReadLinkHealth(probe, "now");
  c.unsupported = UnsupportedCounters(c.reading);
  for (const LinkChange& ch : CompareLinkHealth(c.reading, c.reading)) {
    LinkCheck::Downtrained d{ch, {}};
    for (const PairPrediction& p : prediction.pairs) {
      std::optional<LinkRoute> route = RouteOf(p.transport, p.link);
      if (route && (PairCrosses(ch, p.a, p.b, *route, c.reading) || PairCrosses(ch, p.b, p.a, *route, c.reading)))
        d.pairs.push_back(fmt::format("GPU{}-GPU{}", p.a, p.b));
    }
    c.downtrained.push_back(std::move(d));
  }
  return c;
}

nlohmann::json LinkCheckJson(const LinkCheck& c) {
  nlohmann::json downtrained = nlohmann::json::array();
  for (const LinkCheck::Downtrained& d : c.downtrained) {
    nlohmann::json one = LinkChangeJson(d.change);
    one["pairs"] = d.pairs;
    downtrained.push_back(std::move(one));
  }
  return {{"reading", LinkHealthJson(c.reading)}, {"downtrained", downtrained}, {"unsupported", c.unsupported}};
}

void LinkCheckText(const LinkCheck& c, std::ostream& out) {
  const LinkHealth& h = c.reading;
  out << "\nlinks (NVLink and PCIe as they are now; error counts since the driver loaded or the counters were reset):\n";
  std::map<int, std::vector<const NvLinkHealth*>> by_gpu;
  for (const NvLinkHealth& l : h.nvlinks) by_gpu[l.gpu].push_back(&l);
  for (const PciePortHealth& p : h.pcie) {
    if (p.gpu >= 0) {
      auto it = by_gpu.find(p.gpu);
      if (it != by_gpu.end()) {
        int up = 0;
        std::vector<const std::vector<LinkCounter>*> counters;
        std::string nonzero;  // the links that counted errors, each by name
        for (const NvLinkHealth* l : it->second) {
          up += l->up;
          counters.push_back(&l->counters);
          for (const LinkCounter& k : l->counters)
            if (k.value && *k.value > 0) nonzero += fmt::format("; link {} {} {}", l->link, k.name, *k.value);
        }
        out << fmt::format("  GPU{} NVLink: {} up, {} down; errors: {}{}\n", p.gpu, up, it->second.size() - up, Sums(counters),
                           nonzero);
      }
      out << fmt::format("  GPU{} PCIe {}: {}\n", p.gpu, Trained(p), Sums({&p.counters}));
    } else {
      std::string below;
      for (int g : p.below) below += fmt::format("{}GPU{}", below.empty() ? "" : ", ", g);
      out << fmt::format("  bridge {} (above {}) PCIe {}: {}\n", p.bus_id, below, Trained(p), Sums({&p.counters}));
    }
  }
  if (h.nvlinks.empty() && h.pcie.empty()) out << "  no link read\n";
  for (const LinkCheck::Downtrained& d : c.downtrained)
    out << fmt::format("  trained low: {}: {}{}\n", d.change.Where(), d.change.What(),
                       d.pairs.empty() ? "" : fmt::format(" (on the path of {})", fmt::join(d.pairs, ", ")));
  if (!c.unsupported.empty())
    out << fmt::format("  not counted here (unsupported, not zero): {}\n", fmt::join(c.unsupported, "; "));
  for (const std::string& n : h.notes) out << "  " << n << "\n";
  if (h.read_ms >= 0) out << fmt::format("  read in {:.1f} ms\n", h.read_ms);
}

}  // namespace p2ptrace::cli
