// The NCCL log grammar. Every shape accepted here is one of NCCL's format strings of some release
// (quoted where it is parsed); the fixtures in tests/fixtures/nccl-logs are real logs of them.
//
// Hand-written scanning, no regex: a log of a large job has millions of lines and the log tap
// parses them inside the traced process.
#include "core/nccl_log.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>

#include "core/nccl_net.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}

// Strict integer: the whole of `s`, optional '-', no overflow. A malformed number is "no number".
bool ToInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Forward cursor over one message. Every Take* leaves the cursor unchanged when it fails.
class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}
  std::string_view rest() const { return s_; }
  bool empty() const { return s_.empty(); }
  bool Take(std::string_view lit) {
    if (!s_.starts_with(lit)) return false;
    s_.remove_prefix(lit.size());
    return true;
  }
  void SkipSpaces() {
    while (!s_.empty() && IsSpace(s_.front())) s_.remove_prefix(1);
  }
  // Digits, with an optional leading '-' (NCCL prints -1 for "none").
  bool TakeInt(int* out) {
    size_t n = (!s_.empty() && s_.front() == '-') ? 1 : 0;
    size_t digits_start = n;
    while (n < s_.size() && IsDigit(s_[n])) ++n;
    if (n == digits_start || !ToInt(s_.substr(0, n), out)) return false;
    s_.remove_prefix(n);
    return true;
  }
  // Digits only: channels, connection indices and ranks are never negative in a `via` line.
  bool TakeCount(int* out) {
    if (s_.empty() || !IsDigit(s_.front())) return false;
    return TakeInt(out);
  }
  // `[text]` with no ']' or space inside; returns text.
  bool TakeBracketed(std::string_view* inside) {
    if (s_.empty() || s_.front() != '[') return false;
    size_t close = s_.find(']');
    if (close == std::string_view::npos || close > 64) return false;
    std::string_view in = s_.substr(1, close - 1);
    if (in.empty() || std::any_of(in.begin(), in.end(), IsSpace)) return false;
    *inside = in;
    s_.remove_prefix(close + 1);
    return true;
  }
  std::string_view TakeWord() {
    size_t n = 0;
    while (n < s_.size() && !IsSpace(s_[n])) ++n;
    std::string_view w = s_.substr(0, n);
    s_.remove_prefix(n);
    return w;
  }

 private:
  std::string_view s_;
};

// ---- the line prefix ----------------------------------------------------------------------------

// Bytes that cannot be part of a host name as NCCL prints it: gethostname() cut at the first '.'
// (so never a '.'), and what launchers put in front (`[1,0]<stdout>:`, `0: `, `(pid=…) `, timestamps).
// '<' '>' '_' stay allowed: users redact names as `<cluster_name>`.
bool IsHostStop(char c) {
  return IsSpace(c) || c == ':' || c == '.' || c == '(' || c == ')' || c == '[' || c == ']' || c == '"' ||
         c == '\'' || c == ',' || c == '|';
}

constexpr size_t kMaxHostBytes = 256;

// `host:pid:tid` ending just before `end`; the host runs back to a stop byte. Launchers glue
// their tags to it (`[1,2]<stdout>:host:…`), and spliced writes glue the previous line's tail
// (`… 0.000host:…`), which the stop bytes cut off.
bool ParseHostPidTid(std::string_view seg, size_t end, NcclLogger* out) {
  auto digits_back = [&](size_t* pos, int* value) {
    size_t e = *pos, b = e;
    while (b > 0 && IsDigit(seg[b - 1]) && e - b < 10) --b;
    if (b == e || !ToInt(seg.substr(b, e - b), value)) return false;
    *pos = b;
    return true;
  };
  size_t pos = end;
  int tid = 0, pid = 0;
  if (!digits_back(&pos, &tid) || pos == 0 || seg[pos - 1] != ':') return false;
  --pos;
  if (!digits_back(&pos, &pid) || pos == 0 || seg[pos - 1] != ':') return false;
  size_t host_end = --pos, host_begin = host_end;
  while (host_begin > 0 && !IsHostStop(seg[host_begin - 1]) && host_end - host_begin < kMaxHostBytes) --host_begin;
  if (host_begin == host_end) return false;
  out->host.assign(seg.substr(host_begin, host_end - host_begin));
  out->pid = pid;
  out->tid = tid;
  return true;
}

enum class Level { kInfo, kWarn, kTrace, kCall };

// Parses the prefix in front of the `NCCL <LEVEL>` marker at `marker`:
//   INFO:  host:pid:tid [dev] NCCL INFO
//   WARN:  host:pid:tid [dev] file:line NCCL WARN          (v2.30.7: file:line (func) NCCL WARN)
//   TRACE: host:pid:tid [dev] ms func:line NCCL TRACE
//   CALL:  host:pid:tid NCCL CALL                          (no device)
bool ParsePrefix(std::string_view seg, size_t marker, Level level, NcclLogger* out) {
  if (marker < 2 || seg[marker - 1] != ' ') return false;
  size_t token_end = marker - 1;
  // Tokens allowed between `[dev]` and the marker: WARN's `file:line (func)`, TRACE's `ms func:line`.
  const int max_extra = level == Level::kWarn || level == Level::kTrace ? 2 : 0;
  for (int i = 0; i <= max_extra; ++i) {
    size_t token_begin = token_end;
    while (token_begin > 0 && seg[token_begin - 1] != ' ' && token_end - token_begin < 512) --token_begin;
    std::string_view token = seg.substr(token_begin, token_end - token_begin);
    if (token.size() >= 3 && token.front() == '[' && token.back() == ']') {
      int dev = 0;
      if (!ToInt(token.substr(1, token.size() - 2), &dev)) return false;
      if (token_begin < 2 || seg[token_begin - 1] != ' ') return false;
      if (!ParseHostPidTid(seg, token_begin - 1, out)) return false;
      out->cuda_dev = dev;
      return true;
    }
    if (level == Level::kCall && i == 0) return ParseHostPidTid(seg, token_end, out);
    if (i == max_extra || token_begin < 2 || seg[token_begin - 1] != ' ') return false;
    token_end = token_begin - 1;
  }
  return false;
}

// What may stand before a pasted `NCCL INFO` whose host:pid:tid was cut away: line numbers,
// `[3]`, `[rank0]:`, `0: [1,0]<stdout>:`, timestamps, `|` or `>` quoting — letters only inside
// brackets, so that prose mentioning "NCCL WARN" is not taken for a line of NCCL's.
bool IsPasteDecoration(std::string_view d) {
  if (d.size() > 80) return false;
  int depth = 0;
  for (char c : d) {
    if (c == '[' || c == '<' || c == '(') ++depth;
    else if (c == ']' || c == '>' || c == ')') depth = depth > 0 ? depth - 1 : 0;
    else if (((c | 0x20) >= 'a' && (c | 0x20) <= 'z') && depth == 0) return false;
    else if (static_cast<unsigned char>(c) >= 0x80 && depth == 0) return false;
  }
  return true;
}

