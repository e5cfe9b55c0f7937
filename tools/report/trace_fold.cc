#include "tools/report/trace_fold.h"

#include <algorithm>
#include <variant>

#include "core/nccl_failures.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace::cli {

void TraceFold::Timed(const Pending& p, uint64_t ns) {
  auto add = [&](Ops& o) { ++o.timed_calls, ++o.timings, o.timed_bytes += p.bytes, o.timed_ns += ns; };
  add(ops[{p.comm, p.api}]);
  if (p.api == P2PTRACE_NCCL_Send && p.peer >= 0) add(sends[{p.comm, p.peer}]);
}

// One stream's timed group: per (communicator, kind) its calls and bytes over the group's
// duration once; per send pair, that duration only when the group sent to no other peer.
void TraceFold::TimedGroup(const Group& g) {
  std::map<std::pair<uint64_t, int>, std::pair<uint64_t, uint64_t>> kinds;  // (comm, api) -> calls, bytes
  std::map<std::pair<uint64_t, int>, std::pair<uint64_t, uint64_t>> peers;  // (comm, peer) -> sends, bytes
  for (const Pending& p : g.ops) {
    auto& k = kinds[{p.comm, p.api}];
    ++k.first, k.second += p.bytes;
    if (p.api == P2PTRACE_NCCL_Send && p.peer >= 0) {
      auto& q = peers[{p.comm, p.peer}];
      ++q.first, q.second += p.bytes;
    }
  }
  for (const auto& [key, k] : kinds) {
    Ops& o = ops[key];
    o.timed_calls += k.first, o.group_calls += k.first, o.timed_bytes += k.second, o.timed_ns += g.ns, ++o.timings;
  }
  for (const auto& [key, q] : peers) {
    Ops& o = sends[key];
    if (peers.size() == 1)
      o.timed_calls += q.first, o.group_calls += q.first, o.timed_bytes += q.second, o.timed_ns += g.ns, ++o.timings;
    else o.shared_calls += q.first;
  }
}

// AlltoAll, Gather and Scatter move one block (count × type size) between fixed ranks, as NCCL's
// grouped sends do (and did, before 2.28 made them calls of their own): every rank to every other,
// every rank to the root, the root to every other rank. Their pairs get those blocks like sends;
// one duration covers all of an operation's peers, so none of them has a rate of its own. The
// communicator's size and this rank come from its init record; without it nothing is attributed.
void TraceFold::AddFanOut(const p2ptrace_nccl_op_record& o, uint64_t times) {
  if (o.api != P2PTRACE_NCCL_AlltoAll && o.api != P2PTRACE_NCCL_Gather && o.api != P2PTRACE_NCCL_Scatter) return;
  auto c = comm.find(o.comm);
  if (c == comm.end() || c->second.nranks <= 0 || c->second.rank < 0) return;
  int me = c->second.rank, n = c->second.nranks;
  auto add = [&](int peer) {
    Ops& s = sends[{o.comm, peer}];
    s.calls += times;
    s.bytes += o.bytes * times;
    if (o.flags & P2PTRACE_NCCL_CAPTURED) s.graph_calls += times, s.graph_bytes += o.bytes * times;
    if (o.flags & P2PTRACE_NCCL_TIMED) ++s.shared_calls;
  };
  if (o.api == P2PTRACE_NCCL_Gather) {
    if (o.peer >= 0 && o.peer < n && o.peer != me) add(o.peer);
    return;
  }
  if (o.api == P2PTRACE_NCCL_Scatter && o.peer != me) return;
  for (int q = 0; q < n; ++q)
    if (q != me) add(q);
}

