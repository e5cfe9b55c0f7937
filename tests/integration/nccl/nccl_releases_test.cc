// The shim against several real NCCL releases (PyPI wheels, fetched by scripts/fetch-nccl-releases.py),
// with no GPU visible: nccl_real_probe, linked against the toolkit's libnccl, runs on each release through
// LD_LIBRARY_PATH, bare and under the shim, for each NCCL_DEBUG setting of the log tap's policy
// (DESIGN.md §4). Without a GPU every release still logs for ncclGetUniqueId and a failed
// ncclCommInitRank (no release reaches its version line: that comes after the CUDA calls that fail).
//
// Set P2PTRACE_SKIP_NCCL_RELEASES=1 to skip on purpose (offline); a missing cache otherwise fails.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <regex>
#include <tuple>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/trace_reader.h"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using p2ptrace::testing::Env;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

std::vector<std::string> Releases() {
  std::vector<std::string> out;
  std::istringstream in(NCCL_RELEASES);  // "2.13.4,2.18.3,…" from the fetch script's --list
  for (std::string v; std::getline(in, v, ',');) out.push_back(v);
  return out;
}

std::string ReleaseDir(const std::string& version) {
  const char* cache = std::getenv("P2PTRACE_CACHE");
  const char* home = std::getenv("HOME");
  std::string root = cache && *cache ? cache : std::string(home ? home : "") + "/.cache/p2ptrace";
  return root + "/nccl/" + version;
}

// 2.13.4 → 21304 (NCCL_VERSION_CODE since 2.9).
int VersionCode(const std::string& version) {
  int major = 0, minor = 0, patch = 0;
  std::sscanf(version.c_str(), "%d.%d.%d", &major, &minor, &patch);
  return major * 10000 + minor * 100 + patch;
}

// NCCL 2.13.x reads NCCL_DEBUG_FILE before it has parsed NCCL_DEBUG (debug.cc compares the level
// while it is still unset), so it ignores the file and writes to stdout; 2.12 and 2.14 honour it.
bool HonoursDebugFile(const std::string& version) { return version.rfind("2.13.", 0) != 0; }

// Lines as the user reads them, minus what changes from run to run: NCCL's prefix (timestamp, host,
// pid, tid, the printing thread's device, file:line) is cut to "NCCL WARN …" / "NCCL INFO …". Two
// things NCCL itself does differently from run to run are left out: lines of its helper threads
// (tid ≠ pid; e.g. 2.32's "Socket handshake magic" races with the exit) and, in "Failed to find CUDA
// library", the dlerror() text, which NCCL 2.18 reads after the string was freed.
std::vector<std::string> Normalized(const std::string& text) {
  static const std::regex kPrefix(R"((^|\s)\S+:(\d+):(\d+) \[)");  // host:pid:tid [device]
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find(" NCCL WARN ");
    if (at == std::string::npos) at = line.find(" NCCL INFO ");
    std::smatch m;
    if (at != std::string::npos && std::regex_search(line, m, kPrefix) && m[2] != m[3]) {
      if (line.find(" NCCL WARN ") != std::string::npos && !out.empty() && out.back().empty()) out.pop_back();
      continue;
    }
    if (at != std::string::npos) line = line.substr(at + 1);
    if (size_t cut = line.find(") : "); cut != std::string::npos && line.rfind("NCCL WARN Failed to find CUDA", 0) == 0)
      line.resize(cut + 1);
    out.push_back(line);
  }
  return out;
}

size_t Count(const std::vector<std::string>& lines, const std::string& prefix, size_t from = 0,
             size_t to = std::string::npos) {
  size_t n = 0;
  for (size_t i = from; i < lines.size() && i < to; ++i) n += lines[i].rfind(prefix, 0) == 0;
  return n;
}

size_t IndexOf(const std::vector<std::string>& lines, const std::string& prefix) {
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].rfind(prefix, 0) == 0) return i;
  return lines.size();
}

