#include "tools/traces.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"

namespace p2ptrace::cli {

absl::StatusOr<LoadedTraces> LoadTraces(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec) return absl::NotFoundError(path + ": " + ec.message());
  std::vector<std::string> files;
  if (fs::is_directory(st)) {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".p2ptrace") files.push_back(it->path().string());
    if (ec) return absl::PermissionDeniedError(path + ": " + ec.message());
  } else {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  LoadedTraces out;
  for (const std::string& f : files) {
    Expected<Trace> t = ReadTrace(f);
    if (t.ok()) out.traces.push_back(std::move(t.value()));
    else out.problems.push_back(t.error().message);
  }
  return out;
}

}  // namespace p2ptrace::cli
