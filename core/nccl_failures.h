// Why NCCL failed, from its own words: each `NCCL WARN` message and each failed return code
// (ncclResult_t, as NCCLCHECK's `file.cc:212 -> 2` trace or ncclGetErrorString's text in the
// program's output) classified into a cause of the catalog (core/causes.h) with what the line means.
// The patterns are NCCL's WARN format strings (src/misc/shmutils.cc, include/checks.h, misc/socket.cc,
// bootstrap.cc, init.cc, transport/net_ib.cc, net_socket.cc, graph/paths.cc, misc/nvmlwrap.cc of
// 2.18–2.31) and the CUDA runtime's error strings they quote. Pure: no I/O; `report` and `explain`
// turn the result into findings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/nccl_log.h"
#include "p2ptrace/trace_format.h"

namespace p2ptrace {

// One message's classification.
struct NcclFailureClass {
  std::string_view cause;    // catalog id (core/causes.h), e.g. "shm-too-small"
  std::string_view meaning;  // what NCCL's line says happened, one sentence for people
};

// The message after `NCCL WARN ` (no prefix); nullopt when it is not a failure this catalog knows
// (NCCL also WARNs about things that do not fail the job).
std::optional<NcclFailureClass> ClassifyNcclWarning(std::string_view message);

// ncclResult_t: its enum name ("ncclSystemError"; "" for an unknown code) and the cause a failed
// call with that code points to when no WARN line says more (nullopt for ncclSuccess/InProgress).
std::string_view NcclResultName(int code);
std::optional<NcclFailureClass> ClassifyNcclResult(int code);

// Whether an NCCL call's recorded result is a failure: not ncclSuccess, and not ncclInProgress (7),
// which a nonblocking communicator's calls return for work NCCL goes on with (a later failure comes
// through ncclCommGetAsyncError); a pending result (a call not returned) is no result yet.
constexpr int kNcclInProgress = 7;
constexpr bool NcclCallFailed(int32_t result) {
  return result != 0 && result != kNcclInProgress && result != P2PTRACE_RESULT_PENDING;
}

// One cause found in a log: the lines behind it, first first.
struct NcclFailure {
  std::string cause;    // catalog id
  std::string meaning;  // of the first line
  std::vector<std::string> evidence;  // "line 42 (node0 pid 4711): NCCL WARN …", at most kMaxEvidence
  size_t lines = 0;                   // how many lines named this cause (evidence may hold fewer)
  uint64_t first_line = 0;
  std::string file;  // of the first line (NamedNcclLog::name)
  std::string host;  // of the first line ("" when it had no prefix)
  int pid = -1;
};
inline constexpr size_t kMaxNcclFailureEvidence = 4;

// Every failure the logs of one job show (one log per process, the program's output too), one per
// cause over all of them, in the order they first appear (by log, then line). Evidence lines read
// "NAME:LINE (host pid P): NCCL WARN …" ("line LINE …" when NAME is ""). A failed return code is a
// cause of its own only when no WARN line explained a failure of the same process; a program's
// line (no NCCL prefix, so no process) only when no WARN line of any log did.
struct NamedNcclLog {
  std::string name;  // the file, for evidence ("" none)
  const NcclLog* log = nullptr;
};
std::vector<NcclFailure> DiagnoseNcclFailures(const std::vector<NamedNcclLog>& logs);
// One log.
std::vector<NcclFailure> DiagnoseNcclFailures(const NcclLog& log);

}  // namespace p2ptrace
