// The log tap's filter: from NCCL's INFO-level file, exactly what the user's own NCCL_DEBUG level
// would have printed (NCCL 2.28's line formats; the version line's rules before and since 2.22).
#include "shim/nccl_output_filter.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using p2ptrace::shim::NcclOutputFilter;
using p2ptrace::shim::NcclUserLevel;

const std::string kVersion228 = "node0:11:11 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n";
const std::string kInfo = "node0:11:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n";
const std::string kWarn = "\n[2026-01-02 03:04:05] node0:11:12 [0] transport/shm.cc:81 NCCL WARN Error: failed to extend /dev/shm/nccl-x\n";
const std::string kTrace = "node0:11:11 [0] 1712.5 ncclAllReduce:12 NCCL TRACE op\n";

std::string Filter(NcclUserLevel level, const std::string& text, size_t chunk = std::string::npos) {
  NcclOutputFilter f(level);
  std::string out;
  for (size_t i = 0; i < text.size(); i += chunk == std::string::npos ? text.size() : chunk)
    f.Feed(std::string_view(text).substr(i, chunk), &out);
  f.Finish(&out);
  return out;
}

TEST(NcclOutputFilter, WarnShowsWarningsWithTheirBlankLineAndTheBareVersion) {
  std::string log = kVersion228 + kInfo + kWarn + kInfo + "continued INFO text\n" + kWarn + "continued WARN text\n";
  EXPECT_EQ(Filter(NcclUserLevel::kWarn, log),
            "NCCL version 2.28.9+cuda13.0\n" + kWarn + kWarn + "continued WARN text\n");
}

TEST(NcclOutputFilter, VersionShowsOnlyTheBareVersion) {
  EXPECT_EQ(Filter(NcclUserLevel::kVersion, kVersion228 + kInfo + kWarn + kTrace), "NCCL version 2.28.9+cuda13.0\n");
}

TEST(NcclOutputFilter, InfoPassesEverythingThrough) {
  std::string log = kVersion228 + kInfo + kWarn + kTrace + "node0:11:11 NCCL CALL ncclAllReduce(…)\n";
  EXPECT_EQ(Filter(NcclUserLevel::kInfo, log), log);
}

TEST(NcclOutputFilter, BeforeNccl222TheInfoCopyOfTheVersionIsNeverShown) {
  // NCCL < 2.22 printf()s the bare line to stdout itself and adds this copy only to a file.
  std::string old = "node0:11:11 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n";
  for (NcclUserLevel l : {NcclUserLevel::kVersion, NcclUserLevel::kWarn, NcclUserLevel::kInfo})
    EXPECT_EQ(Filter(l, old + kInfo), l == NcclUserLevel::kInfo ? kInfo : "");
}

TEST(NcclOutputFilter, AnySplitOfTheInputGivesTheSameOutput) {
  std::string log = kVersion228 + kInfo + kWarn + kInfo + kWarn + kTrace;
  for (NcclUserLevel l : {NcclUserLevel::kVersion, NcclUserLevel::kWarn, NcclUserLevel::kInfo})
    for (size_t chunk : {size_t{1}, size_t{2}, size_t{7}, size_t{64}}) EXPECT_EQ(Filter(l, log, chunk), Filter(l, log));
}

TEST(NcclOutputFilter, ALastLineWithoutNewlineAndTrailingBlanksFollowTheirMessage) {
  EXPECT_EQ(Filter(NcclUserLevel::kWarn, kWarn + "\n\ntail"), kWarn + "\n\ntail");
  EXPECT_EQ(Filter(NcclUserLevel::kWarn, kInfo + "\n\n"), "");
  EXPECT_EQ(Filter(NcclUserLevel::kWarn, kWarn.substr(0, kWarn.size() - 1)), kWarn.substr(0, kWarn.size() - 1));
}

TEST(NcclOutputFilter, LevelsAreReadAsNcclReadsThem) {
  NcclUserLevel l;
  EXPECT_TRUE(p2ptrace::shim::ParseNcclUserLevel("warn", &l));
  EXPECT_EQ(l, NcclUserLevel::kWarn);
  EXPECT_TRUE(p2ptrace::shim::ParseNcclUserLevel("TRACE", &l));
  EXPECT_EQ(l, NcclUserLevel::kInfo);
  EXPECT_FALSE(p2ptrace::shim::ParseNcclUserLevel("", &l));
  EXPECT_FALSE(p2ptrace::shim::ParseNcclUserLevel("verbose", &l));
  EXPECT_FALSE(p2ptrace::shim::ParseNcclUserLevel(nullptr, &l));
}

}  // namespace
