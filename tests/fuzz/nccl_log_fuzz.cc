// libFuzzer target for the NCCL log grammar (core/nccl_log): arbitrary bytes, fed in splits chosen
// from the input itself, must give exactly the log a single Feed gives, and sane records.
// Built only with clang (tests/CMakeLists.txt); `ctest -R fuzz.nccl_log` runs it for a few seconds
// over tests/fixtures/nccl-logs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/causes.h"
#include "core/nccl_failures.h"
#include "core/nccl_log.h"

namespace {

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

// Split sizes from a small generator seeded by the input: every input is replayed the same way.
uint32_t Seed(std::string_view data) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < data.size() && i < 64; ++i) h = (h ^ static_cast<uint8_t>(data[i])) * 16777619u;
  return h;
}

void CheckRecords(const p2ptrace::NcclLog& log) {
  Require(log.lines_skipped <= log.lines_read && log.nccl_lines <= log.lines_read);
  for (const auto& c : log.connections) {
    Require(c.line >= 1 && c.line <= log.lines_read);
    Require(!c.transport.empty() && c.channel >= 0 && c.src_rank >= 0 && c.dst_rank >= -1);
    Require(c.conn_index >= -1 && (c.dst_rank >= 0 || c.keyword.starts_with("Coll")));
    Require(c.transport_class == p2ptrace::ClassifyNcclTransport(c.transport));
    // The transport is NCCL's token: cut where the grammar says, the rest (if any) is the note.
    Require(p2ptrace::NcclTransportLength(c.transport) <= c.transport.size());
    Require(c.transport.back() != ' ' && (c.note.empty() || c.note.front() != ' '));
    // A tied connection names an identity of the process that printed it, with that comm pointer.
    if (c.identity >= 0) {
      Require(static_cast<size_t>(c.identity) < log.ranks.size());
      const p2ptrace::RankIdentity& r = log.ranks[static_cast<size_t>(c.identity)];
      Require(r.comm == c.comm && r.host == c.logger.host && r.pid == c.logger.pid);
      Require(c.attribution != p2ptrace::Attribution::kNone);
    } else {
      Require(c.attribution == p2ptrace::Attribution::kNone || c.attribution == p2ptrace::Attribution::kPrinted);
    }
  }
  for (const auto& f : p2ptrace::DiagnoseNcclFailures(log)) {
    Require(p2ptrace::FindCause(f.cause) != nullptr && f.lines >= 1 && !f.evidence.empty());
    Require(f.evidence.size() <= p2ptrace::kMaxNcclFailureEvidence && f.first_line <= log.lines_read);
  }
  for (const auto& r : log.ranks) Require(!r.comm.empty() && r.FirstLine() >= 1 && r.FirstLine() <= log.lines_read);
  for (const auto& v : log.version_lines) Require(!v.version.empty());
  if (!log.version_lines.empty()) Require(log.nccl_version == log.version_lines.front().version);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  const p2ptrace::NcclLog whole = p2ptrace::ParseNcclLog(all);
  CheckRecords(whole);

  // The same splits, once as they come, once as the shim's log reader streams them: whole lines
  // only, settled after every piece, and forgotten at a point the input chooses (its communicators
  // gone); what it holds then is sane, and it has read every line, with the release it learnt first.
  p2ptrace::NcclLogParser split, streamed;
  uint32_t state = Seed(all);
  const size_t forget_at = size > 0 ? state % size : 0;
  bool forgotten = false;
  size_t streamed_to = 0;  // bytes given to `streamed`: up to the last '\n' seen
  for (size_t i = 0; i < all.size();) {
    state = state * 1103515245u + 12345u;
    size_t n = (state >> 16) % 4 == 0 ? 1 : 1 + (state >> 8) % 257;
    split.Feed(all.substr(i, n));
    i = std::min(i + n, all.size());
    size_t end = all.rfind('\n', i - 1);
    if (end != std::string_view::npos && end + 1 > streamed_to) {
      streamed.Feed(all.substr(streamed_to, end + 1 - streamed_to));
      streamed_to = end + 1;
      streamed.Finish();
    }
    if (!forgotten && i >= forget_at) {
      streamed.Forget();
      forgotten = true;
    }
  }
  split.Finish();
  Require(split.log() == whole);
  streamed.Feed(all.substr(streamed_to));
  streamed.Finish();
  CheckRecords(streamed.log());
  Require(streamed.log().lines_read == whole.lines_read && streamed.log().nccl_version == whole.nccl_version);
  return 0;
}
