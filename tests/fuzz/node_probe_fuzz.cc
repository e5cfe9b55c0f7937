// libFuzzer target: the node probes' parsers (core/node_probe.h) and the preflight block reader
// on arbitrary bytes: no crash, no overread, and a block that parses serializes back to text that
// parses to the same pairs.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/node_probe.h"
#include "core/preflight_block.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)p2ptrace::ParseKernelCmdline(text);
  (void)p2ptrace::ParseNvidiaParams(text);
  (void)p2ptrace::PcieGenFromLinkSpeed(text);
  (void)p2ptrace::NormalizeBusId(text);
  (void)p2ptrace::ParseAcsFromConfig(std::span<const uint8_t>(data, size));
  auto block = p2ptrace::ParsePreflight(text);
  if (block.ok()) {
    auto again = p2ptrace::ParsePreflight(p2ptrace::SerializePreflight(*block));
    if (!again.ok() || again->pairs.size() != block->pairs.size()) __builtin_trap();
  }
  return 0;
}
