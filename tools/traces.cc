#include "tools/traces.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace p2ptrace::cli {
namespace {

// What a usable file lost, in one line naming it; "" when it is whole.
std::string PartialLine(const Trace& t) {
  std::vector<std::string> lost;
  if (t.CutShort() || t.missing_chunks)
    lost.push_back(fmt::format("cut short at {} of {} bytes (an interrupted copy or a full disk), {} of {} record "
                               "chunks lost",
                               t.file_bytes, t.header.file_size, t.missing_chunks, t.header.chunks_claimed));
  if (t.bad_chunks) lost.push_back(fmt::format("{} damaged chunk{} read only up to the damage", t.bad_chunks,
                                                 t.bad_chunks == 1 ? "" : "s"));
  if (t.skipped_records)
    lost.push_back(fmt::format("{} record{} of unknown type skipped{}", t.skipped_records,
                               t.skipped_records == 1 ? "" : "s",
                               t.header.minor > P2PTRACE_FORMAT_MINOR
                                   ? fmt::format(" (written as format {}.{}, newer than {}.{})", t.header.major,
                                                 t.header.minor, P2PTRACE_FORMAT_MAJOR, P2PTRACE_FORMAT_MINOR)
                                   : std::string()));
  if (t.records_not_kept)
    lost.push_back(fmt::format("{} records past the memory cap not kept ({} kept); pair totals stay exact, "
                               "timelines and NCCL operation counts cover the kept ones",
                               t.records_not_kept, t.records.size()));
  if (lost.empty()) return "";
  return fmt::format("{}: {}", t.path, fmt::join(lost, "; "));
}

}  // namespace

absl::StatusOr<LoadedTraces> LoadTraces(const std::string& path, const LoadOptions& options) {
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
  uint64_t records_left = options.max_records_total;
  for (const std::string& f : files) {
    ReadOptions ro;
    ro.max_records = std::min(options.max_records_per_file, records_left);
    Expected<Trace> t = ReadTrace(f, ro);
    if (!t.ok()) {
      out.problems.push_back(t.error().message);
      continue;
    }
    records_left -= std::min<uint64_t>(records_left, t->records.size());
    if (std::string line = PartialLine(*t); !line.empty()) out.partial.push_back(line);
    out.traces.push_back(std::move(t.value()));
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

void PrintLoadProblems(const LoadedTraces& loaded, std::ostream& err, size_t max_lines) {
  for (size_t i = 0; i < std::min(max_lines, loaded.problems.size()); ++i)
    err << "p2ptrace: skipped " << loaded.problems[i] << "\n";
  for (size_t i = 0; i < std::min(max_lines, loaded.partial.size()); ++i)
    err << "p2ptrace: partly read " << loaded.partial[i] << "\n";
  size_t hidden = loaded.problems.size() - std::min(max_lines, loaded.problems.size()) + loaded.partial.size() -
                  std::min(max_lines, loaded.partial.size());
  if (!loaded.problems.empty() || !loaded.partial.empty())
    err << fmt::format("p2ptrace: {} trace{} used ({} in part), {} file{} skipped{}\n", loaded.traces.size(),
                       loaded.traces.size() == 1 ? "" : "s", loaded.partial.size(), loaded.problems.size(),
                       loaded.problems.size() == 1 ? "" : "s",
                       hidden ? fmt::format("; {} more line{} not shown", hidden, hidden == 1 ? "" : "s") : "");
}

}  // namespace p2ptrace::cli
