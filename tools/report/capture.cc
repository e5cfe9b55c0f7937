#include "tools/report/capture.h"

#include <cctype>
#include <vector>

#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "tools/common/text.h"

namespace p2ptrace::cli {

std::string StateText(const p2ptrace_file_header& h) {
  switch (h.state) {
    case P2PTRACE_STATE_EXITED: return "exited";
    case P2PTRACE_STATE_FATAL_SIGNAL: return fmt::format("fatal signal {}", h.fatal_signal);
    default: return "running or killed";  // no exit seen: still running, SIGKILL, _exit or a crash
  }
}


// How far a process's trace can be trusted: what the shim saw, and what an empty answer means.
void DescribeCapture(ProcessInfo* p) {
  std::vector<std::string> mode, trust;
  std::vector<std::string> runtimes;
  if (p->capture_flags & P2PTRACE_CAPTURE_CUDART_11) runtimes.push_back("11");
  if (p->capture_flags & P2PTRACE_CAPTURE_CUDART_12) runtimes.push_back("12");
  if (p->capture_flags & P2PTRACE_CAPTURE_CUDART_13) runtimes.push_back("13");
  bool driver = (p->capture_flags & P2PTRACE_CAPTURE_DRIVER) != 0;
  if (runtimes.empty() && driver) {
    mode.push_back("no CUDA runtime call reached the shim; the CUDA driver API's did");
  } else if (runtimes.empty() && !p->nccl_init_failed.empty()) {
    // Not a static runtime: the job stopped at NCCL's init, before a copy or peer call (findings say why).
    mode.push_back("no CUDA copy or peer call reached the shim before NCCL's init failed");
    trust.push_back(fmt::format("NCCL's init failed ({}): the process stopped before any GPU pair exchanged data "
                                "(the NCCL finding says why)",
                                p->nccl_init_failed));
  } else if (runtimes.empty()) {
    mode.push_back("no CUDA runtime call reached the shim");
    // Static linking only when the program's ELF carries the static runtime (read where the report runs).
    std::optional<bool> is_static = p->exe.empty() ? std::nullopt : CarriesStaticCudart(p->exe);
    if (is_static.value_or(false))
      trust.push_back(fmt::format("{} carries a statically linked CUDA runtime (nvcc's default --cudart static), which "
                                  "LD_PRELOAD cannot intercept: its CUDA copies are unseen (rebuild with "
                                  "`nvcc -cudart shared`)",
                                  p->exe));
    else if (is_static.has_value())
      trust.push_back(fmt::format("{} carries no static CUDA runtime: the process ended{} before any CUDA runtime call "
                                  "the shim wraps",
                                  p->exe, p->nccl_used ? " (its NCCL calls are traced)" : ""));
    else
      trust.push_back(fmt::format("its program ({}) cannot be read here to tell whether its CUDA runtime is linked "
                                  "statically: no CUDA pair listed for it proves nothing",
                                  p->exe.empty() ? "not named in the trace" : p->exe));
  } else {
    mode.push_back(fmt::format("cudart {} intercepted", fmt::join(runtimes, "+")));
  }
  // Which path the calls came by besides linking (trace 1.4): dlsym, seen through the audit module.
  if (p->capture_flags & P2PTRACE_CAPTURE_CUDART_DLSYM) mode.push_back("CUDA runtime via dlsym (LD_AUDIT)");
  if (p->capture_flags & P2PTRACE_CAPTURE_NCCL_DLSYM) mode.push_back("NCCL via dlsym (LD_AUDIT)");
  // The driver API (trace 1.5): linked, or handed out by address.
  if (driver && !runtimes.empty()) mode.push_back("CUDA driver API intercepted");
  if (p->capture_flags & P2PTRACE_CAPTURE_DRIVER_DLSYM) mode.push_back("CUDA driver via dlsym (LD_AUDIT)");
  if (p->capture_flags & P2PTRACE_CAPTURE_DRIVER_ENTRY_POINT)
    mode.push_back("CUDA driver via cuGetProcAddress/cudaGetDriverEntryPoint");
  mode.push_back(p->capture_flags & P2PTRACE_CAPTURE_NVML_LINKS ? "link types from NVML"
                 : p->links_from_probe                        ? "link types from the job-start probe (NVML)"
                                                              : "link types unknown");
  if (p->nccl_used) {
    bool from_trace = p->nccl_log.rfind("trace records", 0) == 0;
    mode.push_back(p->nccl_log == "tapped"      ? "NCCL log tapped"
                   : p->nccl_log == "user file" ? "NCCL log read from the user's file"
                   : from_trace                 ? "NCCL connections from the trace (log file missing)"
                                                : "NCCL lines not seen");
    if (p->nccl_log.rfind("not seen", 0) == 0) trust.push_back("NCCL's transports are unknown: " + p->nccl_log.substr(10));
    if (from_trace)
      trust.push_back("NCCL's transports from the connection lines the shim recorded; NCCL's other messages (its "
                      "reasons for refusing P2P) were only in the missing log: the recorded environment stands in");
  }
  if (p->capture_flags & P2PTRACE_CAPTURE_NCCL_PROFILER) mode.push_back("NCCL kernel timers");
  if (p->capture_flags & P2PTRACE_CAPTURE_NCCL_PROFILER_USER)
    trust.push_back("the program's own NCCL profiler plugin (NCCL_PROFILER_PLUGIN) could not be forwarded and was left "
                    "in place: its NCCL pairs were timed per call and per group, not on their own");
  if (p->capture_flags & P2PTRACE_CAPTURE_TIMING_OFF) {
    mode.push_back("timing off");
    trust.push_back("no bandwidth measured (P2PTRACE_SAMPLE)");
  }
  if (p->capture_flags & P2PTRACE_CAPTURE_FORK_CHILD) mode.push_back("forked child");
  if (p->dropped_records && (p->capture_flags & P2PTRACE_CAPTURE_NO_SPACE))
    trust.push_back(fmt::format("{} records dropped: the trace's filesystem was full (free space there or point "
                                "P2PTRACE_DIR elsewhere): pair totals exact, timelines partial",
                                p->dropped_records));
  else if (p->dropped_records)
    trust.push_back(fmt::format("{} records dropped at the size cap: pair totals exact, timelines partial",
                                p->dropped_records));
  if (!p->graph_alterations.empty()) {
    std::vector<std::string> calls;
    for (const auto& [api, n] : p->graph_alterations) calls.push_back(fmt::format("{} {}", api, n));
    trust.push_back(fmt::format("graph replays counted as the copies were recorded: the program changed, disabled or "
                                "removed graph nodes afterwards ({}), so its replayed calls and bytes may be off",
                                fmt::join(calls, ", ")));
  }
  if (p->fatal_signal)
    trust.push_back(fmt::format("killed by {} (signal {}): complete up to that moment", SignalName(p->fatal_signal),
                                p->fatal_signal));
  else if (p->state != "exited")
    trust.push_back("ended without exit (killed, crashed or still running): complete up to that moment");
  p->capture_mode = fmt::format("{}", fmt::join(mode, ", "));
  p->trust = trust.empty() ? "complete" : fmt::format("{}", fmt::join(trust, "; "));
}

std::string NcclLogStatus(const Trace& t) {
  // Checked first: the environment the trace recorded may still show the tap that was taken back.
  if (t.header.capture_flags & P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN)
    return fmt::format("not seen: the log tap was withdrawn because NCCL {} ignores NCCL_DEBUG_FILE (its lines "
                       "would have gone to the job's own output); keep that output with NCCL_DEBUG=INFO and run "
                       "`p2ptrace explain` on it",
                       t.header.nccl_version > 0 ? NcclVersionText(t.header.nccl_version) : std::string("2.13"));
  std::string level = t.Env("NCCL_DEBUG");
  for (char& ch : level) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (t.Env("P2PTRACE_NCCL_TAP") == "1") return "tapped";
  if (!t.Env("NCCL_DEBUG_FILE").empty()) return "user file";
  if (level == "INFO" || level == "TRACE")
    return "not seen: NCCL_DEBUG=" + level + " prints to the job's own output; set NCCL_DEBUG_FILE to let p2ptrace read it";
  if (!level.empty()) return "not seen: NCCL_DEBUG=" + level + " hides the transport lines; unset it to let p2ptrace tap them";
  if (t.Env("P2PTRACE_NCCL_LOG") == "off") return "not seen: P2PTRACE_NCCL_LOG=off";
  // The tap declines a value of NCCL_DEBUG it does not know, and a trace directory it cannot make.
  return "not seen: the shim set up no NCCL log tap for this process";
}

}  // namespace p2ptrace::cli
