// Link health as JSON (core/link_health.h): a reading with every counter (unsupported ones as
// null, never 0) and a change. `report --json` and `doctor --json` write the same shapes.
#pragma once

#include "core/link_health.h"
#include "nlohmann/json.hpp"

namespace p2ptrace::cli {

nlohmann::json LinkHealthJson(const LinkHealth& h);
// {"where", "kind" ("errors"|"downtrained"), "nvlink", "gpu", "link", "bus_id", "counter", "before",
// "after", "delta", "trained", "narrowed_between", "what", "fix"}; fields that do not apply are null.
nlohmann::json LinkChangeJson(const LinkChange& c);

}  // namespace p2ptrace::cli
