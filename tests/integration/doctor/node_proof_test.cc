// `p2ptrace doctor --test` on the simulated node: every ordered GPU pair
// measured through the CUDA runtime loaded at run time, judged against its link class and the
// probes; JSON fields, the exit status and what happens without a GPU or with a bad --gpus.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using p2ptrace::testing::Env;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::ReadFile;
using p2ptrace::testing::TempDir;
using p2ptrace::testing::WriteFile;

const std::string kDemo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";
// Four PCIe GPUs with faults (DESIGN §9 copy_faults): GPU0 -> GPU1 corrupts, GPU2 -> GPU1 never
// completes, GPU3's link trained at Gen3 of Gen4.
const std::string kFaulty = std::string(P2PTRACE_TOPOLOGY_DIR) + "/faulty-pcie-4gpu.json";

Env Node(const std::string& topology, const std::string& host, const std::string& root) {
  // The sim's shared directory of its own: NVML lists the processes on a GPU from there, and other
  // tests' jobs on the same simulated host must not make these GPUs look busy.
  return {{"P2PTRACE_SYSROOT", root}, {"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR}, {"P2PSIM_TOPOLOGY", topology},
          {"P2PSIM_HOST", host},      {"NO_COLOR", "1"},                        {"CUDA_VISIBLE_DEVICES", std::nullopt},
          {"P2PSIM_NCCL_DIR", root}};
}

TEST(DoctorTest, TheDemoNodesPairsPassOrAreExpectedAndSaySo) {
  std::string root = TempDir() + "/demo-root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kDemo, "node0", root}).exit_code, 0);
  // Sanitized, the test runs ~10x slower: two GPUs a run there (the harness gives up after 30 s of
  // silence, and TSan took 20 s for three).
#ifdef P2PTRACE_SANITIZED
  const std::vector<std::string> gpus = {"--gpus", "0,1"};
  const size_t pairs = 2, pass = 2;
  const std::string text_gpus = "0,4", text_line = "node0, 2 GPU pairs, 0 failed", grouped = "2 pairs: expected";
#else
  const std::vector<std::string> gpus;
  const size_t pairs = 56, pass = 24;
  const std::string text_gpus = "3,4,0", text_line = "node0, 6 GPU pairs, 0 failed", grouped = "4 pairs: expected";
#endif
  std::vector<std::string> cmd = {P2PTRACE_CLI, "doctor", "--test", "--json"};
  cmd.insert(cmd.end(), gpus.begin(), gpus.end());
  RunResult r = RunProgram(cmd, Node(kDemo, "node0", root));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["pairs"].size(), pairs);
  EXPECT_EQ(j["failed"], 0);
  std::map<std::string, int> verdicts;
  for (const json& p : j["pairs"]) {
    int a = p["src"]["gpu"], b = p["dst"]["gpu"];
    bool island = (a < 4) == (b < 4);  // NVLink inside each half; the halves on two sockets
    ++verdicts[p["verdict"].get<std::string>()];
    EXPECT_EQ(p["data_ok"], true) << p.dump();
    EXPECT_GT(p["staged_gbps"].get<double>(), 0) << p.dump();
    if (island) {
      EXPECT_EQ(p["verdict"], "pass") << p.dump();
      EXPECT_EQ(p["transport"], "nvlink") << p.dump();
      EXPECT_GE(p["gbps"].get<double>(), 0.8 * p["expected_gbps"]["low"].get<double>()) << p.dump();
      // Peer access beats staging through the host by far on NVLink.
      EXPECT_GT(p["gbps"].get<double>(), 3 * p["staged_gbps"].get<double>()) << p.dump();
    } else {
      EXPECT_EQ(p["verdict"], "expected") << p.dump();
      EXPECT_EQ(p["can_access"], false) << p.dump();
      EXPECT_TRUE(p["gbps"].is_null()) << p.dump();  // nothing measured with peer access: no figure
    }
  }
  EXPECT_EQ(verdicts["pass"], static_cast<int>(pass));
  EXPECT_EQ(verdicts["expected"], static_cast<int>(pairs - pass));
  // The text: a matrix and the expected pairs grouped, once.
  RunResult t = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", text_gpus}, Node(kDemo, "node0", root));
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  EXPECT_NE(t.out.find(text_line), std::string::npos) << t.out;
  EXPECT_NE(t.out.find(grouped + " — no peer access, as this node allows none for the pair"), std::string::npos) << t.out;
}

