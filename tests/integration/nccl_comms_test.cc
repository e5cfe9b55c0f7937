// Issue 13 point 2 on the simulated NCCL: a job whose processes are in six communicators (world,
// an eager split, a lazily created group, the split destroyed and made again, two created in one
// group; tests/integration/nccl_comms_workload.cc), lazy (2.22+) and at init
// (NCCL_RUNTIME_CONNECT=0). `p2ptrace explain` over the per-process NCCL_DEBUG_FILE logs must tie
// every connection line to a communicator and give each communicator both ring directions.
#include <dirent.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

using nlohmann::json;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using Env = std::map<std::string, std::optional<std::string>>;

std::vector<std::string> Logs(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.starts_with("nccl.") && name.ends_with(".log")) out.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  return out;
}

void RunAndExplain(Env env) {
  std::string dir = TempDir() + "/comms" + std::to_string(rand());
  RunProgram({"mkdir", "-p", dir});
  env["P2PSIM_NCCL_DIR"] = dir;
  env["P2PSIM_NCCL_TIMEOUT"] = "30";
  env["NCCL_DEBUG"] = "INFO";
  env["NCCL_DEBUG_FILE"] = dir + "/nccl.%h.%p.log";
  RunResult run = RunProgram({P2PSIM_BINARY, "launch", "--topology", std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json",
                              "--hosts", "node0:2", "--", NCCL_COMMS_WORKLOAD, dir},
                             env);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  std::vector<std::string> logs = Logs(dir);
  ASSERT_EQ(logs.size(), 2u);
  std::vector<std::string> argv{P2PTRACE_CLI, "explain", "--json"};
  argv.insert(argv.end(), logs.begin(), logs.end());
  RunResult r = RunProgram(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_GT(j["connections"].size(), 0u);
  for (const json& c : j["connections"]) {
    EXPECT_FALSE(c["comm"].is_null()) << c.dump();
    EXPECT_FALSE(c["communicator"].is_null()) << c.dump();
  }
  // Six communicators, each with its two ranks (one per process) and both ring directions.
  std::map<std::string, std::set<std::pair<int, int>>> pairs;
  for (const json& p : j["pairs"]) pairs[p["communicator"].is_null() ? "" : p["communicator"].get<std::string>()].insert(
      {p["src_rank"].get<int>(), p["dst_rank"].get<int>()});
  EXPECT_FALSE(pairs.count("")) << "connections tied to no communicator";
  EXPECT_EQ(pairs.size(), 6u) << j["pairs"].dump();
  for (const auto& [key, set] : pairs) EXPECT_EQ(set, (std::set<std::pair<int, int>>{{0, 1}, {1, 0}})) << key;
  std::map<std::string, int> ranks;
  for (const json& rk : j["ranks"]) ++ranks[rk["communicator"].is_null() ? "" : rk["communicator"].get<std::string>()];
  EXPECT_EQ(ranks.size(), 6u);
  for (const auto& [key, n] : ranks) EXPECT_EQ(n, 2) << key;
}

TEST(NcclComms, LazyConnectEveryCommunicatorAttributed) { RunAndExplain({}); }
TEST(NcclComms, ConnectAtInitEveryCommunicatorAttributed) { RunAndExplain({{"NCCL_RUNTIME_CONNECT", "0"}}); }

}  // namespace
