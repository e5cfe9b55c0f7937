#include "tools/traces.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/status/status.h"

namespace p2ptrace::cli {

absl::StatusOr<LoadedTraces> LoadTraces(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec) return absl::NotFoundError(path + ": " + ec.message());
  std::vector<std::string> files, nccl_files;
  if (fs::is_directory(st)) {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (it->path().extension() == ".p2ptrace") files.push_back(it->path().string());
      else if (name.rfind("nccl.", 0) == 0 && it->path().extension() == ".log") nccl_files.push_back(it->path().string());
    }
    if (ec) return absl::PermissionDeniedError(path + ": " + ec.message());
  } else {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  std::sort(nccl_files.begin(), nccl_files.end());
  LoadedTraces out;
  for (const std::string& f : files) {
    Expected<Trace> t = ReadTrace(f);
    if (t.ok()) out.traces.push_back(std::move(t.value()));
    else out.problems.push_back(t.error().message);
  }
  // A user's own NCCL_DEBUG_FILE (recorded in each trace's environment) is read where it is.
  for (const Trace& t : out.traces)
    for (const auto& [name, value] : t.env) {
      if (name != "NCCL_DEBUG_FILE" || t.Env("P2PTRACE_NCCL_TAP") == "1") continue;
      std::string resolved;
      for (size_t i = 0; i < value.size(); ++i) {
        if (value[i] == '%' && i + 1 < value.size() && value[i + 1] == 'h') resolved += t.Host(), ++i;
        else if (value[i] == '%' && i + 1 < value.size() && value[i + 1] == 'p') resolved += std::to_string(t.header.pid), ++i;
        else resolved += value[i];
      }
      if (std::find(nccl_files.begin(), nccl_files.end(), resolved) == nccl_files.end() && fs::exists(resolved, ec))
        nccl_files.push_back(resolved);
    }
  for (const std::string& f : nccl_files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      out.problems.push_back(f + ": cannot read");
      continue;
    }
    NcclLogParser parser;
    char buf[1 << 16];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) parser.Feed(std::string_view(buf, static_cast<size_t>(in.gcount())));
    parser.Finish();
    out.nccl_logs.push_back({f, parser.log()});
  }
  return out;
}

}  // namespace p2ptrace::cli