struct PrefixedMessage {
  NcclLogger logger;
  Level level = Level::kInfo;
  std::string_view message;
};

// The last `NCCL <LEVEL> ` marker with a valid prefix wins: when processes splice their writes
// into one line, the complete message is the last one.
bool FindPrefixedMessage(std::string_view seg, PrefixedMessage* out) {
  static constexpr std::pair<std::string_view, Level> kLevels[] = {
      {"INFO", Level::kInfo}, {"WARN", Level::kWarn}, {"TRACE", Level::kTrace}, {"CALL", Level::kCall}};
  for (size_t p = seg.rfind("NCCL "); p != std::string_view::npos; p = p ? seg.rfind("NCCL ", p - 1) : std::string_view::npos) {
    std::string_view after = seg.substr(p + 5);
    for (const auto& [name, level] : kLevels) {
      if (!after.starts_with(name)) continue;
      std::string_view tail = after.substr(name.size());
      if (!tail.empty() && tail.front() != ' ') continue;
      NcclLogger logger;
      if (!ParsePrefix(seg, p, level, &logger)) continue;
      out->logger = std::move(logger);
      out->level = level;
      out->message = tail.empty() ? tail : tail.substr(1);
      return true;
    }
  }
  // NCCL 2.2 and older (binary releases; 2.3.5's debug.h added `NCCL`): `host:pid:tid [dev] INFO …`
  // and `host:pid:tid [dev] file:line WARN …`. The whole prefix must be there: a bare `INFO` is
  // too common a word to be read as NCCL's without it.
  for (const auto& [name, level] : {kLevels[0], kLevels[1]}) {
    for (size_t p = seg.rfind(name); p != std::string_view::npos; p = p ? seg.rfind(name, p - 1) : std::string_view::npos) {
      std::string_view tail = seg.substr(p + name.size());
      if (!tail.empty() && tail.front() != ' ') continue;
      if (p >= 5 && seg.substr(p - 5, 5) == "NCCL ") continue;  // the newer form, not valid above
      NcclLogger logger;
      if (!ParsePrefix(seg, p, level, &logger)) continue;
      *out = PrefixedMessage{std::move(logger), level, tail.empty() ? tail : tail.substr(1)};
      return true;
    }
  }
  // Pasted logs often keep only `NCCL INFO …` of the prefix, maybe behind a number or tag the user
  // or a tool put there (`1: `, `[3] `, `[rank0]: `, a timestamp): the message, with no logger.
  size_t p = seg.find("NCCL ");
  if (p == std::string_view::npos || !IsPasteDecoration(seg.substr(0, p))) return false;
  std::string_view bare = seg.substr(p + 5);
  for (const auto& [name, level] : kLevels) {
    if (!bare.starts_with(name)) continue;
    std::string_view tail = bare.substr(name.size());
    if (!tail.empty() && tail.front() != ' ') continue;
    *out = PrefixedMessage{NcclLogger{}, level, tail.empty() ? tail : tail.substr(1)};
    return true;
  }
  return false;
}

// `NCCL version 2.7.8+cuda11.1`: alone on its line before 2.22 (printf to stdout, possibly behind a
// launcher tag), as an INFO message since. Returns the version or "".
std::string_view VersionOf(std::string_view text) {
  constexpr std::string_view kLead = "NCCL version ";
  size_t p = text.find(kLead);
  if (p == std::string_view::npos) return {};
  if (p > 0 && !(IsSpace(text[p - 1]) || text[p - 1] == ':' || text[p - 1] == ']' || text[p - 1] == ')' ||
                 text[p - 1] == '>'))
    return {};
  std::string_view v = TrimRight(text.substr(p + kLead.size()));
  if (v.empty() || !IsDigit(v.front()) || std::any_of(v.begin(), v.end(), IsSpace)) return {};
  return v;
}

// ---- messages -----------------------------------------------------------------------------------

// RCCL appends ` comm 0x… nRanks NN` after the transport; NCCL never does.
std::string_view SplitRcclSuffix(std::string_view transport, std::string* comm) {
  size_t p = transport.rfind(" comm 0x");
  if (p == std::string_view::npos || transport.find(" nRanks ", p) == std::string_view::npos) return transport;
  Scanner s(transport.substr(p + 6));
  *comm = std::string(s.TakeWord());
  return TrimRight(transport.substr(0, p));
}

// `PREV -> ME -> NEXT` (NCCL_GRAPH's ring neighbours, 2.12+).
bool IsRingNeighbours(std::string_view body) {
  Scanner s(body);
  int rank = 0;
  for (int i = 0; i < 3; ++i) {
    if (i > 0 && !s.Take(" -> ")) return false;
    if (!s.TakeCount(&rank)) return false;
  }
  return s.empty();
}

bool IsEnvName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || IsDigit(c) || c == '_';
  });
}

bool IsZero(std::string_view v) {
  int n = 0;
  return ToInt(v, &n) && n == 0;
}

// Refusal kinds of `X set by environment to Y` lines: the settings that take a transport away.
std::string_view EnvRefusalKind(std::string_view name, std::string_view value) {
  if (name == "NCCL_P2P_DISABLE" && !IsZero(value)) return "env-p2p-disabled";
  // ≤ 2.22 echoes NCCL_P2P_DISABLE=1 as this: level LOC means no P2P at all.
  if (name == "NCCL_P2P_LEVEL" && (value == "LOC" || IsZero(value))) return "env-p2p-level";
  if (name == "NCCL_SHM_DISABLE" && !IsZero(value)) return "env-shm-disabled";
  if (name == "NCCL_IB_DISABLE" && !IsZero(value)) return "env-ib-disabled";
  if (name == "NCCL_NET_GDR_LEVEL" && (value == "LOC" || IsZero(value))) return "env-gdr-disabled";
  return {};
}

// Messages NCCL prints when a transport is refused (p2p.cc, paths.cc, net_ib.cc, coll_net.cc).
std::string_view MessageRefusalKind(std::string_view m) {
  static constexpr std::pair<std::string_view, std::string_view> kStarts[] = {
      {"Could not enable P2P between dev", "cuda-no-peer-access"},
      {"peer query failed between dev", "cuda-peer-query-failed"},
      {"P2P is disabled between NVLINK connected GPUs", "nvml-p2p-disabled-nvlink"},
      {"P2P is disabled between connected GPUs", "nvml-p2p-disabled"},
      {"Legacy IPC not supported", "legacy-ipc-unsupported"},
      {"failed to peer with device", "cuda-peer-enable-failed"},
      {"Cannot initialize CollNet", "collnet-unavailable"},
  };
  for (const auto& [start, kind] : kStarts)
    if (m.starts_with(start)) return kind;
  if (m.find("GPU Direct RDMA Disabled") != std::string_view::npos) return "no-gdr";
  return {};
}

}  // namespace

// ---- public helpers -----------------------------------------------------------------------------

