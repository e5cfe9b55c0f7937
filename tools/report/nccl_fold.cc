#include "tools/report/nccl_fold.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/causes.h"
#include "core/nccl_net.h"
#include "core/probe_parsers.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "tools/report/capture.h"
#include "tools/report/nccl_bw.h"

namespace p2ptrace::cli {
namespace {

// NCCL prints busId as the hex of "dddd:bb:dd.f" without separators ("1a000"): back to PCI form,
// normalised as the traces' bus ids are.
std::string BusFromNccl(const std::string& hex) {
  if (hex.empty()) return hex;
  if (hex.find(':') != std::string::npos) {
    std::string bus = NormalizeBusId(hex);
    return bus.empty() ? hex : bus;
  }
  unsigned long long v = std::strtoull(hex.c_str(), nullptr, 16);
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", v >> 20, (v >> 12) & 0xff, (v >> 4) & 0xff, v & 0xf);
}

uint64_t ParsePointer(const std::string& text) { return std::strtoull(text.c_str(), nullptr, 16); }

// A communicator as one process alone can name it: by its pointer there, else (no pointer printed)
// by its size. Never "0x…": NcclFold::RekeyByTraces tells the two apart.
std::string ProcessCommKey(const std::string& host, int pid, uint64_t comm, int nranks) {
  return comm != 0 ? fmt::format("{}:{}:{:#x}", host, pid, comm) : fmt::format("{}:{}:n{}", host, pid, nranks);
}

// Ranks of one communicator share commId (NCCL ≥ 2.16); without it, the printing process's key
// (the traces rekey it in FinishPairs).
std::string CommKey(const RankIdentity& id) {
  // The grammar's key (commId, or a split's key derived from its parent's), else one process's.
  if (!id.comm_key.empty()) return id.comm_key;
  if (!id.comm_id.empty()) return id.comm_id;
  return ProcessCommKey(id.host, id.pid, id.comm.empty() ? 0 : ParsePointer(id.comm), id.nranks);
}

template <size_t N>
std::string Field(const char (&text)[N]) {
  return std::string(text, strnlen(text, N));
}

}  // namespace

void NcclFold::Conn::NoteNet(const std::string& host, const std::string& transport) {
  std::optional<NetPath> p = ParseNetPath(transport);
  if (!p) return;
  auto [it, fresh] = net_sides.try_emplace(host);
  PairEntry::NetSide& side = it->second;
  if (fresh) {
    side.host = host;
    side.network = p->network;
    side.nic_index = p->nic;
  }
  side.gdr = (fresh || side.gdr) && p->gdr;  // every line of the side
  if (side.proxy_rank < 0) side.proxy_rank = p->proxy_rank;
}

NcclFold::Conn& NcclFold::Conn::operator+=(const Conn& o) {
  transports.insert(o.transports.begin(), o.transports.end());
  channels += o.channels;
  from_log |= o.from_log;
  from_trace |= o.from_trace;
  for (const auto& [host, side] : o.net_sides) {
    auto [it, fresh] = net_sides.try_emplace(host, side);
    if (!fresh) it->second.gdr = it->second.gdr && side.gdr;
  }
  return *this;
}

void NcclFold::AddTrace(const Trace& t, const TraceFold& f, const ProcessInfo& p, size_t index) {
  traced_hosts_[{std::string(NcclLogHost(p.host)), p.pid}].push_back(p.host);
  for (const auto& [k, n] : f.nccl_failures) {
    FailedCalls& fc = failed_calls_[k];
    fc.calls += n;
    if (p.rank >= 0) fc.ranks.insert(p.rank);
    else if (fc.processes.size() < 8) fc.processes.push_back(fmt::format("{} pid {}", p.host, p.pid));
  }
  AddOps(t, f);
  AddTraceConns(t, f, index);
}

void NcclFold::AddRingHop(const std::string& key, int channel, int conn_index, int src, int dst,
                          const std::string& direction, uint64_t line) {
  if (channel < 0 || conn_index > 0 || direction == "receive" || src == dst) return;
  auto [it, fresh] = ring_next_.try_emplace({key, channel, src}, line, dst);
  if (!fresh && line < it->second.first) it->second = {line, dst};
}

// The whole host name of a log line's (printed host, pid): the traced process's; where two hosts
// share their first label and a pid, the one the log file is named after (`hint`, the tap's
// nccl.<host>.<pid>.log); a process no trace holds keeps the printed name.
std::string NcclFold::WholeHost(const std::string& printed, int pid, const std::string& hint) const {
  auto it = traced_hosts_.find({printed, pid});
  if (it == traced_hosts_.end()) return printed;
  for (const std::string& h : it->second)
    if (h == hint) return h;
  return it->second.front();
}

void NcclFold::FinishPairs(Report& rep, const GpuIndex& gpus) {
  FinishTraceConns(rep);
  RekeyByTraces();
  FinishConnections(rep, gpus);
  FinishOpKernelTimes();
  for (auto& [k, op] : ops_) rep.nccl_ops.push_back(std::move(op));
}

// The connection lines the shim recorded, keyed as AddNcclLog keys a log's: the communicator by its
// commId (else the process's key), its ranks by the trace's communicator records.
void NcclFold::AddTraceConns(const Trace& t, const TraceFold& f, size_t process) {
  if (t.nccl_connections.empty()) return;
  TraceConns tc;
  tc.host = t.Host();
  tc.pid = t.header.pid;
  tc.process = process;
  for (const p2ptrace_nccl_conn_record& c : t.nccl_connections) {
    if (c.dst_rank < 0) continue;  // CollNet lines name no peer
    std::string comm = Field(c.comm);
    // The logging rank's communicator: by its pointer, or the process's only one when the log did not say.
    auto ci = !comm.empty() ? f.comm.find(ParsePointer(comm)) : f.comm.size() == 1 ? f.comm.begin() : f.comm.end();
    if (ci == f.comm.end() || ci->second.rank < 0) continue;
    std::string comm_id = Field(c.comm_id);
    std::string key = comm_id.empty() ? ProcessCommKey(tc.host, tc.pid, ci->first, ci->second.nranks) : comm_id;
    if (comm_id.empty()) process_keys_.emplace(key, ci->second.nranks);
    std::string bus = t.BusId(ci->second.device);
    tc.who.try_emplace({key, ci->second.rank}, Who{tc.host, bus, ci->second.device});
    tc.comm_of.try_emplace({tc.host, tc.pid, ci->first}, std::pair{key, ci->second.rank});
    AddRingHop(key, c.channel, c.conn_index, c.src_rank, c.dst_rank,
               c.direction == P2PTRACE_NCCL_CONN_RECEIVE ? "receive" : "", c.line);
    Conn& nc = tc.conns[{key, c.src_rank, c.dst_rank, c.transport_class}];
    std::string transport = Field(c.transport);
    nc.NoteNet(tc.host, transport);
    nc.transports.insert(std::move(transport));
    ++nc.channels;
    nc.from_trace = true;
  }
  auto zero = [](const std::string& v) { return v == "0" || v == "00"; };
  if (std::string v = t.Env("NCCL_P2P_DISABLE"); !v.empty() && !zero(v)) {
    tc.refusal_kind = "env-p2p-disabled";
    tc.refusal_evidence = fmt::format("NCCL_P2P_DISABLE={} in the environment {} recorded (NCCL's log line is missing)",
                                      v, t.path);
  } else if (std::string l = t.Env("NCCL_P2P_LEVEL"); l == "LOC" || zero(l)) {
    tc.refusal_kind = "env-p2p-level";
    tc.refusal_evidence = fmt::format("NCCL_P2P_LEVEL={} in the environment {} recorded (NCCL's log line is missing)",
                                      l, t.path);
  }
  if (!tc.conns.empty()) trace_conns_.push_back(std::move(tc));
}

// NCCL before 2.16 printed no commId, so its lines key a communicator by the printing process
// (ProcessCommKey) and the ranks of different processes never meet. Each rank's trace recorded its
// communicator's commId hash at init: every process key whose communicator a trace knows becomes
// that, as a newer NCCL's lines would have said. The rest (no init recorded: an NCCL linked into
// the program, out of the shim's reach) are joined as `explain` joins such a paste: the process
// keys of one size whose ranks never repeat are one communicator.
void NcclFold::RekeyByTraces() {
  std::map<std::string, std::string> to;
  for (const auto& [where, key] : comm_of_)
    if (process_keys_.count(key.first))
      if (auto h = id_hash_of_.find(where); h != id_hash_of_.end() && h->second != 0)
        to.emplace(key.first, fmt::format("{:#x}", h->second));
  std::map<int, std::vector<std::string>> by_size;
  for (const auto& [key, nranks] : process_keys_)
    if (!to.count(key) && nranks > 1) by_size[nranks].push_back(key);
  for (const auto& [nranks, keys] : by_size) {
    if (keys.size() < 2) continue;
    std::map<int, int> seen;  // rank -> how many keys hold it
    for (const auto& [k, w] : who_)
      if (std::binary_search(keys.begin(), keys.end(), k.first)) ++seen[k.second];
    if (std::any_of(seen.begin(), seen.end(), [](const auto& r) { return r.second > 1; })) continue;
    for (const std::string& k : keys) to.emplace(k, fmt::format("size:{}", nranks));
  }
  if (to.empty()) return;
  auto key_of = [&](const std::string& k) -> const std::string& {
    auto it = to.find(k);
    return it == to.end() ? k : it->second;
  };
  for (auto& [where, key] : comm_of_) key.first = key_of(key.first);
  std::map<std::pair<std::string, int>, Who> who_now;
  for (auto& [k, w] : who_) who_now.try_emplace({key_of(k.first), k.second}, std::move(w));
  who_ = std::move(who_now);
  std::map<std::tuple<std::string, int, int, int>, Conn> conns_now;
  for (auto& [k, nc] : conns_)
    conns_now[{key_of(std::get<0>(k)), std::get<1>(k), std::get<2>(k), std::get<3>(k)}] += nc;
  conns_ = std::move(conns_now);
  std::map<std::tuple<std::string, int, int>, std::pair<uint64_t, int>> ring_now;
  for (auto& [k, v] : ring_next_) ring_now.try_emplace({key_of(std::get<0>(k)), std::get<1>(k), std::get<2>(k)}, v);
  ring_next_ = std::move(ring_now);
}

// The recorded connections of every process no log spoke for; what the logs said stands.
void NcclFold::FinishTraceConns(Report& rep) {
  for (TraceConns& tc : trace_conns_) {
    if (logged_.count({tc.host, tc.pid})) continue;
    for (auto& [k, w] : tc.who) who_.try_emplace(k, std::move(w));
    for (auto& [k, v] : tc.comm_of) comm_of_.try_emplace(k, std::move(v));
    for (auto& [k, nc] : tc.conns) conns_[k] += nc;  // from_trace: set on every recorded one
    if (!tc.refusal_kind.empty()) env_refusal_.try_emplace(tc.host, tc.refusal_kind, tc.refusal_evidence);
    ProcessInfo& p = rep.processes[tc.process];
    p.nccl_log = "trace records: " + std::string(p.nccl_log == "user file" ? "the user's NCCL_DEBUG_FILE" : "the tapped log") +
                 " is not in the trace directory";
    DescribeCapture(&p);
    ++rep.nccl_from_traces;
  }
  std::vector<TraceConns>().swap(trace_conns_);
}

// NCCL operations: per (communicator, operation) calls, bytes and the timed subset; ncclSend per
// peer, for the pair it crossed.
void NcclFold::AddOps(const Trace& t, const TraceFold& f) {
  const std::string host = t.Host();
  for (const auto& [k, a] : f.ops) {
    auto ci = f.comm.find(k.first);
    uint64_t hash = ci != f.comm.end() ? ci->second.id_hash : 0;
    NcclOpSummary& s = ops_[{hash, k.second}];
    if (s.op.empty()) {
      s.comm = fmt::format("{:016x}", hash);
      s.op = std::string(NcclApiName(k.second));
      s.api = k.second;
    }
    int nranks = ci != f.comm.end() ? ci->second.nranks : 0;
    s.nranks = std::max(s.nranks, nranks);
    if (ci != f.comm.end() && ci->second.rank >= 0) s.ranks.insert(ci->second.rank);  // NCCL's rank
    else s.ranks.insert(t.header.rank);
    // The trace holds NCCL's count × type size; nccl-tests' size S is n of them for the operations
    // whose count is one rank's block (tools/report/nccl_bw.h).
    const int api = k.second;  // clang 14 cannot capture a structured binding
    auto size = [&](uint64_t count_bytes) { return static_cast<uint64_t>(NcclTestsSize(api, count_bytes, nranks)); };
    s += Traffic{a.calls, size(a.bytes), a.errors, a.timed_calls, size(a.timed_bytes), a.timed_ns};
    s.group_timed_calls += a.group_calls;
    s.timings += a.timings;
    s.graph_calls += a.graph_calls;
    s.graph_bytes += size(a.graph_bytes);
  }
  auto add = [](TraceFold::KernelTimes& to, const TraceFold::KernelTimes& from) {
    to.calls += from.calls, to.bytes += from.bytes, to.ns += from.ns;
  };
  for (const auto& [ptr, seen] : f.comm) id_hash_of_[{host, t.header.pid, ptr}] = seen.id_hash;
  auto comm_id = [](uint64_t hash) { return fmt::format("{:#x}", hash); };  // as NCCL prints commId
  for (const auto& [k, v] : f.kernel_sends) add(kernel_sends_[{comm_id(std::get<0>(k)), std::get<1>(k), std::get<2>(k)}], v);
  for (const auto& [k, v] : f.kernel_recvs) add(kernel_recvs_[{comm_id(std::get<0>(k)), std::get<1>(k), std::get<2>(k)}], v);
  for (const auto& [k, v] : f.kernel_colls)
    add(kernel_colls_[{comm_id(k.comm_hash), k.rank, k.nranks, k.api, k.algo, k.channel_mask}], v);
  for (const auto& [k, a] : f.sends) {
    P2pOps& p = sends_[{host, t.header.pid, k.first, k.second}];
    p += Traffic{a.calls, a.bytes, 0, a.timed_calls, a.timed_bytes, a.timed_ns};
    p.group_calls += a.group_calls;
    p.shared_calls += a.shared_calls;
  }
}

void NcclFold::AddLog(const NcclLogFile& f, Report& rep) {
  ++rep.nccl_logs;
  if (!f.log.nccl_version.empty()) rep.nccl_versions.insert(f.log.nccl_version);
  const std::string hint = NcclLogFileHost(std::filesystem::path(f.path).filename().string());
  auto whole = [&](const NcclLogger& l) { return WholeHost(l.host, l.pid, hint); };
  for (const RankIdentity& id : f.log.ranks) {
    RankIdentity named = id;  // CommKey's fallback key names the host too
    named.host = WholeHost(id.host, id.pid, hint);
    who_[{CommKey(named), id.rank}] = Who{named.host, BusFromNccl(id.bus_id), id.cuda_dev};
    if (id.comm_key.empty() && id.comm_id.empty()) process_keys_.emplace(CommKey(named), id.nranks);
    if (!id.comm.empty()) comm_of_[{named.host, id.pid, ParsePointer(id.comm)}] = {CommKey(named), id.rank};
  }
  for (const Connection& c : f.log.connections) {
    if (c.dst_rank < 0) continue;  // CollNet lines name no peer
    const RankIdentity* found = f.log.IdentityOf(c);
    if (found == nullptr) continue;
    RankIdentity me = *found;
    me.host = WholeHost(me.host, me.pid, hint);
    AddRingHop(CommKey(me), c.channel, c.conn_index, c.src_rank, c.dst_rank, c.direction, c.line);
    Conn& nc = conns_[{CommKey(me), c.src_rank, c.dst_rank, c.transport_class}];
    nc.transports.insert(c.transport);
    ++nc.channels;
    nc.from_log = true;
    nc.NoteNet(me.host, c.transport);
    logged_.insert({whole(c.logger), c.logger.pid});
  }
  for (const NcclNote& n : f.log.net_devices)
    if (std::optional<std::vector<NetDevice>> devices = ParseNetDevices(n.text))
      for (const NetDevice& d : *devices)
        if (std::string name = !d.name.empty() ? d.name : d.interface; !name.empty())  // a socket's interface
          nic_names_.try_emplace({whole(n.logger), d.network, d.index}, name);
  for (const Refusal& r : f.log.refusals) first_refusal_.try_emplace(whole(r.logger), r);
  for (NetFinding& n : DiagnoseNet({NamedNcclLog{f.path, &f.log}})) {
    n.host = WholeHost(n.host, n.pid, hint);
    auto [it, fresh] = net_causes_.try_emplace({n.host, n.shortfall}, n);
    if (!fresh && n.settled && !it->second.settled) it->second = std::move(n);
  }
  // One log at a time (one per process): a cause seen in several logs is one, its lines counted.
  for (NcclFailure& nf : DiagnoseNcclFailures({NamedNcclLog{f.path, &f.log}})) {
    auto same = std::find_if(causes_.begin(), causes_.end(),
                             [&](const NcclFailure& x) { return x.cause == nf.cause; });
    if (same == causes_.end()) {
      causes_.push_back(std::move(nf));
      continue;
    }
    same->lines += nf.lines;
    for (std::string& e : nf.evidence)
      if (same->evidence.size() < kMaxNcclFailureEvidence) same->evidence.push_back(std::move(e));
  }
}

// NCCL's pairs: connections resolved to GPUs, the class each should have had, and the ncclSend
// bytes that crossed them.
void NcclFold::FinishConnections(Report& rep, const GpuIndex& gpus) {
  std::map<std::tuple<std::string, std::string, std::string, std::string, int>, PairEntry> pairs;
  // (comm key, src rank, dst rank) -> the entry of the class with the most connections
  std::map<std::tuple<std::string, int, int>, std::pair<int, PairEntry*>> by_ranks;
  // A NET connection's sender and receiver each print their own side's GPUDirect RDMA: the pair's
  // class is the worse of the two (its bytes are staged in host memory on that side).
  std::map<std::tuple<std::string, int, int>, int> net_class;
  for (const auto& [k, nc] : conns_) {
    const auto& [key, src_rank, dst_rank, cls] = k;
    if (cls != P2PTRACE_TRANSPORT_NET_GDR && cls != P2PTRACE_TRANSPORT_NET_IB) continue;
    int& c = net_class[{key, src_rank, dst_rank}];
    c = c == P2PTRACE_TRANSPORT_NET_IB || cls == P2PTRACE_TRANSPORT_NET_IB ? P2PTRACE_TRANSPORT_NET_IB : cls;
  }
  for (const auto& [k, nc] : conns_) {
    const auto& [key, src_rank, dst_rank, printed_cls] = k;
    auto net = net_class.find({key, src_rank, dst_rank});
    const int cls = net != net_class.end() ? net->second : printed_cls;
    auto src = who_.find({key, src_rank});
    auto dst = who_.find({key, dst_rank});
    if (src == who_.end() || dst == who_.end()) continue;
    // NCCL connects no rank to itself (a send to self is a copy inside the GPU); a line that says
    // so names no link between two GPUs.
    if (src_rank == dst_rank) continue;
    PairEntry& e = pairs[{src->second.host, src->second.bus, dst->second.host, dst->second.bus, cls}];
    e.source = "nccl";
    e.src = gpus.Ref(src->second.host, src->second.bus, src->second.cuda);
    e.dst = gpus.Ref(dst->second.host, dst->second.bus, dst->second.cuda);
    e.transport = cls;
    e.nccl_transports.insert(nc.transports.begin(), nc.transports.end());
    e.channels += nc.channels;
    bool log = nc.from_log || e.nccl_from == "log" || e.nccl_from == "log+trace";
    bool trace = nc.from_trace || e.nccl_from == "trace" || e.nccl_from == "log+trace";
    e.nccl_from = log && trace ? "log+trace" : log ? "log" : "trace";
    e.ranks.insert(src_rank);
    e.dst_ranks.insert(dst_rank);
    for (const auto& [printer, side] : nc.net_sides) {
      const std::string& host = printer;  // a lambda cannot capture a structured binding (clang)
      if (!side.gdr) net_degraded_[{e.src.host, e.src.bus_id, e.dst.host, e.dst.bus_id}].insert(host);
      auto same = std::find_if(e.net.begin(), e.net.end(), [&](const PairEntry::NetSide& s) { return s.host == host; });
      if (same != e.net.end()) {
        same->gdr = same->gdr && side.gdr;
        continue;
      }
      PairEntry::NetSide named = side;
      if (auto n = nic_names_.find({host, side.network, side.nic_index}); n != nic_names_.end()) named.nic = n->second;
      e.net.insert(host == e.src.host ? e.net.begin() : e.net.end(), std::move(named));
    }
    auto& best = by_ranks[{key, src_rank, dst_rank}];
    if (best.second == nullptr || nc.channels > best.first) best = {nc.channels, &e};
  }
  for (const auto& [k, p] : sends_) {
    const auto& [host, pid, comm_ptr, peer] = k;
    auto c = comm_of_.find({host, pid, comm_ptr});
    if (c == comm_of_.end()) continue;
    auto e = by_ranks.find({c->second.first, c->second.second, peer});
    if (e == by_ranks.end()) continue;
    PairEntry& pe = *e->second.second;
    pe += p;
    pe.group_timed_calls += p.group_calls;
    pe.shared_calls += p.shared_calls;
  }
  FinishKernelTimes(by_ranks);
  for (auto it = pairs.begin(); it != pairs.end(); it = pairs.erase(it)) {
    PairEntry& e = it->second;
    bool same_host = e.src.host == e.dst.host;
    if (IsDirect(e.transport)) e.expected = e.transport;
    else if (!same_host && e.transport == P2PTRACE_TRANSPORT_NET_GDR) e.expected = e.transport;
    // NCCL said why it refused P2P on this host: that explains a host or network path there.
    bool host_path = e.transport == P2PTRACE_TRANSPORT_SHM || e.transport == P2PTRACE_TRANSPORT_NET_IB ||
                     e.transport == P2PTRACE_TRANSPORT_NET_GDR || e.transport == P2PTRACE_TRANSPORT_NET_SOCKET;
    // Without NCCL's line (its log missing), the setting as the trace recorded the environment.
    auto refusal = first_refusal_.find(e.src.host);
    auto env = env_refusal_.find(e.src.host);
    if (host_path && same_host && (refusal != first_refusal_.end() || env != env_refusal_.end())) {
      std::string id(CauseForNcclRefusal(refusal != first_refusal_.end() ? refusal->second.kind : env->second.first));
      std::string evidence = refusal != first_refusal_.end() ? fmt::format("NCCL: {}", refusal->second.text) : env->second.second;
      const CauseInfo* info = FindCause(id);
      e.causes.push_back(Cause{id, {evidence}, info ? std::string(info->fix) : "see `p2ptrace doctor` on that node",
                               info ? std::string(info->confirm) : "", "trace"});
      e.fallback = true;
      e.expected = P2PTRACE_TRANSPORT_P2P;  // what NCCL uses between two GPUs of a node when allowed
    }
    rep.pairs.push_back(std::move(e));
  }
}

// NCCL's kernel timers on the pairs: a send/recv pair's own time (the sender's, else the
// receiver's, never both: one transfer) in place of its group's; a ring collective's share on each
// hop its channels' rings took from this rank.
void NcclFold::FinishKernelTimes(
    const std::map<std::tuple<std::string, int, int>, std::pair<int, PairEntry*>>& by_ranks) {
  for (const auto* side : {&kernel_recvs_, &kernel_sends_})  // the sender's last: it wins
    for (const auto& [k, t] : *side) {
      auto e = by_ranks.find(k);
      if (e == by_ranks.end() || t.calls == 0) continue;
      PairEntry& pe = *e->second.second;
      pe.timed_calls = pe.kernel_timed_calls = t.calls;
      pe.timed_bytes = t.bytes;
      pe.timed_ns = t.ns;
      pe.group_timed_calls = pe.shared_calls = 0;
    }
  for (const auto& [k, t] : kernel_colls_) {
    const auto& [key, rank, nranks, api, algo, mask] = k;
    if (algo != P2PTRACE_NCCL_ALGO_RING || nranks < 2 || mask == 0) continue;
    const int channels = __builtin_popcountll(mask);
    const double edge_bytes = NcclTestsSize(api, t.bytes, nranks) * NcclBusFactor(api, nranks) / channels;
    std::map<int, int> next;  // next rank -> channels of this rank that send to it
    for (int c = 0; c < 64; ++c)
      if ((mask >> c) & 1)
        if (auto n = ring_next_.find({key, c, rank}); n != ring_next_.end()) ++next[n->second.second];
    for (const auto& [to, n] : next) {
      auto e = by_ranks.find({key, rank, to});
      if (e == by_ranks.end()) continue;
      e->second.second->coll += Traffic{t.calls, 0, 0, t.calls, static_cast<uint64_t>(edge_bytes * n), t.ns};
    }
  }
}

// NCCL's commId -> the id hash the operations are named by (through the processes' communicators).
std::map<std::string, uint64_t> NcclFold::OpComms() const {
  std::map<std::string, uint64_t> op_comm;
  for (const auto& [where, key] : comm_of_)
    if (auto h = id_hash_of_.find(where); h != id_hash_of_.end()) op_comm.try_emplace(key.first, h->second);
  return op_comm;
}

// An operation kind no event timed (NCCL's kernel timers measured instead: the shim puts no event on
// NCCL's stream then) gets the kernel timers' times: each sampled call from its first channel's
// start to its last channel's stop, on every rank, in nccl-tests' sizes.
void NcclFold::FinishOpKernelTimes() {
  const std::map<std::string, uint64_t> op_comm = OpComms();
  auto add = [&](const std::string& key, int api, int nranks, const TraceFold::KernelTimes& t) {
    auto h = op_comm.find(key);
    if (h == op_comm.end()) return;
    auto s = ops_.find({h->second, api});
    if (s == ops_.end() || s->second.timed_calls > s->second.kernel_timed_calls) return;  // events timed it
    int n = nranks > 0 ? nranks : s->second.nranks;
    s->second.timed_calls += t.calls;
    s->second.kernel_timed_calls += t.calls;
    s->second.timings += t.calls;
    s->second.timed_bytes += static_cast<uint64_t>(NcclTestsSize(api, t.bytes, n));
    s->second.timed_ns += t.ns;
  };
  for (const auto& [k, t] : kernel_colls_) add(std::get<0>(k), std::get<3>(k), std::get<2>(k), t);
  for (const auto& [k, t] : kernel_sends_) add(std::get<0>(k), P2PTRACE_NCCL_Send, 0, t);
  for (const auto& [k, t] : kernel_recvs_) add(std::get<0>(k), P2PTRACE_NCCL_Recv, 0, t);
}

// Every ring a timed collective ran on: its hops in order, what each carried, and the hop whose
// class sets the pace. The others are bounded by it, never slow themselves.
void NcclFold::FinishRings(Report& rep) const {
  std::map<std::pair<std::string, int>, int> timed;  // (commId, channel) -> a rank of it that was timed
  for (const auto& [k, t] : kernel_colls_) {
    const auto& [key, rank, nranks, api, algo, mask] = k;
    if (algo != P2PTRACE_NCCL_ALGO_RING) continue;
    for (int c = 0; c < 64; ++c)
      if ((mask >> c) & 1) timed.try_emplace({key, c}, rank);
  }
  std::map<std::tuple<std::string, std::string, std::string, std::string>, PairEntry*> pair_of;
  for (PairEntry& e : rep.pairs)
    if (e.source == "nccl" && e.coll.timed_calls > 0) pair_of[{e.src.host, e.src.bus_id, e.dst.host, e.dst.bus_id}] = &e;
  auto pair = [&](const std::string& key, int a, int b) -> PairEntry* {
    auto wa = who_.find({key, a}), wb = who_.find({key, b});
    if (wa == who_.end() || wb == who_.end()) return nullptr;
    auto p = pair_of.find({wa->second.host, wa->second.bus, wb->second.host, wb->second.bus});
    return p == pair_of.end() ? nullptr : p->second;
  };
  const std::map<std::string, uint64_t> op_comm = OpComms();
  auto hop_name = [](const PairEntry& e) {
    return fmt::format("{} -> {}{} ({})", GpuName(e.src), e.dst.host == e.src.host ? "" : e.dst.host + " ",
                       GpuName(e.dst), TransportName(e.transport));
  };
  for (const auto& [ring, start] : timed) {
    const auto& [key, channel] = ring;
    RingSummary r;
    r.nccl_comm = key;
    if (auto h = op_comm.find(key); h != op_comm.end()) r.comm = fmt::format("{:016x}", h->second);
    r.channel = channel;
    std::vector<PairEntry*> hops;
    int at = start;
    std::set<int> seen;
    // From the lowest rank of the ring, so that every rank's ring reads the same.
    for (int guard = 0; guard < 1 << 16 && seen.insert(at).second; ++guard) {
      auto n = ring_next_.find({key, channel, at});
      if (n == ring_next_.end()) break;
      at = n->second.second;
    }
    int first = seen.empty() ? start : *seen.begin();
    seen.clear();
    for (at = first; seen.insert(at).second;) {
      auto n = ring_next_.find({key, channel, at});
      if (n == ring_next_.end()) break;
      PairEntry* e = pair(key, at, n->second.second);
      if (e == nullptr) break;
      hops.push_back(e);
      at = n->second.second;
    }
    if (hops.size() < 2) continue;
    PairEntry* slowest = nullptr;
    for (PairEntry* e : hops) {
      r.hops.push_back(hop_name(*e));
      r.hop_pairs.push_back(static_cast<size_t>(e - rep.pairs.data()));
      double g = e->CollGbps();
      if (g > 0 && (r.slowest_gbps < 0 || g < r.slowest_gbps)) r.slowest_gbps = g;
      r.fastest_gbps = std::max(r.fastest_gbps, g);
      if (e->expected_gbps_high > 0 && (slowest == nullptr || e->expected_gbps_high < slowest->expected_gbps_high))
        slowest = e;
    }
    // Mixed classes: the hop whose class tops out below another's floor sets the pace.
    bool mixed = slowest != nullptr && std::any_of(hops.begin(), hops.end(), [&](const PairEntry* e) {
                   return e->expected_gbps_low > slowest->expected_gbps_high;
                 });
    if (mixed) {
      r.bounded_by = hop_name(*slowest);
      r.bound_expected_low = slowest->expected_gbps_low;
      r.bound_expected_high = slowest->expected_gbps_high;
      r.bound_pair = static_cast<int>(slowest - rep.pairs.data());
      for (PairEntry* e : hops)
        if (e->expected_gbps_low > slowest->expected_gbps_high && e->bounded_by.empty()) e->bounded_by = r.bounded_by;
    }
    rep.rings.push_back(std::move(r));
  }
}

// Each NCCL connection as the stopped finding names an operation's pairs: its communicator as the
// operations name it, its ranks, its path and, where the pair fell back, the causes with their fix.
std::vector<PairPath> NcclFold::StopPaths(const Report& rep, const GpuIndex& gpus) const {
  std::map<std::string, std::string> id_of_key;  // connection key ("0x…" commId) -> 8 hex digits of the id hash
  for (const auto& [where, key] : comm_of_)
    if (auto h = id_hash_of_.find(where); h != id_hash_of_.end()) id_of_key.try_emplace(key.first, fmt::format("{:08x}", h->second >> 32));
  std::map<std::tuple<std::string, std::string, std::string, std::string>, const PairEntry*> nccl_pair;
  for (const PairEntry& e : rep.pairs)
    if (e.source == "nccl") nccl_pair[{e.src.host, e.src.bus_id, e.dst.host, e.dst.bus_id}] = &e;
  std::vector<PairPath> out;
  for (const auto& [k, conn] : conns_) {
    const auto& [key, src, dst, cls] = k;
    auto id = id_of_key.find(key);
    if (id == id_of_key.end()) continue;
    std::string in_gpus, pair_gpus;
    const PairEntry* pair = nullptr;
    auto a = who_.find({key, src}), b = who_.find({key, dst});
    if (a != who_.end() && b != who_.end()) {
      GpuRef ga = gpus.Ref(a->second.host, a->second.bus), gb = gpus.Ref(b->second.host, b->second.bus);
      pair_gpus = fmt::format("{} {} -> {}{}", ga.host, GpuName(ga), gb.host == ga.host ? "" : gb.host + " ", GpuName(gb));
      in_gpus = " (" + pair_gpus + ")";
      if (auto it = nccl_pair.find({ga.host, ga.bus_id, gb.host, gb.bus_id}); it != nccl_pair.end()) pair = it->second;
    }
    std::string text = fmt::format("rank {} -> rank {}{} via {} ({})", src, dst, in_gpus, fmt::join(conn.transports, ", "),
                                   TransportName(cls));
    // Paths known to hang transfers (nccl#2079: ACS redirecting peer writes deadlocked allreduce).
    static const std::map<std::string, int> kHangs = {{"acs-redirect", 6},     {"acs-suspected", 5}, {"nvml-p2p-status", 4},
                                                      {"p2p-degraded", 3},     {"iommu-enabled", 2}, {"virtualized", 1}};
    auto risk_of = [](const Cause& c) {
      auto it = kHangs.find(c.id);
      return it == kHangs.end() ? 0 : it->second;
    };
    int risk = 0;
    if (pair != nullptr && !pair->causes.empty()) {
      std::vector<std::string> ids;
      const Cause* shown = &pair->causes.front();
      for (const Cause& c : pair->causes) {
        ids.push_back(c.id);
        if (risk_of(c) > risk) risk = risk_of(c), shown = &c;
      }
      text += fmt::format(": {}{} — fix ({}): {}", fmt::join(ids, ", "), risk ? ", a path known to hang peer transfers" : "",
                          shown->id, shown->fix);
    }
    out.push_back({id->second, src, dst, std::move(text), std::move(pair_gpus), risk});
  }
  return out;
}

void NcclFold::ApplyNetCauses(Report& rep) const {
  for (PairEntry& e : rep.pairs) {
    if (e.source != "nccl" || e.src.host == e.dst.host) continue;
    bool sockets = e.transport == P2PTRACE_TRANSPORT_NET_SOCKET;
    if (!sockets && e.transport != P2PTRACE_TRANSPORT_NET_IB) continue;
    auto degraded = net_degraded_.find({e.src.host, e.src.bus_id, e.dst.host, e.dst.bus_id});
    if (degraded == net_degraded_.end()) continue;
    std::vector<const NetFinding*> found;
    for (const std::string& host : degraded->second)
      for (NetShortfall s : sockets ? std::vector{NetShortfall::kSockets}
                                    : std::vector{NetShortfall::kNoGdr, NetShortfall::kNoGdrSends})
        if (auto it = net_causes_.find({host, s}); it != net_causes_.end()) found.push_back(&it->second);
    bool known = !e.causes.empty() || std::any_of(found.begin(), found.end(), [](const NetFinding* n) { return n->settled; });
    for (const NetFinding* n : found) {
      if ((!n->settled && known) ||
          std::any_of(e.causes.begin(), e.causes.end(), [&](const Cause& c) { return c.id == n->cause; }))
        continue;
      const CauseInfo* info = FindCause(n->cause);
      Cause c{n->cause, {}, info ? std::string(info->fix) : "", info ? std::string(info->confirm) : "", "trace"};
      for (const std::string& ev : n->evidence) c.evidence.push_back(fmt::format("{}: {}", n->host, ev));
      if (!n->settled) c.evidence.push_back(n->host + ": " + WhereToLook(*n));
      e.causes.push_back(std::move(c));
      if (info != nullptr && info->severity != Severity::kInfo) {
        e.fallback = true;
        if (e.expected == 0) e.expected = P2PTRACE_TRANSPORT_NET_GDR;
      }
    }
    // A cause a log settled stands in for "unknown" and "does not say why" from elsewhere (the
    // job-start check and the other end saw only their own side).
    if (std::any_of(found.begin(), found.end(), [](const NetFinding* n) { return n->settled; }))
      e.causes.erase(std::remove_if(e.causes.begin(), e.causes.end(),
                                    [](const Cause& c) { return c.id == "unknown" || c.id.ends_with("-unexplained"); }),
                     e.causes.end());
  }
}

void NcclFold::AddFindings(Report& rep) const {
  // Why NCCL failed, in its own words: one finding per cause.
  std::vector<std::string> nccl_causes;
  for (const NcclFailure& nf : causes_) {
    const CauseInfo* info = FindCause(nf.cause);
    Finding f;
    f.id = "nccl-failure";
    f.cause = nf.cause;
    f.severity = info ? std::string(SeverityName(info->severity)) : "error";
    f.title = fmt::format("{}: {}", nf.cause, nf.meaning);
    f.evidence = nf.evidence;
    if (nf.lines > nf.evidence.size()) f.evidence.push_back(fmt::format("… {} more line(s)", nf.lines - nf.evidence.size()));
    f.fix = info ? std::string(info->fix) : "";
    nccl_causes.push_back(nf.cause);
    rep.findings.push_back(std::move(f));
  }
  // NCCL calls that failed: the symptom, with who and how; NCCL's WARN lines say why.
  if (!failed_calls_.empty()) {
    Finding f;
    f.id = "nccl-call-failed";
    f.severity = "error";
    std::vector<std::string> what;
    for (const auto& [k, nf] : failed_calls_) {
      std::string_view name = NcclResultName(k.second);
      std::string result = name.empty() ? fmt::format("{}", k.second) : fmt::format("{} ({})", name, k.second);
      std::vector<int> ranks(nf.ranks.begin(), nf.ranks.end());
      std::string who = !ranks.empty() ? fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", RankRanges(ranks))
                                       : fmt::format("{}", fmt::join(nf.processes, ", "));
      what.push_back(fmt::format("{} returned {}", NcclApiName(k.first), result));
      f.evidence.push_back(fmt::format("{} returned {} on {} ({} call{})", NcclApiName(k.first), result, who, nf.calls,
                                       nf.calls == 1 ? "" : "s"));
    }
    f.title = fmt::format("NCCL calls failed: {}", fmt::join(what, "; "));
    f.fix = !nccl_causes.empty()
                ? fmt::format("see why in the nccl-failure finding{} ({}): NCCL's own WARN lines",
                              nccl_causes.size() == 1 ? "" : "s", fmt::join(nccl_causes, ", "))
                : "NCCL printed no WARN line p2ptrace could read (the tapped nccl.<host>.<pid>.log files of the trace "
                  "directory hold what it printed); rerun with NCCL_DEBUG=WARN to see its reasons on the job's output";
    rep.findings.push_back(std::move(f));
  }
}

}  // namespace p2ptrace::cli
