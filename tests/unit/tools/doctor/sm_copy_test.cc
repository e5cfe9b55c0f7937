// doctor --test's SM copy kernels (tools/doctor/sm_copy.h): the PTX the driver compiles at run
// time is compiled here by the toolkit's ptxas for each GPU generation it must run on.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <fstream>
#include <string>

#include "tests/support/subprocess.h"
#include "tools/doctor/sm_copy.h"

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

// Both kernels run as the pair test runs them, on one device, checked against the copy engine
// (tests/device/sm_copy_check: check.sh runs it on a real GPU). On the simulated node, which runs
// only the kernels it knows and says which.
TEST(SmCopy, OneDeviceSelfCheckPassesWhereTheKernelsRun) {
  RunResult r = RunProgram({SM_COPY_CHECK, "1"}, {{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR},
                                                  {"P2PSIM_TOPOLOGY", std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json"},
                                                  {"CUDA_VISIBLE_DEVICES", std::nullopt}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("copied 1048576 words, 0 differ"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 after the copy (want 0), 1024 after 1024 words were overwritten"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("simulated node: p2ptrace_copy_words ran, p2ptrace_count_differing ran"), std::string::npos) << r.out;
  void* sim = dlopen((std::string(P2PTRACE_SIM_LIB_DIR) + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(sim, nullptr) << dlerror();
  auto runs = reinterpret_cast<int (*)(const char*)>(dlsym(sim, "p2psim_kernel_runs"));
  ASSERT_NE(runs, nullptr);
  EXPECT_EQ(runs("p2ptrace_copy_words"), 1);
  EXPECT_EQ(runs("vectorAdd"), 0) << "a kernel the sim only accepts";
}

}  // namespace
