// `p2ptrace explain --json` (DESIGN.md §7): the explanation's model as one JSON object.
#include <optional>

#include "core/causes.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "tools/explain/explain.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

// A NET connection's transport read apart (core/nccl_net.h); null for any other transport.
json NetJson(const std::string& transport) {
  std::optional<NetPath> p = ParseNetPath(transport);
  if (!p) return nullptr;
  return {{"network", p->network}, {"nic", p->nic}, {"proxy_rank", p->proxy_rank >= 0 ? json(p->proxy_rank) : json(nullptr)},
          {"gdr", p->gdr}, {"gdr_over_pci", p->gdr_over_pci}, {"shared", p->shared}};
}

void AddTopoJson(const TopoExplanation& t, json& j) {
  const TopoMatrix& m = t.matrix;
  json topo;
  topo["file"] = t.file;
  topo["gpus"] = m.gpus;
  topo["nics"] = json::array();
  for (size_t k = 0; k < m.nics.size(); ++k) topo["nics"].push_back({{"column", m.nics[k]}, {"name", m.NicName(k)}});
  topo["matrix"] = m.cells;
  topo["affinity"] = json::array();
  for (size_t r = 0; r < m.gpus.size(); ++r)
    topo["affinity"].push_back({{"gpu", m.gpus[r]}, {"cpu", m.affinity[r].cpu}, {"numa", m.affinity[r].numa},
                                {"gpu_numa", m.affinity[r].gpu_numa}});
  topo["affinity_columns"] = m.affinity_columns;
  topo["legend"] = m.legend == TopoLegend::kAbsent ? "absent" : m.legend == TopoLegend::kCut ? "cut" : "complete";
  topo["truncated"] = m.truncated;
  topo["notes"] = m.notes;
  topo["annotations"] = m.annotations;
  if (t.p2p) topo["p2p"] = {{"file", t.p2p_file}, {"mode", t.p2p->p2p_mode}, {"matrix", t.p2p->cells}};
  j["topology"] = topo;
  j["assumptions"] = t.assumptions;
  j["nccl_rules"] = fmt::format("{}.{}.{}", t.prediction.rules.major, t.prediction.rules.minor, t.prediction.rules.patch);
  j["predicted"] = json::array();
  for (const PairPrediction& p : t.prediction.pairs) {
    json causes = json::array();
    for (const CauseHit& c : p.causes) {
      const CauseInfo* info = FindCause(c.id);
      causes.push_back({{"id", c.id}, {"role", c.role}, {"evidence", c.evidence},
                        {"severity", info ? SeverityName(info->severity) : "info"},
                        {"title", info ? info->title : ""}, {"fix", info ? info->fix : ""},
                        {"confirm", info ? info->confirm : ""}});
    }
    json alts = json::array();
    for (const Alternative& a : p.alternatives) alts.push_back({{"assumption", a.assumption}, {"class", TransportName(a.transport)}});
    j["predicted"].push_back({{"a", p.a}, {"b", p.b}, {"link", p.link}, {"class", TransportName(p.transport)},
                              {"best", TransportName(p.best)}, {"fallback", p.fallback}, {"init_error", p.init_error},
                              {"p2p_level", p.level}, {"causes", causes}, {"impact", p.impact}, {"depends_on", alts}});
  }
  j["comparison"] = json::array();
  for (const Comparison& c : t.comparisons)
    j["comparison"].push_back({{"src_rank", c.src_rank}, {"dst_rank", c.dst_rank}, {"a", c.a}, {"b", c.b},
                               {"observed", TransportName(c.observed)}, {"predicted", TransportName(c.predicted)},
                               {"agrees", c.agrees}, {"communicator", c.communicator}});
}

}  // namespace

