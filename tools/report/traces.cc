#include "tools/report/traces.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "core/input_file.h"
#include "core/nccl_log.h"
#include "core/printable.h"
#include "fmt/format.h"

namespace p2ptrace::cli {

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

absl::StatusOr<JobFiles> ListJobFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec) return absl::NotFoundError(path + ": " + ec.message());
  JobFiles files;
  if (fs::is_directory(st)) {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (it->path().extension() == ".p2ptrace") files.traces.push_back(it->path().string());
      else if (IsNcclLogFileName(name)) files.nccl_logs.push_back(it->path().string());
    }
    if (ec) return absl::PermissionDeniedError(path + ": " + ec.message());
  } else {
    files.traces.push_back(path);
  }
  std::sort(files.traces.begin(), files.traces.end());
  std::sort(files.nccl_logs.begin(), files.nccl_logs.end());
  return files;
}

void AddUserNcclLog(const Trace& t, JobFiles* files) {
  std::string value = t.Env("NCCL_DEBUG_FILE");
  if (value.empty() || t.Env("P2PTRACE_NCCL_TAP") == "1") return;
  std::string resolved = ExpandNcclDebugFile(value, t.Host(), t.header.pid);
  std::error_code ec;
  if (std::find(files->nccl_logs.begin(), files->nccl_logs.end(), resolved) == files->nccl_logs.end() &&
      std::filesystem::exists(resolved, ec))
    files->nccl_logs.push_back(resolved);
}

absl::Status VisitJob(const std::string& path, const JobVisitor& visit) {
  absl::StatusOr<JobFiles> files = ListJobFiles(path);
  if (!files.ok()) return files.status();
  size_t total = files->traces.size() + files->nccl_logs.size(), done = 0;
  auto step = [&] {
    if (visit.progress) visit.progress(++done, total);
  };
  for (const std::string& f : files->traces) {
    Expected<Trace> t = ReadTrace(f, visit.read_options ? visit.read_options() : ReadOptions{}, visit.on_record);
    if (!t.ok()) {
      if (visit.on_record && visit.on_abandon) visit.on_abandon();
      if (visit.on_problem) visit.on_problem(t.error().message);
    } else {
      if (std::string line = PartialLine(*t); !line.empty() && visit.on_partial) visit.on_partial(line);
      // A user's own NCCL_DEBUG_FILE (recorded in the trace's environment) is read where it is.
      size_t before = files->nccl_logs.size();
      AddUserNcclLog(*t, &*files);
      total += files->nccl_logs.size() - before;
      if (visit.on_trace) visit.on_trace(std::move(t.value()));
    }
    step();
  }
  for (const std::string& f : files->nccl_logs) {
    std::string partial;
    Expected<NcclLog> log = ReadNcclLogFile(f, &partial);
    if (!log.ok()) {
      if (visit.on_problem) visit.on_problem(log.error().message);
    } else if (visit.on_nccl_log) {
      visit.on_nccl_log(NcclLogFile{f, std::move(log.value())});
    }
    if (!partial.empty() && visit.on_partial) visit.on_partial(partial);
    step();
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedTraces> LoadTraces(const std::string& path, const LoadOptions& options) {
  LoadedTraces out;
  uint64_t records_left = options.max_records_total;
  JobVisitor v;
  v.read_options = [&] {
    ReadOptions ro;
    ro.max_records = std::min(options.max_records_per_file, records_left);
    return ro;
  };
  v.on_trace = [&](Trace&& t) {
    records_left -= std::min<uint64_t>(records_left, t.records.size());
    out.traces.push_back(std::move(t));
  };
  v.on_nccl_log = [&](NcclLogFile&& f) { out.nccl_logs.push_back(std::move(f)); };
  v.on_problem = [&](std::string p) { out.problems.push_back(std::move(p)); };
  v.on_partial = [&](std::string p) { out.partial.push_back(std::move(p)); };
  if (absl::Status st = VisitJob(path, v); !st.ok()) return st;
  return out;
}

void PrintLoadProblems(const std::vector<std::string>& problems, const std::vector<std::string>& partial,
                       size_t used, std::ostream& err, size_t max_lines) {
  // Each on its own line, as a terminal may show it: the lines hold names from the directory.
  for (size_t i = 0; i < std::min(max_lines, problems.size()); ++i)
    err << "p2ptrace: skipped " << Printable(problems[i], false) << "\n";
  for (size_t i = 0; i < std::min(max_lines, partial.size()); ++i)
    err << "p2ptrace: partly read " << Printable(partial[i], false) << "\n";
  size_t hidden = problems.size() - std::min(max_lines, problems.size()) + partial.size() -
                  std::min(max_lines, partial.size());
  if (!problems.empty() || !partial.empty())
    // Files in part, not traces: an NCCL log past its cap is one too.
    err << fmt::format("p2ptrace: {} trace{} used ({} file{} in part), {} file{} skipped{}\n", used,
                       used == 1 ? "" : "s", partial.size(), partial.size() == 1 ? "" : "s", problems.size(),
                       problems.size() == 1 ? "" : "s",
                       hidden ? fmt::format("; {} more line{} not shown", hidden, hidden == 1 ? "" : "s") : "");
}

void PrintLoadProblems(const LoadedTraces& loaded, std::ostream& err, size_t max_lines) {
  PrintLoadProblems(loaded.problems, loaded.partial, loaded.traces.size(), err, max_lines);
}

// The static runtime's own object names are in every binary that carries it, stripped or not.
std::optional<bool> CarriesStaticCudart(const std::string& path) {
  Expected<InputFile> in = InputFile::Open(path);  // a regular file only: a FIFO would block
  if (!in.ok()) return std::nullopt;
  static const std::string kMarker = "libcudart_static_";
  std::string window;
  char buf[1 << 16];
  for (uint64_t at = 0;;) {
    Expected<size_t> got = in->ReadAt(at, buf, sizeof buf);
    if (!got.ok()) return std::nullopt;
    if (*got == 0) return false;
    at += *got;
    window.append(buf, *got);
    if (window.find(kMarker) != std::string::npos) return true;
    window.erase(0, window.size() > kMarker.size() ? window.size() - kMarker.size() : 0);
  }
}

}  // namespace p2ptrace::cli
