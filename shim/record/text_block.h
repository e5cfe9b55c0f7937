// Text blocks into the trace (p2ptrace_text_record): text longer than one record goes in parts
// that readers join. One writer for every kind (the preflight block, call sites).
#pragma once

#include <cstdint>
#include <string_view>

namespace p2ptrace::shim {

// Writes `text` as one block of `kind` with its kind-specific `tag` (0 where the kind has none),
// opening the trace at need. False when tracing is off or a part was dropped at the size cap.
// Never from inside a TraceWriter::Emit fill callback: it appends records of its own.
bool WriteTextBlock(uint16_t kind, uint32_t tag, std::string_view text);

}  // namespace p2ptrace::shim
