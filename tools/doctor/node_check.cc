#include "tools/doctor/node_check.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <ostream>
#include <sstream>

#include "core/causes.h"
#include "core/node_network.h"
#include "core/node_probe.h"
#include "core/printable.h"
#include "core/vocabulary.h"
#include "core/warning_lines.h"
#include "fmt/format.h"
#include "probe/probe.h"
#include "tools/common/json_text.h"
#include "tools/common/output_file.h"
#include "tools/doctor/cuda_loader.h"
#include "tools/doctor/link_check.h"
#include "tools/formats/prometheus.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

// Only handed to the probe once cudaGetDeviceCount found a GPU, so nothing asks a runtime without one.
bool LoadCuda(probe::CudaQueries* q, std::string* why) {
  void* lib = OpenCudaRuntime(why);
  if (lib == nullptr) return false;
  if (!BindCuda(lib, "cudaGetDeviceCount", &q->GetDeviceCount) ||
      !BindCuda(lib, "cudaDeviceGetPCIBusId", &q->DeviceGetPCIBusId) ||
      !BindCuda(lib, "cudaDeviceCanAccessPeer", &q->CanAccessPeer)) {
    *why = "libcudart lacks cudaGetDeviceCount/cudaDeviceGetPCIBusId/cudaDeviceCanAccessPeer";
    return false;
  }
  BindCuda(lib, "cudaDeviceGetP2PAttribute", &q->GetP2PAttribute);
  int n = 0;
  int r = q->GetDeviceCount(&n);  // before n is read: argument order is unspecified
  *why = NoDeviceWhy(r, n);
  return why->empty();
}

std::string_view RoleSeverity(const CauseHit& c) {
  const CauseInfo* info = FindCause(c.id);
  return info ? SeverityName(info->severity) : "info";
}

json CauseJson(const CauseHit& c) {
  const CauseInfo* info = FindCause(c.id);
  return {{"id", c.id}, {"role", c.role}, {"severity", RoleSeverity(c)}, {"evidence", c.evidence},
          {"fix", info ? std::string(info->fix) : ""}, {"confirm", info ? std::string(info->confirm) : ""}};
}

std::string PairName(const PairPrediction& p) {
  return p.b == kOtherNodeGpu ? fmt::format("GPU{}-another node", p.a) : fmt::format("GPU{}-GPU{}", p.a, p.b);
}

// A cause under its pair: id, role, severity and evidence, then (context aside) its fix and how to confirm it.
void CauseText(const CauseHit& c, std::ostream& out) {
  out << fmt::format("      [{}] ({}, {})", c.id, c.role, RoleSeverity(c));
  for (const std::string& e : c.evidence) out << " " << e << ";";
  out << "\n";
  if (c.role == "context") return;
  if (const CauseInfo* info = FindCause(c.id)) {
    out << "        fix: " << info->fix << "\n";
    if (!info->confirm.empty()) out << "        confirm: " << info->confirm << "\n";
  }
}

json NicJson(const NodeProbe::Nic& n) {
  return {{"name", n.name}, {"bus_id", n.bus_id}, {"numa_node", n.pci.numa_node}, {"port_state", n.state},
          {"rate_gbps", n.rate_gbps >= 0 ? json(n.rate_gbps) : json(nullptr)}};
}

json NetworkJson(const NodeNetwork& net) {
  json j = {{"nics", json::array()}, {"peer_memory", net.peer_memory},
            {"dmabuf", {{"possible", net.dmabuf.possible ? json(*net.dmabuf.possible) : json(nullptr)},
                        {"why", net.dmabuf.why}}},
            {"gpus", json::array()}};
  for (const NodeProbe::Nic& n : net.nics) j["nics"].push_back(NicJson(n));
  for (const GpuNetwork& g : net.gpus) {
    const PairPrediction& p = g.to_other_node;
    json causes = json::array();
    for (const CauseHit& c : p.causes) causes.push_back(CauseJson(c));
    j["gpus"].push_back({{"gpu", g.gpu}, {"nic", g.nic}, {"path", g.path},
                         {"pxn_relay", g.pxn_relay >= 0 ? json(g.pxn_relay) : json(nullptr)},
                         {"predicted", TransportName(p.transport)},
                         {"expected", TransportName(p.best)}, {"fallback", p.fallback}, {"causes", causes}});
  }
  return j;
}

