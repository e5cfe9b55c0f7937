#include "core/net_diagnosis.h"

#include <algorithm>
#include <map>
#include <optional>

#include "core/nccl_net.h"

namespace p2ptrace {
namespace {

std::string Where(const std::string& file, uint64_t line, const std::string& text) {
  return (file.empty() ? "line " : file + ":") + std::to_string(line) + ": " + text;
}

// What one host's lines said about its network, over every log given.
struct HostLines {
  std::vector<std::string> no_device, no_verbs;  // evidence
  std::vector<std::string> gdr_distance, gdr_no_module, gdr_nic_off;
  std::optional<std::string> gpu_dmabuf;  // `DMA-BUF is available on GPU device n`
  std::optional<std::string> ib_disabled, gdr_level_off, gdr_read_off;  // the environment line
  bool receives_with_gdr = false;
};

bool Zero(const std::string& v) { return v == "0" || v == "00"; }

}  // namespace

std::string_view NetShortfallText(NetShortfall s) {
  switch (s) {
    case NetShortfall::kSockets: return "TCP sockets instead of InfiniBand/RoCE";
    case NetShortfall::kNoGdr: return "no GPUDirect RDMA: every byte staged in host memory";
    case NetShortfall::kNoGdrSends: return "no GPUDirect RDMA for sends: sent bytes staged in host memory";
  }
  return "";
}

std::string WhereToLook(const NetFinding& f) {
  if (f.settled) return "";
  std::string host = f.host.empty() ? "that host" : f.host;
  return "the log does not say why: run `p2ptrace doctor` on " + host;
}

std::vector<NetFinding> DiagnoseNet(const std::vector<NamedNcclLog>& logs) {
  std::map<std::string, HostLines> hosts;
  for (const NamedNcclLog& named : logs) {
    const NcclLog& log = *named.log;
    auto where = [&](const NcclNote& n) { return Where(named.name, n.line, n.text); };
    for (const NcclNote& n : log.net_failures) {
      HostLines& h = hosts[n.logger.host];
      (NetFailureKind(n.text) == "net-no-verbs" ? h.no_verbs : h.no_device).push_back(where(n));
    }
    for (const NcclNote& n : log.gdr) {
      if (IsDmaBufAvailable(n.text) && !hosts[n.logger.host].gpu_dmabuf) hosts[n.logger.host].gpu_dmabuf = where(n);
      std::optional<GdrDecision> g = ParseGdrDecision(n.text);
      if (!g || g->enabled) continue;
      HostLines& h = hosts[n.logger.host];
      (g->distance >= 0 ? h.gdr_distance : g->no_module ? h.gdr_no_module : h.gdr_nic_off).push_back(where(n));
    }
    for (const EnvSetting& e : log.env) {
      HostLines& h = hosts[e.logger.host];
      std::string text = Where(named.name, e.line, e.name + " set by environment to " + e.value);
      if (e.name == "NCCL_IB_DISABLE" && !Zero(e.value)) h.ib_disabled = text;
      if (e.name == "NCCL_NET_GDR_LEVEL" && (e.value == "LOC" || Zero(e.value))) h.gdr_level_off = text;
      if (e.name == "NCCL_NET_GDR_READ" && Zero(e.value)) h.gdr_read_off = text;
    }
    for (const Connection& c : log.connections)
      if (std::optional<NetPath> p = ParseNetPath(c.transport); p && p->gdr && c.direction == "receive")
        hosts[c.logger.host].receives_with_gdr = true;
  }

  std::vector<NetFinding> out;
  std::map<std::pair<std::string, NetShortfall>, size_t> index;
  for (const NamedNcclLog& named : logs)
    for (const Connection& c : named.log->connections) {
      std::optional<NetPath> p = ParseNetPath(c.transport);
      if (!p || c.dst_rank < 0) continue;
      NetShortfall s;
      if (p->network == "Socket") s = NetShortfall::kSockets;
      else if (p->gdr) continue;
      else if (c.direction == "send" && hosts[c.logger.host].receives_with_gdr) s = NetShortfall::kNoGdrSends;
      else s = NetShortfall::kNoGdr;
      auto [it, fresh] = index.try_emplace({c.logger.host, s}, out.size());
      if (fresh) out.push_back({c.logger.host, c.logger.pid, s, "", false, {}, {}, 0});
      NetFinding& f = out[it->second];
      ++f.lines;
      if (std::find(f.pairs.begin(), f.pairs.end(), std::pair{c.src_rank, c.dst_rank}) == f.pairs.end())
        f.pairs.emplace_back(c.src_rank, c.dst_rank);
      if (f.evidence.size() < 2) f.evidence.push_back(Where(named.name, c.line, "… via " + c.transport));
    }

  for (NetFinding& f : out) {
    const HostLines& h = hosts[f.host];
    // The first that holds decides: a setting the user made, then what NCCL said it found.
    auto decide = [&](const char* cause, const std::vector<std::string>& lines) {
      if (lines.empty() || f.settled) return;
      f.cause = cause;
      f.settled = true;
      f.evidence.insert(f.evidence.begin(), lines.begin(), lines.begin() + std::min<size_t>(lines.size(), 2));
    };
    auto env = [&](const char* cause, const std::optional<std::string>& line) {
      if (line) decide(cause, {*line});
    };
    switch (f.shortfall) {
      case NetShortfall::kSockets:
        env("env-ib-disabled", h.ib_disabled);
        decide("net-no-verbs", h.no_verbs);
        decide("net-no-rdma-device", h.no_device);
        if (!f.settled) f.cause = "net-socket-unexplained";
        break;
      case NetShortfall::kNoGdr:
        env("env-gdr-disabled", h.gdr_level_off);
        decide("gdr-distance", h.gdr_distance);
        decide("gdr-no-module", h.gdr_no_module);
        decide("no-gdr", h.gdr_nic_off);
        // The GPU offered DMA-BUF: the NIC's side refused it (no peer memory, no DMA-BUF there).
        if (f.cause == "no-gdr" && h.gpu_dmabuf) f.evidence.insert(f.evidence.begin() + 1, *h.gpu_dmabuf);
        if (!f.settled) f.cause = "gdr-off-unexplained";
        break;
      case NetShortfall::kNoGdrSends:
        env("env-gdr-read-off", h.gdr_read_off);
        if (!f.settled) f.cause = "gdr-read-off", f.settled = true;  // NCCL's own default, not a fault
        break;
    }
  }
  return out;
}

}  // namespace p2ptrace
