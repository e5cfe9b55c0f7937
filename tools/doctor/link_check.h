// `doctor`'s link health: every NVLink's and PCIe port's state, trained width and error counters
// now (core/link_health.h), the links trained below what they can do with the node's pairs whose
// predicted path crosses them, and the counters this node does not give.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "core/link_health.h"
#include "core/node_probe.h"
#include "core/predict.h"
#include "nlohmann/json.hpp"

namespace p2ptrace::cli {

struct LinkCheck {
  LinkHealth reading;
  struct Downtrained {
    LinkChange change;
    std::vector<std::string> pairs;  // "GPU0-GPU1": the predicted pairs whose path crosses it
  };
  std::vector<Downtrained> downtrained;
  std::vector<std::string> unsupported;  // UnsupportedCounters
};

LinkCheck CheckLinks(const NodeProbe& probe, const Prediction& prediction);
// {"reading": LinkHealthJson, "downtrained": [LinkChangeJson + "pairs"], "unsupported": [...]}.
nlohmann::json LinkCheckJson(const LinkCheck& check);
void LinkCheckText(const LinkCheck& check, std::ostream& out);

}  // namespace p2ptrace::cli
