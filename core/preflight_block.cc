#include "core/preflight_block.h"

#include "core/fields.h"
#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace {

PreflightBlock MakePreflightBlock(const NodeProbe& probe, const Prediction& prediction,
                                  const std::vector<std::string>& warnings) {
  PreflightBlock b;
  b.host = probe.hostname;
  b.boot_id = probe.boot_id;
  b.steps = probe.steps;
  b.warnings = warnings;
  for (const ProbedGpu& g : probe.gpus)
    if (g.index >= 0 && g.index < 100) {  // another host's GPUs are numbered from 100 (shim/preflight.cc)
      PreflightGpu pg{g.index, g.bus_id, g.name, g.cuda};
      for (const NodeProbe::Nic& n : probe.nics)
        if (std::string path = PathBetween(g.Place(), n.pci); !path.empty()) pg.nic_paths.emplace_back(n.name, path);
      b.gpus.push_back(std::move(pg));
    }
  b.nics = probe.nics;
  for (const ProbedPair& p : probe.pairs)
    if (p.a >= 0 && p.a < 100 && p.b >= 0 && p.b < 100 && !p.link.empty()) b.links.push_back({p.a, p.b, p.link});
  for (const PairPrediction& p : prediction.pairs) {
    PreflightPair q;
    static_cast<PairPrediction&>(q) = p;
    const ProbedGpu* ga = probe.Gpu(p.a);
    const ProbedGpu* gb = probe.Gpu(p.b);
    if (ga) q.bus_a = ga->bus_id, q.rank_a = ga->rank;
    if (gb) q.bus_b = gb->bus_id, q.rank_b = gb->rank;
    b.pairs.push_back(std::move(q));
  }
  return b;
}

std::string SerializePreflight(const PreflightBlock& b) {
  std::string out = "p2ptrace-preflight 1\n";
  out += "host\t" + OneLine(b.host) + "\n";
  out += "boot_id\t" + OneLine(b.boot_id) + "\n";
  for (const ProbeStep& s : b.steps)
    out += "probe\t" + OneLine(s.name) + "\t" + OneLine(s.source) + "\t" + OneLine(s.status) + "\t" + OneLine(s.detail) + "\n";
  for (const PreflightGpu& g : b.gpus) {
    std::string paths;  // "mlx5_0=PIX,mlx5_1=SYS"
    for (const auto& [nic, path] : g.nic_paths) paths += (paths.empty() ? "" : ",") + nic + "=" + path;
    out += "gpu\t" + std::to_string(g.index) + "\t" + OneLine(g.bus_id) + "\t" + OneLine(g.name) + "\t" + std::to_string(g.cuda) +
           "\t" + OneLine(paths) + "\n";
  }
  for (const NodeProbe::Nic& n : b.nics)
    out += "nic\t" + OneLine(n.name) + "\t" + OneLine(n.state) + "\t" + std::to_string(n.rate_gbps) + "\n";
  for (const PreflightLink& l : b.links)
    out += "link\t" + std::to_string(l.a) + "\t" + std::to_string(l.b) + "\t" + OneLine(l.link) + "\n";
  for (const PreflightPair& p : b.pairs) {
    out += "pair\t" + std::to_string(p.a) + "\t" + std::to_string(p.b) + "\t" + OneLine(p.bus_a) + "\t" + OneLine(p.bus_b) +
           "\t" + OneLine(p.link) + "\t" + std::to_string(p.rank_a) + "\t" + std::to_string(p.rank_b) + "\t" +
           std::string(TransportName(p.transport)) + "\t" + std::string(TransportName(p.best)) + "\t" +
           (p.fallback ? "1" : "0") + "\t" + OneLine(p.impact) + "\n";
    for (const CauseHit& c : p.causes) {
      out += "cause\t" + OneLine(c.id) + "\t" + OneLine(c.role);
      for (const std::string& e : c.evidence) out += "\t" + OneLine(e);
      out += "\n";
    }
  }
  for (const std::string& w : b.warnings) out += "warning\t" + OneLine(w) + "\n";
  return out;
}

Expected<PreflightBlock> ParsePreflight(std::string_view text) {
  Expected<std::vector<std::string_view>> records = VersionOneRecords(text, "p2ptrace-preflight", "preflight block");
  if (!records.ok()) return records.error();
  PreflightBlock b;
  for (std::string_view line : *records) {
    std::vector<std::string_view> f = TabFields(line);
    if (f[0] == "host" && f.size() >= 2) b.host = f[1];
    else if (f[0] == "boot_id" && f.size() >= 2) b.boot_id = f[1];
    else if (f[0] == "probe" && f.size() >= 5) b.steps.push_back({std::string(f[1]), std::string(f[2]), std::string(f[3]), std::string(f[4])});
    else if (f[0] == "link" && f.size() >= 4) b.links.push_back({ToInt(f[1], -1), ToInt(f[2], -1), std::string(f[3])});
    else if (f[0] == "nic" && f.size() >= 4) b.nics.push_back({std::string(f[1]), std::string(f[2]), ToInt(f[3], -1)});
    else if (f[0] == "gpu" && f.size() >= 5) {
      b.gpus.push_back({ToInt(f[1], -1), std::string(f[2]), std::string(f[3]), ToInt(f[4], -1)});
      if (f.size() >= 6)
        for (std::string_view item : Split(f[5], ','))
          if (size_t eq = item.find('='); eq != std::string_view::npos)
            b.gpus.back().nic_paths.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
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
