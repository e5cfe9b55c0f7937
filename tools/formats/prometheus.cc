#include "tools/formats/prometheus.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"

namespace p2ptrace::cli {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// A label value: valid UTF-8 without control characters (bytes from traces and /sys are untrusted),
// then the text format's escapes for backslash, double quote and line feed.
std::string LabelValue(const std::string& raw) {
  std::string out;
  for (char c : Printable(raw, false)) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// HELP text escapes only backslash and line feed.
std::string HelpText(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// The metric families of one file, in the order declared, each series once: a second sample with
// the same labels adds to a counter's and is dropped for a gauge (it would be a duplicate series,
// which node_exporter refuses).
class Exposition {
 public:
  enum Type { kGauge, kCounter };
  void Family(const std::string& name, Type type, std::string help) {
    families_.push_back({name, type, std::move(help), {}, {}});
  }
  void Sample(const std::string& name, const Labels& labels, double value) { Add(name, labels, value, 0, false); }
  void Count(const std::string& name, const Labels& labels, uint64_t value) { Add(name, labels, 0, value, true); }

  std::string Text() const {
    std::string out;
    for (const Fam& f : families_) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, HelpText(f.help), f.name,
                         f.type == kCounter ? "counter" : "gauge");
      for (const Series& s : f.series)
        out += fmt::format("{}{} {}\n", f.name, s.labels,
                           s.integer ? fmt::format("{}", s.u) : fmt::format("{}", s.d));
    }
    return out;
  }

 private:
  struct Series {
    std::string labels;
    bool integer = false;
    uint64_t u = 0;
    double d = 0;
  };
  struct Fam {
    std::string name;
    Type type;
    std::string help;
    std::vector<Series> series;
    std::map<std::string, size_t> index;
  };

  void Add(const std::string& name, const Labels& labels, double d, uint64_t u, bool integer) {
    if (!integer && !std::isfinite(d)) return;
    Fam* fam = nullptr;
    for (Fam& f : families_)
      if (f.name == name) fam = &f;
    if (fam == nullptr) return;
    std::string text;
    for (const auto& [k, v] : labels) {
      if (v.empty()) continue;  // an empty value is the same series as no label at all
      text += fmt::format("{}{}=\"{}\"", text.empty() ? "{" : ",", k, LabelValue(v));
    }
    if (!text.empty()) text += "}";
    auto [it, fresh] = fam->index.emplace(text, fam->series.size());
    if (fresh) {
      fam->series.push_back(Series{text, integer, u, d});
      return;
    }
    if (fam->type != kCounter) return;
    Series& s = fam->series[it->second];
    if (s.integer && integer) s.u += u;
    else s.d = (s.integer ? static_cast<double>(s.u) : s.d) + (integer ? static_cast<double>(u) : d), s.integer = false;
  }

  std::vector<Fam> families_;
};

constexpr const char* kAvailable = "p2ptrace_pair_path_available_info";
constexpr const char* kUsed = "p2ptrace_pair_path_used_info";
constexpr const char* kBytes = "p2ptrace_pair_bytes_total";
constexpr const char* kCalls = "p2ptrace_pair_calls_total";
constexpr const char* kBandwidth = "p2ptrace_pair_bandwidth_bytes_per_second";
constexpr const char* kCollBandwidth = "p2ptrace_pair_collective_bandwidth_bytes_per_second";
constexpr const char* kFallback = "p2ptrace_pair_fallback";
constexpr const char* kLost = "p2ptrace_pair_lost_seconds_total";
constexpr const char* kWithoutP2p = "p2ptrace_node_pairs_without_p2p";
constexpr const char* kGpus = "p2ptrace_node_gpus";
constexpr const char* kLinkIncrease = "p2ptrace_link_error_count_increase";
constexpr const char* kLinkErrors = "p2ptrace_link_errors_total";
constexpr const char* kLinkDowntrained = "p2ptrace_link_downtrained";
constexpr const char* kPairLink = "p2ptrace_pair_link_degraded";

// The HELP texts are the same whichever command writes the file: node_exporter refuses one metric
// name with two HELP texts, and a node may hold doctor's file and a job's side by side.
void DeclareFamilies(Exposition& x, bool job) {
  x.Family(kAvailable, Exposition::kGauge,
           "The path class a directional GPU pair can use (1; the class as a label): source=\"doctor\" the path "
           "predicted for NCCL by probing the node, source=\"job\" the best class the node allowed the job "
           "(the report's expected). No sample where it is not known.");
  if (job) {
    x.Family(kUsed, Exposition::kGauge,
             "The path class a directional GPU pair's traffic took in the job (1; the class and the API, cuda "
             "copies or nccl, as labels).");
    x.Family(kBytes, Exposition::kCounter,
             "Bytes the job moved over the pair, by API and path class: api=\"cuda\" its cross-device copies, "
             "api=\"nccl\" its ncclSend calls to that peer (collectives are not split per pair).");
    x.Family(kCalls, Exposition::kCounter,
             "Calls the job made over the pair (CUDA cross-device copies, ncclSend calls), by API and path class.");
    x.Family(kBandwidth, Exposition::kGauge,
             "Measured bandwidth of the pair's timed calls in bytes per second (bytes over their measured time). "
             "No sample where no call was timed, or where the figure is above what any link or memory moves.");
    x.Family(kCollBandwidth, Exposition::kGauge,
             "Bandwidth a GPU pair carried inside NCCL ring collectives in bytes per second, timed on the GPU by "
             "NCCL's kernel timers (the bytes its ring hop carries by nccl-tests' bus bandwidth rule over the "
             "kernels' time). A pipelined ring moves at its slowest hop's pace: bounded=\"1\" marks a pair held "
             "back by a slower hop of its ring. No sample where no collective was timed.");
  }
  x.Family(kFallback, Exposition::kGauge,
           "1 per cause when the pair takes a worse path than the node allows (the cause id as label, \"unknown\" "
           "when none was found); 0, without a cause, when it does not.");
  if (job)
    x.Family(kLost, Exposition::kCounter,
             "Seconds the job lost to the pair's fallback against the expected path's bandwidth; 0 for a pair on "
             "its expected path; no sample where it cannot be computed (no timed calls).");
  x.Family(kWithoutP2p, Exposition::kGauge,
           "Directional GPU pairs of the host (both directions counted) whose available path class is not direct "
           "P2P: source=\"doctor\" every pair of the node, source=\"job\" the pairs the job used whose available "
           "class is known.");
  if (!job)
    x.Family(kGpus, Exposition::kGauge,
             "GPUs doctor found on the host (NVML, else the PCI devices): 0 pairs without P2P on a host whose GPUs "
             "vanished is told apart by this.");
}

std::string Index(int gpu) { return gpu >= 0 ? std::to_string(gpu) : ""; }

void DeclareLinkFamilies(Exposition& x, bool job) {
  x.Family(kLinkDowntrained, Exposition::kGauge,
           "1 for a link trained below what it can do (a PCIe port below its maximum width or generation, an "
           "NVLink down or slower than its GPU's others), with what it trained to as `trained`; no sample for a "
           "link at full width.");
  if (job) {
    x.Family(kLinkIncrease, Exposition::kGauge,
             "How much a link's error counter grew between the job's start and exit readings (NVLink: replay, "
             "recovery, crc_flit, crc_data or NVLink 5's counters; PCIe: replay, aer_*). No sample for a counter "
             "that did not move or that the node does not give.");
    x.Family(kPairLink, Exposition::kGauge,
             "1 per cause when a directional GPU pair ran below its class's rate while a link it crosses counted "
             "errors (link-errors) or trained low (link-downtrained).");
  } else {
    x.Family(kLinkErrors, Exposition::kCounter,
             "doctor: a link's error counter as NVML or the kernel gives it now (NVLink: replay, recovery, "
             "crc_flit, crc_data or NVLink 5's counters; PCIe: replay, aer_*). No sample for a counter the node "
             "does not give: unsupported is not 0.");
  }
}

// The labels naming a link: the host, the GPU, the NVLink's number or the PCIe port's bus id.
Labels LinkLabels(const std::string& host, bool nvlink, int gpu, int link, const std::string& bus_id) {
  return {{"host", host}, {"gpu", Index(gpu)}, {"nvlink", nvlink ? std::to_string(link) : ""},
          {"pci_bus_id", nvlink ? "" : NvidiaSmiBusId(bus_id)}};
}

void DowntrainedSamples(Exposition& x, const std::string& host, const std::vector<LinkChange>& changes) {
  for (const LinkChange& c : changes)
    if (c.kind == LinkChange::Kind::kDowntrained) {
      Labels l = LinkLabels(host, c.nvlink, c.gpu, c.link, c.bus_id);
      l.push_back({"trained", c.trained});
      x.Sample(kLinkDowntrained, l, 1);
    }
}

// 1 per cause of `pair` under `name` (context explains, it does not cause: left out), or one
// cause="unknown" when none is left.
void CauseSamples(Exposition& x, const char* name, const Labels& pair, const std::vector<CauseHit>& causes) {
  bool any = false;
  for (const CauseHit& c : causes) {
    if (c.role == "context") continue;
    Labels l = pair;
    l.push_back({"cause", c.id});
    x.Sample(name, l, 1);
    any = true;
  }
  if (!any) {
    Labels l = pair;
    l.push_back({"cause", "unknown"});
    x.Sample(name, l, 1);
  }
}

constexpr const char* kNicActive = "p2ptrace_nic_port_active";
constexpr const char* kNicRate = "p2ptrace_nic_line_rate_bytes_per_second";
constexpr const char* kGdrMeans = "p2ptrace_node_gpudirect_rdma_means";
constexpr const char* kGpuNetPath = "p2ptrace_gpu_network_path_info";
constexpr const char* kGpuNetFallback = "p2ptrace_gpu_network_fallback";

void DeclareNetworkFamilies(Exposition& x) {
  x.Family(kNicActive, Exposition::kGauge,
           "doctor: 1 when the RDMA NIC's first port is ACTIVE, 0 otherwise (the state as a label); no sample where "
           "the state was not read. No active port: NCCL's network runs over TCP sockets.");
  x.Family(kNicRate, Exposition::kGauge, "doctor: the RDMA NIC's first port's line rate (ports/1/rate) in bytes per second.");
  x.Family(kGdrMeans, Exposition::kGauge,
           "doctor: 1 per way the NIC can reach GPU memory here (means=\"peer_memory\": nvidia_peermem loaded; "
           "means=\"dmabuf\": Linux 5.12+ with the open GPU kernel modules), 0 when absent; no sample where not known.");
  x.Family(kGpuNetPath, Exposition::kGauge,
           "doctor: per GPU the path class NCCL would take to a GPU on another node (1; the class, the NIC NCCL pairs "
           "the GPU with and the PCIe path between them as labels).");
  x.Family(kGpuNetFallback, Exposition::kGauge,
           "doctor: 1 per cause when a GPU's network path is worse than the node's NICs allow (no GPUDirect RDMA, "
           "sockets); 0, without a cause, when it is not.");
}

void NetworkSamples(Exposition& x, const NodeProbe& probe, const NodeNetwork& net) {
  const std::string& host = probe.hostname;
  for (const NodeProbe::Nic& n : net.nics) {
    Labels l = {{"source", "doctor"}, {"host", host}, {"nic", n.name}, {"pci_bus_id", n.bus_id.empty() ? "" : NvidiaSmiBusId(n.bus_id)}};
    if (!n.state.empty()) {
      Labels s = l;
      s.push_back({"state", n.state});
      x.Sample(kNicActive, s, n.state == "ACTIVE" ? 1 : 0);
    }
    if (n.rate_gbps > 0) x.Sample(kNicRate, l, n.rate_gbps * 1e9 / 8);
  }
  if (!net.nics.empty()) {
    x.Sample(kGdrMeans, {{"source", "doctor"}, {"host", host}, {"means", "peer_memory"}}, probe.peermem_loaded ? 1 : 0);
    if (net.dmabuf.possible)
      x.Sample(kGdrMeans, {{"source", "doctor"}, {"host", host}, {"means", "dmabuf"}}, *net.dmabuf.possible ? 1 : 0);
  }
  for (const GpuNetwork& g : net.gpus) {
    const ProbedGpu* gpu = probe.Gpu(g.gpu);
    Labels l = {{"source", "doctor"}, {"host", host}, {"gpu", std::to_string(g.gpu)},
                {"pci_bus_id", gpu ? NvidiaSmiBusId(gpu->bus_id) : ""}};
    const PairPrediction& p = g.to_other_node;
    if (p.transport != 0) {
      Labels c = l;
      c.push_back({"class", std::string(TransportName(p.transport))});
      c.push_back({"nic", g.nic});
      c.push_back({"pcie_path", g.path});
      x.Sample(kGpuNetPath, c, 1);
    }
    if (p.fallback) CauseSamples(x, kGpuNetFallback, l, p.causes);
    else x.Sample(kGpuNetFallback, l, 0);
  }
}

constexpr const char* kTestBandwidth = "p2ptrace_pair_test_bandwidth_bytes_per_second";
constexpr const char* kTestExpected = "p2ptrace_pair_test_expected_bandwidth_bytes_per_second";
constexpr const char* kTestLatency = "p2ptrace_pair_test_latency_seconds";
constexpr const char* kTestVerdict = "p2ptrace_pair_test_verdict_info";
constexpr const char* kTestFailure = "p2ptrace_pair_test_failure";
constexpr const char* kTestDataOk = "p2ptrace_pair_test_data_ok";
constexpr const char* kTestFailed = "p2ptrace_node_test_failed_pairs";
constexpr const char* kTestTime = "p2ptrace_node_test_timestamp_seconds";

void DeclareTestFamilies(Exposition& x) {
  x.Family(kTestBandwidth, Exposition::kGauge,
           "doctor --test: a directional GPU pair's measured copy bandwidth in bytes per second: "
           "direction=\"one_way\" and \"both_ways\" (summed) with peer access on, \"staged\" through pinned host "
           "memory; class is what the copies took. No sample where it was not measured.");
  x.Family(kTestExpected, Exposition::kGauge,
           "doctor --test: the low end of what the pair's class should give (the catalog's figure; the pair "
           "passes at 80% of it). No sample where the class has no figure.");
  x.Family(kTestLatency, Exposition::kGauge, "doctor --test: one 8-byte peer copy's time in seconds, averaged over 20.");
  x.Family(kTestVerdict, Exposition::kGauge,
           "doctor --test: the pair's verdict as a label (pass, fail, expected: the node rules P2P out for it, "
           "untested: a GPU of the pair hung earlier), value 1.");
  x.Family(kTestFailure, Exposition::kGauge, "doctor --test: 1 per cause of a failed pair (\"unknown\" when none was found).");
  x.Family(kTestDataOk, Exposition::kGauge, "doctor --test: 1 when the destination held what was sent, 0 when it differed.");
  x.Family(kTestFailed, Exposition::kGauge, "doctor --test: directional GPU pairs that failed.");
  x.Family(kTestTime, Exposition::kGauge,
           "doctor --test: when the test ran, Unix time in seconds (alert on its age: a node not tested lately).");
}

}  // namespace

