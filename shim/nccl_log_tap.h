// The NCCL log tap (DESIGN.md §4): chooses NCCL_DEBUG / NCCL_DEBUG_FILE before NCCL reads them, so
// that NCCL's transport lines land in a file of the trace directory, and, when the user asked NCCL
// for output on stdout, forwards from that file exactly the lines their own setting would have shown.
#pragma once

#include <cstdio>
#include <string>

#include "core/nccl_log.h"
#include "shim/base/config.h"

namespace p2ptrace::shim {

// From the shim's constructor: the exit and fork handlers (they do nothing until a tap starts).
void InstallNcclLogTapHooks();

// Once, at the process's first wrapped NCCL call, before it reaches NCCL (no NCCL reads its
// environment earlier). Opens the trace: a process whose trace directory is unusable gets no tap.
// `observe` is told every connection NCCL states, as it is recorded, with the process's log so far
// (the job-start check compares it with its prediction, and reads the network's lines for why).
using ConnectionObserver = void (*)(const Connection& c, const NcclLog& log);
void StartNcclLogTap(const Config& config, ConnectionObserver observe);

// The shim's fopen: NCCL opening this process's tap file gets it created safely, on a descriptor
// far above the program's (nccl_log_tap.cc), through a stream that forwards what the user's level
// shows; any other path goes to `real_fopen` unchanged.
FILE* OpenNcclTapFile(const char* path, const char* mode, FILE* (*real_fopen)(const char*, const char*));

// Reads what NCCL appended to its log file (the tap's or the user's NCCL_DEBUG_FILE) and records
// each new connection it states (P2PTRACE_RECORD_NCCL_CONN); one stat when nothing was appended.
// From the shim's thread (never an NCCL call's path); exit reads the rest.
void ReadNcclLog();

// No communicator of this process lives, and none is being made: what their lines said is recorded,
// and the reader forgets them (a job that re-creates its communicators for days keeps no memory per
// generation). From the wrapper of the destroy or abort that freed the last one.
void NcclCommunicatorsGone();

// Whether this process has an NCCL log to read (after StartNcclLogTap): the shim's thread is then
// needed for it, heartbeat or not.
bool NcclLogToRead();

// Whether NAME=VALUE in the environment is the tap's own setting (its NCCL_DEBUG, NCCL_DEBUG_FILE),
// not the user's: a change the user made is news, the tap's is not.
bool IsNcclLogTapSetting(const std::string& name, const std::string& value);

// Whether NCCL's INFO lines reach the user (their own NCCL_DEBUG at INFO, TRACE or ABORT, or a value
// NCCL reads its own way), on stdout or in their own file: then anything that makes NCCL log other
// lines than it would bare (a profiler plugin it loads) is visible. After StartNcclLogTap.
bool NcclInfoShownToUser();

// NCCL 2.13.x decides whether to open NCCL_DEBUG_FILE before it has read NCCL_DEBUG (its level is
// still unset then; fixed in 2.14.3), so it ignores the file and prints the tap's INFO level on
// stdout. True for such a version code (ncclGetVersion's answer).
bool NcclIgnoresDebugFile(int version_code);

// NCCL before 2.22 puts its version line on stdout from rank 0's init at any level from VERSION
// (src/init.cc showVersion: puts, then fflush(stdout)). Where the tap raised the level from none,
// bare NCCL printed nothing there: that one line is dropped by the shim's puts (libc_hooks.cc),
// and only on a thread inside a wrapped init (NcclInitOnThisThread). Once, from the first wrapped
// NCCL call, with ncclGetVersion's answer.
void NoteNcclVersionForTap(int version_code);
// Around every call that makes communicators (an init, a split, the end of a group that made some):
// the version line above, and the log's connection lines, which wait for their init's end before
// their communicator is settled (NCCL before 2.18.3 names it only in `Init COMPLETE`, after them).
class NcclInitOnThisThread {
 public:
  NcclInitOnThisThread();
  ~NcclInitOnThisThread();
};
// True for the line to drop (the puts hook's test; cheap when there is none to drop).
bool IsTapsNcclVersionLine(const char* line);

// Takes the tap back before NCCL has read the environment: the user's NCCL_DEBUG exactly as they
// set it (unset when they did not), no NCCL_DEBUG_FILE, markers or tap file, no forwarding; the
// trace says why (P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN). Nothing when this process has no tap.
// Once, from the first wrapped NCCL call, before it reaches NCCL.
void WithdrawNcclLogTap();

}  // namespace p2ptrace::shim
