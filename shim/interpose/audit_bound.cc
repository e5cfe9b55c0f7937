// The shim's half of the dlsym path: libp2ptrace_audit.so (shim/audit/audit.cc) hands a program that
// takes a wrapped CUDA runtime, driver or NCCL function through dlsym the shim's wrapper, and says so
// here, so that the trace can tell which path the calls came by (P2PTRACE_CAPTURE_*_DLSYM). The
// driver's entry points (driver_hooks.cc) say the same of the wrappers they hand out.
#include <cstdint>

#include "p2ptrace/trace_format.h"
#include "shim/record/trace_writer.h"

// Called by the auditor from inside the program's dlsym, which holds the dynamic loader's lock: so
// only atomics here, nothing that could take a lock, allocate or open the trace (which still waits
// for the first call, as everything in the shim does).
extern "C" __attribute__((visibility("default"))) void p2ptrace_audit_bound(uint32_t capture_flag) {
  using namespace p2ptrace::shim;
  capture_flag &= P2PTRACE_CAPTURE_CUDART_DLSYM | P2PTRACE_CAPTURE_NCCL_DLSYM | P2PTRACE_CAPTURE_DRIVER_DLSYM |
                  P2PTRACE_CAPTURE_DRIVER_ENTRY_POINT;
  detail::g_dlsym_capture.fetch_or(capture_flag);  // seq_cst, paired with TraceWriter::Open's
  if (detail::g_state.load() == 1)
    if (p2ptrace_file_header* h = TraceWriter::header()) __atomic_fetch_or(&h->capture_flags, capture_flag, __ATOMIC_RELAXED);
}
