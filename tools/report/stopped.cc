#include "tools/report/stopped.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <set>
#include <sstream>
#include <fstream>
#include <tuple>

#include "core/nccl_failures.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "tools/report/report.h"

namespace p2ptrace::cli {
namespace {

bool IsP2p(int api) { return api == P2PTRACE_NCCL_Send || api == P2PTRACE_NCCL_Recv; }

// Wall-clock time of day, UTC, to the millisecond: when each rank was last seen is compared by eye.
std::string Clock(uint64_t realtime_ns) {
  if (realtime_ns == 0) return "?";
  time_t s = static_cast<time_t>(realtime_ns / 1000000000ull);
  struct tm tm {};
  gmtime_r(&s, &tm);
  return fmt::format("{:02}:{:02}:{:02}.{:03} UTC", tm.tm_hour, tm.tm_min, tm.tm_sec, (realtime_ns / 1000000) % 1000);
}

// This machine's boot id: a trace with the same one was written here, so its pid and CLOCK_MONOTONIC
// are ours to look at.
const std::string& LocalBootId() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(in, s);
    return s;
  }();
  return id;
}

// The process now, from /proc/PID/stat: its state letter and start time (ns since boot); the pid
// reused by a process that started after the trace did is not it.
StoppedProcess::Here LookNow(const p2ptrace_file_header& h, uint64_t now_ns) {
  std::ifstream in("/proc/" + std::to_string(h.pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  size_t close = stat.rfind(')');  // the command may hold spaces and parentheses
  if (close == std::string::npos) return StoppedProcess::Here::kGone;
  std::istringstream rest(stat.substr(close + 2));
  std::string field, state;
  rest >> state;
  for (int i = 4; i <= 22 && rest >> field; ++i)  // field 22: starttime, in clock ticks since boot
    if (i == 22) {
      uint64_t started = std::strtoull(field.c_str(), nullptr, 10) * (1000000000ull / static_cast<uint64_t>(sysconf(_SC_CLK_TCK)));
      if (started > h.start_monotonic_ns + 1000000000ull) return StoppedProcess::Here::kGone;  // another process
    }
  if (state == "Z" || state == "X") return StoppedProcess::Here::kGone;
  if (state == "T" || state == "t") return StoppedProcess::Here::kStopped;
  uint64_t period = std::max<uint64_t>(h.heartbeat_period_ms, 1000) * 1000000ull;
  if (h.heartbeat_ns != 0 && now_ns > h.heartbeat_ns + 3 * period) return StoppedProcess::Here::kStuck;
  return StoppedProcess::Here::kBeating;
}

std::string RankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return (ranks.size() == 1 ? "rank " : "ranks ") + RankRanges(ranks);
}

// Keeps the newest `keep` of `calls`, in call order.
void NewestCalls(std::vector<CalledCollective>* calls, size_t keep) {
  auto earlier = [](const CalledCollective& a, const CalledCollective& b) { return a.called_ns < b.called_ns; };
  std::sort(calls->begin(), calls->end(), earlier);
  if (calls->size() > keep) calls->erase(calls->begin(), calls->end() - static_cast<long>(keep));
}

}  // namespace

std::string StoppedOp::Text() const {
  std::string what = fmt::format("{} #{}", NcclApiName(api), seq);
  std::string size = BytesText(bytes);
  if (!NcclTypeName(datatype).empty()) size += " " + std::string(NcclTypeName(datatype));
  if (p2p) size += fmt::format(" {} rank {}", api == P2PTRACE_NCCL_Send ? "to" : "from", peer);
  else if (peer >= 0) size += fmt::format(", root {}", peer);
  return fmt::format("{} ({})", what, size);
}