uint64_t RankIdentity::FirstLine() const {
  uint64_t first = UINT64_MAX;
  for (uint64_t l : {start_line, complete_line, end_line})
    if (l) first = std::min(first, l);
  return first == UINT64_MAX ? 0 : first;
}

int Connection::LoggingRank() const {
  if (dst_rank < 0) return src_rank;
  if (direction == "receive") return dst_rank;
  // 2.3 printed NET connections on the receiving side only, without a tag.
  if (direction.empty() && transport.starts_with("NET/")) return dst_rank;
  return src_rank;
}

const RankIdentity* NcclLog::IdentityOf(const Connection& c) const {
  if (c.identity >= 0 && static_cast<size_t>(c.identity) < ranks.size()) return &ranks[static_cast<size_t>(c.identity)];
  return c.comm.empty() ? nullptr : FindRank(c.logger.host, c.logger.pid, c.comm);
}

std::string_view AttributionName(Attribution a) {
  switch (a) {
    case Attribution::kNone: return "none";
    case Attribution::kPrinted: return "printed";
    case Attribution::kInit: return "init";
    case Attribution::kLazy: return "lazy";
    case Attribution::kThread: return "thread";
    case Attribution::kAmbiguous: return "ambiguous";
  }
  return "none";
}

const RankIdentity* NcclLog::FindRank(const std::string& host, int pid, const std::string& comm) const {
  for (auto it = ranks.rbegin(); it != ranks.rend(); ++it)
    if (it->comm == comm && it->host == host && it->pid == pid) return &*it;
  return nullptr;
}

int ClassifyNcclTransport(std::string_view t) {
  if (t.starts_with("P2P/")) {
    if (t.starts_with("P2P/indirect")) return P2PTRACE_TRANSPORT_P2P_INDIRECT;
    // MNNVL is printed only for communicators inside a multi-node NVLink domain.
    if (t.starts_with("P2P/MNNVL")) return P2PTRACE_TRANSPORT_NVLINK;
    if (t.starts_with("P2P/common device")) return P2PTRACE_TRANSPORT_SAME_DEVICE;
    return P2PTRACE_TRANSPORT_P2P;  // NVLink or PCIe: the line does not say
  }
  if (t.starts_with("SHM/") || t == "SHM" || t.starts_with("direct shared memory")) return P2PTRACE_TRANSPORT_SHM;
  if (t.starts_with("NET/")) {
    if (t.find("/GDRDMA") != std::string_view::npos) return P2PTRACE_TRANSPORT_NET_GDR;
    if (t.starts_with("NET/Socket")) return P2PTRACE_TRANSPORT_NET_SOCKET;
    // IB, IBext*, and RDMA plugins (AWS Libfabric/EFA, …) without GPUDirect: the nearest class.
    return P2PTRACE_TRANSPORT_NET_IB;
  }
  if (t.starts_with("COLLNET") || t.starts_with("CollNet")) return P2PTRACE_TRANSPORT_COLLNET;
  if (t.starts_with("NVLS")) return P2PTRACE_TRANSPORT_NVLS;
  return P2PTRACE_TRANSPORT_UNKNOWN;
}

namespace {

// Takes one of `words` (the longest first in the list) when it ends at the text's end, a '/', '(' or
// a space; returns whether it did.
bool TakeWordOf(Scanner& s, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words) {
    std::string_view r = s.rest();
    if (!r.starts_with(w)) continue;
    if (r.size() > w.size() && r[w.size()] != '/' && r[w.size()] != '(' && !IsSpace(r[w.size()])) continue;
    return s.Take(w);
  }
  return false;
}

bool TakeDigits(Scanner& s) {
  int n = 0;
  return s.TakeCount(&n);
}

// The end of a transport text NCCL's grammar does not know: where a note would start.
size_t UnknownTransportLength(std::string_view t) {
  size_t end = t.size();
  for (std::string_view stop : {" (", "  ", " #", " //", " --", " <", " [", "\t"})
    end = std::min(end, t.find(stop));
  return end;
}

}  // namespace

size_t NcclTransportLength(std::string_view text) {
  Scanner s(text);
  const size_t size = text.size();
  auto done = [&] { return size - s.rest().size(); };
  if (s.Take("P2P/")) {
    if (s.Take("indirect/")) {
      std::string_view dev;
      if (!TakeDigits(s) || !s.TakeBracketed(&dev)) return UnknownTransportLength(text);
    } else if (!TakeWordOf(s, {"CUMEM", "MNNVL", "IPC", "direct pointer", "common device"})) {
      return UnknownTransportLength(text);
    }
    while (s.Take("/")) {
      if (!TakeWordOf(s, {"read", "CE"})) return UnknownTransportLength(text);
    }
    return done();
  }
  if (s.Take("SHM/")) {
    if (!TakeWordOf(s, {"direct", "CE"})) return UnknownTransportLength(text);
    if (s.Take("/") && !TakeWordOf(s, {"direct", "CE"})) return UnknownTransportLength(text);
    return done();
  }
  if (s.Take("direct shared memory")) return done();
  const bool net = s.Take("NET/");
  if (net || s.Take("COLLNET/")) {
    // The network's name is the plugin's (`IB`, `Socket`, `AWS Libfabric`, `IBext_v8`): up to '/'.
    std::string_view r = s.rest();
    size_t slash = r.find('/');
    if (slash == 0 || slash == std::string_view::npos || slash > 64) return UnknownTransportLength(text);
    s = Scanner(r.substr(slash + 1));
    if (!TakeDigits(s)) return UnknownTransportLength(text);
    if (s.rest().starts_with("(")) {  // PXN proxy rank
      Scanner p = s;
      if (p.Take("(") && TakeDigits(p) && p.Take(")")) s = p;
    }
    if (s.Take("/GDRDMA")) s.Take("(PCI)");
    if (net) {
      s.Take("/GDCopy");
      s.Take("/Shared");
      if (s.Take("/flush=")) s.TakeWord();  // 2.31's receive side: None, Always, C2c, Unknown
    }
    size_t n = done();
    // A '/' or a letter glued on means a form this grammar does not know: keep NCCL's text whole.
    if (n < size && !IsSpace(text[n])) return UnknownTransportLength(text);
    return n;
  }
  return UnknownTransportLength(text);
}

// ---- feeding ------------------------------------------------------------------------------------

void NcclLogParser::Feed(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t end = bytes.find_first_of("\r\n");
    std::string_view chunk = bytes.substr(0, end);
    size_t room = kMaxLineBytes - line_.size();
    if (chunk.size() > room) line_cut_ = true;
    line_.append(chunk.substr(0, room));
    if (!chunk.empty()) line_open_ = true;
    if (end == std::string_view::npos) return;
    // '\r' ends a segment but not a line: CRLF endings, and progress bars that redraw with '\r'
    // before an NCCL line lands on the same line.
    EndSegment();
    if (bytes[end] == '\n') EndLine();
    else line_open_ = true;
    bytes.remove_prefix(end + 1);
  }
}

void NcclLogParser::EndSegment() {
  if (!line_.empty()) ParseSegment(line_);
  line_.clear();
}

