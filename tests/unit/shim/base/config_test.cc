// The shim's settings (shim/base/config.cc): P2PTRACE_SAMPLE's and P2PTRACE_STACKS's values, the hang
// and heartbeat settings, the NCCL and job-start probe settings, and one warning for a bad one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "shim/base/config.h"

namespace {

using p2ptrace::shim::ParseStacks;

TEST(Config, StacksValues) {
  int depth = -1;
  for (const auto& [text, want] : std::vector<std::pair<std::string, int>>{
           {"0", 0}, {"off", 0}, {"1", 8}, {"on", 8}, {"2", 2}, {"16", 16}, {"32", 32}}) {
    depth = -1;
    EXPECT_TRUE(ParseStacks(text, &depth)) << text;
    EXPECT_EQ(depth, want) << text;
  }
  for (const char* bad : {"", "33", "-1", "+4", "yes", "8x", "4096", "99999999999999999999"}) {
    depth = -7;
    EXPECT_FALSE(ParseStacks(bad, &depth)) << bad;
    EXPECT_EQ(depth, -7) << bad;  // untouched
  }
}

TEST(Config, SampleValues) {
  using p2ptrace::shim::ParseSample;
  using p2ptrace::shim::SampleSpec;
  struct Case {
    std::string text;
    bool enabled;
    uint32_t first, every;
    uint64_t min_bytes;
  };
  for (const Case& c : std::vector<Case>{{"8:64:16M", true, 8, 64, 16ull << 20},
                                         {"0:1:0", true, 0, 1, 0},
                                         {"4:16:512k", true, 4, 16, 512ull << 10},
                                         {"1:1000:2G", true, 1, 1000, 2ull << 30},
                                         {"3:7:4096", true, 3, 7, 4096},
                                         {"4294967295:4294967295:1", true, UINT32_MAX, UINT32_MAX, 1},
                                         {"all", true, UINT32_MAX, 1, 0}}) {
    SampleSpec got{false, 99, 99, 99};
    ASSERT_TRUE(ParseSample(c.text, &got)) << c.text;
    EXPECT_EQ(got.enabled, c.enabled) << c.text;
    EXPECT_EQ(got.first, c.first) << c.text;
    EXPECT_EQ(got.every, c.every) << c.text;
    EXPECT_EQ(got.min_bytes, c.min_bytes) << c.text;
  }
  SampleSpec off;
  ASSERT_TRUE(ParseSample("off", &off));
  EXPECT_FALSE(off.enabled);
  // N = 0 would divide by zero; a fourth field, a sign, a unit other than K/M/G, overflow: refused.
  for (const char* bad : {"", "8:64", "8:0:16M", "8:64:16M:1", "-1:64:16M", "8:+64:16M", "8:64:16T", "8:64:-1",
                          "4294967296:64:1M", "8:4294967296:1M", "8:64:99999999999999999999", "8:64:17179869184G",
                          " 8:64:16M", "8:64:16M ", "ALL", "Off", "8::16M", "::"}) {
    SampleSpec got{true, 7, 7, 7};
    EXPECT_FALSE(ParseSample(bad, &got)) << bad;
    EXPECT_EQ(got.first, 7u) << bad;  // untouched
  }
}

std::vector<std::string> g_warnings;
void Collect(const std::string& w) { g_warnings.push_back(w); }

TEST(Config, StacksFromTheEnvironment) {
  unsetenv("P2PTRACE_STACKS");
  g_warnings.clear();
  EXPECT_EQ(p2ptrace::shim::ReadConfig(Collect).stack_depth, 0);  // unset: off
  setenv("P2PTRACE_STACKS", "12", 1);
  EXPECT_EQ(p2ptrace::shim::ReadConfig(Collect).stack_depth, 12);
  EXPECT_TRUE(g_warnings.empty());
  setenv("P2PTRACE_STACKS", "deep", 1);
  EXPECT_EQ(p2ptrace::shim::ReadConfig(Collect).stack_depth, 0);  // malformed: off…
  ASSERT_EQ(g_warnings.size(), 1u);                               // …after one warning that names it
  EXPECT_NE(g_warnings[0].find("P2PTRACE_STACKS=deep"), std::string::npos) << g_warnings[0];
  unsetenv("P2PTRACE_STACKS");
}

TEST(Config, HangSecondsAndHeartbeat) {
  double s = -1;
  for (const auto& [text, want] : std::vector<std::pair<std::string, double>>{
           {"0", 0}, {"300", 300}, {"1.5", 1.5}, {"604800", 604800}}) {
    EXPECT_TRUE(p2ptrace::shim::ParseHangSeconds(text, &s)) << text;
    EXPECT_EQ(s, want) << text;
  }
  for (const char* bad : {"", "-1", "nan", "inf", "1e9", "5s", " 5", "604801"}) {
    s = -7;
    EXPECT_FALSE(p2ptrace::shim::ParseHangSeconds(bad, &s)) << bad;
    EXPECT_EQ(s, -7) << bad;
  }
  g_warnings.clear();
  unsetenv("P2PTRACE_HANG_S");
  unsetenv("P2PTRACE_HEARTBEAT_MS");
  p2ptrace::shim::Config c = p2ptrace::shim::ReadConfig(Collect);
  EXPECT_EQ(c.hang_seconds, 300);
  EXPECT_EQ(c.heartbeat_ms, 1000u);
  setenv("P2PTRACE_HANG_S", "soon", 1);
  setenv("P2PTRACE_HEARTBEAT_MS", "60001", 1);
  c = p2ptrace::shim::ReadConfig(Collect);
  EXPECT_EQ(c.hang_seconds, 300);  // each malformed value: its default, after one warning naming it
  EXPECT_EQ(c.heartbeat_ms, 1000u);
  ASSERT_EQ(g_warnings.size(), 2u);
  EXPECT_NE(g_warnings[0].find("P2PTRACE_HANG_S=soon"), std::string::npos) << g_warnings[0];
  EXPECT_NE(g_warnings[1].find("P2PTRACE_HEARTBEAT_MS=60001"), std::string::npos) << g_warnings[1];
  setenv("P2PTRACE_HANG_S", "0", 1);
  setenv("P2PTRACE_HEARTBEAT_MS", "0", 1);
  c = p2ptrace::shim::ReadConfig(Collect);
  EXPECT_EQ(c.hang_seconds, 0);  // off
  EXPECT_EQ(c.heartbeat_ms, 0u);
  unsetenv("P2PTRACE_HANG_S");
  unsetenv("P2PTRACE_HEARTBEAT_MS");
}

// The NCCL tap, the profiler plugin and the job-start probe's waits are read here too, not where
// they are used: one place, one warning for a bad value.
TEST(Config, NcclAndProbeSettings) {
  const char* names[] = {"P2PTRACE_NCCL_LOG", "P2PTRACE_NCCL_PROFILER", "P2PTRACE_RANK_WAIT_MS",
                         "P2PTRACE_NVML_TIMEOUT_MS"};
  for (const char* n : names) unsetenv(n);
  g_warnings.clear();
  p2ptrace::shim::Config c = p2ptrace::shim::ReadConfig(Collect);
  EXPECT_TRUE(c.nccl_log);
  EXPECT_TRUE(c.nccl_profiler);
  EXPECT_EQ(c.rank_wait_ms, 2000);
  EXPECT_EQ(c.nvml_timeout_ms, 3000);
  EXPECT_TRUE(g_warnings.empty());
  setenv("P2PTRACE_NCCL_LOG", "off", 1);
  setenv("P2PTRACE_NCCL_PROFILER", "off", 1);
  setenv("P2PTRACE_RANK_WAIT_MS", "0", 1);
  setenv("P2PTRACE_NVML_TIMEOUT_MS", "20000", 1);
  c = p2ptrace::shim::ReadConfig(Collect);
  EXPECT_FALSE(c.nccl_log);
  EXPECT_FALSE(c.nccl_profiler);
  EXPECT_EQ(c.rank_wait_ms, 0);
  EXPECT_EQ(c.nvml_timeout_ms, 20000);
  EXPECT_TRUE(g_warnings.empty());
  setenv("P2PTRACE_NCCL_LOG", "verbose", 1);
  setenv("P2PTRACE_NCCL_PROFILER", "yes", 1);  // anything but off: on, as documented
  setenv("P2PTRACE_RANK_WAIT_MS", "-5", 1);
  setenv("P2PTRACE_NVML_TIMEOUT_MS", "3600001", 1);
  c = p2ptrace::shim::ReadConfig(Collect);
  EXPECT_TRUE(c.nccl_log);
  EXPECT_TRUE(c.nccl_profiler);
  EXPECT_EQ(c.rank_wait_ms, 2000);
  EXPECT_EQ(c.nvml_timeout_ms, 3000);
  ASSERT_EQ(g_warnings.size(), 3u);
  EXPECT_NE(g_warnings[0].find("P2PTRACE_NCCL_LOG=verbose is not auto or off; using auto"), std::string::npos);
  EXPECT_NE(g_warnings[1].find("P2PTRACE_RANK_WAIT_MS=-5"), std::string::npos) << g_warnings[1];
  EXPECT_NE(g_warnings[2].find("P2PTRACE_NVML_TIMEOUT_MS=3600001"), std::string::npos) << g_warnings[2];
  for (const char* n : names) unsetenv(n);
}

// The default trace directory is named after the job, whichever launcher started it, so that every
// rank of one job lands in one directory.
TEST(Config, DefaultDirNamedAfterTheJob) {
  const char* ids[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID",
                       "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "P2PTRACE_DIR"};
  for (const char* n : ids) unsetenv(n);
  auto dir = [] {
    std::string d = p2ptrace::shim::ReadConfig(Collect).dir;
    return d.substr(d.find_last_of('/') + 1);
  };
  EXPECT_EQ(dir().rfind("p2ptrace-", 0), 0u);  // no job: a timestamp
  setenv("OMPI_MCA_orte_ess_jobid", "3056467969", 1);  // Open MPI 4's mpirun
  EXPECT_EQ(dir(), "p2ptrace-3056467969");
  setenv("PMIX_NAMESPACE", "prterun-node0-4242@1", 1);  // Open MPI 5's
  EXPECT_EQ(dir(), "p2ptrace-prterun-node0-4242@1");
  setenv("SLURM_JOB_ID", "918273", 1);
  EXPECT_EQ(dir(), "p2ptrace-918273");
  for (const char* n : ids) unsetenv(n);
}

}  // namespace