void StoppedFold::Add(const TraceRecord& r) {
  last_record_ns_ = std::max(last_record_ns_, r.header().time_ns);
  if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body)) {
    if (o->flags & P2PTRACE_NCCL_CAPTURED) return;  // a graph node: runs at launches, not numbered (as NCCL)
    Comm& c = ops_[o->comm];
    ++(IsP2p(o->api) ? c.p2p : c.collectives);
    if (!IsP2p(o->api)) {
      c.first_collective = std::min(c.first_collective, o->h.time_ns);
      c.window.push_back({o->h.time_ns, o->bytes, o->api, o->datatype});
      if (c.window.size() >= 2 * kWindow) NewestCalls(&c.window, kWindow);
    }
    Op op{o->h.time_ns, o->stream, o->bytes, o->result, o->peer, o->api, o->datatype};
    // The newest kKeep by time (records come chunk by chunk: not in time order across threads).
    auto later = [](const Op& a, const Op& b) { return a.time < b.time; };
    if (c.last.size() < kKeep) {
      c.last.insert(std::upper_bound(c.last.begin(), c.last.end(), op, later), op);
    } else if (op.time >= c.last.front().time) {
      c.last.erase(c.last.begin());
      c.last.insert(std::upper_bound(c.last.begin(), c.last.end(), op, later), op);
    }
    if (o->result > 0 && NcclCallFailed(o->result) && errors_.size() < 4)
      errors_.push_back(fmt::format("{} returned {} ({})", NcclApiName(o->api), o->result, NcclResultName(o->result)));
  } else if (const auto* c = std::get_if<p2ptrace_nccl_comm_record>(&r.body)) {
    if (c->result == 0 && c->comm != 0 && c->api <= P2PTRACE_NCCL_CommSplit) {
      comms_[c->comm] = {c->id_hash, c->rank, c->nranks};
    } else if (c->result == P2PTRACE_RESULT_PENDING) {
      pending_init_ = fmt::format("{} (rank {} of {})", NcclApiName(c->api), c->rank, c->nranks);
      pending_init_time_ = c->h.time_ns;
    } else if (c->result > 0 && NcclCallFailed(c->result) && errors_.size() < 4) {
      errors_.push_back(fmt::format("{} {} ({})", NcclApiName(c->api),
                                    c->api == P2PTRACE_NCCL_CommGetAsyncError ? "reported" : "returned",
                                    fmt::format("{}, {}", c->result, NcclResultName(c->result))));
    }
  } else if (const auto* p = std::get_if<p2ptrace_nccl_progress_record>(&r.body)) {
    if (p->state == P2PTRACE_PROGRESS_DONE) done_through_[p->stream] = std::max(done_through_[p->stream], p->through);
  }
}