TEST(DoctorTest, NothingToTestIsSaidWithItsStatus) {
  std::string root = TempDir() + "/demo-root2";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kDemo, "node0", root}).exit_code, 0);
  // One GPU: no pair, nothing wrong.
  RunResult one = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "2"}, Node(kDemo, "node0", root));
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("1 GPU, no pairs to test"), std::string::npos) << one.out;
  // A GPU the node does not have.
  RunResult bad = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,9"}, Node(kDemo, "node0", root));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--gpus names GPU9"), std::string::npos) << bad.err;
  // No CUDA runtime to load: nothing tested, exit 2, said.
  Env none = Node(kDemo, "node0", root);
  none["LD_LIBRARY_PATH"] = TempDir() + "/empty";
  RunResult no_cuda = RunProgram({P2PTRACE_CLI, "doctor", "--test"}, none);
  EXPECT_EQ(no_cuda.exit_code, 2);
  EXPECT_NE(no_cuda.err.find("nothing tested: "), std::string::npos) << no_cuda.err;
  // --gpus without --test is a usage error.
  EXPECT_EQ(RunProgram({P2PTRACE_CLI, "doctor", "--gpus", "0,1"}, Node(kDemo, "node0", root)).exit_code, 2);
}

TEST(DoctorTest, EveryFaultFailsItsPairWithWhy) {
  std::string root = TempDir() + "/faulty-root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kFaulty, "bench4", root}).exit_code, 0);
  Env env = Node(kFaulty, "bench4", root);
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--json", "--time-limit", "0.5"}, env);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  std::map<std::pair<int, int>, json> pair;
  for (const json& p : j["pairs"]) pair[{p["src"]["gpu"].get<int>(), p["dst"]["gpu"].get<int>()}] = p;
  ASSERT_EQ(pair.size(), 12u);
  auto at = [&](int a, int b) { return pair[{a, b}]; };
  auto causes = [](const json& p) {
    std::vector<std::string> ids;
    for (const json& c : p["causes"]) ids.push_back(c["id"]);
    return ids;
  };
  // Corrupting: the data differs one way; the other way is sound and fast.
  EXPECT_EQ(at(0, 1)["verdict"], "fail");
  EXPECT_EQ(at(0, 1)["data_ok"], false);
  EXPECT_EQ(at(1, 0)["verdict"], "pass") << at(1, 0).dump();
  EXPECT_EQ(at(1, 0)["data_ok"], true);
  EXPECT_NEAR(at(1, 0)["gbps"].get<double>(), 25, 0.5);
  EXPECT_NEAR(at(1, 0)["bidir_gbps"].get<double>(), 50, 1);  // both ways at once: twice
  // Down-trained: half of Gen4's rate, judged by the Gen4 the link is built for, the cause named.
  for (auto [a, b] : {std::pair{0, 3}, std::pair{3, 0}}) {
    const json& p = at(a, b);
    EXPECT_EQ(p["verdict"], "fail") << p.dump();
    EXPECT_NEAR(p["gbps"].get<double>(), 12.5, 0.3) << p.dump();
    EXPECT_EQ(p["expected_gbps"]["basis"], "PCIe Gen4 x16") << p.dump();
    EXPECT_EQ(causes(p), std::vector<std::string>{"pcie-downtrained"}) << p.dump();
  }
  // Hanging (GPU2 -> GPU1, met first as the way back of 1 -> 2): failed with the copy named and
  // within the limit; both GPUs left alone from then on, their pairs untested, never hung on.
  EXPECT_EQ(at(1, 2)["verdict"], "fail");
  EXPECT_EQ(at(1, 2)["timed_out"], true);
  EXPECT_NE(at(1, 2)["reason"].get<std::string>().find("both ways (GPU1 <-> GPU2) did not finish"), std::string::npos)
      << at(1, 2).dump();
  for (auto [a, b] : {std::pair{1, 3}, std::pair{2, 0}, std::pair{2, 1}, std::pair{2, 3}, std::pair{3, 1}, std::pair{3, 2}}) {
    EXPECT_EQ(at(a, b)["verdict"], "untested") << a << "->" << b;
    EXPECT_TRUE(at(a, b)["gbps"].is_null());
  }
  // The pairs this node should carry whole: PCIe P2P across the switches at its rate.
  EXPECT_EQ(at(0, 2)["verdict"], "pass") << at(0, 2).dump();
  EXPECT_EQ(j["failed"], 4);
  // The text: the failures first, the causes' fixes, the untested pairs marked.
  RunResult t = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--time-limit", "0.5"}, env);
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.out.find("1 pair: fail — GPU1 did not receive what GPU0 sent (data differs)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("2 pairs: fail — 13 GB/s, below 80% of 25-25 GB/s (PCIe Gen4 x16)\n  GPU0 -> GPU3"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[pcie-downtrained] GPU3 runs PCIe Gen3 x16 of Gen4 x16\n    fix: "), std::string::npos) << t.out;
  EXPECT_LT(t.out.find("fail —"), t.out.find("untested —")) << t.out;
  EXPECT_NE(t.out.find("GPU2          ?        ?        X        ?"), std::string::npos) << t.out;
}

