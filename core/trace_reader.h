// Reads one trace file (include/p2ptrace/trace_format.h) into values. Tolerant of what crashes
// leave behind: a chunk cut short, records of unknown types, a file still being written.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"
#include "p2ptrace/trace_format.h"

namespace p2ptrace {

struct TraceRecord {
  uint32_t tid = 0;
  std::variant<p2ptrace_copy_record, p2ptrace_peer_record, p2ptrace_timing_record, p2ptrace_ipc_record,
               p2ptrace_nccl_comm_record, p2ptrace_nccl_op_record, p2ptrace_graph_record, p2ptrace_nccl_kernel_record,
               p2ptrace_nccl_progress_record>
      body;
  const p2ptrace_record_header& header() const {
    return std::visit([](const auto& r) -> const p2ptrace_record_header& { return r.h; }, body);
  }
};

// One used cell of the file's counter table; index = (src * max_devices + dst) * 2 + path.
struct PairCounter {
  uint32_t index = 0;
  p2ptrace_pair_counters c{};
};

// A call site (P2PTRACE_TEXT_CALL_SITE block): the application frames that led to the records
// whose `site` is `id`, innermost first, as the shim wrote them ("MODULE+0xOFFSET (SYMBOL+0xOFF)").
struct CallSite {
  uint32_t id = 0;
  std::vector<std::string> frames;
};

struct ReadOptions {
  // Records kept in memory at most; the rest are counted in records_not_kept (pair totals stay
  // exact: they come from the counters). Bounds memory on a huge file.
  uint64_t max_records = UINT64_MAX;
};

struct Trace {
  std::string path;
  p2ptrace_file_header header{};
  std::vector<std::pair<std::string, std::string>> env;
  // Only the non-zero cells, by index: a full table is 98 KiB per file, too much for 10k files.
  std::vector<PairCounter> counters;
  std::vector<TraceRecord> records;  // chunk by chunk; each thread's records in call order
  uint64_t skipped_records = 0;      // unknown types or malformed
  uint64_t bad_chunks = 0;
  uint64_t file_bytes = 0;           // the file's size on disk
  uint64_t missing_chunks = 0;       // claimed chunks beyond the end of a cut-short file
  uint64_t records_not_kept = 0;     // complete records past ReadOptions::max_records
  // Text blocks (p2ptrace_text_record), joined from their parts: kind 1 = the preflight block, 3 a
  // link reading (P2PTRACE_TEXT_LINK_HEALTH).
  // Call-site blocks are not here but in call_sites.
  std::vector<std::pair<int, std::string>> text_blocks;
  // The call sites the file describes (P2PTRACE_STACKS), by ascending id, each once.
  std::vector<CallSite> call_sites;
  // The connections NCCL logged, as the shim recorded them (P2PTRACE_RECORD_NCCL_CONN), in file
  // order; kept apart from `records` (never counted against max_records, also with a visitor).
  std::vector<p2ptrace_nccl_conn_record> nccl_connections;

  // Path 0 direct, 1 host-staged; zeros for a cell never used.
  const p2ptrace_pair_counters& Counter(int src, int dst, int path) const;
  bool CutShort() const { return file_bytes < header.file_size; }
  std::string Host() const;   // header.host, NUL-terminated safely
  std::string Env(const std::string& name) const;  // a recorded variable, "" when absent
  // The device's PCI bus id in one form ("0000:1a:00.0", NormalizeBusId), however the writer spelled
  // it, so that every reader's keys match; as written where it is no PCI address; "" when none.
  std::string BusId(int device) const;
  const CallSite* FindCallSite(uint32_t id) const;  // null when the file does not describe it
};

// Fails (with one line naming the file) when the file is not a trace, is truncated before its
// header ends, or has a newer major version than this reader.
Expected<Trace> ReadTrace(const std::string& path, const ReadOptions& options = {});
// The same, handing each decoded record to `visit` in file order instead of keeping it: memory stays
// one record however large the file (`records` stays empty; max_records does not apply).
using RecordVisitor = std::function<void(const TraceRecord&)>;
Expected<Trace> ReadTrace(const std::string& path, const ReadOptions& options, const RecordVisitor& visit);

}  // namespace p2ptrace
