#include "tools/explain.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <ostream>
#include <tuple>

#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

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

std::string FixFor(const std::string& kind) {
  if (kind == "env-p2p-disabled")
    return "unset NCCL_P2P_DISABLE: it makes NCCL move data between GPUs of one node through host memory (SHM) "
           "or the network";
  if (kind == "env-p2p-level")
    return "P2P level LOC turns P2P off (NCCL <= 2.22 prints NCCL_P2P_DISABLE=1 this way): unset NCCL_P2P_DISABLE "
           "/ NCCL_P2P_LEVEL, or raise the level";
  if (kind == "env-shm-disabled")
    return "unset NCCL_SHM_DISABLE: without SHM, GPUs of one node that cannot use P2P talk over the network";
  if (kind == "env-ib-disabled") return "unset NCCL_IB_DISABLE so that NCCL can use InfiniBand/RoCE instead of TCP sockets";
  if (kind == "env-gdr-disabled") return "unset or raise NCCL_NET_GDR_LEVEL to allow GPUDirect RDMA";
  if (kind == "cuda-no-peer-access" || kind == "cuda-peer-query-failed" || kind == "cuda-peer-enable-failed")
    return "CUDA reports no peer access between these GPUs: check `nvidia-smi topo -p2p r`, the IOMMU/ACS settings, "
           "virtualization, and whether the GPU model allows P2P (consumer GPUs usually do not)";
  if (kind == "nvml-p2p-disabled" || kind == "nvml-p2p-disabled-nvlink")
    return "the driver (NVML) reports P2P disabled between these GPUs: check `nvidia-smi topo -p2p r`; "
           "NCCL_IGNORE_DISABLED_P2P=1 only silences the check";
  if (kind == "legacy-ipc-unsupported")
    return "legacy CUDA IPC is unavailable here (e.g. WSL): let NCCL use cuMem (NCCL_CUMEM_ENABLE=1)";
  if (kind == "collnet-unavailable") return "CollNet/SHARP did not start: check the SHARP plugin and the fabric";
  if (kind == "no-gdr") return "load nvidia_peermem (or use a dmabuf-capable driver) for GPUDirect RDMA";
  return "";
}

std::string Channels(const std::set<int>& channels) {
  std::string out;
  for (auto it = channels.begin(); it != channels.end();) {
    int first = *it, last = first;
    for (++it; it != channels.end() && *it == last + 1; ++it) last = *it;
    if (!out.empty()) out += ",";
    out += first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
  }
  return out;
}

std::string Where(const SourceLine& s) { return fmt::format("{}:{}", s.file, s.line); }

std::string Who(const NcclLogger& l) {
  if (l.host.empty()) return "";
  return l.cuda_dev >= 0 ? fmt::format("  ({} pid {}, cudaDev {})", l.host, l.pid, l.cuda_dev)
                         : fmt::format("  ({} pid {})", l.host, l.pid);
}

std::string GroupKey(const RankIdentity& r) {
  if (!r.comm_id.empty()) return r.comm_id;
  return r.nranks >= 0 ? fmt::format("nranks={}", r.nranks) : "";
}

