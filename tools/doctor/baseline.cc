#include "tools/doctor/baseline.h"

#include <climits>

#include "core/input_file.h"
#include "nlohmann/json.hpp"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

bool Index(const json& side, int* out) {
  if (!side.is_object() || !side.contains("gpu")) return false;
  const json& g = side["gpu"];
  if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > INT_MAX) return false;
  *out = static_cast<int>(g.get<int64_t>());
  return true;
}

double Figure(const json& p, const char* key) {
  if (!p.contains(key) || !p[key].is_number()) return -1;
  double v = p[key].get<double>();
  return v >= 0 ? v : -1;
}

std::string Text(const json& p, const char* key) {
  return p.contains(key) && p[key].is_string() ? p[key].get<std::string>() : "";
}

}  // namespace

bool ParseBaseline(std::string_view text, const std::string& name, Baseline* out, std::string* why) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pairs") || !j["pairs"].is_array()) {
    *why = name + ": not the output of `p2ptrace doctor --test --json` (no \"pairs\" list)";
    return false;
  }
  Baseline b;
  for (const json& p : j["pairs"]) {
    PairBaseline pb;
    if (!p.is_object() || !p.contains("src") || !p.contains("dst") || !Index(p["src"], &pb.src) ||
        !Index(p["dst"], &pb.dst)) {
      *why = name + ": a pair without src.gpu and dst.gpu";
      return false;
    }
    pb.transport = Text(p, "transport");
    pb.gbps = Figure(p, "gbps");
    pb.bidir_gbps = Figure(p, "bidir_gbps");
    // A pair the baseline could not test, or that failed there, sets no bar.
    std::string verdict = Text(p, "verdict");
    if (verdict == "pass" || verdict == "expected") b.pairs[{pb.src, pb.dst}] = pb;
  }
  if (j.contains("gpus") && j["gpus"].is_array())
    for (const json& g : j["gpus"]) {
      int index = -1;
      if (Index(g, &index) && !Text(g, "name").empty()) b.models[index] = Text(g, "name");
    }
  *out = std::move(b);
  return true;
}

bool LoadBaseline(const std::string& file, Baseline* out, std::string* why) {
  std::string text;
  constexpr uint64_t kMaxBytes = 64u << 20;  // a 64-GPU node's JSON is well under 10 MB
  Expected<uint64_t> size = ReadInPieces(file, kMaxBytes, [&](std::string_view piece) { text += piece; });
  if (!size.ok()) {
    *why = size.error().message;
    return false;
  }
  if (*size > kMaxBytes) {
    *why = file + ": larger than any `doctor --test --json` (64 MiB)";
    return false;
  }
  return ParseBaseline(text, file, out, why);
}

}  // namespace p2ptrace::cli
