#include "core/trace_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <variant>

#include "core/input_file.h"
#include "core/probe_parsers.h"

namespace p2ptrace {
namespace {

std::string Bounded(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

// One reusable record per type, its variant already holding that type: a record is copied
// straight into it, word by word. This runs for every record of every file; zeroing a fresh variant,
// copying through a temporary and assigning it cost 3x the rest (and GCC makes one memcpy of these
// 4-aligned structs a `rep movs`, slow at 40 bytes).
struct Scratch {
  TraceRecord by_type[std::variant_size_v<decltype(TraceRecord::body)>];
  Scratch() {
    [this]<size_t... I>(std::index_sequence<I...>) {
      ((by_type[I].body.template emplace<I>()), ...);
    }(std::make_index_sequence<std::variant_size_v<decltype(TraceRecord::body)>>{});
  }
};

template <typename R>
TraceRecord* Take(const unsigned char* p, size_t size, Scratch* scratch, uint32_t tid) {
  if (size < sizeof(R)) return nullptr;  // older minor with a shorter record: not ours to guess
  constexpr size_t kIndex = decltype(TraceRecord::body)(std::in_place_type<R>).index();
  TraceRecord& out = scratch->by_type[kIndex];
  out.tid = tid;
  static_assert(sizeof(R) % 8 == 0, "records are whole words");
  auto* dst = reinterpret_cast<unsigned char*>(std::get_if<R>(&out.body));
#pragma GCC unroll 32
  for (size_t i = 0; i < sizeof(R); i += 8) std::memcpy(dst + i, p + i, 8);
  return &out;
}

// Converts the CPU counter values of P2PTRACE_COPY_TICKS records into CLOCK_MONOTONIC ns, from the
// file's anchors (counter and clock read together): linearly between the two anchors around the
// value (exact at each anchor, never backwards), beyond the first or last one at the rate between
// those two, which span the whole run (at least the ~200 us calibration at open).
class TickClock {
 public:
  void Add(uint64_t ticks, uint64_t ns) {
    if (ticks != 0 && ns != 0) anchors_.push_back({ticks, ns});
  }
  void Finish() {
    std::sort(anchors_.begin(), anchors_.end());
    anchors_.erase(std::unique(anchors_.begin(), anchors_.end()), anchors_.end());
    // An anchor whose clock runs backwards against the one before it (a torn write, a counter not
    // synchronised across CPUs) is dropped rather than trusted.
    std::vector<Anchor> kept;
    for (const Anchor& a : anchors_)
      if (kept.empty() || (a.ticks > kept.back().ticks && a.ns >= kept.back().ns)) kept.push_back(a);
    anchors_ = std::move(kept);
    if (anchors_.size() >= 2)
      rate_ = static_cast<double>(anchors_.back().ns - anchors_.front().ns) /
              static_cast<double>(anchors_.back().ticks - anchors_.front().ticks);
  }
  // 0 when the file holds no usable pair of anchors.
  uint64_t ToNs(uint64_t ticks) const {
    if (rate_ <= 0) return 0;
    auto it = std::upper_bound(anchors_.begin(), anchors_.end(), Anchor{ticks, UINT64_MAX});
    double rate = rate_;
    const Anchor& a = it == anchors_.begin() ? *it : *(it - 1);
    if (it != anchors_.begin() && it != anchors_.end())
      rate = static_cast<double>(it->ns - a.ns) / static_cast<double>(it->ticks - a.ticks);
    double ns = static_cast<double>(a.ns) + (static_cast<double>(ticks) - static_cast<double>(a.ticks)) * rate;
    return ns > 0 ? static_cast<uint64_t>(ns) : 0;
  }

 private:
  struct Anchor {
    uint64_t ticks, ns;
    auto operator<=>(const Anchor&) const = default;
  };
  std::vector<Anchor> anchors_;
  double rate_ = 0;  // ns per tick
};

// Parts of text blocks, by block number, then part number; joined once every chunk is read.
struct TextPart {
  int kind = 0, parts = 0;
  uint32_t tag = 0;
  std::string text;
};
using TextParts = std::map<uint32_t, std::map<uint16_t, TextPart>>;

void TakeTextPart(const unsigned char* p, size_t size, TextParts* parts, uint64_t* bytes_kept) {
  if (size < sizeof(p2ptrace_text_record)) return;
  p2ptrace_text_record r;
  std::memcpy(&r, p, sizeof r);
  // Bounded like the file: a few preflight blocks and at most a few thousand call sites per process
  // (a few MiB of text); past 64 MiB the file is damaged or hostile, not a real process's.
  if (r.part >= r.parts || (parts->size() > 16384 && !parts->count(r.block)) || *bytes_kept > (64u << 20))
    return;
  TextPart& tp = (*parts)[r.block][r.part];
  tp.kind = r.kind;
  tp.parts = r.parts;
  tp.tag = r.tag;
  tp.text.assign(r.text, std::min<size_t>(r.length, sizeof r.text));
  *bytes_kept += tp.text.size();
}

// A block with a part missing (a chunk lost to a crash) is dropped whole: half a block misleads.
void JoinTextParts(const TextParts& parts, Trace* t) {
  for (const auto& [block, by_part] : parts) {
    if (by_part.empty()) continue;
    int kind = by_part.begin()->second.kind, n = by_part.begin()->second.parts;
    if (static_cast<int>(by_part.size()) != n) continue;
    std::string text;
    for (const auto& [part, tp] : by_part) text += tp.text;
    if (kind == P2PTRACE_TEXT_CALL_SITE) {
      CallSite site{by_part.begin()->second.tag, {}};
      for (size_t pos = 0; pos < text.size();) {
        size_t end = std::min(text.find('\n', pos), text.size());
        if (end > pos) site.frames.push_back(text.substr(pos, end - pos));
        pos = end + 1;
      }
      if (site.id != 0) t->call_sites.push_back(std::move(site));
      continue;
    }
    t->text_blocks.emplace_back(kind, std::move(text));
  }
  // By id, each once (a site is described once per file; should it appear twice, the first stands).
  std::stable_sort(t->call_sites.begin(), t->call_sites.end(),
                   [](const CallSite& a, const CallSite& b) { return a.id < b.id; });
  t->call_sites.erase(std::unique(t->call_sites.begin(), t->call_sites.end(),
                                  [](const CallSite& a, const CallSite& b) { return a.id == b.id; }),
                      t->call_sites.end());
}

// Larger than any region the shim writes (12 KiB of environment, 64 KiB chunks): a header that
// claims more is damaged, and reading what it claims would cost memory for nothing. Chunks smaller
// than a page are damaged too (and would cost a read each over a whole, possibly sparse, file).
constexpr uint64_t kMaxEnvBytes = 1 << 20;
constexpr uint32_t kMinChunkBytes = 4096, kMaxChunkBytes = 64u << 20;

}  // namespace

const p2ptrace_pair_counters& Trace::Counter(int src, int dst, int path) const {
  static const p2ptrace_pair_counters kZero{};
  uint64_t index = (static_cast<uint64_t>(src) * header.max_devices + static_cast<uint64_t>(dst)) * 2 +
                   static_cast<uint64_t>(path);
  auto it = std::lower_bound(counters.begin(), counters.end(), index,
                             [](const PairCounter& p, uint64_t i) { return p.index < i; });
  return it != counters.end() && it->index == index ? it->c : kZero;
}

std::string Trace::Host() const { return Bounded(header.host, sizeof header.host); }

std::string Trace::Env(const std::string& name) const {
  for (const auto& [k, v] : env)
    if (k == name) return v;
  return "";
}

std::string Trace::BusId(int device) const {
  if (device < 0 || device >= P2PTRACE_MAX_DEVICES) return "";
  std::string written = Bounded(header.bus_id[device], sizeof header.bus_id[device]);
  std::string bus = NormalizeBusId(written);
  return bus.empty() ? written : bus;
}

const CallSite* Trace::FindCallSite(uint32_t id) const {
  auto it = std::lower_bound(call_sites.begin(), call_sites.end(), id,
                             [](const CallSite& c, uint32_t i) { return c.id < i; });
  return it != call_sites.end() && it->id == id ? &*it : nullptr;
}

Expected<Trace> ReadTrace(const std::string& path, const ReadOptions& options) {
  return ReadTrace(path, options, nullptr);
}

Expected<Trace> ReadTrace(const std::string& path, const ReadOptions& options, const RecordVisitor& visit) {
  // Read in bounded pieces, never mapped: a mapping faults (SIGBUS) on a hole of a full filesystem
  // or on a file cut while mapped, and a whole file's mapping may not fit the address-space limit.
  Expected<InputFile> file = InputFile::Open(path);
  if (!file.ok()) return file.error();
  const uint64_t size = file->size();
  if (size < sizeof(p2ptrace_file_header))
    return Error{path + ": " + (size == 0 ? "empty file" : "truncated before the end of its header") +
                 " (not a complete p2ptrace trace)"};
  Trace t;
  TextParts text_parts;
  uint64_t text_bytes = 0;
  t.path = path;
  t.file_bytes = size;
  // Reads exactly [off, off + len), which in_file has checked; false on an I/O error.
  auto read_at = [&](uint64_t off, void* buf, size_t len) {
    Expected<size_t> got = file->ReadAt(off, buf, len);
    return got.ok() && *got == len;
  };
  if (!read_at(0, &t.header, sizeof t.header)) return Error{path + ": cannot read its header"};
  const p2ptrace_file_header& h = t.header;
  if (std::memcmp(h.magic, P2PTRACE_MAGIC, 8) != 0) return Error{path + ": not a p2ptrace trace (bad magic)"};
  if (h.major > P2PTRACE_FORMAT_MAJOR)
    return Error{path + ": trace format " + std::to_string(h.major) + "." + std::to_string(h.minor) +
                 " is newer than this p2ptrace reads (" + std::to_string(P2PTRACE_FORMAT_MAJOR) + ".x); upgrade p2ptrace"};
  if (h.max_devices == 0 || h.max_devices > P2PTRACE_MAX_DEVICES || h.chunk_size < kMinChunkBytes ||
      h.chunk_size % 8 != 0 || h.chunk_size > kMaxChunkBytes)
    return Error{path + ": corrupt header (max_devices " + std::to_string(h.max_devices) + ", chunk_size " +
                 std::to_string(h.chunk_size) + ")"};
  // Regions are read only as far as the file reaches (a copied, cut-off file still yields what it holds).
  auto in_file = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
  if (in_file(h.env_offset, h.env_size)) {
    std::string env(static_cast<size_t>(std::min(h.env_size, kMaxEnvBytes)), '\0');
    if (!read_at(h.env_offset, env.data(), env.size())) env.clear();
    size_t i = 0;
    while (i < env.size() && env[i] != '\0') {
      std::string kv = Bounded(env.data() + i, env.size() - i);
      i += kv.size() + 1;
      size_t eq = kv.find('=');
      if (eq != std::string::npos) t.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  size_t n_counters = static_cast<size_t>(h.max_devices) * h.max_devices * 2;
  if (h.counters_size >= n_counters * sizeof(p2ptrace_pair_counters) && in_file(h.counters_offset, h.counters_size)) {
    std::vector<p2ptrace_pair_counters> table(n_counters);
    if (read_at(h.counters_offset, table.data(), n_counters * sizeof(p2ptrace_pair_counters)))
      for (size_t i = 0; i < n_counters; ++i) {
        const p2ptrace_pair_counters& c = table[i];
        if (c.calls || c.bytes || c.errors || c.timed_calls || c.timed_bytes || c.timed_ns)
          t.counters.push_back({static_cast<uint32_t>(i), c});
      }
  }

  // The tick anchors first (the header's, and the CLOCK record that starts each chunk), so that
  // records can be converted as they stream by.
  TickClock clock;
  clock.Add(h.start_ticks, h.start_monotonic_ns);
  clock.Add(h.calib_ticks, h.calib_monotonic_ns);
  clock.Add(h.end_ticks, h.end_monotonic_ns);
  for (uint64_t c = 0; c < h.chunks_claimed; ++c) {
    uint64_t off = h.chunks_offset + c * h.chunk_size;
    struct {
      p2ptrace_chunk_header ch;
      p2ptrace_clock_record cr;
    } first;
    static_assert(sizeof first == sizeof(p2ptrace_chunk_header) + sizeof(p2ptrace_clock_record));
    if (!in_file(off, sizeof first) || !read_at(off, &first, sizeof first)) break;
    if (first.ch.magic == P2PTRACE_CHUNK_MAGIC && first.ch.used >= sizeof first.cr &&
        first.cr.h.type == P2PTRACE_RECORD_CLOCK && first.cr.h.size >= sizeof first.cr)
      clock.Add(first.cr.ticks, first.cr.h.time_ns);
  }
  clock.Finish();

  Scratch scratch;
  std::vector<unsigned char> chunk;
  for (uint64_t c = 0; c < h.chunks_claimed; ++c) {
    uint64_t off = h.chunks_offset + c * h.chunk_size;
    if (!in_file(off, sizeof(p2ptrace_chunk_header))) {
      // The file ends before this chunk: it was cut short (a copy interrupted, a full disk).
      t.missing_chunks = h.chunks_claimed - c;
      break;
    }
    // One chunk at a time (64 KiB as the shim writes them), into a buffer reused for every chunk.
    size_t span = static_cast<size_t>(std::min<uint64_t>(h.chunk_size, size - off));
    if (chunk.size() < span) chunk.resize(h.chunk_size);
    Expected<size_t> got = file->ReadAt(off, chunk.data(), span);
    if (!got.ok()) return got.error();
    if (*got < sizeof(p2ptrace_chunk_header)) {  // shrunk since it was opened
      t.missing_chunks = h.chunks_claimed - c;
      break;
    }
    p2ptrace_chunk_header ch;
    std::memcpy(&ch, chunk.data(), sizeof ch);
    if (ch.magic != P2PTRACE_CHUNK_MAGIC) {
      if (ch.magic != 0) ++t.bad_chunks;  // 0: claimed, then the process died before writing it
      continue;
    }
    uint64_t used = std::min<uint64_t>(ch.used, *got - sizeof ch);
    const unsigned char* r = chunk.data() + sizeof ch;
    uint64_t pos = 0;
    while (pos + sizeof(p2ptrace_record_header) <= used) {
      p2ptrace_record_header rh;
      std::memcpy(&rh, r + pos, sizeof rh);
      if (rh.size < sizeof rh || rh.size % 8 != 0 || pos + rh.size > used) {
        ++t.bad_chunks;  // the rest of this chunk cannot be framed
        break;
      }
      if (rh.type == P2PTRACE_RECORD_TEXT) {  // kept apart from records: never counted against the cap
        TakeTextPart(r + pos, rh.size, &text_parts, &text_bytes);
        pos += rh.size;
        continue;
      }
      if (rh.type == P2PTRACE_RECORD_CLOCK) {  // used above
        pos += rh.size;
        continue;
      }
      if (rh.type == P2PTRACE_RECORD_NCCL_CONN) {  // few per process: kept apart, like text
        if (rh.size >= sizeof(p2ptrace_nccl_conn_record) && t.nccl_connections.size() < (1u << 20)) {
          p2ptrace_nccl_conn_record conn;
          std::memcpy(&conn, r + pos, sizeof conn);
          t.nccl_connections.push_back(conn);
        } else {
          ++t.skipped_records;
        }
        pos += rh.size;
        continue;
      }
      if (!visit && t.records.size() >= options.max_records) {
        ++t.records_not_kept;  // framed and counted, not decoded
        pos += rh.size;
        continue;
      }
      TraceRecord* rec = nullptr;
      switch (rh.type) {
        case P2PTRACE_RECORD_COPY:
          rec = Take<p2ptrace_copy_record>(r + pos, rh.size, &scratch, ch.tid);
          if (auto* copy = rec ? std::get_if<p2ptrace_copy_record>(&rec->body) : nullptr;
              copy && (copy->flags & P2PTRACE_COPY_TICKS))
            copy->h.time_ns = clock.ToNs(copy->h.time_ns);
          break;
        case P2PTRACE_RECORD_PEER: rec = Take<p2ptrace_peer_record>(r + pos, rh.size, &scratch, ch.tid); break;
        case P2PTRACE_RECORD_TIMING: rec = Take<p2ptrace_timing_record>(r + pos, rh.size, &scratch, ch.tid); break;
        case P2PTRACE_RECORD_IPC: rec = Take<p2ptrace_ipc_record>(r + pos, rh.size, &scratch, ch.tid); break;
        case P2PTRACE_RECORD_NCCL_COMM: rec = Take<p2ptrace_nccl_comm_record>(r + pos, rh.size, &scratch, ch.tid); break;
        case P2PTRACE_RECORD_NCCL_OP:
          rec = Take<p2ptrace_nccl_op_record>(r + pos, rh.size, &scratch, ch.tid);
          if (auto* o = rec ? std::get_if<p2ptrace_nccl_op_record>(&rec->body) : nullptr; o && (o->flags & P2PTRACE_NCCL_TICKS))
            o->h.time_ns = clock.ToNs(o->h.time_ns);
          break;
        case P2PTRACE_RECORD_NCCL_PROGRESS:
          rec = Take<p2ptrace_nccl_progress_record>(r + pos, rh.size, &scratch, ch.tid);
          if (auto* p = rec ? std::get_if<p2ptrace_nccl_progress_record>(&rec->body) : nullptr;
              p && (p->flags & P2PTRACE_PROGRESS_TICKS))
            p->through = clock.ToNs(p->through);
          break;
        case P2PTRACE_RECORD_NCCL_KERNEL:
          rec = Take<p2ptrace_nccl_kernel_record>(r + pos, rh.size, &scratch, ch.tid);
          break;
        case P2PTRACE_RECORD_GRAPH:
          rec = Take<p2ptrace_graph_record>(r + pos, rh.size, &scratch, ch.tid);
          if (auto* g = rec ? std::get_if<p2ptrace_graph_record>(&rec->body) : nullptr; g && (g->flags & P2PTRACE_GRAPH_TICKS))
            g->h.time_ns = clock.ToNs(g->h.time_ns);
          break;
        default: break;
      }
      if (rec && visit) visit(*rec);
      else if (rec) t.records.push_back(*rec);
      else ++t.skipped_records;
      pos += rh.size;
    }
  }
  JoinTextParts(text_parts, &t);
  return t;
}

}  // namespace p2ptrace
