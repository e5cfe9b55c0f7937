// The report as text for a terminal (`report`, `run`), and the parts other outputs reuse.
#pragma once

#include <string>
#include <vector>

#include "tools/report/report.h"

namespace p2ptrace::cli {

std::string RenderText(const Report& report, bool color);
// The stopped finding's lines (empty when the job did not stop): the report leads with them, and
// `watch` prints them.
std::string StoppedText(const StoppedFinding& stopped);
// Every communicator's arrivals compared (skew, who called last most often); "" when none was.
std::string ArrivalsText(const SlowRankFinding& slow);
// The NCCL versions the header shows: per rank group from the trace headers ("2.28.9 (ranks 0-7)"),
// else those NCCL's log lines printed.
std::vector<std::string> NcclVersionGroups(const Report& report);
// A matrix cell's three letters, as `nvidia-smi topo -m` prints its links: "NVL", "PCI", "HST", …
const char* TransportCell(int transport);

}  // namespace p2ptrace::cli
