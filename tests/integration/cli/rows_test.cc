// `p2ptrace export DIR --rows FILE` (tools/formats/rows.h, docs/ROWS.md) on synthetic jobs: one row per pair
// and per NCCL operation with the report's figures, the job's identity on each, null where nothing
// was measured, the file replaced whole or left alone, and stdout with '-'.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::testing::ReadFile;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

std::vector<json> Lines(const std::string& text) {
  std::vector<json> rows;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    rows.push_back(json::parse(text.substr(at, nl - at)));  // one complete object per line
  return rows;
}

std::string Synth(const std::string& name, const std::vector<std::string>& extra) {
  std::string dir = TempDir() + "/" + name;
  std::vector<std::string> argv = {P2PTRACE_CLI, "synth", "--out", dir};
  argv.insert(argv.end(), extra.begin(), extra.end());
  RunResult r = RunProgram(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

TEST(Rows, OneRowPerPairAndOperationWithTheReportsFigures) {
  std::string dir = Synth("rows-two-hosts", {"--ranks", "8", "--gpus-per-host", "4", "--events", "40", "--scenario",
                                             "fallback", "--host-names", "gpu-a1,gpu-a2", "--job-id", "p2ptrace-77",
                                             "--env", "SLURM_JOB_ID=77", "--env", "SLURMD_NODENAME={host}",
                                             "--env", "SLURM_PROCID={rank}", "--start-time", "1767300000"});
  std::string file = TempDir() + "/rows-two-hosts.ndjson";
  RunResult r = RunProgram({P2PTRACE_CLI, "export", dir, "--rows", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  RunResult rep = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  json report = json::parse(rep.out);
  std::vector<json> rows = Lines(ReadFile(file));
  size_t pairs = 0, ops = 0;
  for (const json& row : rows) {
    EXPECT_EQ(row["schema"], "p2ptrace.rows/1");
    EXPECT_EQ(row["job_id"], "77");
    EXPECT_EQ(row["trace_job_id"], "p2ptrace-77");
    EXPECT_EQ(row["scheduler"], "slurm");
    EXPECT_EQ(row["job_start"], "2026-01-01T20:40:00.000Z") << row["job_start"];
    EXPECT_EQ(row["nccl_version"], "2.28.9");  // NCCL's own line: synth's headers carry none
    EXPECT_EQ(row["trace_format"].get<std::string>().substr(0, 2), "1.");
    EXPECT_TRUE(row["p2ptrace_version"].is_string());
    if (row["kind"] == "pair") {
      const json& p = report["pairs"][pairs++];  // the report's order
      EXPECT_EQ(row["class_used"], p["transport"]);
      EXPECT_EQ(row["class_expected"], p["expected"]);
      EXPECT_EQ(row["bytes"], p["bytes"]);
      EXPECT_EQ(row["gbps"], p["gbps"]);
      EXPECT_EQ(row["lost_seconds"], p["lost_seconds"]);
      EXPECT_EQ(row["src_bus_id"], p["src"]["bus_id"]);
      EXPECT_EQ(row["node"], row["host"]);  // SLURMD_NODENAME={host}
      EXPECT_TRUE(row["host"] == "gpu-a1" || row["host"] == "gpu-a2") << row["host"];
      EXPECT_TRUE(row["src_model"].is_null());   // no probe named the GPUs: null, not ""
      EXPECT_TRUE(row["gpu_models"].is_null());
      EXPECT_TRUE(row["k8s_pod"].is_null());
      if (row["fallback"] == true) {
        EXPECT_TRUE(row["cause"].is_string()) << row.dump();
        EXPECT_EQ(row["cause"], row["causes"][0]);
      }
    } else {
      ASSERT_EQ(row["kind"], "op");
      const json& o = report["nccl_ops"][ops++];
      EXPECT_EQ(row["op"], o["op"]);
      EXPECT_EQ(row["busbw_gbps"], o["busbw_gbps"]);
      EXPECT_EQ(row["hosts"], json::array({"gpu-a1", "gpu-a2"}));
      EXPECT_EQ(row["nodes"], json::array({"gpu-a1", "gpu-a2"}));
    }
  }
  EXPECT_EQ(pairs, report["pairs"].size());
  EXPECT_EQ(ops, report["nccl_ops"].size());
  EXPECT_GT(pairs, 0u);
  EXPECT_GT(ops, 0u);
  EXPECT_NE(r.err.find("-> " + file), std::string::npos) << r.err;

  // '-': the same rows on stdout.
  RunResult out = RunProgram({P2PTRACE_CLI, "export", dir, "--rows", "-"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.out, ReadFile(file));
}

TEST(Rows, NothingMeasuredIsNull) {
  // A job whose NCCL ranks connected and then moved nothing: its pairs exist (NCCL's connections)
  // with no time, rate or cost. (Copies counted but never timed, P2PTRACE_SAMPLE=off, are checked
  // on the real shim in cli_test's Rows.CarryTheSchedulersIdsTheShimRecorded.)
  std::string dir = Synth("rows-idle", {"--ranks", "2", "--gpus-per-host", "2", "--events", "0"});
  std::string file = TempDir() + "/rows-idle.ndjson";
  RunResult r = RunProgram({P2PTRACE_CLI, "export", dir, "--rows", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<json> rows = Lines(ReadFile(file));
  EXPECT_EQ(rows.size(), 2u);  // the NCCL pair both ways
  for (const json& row : rows) {
    EXPECT_EQ(row["calls"], 0);
    EXPECT_TRUE(row["seconds"].is_null()) << row.dump();
    if (row["kind"] == "pair") {
      EXPECT_TRUE(row["gbps"].is_null()) << row.dump();
      EXPECT_TRUE(row["lost_seconds"].is_null()) << row.dump();
    } else {
      EXPECT_TRUE(row["busbw_gbps"].is_null()) << row.dump();
    }
    EXPECT_TRUE(row["scheduler"].is_null());  // no launcher's variables
    EXPECT_EQ(row["job_id"], row["trace_job_id"]);
  }
}

TEST(Rows, TheFileIsReplacedWholeOrLeftAlone) {
  std::string dir = Synth("rows-atomic", {"--ranks", "2", "--gpus-per-host", "2", "--events", "8"});
  std::string file = TempDir() + "/rows-atomic.ndjson";
  p2ptrace::testing::WriteFile(file, "an older job's rows\n");
  RunResult r = RunProgram({P2PTRACE_CLI, "export", dir, "--rows", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string text = ReadFile(file);
  EXPECT_EQ(text.find("an older job"), std::string::npos);  // replaced, not appended to
  EXPECT_FALSE(Lines(text).empty());
  for (const auto& e : fs::directory_iterator(TempDir()))
    EXPECT_EQ(e.path().filename().string().find("rows-atomic.ndjson.tmp"), std::string::npos) << e.path();
  // A directory that does not exist: exit 2, one line, nothing written.
  std::string missing = TempDir() + "/no-such-dir/rows.ndjson";
  r = RunProgram({P2PTRACE_CLI, "export", dir, "--rows", missing});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(missing));
  // Neither output: a usage error.
  r = RunProgram({P2PTRACE_CLI, "export", dir});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--perfetto"), std::string::npos) << r.err;
}

TEST(Rows, SynthRejectsBadFleetOptions) {
  std::string dir = TempDir() + "/rows-bad";
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--host-names", "only-one"}, {"--env", "NOEQUALS"}, {"--host-names", "a,b/c"}}) {
    std::vector<std::string> argv = {P2PTRACE_CLI, "synth", "--ranks", "4", "--gpus-per-host", "2", "--events", "1",
                                     "--out", dir};
    argv.insert(argv.end(), bad.begin(), bad.end());
    RunResult r = RunProgram(argv);
    EXPECT_EQ(r.exit_code, 2) << bad[1];
    EXPECT_NE(r.err.find(bad[0]), std::string::npos) << r.err;
  }
}

}  // namespace