void NcclLogParser::EndLine() {
  ++log_.lines_read;
  if (line_cut_) ++log_.long_lines;
  if (line_nccl_) ++log_.nccl_lines;
  if (!line_used_) ++log_.lines_skipped;
  line_cut_ = line_used_ = line_nccl_ = line_open_ = false;
}

void NcclLogParser::Finish() {
  if (line_open_ || !line_.empty()) {
    EndSegment();
    EndLine();
  }
  for (auto& [key, state] : threads_) {
    for (Pending& p : state.awaiting_complete) unresolved_.emplace_back(std::move(p), key);
    state.awaiting_complete.clear();
  }
  // Lines no init claimed: settled as lazy ones, in the order they were printed.
  std::sort(unresolved_.begin(), unresolved_.end(),
            [](const auto& a, const auto& b) { return a.first.line < b.first.line; });
  for (const auto& [p, key] : unresolved_) {
    auto t = threads_.find(key);
    Resolve(p, key.host, key.pid, t == threads_.end() ? nullptr : &t->second);
  }
  unresolved_.clear();
}

void NcclLogParser::Forget() {
  NcclLog kept;
  kept.nccl_version = log_.nccl_version;
  if (!log_.version_lines.empty()) kept.version_lines.push_back(log_.version_lines.front());
  kept.lines_read = log_.lines_read;
  kept.nccl_lines = log_.nccl_lines;
  kept.lines_skipped = log_.lines_skipped;
  kept.long_lines = log_.long_lines;
  // The network's lines come once per process (ncclNetInit), not per communicator: kept, with the
  // settings that decide the network, so that a later communicator's connections are explained.
  kept.net_devices = std::move(log_.net_devices);
  kept.gdr = std::move(log_.gdr);
  kept.net_failures = std::move(log_.net_failures);
  std::set<std::string> names;
  for (EnvSetting& e : log_.env)
    if ((e.name.starts_with("NCCL_IB_") || e.name.starts_with("NCCL_NET_")) && names.insert(e.name).second)
      kept.env.push_back(std::move(e));
  log_ = std::move(kept);
  threads_.clear();
  unresolved_.clear();
  rank_index_.clear();
  process_ranks_.clear();
  start_printers_.clear();
  key_rank_.clear();
  conn_keys_.clear();
}

void NcclLogParser::ParseSegment(std::string_view segment) {
  PrefixedMessage pm;
  if (FindPrefixedMessage(segment, &pm)) {
    line_nccl_ = true;
    if (pm.level == Level::kInfo || pm.level == Level::kWarn)
      line_used_ |= ParseMessage(TrimRight(pm.message), pm.level == Level::kWarn, pm.logger);
    return;
  }
  if (ParseResult(segment, NcclLogger{}, true)) {
    line_used_ = true;
    return;
  }
  if (std::string_view v = VersionOf(segment); !v.empty()) {
    line_nccl_ = line_used_ = true;
    AddVersion(v);
    return;
  }
  // A connection line whose prefix was cut away (pasted logs): the `via` grammar is strict enough
  // to take it without one.
  std::string_view bare = TrimRight(TrimLeft(segment));
  bool connection_like = bare.starts_with("Channel ") || bare.starts_with("Ring ") || bare.starts_with("Coll");
  if (connection_like && bare.find(" via ") != std::string_view::npos)
    line_used_ |= ParseChannelLine(bare, NcclLogger{});
}

bool NcclLogParser::ParseMessage(std::string_view m, bool is_warn, const NcclLogger& logger) {
  const uint64_t line = log_.lines_read + 1;
  if (is_warn) log_.warnings.push_back({std::string(m), logger, line});
  bool net = ParseNet(m, logger);
  if (ParseRefusal(m, logger)) return true;
  if (is_warn || net) return true;
  if (m.starts_with("Channel ") || m.starts_with("Ring ") || m.starts_with("CollNet ") || m.starts_with("Coll "))
    return ParseChannelLine(m, logger);
  if (m.starts_with("Trees")) return ParseTrees(m, logger);
  if (std::string_view v = VersionOf(m); !v.empty() && m.starts_with("NCCL version ")) {
    AddVersion(v);
    return true;
  }
  if (m.starts_with("Connected ")) {
    log_.connected.push_back({std::string(m), logger, line});
    return true;
  }
  if (m.starts_with("Check P2P Type") || m.starts_with("NVLS multicast support")) {
    log_.p2p_notes.push_back({std::string(m), logger, line});
    return true;
  }
  if (ParseEnv(m, logger)) return true;
  if (ParseResult(m, logger, false)) return true;
  return ParseIdentity(m, logger);
}

// ncclGetErrorString's texts (init.cc, unchanged 2.3–2.31 but for the NCCL_DEBUG hint), by code.
constexpr std::pair<std::string_view, int> kResultTexts[] = {
    {"unhandled cuda error", 1},
    {"unhandled system error", 2},
    {"internal error - please report this issue to the NCCL developers", 3},
    {"invalid argument (run with NCCL_DEBUG=WARN", 4},
    {"invalid usage (run with NCCL_DEBUG=WARN", 5},
    {"remote process exited or there was a network error", 6},
};

bool NcclLogParser::ParseResult(std::string_view m, const NcclLogger& logger, bool whole_line) {
  const uint64_t line = log_.lines_read + 1;
  if (!whole_line) {
    // `FILE:LINE -> CODE`, FILE a source path (misc/socket.cc, include/alloc.h, …).
    Scanner s(m);
    std::string_view file = s.TakeWord();
    size_t colon = file.rfind(':');
    int code = -1, src_line = -1;
    if (colon != std::string_view::npos && colon > 0 && ToInt(file.substr(colon + 1), &src_line) &&
        (file.substr(0, colon).ends_with(".cc") || file.substr(0, colon).ends_with(".h") ||
         file.substr(0, colon).ends_with(".cu") || file.substr(0, colon).ends_with(".cpp")) &&
        s.Take(" -> ") && s.TakeCount(&code) && (s.empty() || s.rest().front() == ' ')) {
      if (code == 0) return true;  // a trace of success: nothing failed
      log_.results.push_back({code, std::string(m), logger, line});
      return true;
    }
  }
  for (const auto& [text, code] : kResultTexts) {
    size_t p = m.find(text);
    if (p == std::string_view::npos) continue;
    // A program's line names NCCL (`NCCL error`, `ncclSystemError`, `NCCL WARN`…) or quotes the
    // text whole with its hint; a bare "internal error" in other output is not NCCL's.
    if (whole_line && m.find("NCCL") == std::string_view::npos && m.find("nccl") == std::string_view::npos &&
        m.find("(run with NCCL_DEBUG") == std::string_view::npos)
      return false;
    log_.results.push_back({code, std::string(TrimRight(m)), logger, line});
    return true;
  }
  return false;
}

void NcclLogParser::AddVersion(std::string_view version) {
  log_.version_lines.push_back({std::string(version), log_.lines_read + 1});
  if (log_.nccl_version.empty()) {
    log_.nccl_version = version;
    version_code_ = NcclVersionCode("NCCL version " + log_.nccl_version);
  }
}

