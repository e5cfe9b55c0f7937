// libFuzzer target for what the CLI writes from hostile files: any bytes as a trace and
// as an NCCL log, in a directory whose name is not UTF-8 either, go through the commands' renderers
// in-process — report --json and text, dump --json and text, html, explain --json and text — and
// every JSON document must parse (strictly: valid UTF-8), every text must be valid UTF-8 with no
// control byte but a line feed (and, in the report, its own colours), and the page's script data
// must hold no '<'; the log's bytes are also read as a `doctor --test --baseline` file. Built only
// with clang (tests/CMakeLists.txt).
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "core/printable.h"
#include "nlohmann/json.hpp"
#include "tools/doctor/baseline.h"
#include "tools/explain/explain.h"
#include "tools/formats/dump.h"
#include "tools/formats/html.h"
#include "tools/formats/json.h"
#include "tools/formats/text.h"
#include "tools/report/builder.h"
#include "tools/report/load.h"
#include "tools/report/report.h"

namespace {

using namespace p2ptrace;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

// Created once, removed at exit; its name holds a byte that is not UTF-8 and an ESC, as a hostile
// directory's may. `name` is a plain array: it outlives the exit handler, which `dir` would not.
const std::string& Dir() {
  static char name[] = "/tmp/p2ptrace-fuzz-\xff\x1b[31m-XXXXXX";
  static const std::string dir = [] {
    Require(mkdtemp(name) != nullptr);
    std::atexit([] { std::filesystem::remove_all(name); });
    return std::string(name);
  }();
  return dir;
}

void Write(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Half the traces start from a valid header whose host and environment are the input's bytes, so
// that the fuzzer reaches the renderers with hostile text rather than stopping at the magic.
std::string TraceBytes(std::string_view data, bool shaped) {
  if (!shaped) return std::string(data);
  p2ptrace_file_header h{};
  std::memcpy(h.magic, P2PTRACE_MAGIC, 8);
  h.major = P2PTRACE_FORMAT_MAJOR;
  h.minor = P2PTRACE_FORMAT_MINOR;
  h.max_devices = 4;
  h.device_count = 2;
  h.chunk_size = 4096;
  h.env_offset = sizeof h;  // the input's first bytes, as NAME=VALUE strings
  h.env_size = 512;
  h.counters_offset = 1 << 20;  // beyond most inputs: no counters
  h.counters_size = 0;
  h.chunks_offset = sizeof h + 512;
  h.chunks_claimed = data.size() / 4096 + 1;
  h.state = static_cast<uint32_t>(data.size() % 4);
  h.fatal_signal = static_cast<int32_t>(data.size() % 70);
  h.rank = 0;
  std::memcpy(h.host, data.data(), std::min(data.size(), sizeof h.host - 1));
  if (data.size() > 64) std::memcpy(h.bus_id[0], data.data() + 64, std::min(data.size() - 64, sizeof h.bus_id[0] - 1));
  return std::string(reinterpret_cast<const char*>(&h), sizeof h) + std::string(data);
}

bool IsJson(std::string_view text) { return nlohmann::json::accept(text); }

// Valid UTF-8, and no control byte but '\n' and, when `sgr`, the report's colour sequences.
bool IsTerminalSafe(std::string_view text, bool sgr) {
  if (!IsUtf8(text)) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0x1b && sgr) {
      std::string_view rest = text.substr(i);
      bool ours = false;
      for (std::string_view code : {"\033[0m", "\033[31m", "\033[32m", "\033[36m"})
        if (rest.starts_with(code)) ours = true;
      if (!ours) return false;
      continue;
    }
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0xa0) return false;  // C1
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 3, size - 3);
  size_t split = (data[1] | (data[2] << 8)) % (rest.size() + 1);
  const std::string trace = Dir() + "/h\xfe.p2ptrace", log = Dir() + "/nccl.h.1.log";
  Write(trace, TraceBytes(rest.substr(0, split), data[0] & 1));
  Write(log, rest.substr(split));

  absl::StatusOr<cli::Report> rep = cli::StreamReport(Dir());
  Require(rep.ok());
  std::ostringstream json;
  cli::WriteJson(*rep, json);
  Require(IsJson(json.str()));
  Require(IsTerminalSafe(cli::RenderText(*rep, true), true));
  std::string html = cli::RenderHtml(*rep);
  size_t body = html.find("id=\"report-data\">");
  Require(body != std::string::npos);
  body = html.find('>', body) + 1;
  std::string_view script = std::string_view(html).substr(body, html.find("</script>", body) - body);
  Require(script.find('<') == std::string_view::npos && IsJson(script));

  if (Expected<Trace> t = ReadTrace(trace); t.ok()) {
    std::ostringstream lines, text;
    cli::DumpJson(*t, lines);
    std::istringstream in(lines.str());
    for (std::string line; std::getline(in, line);) Require(IsJson(line));
    cli::DumpText(*t, text);
    Require(IsTerminalSafe(text.str(), false));
  }

  std::ostringstream out, err;
  cli::ExplainOptions o;
  cli::RunExplain({log}, o, out, err);
  Require(IsTerminalSafe(out.str(), false) && IsTerminalSafe(err.str(), false));
  o.json = true;
  std::ostringstream out_json;
  if (cli::RunExplain({log}, o, out_json, err) == 0) Require(IsJson(out_json.str()));

  // The log's bytes as `doctor --test --baseline FILE`: refused with a reason, or pairs that make sense.
  cli::Baseline baseline;
  std::string why;
  if (cli::ParseBaseline(rest.substr(split), "baseline.json", &baseline, &why)) {
    for (const auto& [key, p] : baseline.pairs) Require(key.first >= 0 && key.second >= 0 && p.src == key.first);
  } else {
    Require(!why.empty());
  }
  return 0;
}