void TraceFold::Finish() {
  for (const auto& [seq, g] : groups)
    if (g.timed) TimedGroup(g);
  groups.clear();
  // How many times each graph id's own work ran: its launches, plus one run per run of every graph
  // that includes it (each INCLUDE once: a child added twice runs twice). Holders before what they
  // include (Kahn's order), so each id is replayed once, whatever the nesting or sharing; the ids of
  // a cycle (only a damaged file has one) keep what reached them from outside it.
  std::unordered_map<uint32_t, uint64_t> runs, waiting;  // id -> runs; id -> holders not yet done
  for (const auto& [id, c] : captures) {
    runs[id] += c.failed ? 0 : c.launches;
    for (uint32_t inc : c.includes) ++waiting[inc];
  }
  std::vector<uint32_t> ready;
  for (const auto& [id, c] : captures)
    if (!waiting.count(id)) ready.push_back(id);
  while (!ready.empty()) {
    uint32_t id = ready.back();
    ready.pop_back();
    const Capture& c = captures[id];
    uint64_t n = c.failed ? 0 : runs[id];  // a failed capture made no graph: nothing of it runs
    for (uint32_t inc : c.includes) {
      uint64_t& r = runs[inc];
      r = r + n < r || r + n > kMaxRuns ? kMaxRuns : r + n;
      if (--waiting[inc] == 0 && captures.count(inc)) ready.push_back(inc);
    }
  }
  for (const auto& [id, c] : captures)
    if (!c.failed && runs[id] > 0) Replay(c, runs[id]);
  captures.clear();
}

// copy_apis' path of a transport: 0 direct, 1 host-staged.
static int PathKind(int transport) { return transport == P2PTRACE_TRANSPORT_HOST_STAGED ? 1 : 0; }

// One graph id's own work, n times: into the pairs, the NCCL operations and the call sites, marked
// as replays.
void TraceFold::Replay(const Capture& c, const uint64_t n) {
  for (const auto& [k, v] : c.copies) {
    const auto& [site, src, dst, transport] = k;
    CapturedCopy& r = replayed[{src, dst, transport}];
    r.calls += v.calls * n;
    r.bytes += v.bytes * n;
    if (SiteUse* u = Site(site)) {
      u->copies += v.calls * n;
      u->bytes += v.bytes * n;
      if (transport == P2PTRACE_TRANSPORT_HOST_STAGED) u->host_staged_bytes += v.bytes * n;
      auto& p = u->pairs[{src, dst, transport}];
      p.first += v.calls * n;
      p.second += v.bytes * n;
    }
  }
  for (const auto& [k, v] : c.by_api) {
    const auto& [src, dst, path, api] = k;
    auto& a = copy_apis[{src, dst, path}][api];
    a.first += v.calls * n;
    a.second += v.bytes * n;
  }
  for (const auto& [k, calls] : c.ops) {
    const auto& [comm_ptr, api, peer, bytes, site] = k;
    const uint64_t times = calls * n;
    Ops& a = ops[{comm_ptr, api}];
    a.calls += times, a.bytes += bytes * times, a.graph_calls += times, a.graph_bytes += bytes * times;
    if (api == P2PTRACE_NCCL_Send && peer >= 0) {
      Ops& s = sends[{comm_ptr, peer}];
      s.calls += times, s.bytes += bytes * times, s.graph_calls += times, s.graph_bytes += bytes * times;
    }
    p2ptrace_nccl_op_record o{};
    o.comm = comm_ptr, o.api = static_cast<uint8_t>(api), o.peer = peer, o.bytes = bytes, o.flags = P2PTRACE_NCCL_CAPTURED;
    AddFanOut(o, times);
    if (SiteUse* u = Site(site)) u->nccl_ops += times, u->nccl_bytes += bytes * times;
  }
}

TraceFold::Capture* TraceFold::CaptureOf(uint32_t id) {
  if (captures.size() >= kMaxPending && !captures.count(id)) return nullptr;
  return &captures[id];
}

void TraceFold::AddGraph(const p2ptrace_graph_record& g) {
  if (g.event == P2PTRACE_GRAPH_ALTERED) {  // graph_id is 0 for a graph's node: counted all the same
    ++graph_alterations[g.api];
    return;
  }
  Capture* c = g.graph_id != 0 ? CaptureOf(g.graph_id) : nullptr;
  if (c == nullptr) return;
  if (g.event == P2PTRACE_GRAPH_END_CAPTURE && g.result != 0) {
    c->failed = true;
  } else if (g.event == P2PTRACE_GRAPH_INCLUDE && g.included_id != 0 && g.included_id != g.graph_id) {
    if (c->includes.size() < kMaxIncludes) c->includes.push_back(g.included_id);
  } else if (g.event == P2PTRACE_GRAPH_LAUNCH && g.result == 0) {
    ++c->launches;
    ++graph_launches;
  }
}