bool NcclLogParser::ParseRefusal(std::string_view m, const NcclLogger& logger) {
  std::string_view kind = MessageRefusalKind(m);
  if (kind.empty()) return false;
  log_.refusals.push_back({std::string(kind), std::string(m), logger, log_.lines_read + 1});
  return true;
}

bool NcclLogParser::ParseNet(std::string_view m, const NcclLogger& logger) {
  const uint64_t line = log_.lines_read + 1;
  std::vector<NcclNote>* to = ParseNetDevices(m) ? &log_.net_devices
                              : ParseGdrDecision(m) || IsDmaBufAvailable(m) ? &log_.gdr
                              : !NetFailureKind(m).empty() ? &log_.net_failures
                                                           : nullptr;
  if (to == nullptr) return false;
  to->push_back({std::string(TrimRight(m)), logger, line});
  return true;
}

bool NcclLogParser::ParseEnv(std::string_view m, const NcclLogger& logger) {
  constexpr std::string_view kMid = " set by environment to ";
  size_t p = m.find(kMid);
  if (p == std::string_view::npos || !IsEnvName(m.substr(0, p))) return false;
  std::string_view name = m.substr(0, p), value = m.substr(p + kMid.size());
  // param.cc prints numbers as "%lld." — the period is punctuation.
  if (value.ends_with('.')) {
    int n = 0;
    if (ToInt(value.substr(0, value.size() - 1), &n)) value.remove_suffix(1);
  }
  const uint64_t line = log_.lines_read + 1;
  log_.env.push_back({std::string(name), std::string(value), logger, line});
  if (std::string_view kind = EnvRefusalKind(name, value); !kind.empty())
    log_.refusals.push_back({std::string(kind), std::string(m), logger, line});
  return true;
}

// `Channel 00/1 : 0[1d000] -> 1[56000] [send] via NET/IB/0/GDRDMA` and its relatives:
//   KEYWORD CH[/N] : SRC[DEV] -> DST[DEV] [[send]|[receive]] via TRANSPORT   (a connection)
//   CollNet CH[/N] : RANK [send]|[receive] via TRANSPORT                     (no peer)
//   Channel CH[/NCH] :   0   1   2                                           (ring order, rank 0)
//   Ring CH : PREV -> ME -> NEXT                                             (NCCL_GRAPH, ignored)
bool NcclLogParser::ParseChannelLine(std::string_view m, const NcclLogger& logger) {
  Scanner s(m);
  std::string keyword(s.TakeWord());
  s.SkipSpaces();
  int channel = -1, second = -1;
  if (!s.TakeCount(&channel)) return false;
  bool has_second = s.Take("/");
  if (has_second && !s.TakeCount(&second)) return false;
  s.SkipSpaces();
  if (!s.Take(":")) return false;
  std::string_view body = TrimLeft(s.rest());
  size_t via = body.find(" via ");
  if (via == std::string_view::npos) {
    if (keyword != "Channel" && keyword != "Ring") return false;
    if (body.find("->") != std::string_view::npos) return IsRingNeighbours(body);  // nothing to keep
    RingOrder ring{"", channel, has_second ? second : -1, {}, logger, log_.lines_read + 1};
    Scanner r(body);
    while (!r.empty()) {
      int rank = 0;
      if (!r.TakeCount(&rank)) return false;
      ring.ranks.push_back(rank);
      r.SkipSpaces();
    }
    if (ring.ranks.empty()) return false;
    int max_rank = *std::max_element(ring.ranks.begin(), ring.ranks.end());
    log_.rings.push_back(std::move(ring));
    Attribute(Pending{ItemKind::kRing, log_.rings.size() - 1, 0, max_rank, log_.lines_read + 1}, logger);
    return true;
  }

  Connection c;
  c.keyword = keyword;
  c.channel = channel;
  // Channel N/C: C is the connection index (P2P/NET since 2.14, NET since 2.12); CollNet too.
  if (has_second) c.conn_index = second;
  Scanner e(body.substr(0, via));
  std::string_view dev;
  if (!e.TakeCount(&c.src_rank)) return false;
  if (e.TakeBracketed(&dev)) c.src_dev = dev;
  e.SkipSpaces();
  const bool collnet = keyword == "CollNet" || keyword == "Coll";
  if (!collnet) {
    if (!e.Take("->")) return false;
    e.SkipSpaces();
    if (!e.TakeCount(&c.dst_rank)) return false;
    if (e.TakeBracketed(&dev)) c.dst_dev = dev;
    e.SkipSpaces();
  }
  if (e.Take("[send]")) c.direction = "send";
  else if (e.Take("[receive]")) c.direction = "receive";
  e.SkipSpaces();
  if (!e.empty()) return false;
  if (collnet && c.direction.empty()) return false;
  std::string rccl_comm;
  std::string_view transport = SplitRcclSuffix(TrimRight(body.substr(via + 5)), &rccl_comm);
  if (transport.empty()) return false;
  // A pasted line may carry the user's own words after NCCL's token: they are not the transport.
  size_t token = NcclTransportLength(transport);
  c.note = TrimLeft(transport.substr(token));
  transport = TrimRight(transport.substr(0, token));
  if (transport.empty()) return false;
  c.transport = transport;
  c.transport_class = ClassifyNcclTransport(transport);
  c.logger = logger;
  c.line = log_.lines_read + 1;
  log_.connections.push_back(std::move(c));
  Connection& added = log_.connections.back();
  if (!rccl_comm.empty()) {
    added.comm = rccl_comm;
    added.attribution = Attribution::kPrinted;
    auto it = rank_index_.find({logger.host, logger.pid, rccl_comm});
    if (it != rank_index_.end()) added.identity = static_cast<long>(it->second);
    return true;
  }
  Pending p{ItemKind::kConnection, log_.connections.size() - 1, added.LoggingRank(),
            std::max(added.src_rank, added.dst_rank), added.line};
  const bool logged_by_src = added.LoggingRank() == added.src_rank;
  p.peer_rank = logged_by_src ? added.dst_rank : added.src_rank;
  p.own_dev = logged_by_src ? added.src_dev : added.dst_dev;
  p.peer_dev = logged_by_src ? added.dst_dev : added.src_dev;
  // SHM lines print no connection index, so ring (index 0) and send/recv (index 1) lines of one
  // communicator read the same: only indexed lines are unique per communicator.
  if (added.conn_index >= 0)
    p.conn_key = added.keyword + ' ' + std::to_string(added.channel) + '/' + std::to_string(added.conn_index) + ' ' +
                 std::to_string(added.src_rank) + '>' + std::to_string(added.dst_rank) + ' ' + added.direction;
  Attribute(std::move(p), logger);
  return true;
}

