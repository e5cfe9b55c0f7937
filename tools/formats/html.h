// `p2ptrace html DIR -o FILE`: the report as one self-contained page — inline CSS, JS and SVG, no
// network access at all. A heatmap matrix per host (cells classed `cell t-<class>`, plus `fallback`
// and `multi`; hover shows a title, click fills the details panel with the pair's transports,
// GB/s and causes), a bandwidth chart per pair against the link's expectation, the fallbacks with
// their fixes, and a timeline summary (when each rank ran and how it ended, NCCL operations).
#pragma once

#include <ostream>
#include <string>

#include "tools/report/report.h"

namespace p2ptrace::cli {

std::string RenderHtml(const Report& report);

}  // namespace p2ptrace::cli
