// The watchdog (DESIGN.md §4, "When the job stops"): the shim's one thread in a traced process,
// started with its first communicator (a process that only asks NCCL its version or an id gets
// none), named "p2ptrace". Every 50 ms it reads what NCCL appended to its log (nccl_log_tap.h),
// so that no NCCL call pays for that; and about once a period it
//   - beats: the trace header's heartbeat (a stopped or killed process stops beating);
//   - reads the records this process has written since its last look (its own trace, in memory: the
//     program's calls pay nothing for it) and, per stream with NCCL work, records one event behind
//     the newest operation and checks whether the previous one completed: NCCL_PROGRESS records
//     say how far the GPU got;
//   - prints one line when an operation has been unfinished for P2PTRACE_HANG_S, naming it, whom it
//     waits for and the connections NCCL said it uses. It never kills, aborts or waits on the job.
// Never while a stream capture runs (CaptureGate), never on the legacy or per-thread default
// streams (the program's calls there would queue behind its event), never a synchronizing call.
#pragma once

#include <cstdint>

namespace p2ptrace::shim {

// At the process's first communicator, made or entered (a fork child's too). Idempotent.
void StartNcclWatchdog();

// The program is destroying `stream` (before the real call): the thread records nothing more on it
// and forgets what it watched there; waits for an event call of the thread's in flight.
void NcclWatchdogStreamGone(uintptr_t stream);

// At exit, before the CUDA runtime is torn down: the thread makes no CUDA call after this.
void StopNcclWatchdog();

}  // namespace p2ptrace::shim