TraceFold::SiteUse* TraceFold::Site(uint32_t id) {
  if (id == 0 || (sites.size() >= kMaxSites && !sites.count(id))) return nullptr;
  return &sites[id];
}

void TraceFold::AddKernel(const p2ptrace_nccl_kernel_record& k) {
  if (k.rank < 0 || k.duration_ns == 0 || kernel_colls.size() >= kMaxPending) return;
  auto add = [&](KernelTimes& t) { ++t.calls, t.bytes += k.bytes, t.ns += k.duration_ns; };
  if (k.api == P2PTRACE_NCCL_Send && k.peer >= 0) add(kernel_sends[{k.comm_hash, k.rank, k.peer}]);
  else if (k.api == P2PTRACE_NCCL_Recv && k.peer >= 0) add(kernel_recvs[{k.comm_hash, k.peer, k.rank}]);
  else if (k.api != P2PTRACE_NCCL_Send && k.api != P2PTRACE_NCCL_Recv)
    add(kernel_colls[{k.comm_hash, k.rank, k.nranks, k.api, k.algo, k.channel_mask}]);
}

void TraceFold::Add(const TraceRecord& r) {
  last_ns = std::max(last_ns, r.header().time_ns);
  if (const auto* cr = std::get_if<p2ptrace_copy_record>(&r.body)) {
    if ((cr->flags & P2PTRACE_COPY_CAPTURED) && cr->result == 0) {  // moved nothing yet: its graph's launches will
      if (Capture* g = CaptureOf(cr->h.seq)) {
        CapturedCopy& c = g->copies[{cr->site, cr->src_device, cr->dst_device, cr->transport}];
        ++c.calls;
        c.bytes += cr->bytes;
        CapturedCopy& a = g->by_api[{cr->src_device, cr->dst_device, PathKind(cr->transport), cr->api}];
        ++a.calls;
        a.bytes += cr->bytes;
      }
      return;
    }
    if (cr->result == 0) {  // made directly (a graph's replays count as graph_calls)
      auto& a = copy_apis[{cr->src_device, cr->dst_device, PathKind(cr->transport)}][cr->api];
      ++a.first;
      a.second += cr->bytes;
    }
    SiteUse* u = Site(cr->site);
    if (u == nullptr) return;
    if (cr->result != 0) {
      ++u->errors;
      return;
    }
    ++u->copies;
    u->bytes += cr->bytes;
    if (cr->transport == P2PTRACE_TRANSPORT_HOST_STAGED) u->host_staged_bytes += cr->bytes;
    auto& p = u->pairs[{cr->src_device, cr->dst_device, cr->transport}];
    ++p.first;
    p.second += cr->bytes;
  } else if (const auto* pr = std::get_if<p2ptrace_peer_record>(&r.body)) {
    if (pr->device < 0 || pr->peer < 0) return;
    PeerFacts& f = facts[{std::min<int>(pr->device, pr->peer), std::max<int>(pr->device, pr->peer)}];
    // The runtime's and the driver's calls say the same (704: already enabled, in both).
    bool can = pr->api == P2PTRACE_API_cudaDeviceCanAccessPeer || pr->api == P2PTRACE_API_cuDeviceCanAccessPeer;
    bool enable = pr->api == P2PTRACE_API_cudaDeviceEnablePeerAccess || pr->api == P2PTRACE_API_cuCtxEnablePeerAccess;
    // Access granted to mapped or pool memory (trace 1.8) opens the pair as enabling peer access does.
    bool grant = pr->api == P2PTRACE_API_cuMemSetAccess || pr->api == P2PTRACE_API_cuMemPoolSetAccess ||
                 pr->api == P2PTRACE_API_cudaMemPoolSetAccess;
    if (grant && pr->result == 0 && pr->value != 0) f.enabled_ever = true;
    if (can && pr->result == 0) f.can_access = pr->value;
    if (enable) {
      if (pr->result == 0 || pr->result == 704) f.enabled_ever = true;
      else f.failed_enables.push_back(fmt::format("{}({}) on device {} returned {}", ApiName(pr->api), pr->peer,
                                                  pr->device, pr->result));
    }
  } else if (const auto* c = std::get_if<p2ptrace_nccl_comm_record>(&r.body)) {
    nccl_used = true;
    if (c->result == P2PTRACE_RESULT_PENDING) return;  // an init that never returned: the stopped finding's
    if (NcclCallFailed(c->result)) ++nccl_failures[{c->api, c->result}];
    if (c->comm && c->result == 0) comm[c->comm] = {c->id_hash, c->nranks, c->rank, c->cuda_device};
  } else if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body)) {
    nccl_used = true;
    if (o->result == P2PTRACE_RESULT_PENDING) return;  // never returned: the stopped finding's (report/stopped.h)
    if ((o->flags & P2PTRACE_NCCL_CAPTURED) && !NcclCallFailed(o->result)) {  // runs at its graph's launches
      if (SiteUse* u = Site(o->site)) u->nccl_apis.insert(o->api);
      if (Capture* g = CaptureOf(o->h.seq)) ++g->ops[{o->comm, o->api, o->peer, o->bytes, o->site}];
      return;
    }
    if (SiteUse* u = Site(o->site)) {
      u->nccl_apis.insert(o->api);
      if (NcclCallFailed(o->result)) ++u->nccl_errors;
      else ++u->nccl_ops, u->nccl_bytes += o->bytes;
    }
    Ops& a = ops[{o->comm, o->api}];
    if (NcclCallFailed(o->result)) {
      ++nccl_failures[{o->api, o->result}];
      ++a.errors;
      return;
    }
    ++a.calls;
    a.bytes += o->bytes;
    if (o->api == P2PTRACE_NCCL_Send && o->peer >= 0) {
      Ops& s = sends[{o->comm, o->peer}];
      ++s.calls;
      s.bytes += o->bytes;
    }
    AddFanOut(*o);
    if ((o->flags & P2PTRACE_NCCL_TIMED) == 0) return;  // no TIMING record follows
    Pending p{o->comm, o->api, o->peer, o->bytes};
    if (o->flags & P2PTRACE_NCCL_IN_GROUP) {
      if (groups.size() >= kMaxPending) groups.clear();
      Group& g = groups[o->h.seq];
      g.ops.push_back(p);
      if (auto e = timings.find(o->h.seq); e != timings.end()) g.ns = e->second, g.timed = true;
      return;
    }
    if (auto e = timings.find(o->h.seq); e != timings.end()) {
      Timed(p, e->second);
    } else {
      if (pending.size() + pending_more.size() >= kMaxPending) pending.clear(), pending_more.clear();
      if (!pending.try_emplace(o->h.seq, p).second) pending_more.emplace(o->h.seq, p);
    }
  } else if (const auto* k = std::get_if<p2ptrace_nccl_kernel_record>(&r.body)) {
    nccl_used = true;
    AddKernel(*k);
  } else if (const auto* gr = std::get_if<p2ptrace_graph_record>(&r.body)) {
    AddGraph(*gr);
  } else if (const auto* t = std::get_if<p2ptrace_timing_record>(&r.body); t && t->src_device < 0) {
    if (auto g = groups.find(t->h.seq); g != groups.end()) g->second.ns = t->duration_ns, g->second.timed = true;
    if (auto it = pending.find(t->h.seq); it != pending.end()) {
      Timed(it->second, t->duration_ns);
      pending.erase(it);
    }
    if (!pending_more.empty()) {
      auto [first, last] = pending_more.equal_range(t->h.seq);
      for (auto it = first; it != last; ++it) Timed(it->second, t->duration_ns);
      pending_more.erase(first, last);
    }
    if (timings.size() >= kMaxPending) timings.clear();
    timings[t->h.seq] = t->duration_ns;
  }
}

}  // namespace p2ptrace::cli
