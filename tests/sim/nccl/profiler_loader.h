// The simulated NCCL's profiler plugin host: finds, loads, initialises and finalises a profiler
// plugin as the release it impersonates does (docs/research/nccl-profiler-abi.md §3): the name
// rules of NCCL_PROFILER_PLUGIN, the ncclProfiler_vN symbols looked up newest first from the
// release's newest version, one init per communicator with that version's arguments, a failed init
// handled as that release handles it, finalize at the communicator's destroy or abort, the log lines.
#pragma once

#include <nccl.h>

#include <cstdint>

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

// The ABI version a release looks up first (7 for 2.31.2, 5 for 2.28, 1 for 2.23; 0: none before 2.23).
int NewestVersion(int version_code);

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

// The ABI version loaded (0: none) and the process-wide activation mask the inits wrote.
int LoadedVersion();
int ActivationMask();

}  // namespace p2psim::profiler
