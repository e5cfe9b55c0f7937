// core/trace_reader's conversion of tick-stamped copy records (P2PTRACE_COPY_TICKS, written by the
// shim's fast path) into CLOCK_MONOTONIC ns, from the header's and the chunks' CLOCK anchors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/trace_reader.h"

namespace p2ptrace {
namespace {

struct Copy {
  uint64_t time;  // ticks when `ticks`, else ns
  bool ticks;
};

// A file with one chunk: `anchors` as its leading CLOCK records, then `copies`.
std::string WriteTrace(const std::string& name, const p2ptrace_file_header& base,
                       const std::vector<std::pair<uint64_t, uint64_t>>& anchors, const std::vector<Copy>& copies) {
  p2ptrace_file_header h = base;
  std::memcpy(h.magic, P2PTRACE_MAGIC, 8);
  h.major = P2PTRACE_FORMAT_MAJOR;
  h.minor = P2PTRACE_FORMAT_MINOR;
  h.header_size = sizeof h;
  h.chunk_size = 4096;
  h.max_devices = P2PTRACE_MAX_DEVICES;
  h.chunks_offset = 4096;
  h.chunks_claimed = 1;
  h.file_size = h.chunks_offset + h.chunk_size;
  std::string records;
  for (auto [ticks, ns] : anchors) {
    p2ptrace_clock_record r{};
    r.h = {P2PTRACE_RECORD_CLOCK, sizeof r, 0, ns};
    r.ticks = ticks;
    records.append(reinterpret_cast<const char*>(&r), sizeof r);
  }
  for (const Copy& c : copies) {
    p2ptrace_copy_record r{};
    r.h = {P2PTRACE_RECORD_COPY, sizeof r, 0, c.time};
    r.bytes = 4096;
    r.src_device = 0;
    r.dst_device = 1;
    r.flags = c.ticks ? P2PTRACE_COPY_TICKS : 0;
    records.append(reinterpret_cast<const char*>(&r), sizeof r);
  }
  std::string file(h.file_size, '\0');
  std::memcpy(file.data(), &h, sizeof h);
  p2ptrace_chunk_header ch{P2PTRACE_CHUNK_MAGIC, 1, records.size()};
  std::memcpy(file.data() + h.chunks_offset, &ch, sizeof ch);
  std::memcpy(file.data() + h.chunks_offset + sizeof ch, records.data(), records.size());
  std::string path = ::testing::TempDir() + "/" + name + "." + std::to_string(getpid()) + ".p2ptrace";
  std::ofstream(path, std::ios::binary) << file;
  return path;
}

std::vector<uint64_t> CopyTimes(const std::string& path) {
  Expected<Trace> t = ReadTrace(path);
  EXPECT_TRUE(t.ok()) << t.error().message;
  std::vector<uint64_t> times;
  if (!t.ok()) return times;
  EXPECT_EQ(t->skipped_records, 0u) << "CLOCK records are the reader's, never skipped as unknown";
  for (const TraceRecord& r : t->records)
    if (const auto* c = std::get_if<p2ptrace_copy_record>(&r.body)) times.push_back(c->h.time_ns);
  return times;
}

// The counter runs at 3 ticks per ns from tick 5000 at 1'000'000 ns: ns(t) = 1e6 + (t - 5000) / 3.
constexpr uint64_t Ticks(uint64_t ns) { return 5000 + (ns - 1000000) * 3; }

TEST(TickClock, TicksBecomeNsBetweenBeyondAndAtTheAnchors) {
  p2ptrace_file_header h{};
  h.start_ticks = Ticks(1000000), h.start_monotonic_ns = 1000000;
  h.calib_ticks = Ticks(1200000), h.calib_monotonic_ns = 1200000;
  std::string path = WriteTrace("ticks", h, {{Ticks(5000000), 5000000}},
                                {{Ticks(1100000), true}, {Ticks(5000000), true}, {Ticks(9000000), true},
                                 {7777, false}});
  EXPECT_EQ(CopyTimes(path), (std::vector<uint64_t>{1100000, 5000000, 9000000, 7777}))
      << "between anchors, at one, past the last (at the overall rate); ns records untouched";
}

TEST(TickClock, ASegmentOffTheOverallRateIsFollowedNotOvershot) {
  // The clock ran 10% slower than the overall rate between the last two anchors: a value there is
  // interpolated between them, so the times of one thread never run backwards across an anchor.
  p2ptrace_file_header h{};
  h.start_ticks = Ticks(1000000), h.start_monotonic_ns = 1000000;
  h.calib_ticks = Ticks(2000000), h.calib_monotonic_ns = 2000000;
  uint64_t mid = Ticks(2000000) + 1500000;  // halfway in ticks between the calibration and the last anchor
  std::string path = WriteTrace("segment", h, {{Ticks(2000000) + 3000000, 2900000}},
                                {{mid, true}, {Ticks(2000000) + 3000000, true}});
  EXPECT_EQ(CopyTimes(path), (std::vector<uint64_t>{2450000, 2900000}));
}

TEST(TickClock, WithoutTwoAnchorsATickTimeIsUnknownNotInvented) {
  p2ptrace_file_header h{};
  h.start_ticks = Ticks(1000000), h.start_monotonic_ns = 1000000;  // one anchor: no rate
  std::string path = WriteTrace("one-anchor", h, {}, {{Ticks(2000000), true}});
  EXPECT_EQ(CopyTimes(path), (std::vector<uint64_t>{0}));
}

TEST(TickClock, AnAnchorRunningBackwardsIsDropped) {
  p2ptrace_file_header h{};
  h.start_ticks = Ticks(1000000), h.start_monotonic_ns = 1000000;
  h.calib_ticks = Ticks(3000000), h.calib_monotonic_ns = 3000000;
  // A torn anchor: later ticks, earlier ns. Kept, it would put the copy before the start.
  std::string path = WriteTrace("torn", h, {{Ticks(2000000), 500}}, {{Ticks(2500000), true}});
  EXPECT_EQ(CopyTimes(path), (std::vector<uint64_t>{2500000}));
}

}  // namespace
}  // namespace p2ptrace
