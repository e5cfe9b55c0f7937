// Call sites (P2PTRACE_STACKS): where in the application an intercepted call came from. Each
// distinct stack (its first `depth` frames outside the shim) gets an id, from 1, that records carry
// in their `site` field; the first time a site is seen in a trace file, its frames, symbolised once
// in-process with dladdr, go into that file as a P2PTRACE_TEXT_CALL_SITE text block.
// The stack comes from glibc's backtrace() (libc, and libgcc_s.so.1 which it loads itself): the
// shim gains no DT_NEEDED. Off, the only cost on a hot path is CallSitesEnabled()'s one load.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace p2ptrace::shim {

namespace detail {
extern std::atomic<bool> g_call_sites_on;
}  // namespace detail

// True once StartCallSites succeeded. One relaxed load: hot paths may test it.
inline bool CallSitesEnabled() { return detail::g_call_sites_on.load(std::memory_order_relaxed); }

// Once, from the shim's constructor, when P2PTRACE_STACKS asked for `depth` frames (1..32): finds
// the shim's own code, makes the site table, and calls backtrace() once, so that its first call
// (which loads libgcc_s.so.1 and allocates) happens here and never inside a wrapped call. False,
// after one warning through `warn`, when no stack can be taken; a second call changes nothing.
bool StartCallSites(int depth, void (*warn)(const std::string&));

// The id of the application call site that led to the intercepted call in progress (the caller's
// stack, the shim's own frames left out), or 0: call sites off, tracing off, no frame outside the
// shim, or the table full (kMaxCallSites distinct sites per process). Thread-safe; after fork the
// child keeps the parent's ids and describes each again in its own file. Call it before
// TraceWriter::Emit, never inside an Emit fill callback (it may write a text block itself), and
// never from a signal handler.
uint32_t CaptureCallSite();
constexpr uint32_t kMaxCallSites = 4096;

// The description CaptureCallSite writes for return addresses `pcs` (innermost first): one line
// per frame, "MODULE+0xOFFSET (SYMBOL+0xOFF)" (trace_format.h, P2PTRACE_TEXT_CALL_SITE).
std::string DescribeFrames(const uintptr_t* pcs, int n);

}  // namespace p2ptrace::shim
