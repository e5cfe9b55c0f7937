// libFuzzer target: link readings (core/link_health.h) on arbitrary bytes. A reading that parses
// serializes to text that parses to the same serialization (what the trace keeps is what the report
// reads back); comparing it with itself and charging its changes to small GPU pairs must not crash
// or read out of bounds. The input less its last line is a second reading, compared with the whole
// both ways, so that changes between two differing readings are exercised, not only a reading
// against itself (which has none).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/link_health.h"
#include "p2ptrace/vocabulary.h"

namespace {

void ChargeEveryPair(const std::vector<p2ptrace::LinkChange>& changes, const p2ptrace::LinkHealth& reading) {
  for (const p2ptrace::LinkChange& c : changes) {
    (void)c.Where();
    (void)c.What();
    (void)p2ptrace::LinkChangeFix(c);
    for (int a = 0; a < 4; ++a)
      for (int b = -1; b < 4; ++b)
        for (p2ptrace::LinkRoute r :
             {p2ptrace::LinkRoute::kNvLink, p2ptrace::LinkRoute::kPcieP2p, p2ptrace::LinkRoute::kThroughHost})
          (void)p2ptrace::PairCrosses(c, a, b, r, reading);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = p2ptrace::ParseLinkHealth(text);
  if (!parsed.ok()) {
    if (parsed.error().message.empty()) __builtin_trap();  // an error always says why
    return 0;
  }
  const p2ptrace::LinkHealth& h = *parsed;
  std::string once = p2ptrace::SerializeLinkHealth(h);
  auto again = p2ptrace::ParseLinkHealth(once);
  if (!again.ok() || p2ptrace::SerializeLinkHealth(*again) != once) __builtin_trap();

  ChargeEveryPair(p2ptrace::CompareLinkHealth(h, h), h);
  (void)p2ptrace::UnsupportedCounters(h);

  // A second reading: the input's text up to its last record cut off, compared both ways.
  std::string_view body = text.substr(0, text.size() - (!text.empty() && text.back() == '\n'));
  size_t cut = body.rfind('\n');
  if (cut != std::string_view::npos && cut > 0) {
    auto shorter = p2ptrace::ParseLinkHealth(text.substr(0, cut));
    if (shorter.ok()) {
      ChargeEveryPair(p2ptrace::CompareLinkHealth(*shorter, h), h);
      ChargeEveryPair(p2ptrace::CompareLinkHealth(h, *shorter), *shorter);
    }
  }
  for (int t = 0; t <= P2PTRACE_TRANSPORT_COUNT_; ++t) (void)p2ptrace::RouteOf(t, h.host);
  return 0;
}
