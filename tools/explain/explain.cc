#include "tools/explain/explain.h"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <ostream>
#include <tuple>

#include "core/causes.h"
#include "core/input_file.h"
#include "core/nccl_failures.h"
#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/vocabulary.h"
#include "tools/common/json_text.h"
#include "tools/common/nccl_log_file.h"

// The explanation's model (text.cc and json.cc here render it): communicators, pairs,
// NCCL's own reasons and failures, the topology's prediction compared with the logs.
namespace p2ptrace::cli {

std::string SourceLine::Where() const { return fmt::format("{}:{}", file, line); }

std::string GpuPairName(int a, int b) { return fmt::format("GPU{}-GPU{}", a, b); }

namespace {

// How bad a class is for a GPU pair, worst highest; classes that are not a pair's path rank lowest
// so that they never hide a fallback.
int Badness(int transport_class) {
  switch (transport_class) {
    case P2PTRACE_TRANSPORT_NVLINK: return 1;
    case P2PTRACE_TRANSPORT_PCIE_P2P: return 2;
    case P2PTRACE_TRANSPORT_P2P: return 3;
    case P2PTRACE_TRANSPORT_P2P_INDIRECT: return 4;
    case P2PTRACE_TRANSPORT_SHM: return 5;
    case P2PTRACE_TRANSPORT_HOST_STAGED: return 6;
    case P2PTRACE_TRANSPORT_NET_GDR: return 7;
    case P2PTRACE_TRANSPORT_NET_IB: return 8;
    case P2PTRACE_TRANSPORT_NET_SOCKET: return 9;
    case P2PTRACE_TRANSPORT_UNKNOWN: return -1;
    default: return 0;  // same_device, nvls, collnet
  }
}

// NCCL's refusal kinds name catalog causes (core/causes.h): one fix text for the CLI, report and shim.
std::string FixFor(std::string_view cause) {
  const CauseInfo* c = FindCause(cause);
  return c ? std::string(c->fix) : "";
}

// commId, or a split's key from its parent's (core/nccl_log.h comm_key); else ranks of one size (and
// for a split, one color) are taken as one communicator.
std::string GroupKey(const RankIdentity& r) {
  if (!r.comm_key.empty()) return r.comm_key;
  if (!r.parent.empty() && r.nranks >= 0) return fmt::format("split:nranks={}:color={}", r.nranks, r.color);
  return r.nranks >= 0 ? fmt::format("nranks={}", r.nranks) : "";
}

std::string GroupLabel(const std::string& key, const std::string& file, size_t nranks_seen) {
  if (key.empty())
    return fmt::format("connections in {} that the log does not tie to a communicator (no communicator of the "
                       "process that printed them fits: its Init line is not in the log, or the line has no "
                       "host:pid:tid prefix)", file);
  if (key.starts_with("split:nranks=")) {
    size_t colon = key.find(":color=");
    return fmt::format("split communicator of {} ranks, color {} ({} seen; its parent's Init line is not in the log, "
                       "so split ranks of this size and color are taken as one communicator)",
                       key.substr(13, colon - 13), key.substr(colon + 7), nranks_seen);
  }
  if (key.starts_with("nranks="))
    return fmt::format("communicator of {} ranks ({} seen; this NCCL prints no commId, so ranks of this size are taken "
                       "as one communicator)",
                       key.substr(7), nranks_seen);
  return fmt::format("communicator {} ({} ranks seen)", key, nranks_seen);
}

// A split's key is p2ptrace's (NCCL 2.23+ prints no commId for it): say what it was split from.
std::string SplitNote(const Communicator& g) {
  for (const ExplainRank& r : g.ranks)
    if (!r.id.parent_key.empty() && r.id.comm_id.empty())
      return fmt::format("; {} of {}{}, color {}: NCCL prints no commId for it, the key is p2ptrace's",
                         r.id.api.empty() ? "split" : r.id.api, r.id.parent_key,
                         r.id.split_count >= 0 ? fmt::format(" (split {})", r.id.split_count) : "", r.id.color);
  return "";
}

// Unattributed connections of different files are not assumed to share a communicator.
Communicator& GroupFor(std::vector<Communicator>& groups, const std::string& key, const std::string& file) {
  std::string group_file = key.empty() ? file : "";
  for (Communicator& g : groups)
    if (g.key == key && g.file == group_file) return g;
  groups.push_back(Communicator{key, group_file, "", {}, {}, 0});
  return groups.back();
}

void AddPair(Communicator& g, const Connection& c) {
  auto it = std::find_if(g.pairs.begin(), g.pairs.end(),
                         [&](const ExplainPair& p) { return p.src_rank == c.src_rank && p.dst_rank == c.dst_rank; });
  if (it == g.pairs.end()) {
    g.pairs.push_back(ExplainPair{c.src_rank, c.dst_rank, c.transport_class, {}, {}, 0});
    it = g.pairs.end() - 1;
  }
  if (Badness(c.transport_class) > Badness(it->transport_class)) it->transport_class = c.transport_class;
  if (std::find(it->transports.begin(), it->transports.end(), c.transport) == it->transports.end())
    it->transports.push_back(c.transport);
  it->channels.insert(c.channel);
  ++it->lines;
}

bool SameKind(int observed, int predicted) {
  auto direct = [](int c) {
    return c == P2PTRACE_TRANSPORT_NVLINK || c == P2PTRACE_TRANSPORT_PCIE_P2P || c == P2PTRACE_TRANSPORT_P2P;
  };
  if (direct(observed) && direct(predicted)) return true;  // NCCL's log does not say NVLink or PCIe
  return observed == predicted;
}

// A degraded NET connection group as a finding: its host, what it lacks, the ranks, and the cause
// the host's own lines show, or where to look when they show none.
Finding NetFindingOf(const NetFinding& n) {
  const CauseInfo* info = FindCause(n.cause);
  std::string host = n.host.empty() ? "the host of the unprefixed lines" : n.host;
  Finding f;
  f.id = "nccl-net";
  f.cause = n.cause;
  f.severity = info ? std::string(SeverityName(info->severity)) : "warning";
  f.title = fmt::format("{}: {} ({} connection line{})", host, NetShortfallText(n.shortfall), n.lines,
                        n.lines == 1 ? "" : "s");
  for (const auto& [src, dst] : n.pairs) f.pairs.push_back(fmt::format("rank {} -> rank {}", src, dst));
  f.evidence = n.evidence;
  if (!n.settled) f.evidence.push_back(WhereToLook(n));
  f.fix = info ? std::string(info->fix) : "";
  return f;
}

}  // namespace

Explanation BuildExplanation(const std::vector<ExplainFile>& files) {
  Explanation e;
  for (const ExplainFile& f : files) {
    const NcclLog& log = f.log;
    e.files.push_back(f.path);
    e.lines += log.lines_read;
    e.nccl_lines += log.nccl_lines;
    if (e.nccl_version.empty()) e.nccl_version = log.nccl_version;
    for (const VersionLine& v : log.version_lines) e.nccl_versions.insert(v.version);
    e.warnings += log.warnings.size();
    for (const RankIdentity& r : log.ranks) GroupFor(e.communicators, GroupKey(r), f.path).ranks.push_back({f.path, r, GroupKey(r)});
    for (const Connection& c : log.connections) {
      const RankIdentity* r = log.IdentityOf(c);  // exact even for a comm pointer reused after destroy
      if (c.attribution == Attribution::kAmbiguous) ++e.ambiguous;
      e.connections.push_back({f.path, r ? r->comm_id : "", r ? GroupKey(*r) : "", c});
      Communicator& g = GroupFor(e.communicators, r ? GroupKey(*r) : "", f.path);
      ++g.connection_lines;
      if (c.dst_rank >= 0) AddPair(g, c);
    }
    for (const Refusal& r : log.refusals) e.refusals.push_back({f.path, r.line, r.text, r.logger, r.kind});

    for (const NcclNote& n : log.net_devices)
      if (std::optional<std::vector<NetDevice>> devices = ParseNetDevices(n.text))
        for (NetDevice& d : *devices) e.net_devices.push_back({f.path, n.line, n.logger, std::move(d)});
    for (const EnvSetting& s : log.env)
      e.env.push_back({f.path, s.line, fmt::format("{} set by environment to {}", s.name, s.value), s.logger, ""});
  }
  // NCCL's failures over all files at once: one per cause, and a program's error line counts as
  // explained by another file's WARN line.
  std::vector<NamedNcclLog> named;
  for (const ExplainFile& f : files) named.push_back({f.path, &f.log});
  e.failures = DiagnoseNcclFailures(named);
  e.net = DiagnoseNet(named);
  for (Communicator& g : e.communicators) {
    std::sort(g.ranks.begin(), g.ranks.end(), [](const ExplainRank& a, const ExplainRank& b) {
      return std::tie(a.id.rank, a.id.host, a.id.pid) < std::tie(b.id.rank, b.id.host, b.id.pid);
    });
    std::sort(g.pairs.begin(), g.pairs.end(), [](const ExplainPair& a, const ExplainPair& b) {
      return std::tie(a.src_rank, a.dst_rank) < std::tie(b.src_rank, b.dst_rank);
    });
    g.label = GroupLabel(g.key, g.file, g.ranks.size());
    if (std::string note = SplitNote(g); !note.empty() && g.label.ends_with(")")) g.label.insert(g.label.size() - 1, note);
  }
  // Unattributed connections last.
  std::stable_partition(e.communicators.begin(), e.communicators.end(),
                        [](const Communicator& g) { return !g.key.empty(); });
  // NCCL's own failures first: they are why a job stopped.
  for (const NcclFailure& nf : e.failures) {
    const CauseInfo* info = FindCause(nf.cause);
    Finding f;
    f.id = "nccl-failure";
    f.severity = info ? std::string(SeverityName(info->severity)) : "error";
    f.cause = nf.cause;
    f.evidence = nf.evidence;
    if (nf.lines > nf.evidence.size()) f.evidence.push_back(fmt::format("… {} more line(s)", nf.lines - nf.evidence.size()));
    f.fix = info ? std::string(info->fix) : "";
    e.findings.push_back(std::move(f));
  }
  for (const SourceLine& r : e.refusals) {
    if (r.kind == "no-gdr" && !e.net.empty()) continue;  // the network's findings below name the cause per host
    Finding f;
    f.id = "nccl-refusal";
    f.severity = "warning";
    f.cause = CauseForNcclRefusal(r.kind);
    f.evidence.push_back(fmt::format("{}: {}", r.Where(), r.text));
    f.fix = FixFor(f.cause);
    e.findings.push_back(std::move(f));
  }
  for (const NetFinding& n : e.net) e.findings.push_back(NetFindingOf(n));
  return e;
}

void AddTopology(Explanation& e, TopoExplanation t) {
  t.prediction = Predict(t.facts);
  t.assumptions.insert(t.assumptions.begin(), t.prediction.assumptions.begin(), t.prediction.assumptions.end());
  const std::vector<int>& comm = t.facts.communicator;
  bool mapped_by_rank = false;
  for (const Communicator& g : e.communicators) {
    std::map<int, const RankIdentity*> ids;
    for (const ExplainRank& r : g.ranks) ids[r.id.rank] = &r.id;
    auto gpu_of = [&](int rank) {
      auto it = ids.find(rank);
      if (it != ids.end() && it->second->nvml_dev >= 0) return it->second->nvml_dev;
      int dev = it != ids.end() && it->second->cuda_dev >= 0 ? it->second->cuda_dev : rank;
      if (it == ids.end() || it->second->cuda_dev < 0) mapped_by_rank = true;
      if (comm.empty()) return dev;  // no CUDA_VISIBLE_DEVICES: cudaDev is the matrix index
      return dev >= 0 && static_cast<size_t>(dev) < comm.size() ? comm[static_cast<size_t>(dev)] : -1;
    };
    for (const ExplainPair& p : g.pairs) {
      auto src = ids.find(p.src_rank), dst = ids.find(p.dst_rank);
      if (src != ids.end() && dst != ids.end() && src->second->host != dst->second->host) continue;  // other node
      int a = gpu_of(p.src_rank), b = gpu_of(p.dst_rank);
      if (a < 0 || b < 0 || a == b || t.matrix.GpuColumn(a) < 0 || t.matrix.GpuColumn(b) < 0) continue;
      auto pred = std::find_if(t.prediction.pairs.begin(), t.prediction.pairs.end(), [&](const PairPrediction& q) {
        return q.a == std::min(a, b) && q.b == std::max(a, b);
      });
      if (pred == t.prediction.pairs.end()) continue;
      t.comparisons.push_back({p.src_rank, p.dst_rank, a, b, p.transport_class, pred->transport,
                               SameKind(p.transport_class, pred->transport), g.key});
    }
  }
  if (mapped_by_rank)
    t.assumptions.push_back(comm.empty() ? "ranks whose GPU the log does not print: rank r on GPU r"
                                         : "ranks whose GPU the log does not print: rank r on the r-th GPU of --gpus");
  // One finding per cause, over the pairs it holds for.
  std::map<std::string, Finding> by_cause;
  std::vector<std::string> order;
  for (const PairPrediction& p : t.prediction.pairs)
    for (const CauseHit& c : p.causes) {
      if (c.role == "context") continue;
      const CauseInfo* info = FindCause(c.id);
      auto [it, fresh] = by_cause.try_emplace(c.id);
      if (fresh) {
        order.push_back(c.id);
        it->second.id = c.id;
        it->second.cause = c.id;
        it->second.severity = info ? std::string(SeverityName(info->severity)) : "info";
        it->second.fix = info ? std::string(info->fix) : "";
      }
      it->second.pairs.push_back(GpuPairName(p.a, p.b));
      for (const std::string& ev : c.evidence)
        if (std::find(it->second.evidence.begin(), it->second.evidence.end(), ev) == it->second.evidence.end() &&
            it->second.evidence.size() < 8)
          it->second.evidence.push_back(ev);
    }
  for (const std::string& id : order) e.findings.push_back(by_cause[id]);
  Finding mismatch;
  for (const Comparison& c : t.comparisons)
    if (!c.agrees) {
      mismatch.pairs.push_back(GpuPairName(c.a, c.b));
      mismatch.evidence.push_back(fmt::format("ranks {} -> {}: NCCL used {}, predicted {}", c.src_rank, c.dst_rank,
                                              TransportName(c.observed), TransportName(c.predicted)));
    }
  if (!mismatch.pairs.empty()) {
    mismatch.id = "prediction-mismatch";
    mismatch.cause = "unknown";
    mismatch.severity = "warning";
    mismatch.fix = "tell explain how the job ran (--nccl-version, --cpu-vendor, --gpus, --env), or run `p2ptrace doctor` on "
                   "the node: a modified NCCL, NVML status, containers or IOMMU/ACS can decide what the matrix cannot show";
    e.findings.push_back(std::move(mismatch));
  }
  e.topo = std::move(t);
}

namespace {

constexpr size_t kTopoHeadBytes = 1 << 20;  // a pasted topology is far smaller; logs are streamed

// Streams a file through the NCCL log parser (memory stays what the log keeps, up to
// kMaxNcclLogBytes of it, whatever the file's size) and keeps its head for the topology parser.
// Only a regular file is read (core/input_file.h): a FIFO or /dev/zero would never end.
bool ReadFile(const std::string& path, NcclLog* log, std::string* head, std::string* problem, std::string* partial) {
  NcclLogParser parser;
  Expected<uint64_t> size = ReadInPieces(path, kMaxNcclLogBytes, [&](std::string_view got) {
    if (head->size() < kTopoHeadBytes) head->append(got.substr(0, kTopoHeadBytes - head->size()));
    parser.Feed(got);
  });
  if (!size.ok()) {
    // The message names the file already; the caller names it again in its own prefix.
    std::string_view m = size.error().message;
    std::string why(m.substr(m.rfind(path + ": ", 0) == 0 ? path.size() + 2 : 0));
    *problem = why.rfind("not a regular file", 0) == 0 ? why : "cannot read it (" + why + ")";
    return false;
  }
  if (*size > kMaxNcclLogBytes)
    *partial = fmt::format("only its first {} MiB of {} MiB read", kMaxNcclLogBytes >> 20, *size >> 20);
  parser.Finish();
  *log = parser.log();
  return true;
}

// The flags, checked; false with a one-line message on a bad value.
bool ApplyOptions(const ExplainOptions& o, NodeFacts* f, std::string* problem) {
  for (const std::string& kv : o.env) {
    size_t eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos) {
      *problem = fmt::format("--env '{}': expected NAME=VALUE", kv);
      return false;
    }
    f->env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!o.nccl_version.empty()) {
    f->nccl_version = ParseNcclVersion(o.nccl_version);
    if (!f->nccl_version) {
      *problem = fmt::format("--nccl-version '{}': expected a version such as 2.21.5", o.nccl_version);
      return false;
    }
  }
  if (!o.cpu_vendor.empty()) {
    // intel-bdw: Broadwell or older (NCCL 2.6-2.8 give those a lower P2P level).
    std::string vendor = o.cpu_vendor == "intel-bdw" ? "intel" : o.cpu_vendor;
    auto v = ParseCpuVendor(vendor);
    if (!v) {
      *problem = fmt::format("--cpu-vendor '{}': expected intel, intel-bdw, amd, arm or zhaoxin", o.cpu_vendor);
      return false;
    }
    f->cpu_vendor = *v;
    if (*v == CpuVendor::kIntel && o.cpu_vendor == "intel-bdw") f->intel_pre_skylake = true;
  }
  if (!o.gpus.empty()) {
    std::string_view rest = o.gpus;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      int g = -1;
      auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), g);
      if (ec != std::errc() || p != item.data() + item.size() || g < 0 || f->Gpu(g) == nullptr ||
          std::find(f->communicator.begin(), f->communicator.end(), g) != f->communicator.end()) {
        *problem = fmt::format("--gpus '{}': '{}' is not a GPU of the matrix (or given twice)", o.gpus, item);
        return false;
      }
      f->communicator.push_back(g);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return true;
}

}  // namespace

