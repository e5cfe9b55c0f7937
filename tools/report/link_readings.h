// The processes' link readings (trace text blocks of kind P2PTRACE_TEXT_LINK_HEALTH) folded per
// host: what changed between each process's start and exit reading, merged over the host's
// processes, charged to every pair whose path crosses the link (core/link_health.h PairCrosses),
// and a cause on each pair that ran below its class's rate with such a change.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/link_health.h"
#include "tools/report/report.h"

namespace p2ptrace::cli {

class LinkReadings {
 public:
  // One trace's readings; a block that does not parse is a line in `partial`.
  void AddTrace(const Trace& t, std::vector<std::string>* partial);
  // After the pairs have their expected rates (their class's low figure is the bar).
  void Charge(Report& rep) const;

 private:
  struct Process {
    LinkHealth start;
    std::optional<LinkHealth> exit;
  };
  std::map<std::string, std::vector<Process>> hosts_;
};

}  // namespace p2ptrace::cli