// `Trees [0] 1/-1/-1->0->-1 [1] …`: per channel, children->me->parent (2.9+); 2.5–2.8 add
// `|parent->me->children` (the second tree of the pair); 2.4 prints parent->me->children.
bool NcclLogParser::ParseTrees(std::string_view m, const NcclLogger& logger) {
  Scanner s(m.substr(5));
  s.SkipSpaces();
  bool any = false;
  while (!s.empty()) {
    std::string_view ch;
    int channel = -1;
    if (!s.TakeBracketed(&ch) || !ToInt(ch, &channel)) break;
    s.SkipSpaces();
    std::string_view spec = s.TakeWord();
    s.SkipSpaces();
    spec = spec.substr(0, spec.find('|'));
    size_t a1 = spec.find("->");
    size_t a2 = a1 == std::string_view::npos ? a1 : spec.find("->", a1 + 2);
    if (a2 == std::string_view::npos) break;
    std::string_view left = spec.substr(0, a1), me = spec.substr(a1 + 2, a2 - a1 - 2), right = spec.substr(a2 + 2);
    TreeEntry t{"", channel, -1, -1, {}, logger, log_.lines_read + 1};
    if (!ToInt(me, &t.rank)) break;
    bool children_first = left.find('/') != std::string_view::npos;
    std::string_view children = children_first ? left : right, parent = children_first ? right : left;
    if (!ToInt(parent, &t.parent)) break;
    bool ok = true;
    for (size_t start = 0; start <= children.size();) {
      size_t slash = std::min(children.find('/', start), children.size());
      int child = -1;
      if (!ToInt(children.substr(start, slash - start), &child)) { ok = false; break; }
      if (child >= 0) t.children.push_back(child);
      start = slash + 1;
    }
    if (!ok) break;
    int max_rank = std::max(t.rank, t.parent);
    for (int c : t.children) max_rank = std::max(max_rank, c);
    log_.trees.push_back(std::move(t));
    Attribute(Pending{ItemKind::kTree, log_.trees.size() - 1, log_.trees.back().rank, max_rank, log_.lines_read + 1},
              logger);
    any = true;
  }
  return any;
}

// A split's key in commId's form: FNV-1a (64 bits) of the parent's key, the count and the color.
static_assert(sizeof(unsigned long long) == 8);
static std::string SplitKey(const std::string& parent_key, int count, int color) {
  std::string text = parent_key + "/split" + std::to_string(count) + "/color" + std::to_string(color);
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char out[24];
  std::snprintf(out, sizeof out, "0x%016llx", static_cast<unsigned long long>(h));
  return out;
}

// `[Rank R] API comm 0x… rank R nranks N cudaDev D nvmlDev M busId B commId 0x… - Init START`
// and the older forms (no API, no nvmlDev/busId/commId), `… - Init COMPLETE`, `… - Destroy COMPLETE`,
// `… - Abort COMPLETE`. The `comm 0x… rank R nRanks N nNodes …` layout line is not one of them.
// ncclCommSplit (init.cc 2.23–2.31) prints `… parent 0x… splitCount|childCount C color K key Y- Init
// START` (no space before the dash) and `… key Y - Init COMPLETE`, with no commId; 2.21–2.22 print
// `parent 0x… color K key Y commId 0x…`.
namespace {

// Exactly `comm 0x… rank R nranks N` (2.2, 2.3.5); later releases' `comm 0x… rank R nRanks N nNodes …`
// line is another message.
bool IsBareInitLine(std::string_view m) {
  Scanner s(TrimRight(m));
  int rank = 0, nranks = 0;
  if (!s.Take("comm 0x") || s.TakeWord().empty() || !s.Take(" rank ") || !s.TakeInt(&rank)) return false;
  return s.Take(" nranks ") && s.TakeInt(&nranks) && s.empty();
}

}  // namespace

