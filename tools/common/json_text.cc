#include "tools/common/json_text.h"

#include <utility>

#include "core/printable.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

bool AllUtf8(const json& j) {
  if (j.is_string()) return IsUtf8(j.get_ref<const std::string&>());
  if (j.is_object()) {
    for (const auto& [key, value] : j.items())
      if (!IsUtf8(key) || !AllUtf8(value)) return false;
    return true;
  }
  if (j.is_array()) {
    for (const json& v : j)
      if (!AllUtf8(v)) return false;
  }
  return true;
}

json MadeUtf8(const json& j) {
  if (j.is_string()) return ValidUtf8(j.get_ref<const std::string&>());
  if (j.is_object()) {
    json out = json::object();
    for (const auto& [key, value] : j.items()) out[ValidUtf8(key)] = MadeUtf8(value);
    return out;
  }
  if (j.is_array()) {
    json out = json::array();
    for (const json& v : j) out.push_back(MadeUtf8(v));
    return out;
  }
  return j;
}

}  // namespace

std::string JsonText(const json& j, int indent) {
  // The copy is made only for a document that needs it: nearly every one is UTF-8 already.
  return AllUtf8(j) ? j.dump(indent) : MadeUtf8(j).dump(indent);
}

}  // namespace p2ptrace::cli
