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
const NodeProbe* g_links_probe = nullptr;  // the GPUs and bridges to read again at exit; never freed
pid_t g_reader_pid = 0;                    // a forked child inherits the handler, not the readings

int Deadline() { return TraceWriter::config().nvml_timeout_ms; }

void Record(const LinkHealth& h, uint32_t tag) {
  WriteTextBlock(P2PTRACE_TEXT_LINK_HEALTH, tag, SerializeLinkHealth(h));
}

// Runs from exit() (or the shim's unloading); a forked child's exit reads nothing (the parent's
// NVML state is not the child's to use).
void AtExit() {
  if (g_links_probe == nullptr || getpid() != g_reader_pid) return;
  Record(probe::ReadLinkHealth(*g_links_probe, "exit", Deadline()), P2PTRACE_LINKS_AT_EXIT);
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
  g_links_probe = kept;
  g_reader_pid = getpid();
  std::atexit(AtExit);
}

}  // namespace p2ptrace::shim