int RunExplain(const std::vector<std::string>& paths, const ExplainOptions& options, std::ostream& out,
               std::ostream& err) {
  std::vector<ExplainFile> logs;
  std::optional<TopoExplanation> topo;
  std::string p2p_file;
  std::optional<TopoMatrix> p2p;
  for (const std::string& path : paths) {
    ExplainFile f{path, {}};
    std::string head, problem, partial;
    if (!ReadFile(path, &f.log, &head, &problem, &partial)) {
      err << "p2ptrace explain: " << Printable(path + ": " + problem, false) << "\n";
      continue;
    }
    if (!partial.empty()) err << "p2ptrace explain: " << Printable(path + ": " + partial, false) << "\n";
    Expected<TopoText> text = ParseTopoText(head);
    bool is_log = f.log.nccl_lines > 0 || !f.log.connections.empty() || !f.log.results.empty();
    if (text.ok()) {
      if (const TopoMatrix* m = text->Links()) {
        if (topo) err << "p2ptrace explain: " << path << ": a second `nvidia-smi topo -m`; only " << topo->file << "'s is used\n";
        else {
          topo.emplace();
          topo->file = path;
          topo->matrix = *m;
        }
      }
      if (const TopoMatrix* m = text->P2p("r") ? text->P2p("r") : text->P2p("")) {
        if (!p2p) {
          p2p = *m;
          p2p_file = path;
        }
      }
    }
    if (is_log) logs.push_back(std::move(f));
    else if (!text.ok())
      err << "p2ptrace explain: "
          << Printable(path + ": neither an NCCL log (no NCCL_DEBUG=INFO line) nor `nvidia-smi topo` output (" +
                           text.error().message + ")", false)
          << "\n";
  }
  if (logs.empty() && !topo) {
    if (p2p) err << "p2ptrace explain: " << p2p_file << ": a `topo -p2p` matrix needs the `nvidia-smi topo -m` beside it\n";
    err << "p2ptrace explain: nothing to explain in " << paths.size() << " file" << (paths.size() == 1 ? "" : "s") << "\n";
    return 2;
  }
  Explanation e = BuildExplanation(logs);
  if (topo) {
    NodeFacts facts = FactsFromTopo(topo->matrix, p2p ? &*p2p : nullptr);
    std::string problem;
    if (!ApplyOptions(options, &facts, &problem)) {
      err << "p2ptrace explain: " << problem << "\n";
      return 2;
    }
    // What the logs say about the run, where the flags are silent.
    if (!facts.nccl_version && !e.nccl_version.empty() && (facts.nccl_version = ParseNcclVersion(e.nccl_version)))
      topo->assumptions.push_back("NCCL " + e.nccl_version + " from the log");
    for (const ExplainFile& f : logs)
      for (const EnvSetting& s : f.log.env)
        if (facts.env.emplace(s.name, s.value).second)
          topo->assumptions.push_back(fmt::format("{}={} from the log ({}:{})", s.name, s.value, f.path, s.line));
    topo->facts = std::move(facts);
    topo->p2p = p2p;
    topo->p2p_file = p2p_file;
    if (!topo->matrix.gpus.empty()) e.files.insert(e.files.begin(), topo->file);
    AddTopology(e, std::move(*topo));
  } else if (!options.env.empty() || !options.nccl_version.empty() || !options.cpu_vendor.empty() || !options.gpus.empty()) {
    err << "p2ptrace explain: --env/--nccl-version/--cpu-vendor/--gpus apply to `nvidia-smi topo -m` input; none was given\n";
  }
  if (options.json) out << JsonText(RenderExplainJson(e), 2) << "\n";
  else out << Printable(RenderExplainText(e));  // log lines and host names as the files hold them
  return 0;
}

}  // namespace p2ptrace::cli