TEST(DoctorTest, GpusInUseAreRefusedUnlessAllowed) {
  std::string root = TempDir() + "/busy-root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kDemo, "node0", root}).exit_code, 0);
  Env env = Node(kDemo, "node0", root);
  // A job on GPUs 0 and 1 (one process, both GPUs), stopped in its first operation: it holds them.
  std::string script = std::string("setsid env P2PSIM_FAULT=stop@0:1 CUDA_VISIBLE_DEVICES=0,1 ") + NCCL_RING +
                       " -g 2 -i all -o allreduce -n 1 " + root + " >/dev/null 2>&1 & job=$!\n"
                       "for i in $(seq 100); do grep -q '^State:.*T' /proc/$job/status && break; sleep 0.1; done\n"
                       "echo job=$job\n" +
                       P2PTRACE_CLI + " doctor --test --gpus 0,1,2 >busy.out 2>busy.err; echo busy=$?\n" +
                       P2PTRACE_CLI + " doctor --test --gpus 2,3 >idle.out 2>&1; echo idle=$?\n" +
                       P2PTRACE_CLI + " doctor --test --gpus 0,1 --allow-busy --json >allowed.json 2>&1; echo allowed=$?\n" +
                       "kill -9 $job; wait $job 2>/dev/null\n" +
                       P2PTRACE_CLI + " doctor --test --gpus 0,1 --json >after.json 2>&1; echo after=$?\n";
  RunResult r = RunProgram({"sh", "-c", "cd " + root + " || exit 1\n" + script}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string job = r.out.substr(r.out.find("job=") + 4);
  job = job.substr(0, job.find('\n'));
  EXPECT_NE(r.out.find("busy=2"), std::string::npos) << r.out;
  std::string busy = ReadFile(root + "/busy.err");
  EXPECT_NE(busy.find("refused: other processes use the GPUs (GPU0: pid " + job + " (nccl_ring); GPU1: pid " + job +
                      " (nccl_ring))"),
            std::string::npos)
      << busy;
  EXPECT_NE(busy.find("--allow-busy"), std::string::npos) << busy;
  EXPECT_EQ(ReadFile(root + "/busy.out"), "") << "nothing measured";
  EXPECT_NE(r.out.find("idle=0"), std::string::npos) << r.out << ReadFile(root + "/idle.out");
  EXPECT_NE(r.out.find("allowed=0"), std::string::npos) << r.out;
  json allowed = json::parse(ReadFile(root + "/allowed.json"), nullptr, false);
  ASSERT_FALSE(allowed.is_discarded()) << ReadFile(root + "/allowed.json");
  EXPECT_EQ(allowed["busy"].size(), 2u) << allowed["busy"];
  EXPECT_EQ(allowed["pairs"].size(), 2u);
  // Its process gone (killed: nothing it could tidy), the GPUs are free again.
  EXPECT_NE(r.out.find("after=0"), std::string::npos) << r.out;
  json after = json::parse(ReadFile(root + "/after.json"), nullptr, false);
  ASSERT_FALSE(after.is_discarded());
  EXPECT_TRUE(after["busy"].empty()) << after["busy"];
  EXPECT_EQ(after["busy_checked"], true);
}

// Without NVML nothing says who else uses the GPUs, so the test is refused as it
// is for GPUs NVML shows in use; --allow-busy tests them and says what could not be checked.
TEST(DoctorTest, WithoutNvmlTheTestIsRefusedUnlessAllowed) {
  std::string root = TempDir() + "/no-nvml-root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kDemo, "node0", root}).exit_code, 0);
  // The simulated node's libraries but NVML.
  std::string libs = TempDir() + "/no-nvml-libs";
  fs::create_directories(libs);
  for (const auto& e : fs::directory_iterator(P2PTRACE_SIM_LIB_DIR))
    if (e.path().filename().string().find("nvidia-ml") == std::string::npos)
      fs::create_symlink(e.path(), libs + "/" + e.path().filename().string());
  Env env = Node(kDemo, "node0", root);
  env["LD_LIBRARY_PATH"] = libs;
  RunResult refused = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1", "--json"}, env);
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_TRUE(refused.out.empty()) << refused.out;
  EXPECT_NE(refused.err.find("refused: which processes use GPU0, GPU1 cannot be told (NVML missing"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--allow-busy"), std::string::npos) << refused.err;
  RunResult allowed = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1", "--allow-busy", "--json"}, env);
  ASSERT_EQ(allowed.exit_code, 0) << allowed.out << allowed.err;
  json j = json::parse(allowed.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << allowed.out;
  EXPECT_EQ(j["busy_checked"], false);
  EXPECT_EQ(j["pairs"].size(), 2u);
  RunResult text = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1", "--allow-busy"}, env);
  EXPECT_NE(text.out.find("note: tested with --allow-busy where NVML could not say"), std::string::npos) << text.out;
}

// Every wait of the test is bounded by --time-limit, a CUDA call that never
// returns included (a free or a synchronous call stuck in the driver cannot be interrupted): the
// test ends within the limit, the pair failed with the call named, the pairs after it untested.
TEST(DoctorTest, ACudaCallThatNeverReturnsEndsTheTestWithinTheLimit) {
  std::string root = TempDir() + "/stuck-root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kDemo, "node0", root}).exit_code, 0);
  for (std::string stuck : {"cudaFree", "cudaDeviceEnablePeerAccess@2", "cudaMemsetAsync"}) {
    SCOPED_TRACE(stuck);
    Env env = Node(kDemo, "node0", root);
    env["P2PSIM_CUDA_STUCK"] = stuck;
    auto t0 = std::chrono::steady_clock::now();
    RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1,2", "--time-limit", "1", "--json"}, env);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_LT(took, 20) << "the limit is 1 s";  // generous: sanitized builds run the copies slowly
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_EQ(j["pairs"].size(), 6u) << r.out;
    std::string call = stuck.substr(0, stuck.find('@'));
    int failed = 0, untested = 0;
    for (const json& p : j["pairs"]) {
      if (p["verdict"] == "fail") {
        ++failed;
        EXPECT_EQ(p["timed_out"], true) << p.dump();
        EXPECT_NE(p["reason"].get<std::string>().find(call + " (testing GPU"), std::string::npos) << p.dump();
      } else if (p["verdict"] == "untested") {
        ++untested;
      }
    }
    EXPECT_EQ(failed, 1) << r.out;
    EXPECT_GE(untested, 4) << r.out;
  }
}

// A node whose copy-engine copies arrive but whose GPUs' own stores into a peer are lost (nccl#2335:
// what NCCL's kernels write never lands) fails the pair, checked on the destination; the other
// direction's stores arrive and are counted too. The same under CUDA 11's runtime, whose
// cudaSetDevice binds the device's context only at the next runtime call (the kernels' module must
// still be loaded, and launched, in the right device's context). Two GPUs a run: sanitized builds
// run it several times slower, and the harness gives up after 30 s of silence.
TEST(DoctorTest, KernelStoresThatNeverLandFailThePairWhereCopiesPass) {
  std::string root = TempDir() + "/sm-lost-root";
  json topo = json::parse(p2ptrace::testing::ReadFile(kDemo));
  topo["copy_faults"] = json::array({{{"host", "node0"}, {"a", 0}, {"b", 1}, {"fault", "sm-lost"}}});
  std::string topo_file = TempDir() + "/sm-lost.json";
  std::ofstream(topo_file) << topo.dump(1);
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", topo_file, "node0", root}).exit_code, 0);
  for (const char* set_device : {"", "lazy"}) {
    SCOPED_TRACE(std::string("P2PSIM_CUDART_SET_DEVICE=") + set_device);
    Env env = Node(topo_file, "node0", root);
    env["P2PSIM_CUDART_SET_DEVICE"] = set_device;
    RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1", "--json"}, env);
    ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_EQ(j["pairs"].size(), 2u);
    for (const json& p : j["pairs"]) {
      bool lost = p["src"]["gpu"] == 0 && p["dst"]["gpu"] == 1;
      ASSERT_TRUE(p["sm_copy"].is_object()) << p.dump();
      uint64_t words = p["sm_copy"]["words"];
      EXPECT_EQ(words, 2u << 20) << p.dump();  // half of the 32 MiB buffer, in 8-byte words
      EXPECT_EQ(p["sm_copy"]["differing"], lost ? words : 0u) << p.dump();
      EXPECT_EQ(p["data_ok"], true) << "the copy engine's copy arrives: " << p.dump();
      EXPECT_EQ(p["verdict"], lost ? "fail" : "pass") << p.dump();
      if (lost) {
        ASSERT_FALSE(p["causes"].empty()) << p.dump();
        EXPECT_EQ(p["causes"][0]["id"], "p2p-stores-lost") << p.dump();
        EXPECT_NE(p["reason"].get<std::string>().find("kernel stored through peer access"), std::string::npos) << p.dump();
      }
    }
  }
  RunResult text = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1"}, Node(topo_file, "node0", root));
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.out.find("NCCL_P2P_USE_CUDA_MEMCPY=1"), std::string::npos) << text.out;
}

TEST(DoctorTest, ABaselineFromAHealthyTwinNamesEachRegressionAndRowsCarryIt) {
  // The same node healthy: no faults, GPU3's link at its Gen4.
  json healthy = json::parse(ReadFile(kFaulty));
  healthy.erase("copy_faults");
  healthy["hosts"][0]["gpus"][3]["pcie"]["gen"] = 4;
  std::string dir = TempDir() + "/baseline";
  std::filesystem::create_directories(dir);
  std::string twin = dir + "/healthy.json";
  WriteFile(twin, healthy.dump());
  std::string root_twin = dir + "/twin-root", root = dir + "/root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", twin, "bench4", root_twin}).exit_code, 0);
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kFaulty, "bench4", root}).exit_code, 0);
  // GPUs 0, 1, 3: the corrupting pair and the down-trained link, not the pair that hangs.
  RunResult good = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1,3", "--json"}, Node(twin, "bench4", root_twin));
  ASSERT_EQ(good.exit_code, 0) << good.out << good.err;
  WriteFile(dir + "/good.json", good.out);
  Env env = Node(kFaulty, "bench4", root);
  env["SLURM_JOB_ID"] = "4242";  // a SLURM prolog: the rows name the job about to run
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1,3", "--baseline", dir + "/good.json",
                            "--rows", dir + "/rows.ndjson"},
                           env);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("bench4, 6 GPU pairs, 5 failed, 4 slower than the baseline\n"), std::string::npos) << r.out;
  // Every pair through GPU3's link at half its rate; the corrupting pair is as fast as its baseline.
  for (const char* pair : {"GPU0 -> GPU3", "GPU1 -> GPU3", "GPU3 -> GPU0", "GPU3 -> GPU1"})
    EXPECT_NE(r.out.find(std::string(pair) + ": one way 13 GB/s, 50% below the baseline's 25 GB/s"), std::string::npos) << r.out;
  // The rows: one per pair, kind "test", the job from the environment, the regression on its pair.
  std::vector<json> rows;
  std::istringstream lines(ReadFile(dir + "/rows.ndjson"));
  for (std::string line; std::getline(lines, line);) rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 6u);
  int regressed = 0;
  for (const json& row : rows) {
    EXPECT_EQ(row["schema"], "p2ptrace.rows/1");
    EXPECT_EQ(row["kind"], "test");
    EXPECT_EQ(row["job_id"], "4242");
    EXPECT_EQ(row["scheduler"], "slurm");
    EXPECT_EQ(row["src_model"], "NVIDIA A100 80GB PCIe");
    if (!row["regression"].is_null()) ++regressed;
    if (row["src_gpu"] == 0 && row["dst_gpu"] == 1) {
      EXPECT_EQ(row["verdict"], "fail");
      EXPECT_EQ(row["data_ok"], false);
      EXPECT_TRUE(row["regression"].is_null()) << "as fast as the baseline: its failure is the data";
    }
    if (row["src_gpu"] == 0 && row["dst_gpu"] == 3) {
      EXPECT_EQ(row["cause"], "pcie-downtrained");
      EXPECT_NEAR(row["gbps"].get<double>(), 12.5, 0.3);
    }
  }
  EXPECT_EQ(regressed, 4);
  // A baseline that is no test output, and one from another kind of node: refused before testing.
  WriteFile(dir + "/bad.json", "{\"pairs\": 3}");
  RunResult bad = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--baseline", dir + "/bad.json"}, env);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("not the output of `p2ptrace doctor --test --json`"), std::string::npos) << bad.err;
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kDemo, "node0", dir + "/demo-root"}).exit_code, 0);
  RunResult other = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--baseline", dir + "/good.json"},
                               Node(kDemo, "node0", dir + "/demo-root"));
  EXPECT_EQ(other.exit_code, 2) << other.out;
  EXPECT_NE(other.err.find("is of another kind of node: its GPU0 is NVIDIA A100 80GB PCIe, this node's is NVIDIA H100 80GB HBM3"),
            std::string::npos)
      << other.err;
  EXPECT_EQ(RunProgram({P2PTRACE_CLI, "doctor", "--baseline", dir + "/good.json"}, env).exit_code, 2) << "needs --test";
}

