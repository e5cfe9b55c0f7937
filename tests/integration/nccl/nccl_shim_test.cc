// The shim's NCCL wrappers against the real libnccl.so.2 of the toolkit (no GPU): every result and
// every line NCCL prints is unchanged, the failed init is recorded with NCCL's own error code, and a
// call NCCL makes to its own API (ncclBcast → ncclBroadcast) is recorded once.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <variant>

#include "core/trace_reader.h"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"

namespace {

using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

// The program's own lines: NCCL's (which carry pids and times) and blank lines left out.
std::string ProgramLines(const std::string& out) {
  std::string kept, line;
  std::istringstream in(out);
  while (std::getline(in, line))
    if (!line.empty() && line.find(" NCCL ") == std::string::npos) kept += line + "\n";
  return kept;
}

std::vector<p2ptrace::Trace> ReadAll(const std::string& dir) {
  std::vector<p2ptrace::Trace> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (auto t = p2ptrace::ReadTrace(e.path().string()); t.ok()) out.push_back(std::move(*t));
  return out;
}

class RealNccl : public ::testing::TestWithParam<const char*> {};

TEST_P(RealNccl, ResultsAndOutputUnchangedAndSelfCallRecordedOnce) {
  std::string debug = GetParam();
  std::string dir = TempDir() + "/nccl-" + (debug.empty() ? "unset" : debug);
  std::map<std::string, std::optional<std::string>> env{
      {"LD_LIBRARY_PATH", std::nullopt}, {"NCCL_DEBUG_FILE", std::nullopt},
      {"NCCL_DEBUG", debug.empty() ? std::nullopt : std::optional<std::string>(debug)}};
  RunResult bare = RunProgram({NCCL_REAL_PROBE}, env);
  env["LD_PRELOAD"] = P2PTRACE_SHIM;
  env["P2PTRACE_DIR"] = dir;
  RunResult traced = RunProgram({NCCL_REAL_PROBE}, env);
  EXPECT_EQ(traced.exit_code, bare.exit_code);
  EXPECT_EQ(ProgramLines(traced.out), ProgramLines(bare.out));
  EXPECT_NE(bare.out.find("ncclGetVersion 0 22809\n"), std::string::npos) << bare.out;
  EXPECT_NE(bare.out.find("ncclCommInitRank 1 unhandled cuda error"), std::string::npos) << bare.out;
  // NCCL's own lines carry pids and times; compare their count and kinds, not their bytes.
  auto count = [](const std::string& s, const char* what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(traced.err, "NCCL WARN"), count(bare.err, "NCCL WARN"));
  EXPECT_EQ(count(traced.err, "NCCL INFO") + count(traced.out, "NCCL INFO"),
            count(bare.err, "NCCL INFO") + count(bare.out, "NCCL INFO"));

  std::vector<p2ptrace::Trace> traces = ReadAll(dir);
  ASSERT_EQ(traces.size(), 1u);
  int comms = 0, broadcasts = 0, others = 0;
  for (const auto& r : traces[0].records) {
    if (const auto* c = std::get_if<p2ptrace_nccl_comm_record>(&r.body)) {
      ++comms;
      EXPECT_EQ(c->api, P2PTRACE_NCCL_CommInitRank);
      EXPECT_EQ(c->result, 1);  // ncclUnhandledCudaError, as NCCL said
    } else if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body)) {
      if (o->api == P2PTRACE_NCCL_Broadcast) ++broadcasts;
      else ++others;
      EXPECT_NE(o->result, 0);
    }
  }
  EXPECT_EQ(comms, 1);
  EXPECT_EQ(broadcasts, 1);  // not 2: the ncclBroadcast NCCL called itself passed straight through
  EXPECT_EQ(others, 0);
}

INSTANTIATE_TEST_SUITE_P(Shim, RealNccl, ::testing::Values("", "WARN", "INFO"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(*p.param ? p.param : "unset");
                         });

}  // namespace