bool NcclLogParser::ParseIdentity(std::string_view m, const NcclLogger& logger) {
  enum { kStart, kComplete, kEnd } stage;
  size_t dash = m.rfind("- ");
  if (dash == std::string_view::npos && IsBareInitLine(m)) {
    // 2.2 and 2.3.5: `comm 0x… rank R nranks N` at init, with no stage.
    stage = kStart;
    dash = m.size();
  } else {
    if (dash == std::string_view::npos || dash == 0 || !(m[dash - 1] == ' ' || IsDigit(m[dash - 1]))) return false;
    std::string_view what = m.substr(dash + 2);
    if (what == "Init START") stage = kStart;
    else if (what == "Init COMPLETE" || what == "COMPLETE") stage = kComplete;  // 2.3.7: `… nranks N - COMPLETE`
    else if (what.ends_with(" COMPLETE")) stage = kEnd;  // Destroy, Abort, and 2.28's "%s COMPLETE"
    else return false;
  }

  RankIdentity id;
  Scanner s(TrimRight(m.substr(0, dash)));
  if (s.Take("[Rank ")) {  // 2.29+ START prefix
    int ignored = 0;
    if (!s.TakeInt(&ignored) || !s.Take("]")) return false;
    s.SkipSpaces();
  }
  bool has_rank = false;
  while (!s.empty()) {
    std::string_view key = s.TakeWord();
    if (key.empty()) break;
    s.SkipSpaces();
    if (key == "comm" || key == "rank" || key == "nranks" || key == "cudaDev" || key == "nvmlDev" ||
        key == "busId" || key == "commId" || key == "parent" || key == "splitCount" || key == "childCount" ||
        key == "color" || key == "key") {
      std::string_view value = s.TakeWord();
      if (key == "comm") id.comm = value;
      else if (key == "busId") id.bus_id = value;
      else if (key == "commId") id.comm_id = value;
      else if (key == "parent") id.parent = value;
      else if (key == "rank") has_rank = ToInt(value, &id.rank);
      else if (key == "nranks") ToInt(value, &id.nranks);
      else if (key == "cudaDev") ToInt(value, &id.cuda_dev);
      else if (key == "nvmlDev") ToInt(value, &id.nvml_dev);
      else if (key == "splitCount" || key == "childCount") ToInt(value, &id.split_count);
      else if (key == "color") ToInt(value, &id.color);
    } else if (id.comm.empty() && id.api.empty() && key.starts_with("nccl")) {
      id.api = key;
    }
    s.SkipSpaces();
  }
  if (id.comm.empty() || !has_rank) return false;
  id.host = logger.host;
  id.pid = logger.pid;
  const uint64_t line = log_.lines_read + 1;

  auto key = std::make_tuple(id.host, id.pid, id.comm);
  auto it = rank_index_.find(key);
  // A comm pointer reused after destroy (another commId, a new START, an init after the end) is
  // another identity.
  bool reuse = false;
  if (it != rank_index_.end()) {
    const RankIdentity& known = log_.ranks[it->second];
    reuse = (!id.comm_id.empty() && !known.comm_id.empty() && known.comm_id != id.comm_id) ||
            (stage == kStart && known.start_line) || (stage != kEnd && known.end_line);
  }
  if (it == rank_index_.end() || reuse) {
    log_.ranks.push_back(id);
    it = rank_index_.insert_or_assign(key, log_.ranks.size() - 1).first;
    process_ranks_[{id.host, id.pid}].push_back(log_.ranks.size() - 1);
  }
  const size_t index = it->second;
  RankIdentity& r = log_.ranks[index];
  // Fill what this line knows and the earlier ones did not (COMPLETE repeats START's fields).
  if (r.api.empty()) r.api = id.api;
  if (r.comm_id.empty()) r.comm_id = id.comm_id;
  if (r.bus_id.empty()) r.bus_id = id.bus_id;
  if (r.parent.empty()) r.parent = id.parent;
  if (r.split_count < 0) r.split_count = id.split_count;
  if (r.color < 0) r.color = id.color;
  if (r.nranks < 0) r.nranks = id.nranks;
  if (r.cuda_dev < 0) r.cuda_dev = id.cuda_dev;
  if (r.nvml_dev < 0) r.nvml_dev = id.nvml_dev;
  if (stage == kStart && !r.start_line) r.start_line = line;
  if (stage == kComplete && !r.complete_line) r.complete_line = line;
  if (stage == kEnd && !r.end_line) r.end_line = line;
  if (r.comm_key.empty()) {
    if (!r.comm_id.empty()) {
      r.comm_key = r.comm_id;
    } else if (!r.parent.empty() && r.color >= 0) {
      // The split's ranks agree on the parent communicator, the split's count and the color (NCCL
      // hashes the same three into the child's commHash); 2.23 prints no count: the n-th child of
      // that color in this process.
      auto parent = rank_index_.find({r.host, r.pid, r.parent});
      const std::string parent_key = parent == rank_index_.end() ? "" : log_.ranks[parent->second].comm_key;
      if (!parent_key.empty()) {
        int count = r.split_count;
        if (count < 0) {
          count = 0;
          for (size_t i : process_ranks_[{r.host, r.pid}])
            if (i != index && log_.ranks[i].parent == r.parent && log_.ranks[i].color == r.color &&
                log_.ranks[i].parent_key == parent_key)
              ++count;
        }
        r.parent_key = parent_key;
        r.comm_key = SplitKey(parent_key, count, r.color);
      }
    }
    if (!r.comm_key.empty()) key_rank_[{r.comm_key, r.rank}] = index;
  }

  ThreadState& t = threads_[{logger.host, logger.pid, logger.tid}];
  auto give_up_awaiting = [&] {
    for (Pending& p : t.awaiting_complete) unresolved_.emplace_back(std::move(p), ThreadKey{logger.host, logger.pid, logger.tid});
    t.awaiting_complete.clear();
  };
  const long here = static_cast<long>(index);
  if (stage == kStart) {
    start_printers_.insert({logger.host, logger.pid});
    give_up_awaiting();  // printed before this START: not this communicator's init
    t.open.push_back(here);
    t.current = here;
  } else if (stage == kComplete && !r.start_line) {
    // NCCL < 2.18.3: the init thread printed this communicator's connections, then COMPLETE.
    std::vector<Pending> awaiting = std::move(t.awaiting_complete);
    t.awaiting_complete.clear();
    for (Pending& p : awaiting) {
      if (Fits(p, r)) SetComm(p, index, Attribution::kInit);
      else unresolved_.emplace_back(std::move(p), ThreadKey{logger.host, logger.pid, logger.tid});
    }
    t.current = here;
  } else {
    give_up_awaiting();
    if (stage == kComplete) t.current = here;
  }
  if (stage != kStart) std::erase(t.open, here);
  if (stage == kEnd && t.current == here) t.current = -1;
  return true;
}

// ---- which communicator -------------------------------------------------------------------------
//
// No connection line names its communicator (RCCL's ` comm 0x…` suffix aside). What NCCL's source
// allows (init.cc, group.cc, transport.cc, enqueue.cc of 2.18–2.31):
//  * NCCL ≥ 2.18.3 prints `Init START` on the thread that initializes a communicator, before the
//    connections it makes at init; until that thread's `Init COMPLETE`, its lines are that comm's.
//    Several inits in one ncclGroupStart/End run on one new thread each (asyncJobLaunch), a lone
//    init on the calling thread; ncclCommSplit's START line is `… key K- Init START`.
//  * NCCL < 2.18.3 prints only `Init COMPLETE`, after the init connections, on the init thread: a
//    thread's lines are held until its COMPLETE (ranks must agree).
//  * Lazy connections (2.22+ collectives at their first use of an algorithm, every release's
//    send/recv) are printed later by the thread that launches the operation: the caller's, or one
//    new thread per communicator when a group holds several. They go to the process's communicators
//    alive at that line (created before it, not destroyed) where the logging rank has that rank,
//    the ranks fit in nranks and the bracketed devices are that rank's (and the peer's, when the
//    log has the peer's Init line). When several remain (one process in two communicators with the
//    same rank and GPUs, e.g. PyTorch's world and a subgroup of it): a communicator already holding
//    the same (channel, index, peer, direction) connection is out (NCCL connects each once); then
//    one whose init completed before the line; then the thread's own current communicator (its last
//    init or lazy connect: PyTorch's lazy init runs the first collective right after the init);
//    then the most recently created. The connection then says how it was tied (Attribution).
// Rank numbers alone never decide across processes: every communicator has a rank 0.

void NcclLogParser::Attribute(Pending p, const NcclLogger& logger) {
  if (logger.host.empty() && logger.pid < 0) {
    // A paste without prefixes: one anonymous process; ranks and devices still decide.
    Resolve(p, logger.host, logger.pid, nullptr);
    return;
  }
  ThreadState& t = threads_[{logger.host, logger.pid, logger.tid}];
  p.thread_current = t.current;
  for (long open : t.open)  // oldest first
    if (Fits(p, log_.ranks[static_cast<size_t>(open)])) {
      SetComm(p, static_cast<size_t>(open), Attribution::kInit);
      return;
    }
  // A process that prints START (or a release that does) connects nothing outside an init it has
  // announced: the line is a lazy one.
  if (!t.open.empty() || start_printers_.count({logger.host, logger.pid}) || version_code_ >= 21803) {
    Resolve(p, logger.host, logger.pid, &t);
    return;
  }
  t.awaiting_complete.push_back(std::move(p));
}

// A bracket (`[1]`, `[1a000]`) names the device as nvmlDev (2.18.3+), busId hex (2.5–2.17) or
// cudaDev (2.3, 2.4's SHM, 2.18.1's CUMEM in hex): it fits an identity that has any of them.
static bool DevFits(std::string_view bracket, const RankIdentity& r) {
  if (bracket.empty()) return true;
  if (r.nvml_dev < 0 && r.cuda_dev < 0 && r.bus_id.empty()) return true;  // nothing to compare with
  auto eq_hex = [](std::string_view a, std::string_view b) {
    while (a.size() > 1 && a.front() == '0') a.remove_prefix(1);
    while (b.size() > 1 && b.front() == '0') b.remove_prefix(1);
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return (x | 0x20) == (y | 0x20); });
  };
  if (!r.bus_id.empty() && eq_hex(bracket, r.bus_id)) return true;
  int n = -1;
  if (ToInt(bracket, &n) && (n == r.nvml_dev || n == r.cuda_dev)) return true;
  return r.cuda_dev >= 0 && eq_hex(bracket, std::to_string(r.cuda_dev));
}