// What NCCL does between nodes, as it starts from here: the NICs, GPUDirect RDMA's means, and
// per GPU its NIC and the network path to a GPU elsewhere.
void NetworkText(const NodeNetwork& net, std::ostream& out) {
  out << "\nnetwork (each GPU to a GPU on another node; NCCL pairs a GPU with its nearest NIC):\n";
  if (net.nics.empty()) out << "  no RDMA NIC (/sys/class/infiniband is empty): NCCL would use TCP sockets\n";
  for (const NodeProbe::Nic& n : net.nics)
    out << fmt::format("  {} {} NUMA {}  port 1 {}{}\n", n.name, n.bus_id.empty() ? "(PCI place unknown)" : n.bus_id,
                       n.pci.numa_node, n.state.empty() ? "state unknown" : n.state,
                       n.rate_gbps > 0 ? fmt::format(", {} Gb/s", n.rate_gbps) : "");
  out << "  GPUDirect RDMA: " << net.peer_memory << "; DMA-BUF "
      << (!net.dmabuf.possible ? "not known (" + net.dmabuf.why + ")"
                               : *net.dmabuf.possible ? "possible (" + net.dmabuf.why + ")" : "not possible (" + net.dmabuf.why + ")")
      << "\n";
  for (const GpuNetwork& g : net.gpus) {
    const PairPrediction& p = g.to_other_node;
    out << fmt::format("  GPU{}  {:<8} {:<5} {:<11} expected {:<9}{}{}\n", g.gpu, g.nic.empty() ? "-" : g.nic,
                       g.path.empty() ? "?" : g.path, TransportName(p.transport), TransportName(p.best),
                       p.fallback ? "  FALLBACK" : "",
                       g.pxn_relay >= 0 ? fmt::format("  through GPU{} over NVLink (PXN)", g.pxn_relay) : "");
    for (const CauseHit& c : p.causes)
      if (c.role != "context") CauseText(c, out);
  }
}

int Diagnose(const DoctorOptions& o, std::ostream& out, std::ostream& err) {
  NodeProbe probe = ProbeNode(o);
  Prediction pred = PredictNode(probe);
  NodeNetwork net = NetworkOf(probe);
  LinkCheck links = CheckLinks(probe, pred);
  std::vector<std::string> warnings = probe.gpus.size() >= 2 ? WarningLines(probe, pred) : std::vector<std::string>{};
  std::string host = probe.hostname.empty() ? "this machine" : probe.hostname;
  if (!o.prometheus.empty())
    if (std::string why = WriteFileAtomically(o.prometheus, PrometheusFromDoctor(probe, pred, net, links.reading)); !why.empty()) {
      err << "p2ptrace doctor: " << why << "\n";
      return 2;
    }

  // Findings: one per cause, over the pairs it holds for (context causes are not findings).
  struct Agg {
    std::vector<std::string> pairs, evidence;
  };
  std::map<std::string, Agg> by_cause;
  bool error = false;
  std::vector<const PairPrediction*> judged;
  for (const PairPrediction& p : pred.pairs) judged.push_back(&p);
  for (const GpuNetwork& g : net.gpus) judged.push_back(&g.to_other_node);
  // A link trained narrow now (a lower generation alone is what an idle GPU does: only `--test` tells).
  for (const LinkCheck::Downtrained& d : links.downtrained) {
    if (d.change.gen_only) continue;
    Agg& a = by_cause["link-downtrained"];
    a.pairs.insert(a.pairs.end(), d.pairs.begin(), d.pairs.end());
    a.evidence.push_back(d.change.Where() + ": " + d.change.What());
  }
  for (const PairPrediction* pp : judged) {
    const PairPrediction& p = *pp;
    if (!PairWarns(p)) continue;
    for (const CauseHit& c : p.causes) {
      if (c.role == "context") continue;
      Agg& a = by_cause[c.id];
      a.pairs.push_back(PairName(p));
      for (const std::string& e : c.evidence)
        if (std::find(a.evidence.begin(), a.evidence.end(), e) == a.evidence.end()) a.evidence.push_back(e);
      if (RoleSeverity(c) == "error") error = true;
    }
  }

  if (o.json) {
    json j = {{"version", 1}, {"host", probe.hostname}, {"boot_id", probe.boot_id}, {"sysroot", probe.sysroot}};
    j["gpus"] = json::array();
    for (const ProbedGpu& g : probe.gpus)
      j["gpus"].push_back({{"index", g.index}, {"cuda", g.cuda}, {"name", g.name}, {"bus_id", g.bus_id},
                           {"numa_node", g.numa_node}, {"iommu_group", g.iommu_group},
                           {"pcie", {{"gen", g.pcie.gen}, {"width", g.pcie.width}, {"max_gen", g.pcie.max_gen},
                                     {"max_width", g.pcie.max_width}}},
                           {"mig", g.mig ? json(*g.mig) : json(nullptr)}, {"bridges", g.bridges}});
    j["pairs"] = json::array();
    for (const PairPrediction& p : pred.pairs) {
      json causes = json::array();
      for (const CauseHit& c : p.causes) causes.push_back(CauseJson(c));
      j["pairs"].push_back({{"a", p.a}, {"b", p.b}, {"link", p.link}, {"predicted", TransportName(p.transport)},
                            {"expected", TransportName(p.best)}, {"fallback", p.fallback}, {"level", p.level},
                            {"impact", p.impact}, {"causes", causes}});
    }
    j["network"] = NetworkJson(net);
    j["links"] = LinkCheckJson(links);
    j["findings"] = json::array();
    for (const auto& [id, a] : by_cause) {
      const CauseInfo* info = FindCause(id);
      j["findings"].push_back({{"id", id}, {"severity", info ? SeverityName(info->severity) : "info"},
                               {"pairs", a.pairs}, {"evidence", a.evidence}, {"fix", info ? std::string(info->fix) : ""}});
    }
    j["probes"] = json::array();
    for (const ProbeStep& s : probe.steps)
      j["probes"].push_back({{"name", s.name}, {"source", s.source}, {"status", s.status}, {"detail", s.detail}});
    j["warnings"] = warnings;
    j["assumptions"] = pred.assumptions;
    if (probe.gpus.empty()) j["no_gpu"] = "no NVIDIA GPU found on " + host;
    out << JsonText(j, 2) << "\n";
    return error ? 1 : 0;
  }

  out << fmt::format("p2ptrace doctor: {}{}\n\n", host, probe.sysroot.empty() ? "" : " (sysroot " + probe.sysroot + ")");
  out << "probes:\n";
  for (const ProbeStep& s : probe.steps) out << fmt::format("  {:<16} {:<9} {}  [{}]\n", s.name, s.status, s.detail, s.source);
  if (probe.gpus.empty()) {
    out << fmt::format("\nno NVIDIA GPU found on {}: nothing to predict (no NVIDIA PCI device, NVML and CUDA as above)\n", host);
    return 0;
  }
  out << "\nGPUs:\n";
  for (const ProbedGpu& g : probe.gpus)
    out << fmt::format("  GPU{} {} {}  PCIe Gen{} x{} (max Gen{} x{}), NUMA {}{}\n", g.index, g.bus_id,
                       g.name.empty() ? "(name unknown)" : g.name, g.pcie.gen, g.pcie.width, g.pcie.max_gen,
                       g.pcie.max_width, g.numa_node, g.mig && *g.mig ? ", MIG on" : "");
  out << "\npairs (predicted path for NCCL; expected = the best the topology allows):\n";
  for (const PairPrediction& p : pred.pairs) {
    out << fmt::format("  GPU{}-GPU{}  {:<5} {:<11} expected {:<9}{}\n", p.a, p.b, p.link.empty() ? "?" : p.link,
                       TransportName(p.transport), TransportName(p.best), p.fallback ? "  FALLBACK" : "");
    for (const CauseHit& c : p.causes) CauseText(c, out);
  }
  NetworkText(net, out);
  LinkCheckText(links, out);
  if (!pred.assumptions.empty()) {
    out << "\nassumed:\n";
    for (const std::string& a : pred.assumptions) out << "  " << a << "\n";
  }
  out << "\nat job start the shim would print:\n";
  for (const std::string& w : warnings) out << "  " << w << "\n";
  return error ? 1 : 0;
}

}  // namespace