std::string NvidiaSmiBusId(const std::string& bus_id) {
  std::string n = NormalizeBusId(bus_id);  // "0000:1a:00.0"
  if (n.empty()) return bus_id;
  std::string out = "0000" + n;
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string PrometheusFromDoctor(const NodeProbe& probe, const Prediction& pred, const NodeNetwork& net,
                                 const LinkHealth& links) {
  Exposition x;
  DeclareFamilies(x, false);
  DeclareNetworkFamilies(x);
  const std::string& host = probe.hostname;  // whole, as the report names hosts
  int without = 0;
  for (const PairPrediction& p : pred.pairs) {
    const ProbedGpu* a = probe.Gpu(p.a);
    const ProbedGpu* b = probe.Gpu(p.b);
    // Both directions, as the report lists pairs: the prediction holds for either.
    for (auto [src, dst] : {std::pair{a, b}, std::pair{b, a}}) {
      int si = src == a ? p.a : p.b, di = src == a ? p.b : p.a;
      Labels pair = {{"source", "doctor"}, {"host", host},
                     {"src_gpu", Index(si)}, {"src_pci_bus_id", src ? NvidiaSmiBusId(src->bus_id) : ""},
                     {"dst_gpu", Index(di)}, {"dst_pci_bus_id", dst ? NvidiaSmiBusId(dst->bus_id) : ""}};
      if (p.transport != 0) {
        Labels l = pair;
        l.push_back({"class", std::string(TransportName(p.transport))});
        l.push_back({"link", p.link});
        x.Sample(kAvailable, l, 1);
        if (!IsDirect(p.transport)) ++without;
      }
      if (!p.fallback) {
        x.Sample(kFallback, pair, 0);
        continue;
      }
      CauseSamples(x, kFallback, pair, p.causes);
    }
  }
  x.Sample(kWithoutP2p, {{"source", "doctor"}, {"host", host}}, without);
  x.Sample(kGpus, {{"source", "doctor"}, {"host", host}}, static_cast<double>(probe.gpus.size()));
  NetworkSamples(x, probe, net);
  DeclareLinkFamilies(x, false);
  for (const NvLinkHealth& l : links.nvlinks)
    for (const LinkCounter& c : l.counters)
      if (c.value) {
        Labels lab = LinkLabels(host, true, l.gpu, l.link, "");
        lab.push_back({"counter", c.name});
        x.Count(kLinkErrors, lab, *c.value);
      }
  for (const PciePortHealth& p : links.pcie)
    for (const LinkCounter& c : p.counters)
      if (c.value) {
        Labels lab = LinkLabels(host, false, p.gpu, -1, p.bus_id);
        lab.push_back({"counter", c.name});
        x.Count(kLinkErrors, lab, *c.value);
      }
  DowntrainedSamples(x, host, CompareLinkHealth(links, links));
  return x.Text();
}

std::string PrometheusFromTest(const NodeProbe& probe, const std::vector<JudgedPair>& pairs, double unix_seconds) {
  Exposition x;
  DeclareTestFamilies(x);
  const std::string& host = probe.hostname;
  int failed = 0;
  for (const JudgedPair& j : pairs) {
    const PairMeasurement& m = j.measured;
    const ProbedGpu* a = probe.Gpu(m.src);
    const ProbedGpu* b = probe.Gpu(m.dst);
    Labels pair = {{"source", "test"}, {"host", host},
                   {"src_gpu", Index(m.src)}, {"src_pci_bus_id", a ? NvidiaSmiBusId(a->bus_id) : ""},
                   {"dst_gpu", Index(m.dst)}, {"dst_pci_bus_id", b ? NvidiaSmiBusId(b->bus_id) : ""}};
    Labels verdict = pair;
    verdict.push_back({"verdict", j.verdict.verdict});
    x.Sample(kTestVerdict, verdict, 1);
    if (!m.tested) continue;
    Labels cls = pair;
    cls.push_back({"class", std::string(TransportName(j.verdict.transport))});
    for (auto [direction, gbps] : {std::pair{"one_way", m.gbps}, std::pair{"both_ways", m.bidir_gbps},
                                   std::pair{"staged", m.staged_gbps}}) {
      if (gbps < 0) continue;
      Labels l = direction == std::string("staged") ? pair : cls;
      if (direction == std::string("staged")) l.push_back({"class", "host_staged"});
      l.push_back({"direction", direction});
      x.Sample(kTestBandwidth, l, gbps * 1e9);
    }
    if (j.verdict.expected.low > 0) x.Sample(kTestExpected, cls, j.verdict.expected.low * 1e9);
    if (m.latency_us >= 0) x.Sample(kTestLatency, pair, m.latency_us * 1e-6);
    x.Sample(kTestDataOk, pair, m.data_ok ? 1 : 0);
    if (j.verdict.verdict != "fail") continue;
    ++failed;
    CauseSamples(x, kTestFailure, pair, j.verdict.causes);
  }
  x.Sample(kTestFailed, {{"source", "test"}, {"host", host}}, failed);
  x.Sample(kTestTime, {{"source", "test"}, {"host", host}}, unix_seconds);
  return x.Text();
}

std::string PrometheusFromReport(const Report& report) {
  Exposition x;
  DeclareFamilies(x, true);
  // Per host, each same-host GPU pair (by bus ids): whether any entry's available class is known,
  // and whether any is direct.
  std::map<std::string, std::map<std::pair<std::string, std::string>, std::pair<bool, bool>>> hosts;
  for (const PairEntry& e : report.pairs) {
    Labels pair = {{"source", "job"},
                   {"host", e.src.host},
                   {"src_gpu", Index(e.src.gpu)},
                   {"src_pci_bus_id", NvidiaSmiBusId(e.src.bus_id)},
                   {"dst_host", e.dst.host},
                   {"dst_gpu", Index(e.dst.gpu)},
                   {"dst_pci_bus_id", NvidiaSmiBusId(e.dst.bus_id)},
                   {"api", e.source}};
    Labels used = pair;
    used.push_back({"class", std::string(TransportName(e.transport))});
    if (e.expected != 0) {
      Labels l = pair;
      l.push_back({"class", std::string(TransportName(e.expected))});
      l.push_back({"link", e.link});
      x.Sample(kAvailable, l, 1);
    }
    if (e.src.host == e.dst.host) {
      auto& known = hosts[e.src.host][{e.src.bus_id, e.dst.bus_id}];
      if (e.expected != 0) known.first = true;
      if (IsDirect(e.expected)) known.second = true;
    }
    x.Sample(kUsed, used, 1);
    x.Count(kBytes, used, e.bytes);
    x.Count(kCalls, used, e.calls);
    if (e.Gbps() > 0) x.Sample(kBandwidth, used, e.Gbps() * 1e9);  // core/rate.h: never beyond any hardware
    if (e.CollGbps() > 0) {
      Labels l = used;
      l.push_back({"bounded", e.bounded_by.empty() ? "0" : "1"});
      x.Sample(kCollBandwidth, l, e.CollGbps() * 1e9);
    }
    if (!e.fallback) {
      x.Sample(kFallback, used, 0);
      x.Sample(kLost, used, 0);
      continue;
    }
    std::set<std::string> ids;
    for (const Cause& c : e.causes) ids.insert(c.id);
    if (ids.empty()) ids.insert("unknown");
    for (const std::string& id : ids) {
      Labels l = used;
      l.push_back({"cause", id});
      x.Sample(kFallback, l, 1);
    }
    if (e.lost_seconds >= 0) x.Sample(kLost, used, e.lost_seconds);
  }
  DeclareLinkFamilies(x, true);
  for (const PairEntry& e : report.pairs)
    for (const Cause& c : e.causes)
      if (c.SlowedByLink())
        x.Sample(kPairLink, {{"source", "job"}, {"host", e.src.host}, {"src_gpu", Index(e.src.gpu)},
                             {"src_pci_bus_id", NvidiaSmiBusId(e.src.bus_id)}, {"dst_host", e.dst.host},
                             {"dst_gpu", Index(e.dst.gpu)}, {"dst_pci_bus_id", NvidiaSmiBusId(e.dst.bus_id)},
                             {"class", std::string(TransportName(e.transport))}, {"cause", c.id}}, 1);
  for (const Report::HostLinks& h : report.links) {
    std::vector<LinkChange> changes;
    for (const Report::HostLinks::Change& c : h.changes) {
      changes.push_back(c.change);
      if (c.change.kind != LinkChange::Kind::kErrors) continue;
      Labels l = LinkLabels(h.host, c.change.nvlink, c.change.gpu, c.change.link, c.change.bus_id);
      l.push_back({"counter", c.change.counter});
      x.Sample(kLinkIncrease, l, static_cast<double>(c.change.after - c.change.before));
    }
    DowntrainedSamples(x, h.host, changes);
  }
  for (const auto& [host, pairs] : hosts) {
    int known = 0, without = 0;
    for (const auto& [k, v] : pairs) {
      known += v.first;
      without += v.first && !v.second;
    }
    if (known > 0) x.Sample(kWithoutP2p, {{"source", "job"}, {"host", host}}, without);
  }
  return x.Text();
}

}  // namespace p2ptrace::cli