// The number the probe printed after `what` ("ncclCommInitRank 1 …" → 1).
int ProbeResult(const std::string& out, const std::string& what) {
  size_t at = out.find(what + " ");
  return at == std::string::npos ? -1000 : std::atoi(out.c_str() + at + what.size() + 1);
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Files directly in `dir` whose name starts with `prefix`.
std::vector<std::string> FilesStartingWith(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  return out;
}

enum class Debug { kUnset, kWarn, kInfo, kUserFile };
const char* Name(Debug d) {
  switch (d) {
    case Debug::kUnset: return "unset";
    case Debug::kWarn: return "WARN";
    case Debug::kInfo: return "INFO";
    case Debug::kUserFile: return "UserFile";
  }
  return "?";
}

class NcclRelease : public ::testing::TestWithParam<std::tuple<std::string, Debug>> {
 protected:
  void SetUp() override {
    if (const char* skip = std::getenv("P2PTRACE_SKIP_NCCL_RELEASES"); skip && std::string(skip) == "1")
      GTEST_SKIP() << "P2PTRACE_SKIP_NCCL_RELEASES=1";
    lib_dir_ = ReleaseDir(std::get<0>(GetParam()));
    ASSERT_TRUE(fs::exists(lib_dir_ + "/libnccl.so.2"))
        << lib_dir_ << "/libnccl.so.2 is missing: run scripts/fetch-nccl-releases.py "
        << "(or set P2PTRACE_SKIP_NCCL_RELEASES=1 to skip these tests)";
  }

  // The probe on this release with NCCL_DEBUG as the parameter says; the user's file, if any, in `dir`.
  RunResult Run(const std::string& dir, bool traced) {
    Debug debug = std::get<1>(GetParam());
    Env env{{"LD_LIBRARY_PATH", lib_dir_},
            {"CUDA_VISIBLE_DEVICES", ""},  // the init fails the same way on a GPU machine
            {"NCCL_DEBUG", std::nullopt},
            {"NCCL_DEBUG_FILE", std::nullopt},
            {"NCCL_DEBUG_SUBSYS", std::nullopt},
            {"LD_PRELOAD", std::nullopt},
            {"P2PTRACE_NCCL_LOG", std::nullopt},
            {"P2PTRACE_NCCL_TAP", std::nullopt},
            {"P2PTRACE_NCCL_TAP_FILE", std::nullopt},
            {"P2PTRACE_NCCL_FORWARD", std::nullopt}};
    if (debug == Debug::kWarn) env["NCCL_DEBUG"] = "WARN";
    if (debug == Debug::kInfo || debug == Debug::kUserFile) env["NCCL_DEBUG"] = "INFO";
    if (debug == Debug::kUserFile) env["NCCL_DEBUG_FILE"] = dir + "/user.%h.%p.log";
#if defined(__SANITIZE_ADDRESS__)
    env["ASAN_OPTIONS"] = WithSuppressions("ASAN_OPTIONS", "interceptor_via_fun:initOnceFunc\n"
                                                           "interceptor_via_fun:ncclCudaLibraryInit\n");
#elif defined(__SANITIZE_THREAD__)
    env["TSAN_OPTIONS"] = WithSuppressions("TSAN_OPTIONS", "race:initOnceFunc\nrace:ncclCudaLibraryInit\n");
#endif
    if (traced) {
      env["LD_PRELOAD"] = P2PTRACE_SHIM;
      env["P2PTRACE_DIR"] = dir + "/trace";
    }
    fs::create_directories(dir);
    return RunProgram({NCCL_REAL_PROBE}, env);
  }

  // NCCL 2.18 formats dlerror()'s string after a later dl call freed it (misc/cudawrap.cc,
  // "Failed to find CUDA library"); ASan and TSan report that use-after-free inside NCCL. Only NCCL's
  // CUDA-library init is let off, so anything the shim does stays reported.
  static std::string WithSuppressions(const char* options_var, const char* rules) {
    std::string supp = TempDir() + "/nccl-releases." + options_var + ".supp";
    if (!fs::exists(supp)) p2ptrace::testing::WriteFile(supp, rules);
    const char* inherited = std::getenv(options_var);
    return std::string(inherited && *inherited ? std::string(inherited) + ":" : "") + "suppressions=" + supp;
  }

  std::string lib_dir_;
};

TEST_P(NcclRelease, OutputUnchangedWrappersRecordAndLogRead) {
  const auto& [version, debug] = GetParam();
  std::string dir = TempDir() + "/" + version + "-" + Name(debug);
  RunResult bare = Run(dir + "/bare", false);
  RunResult traced = Run(dir + "/traced", true);

  // The release itself answered (LD_LIBRARY_PATH won over the probe's RUNPATH), bare and traced.
  std::string version_line = "ncclGetVersion 0 " + std::to_string(VersionCode(version)) + "\n";
  ASSERT_NE(bare.out.find(version_line), std::string::npos) << bare.out << bare.err;
  ASSERT_EQ(bare.signal, 0);
  EXPECT_EQ(bare.exit_code, 0);
  int init = ProbeResult(bare.out, "ncclCommInitRank");
  EXPECT_GT(init, 0) << "ncclCommInitRank should fail with no GPU visible: " << bare.out;

  // What NCCL printed, bare: the failed init warns at every level but unset; INFO also logs
  // ncclGetUniqueId's bootstrap.
  std::vector<std::string> out = Normalized(bare.out);
  size_t got_id = IndexOf(out, "ncclGetUniqueId "), failed_init = IndexOf(out, "ncclCommInitRank ");
  ASSERT_LT(got_id, failed_init) << bare.out;
  std::string user_file_text;
  if (debug == Debug::kUserFile && HonoursDebugFile(version)) {
    std::vector<std::string> files = FilesStartingWith(dir + "/bare", "user.");
    ASSERT_EQ(files.size(), 1u) << "NCCL " << version << " did not write NCCL_DEBUG_FILE";
    user_file_text = ReadFileText(files[0]);
    std::vector<std::string> lines = Normalized(user_file_text);
    EXPECT_GT(Count(lines, "NCCL WARN "), 0u) << user_file_text;
    EXPECT_GT(Count(lines, "NCCL INFO "), 0u) << user_file_text;
    EXPECT_EQ(Count(out, "NCCL "), 0u) << bare.out;
  } else if (debug == Debug::kUnset) {
    EXPECT_EQ(Count(out, "NCCL "), 0u) << bare.out;
  } else {
    EXPECT_GT(Count(out, "NCCL WARN ", got_id, failed_init), 0u) << bare.out;
    if (debug == Debug::kWarn) {
      EXPECT_EQ(Count(out, "NCCL INFO "), 0u) << bare.out;
    } else {
      EXPECT_GT(Count(out, "NCCL INFO ", 0, got_id), 0u) << bare.out;
    }
  }

  // The shim changes nothing the user sees: results, NCCL's lines and their order, exit code.
  ASSERT_EQ(traced.signal, 0) << traced.err;
  EXPECT_EQ(traced.exit_code, bare.exit_code);
  EXPECT_EQ(Normalized(traced.out), Normalized(bare.out)) << "bare:\n" << bare.out << "traced:\n" << traced.out;
  EXPECT_EQ(Normalized(traced.err), Normalized(bare.err)) << "bare:\n" << bare.err << "traced:\n" << traced.err;
  if (!user_file_text.empty()) {
    std::vector<std::string> files = FilesStartingWith(dir + "/traced", "user.");
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(Normalized(ReadFileText(files[0])), Normalized(user_file_text));
  }

  // The wrappers recorded each call once, with NCCL's own result, whether the release has pncclX
  // (2.16+) or only ncclX (dlsym(RTLD_NEXT, "ncclX")). ncclBcast calls ncclBroadcast through libnccl's
  // PLT (a JUMP_SLOT in every release here): the re-entry guard keeps that to one record.
  std::string trace_dir = dir + "/traced/trace";
  std::vector<std::string> traces = FilesStartingWith(trace_dir, "");
  std::erase_if(traces, [](const std::string& p) { return fs::path(p).extension() != ".p2ptrace"; });
  ASSERT_EQ(traces.size(), 1u) << trace_dir;
  p2ptrace::Expected<p2ptrace::Trace> trace = p2ptrace::ReadTrace(traces[0]);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  int comms = 0, broadcasts = 0, others = 0;
  for (const auto& r : trace->records) {
    if (const auto* c = std::get_if<p2ptrace_nccl_comm_record>(&r.body)) {
      ++comms;
      EXPECT_EQ(c->api, P2PTRACE_NCCL_CommInitRank);
      EXPECT_EQ(c->result, init);
    } else if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body)) {
      (o->api == P2PTRACE_NCCL_Broadcast ? broadcasts : others)++;
      EXPECT_EQ(o->result, ProbeResult(bare.out, "ncclBcast"));
    }
  }
  EXPECT_EQ(comms, 1);
  EXPECT_EQ(broadcasts, 1);
  EXPECT_EQ(others, 0);
  // The release, as its ncclGetVersion said, is in the header (NCCL printed no version line).
  EXPECT_EQ(trace->header.nccl_version, VersionCode(version));
  // Where this NCCL would have ignored the tap's file, the tap was taken back, and the trace says so.
  bool tap_expected = debug != Debug::kUserFile;
  EXPECT_EQ((trace->header.capture_flags & P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN) != 0,
            tap_expected && !HonoursDebugFile(version));

  // NCCL's profiler plugin: the shim offers itself (NCCL_PROFILER_PLUGIN, set before NCCL
  // reads its environment: the environment the trace recorded at the first NCCL call) to the releases
  // with GPU kernel timers, 2.27.3 on, and only where the user does not read NCCL's INFO lines (the
  // plugin's loading would be lines of their output that bare are others). No GPU here: no release
  // gets as far as loading it (NCCL loads it in its transport setup).
  bool offered = VersionCode(version) >= 22703 && debug != Debug::kInfo && debug != Debug::kUserFile;
  EXPECT_EQ(trace->Env("NCCL_PROFILER_PLUGIN"), offered ? "libp2ptrace.so" : "") << version;
  EXPECT_EQ(trace->header.capture_flags & P2PTRACE_CAPTURE_NCCL_PROFILER, 0u);

  // p2ptrace finds NCCL's lines where the policy put them: its own file when the user set nothing,
  // the user's file when they named one.
  RunResult report = RunProgram({P2PTRACE_CLI, "report", trace_dir, "--json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  nlohmann::json j = nlohmann::json::parse(report.out);
  ASSERT_EQ(j["ranks"].size(), 1u) << report.out;
  std::string seen = j["ranks"][0]["nccl_log"];
  // The header's version (ncclGetVersion), not a log line's (none printed here), names the release.
  EXPECT_EQ(j["ranks"][0]["nccl_version"], version);
  EXPECT_EQ(j["job"]["nccl_versions"], nlohmann::json::array({version}));
  RunResult text = RunProgram({P2PTRACE_CLI, "report", trace_dir}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("; NCCL " + version + "\n"), std::string::npos) << text.out;
  // A withdrawn tap is the reason no log was read, not a setting the user never made.
  if (trace->header.capture_flags & P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN) {
    EXPECT_EQ(seen.rfind("not seen: the log tap was withdrawn because NCCL " + version + " ignores NCCL_DEBUG_FILE", 0), 0u)
        << seen;
  }
  EXPECT_EQ(seen.find("P2PTRACE_NCCL_LOG=off"), std::string::npos) << seen;
  std::vector<std::string> tapped = FilesStartingWith(trace_dir, "nccl.");
  if (debug == Debug::kUserFile && HonoursDebugFile(version)) {
    EXPECT_EQ(seen, "user file");
    EXPECT_EQ(j["capture"]["nccl_logs"], 1) << report.out;
    EXPECT_TRUE(tapped.empty());
  } else if (debug == Debug::kUserFile) {
    // NCCL 2.13 wrote to stdout instead: there is no file for anyone to read.
    EXPECT_EQ(j["capture"]["nccl_logs"], 0) << report.out;
    EXPECT_TRUE(tapped.empty());
  } else if (seen == "tapped") {
    ASSERT_EQ(tapped.size(), 1u) << trace_dir;
    EXPECT_EQ(j["capture"]["nccl_logs"], 1) << report.out;
    // The tap caught the warnings of the failed init (a WARN run shows them, all releases).
    std::vector<std::string> lines = Normalized(ReadFileText(tapped[0]));
    EXPECT_GT(Count(lines, "NCCL WARN "), 0u);
    EXPECT_GT(Count(lines, "NCCL INFO "), 0u);
    RunResult explain = RunProgram({P2PTRACE_CLI, "explain", tapped[0], "--json"});
    ASSERT_EQ(explain.exit_code, 0) << explain.err;
    nlohmann::json e = nlohmann::json::parse(explain.out);
    // No release prints its version line without a GPU; one it did print must be this release's.
    if (!e["nccl_version"].is_null()) {
      EXPECT_EQ(e["nccl_version"].get<std::string>().rfind(version + "+", 0), 0u) << e["nccl_version"];
    }
  } else {
    // Not tapped: the report says why, and there is no half-made tap file.
    EXPECT_EQ(seen.rfind("not seen", 0), 0u) << seen;
    EXPECT_TRUE(tapped.empty());
  }
  // With nothing set, or WARN or INFO to stdout, the tap is the only way p2ptrace sees NCCL's lines:
  // every release that honours the file must have been tapped; the one that does not (2.13) must
  // say the tap was withdrawn ("no log captured" is no answer for any release).
  if (debug != Debug::kUserFile) {
    if (HonoursDebugFile(version)) EXPECT_EQ(seen, "tapped") << Name(debug);
    else EXPECT_TRUE(trace->header.capture_flags & P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN) << Name(debug) << ": " << seen;
  }
}

INSTANTIATE_TEST_SUITE_P(Pypi, NcclRelease,
                         ::testing::Combine(::testing::ValuesIn(Releases()),
                                            ::testing::Values(Debug::kUnset, Debug::kWarn, Debug::kInfo,
                                                              Debug::kUserFile)),
                         [](const auto& p) {
                           std::string v = std::get<0>(p.param);
                           for (char& c : v)
                             if (c == '.') c = '_';
                           return "nccl_" + v + "_" + Name(std::get<1>(p.param));
                         });

}  // namespace
