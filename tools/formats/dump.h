// `p2ptrace dump FILE [--json]`: one trace, record by record.
#pragma once

#include <ostream>

#include "core/trace_reader.h"

namespace p2ptrace::cli {

void DumpText(const Trace& trace, std::ostream& out);
// JSON lines: {"kind":"header",…}, then {"kind":"counter",…} per used pair, then one per record.
void DumpJson(const Trace& trace, std::ostream& out);

}  // namespace p2ptrace::cli
