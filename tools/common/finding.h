// One finding of the viewer (DESIGN.md §7 `findings`): what is wrong, on which pairs, the evidence
// and the fix. Shared by `report` and `explain`.
#pragma once

#include <string>
#include <vector>

namespace p2ptrace::cli {

struct Finding {
  std::string id, severity;  // severity: error | warning | info
  std::string cause;         // optional: the cause id when `id` names a symptom
  std::string fix;
  std::vector<std::string> pairs, evidence;
  // A finding that is not about GPU pairs (a failed NCCL call, NCCL's own WARN): what happened, in
  // one line; the text report shows it in place of the pair list.
  std::string title;
  // The ranks it names (the stopped finding: the rank that stopped first); empty when none.
  std::vector<int> ranks;
};

}  // namespace p2ptrace::cli
