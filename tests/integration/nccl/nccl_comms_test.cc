// On the simulated NCCL: a job whose processes are in six communicators (world,
// an eager split, a lazily created group, the split destroyed and made again, two created in one
// group; tests/integration/programs/nccl_comms_workload.cc), lazy (2.22+) and at init
// (NCCL_RUNTIME_CONNECT=0). `p2ptrace explain` over the per-process NCCL_DEBUG_FILE logs must tie
// every connection line to a communicator and give each communicator both ring directions.
// A ring job failing on a full /dev/shm is explained as shm-too-small.
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

// examples/nccl_ring on 4 GPUs of a box whose /dev/shm holds 12 MB, P2P disabled: SHM runs out.
TEST(NcclComms, FullDevShmIsExplainedWithItsCauseAndFix) {
  std::string dir = TempDir() + "/shmfull" + std::to_string(rand());
  RunProgram({"mkdir", "-p", dir});
  std::string topo = dir + "/topo.json";
  p2ptrace::testing::WriteFile(topo, R"({"version": 1, "hosts": [{"name": "box", "boot_id": "boot-box", "dev_shm_mb": 12,
     "cpus": [{"id": "cpu0"}], "switches": [{"id": "sw0", "parent": "cpu0"}],
     "gpus": [{"index": 0, "bus_id": "0000:18:00.0", "parent": "sw0"}, {"index": 1, "bus_id": "0000:2a:00.0", "parent": "sw0"},
              {"index": 2, "bus_id": "0000:9a:00.0", "parent": "sw0"}, {"index": 3, "bus_id": "0000:ab:00.0", "parent": "sw0"}]}]})");
  Env env{{"P2PSIM_NCCL_DIR", dir}, {"P2PSIM_NCCL_TIMEOUT", "30"}, {"NCCL_DEBUG", "INFO"},
          {"NCCL_DEBUG_FILE", dir + "/nccl.%h.%p.log"}, {"NCCL_P2P_DISABLE", "1"}};
  RunResult run = RunProgram({P2PSIM_BINARY, "launch", "--topology", topo, "--hosts", "box:4", "--", NCCL_RING, dir, "4096"}, env);
  ASSERT_NE(run.exit_code, 0) << run.out << run.err;
  // The program's own output (`… failed: unhandled system error …`) goes in with the logs.
  std::string output = dir + "/output.txt";
  p2ptrace::testing::WriteFile(output, run.out + run.err);
  std::vector<std::string> argv{P2PTRACE_CLI, "explain", "--json"};
  for (const std::string& log : Logs(dir)) argv.push_back(log);
  argv.push_back(output);
  RunResult r = RunProgram(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  std::set<std::string> causes;
  const json* shm = nullptr;
  for (const json& f : j["findings"])
    if (f["id"] == "nccl-failure") {
      causes.insert(f["cause"].get<std::string>());
      if (f["cause"] == "shm-too-small") shm = &f;
    }
  ASSERT_NE(shm, nullptr) << j["findings"].dump();
  EXPECT_EQ(causes, std::set<std::string>{"shm-too-small"}) << "the return codes the WARN lines explain add nothing";
  EXPECT_NE((*shm)["evidence"][0].get<std::string>().find("failed to extend /dev/shm/nccl-"), std::string::npos)
      << (*shm)["evidence"].dump();
  EXPECT_NE((*shm)["fix"].get<std::string>().find("--shm-size"), std::string::npos);
}

}  // namespace