std::string GroupLabel(const std::string& key, const std::string& file, size_t nranks_seen) {
  if (key.empty())
    return fmt::format("connections in {} that the log does not tie to a communicator (no Init line of their rank)", file);
  if (key.starts_with("nranks="))
    return fmt::format("communicator of {} ranks ({} seen; this NCCL prints no commId, so ranks of this size are taken "
                       "as one communicator)",
                       key.substr(7), nranks_seen);
  return fmt::format("communicator {} ({} ranks seen)", key, nranks_seen);
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
    std::map<std::tuple<std::string, int, std::string>, const RankIdentity*> identity;  // (host, pid, comm)
    for (const RankIdentity& r : log.ranks) {
      GroupFor(e.communicators, GroupKey(r), f.path).ranks.push_back({f.path, r});
      identity[{r.host, r.pid, r.comm}] = &r;  // the latest identity of a reused pointer
    }
    for (const Connection& c : log.connections) {
      auto found = c.comm.empty() ? identity.end() : identity.find({c.logger.host, c.logger.pid, c.comm});
      const RankIdentity* r = found == identity.end() ? nullptr : found->second;
      e.connections.push_back({f.path, r ? r->comm_id : "", c});
      Communicator& g = GroupFor(e.communicators, r ? GroupKey(*r) : "", f.path);
      ++g.connection_lines;
      if (c.dst_rank >= 0) AddPair(g, c);
    }
    for (const Refusal& r : log.refusals) e.refusals.push_back({f.path, r.line, r.text, r.logger, r.kind});
    for (const EnvSetting& s : log.env)
      e.env.push_back({f.path, s.line, fmt::format("{} set by environment to {}", s.name, s.value), s.logger, ""});
  }
  for (Communicator& g : e.communicators) {
    std::sort(g.ranks.begin(), g.ranks.end(), [](const ExplainRank& a, const ExplainRank& b) {
      return std::tie(a.id.rank, a.id.host, a.id.pid) < std::tie(b.id.rank, b.id.host, b.id.pid);
    });
    std::sort(g.pairs.begin(), g.pairs.end(), [](const ExplainPair& a, const ExplainPair& b) {
      return std::tie(a.src_rank, a.dst_rank) < std::tie(b.src_rank, b.dst_rank);
    });
    g.label = GroupLabel(g.key, g.file, g.ranks.size());
  }
  // Unattributed connections last.
  std::stable_partition(e.communicators.begin(), e.communicators.end(),
                        [](const Communicator& g) { return !g.key.empty(); });
  for (const SourceLine& r : e.refusals) {
    Finding f;
    f.id = "nccl-refusal";
    f.severity = "warning";
    f.cause = r.kind;
    f.evidence.push_back(fmt::format("{}: {}", Where(r), r.text));
    f.fix = FixFor(r.kind);
    e.findings.push_back(std::move(f));
  }
  return e;
}

std::string RenderExplainText(const Explanation& e) {
  std::string out = fmt::format("p2ptrace explain: {} file{}, {} lines ({} from NCCL); NCCL {}\n", e.files.size(),
                                e.files.size() == 1 ? "" : "s", e.lines, e.nccl_lines,
                                e.nccl_version.empty() ? "version not printed" : e.nccl_version);
  if (e.nccl_versions.size() > 1) {
    std::string all;
    for (const auto& v : e.nccl_versions) all += (all.empty() ? "" : ", ") + v;
    out += fmt::format("  several NCCL versions printed: {}\n", all);
  }
  for (const Communicator& g : e.communicators) {
    out += fmt::format("\n{}\n", g.label);
    if (!g.ranks.empty()) {
      out += fmt::format("  {:>5}  {:<20} {:>8}  {:>7}  {:>7}  {:<10} {}\n", "rank", "host", "pid", "cudaDev", "nvmlDev",
                         "busId", "comm");
      for (const ExplainRank& r : g.ranks) {
        auto num = [](int v) { return v >= 0 ? fmt::format("{}", v) : std::string("-"); };
        out += fmt::format("  {:>5}  {:<20} {:>8}  {:>7}  {:>7}  {:<10} {}\n", r.id.rank, r.id.host, r.id.pid,
                           num(r.id.cuda_dev), num(r.id.nvml_dev), r.id.bus_id.empty() ? "-" : r.id.bus_id, r.id.comm);
      }
    }
    if (g.pairs.empty()) {
      out += g.connection_lines ? "  no rank pairs (CollNet lines only)\n"
                                : "  no connection lines (NCCL >= 2.22 connects at the first collective that needs them)\n";
      continue;
    }
    out += fmt::format("  {:>10}  {:<12} {:<10} {}\n", "src -> dst", "class", "channels", "NCCL transports");
    for (const ExplainPair& p : g.pairs) {
      std::string transports;
      for (const auto& t : p.transports) transports += (transports.empty() ? "" : ", ") + t;
      out += fmt::format("  {:>10}  {:<12} {:<10} {}\n", fmt::format("{} -> {}", p.src_rank, p.dst_rank),
                         TransportName(p.transport_class), Channels(p.channels), transports);
    }
  }
  bool any_p2p = std::any_of(e.communicators.begin(), e.communicators.end(), [](const Communicator& g) {
    return std::any_of(g.pairs.begin(), g.pairs.end(),
                       [](const ExplainPair& p) { return p.transport_class == P2PTRACE_TRANSPORT_P2P; });
  });
  if (any_p2p) out += "\n(p2p: NCCL's log does not say whether P2P runs over NVLink or PCIe)\n";
  if (!e.refusals.empty()) {
    out += "\nwhy — NCCL's own lines that explain a fallback:\n";
    for (const SourceLine& r : e.refusals) out += fmt::format("  {}  {}{}\n", Where(r), r.text, Who(r.logger));
  }
  if (!e.env.empty()) {
    std::set<std::string> seen;
    std::string list;
    for (const SourceLine& s : e.env)
      if (seen.insert(s.text).second) list += fmt::format("  {}  {}\n", Where(s), s.text);
    out += "\nenvironment NCCL read:\n" + list;
  }
  if (e.warnings) out += fmt::format("\n{} NCCL WARN line{} (see the log)\n", e.warnings, e.warnings == 1 ? "" : "s");
  // One fix per cause: the lines behind each are listed above.
  std::set<std::string> causes_shown;
  for (const Finding& f : e.findings) {
    if (!causes_shown.insert(f.cause).second || f.fix.empty()) continue;
    if (causes_shown.size() == 1) out += "\nfixes:\n";
    out += fmt::format("  {} ({}): {}\n", f.cause, f.severity, f.fix);
  }
  return out;
}

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
                            {"comm_id", str(r.id.comm_id)}, {"file", r.file},
                            {"line", r.id.complete_line ? r.id.complete_line : r.id.FirstLine()}});
  j["connections"] = json::array();
  for (const ExplainConnection& ec : e.connections) {
    const Connection& c = ec.c;
    j["connections"].push_back(
        {{"comm", str(c.comm)}, {"comm_id", str(ec.comm_id)}, {"channel", c.channel}, {"conn_index", num(c.conn_index)},
         {"src_rank", c.src_rank}, {"dst_rank", num(c.dst_rank)}, {"src_dev", str(c.src_dev)},
         {"dst_dev", str(c.dst_dev)}, {"transport", c.transport}, {"class", TransportName(c.transport_class)},
         {"direction", str(c.direction)}, {"host", str(c.logger.host)}, {"pid", num(c.logger.pid)},
         {"cuda_dev", num(c.logger.cuda_dev)}, {"file", ec.file}, {"line", c.line}});
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
  j["findings"] = json::array();
  for (const Finding& f : e.findings)
    j["findings"].push_back({{"id", f.id}, {"severity", f.severity}, {"cause", f.cause}, {"pairs", f.pairs},
                             {"evidence", f.evidence}, {"fix", f.fix}});
  return j;
}