json RenderExplainJson(const Explanation& e) {
  auto num = [](int v) { return v >= 0 ? json(v) : json(nullptr); };
  auto str = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json j;
  j["version"] = 1;
  j["nccl_version"] = str(e.nccl_version);
  j["nccl_versions"] = e.nccl_versions;
  j["files"] = e.files;
  j["ranks"] = json::array();
  for (const Communicator& g : e.communicators)
    for (const ExplainRank& r : g.ranks)
      j["ranks"].push_back({{"rank", r.id.rank}, {"host", r.id.host}, {"pid", num(r.id.pid)},
                            {"cuda_dev", num(r.id.cuda_dev)}, {"nvml_dev", num(r.id.nvml_dev)},
                            {"bus_id", str(r.id.bus_id)}, {"nranks", num(r.id.nranks)}, {"comm", r.id.comm},
                            {"comm_id", str(r.id.comm_id)}, {"communicator", str(r.communicator)},
                            {"parent", str(r.id.parent)}, {"parent_communicator", str(r.id.parent_key)},
                            {"file", r.file},
                            {"line", r.id.complete_line ? r.id.complete_line : r.id.FirstLine()}});
  j["connections"] = json::array();
  for (const ExplainConnection& ec : e.connections) {
    const Connection& c = ec.c;
    j["connections"].push_back(
        {{"comm", str(c.comm)}, {"comm_id", str(ec.comm_id)}, {"communicator", str(ec.communicator)},
         {"attribution", AttributionName(c.attribution)}, {"note", str(c.note)}, {"channel", c.channel},
         {"conn_index", num(c.conn_index)},
         {"src_rank", c.src_rank}, {"dst_rank", num(c.dst_rank)}, {"src_dev", str(c.src_dev)},
         {"dst_dev", str(c.dst_dev)}, {"transport", c.transport}, {"class", TransportName(c.transport_class)},
         {"direction", str(c.direction)}, {"host", str(c.logger.host)}, {"pid", num(c.logger.pid)},
         {"cuda_dev", num(c.logger.cuda_dev)}, {"file", ec.file}, {"line", c.line}, {"net", NetJson(c.transport)}});
  }
  j["net_devices"] = json::array();
  for (const ExplainNetDevice& d : e.net_devices)
    j["net_devices"].push_back({{"network", d.device.network}, {"index", d.device.index}, {"name", str(d.device.name)},
                                {"port", num(d.device.port)}, {"link", str(d.device.link)}, {"flags", d.device.flags},
                                {"interface", str(d.device.interface)}, {"address", str(d.device.address)},
                                {"host", str(d.logger.host)}, {"pid", num(d.logger.pid)}, {"file", d.file},
                                {"line", d.line}});
  j["net"] = json::array();
  for (const NetFinding& n : e.net) {
    json pairs = json::array();
    for (const auto& [src, dst] : n.pairs) pairs.push_back({{"src_rank", src}, {"dst_rank", dst}});
    j["net"].push_back({{"host", str(n.host)}, {"shortfall", NetShortfallText(n.shortfall)}, {"cause", n.cause},
                        {"settled", n.settled}, {"lines", n.lines}, {"pairs", pairs}, {"evidence", n.evidence}});
  }
  j["pairs"] = json::array();
  for (const Communicator& g : e.communicators)
    for (const ExplainPair& p : g.pairs)
      j["pairs"].push_back({{"src_rank", p.src_rank}, {"dst_rank", p.dst_rank}, {"class", TransportName(p.transport_class)},
                            {"transports", p.transports}, {"channels", p.channels}, {"lines", p.lines},
                            {"communicator", str(g.key)}, {"file", str(g.file)}});
  j["refusals"] = json::array();
  for (const SourceLine& r : e.refusals)
    j["refusals"].push_back({{"kind", r.kind}, {"text", r.text}, {"file", r.file}, {"line", r.line},
                             {"host", str(r.logger.host)}, {"pid", num(r.logger.pid)}});
  j["env"] = json::array();
  for (const SourceLine& s : e.env)
    j["env"].push_back({{"text", s.text}, {"file", s.file}, {"line", s.line}, {"host", str(s.logger.host)}});
  j["failures"] = json::array();
  for (const NcclFailure& f : e.failures)
    j["failures"].push_back({{"cause", f.cause}, {"meaning", f.meaning}, {"evidence", f.evidence}, {"lines", f.lines},
                             {"host", str(f.host)}, {"pid", num(f.pid)}});
  j["findings"] = json::array();
  for (const Finding& f : e.findings)
    j["findings"].push_back({{"id", f.id}, {"severity", f.severity}, {"cause", f.cause}, {"pairs", f.pairs},
                             {"evidence", f.evidence}, {"fix", f.fix}, {"title", str(f.title)}});
  if (e.topo) AddTopoJson(*e.topo, j);
  return j;
}

}  // namespace p2ptrace::cli
