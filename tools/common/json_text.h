// Every JSON document the CLI writes is serialized here: a string or key holding bytes that are not
// UTF-8 (a host name, a path, a recorded environment value, an NCCL log line) is written by
// core/printable's rule (each stray byte as \xHH) instead of aborting the command with
// nlohmann's type_error 316.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace p2ptrace::cli {

// j.dump(indent), with ValidUtf8 applied to every string and key that needs it.
std::string JsonText(const nlohmann::json& j, int indent = -1);

}  // namespace p2ptrace::cli