namespace {

// Streams a file through the parser: memory stays what the log keeps, whatever the file's size.
bool ParseFile(const std::string& path, NcclLog* log, std::string* problem) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *problem = fmt::format("cannot read it ({})", std::strerror(errno));
    return false;
  }
  NcclLogParser parser;
  std::string buffer(1 << 16, '\0');
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    parser.Feed(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
  }
  if (in.bad()) {
    *problem = fmt::format("read error ({})", std::strerror(errno));
    return false;
  }
  parser.Finish();
  *log = parser.log();
  return true;
}

}  // namespace

int RunExplain(const std::vector<std::string>& paths, bool as_json, std::ostream& out, std::ostream& err) {
  std::vector<ExplainFile> usable;
  for (const std::string& path : paths) {
    ExplainFile f{path, {}};
    std::string problem;
    if (!ParseFile(path, &f.log, &problem)) {
      err << "p2ptrace explain: " << path << ": " << problem << "\n";
      continue;
    }
    if (f.log.nccl_lines == 0 && f.log.connections.empty()) {
      err << "p2ptrace explain: " << path << ": no NCCL log line in it (explain reads NCCL_DEBUG=INFO output; "
          << "other kinds such as `nvidia-smi topo -m` are not read yet)\n";
      continue;
    }
    usable.push_back(std::move(f));
  }
  if (usable.empty()) {
    err << "p2ptrace explain: nothing to explain in " << paths.size() << " file" << (paths.size() == 1 ? "" : "s")
        << "\n";
    return 2;
  }
  Explanation e = BuildExplanation(usable);
  if (as_json) out << RenderExplainJson(e).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  else out << RenderExplainText(e);
  return 0;
}

}  // namespace p2ptrace::cli
