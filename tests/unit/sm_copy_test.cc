// doctor --test's SM copy kernels (tools/sm_copy.h, issue 37): the PTX the driver compiles at run
// time is compiled here by the toolkit's ptxas for each GPU generation it must run on.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/support/subprocess.h"
#include "tools/sm_copy.h"

namespace {

using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

TEST(SmCopy, ThePtxCompilesForAmpereHopperAndBlackwell) {
  std::string ptx = TempDir() + "/sm_copy.ptx";
  std::ofstream(ptx) << p2ptrace::cli::kSmCopyPtx;
  for (const char* arch : {"sm_80", "sm_90", "sm_100"}) {
    RunResult r = RunProgram({PTXAS, "-arch", arch, "--warning-as-error", ptx, "-o", TempDir() + "/sm_copy.cubin"});
    EXPECT_EQ(r.exit_code, 0) << arch << ": " << r.out << r.err;
  }
}

TEST(SmCopy, ThePtxHasTheTwoKernelsThePairTestLoads) {
  std::string ptx = p2ptrace::cli::kSmCopyPtx;
  EXPECT_NE(ptx.find(".visible .entry p2ptrace_copy_words("), std::string::npos);
  EXPECT_NE(ptx.find(".visible .entry p2ptrace_count_differing("), std::string::npos);
  // Stores and counts through the global space the peer's memory is mapped in.
  EXPECT_NE(ptx.find("st.global.u64"), std::string::npos);
  EXPECT_NE(ptx.find("red.global.add.u32"), std::string::npos);
}

}  // namespace