StoppedProcess StoppedFold::Finish(const Trace& t, std::map<std::string, StoppedComm>* comms, size_t index) {
  const p2ptrace_file_header& h = t.header;
  // Each host's CLOCK_MONOTONIC to wall-clock time through its own anchor: hosts are compared by
  // their wall clocks, each process's times by its monotonic clock.
  auto real = [&](uint64_t mono) { return mono == 0 ? 0 : mono - h.start_monotonic_ns + h.start_realtime_ns; };
  StoppedProcess p;
  p.host = t.Host();
  p.job_id = std::string(h.job_id, strnlen(h.job_id, sizeof h.job_id));
  p.file = t.path;
  p.pid = h.pid;
  p.rank = h.rank;
  p.incomplete = t.CutShort() || t.missing_chunks > 0 || h.dropped_records > 0 || t.bad_chunks > 0;
  p.boot_id = std::string(h.boot_id, strnlen(h.boot_id, sizeof h.boot_id));
  p.realtime_minus_monotonic_ns = static_cast<int64_t>(h.start_realtime_ns) - static_cast<int64_t>(h.start_monotonic_ns);
  uint64_t last = std::max({last_record_ns_, h.heartbeat_ns, h.end_monotonic_ns});
  p.last_sign_realtime_ns = real(last);
  p.exited = h.state == P2PTRACE_STATE_EXITED;
  p.exit_status = h.exit_status_known ? h.exit_status : 0;
  if (p.exited) p.life = p.exit_status != 0 ? fmt::format("exited with status {} at {}", p.exit_status, Clock(p.last_sign_realtime_ns)) : "exited";
  else if (h.state == P2PTRACE_STATE_FATAL_SIGNAL) p.life = "fatal signal " + SignalName(h.fatal_signal);
  else if (h.heartbeat_ns != 0) p.life = "no heartbeat since " + Clock(real(h.heartbeat_ns));  // FinishStopped may say "running"
  else p.life = "ended without exit (no heartbeat recorded)";
  if (!p.exited && h.state != P2PTRACE_STATE_FATAL_SIGNAL && !p.boot_id.empty() && p.boot_id == LocalBootId()) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
    p.here = LookNow(h, now);
    using H = StoppedProcess::Here;
    std::string beat = h.heartbeat_ns ? " (last heartbeat " + Clock(real(h.heartbeat_ns)) + ")" : "";
    if (p.here == H::kGone) p.life = "gone without exit" + beat + ": killed (SIGKILL, the OOM killer) or crashed";
    if (p.here == H::kStopped) p.life = "stopped now (SIGSTOP, SIGTSTP or a debugger)" + beat;
    if (p.here == H::kStuck) p.life = "alive, but its watchdog has not beaten since " + Clock(real(h.heartbeat_ns)) +
                                     " (stuck in the kernel, or starved)";
  }
  p.nccl_errors = errors_;
  if (!pending_init_.empty())
    p.pending_init = fmt::format("{} entered at {} and never returned", pending_init_, Clock(real(pending_init_time_)));
  bool watched = h.heartbeat_ns != 0;
  for (auto& [ptr, c] : ops_) {
    auto info = comms_.find(ptr);
    if (info == comms_.end()) continue;  // its init was not recorded (before the trace opened)
    if (p.rank < 0 && info->second.rank >= 0 && (comms_.size() == 1)) p.rank = info->second.rank;
    std::string id = fmt::format("{:08x}", info->second.hash >> 32);
    StoppedComm& sc = (*comms)[p.job_id + "/" + id];
    sc.id = id;
    sc.nranks = std::max(sc.nranks, info->second.nranks);
    StoppedMember m;
    m.process = index;
    m.rank = info->second.rank;
    m.collectives = c.collectives;
    m.p2p = c.p2p;
    if (c.first_collective != UINT64_MAX) m.first_called_realtime_ns = real(c.first_collective);
    NewestCalls(&c.window, kWindow);
    m.first_called = c.collectives - c.window.size() + 1;
    m.called = std::move(c.window);
    uint64_t coll = c.collectives, p2p = c.p2p;
    for (auto it = c.last.rbegin(); it != c.last.rend(); ++it) {  // newest first: numbers count down
      StoppedOp op;
      op.p2p = IsP2p(it->api);
      op.seq = op.p2p ? p2p-- : coll--;
      op.api = it->api;
      op.bytes = it->bytes;
      op.datatype = it->datatype - 1;
      op.peer = it->peer;
      op.called_realtime_ns = real(it->time);
      auto done = done_through_.find(it->stream);
      if (it->result == P2PTRACE_RESULT_PENDING) op.state = "in the call";
      else if (NcclCallFailed(it->result)) op.state = fmt::format("failed {} ({})", it->result, NcclResultName(it->result));
      else if (done != done_through_.end() && done->second >= it->time) op.state = "finished";
      else if (h.state == P2PTRACE_STATE_EXITED) op.state = "finished";
      else if (watched && it->stream != 0) op.state = "on the GPU";
      else op.state = "returned";
      m.last.insert(m.last.begin(), op);
    }
    sc.members.push_back(std::move(m));
  }
  return p;
}