bool NcclLogParser::DevicesFit(const Pending& p, const RankIdentity& r) const {
  if (!DevFits(p.own_dev, r)) return false;
  if (p.peer_rank < 0 || r.comm_key.empty()) return true;
  auto peer = key_rank_.find({r.comm_key, p.peer_rank});
  return peer == key_rank_.end() || DevFits(p.peer_dev, log_.ranks[peer->second]);
}

void NcclLogParser::Resolve(const Pending& p, const std::string& host, int pid, ThreadState* thread) {
  auto pr = process_ranks_.find({host, pid});
  if (pr == process_ranks_.end()) return;
  std::vector<size_t> alive;
  for (size_t i : pr->second) {
    const RankIdentity& r = log_.ranks[i];
    uint64_t first = r.FirstLine();
    if (first == 0 || first >= p.line || (r.end_line && r.end_line < p.line) || !Fits(p, r)) continue;
    alive.push_back(i);
  }
  if (alive.empty()) return;
  // Each step keeps the candidates that pass it, unless none would.
  auto narrow = [&](auto keep) {
    std::vector<size_t> kept;
    for (size_t i : alive)
      if (keep(i)) kept.push_back(i);
    if (!kept.empty()) alive.swap(kept);
  };
  narrow([&](size_t i) { return DevicesFit(p, log_.ranks[i]); });
  if (!p.conn_key.empty()) narrow([&](size_t i) {
    auto k = conn_keys_.find(i);
    return k == conn_keys_.end() || !k->second.count(p.conn_key);
  });
  narrow([&](size_t i) { return log_.ranks[i].complete_line != 0 && log_.ranks[i].complete_line < p.line; });
  Attribution how = Attribution::kLazy;
  if (alive.size() > 1 && p.thread_current >= 0 &&
      std::find(alive.begin(), alive.end(), static_cast<size_t>(p.thread_current)) != alive.end()) {
    alive = {static_cast<size_t>(p.thread_current)};
    how = Attribution::kThread;
  }
  if (alive.size() > 1) how = Attribution::kAmbiguous;
  size_t chosen = *std::max_element(alive.begin(), alive.end(), [&](size_t a, size_t b) {
    return log_.ranks[a].FirstLine() < log_.ranks[b].FirstLine();
  });
  SetComm(p, chosen, how);
  if (thread != nullptr) thread->current = static_cast<long>(chosen);
}

// The line's ranks are consistent with the identity: the logging rank is its rank, and every rank
// named is below its nranks.
bool NcclLogParser::Fits(const Pending& p, const RankIdentity& r) {
  return (p.logging_rank < 0 || p.logging_rank == r.rank) && (r.nranks < 0 || p.max_rank < r.nranks);
}

void NcclLogParser::SetComm(const Pending& p, size_t identity, Attribution how) {
  const std::string& comm = log_.ranks[identity].comm;
  switch (p.kind) {
    case ItemKind::kConnection: {
      Connection& c = log_.connections[p.index];
      c.comm = comm;
      c.identity = static_cast<long>(identity);
      c.attribution = how;
      if (!p.conn_key.empty()) conn_keys_[identity].insert(p.conn_key);
      break;
    }
    case ItemKind::kRing: log_.rings[p.index].comm = comm; break;
    case ItemKind::kTree: log_.trees[p.index].comm = comm; break;
  }
}

NcclLine ClassifyNcclLine(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  PrefixedMessage pm;
  // Pasted logs' bare `NCCL INFO …` counts as a prefix for the grammar, not for NCCL's own output.
  if (!FindPrefixedMessage(line, &pm) || pm.logger.host.empty()) return NcclLine{NcclLineLevel::kNone, line};
  static constexpr NcclLineLevel kOf[] = {NcclLineLevel::kInfo, NcclLineLevel::kWarn, NcclLineLevel::kTrace,
                                          NcclLineLevel::kCall};
  return NcclLine{kOf[static_cast<int>(pm.level)], pm.message};
}

int NcclVersionCode(std::string_view text) {
  std::string_view v = VersionOf(text);
  int parts[3] = {0, 0, 0};
  size_t i = 0;
  for (int k = 0; k < 3; ++k) {
    size_t b = i;
    while (i < v.size() && IsDigit(v[i]) && i - b < 4) ++i;
    if (i == b || !ToInt(v.substr(b, i - b), &parts[k])) return -1;
    if (k < 2 && (i >= v.size() || v[i++] != '.')) return -1;
  }
  return parts[0] * 10000 + parts[1] * 100 + parts[2];
}

NcclLog ParseNcclLog(std::string_view text) {
  NcclLogParser parser;
  parser.Feed(text);
  parser.Finish();
  return parser.log();
}

std::string_view NcclLogHost(std::string_view host) { return host.substr(0, host.find('.')); }

std::string ExpandNcclDebugFile(std::string_view pattern, std::string_view host, long pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] == '%' && next == 'p') out += std::to_string(pid), ++i;
    else if (pattern[i] == '%' && next == 'h') out += NcclLogHost(host), ++i;
    else if (pattern[i] == '%' && next == '%') out += '%', ++i;
    else out += pattern[i];
  }
  return out;
}

std::string NcclDebugFileLiteral(std::string_view text) {
  std::string out;
  for (char c : text) out += c == '%' ? std::string_view("%%") : std::string_view(&c, 1);
  return out;
}

namespace {
constexpr std::string_view kTapPrefix = "nccl.", kTapSuffix = ".log";
}  // namespace

std::string NcclTapFilePattern(std::string_view host) {
  if (host.empty()) host = "host";
  std::string name(kTapPrefix);
  for (char c : host) {
    bool plain = c != '/' && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;  // one path component
    name += plain ? NcclDebugFileLiteral(std::string_view(&c, 1)) : "_";
  }
  return name + ".%p" + std::string(kTapSuffix);
}

bool IsNcclLogFileName(std::string_view name) {
  // "nccl.log" counts: its one dot ends the prefix and starts the suffix.
  return name.size() >= kTapPrefix.size() + kTapSuffix.size() - 1 && name.substr(0, kTapPrefix.size()) == kTapPrefix &&
         name.substr(name.size() - kTapSuffix.size()) == kTapSuffix;
}

std::string NcclLogFileHost(std::string_view name) {
  if (name.size() <= kTapPrefix.size() + kTapSuffix.size() || !IsNcclLogFileName(name)) return "";
  std::string_view middle = name.substr(kTapPrefix.size(), name.size() - kTapPrefix.size() - kTapSuffix.size());
  size_t dot = middle.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == middle.size() ||
      middle.find_first_not_of("0123456789", dot + 1) != std::string_view::npos)
    return "";
  return std::string(middle.substr(0, dot));
}

}  // namespace p2ptrace
