// libFuzzer target for the trace reader (core/trace_reader): any bytes as a trace file — cut-off,
// hostile offsets, bogus chunk counts — give a clean error or a bounded, self-consistent Trace.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/trace_reader.h"

namespace {

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

// Half the inputs start from a valid header, so the fuzzer reaches the counters and chunks.
std::string Shape(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size > 0 && (data[0] & 1)) {
    p2ptrace_file_header h{};
    std::memcpy(h.magic, P2PTRACE_MAGIC, 8);
    h.major = P2PTRACE_FORMAT_MAJOR;
    h.max_devices = P2PTRACE_MAX_DEVICES;
    h.chunk_size = 4096;
    h.env_offset = sizeof h;
    h.env_size = 256;
    h.counters_offset = 8192;
    h.counters_size = uint64_t{P2PTRACE_MAX_DEVICES} * P2PTRACE_MAX_DEVICES * 2 * sizeof(p2ptrace_pair_counters);
    h.chunks_offset = 8192;
    h.chunks_claimed = size / 4096 + 2;
    std::string head(reinterpret_cast<const char*>(&h), sizeof h);
    bytes = head + bytes;
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes = Shape(data, size);
  int fd = memfd_create("trace", 0);
  if (fd < 0) return 0;
  if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    close(fd);
    return 0;
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  p2ptrace::Expected<p2ptrace::Trace> t = p2ptrace::ReadTrace(path);
  close(fd);
  if (!t.ok()) {
    Require(!t.error().message.empty() && t.error().message.find('\n') == std::string::npos);
    return 0;
  }
  Require(t->header.max_devices >= 1 && t->header.max_devices <= P2PTRACE_MAX_DEVICES);
  Require(t->counters.size() <= size_t{t->header.max_devices} * t->header.max_devices * 2);
  for (size_t i = 1; i < t->counters.size(); ++i) Require(t->counters[i - 1].index < t->counters[i].index);
  Require(t->records.size() * sizeof(p2ptrace_record_header) <= bytes.size());
  // Call sites (TEXT blocks of kind P2PTRACE_TEXT_CALL_SITE): ids from 1, ascending, each once, found.
  for (size_t i = 0; i < t->call_sites.size(); ++i) {
    Require(t->call_sites[i].id != 0 && (i == 0 || t->call_sites[i - 1].id < t->call_sites[i].id));
    Require(t->FindCallSite(t->call_sites[i].id) == &t->call_sites[i]);
    for (const std::string& f : t->call_sites[i].frames) Require(!f.empty() && f.find('\n') == std::string::npos);
  }
  return 0;
}