NodeProbe ProbeNode(const DoctorOptions& o) {
  probe::ProbeOptions po;
  po.sysroot = o.sysroot;
  po.gpu_processes = o.test;  // the test refuses GPUs in use
  if (po.sysroot.empty())
    if (const char* s = std::getenv("P2PTRACE_SYSROOT")) po.sysroot = s;
  probe::CudaQueries q;
  std::string cuda_why = "not asked (--no-cuda)";
  if (o.cuda && LoadCuda(&q, &cuda_why)) po.cuda = &q;
  NodeProbe probe = probe::GatherNodeProbe(po);
  if (po.cuda == nullptr)
    for (ProbeStep& s : probe.steps)
      if (s.name == "CUDA") s.detail = cuda_why;
  // No NCCL runs here: its rules are the newest release's, and the lines say so.
  probe.nccl_version_note = "no NCCL loaded by doctor: the newest release's rules assumed";
  return probe;
}

int RunDoctor(const DoctorOptions& o, std::ostream& out, std::ostream& err) {
  // Before probing (NVML may take seconds): an unwritable --prometheus target is a usage error.
  if (!o.prometheus.empty())
    if (std::string why = OutputFileProblem(o.prometheus); !why.empty()) {
      err << "p2ptrace doctor: " << why << "\n";
      return 2;
    }
  // The text in one pass through Printable: names and paths come from /sys, /proc and the driver.
  std::ostringstream text;
  int code = Diagnose(o, text, err);
  out << (o.json ? text.str() : Printable(text.str()));
  return code;
}

}  // namespace p2ptrace::cli
