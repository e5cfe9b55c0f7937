#include "shim/link_readings.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "p2ptrace/trace_format.h"
#include "probe/link_health.h"
#include "shim/base/config.h"
#include "shim/record/text_block.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

std::atomic<bool> g_started{false};
// The GPUs and bridges to read again at exit (never freed), and the process that read them: a forked
// child inherits the handler, not the readings. Set before the handler is registered; exit() may
// run on any thread.
std::atomic<const NodeProbe*> g_links_probe{nullptr};
std::atomic<pid_t> g_reader_pid{0};

int Deadline() { return TraceWriter::config().nvml_timeout_ms; }

void Record(const LinkHealth& h, uint32_t tag) {
  WriteTextBlock(P2PTRACE_TEXT_LINK_HEALTH, tag, SerializeLinkHealth(h));
}

// Runs from exit() (or the shim's unloading); a forked child's exit reads nothing (the parent's
// NVML state is not the child's to use).
void AtExit() {
  const NodeProbe* gpus = g_links_probe.load(std::memory_order_acquire);
  if (gpus == nullptr || getpid() != g_reader_pid.load(std::memory_order_relaxed)) return;
  Record(probe::ReadLinkHealth(*gpus, "exit", Deadline()), P2PTRACE_LINKS_AT_EXIT);
}

}  // namespace

void RecordLinkReadings(const NodeProbe& probe) {
  if (g_started.exchange(true)) return;
  LinkHealth start = probe::ReadLinkHealth(probe, "start", Deadline());
  Record(start, P2PTRACE_LINKS_AT_START);
  if (start.nvlinks.empty() && start.pcie.empty()) return;  // nothing to read again
  NodeProbe* kept = new NodeProbe;
  kept->hostname = probe.hostname;
  kept->sysroot = probe.sysroot;
  kept->nvml = probe.nvml;
  kept->gpus = probe.gpus;
  g_reader_pid.store(getpid(), std::memory_order_relaxed);
  g_links_probe.store(kept, std::memory_order_release);
  std::atexit(AtExit);
}

}  // namespace p2ptrace::shim
