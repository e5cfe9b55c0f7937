// The simulated NCCL's profiler plugin host: finds, loads, initialises and finalises a profiler
// plugin as the release it impersonates does (docs/research/nccl-profiler-abi.md §3): the name
// rules of NCCL_PROFILER_PLUGIN, the ncclProfiler_vN symbols looked up newest first from the
// release's newest version, one init per communicator with that version's arguments, a failed init
// handled as that release handles it, finalize at the communicator's destroy or abort, the log lines.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <vector>

#include "shim/interpose/nccl_profiler_abi.h"

namespace p2psim::profiler {

// What the host needs of the simulated NCCL: its release and its log.
struct Host {
  int version_code;                                                        // NCCL_VERSION(2, 28, 9) = 22809
  void (*info)(unsigned long flags, const char* fmt, ...);                 // INFO with subsystem flags
  void (*warn)(const char* fmt, ...);                                      // WARN
  p2ptrace::nccl_profiler::Logger log;                                     // handed to v4+ init
  unsigned long init_flag, env_flag, destroy_flag;                         // NCCL_INIT, NCCL_ENV, NCCL_DESTROY
};

// A communicator's share of the plugin: its context (null when the plugin is off for it).
struct CommProfiler {
  void* context = nullptr;
  bool holds = false;   // holds a reference to the library (finalize lets it go)
  bool active = false;  // the plugin is called for this communicator's events
};

// At a communicator's init, before its transports connect (NCCL 2.27+): loads the plugin the first
// time (once per process, again after a full unload) and calls its init.
CommProfiler InitComm(const Host& host, uint64_t comm_hash, const char* comm_name, int nnodes, int nranks, int rank);
// At its destroy or abort.
void FinalizeComm(const Host& host, CommProfiler* p);

// One operation of a batch (a group's, or a single call's) as the plugin is told of it.
struct OpEvent {
  bool p2p;               // ncclSend / ncclRecv
  int func;               // NCCL's ncclFunc_t value (v1 gets enums), see FuncName
  const void* send_buff;  // a send/recv's buffer either way
  void* recv_buff;
  size_t count;           // the user's count
  ncclDataType_t type;
  int peer_or_root;
  uint64_t seq;           // a collective's sequence number per function in its communicator
  int channel_lo, channels;  // the channels its kernel ran on
  double seconds;            // its simulated kernel time: a send/recv's own pair's, a collective's ring's
  int mask;                  // the activation mask it was called under (ActivationMask)
};
// NCCL's ncclFunc_t numbering and ncclFuncToString's words.
enum Func { kBroadcast = 0, kReduce = 1, kAllGather = 2, kReduceScatter = 3, kAllReduce = 4, kSend = 6, kRecv = 7 };

// A batch's operations as the plugin was told of them at their launch: NCCL's handles, which the
// kernels' channel events name as their parent.
struct LaunchedBatch {
  const CommProfiler* profiler;
  std::vector<OpEvent> ops;
  std::vector<void*> handles;  // per operation, null where the plugin gave none
};
// At a batch's launch (a group's end, or a single call), before its kernels run and wait for the
// peers (§4, v1-v4's view; the API events of v5+ are not simulated): Group, then each operation's
// P2p or Coll (parent: the group), stopped at once (NCCL's "enqueued"), on the launching thread.
// Each kind only when the operation's own mask (OpEvent::mask, the process-wide one as it was at
// its call) asks for it or a child of it (the Group: for any operation's or child's bit, whatever
// the batch holds, as NCCL does).
LaunchedBatch LaunchBatch(const CommProfiler& p, int rank, std::vector<OpEvent> ops);
// After its kernels ran: per channel an operation ran on, KernelCh (v3+) with the channel's GPU
// start time, KernelChStop with its stop time (v4+), stop. Times come from this process's simulated
// GPU clock: collectives one after another, a group's send/recv side by side, each taking its own
// pair's time.
void KernelsRan(const LaunchedBatch& b);

// The process-wide activation mask as the plugin left it now: an operation copies it when it is
// called, and its events follow that copy.
int ActivationMask();

}  // namespace p2psim::profiler
