// The report as JSON (`report --json`, `run --json`; DESIGN.md §7), and the parts other outputs reuse.
#pragma once

#include <ostream>

#include "core/causes.h"
#include "nlohmann/json.hpp"
#include "tools/report/report.h"

namespace p2ptrace::cli {

nlohmann::json RenderJson(const Report& report);
nlohmann::json StoppedJson(const StoppedFinding& stopped);
// The slow-rank finding with every communicator's arrivals (without the Perfetto series).
nlohmann::json SlowRankJson(const SlowRankFinding& slow);
// The same document written as RenderJson(report).dump(2) prints it (byte for byte, no final
// newline), one array element at a time: memory stays one element, not the whole tree.
void WriteJson(const Report& report, std::ostream& out);
// Parts of the document: a cause of a pair ({"id","evidence","fix","confirm","origin"}) and "job".
nlohmann::json CauseJson(const Cause& cause);
nlohmann::json JobJson(const Report& report);
// A cross-host pair's NET sides ([{"host","network","nic_index","nic","gdr","proxy_rank","nic_path",
// "nearest_nic","nearest_path","crosses_rails"}]); null for a pair without them.
nlohmann::json NetSidesJson(const PairEntry& pair);
// A host's link health: {"host","readings","exit_readings","read_ms","changes":[LinkChangeJson + "pairs"],
// "unsupported","notes"}.
nlohmann::json HostLinksJson(const Report::HostLinks& links);

}  // namespace p2ptrace::cli
