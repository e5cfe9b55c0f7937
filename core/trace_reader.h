// Reads one trace file (include/p2ptrace/trace_format.h) into values. Tolerant of what crashes
// leave behind: a chunk cut short, records of unknown types, a file still being written.
#pragma once

#include <array>
#include <cstdint>
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
               p2ptrace_nccl_comm_record, p2ptrace_nccl_op_record>
      body;
  const p2ptrace_record_header& header() const {
    return std::visit([](const auto& r) -> const p2ptrace_record_header& { return r.h; }, body);
  }
};

struct Trace {
  std::string path;
  p2ptrace_file_header header{};
  std::vector<std::pair<std::string, std::string>> env;
  // counters[(src * max_devices + dst) * 2 + path], path 0 direct, 1 host-staged
  std::vector<p2ptrace_pair_counters> counters;
  std::vector<TraceRecord> records;  // chunk by chunk; each thread's records in call order
  uint64_t skipped_records = 0;      // unknown types or malformed
  uint64_t bad_chunks = 0;

  const p2ptrace_pair_counters& Counter(int src, int dst, int path) const {
    return counters[(static_cast<size_t>(src) * header.max_devices + static_cast<size_t>(dst)) * 2 +
                    static_cast<size_t>(path)];
  }
  std::string Host() const;   // header.host, NUL-terminated safely
  std::string Env(const std::string& name) const;  // a recorded variable, "" when absent
  std::string BusId(int device) const;
};

// Fails (with one line naming the file) when the file is not a trace, is truncated before its
// header ends, or has a newer major version than this reader.
Expected<Trace> ReadTrace(const std::string& path);

}  // namespace p2ptrace
