// `p2ptrace explain` end to end: the built CLI on real NCCL logs from tests/fixtures/nccl-logs, its
// JSON (DESIGN.md §7) and text, and what it says about a file that is not an NCCL log.
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
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using p2ptrace::testing::WriteFile;

std::string Fixture(const std::string& prefix) {
  for (const auto& entry : fs::directory_iterator(NCCL_FIXTURE_DIR))
    if (entry.path().filename().string().starts_with(prefix) && entry.path().extension() == ".log")
      return entry.path().string();
  ADD_FAILURE() << "no fixture " << prefix;
  return "";
}

json ExplainJson(const std::vector<std::string>& files) {
  std::vector<std::string> argv{P2PTRACE_CLI, "explain", "--json"};
  argv.insert(argv.end(), files.begin(), files.end());
  RunResult r = RunProgram(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

const json* FindPair(const json& j, int src, int dst) {
  for (const json& p : j["pairs"])
    if (p["src_rank"] == src && p["dst_rank"] == dst) return &p;
  return nullptr;
}

// 2.28.9, vLLM, two processes with NCCL_P2P_DISABLE=1: SHM both ways, the refusal as a finding.
TEST(Explain, P2pDisabledLogShowsShmPairsAndTheRefusal) {
  json j = ExplainJson({Fixture("16-")});
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["nccl_version"], "2.28.9+cuda13.0");
  ASSERT_EQ(j["connections"].size(), 4u);
  const json& c = j["connections"][0];
  EXPECT_EQ(c["transport"], "SHM/direct/direct");
  EXPECT_EQ(c["class"], "shm");
  EXPECT_EQ(c["channel"], 0);
  EXPECT_EQ(c["src_rank"], 0);
  EXPECT_EQ(c["dst_rank"], 1);
  EXPECT_EQ(c["comm"], "0x38b52f50");
  EXPECT_EQ(c["comm_id"], "0xbcee012846c54cbc");
  EXPECT_TRUE(c["direction"].is_null());
  const json* p01 = FindPair(j, 0, 1);
  ASSERT_NE(p01, nullptr);
  EXPECT_EQ((*p01)["class"], "shm");
  EXPECT_EQ((*p01)["transports"], json::array({"SHM/direct/direct"}));
  EXPECT_EQ((*p01)["channels"], json::array({0, 1}));
  EXPECT_EQ((*p01)["communicator"], "0xbcee012846c54cbc");
  ASSERT_NE(FindPair(j, 1, 0), nullptr);
  // Ranks: both communicators' identities, with devices as NCCL printed them.
  bool found_rank1 = false;
  for (const json& r : j["ranks"])
    if (r["comm"] == "0x1882d0d0") {
      found_rank1 = true;
      EXPECT_EQ(r["rank"], 1);
      EXPECT_EQ(r["host"], "proxmox");
      EXPECT_EQ(r["pid"], 1495820);
      EXPECT_EQ(r["cuda_dev"], 1);
      EXPECT_EQ(r["nvml_dev"], 2);
      EXPECT_EQ(r["bus_id"], "a000");
      EXPECT_EQ(r["nranks"], 2);
    }
  EXPECT_TRUE(found_rank1);
  ASSERT_EQ(j["findings"].size(), 2u);
  for (const json& f : j["findings"]) {
    EXPECT_EQ(f["id"], "nccl-refusal");
    EXPECT_EQ(f["severity"], "warning");
    EXPECT_EQ(f["cause"], "env-p2p-disabled");
    ASSERT_EQ(f["evidence"].size(), 1u);
    EXPECT_NE(f["evidence"][0].get<std::string>().find("NCCL_P2P_DISABLE set by environment to 1"), std::string::npos);
    EXPECT_FALSE(f["fix"].get<std::string>().empty());
  }
}

// Two files at once (2.7.8 node 0 and a 2.22.3 single-process job): NET pairs on both sides, P2P
// and SHM inside the node, connIndex 1 send/recv lines.
TEST(Explain, TwoLogsTogether) {
  std::string node0 = Fixture("02-"), sendrecv = Fixture("07-");
  json j = ExplainJson({node0, sendrecv});
  EXPECT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["nccl_version"], "2.7.8+cuda10.1");
  EXPECT_EQ(j["nccl_versions"].size(), 2u);
  EXPECT_EQ(j["connections"].size(), 20u + 16u);
  size_t net = 0, p2p = 0, shm = 0, connidx1 = 0;
  for (const json& c : j["connections"]) {
    if (c["class"] == "net_socket") {
      ++net;
      EXPECT_TRUE(c["direction"] == "send" || c["direction"] == "receive") << c;
    }
    if (c["class"] == "p2p") ++p2p;
    if (c["class"] == "shm") ++shm;
    if (c["conn_index"] == 1) ++connidx1;
  }
  EXPECT_EQ(net, 8u);
  EXPECT_EQ(p2p, 8u + 16u);
  EXPECT_EQ(shm, 4u);
  EXPECT_EQ(connidx1, 16u);
  // 2.7.8 prints no commId: its pairs group under the ranks' size; 2.22.3's under the commId.
  std::set<std::string> communicators;
  for (const json& p : j["pairs"]) communicators.insert(p["communicator"].get<std::string>());
  EXPECT_EQ(communicators, (std::set<std::string>{"nranks=8", "0xf6bfaf5466e2b71f"}));
  EXPECT_EQ(j["ranks"].size(), 4u + 2u);
  EXPECT_TRUE(j["findings"].empty());
}

TEST(Explain, TextNamesPairsClassesAndRefusals) {
  RunResult r = RunProgram({P2PTRACE_CLI, "explain", Fixture("01-")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("NCCL 2.7.8+cuda11.1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 -> 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("direct shared memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Could not enable P2P between dev 1(=3d000) and dev 0(=1a000)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuda-no-peer-access"), std::string::npos) << r.out;
}

TEST(Explain, AFileWithoutNcclLinesIsAUsageError) {
  std::string dir = TempDir();
  std::string topo = dir + "/topo.txt";
  WriteFile(topo, "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV12\t0-63\nGPU1\tNV12\t X \t0-63\n");
  RunResult r = RunProgram({P2PTRACE_CLI, "explain", topo});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find(topo + ": no NCCL log line"), std::string::npos) << r.err;
  // Alongside a usable log, the same file is reported and skipped.
  r = RunProgram({P2PTRACE_CLI, "explain", "--json", topo, Fixture("34-")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(topo), std::string::npos);
  EXPECT_EQ(json::parse(r.out)["findings"].size(), 8u);
  r = RunProgram({P2PTRACE_CLI, "explain", dir + "/missing.log"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.log: cannot read it"), std::string::npos) << r.err;
}

}  // namespace