namespace {

bool Unfinished(const StoppedOp& op) { return op.state == "in the call" || op.state == "on the GPU"; }

// The newest collective a member called, or null.
const StoppedOp* LastCollective(const StoppedMember& m) {
  for (auto it = m.last.rbegin(); it != m.last.rend(); ++it)
    if (!it->p2p) return &*it;
  return nullptr;
}
const StoppedOp* Newest(const StoppedMember& m) { return m.last.empty() ? nullptr : &m.last.back(); }

std::string Signature(const StoppedOp& op) {
  return fmt::format("{} ({}{}{})", NcclApiName(op.api), BytesText(op.bytes),
                     NcclTypeName(op.datatype).empty() ? "" : " " + std::string(NcclTypeName(op.datatype)),
                     op.peer >= 0 ? fmt::format(", root {}", op.peer) : "");
}

// Where the communicator's ranks stand: who waits in which operation, who never called it, and
// where ranks disagree on what operation a number is.
void Compare(StoppedComm& c, const std::vector<StoppedProcess>& procs) {
  uint64_t top = 0;
  for (const StoppedMember& m : c.members) top = std::max(top, m.collectives);
  std::map<uint64_t, std::map<std::string, std::vector<int>>> by_seq;  // seq → signature → ranks
  for (const StoppedMember& m : c.members)
    for (const StoppedOp& op : m.last)
      if (!op.p2p) by_seq[op.seq][Signature(op)].push_back(m.rank);
  for (const auto& [seq, sigs] : by_seq) {
    if (sigs.size() < 2 || c.mismatches.size() >= 5) continue;
    std::vector<std::string> parts;
    for (const auto& [sig, ranks] : sigs) parts.push_back(fmt::format("{} called {}", RankList(ranks), sig));
    c.mismatches.push_back(fmt::format("#{}: {}", seq, fmt::join(parts, "; ")));
    if (!c.odd_ranks.empty() || sigs.size() != 2) continue;  // the first mismatch; two sides, one smaller
    auto small = sigs.begin(), big = std::next(small);
    if (small->second.size() > big->second.size()) std::swap(small, big);
    if (small->second.size() == big->second.size()) continue;
    c.odd_ranks = small->second;
    c.odd_text = fmt::format("called {} as #{} where {} called {}", small->first, seq, RankList(big->second), big->first);
  }
  if (top == 0) return;
  std::vector<int> waiting, stopped_in, behind;
  std::string op_text, behind_text;
  for (const StoppedMember& m : c.members) {
    const StoppedOp* op = LastCollective(m);
    const StoppedProcess& p = procs[m.process];
    if (m.collectives == top && op != nullptr && Unfinished(*op)) {
      (p.beating || p.exited ? waiting : stopped_in).push_back(m.rank);
      if (op_text.empty()) op_text = fmt::format("{} #{}", NcclApiName(op->api), op->seq);
    } else if (m.collectives < top) {
      behind.push_back(m.rank);
      if (behind_text.empty())
        behind_text = (op ? fmt::format("its last: #{} ({})", op->seq, op->state) : "it called no collective") +
                      (p.exited ? "; it " + p.life : "");
    }
  }
  std::vector<int> absent;
  std::set<int> seen;
  for (const StoppedMember& m : c.members) seen.insert(m.rank);
  for (int r = 0; r < c.nranks && absent.size() < 64; ++r)
    if (!seen.count(r)) absent.push_back(r);
  std::vector<std::string> parts;
  if (!waiting.empty()) parts.push_back(fmt::format("{} wait in {}", RankList(waiting), op_text));
  if (!stopped_in.empty())
    parts.push_back(fmt::format("{} {} in it", RankList(stopped_in), waiting.empty() ? "stopped" : "stopped (no heartbeat)"));
  if (!behind.empty())
    parts.push_back(fmt::format("{} never called #{} ({})", RankList(behind), top, behind_text));
  if (!absent.empty()) parts.push_back(fmt::format("{} left no trace", RankList(absent)));
  c.waits = fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

namespace {

int64_t Median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Hosts whose wall clocks disagree: each process's times came through its own host's anchor, so a
// host whose clock is off shifts all of its ranks alike. The ranks of a communicator call its first
// collective together (their init returned together): a host whose ranks did so more than 2 s from
// the others' median, by its clock, has its times moved by that much, and the finding says so.
void CorrectHostClocks(StoppedFinding* f) {
  std::map<std::string, std::vector<int64_t>> off;  // host -> its ranks' distance from their communicators' median
  std::set<std::string> hosts;
  for (const StoppedProcess& p : f->processes) hosts.insert(p.job_id + "\n" + p.host);
  if (hosts.size() < 2) return;
  for (const StoppedComm& c : f->comms) {
    std::vector<int64_t> firsts;
    for (const StoppedMember& m : c.members)
      if (m.first_called_realtime_ns) firsts.push_back(static_cast<int64_t>(m.first_called_realtime_ns));
    if (firsts.size() < 3) continue;  // a median of two cannot say which is off
    int64_t med = Median(firsts);
    for (const StoppedMember& m : c.members)
      if (m.first_called_realtime_ns)
        off[f->processes[m.process].host].push_back(static_cast<int64_t>(m.first_called_realtime_ns) - med);
  }
  constexpr int64_t kTrustedNs = 2000000000;
  for (const auto& [host, d] : off) {
    int64_t shift = Median(d);
    if (shift > -kTrustedNs && shift < kTrustedNs) continue;
    for (size_t i = 0; i < f->processes.size(); ++i) {
      StoppedProcess& p = f->processes[i];
      if (p.host != host) continue;
      p.last_sign_realtime_ns -= shift;
      p.realtime_minus_monotonic_ns -= shift;
      for (StoppedComm& c : f->comms)
        for (StoppedMember& m : c.members)
          if (m.process == i)
            for (StoppedOp& op : m.last) op.called_realtime_ns -= shift;
    }
    f->notes.push_back(fmt::format("{}'s clock reads {:.1f} s {} the other hosts' (its ranks called their communicators' "
                                   "first collective that far off, by its clock): its times are corrected by that much",
                                   host, std::abs(shift) * 1e-9, shift > 0 ? "ahead of" : "behind"));
  }
}

}  // namespace

void FinishStopped(StoppedFinding* f, std::map<std::string, StoppedComm> comms, const std::vector<PairPath>& paths,
                   double stall_seconds) {
  auto& procs = f->processes;
  for (auto& [key, c] : comms) f->comms.push_back(std::move(c));
  CorrectHostClocks(f);
  // Beating: a heartbeat as recent as the newest of its job (3 periods of slack, at least 3 s).
  std::map<std::string, uint64_t> newest;
  for (const StoppedProcess& p : procs) newest[p.job_id] = std::max(newest[p.job_id], p.last_sign_realtime_ns);
  constexpr uint64_t kSlackNs = 3000000000ull;
  for (StoppedProcess& p : procs)
    if (p.here == StoppedProcess::Here::kBeating) {  // on this machine, and beating now
      p.beating = true;
      p.life = "running (beating now)";
    } else if (p.here == StoppedProcess::Here::kNotHere && p.life.rfind("no heartbeat", 0) == 0 &&
               p.last_sign_realtime_ns + kSlackNs >= newest[p.job_id]) {
      p.beating = true;
      p.life = "beating until " + Clock(p.last_sign_realtime_ns) + " (as late as any process of the job)";
    }
  for (StoppedComm& c : f->comms) Compare(c, procs);

  // Unfinished for long: an operation or an init still open stall_seconds after it was called.
  uint64_t stall_ns = static_cast<uint64_t>(stall_seconds * 1e9);
  std::vector<const StoppedComm*> stuck;
  for (const StoppedComm& c : f->comms)
    for (const StoppedMember& m : c.members)
      if (const StoppedOp* op = Newest(m); op && Unfinished(*op) && !procs[m.process].exited &&
                                           procs[m.process].last_sign_realtime_ns >= op->called_realtime_ns + stall_ns) {
        stuck.push_back(&c);
        break;
      }
  // Who stopped first: a process that stopped beating or died, earliest last sign of life; within
  // the clocks' margin, the one behind in its communicators (the others wait for it).
  auto behind_in = [&](size_t i) {
    for (const StoppedComm& c : f->comms) {
      uint64_t top = 0, mine = UINT64_MAX;
      for (const StoppedMember& m : c.members) {
        top = std::max(top, m.collectives);
        if (m.process == i) mine = m.collectives;
      }
      if (mine != UINT64_MAX && mine < top && !procs[i].incomplete) return true;
    }
    return false;
  };
  // Stopped: no exit and no heartbeat. Also gone: exited (with an error, or behind) while others of
  // its job had not (torchrun kills the rest once one rank raised).
  std::set<std::string> unfinished_jobs;
  for (const StoppedProcess& p : procs)
    if (!p.exited) unfinished_jobs.insert(p.job_id);
  std::vector<size_t> dead;
  for (size_t i = 0; i < procs.size(); ++i)
    if ((!procs[i].exited && !procs[i].beating) ||
        (procs[i].exited && unfinished_jobs.count(procs[i].job_id) && (procs[i].exit_status != 0 || behind_in(i))))
      dead.push_back(i);
  std::set<std::string> jobs;
  bool any_abnormal = false;
  for (const StoppedProcess& p : procs) {
    jobs.insert(p.job_id);
    if (!p.exited && !p.beating) any_abnormal = true;
    if (!p.nccl_errors.empty() || !p.pending_init.empty()) any_abnormal = true;
  }
  f->present = any_abnormal || !stuck.empty() || !dead.empty();
  if (!f->present) return;
  if (jobs.size() > 1)
    f->notes.push_back(fmt::format("traces of {} jobs are in this directory: each communicator is compared within its job "
                                   "(job ids: {})", jobs.size(), fmt::join(jobs, ", ")));
  for (const StoppedProcess& p : procs)
    if (p.incomplete)
      f->notes.push_back(fmt::format("{} (pid {}): its trace is cut short or dropped records; its operation numbers may be "
                                     "low, so it is never named first on them alone", p.host, p.pid));

  std::sort(dead.begin(), dead.end(),
            [&](size_t a, size_t b) { return procs[a].last_sign_realtime_ns < procs[b].last_sign_realtime_ns; });
  constexpr uint64_t kMarginNs = 2000000000ull;  // two heartbeats: when each was last seen is known to a beat
  std::set<std::string> hosts_of_dead;
  if (!dead.empty()) {
    std::vector<size_t> close;
    for (size_t i : dead)
      if (procs[i].last_sign_realtime_ns <= procs[dead[0]].last_sign_realtime_ns + kMarginNs) close.push_back(i);
    for (size_t i : close) hosts_of_dead.insert(procs[i].host);
    std::vector<size_t> behind;
    for (size_t i : close)
      if (behind_in(i)) behind.push_back(i);
    if (close.size() == 1) f->first_process = static_cast<int>(close[0]);
    else if (behind.size() == 1) f->first_process = static_cast<int>(behind[0]);
    else {
      std::vector<std::string> names;
      for (size_t i : close) names.push_back(fmt::format("{} pid {}", procs[i].host, procs[i].pid));
      f->notes.push_back(fmt::format("{} stopped within {} s of each other{}: which was first cannot be told from "
                                     "their clocks",
                                     fmt::join(names, ", "), kMarginNs / 1000000000ull,
                                     hosts_of_dead.size() > 1 ? " on different hosts (their clocks may differ)" : ""));
    }
  }
  // None stopped: the odd one out of a communicator's first mismatch (Flight Recorder's culprit).
  const StoppedComm* odd = nullptr;
  if (f->first_process < 0 && dead.empty())
    for (const StoppedComm& c : f->comms)
      if (c.odd_ranks.size() == 1 && odd == nullptr)
        for (const StoppedMember& m : c.members)
          if (m.rank == c.odd_ranks[0]) f->first_process = static_cast<int>(m.process), odd = &c;
  // None stopped: one that lives but never joined the operation the others wait in.
  if (f->first_process < 0 && dead.empty())
    for (size_t i = 0; i < procs.size() && f->first_process < 0; ++i)
      if (procs[i].beating && behind_in(i)) f->first_process = static_cast<int>(i);
  // None behind: the first to report an NCCL error.
  if (f->first_process < 0 && dead.empty())
    for (size_t i = 0; i < procs.size() && f->first_process < 0; ++i)
      if (!procs[i].nccl_errors.empty() || !procs[i].pending_init.empty()) f->first_process = static_cast<int>(i);

  auto name = [&](const StoppedProcess& p) {
    return p.rank >= 0 ? fmt::format("rank {} ({}, pid {})", p.rank, p.host, p.pid) : fmt::format("{} pid {}", p.host, p.pid);
  };
  std::vector<const StoppedOp*> first_ops;
  if (f->first_process >= 0) {
    const StoppedProcess& p = procs[f->first_process];
    std::string how = odd != nullptr ? fmt::format("{} of communicator {}", odd->odd_text, odd->id)
                      : p.exited && !dead.empty() && std::find(dead.begin(), dead.end(), size_t(f->first_process)) != dead.end()
                          ? p.life + ", while the others waited for it"
                      : p.exited || p.beating
                          ? (p.nccl_errors.empty() ? "is alive but never joined the operation the others wait in"
                                                   : "reported an NCCL error: " + p.nccl_errors.front())
                      : p.life.rfind("fatal", 0) == 0 ? "died of a " + p.life.substr(6) + " at " + Clock(p.last_sign_realtime_ns)
                      : p.life.rfind("no heartbeat", 0) == 0
                          ? "stopped first: " + p.life + " (stopped, killed or stuck), while the others went on"
                          : "stopped first: " + p.life;
    f->verdict = fmt::format("{} {}", name(p), how);
    std::vector<std::string> doing;
    for (const StoppedComm& c : f->comms)
      for (const StoppedMember& m : c.members)
        if (m.process == static_cast<size_t>(f->first_process))
          if (const StoppedOp* op = Newest(m)) {
            doing.push_back(fmt::format("communicator {} (rank {}): {}, {}, called at {}", c.id, m.rank, op->Text(),
                                        op->state, Clock(op->called_realtime_ns)));
            first_ops.push_back(op);
            for (const PairPath& path : paths) {
              if (path.comm != c.id || f->pair_notes.size() >= 6) continue;
              bool mine = op->p2p ? ((path.src_rank == m.rank && path.dst_rank == op->peer) ||
                                     (path.dst_rank == m.rank && path.src_rank == op->peer))
                                  : (path.src_rank == m.rank || path.dst_rank == m.rank);
              if (!mine) continue;
              f->pair_notes.push_back(path.text);
              if (!path.gpus.empty()) f->pairs.push_back(path.gpus);
            }
          }
    if (!p.pending_init.empty()) doing.push_back(p.pending_init);
    f->first_doing = doing.empty() ? "no NCCL operation on record" : fmt::format("{}", fmt::join(doing, "; "));
  } else if (!stuck.empty()) {
    const StoppedComm& c = *stuck.front();
    // The communicator's pairs on a path known to hang transfers first: the likely cause.
    std::vector<const PairPath*> mine;
    for (const PairPath& path : paths)
      if (path.comm == c.id) mine.push_back(&path);
    std::stable_sort(mine.begin(), mine.end(), [](const PairPath* a, const PairPath* b) { return a->hang_risk > b->hang_risk; });
    f->verdict = fmt::format("no rank stopped: every rank of communicator {} is alive and the operation they are in "
                             "has not finished ({})", c.id, c.waits);
    if (!mine.empty() && mine.front()->hang_risk)
      f->verdict += fmt::format("; rank {} -> rank {} is on a path known to hang peer transfers", mine.front()->src_rank,
                                mine.front()->dst_rank);
    for (const PairPath* path : mine) {
      if (f->pair_notes.size() >= 8) break;
      f->pair_notes.push_back(path->text);
      if (!path->gpus.empty()) f->pairs.push_back(path->gpus);
    }
  } else if (!dead.empty()) {
    f->verdict = "processes stopped without exit; which was first cannot be told (see the notes)";
  } else {
    f->verdict = "the job did not end cleanly, but no rank can be named";
  }
}

Finding StoppedAsFinding(const StoppedFinding& f) {
  Finding out;
  out.id = "stopped";
  out.severity = "error";
  out.title = f.verdict;
  out.pairs = f.pairs;
  const StoppedProcess* first = f.first_process >= 0 ? &f.processes[static_cast<size_t>(f.first_process)] : nullptr;
  if (first != nullptr) {
    if (first->rank >= 0) out.ranks.push_back(first->rank);
    out.evidence.push_back("it was doing: " + f.first_doing);
    out.evidence.push_back(fmt::format("{} (pid {}): {}", first->host, first->pid, first->life));
  }
  // Where the others wait: in the title for the first rank's communicator, as evidence for all.
  bool titled = false;
  for (const StoppedComm& c : f.comms) {
    if (c.waits.empty()) continue;
    out.evidence.push_back(fmt::format("communicator {} ({} ranks): {}", c.id, c.nranks, c.waits));
    bool firsts = first == nullptr;
    for (const StoppedMember& m : c.members) firsts |= m.process == static_cast<size_t>(f.first_process);
    if (firsts && !titled) out.title += "; " + c.waits, titled = true;
    for (const std::string& m : c.mismatches) out.evidence.push_back(fmt::format("communicator {}: {}", c.id, m));
  }
  for (const std::string& n : f.pair_notes) out.evidence.push_back("pair: " + n);
  for (const std::string& n : f.notes) out.evidence.push_back("note: " + n);
  // What to do depends on how it stopped; the pairs' own fixes are in their notes above.
  using H = StoppedProcess::Here;
  if (first == nullptr)
    out.fix = "the pairs above are the communicator's paths, those known to hang peer transfers first: apply their fix, "
              "or rerun with NCCL_P2P_DISABLE=1 to confirm the path is the cause";
  else if (first->here == H::kStopped)
    out.fix = fmt::format("it is stopped, not dead: resume it (kill -CONT {}) or detach the debugger holding it; the others "
                          "wait in their operation until it returns or NCCL's timeout ends them", first->pid);
  else if (first->here == H::kStuck)
    out.fix = fmt::format("it is alive but starved or stuck in the kernel: look at its stacks (py-spy dump --pid {}, or "
                          "gdb -p {} -batch -ex 'thread apply all bt') and at dmesg on {}", first->pid, first->pid, first->host);
  else if (first->exited || first->beating)
    out.fix = "read its own output for why it left or never joined (an exception, a different code path or batch count); "
              "every rank must call the same collectives in the same order";
  else if (first->here == H::kNotHere && first->life.rfind("fatal", 0) != 0)
    out.fix = fmt::format("it stopped beating: on {}, `p2ptrace report` of this directory tells stopped (kill -CONT {} "
                          "resumes it) from dead (then its stderr and dmesg: the OOM killer, a GPU Xid error say why)",
                          first->host, first->pid);
  else
    out.fix = fmt::format("find why it died: its own stderr, dmesg on {} (the OOM killer, a GPU Xid error), a core file; "
                          "the others cannot finish the operation without it", first->host);
  return out;
}

}  // namespace p2ptrace::cli
