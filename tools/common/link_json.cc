#include "tools/common/link_json.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

json Counters(const std::vector<LinkCounter>& counters) {
  json out = json::object();
  for (const LinkCounter& c : counters) out[c.name] = c.value ? json(*c.value) : json(nullptr);
  return out;
}

json Known(int v) { return v >= 0 ? json(v) : json(nullptr); }

}  // namespace

json LinkHealthJson(const LinkHealth& h) {
  json nvlinks = json::array(), pcie = json::array();
  for (const NvLinkHealth& l : h.nvlinks)
    nvlinks.push_back({{"gpu", l.gpu}, {"link", l.link}, {"up", l.up},
                       {"remote", l.remote.empty() ? json(nullptr) : json(l.remote)}, {"version", Known(l.version)},
                       {"speed_mbps", Known(l.speed_mbps)}, {"counters", Counters(l.counters)}});
  for (const PciePortHealth& p : h.pcie)
    pcie.push_back({{"bus_id", p.bus_id}, {"gpu", Known(p.gpu)}, {"below", p.below}, {"gen", Known(p.gen)},
                    {"max_gen", Known(p.max_gen)}, {"width", Known(p.width)}, {"max_width", Known(p.max_width)},
                    {"counters", Counters(p.counters)}});
  return {{"host", h.host}, {"when", h.when}, {"read_ms", h.read_ms >= 0 ? json(h.read_ms) : json(nullptr)},
          {"nvlinks", nvlinks}, {"pcie", pcie}, {"notes", h.notes}};
}

json LinkChangeJson(const LinkChange& c) {
  bool errors = c.kind == LinkChange::Kind::kErrors;
  return {{"where", c.Where()},
          {"what", c.What()},
          {"kind", errors ? "errors" : "downtrained"},
          {"nvlink", c.nvlink},
          {"gpu", Known(c.gpu)},
          {"link", c.nvlink ? json(c.link) : json(nullptr)},
          {"bus_id", c.nvlink ? json(nullptr) : json(c.bus_id)},
          {"counter", errors ? json(c.counter) : json(nullptr)},
          {"before", errors ? json(c.before) : json(nullptr)},
          {"after", errors ? json(c.after) : json(nullptr)},
          {"delta", errors ? json(c.after - c.before) : json(nullptr)},
          {"trained", errors ? json(nullptr) : json(c.trained)},
          {"narrowed_between", c.narrowed_between},
          {"fix", LinkChangeFix(c)}};
}

}  // namespace p2ptrace::cli