TEST(DoctorTest, NcclsOwnChoiceIsShownBesideThePrediction) {
  std::string root = TempDir() + "/nccl-root";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", kDemo, "node0", root}).exit_code, 0);
  Env env = Node(kDemo, "node0", root);
  // GPUs 0 and 1 share NVLink, GPU4 is across the sockets: NCCL connects P2P and SHM.
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1,4", "--nccl", "--json"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json n = json::parse(r.out)["nccl"];
  ASSERT_TRUE(n.is_object()) << r.out;
  EXPECT_TRUE(n["error"].is_null()) << n["error"];
  EXPECT_EQ(n["version"].get<std::string>().rfind("2.28.9", 0), 0u) << n["version"];
  ASSERT_EQ(n["pairs"].size(), 6u);
  for (const json& p : n["pairs"]) {
    bool nvlink = p["src"]["gpu"] != 4 && p["dst"]["gpu"] != 4;
    EXPECT_EQ(p["transport"], nvlink ? "p2p" : "shm") << p.dump();
    EXPECT_EQ(p["predicted"], nvlink ? "nvlink" : "shm") << p.dump();
    EXPECT_EQ(p["agrees"], true) << p.dump();
    ASSERT_FALSE(p["nccl_transports"].empty());
    EXPECT_EQ(p["nccl_transports"][0].get<std::string>().rfind(nvlink ? "P2P/" : "SHM/", 0), 0u) << p.dump();
  }
  // The node's environment is NCCL's: with P2P off every pair is SHM, as predicted, and NCCL's echo shown.
  env["NCCL_P2P_DISABLE"] = "1";
  RunResult off = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1", "--nccl"}, env);
  ASSERT_EQ(off.exit_code, 0) << off.out << off.err;
  EXPECT_NE(off.out.find("GPU0             X         shm\n"), std::string::npos) << off.out;
  EXPECT_NE(off.out.find("  every pair as predicted\n  NCCL read: NCCL_P2P_DISABLE=1\n"), std::string::npos) << off.out;
  env.erase("NCCL_P2P_DISABLE");
  // A rank that dies in its first operation: NCCL's check fails the node, naming what it saw.
  env["P2PSIM_FAULT"] = "die@1:1";
  env["P2PSIM_NCCL_TIMEOUT"] = "3";
  RunResult die = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--gpus", "0,1", "--nccl", "--time-limit", "1"}, env);
  EXPECT_EQ(die.exit_code, 1) << die.out << die.err;
  EXPECT_NE(die.out.find("  failed: "), std::string::npos) << die.out;
  env.erase("P2PSIM_FAULT");
}

}  // namespace
