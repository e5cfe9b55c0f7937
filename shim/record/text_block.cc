#include "shim/record/text_block.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {
std::atomic<uint32_t> g_block{0};  // block numbers, per process from 1
}  // namespace

bool WriteTextBlock(uint16_t kind, uint32_t tag, std::string_view text) {
  if (!TraceWriter::Ready()) return false;
  size_t parts = (text.size() + P2PTRACE_TEXT_PART_BYTES - 1) / P2PTRACE_TEXT_PART_BYTES;
  if (parts == 0 || parts > 0xffff) return false;
  uint32_t block = g_block.fetch_add(1) + 1;
  bool whole = true;
  for (size_t i = 0; i < parts; ++i) {
    size_t off = i * P2PTRACE_TEXT_PART_BYTES;
    size_t len = std::min<size_t>(P2PTRACE_TEXT_PART_BYTES, text.size() - off);
    whole &= nullptr != TraceWriter::Emit<p2ptrace_text_record>(P2PTRACE_RECORD_TEXT, TraceWriter::NextSeq(),
                                                     [&](p2ptrace_text_record& r) {
                                                       r.block = block;
                                                       r.part = static_cast<uint16_t>(i);
                                                       r.parts = static_cast<uint16_t>(parts);
                                                       r.kind = kind;
                                                       r.length = static_cast<uint16_t>(len);
                                                       r.tag = tag;
                                                       std::memcpy(r.text, text.data() + off, len);
                                                     });
  }
  return whole;
}

}  // namespace p2ptrace::shim
