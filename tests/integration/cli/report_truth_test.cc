// The report's labels are the node's, not a process's view of it.
//  - GPU identity: the same NCCL job under several CUDA_VISIBLE_DEVICES sets (which also change the
//    rank -> GPU map) names the same physical pairs, by the index nvidia-smi shows, in the JSON, the
//    text report, the HTML page and the Perfetto export; the JSON keeps each end's bus id and CUDA
//    ordinal. CUDA peer copies between renumbered devices likewise.
//  - Link names: NCCL's "P2P" is `nvlink` on an NVLink pair and `pcie_p2p` on a PCIe pair whenever
//    the node's NVML could tell, with that link's expected range; on a PCIe pair behind an ACS
//    redirect the risk is on the pair itself, not only in the job-start line.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

using nlohmann::json;
using p2ptrace::testing::Env;
using p2ptrace::testing::ReadFile;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

std::string Topology(const std::string& name) { return std::string(P2PTRACE_TOPOLOGY_DIR) + "/" + name; }

// demo-8gpu.json: GPUs 0-3 and 4-7 are two NVLink islands (NV6 each pair) on two CPUs.
const char* const kDemoBus[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};

Env SimEnv(const std::string& topology) {
  return {{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR}, {"P2PSIM_TOPOLOGY", topology}, {"P2PSIM_HOST", std::nullopt},
          {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"P2PTRACE_SAMPLE", std::nullopt}, {"NCCL_DEBUG", std::nullopt},
          {"NCCL_DEBUG_FILE", std::nullopt}, {"P2PTRACE_NCCL_TAP", std::nullopt}, {"P2PTRACE_WARN", "off"},
          {"NO_COLOR", "1"}};
}

// nccl_ring on `ranks` ranks of `host` under `p2ptrace run`; the trace directory.
std::string RingJob(const std::string& name, const std::string& topology, int ranks, const std::string& visible,
                    const std::string& host = "node0") {
  std::string dir = TempDir() + "/" + name, rendezvous = dir + "-id";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(rendezvous);
  std::filesystem::create_directories(rendezvous);
  Env env = SimEnv(topology);
  if (!visible.empty()) env["CUDA_VISIBLE_DEVICES"] = visible;
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", P2PSIM, "launch", "--topology", topology, "--hosts",
                            host + ":" + std::to_string(ranks), "--", NCCL_RING, rendezvous, "4096"},
                           env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return dir;
}

json ReportJson(const std::string& dir) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

std::vector<int> Indices(const std::string& visible) {
  std::vector<int> out;
  for (size_t at = 0; at < visible.size();) {
    size_t comma = visible.find(',', at);
    out.push_back(std::stoi(visible.substr(at, comma - at)));
    at = comma == std::string::npos ? visible.size() : comma + 1;
  }
  return out;
}

class VisibleDevices : public ::testing::TestWithParam<const char*> {};

TEST_P(VisibleDevices, NameThePhysicalGpusEverywhere) {
  const std::string visible = GetParam();
  const std::vector<int> phys = Indices(visible);
  const int n = static_cast<int>(phys.size());
  std::string name = "visible-" + visible;
  for (char& c : name)
    if (c == ',') c = '_';
  std::string dir = RingJob(name, Topology("demo-8gpu.json"), n, visible);
  json j = ReportJson(dir);
  ASSERT_TRUE(j.is_object());

  // The ring: rank r (CUDA ordinal r, which is physical GPU phys[r]) sends to rank r+1.
  std::map<std::pair<int, int>, json> pairs;
  for (const json& p : j["pairs"])
    if (p["source"] == "nccl") pairs[{p["src"]["gpu"].get<int>(), p["dst"]["gpu"].get<int>()}] = p;
  std::set<std::pair<int, int>> expected;
  for (int r = 0; r < n; ++r) {
    int a = phys[r], b = phys[(r + 1) % n];
    expected.insert({a, b});
    auto it = pairs.find({a, b});
    ASSERT_NE(it, pairs.end()) << "GPU" << a << " -> GPU" << b << " missing: " << j["pairs"].dump();
    const json& p = it->second;
    EXPECT_EQ(p["src"]["bus_id"], kDemoBus[a]);
    EXPECT_EQ(p["dst"]["bus_id"], kDemoBus[b]);
    EXPECT_EQ(p["src"]["cuda"], r) << "the CUDA ordinal is kept beside the physical index";
    EXPECT_EQ(p["dst"]["cuda"], (r + 1) % n);
    EXPECT_EQ(p["src"]["name"], "GPU" + std::to_string(a));
    EXPECT_EQ(p["src"]["rank"], r);
    // One island (NV6): NVLink; across the sockets NCCL 2.28 takes SHM (SYS beyond PXB).
    bool same_island = (a < 4) == (b < 4);
    EXPECT_EQ(p["transport"], same_island ? "nvlink" : "shm") << p.dump();
    if (same_island) {
      EXPECT_EQ(p["link"], "NV6");
      ASSERT_TRUE(p["expected_gbps"].is_object());
      EXPECT_NE(p["expected_gbps"]["basis"].get<std::string>().find("NV6"), std::string::npos) << p.dump();
    }
  }
  std::set<std::pair<int, int>> got;
  for (const auto& [k, p] : pairs) got.insert(k);
  EXPECT_EQ(got, expected);
  for (const json& rank : j["ranks"]) {
    ASSERT_TRUE(rank["rank"].is_number()) << rank.dump();
    // Each rank's process sees all n visible GPUs; its own is CUDA ordinal r.
    ASSERT_EQ(rank["gpus"].size(), static_cast<size_t>(n)) << rank.dump();
    for (int d = 0; d < n; ++d) EXPECT_EQ(rank["gpus"][d], phys[d]) << rank.dump();
  }

  // The text report, the page and the timeline name the same GPUs.
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir}, {{"NO_COLOR", "1"}});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  std::string html_path = dir + ".html", perfetto_path = dir + ".perfetto.json";
  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "html", dir, "-o", html_path}).exit_code, 0);
  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "export", dir, "--perfetto", perfetto_path}).exit_code, 0);
  std::string html = ReadFile(html_path), perfetto = ReadFile(perfetto_path);
  for (int r = 0; r < n; ++r) {
    std::string a = "GPU" + std::to_string(phys[r]), b = "GPU" + std::to_string(phys[(r + 1) % n]);
    EXPECT_NE(text.out.find("node0 " + a + " -> " + b + " "), std::string::npos) << a << "->" << b << "\n" << text.out;
    EXPECT_NE(html.find("node0 " + a + " → " + b), std::string::npos) << a << "->" << b;
    EXPECT_NE(perfetto.find("\"" + a + "\":{\"" + b + "\":"), std::string::npos) << a << "->" << b;
  }
  // No GPU the job did not see appears in the matrix and the pairs.
  size_t matrix = text.out.find("GPU pairs by path");
  ASSERT_NE(matrix, std::string::npos) << text.out;
  for (int g = 0; g < 8; ++g) {
    if (std::find(phys.begin(), phys.end(), g) != phys.end()) continue;
    EXPECT_EQ(text.out.find("GPU" + std::to_string(g) + " ", matrix), std::string::npos) << "GPU" << g << "\n" << text.out;
  }
}

// Sets that renumber the GPUs (and so change which physical GPU each rank drives): the bug showed
// `GPU1 -> GPU2` for physical GPU1 -> GPU4 under 0,1,4,5.
INSTANTIATE_TEST_SUITE_P(Demo, VisibleDevices, ::testing::Values("0,1,4,5", "5,4,1,0", "2,3,6,7", "7,0,6,1"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string s = p.param;
                           for (char& c : s)
                             if (c == ',') c = '_';
                           return "gpus_" + s;
                         });

// CUDA peer copies between renumbered devices: CUDA ordinals 0 and 1 are physical GPUs 6 and 3.
TEST(PhysicalGpus, CudaCopiesAreNamedByTheHostsIndex) {
  std::string dir = TempDir() + "/peer-copy-visible";
  std::filesystem::remove_all(dir);
  Env env = SimEnv(Topology("demo-8gpu.json"));
  env["CUDA_VISIBLE_DEVICES"] = "6,3";
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", PEER_COPY}, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = ReportJson(dir);
  std::set<std::pair<int, int>> pairs;
  for (const json& p : j["pairs"]) {
    ASSERT_EQ(p["source"], "cuda");
    int a = p["src"]["gpu"].get<int>(), b = p["dst"]["gpu"].get<int>();
    pairs.insert({a, b});
    EXPECT_EQ(p["src"]["cuda"], a == 6 ? 0 : 1) << p.dump();
    EXPECT_EQ(p["src"]["bus_id"], kDemoBus[a]);
    // Across the sockets: no P2P, every copy staged through the host.
    EXPECT_EQ(p["transport"], "host_staged") << p.dump();
  }
  EXPECT_EQ(pairs, (std::set<std::pair<int, int>>{{6, 3}, {3, 6}}));
}

// A PCIe box whose second switch redirects P2P through the root complex (ACS) under an IOMMU:
// NCCL still takes P2P between GPUs 2 and 3 (PIX), the report names it PCIe P2P from NVML, and the
// risk the job-start probe found is on that pair.
TEST(Links, PcieP2pBehindAcsCarriesTheRisk) {
  std::string dir = RingJob("acs", Topology("pcie-iommu-acs-4gpu.json"), 4, "", "iommu4");
  json j = ReportJson(dir);
  const json* pair = nullptr;
  for (const json& p : j["pairs"])
    if (p["source"] == "nccl" && p["src"]["gpu"] == 2 && p["dst"]["gpu"] == 3) pair = &p;
  ASSERT_NE(pair, nullptr) << j["pairs"].dump();
  EXPECT_EQ((*pair)["transport"], "pcie_p2p") << pair->dump();
  EXPECT_EQ((*pair)["link"], "PIX");
  std::set<std::string> causes;
  for (const json& c : (*pair)["causes"]) {
    causes.insert(c["id"].get<std::string>());
    EXPECT_EQ(c["origin"], "preflight");
    EXPECT_FALSE(c["evidence"].empty()) << c.dump();
  }
  EXPECT_TRUE(causes.count("acs-redirect") || causes.count("iommu-enabled")) << pair->dump();
  // The unaffected switch's pair has no such risk.
  for (const json& p : j["pairs"]) {
    if (p["source"] != "nccl" || p["src"]["gpu"] != 0 || p["dst"]["gpu"] != 1) continue;
    for (const json& c : p["causes"]) EXPECT_NE(c["id"], "acs-redirect") << p.dump();
  }
  std::string capture = j["ranks"][0]["capture_mode"].get<std::string>();
  EXPECT_EQ(capture.find("link types unknown"), std::string::npos) << capture;
}

}  // namespace

namespace {

const json* FindFinding(const json& report, const std::string& id) {
  for (const json& f : report["findings"])
    if (f["id"] == id) return &f;
  return nullptr;
}

bool AnyContains(const json& strings, const std::string& text) {
  for (const json& s : strings)
    if (s.get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

// A program that links libcudart dynamically but whose NCCL init failed before any CUDA runtime
// call (the real libnccl.so.2 here: no GPU, no driver): the failure is an error finding naming the
// call and its result, and the capture line reads the program's ELF instead of guessing "static".
TEST(Failures, NcclInitFailureIsAFindingNotStaticLinking) {
  std::string dir = TempDir() + "/init-failure";
  std::filesystem::remove_all(dir);
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", NCCL_REAL_PROBE},
                           {{"LD_LIBRARY_PATH", std::nullopt}, {"NCCL_DEBUG", std::nullopt}, {"P2PTRACE_WARN", "off"},
                            {"NCCL_DEBUG_FILE", std::nullopt}, {"NO_COLOR", "1"}});
  ASSERT_NE(r.out.find("ncclCommInitRank 1 "), std::string::npos) << r.out << r.err;  // the real library's answer
  json j = ReportJson(dir);
  ASSERT_EQ(j["ranks"].size(), 1u) << j.dump();
  std::string trust = j["ranks"][0]["trust"].get<std::string>();
  EXPECT_EQ(trust.find("statically linked"), std::string::npos) << trust;
  EXPECT_NE(trust.find("NCCL's init failed (ncclCommInitRank returned 1 (ncclUnhandledCudaError))"), std::string::npos)
      << trust;
  const json* f = FindFinding(j, "nccl-call-failed");
  ASSERT_NE(f, nullptr) << j["findings"].dump();
  EXPECT_EQ((*f)["severity"], "error");
  EXPECT_TRUE(AnyContains((*f)["evidence"], "ncclCommInitRank returned ncclUnhandledCudaError (1)")) << f->dump();
  EXPECT_FALSE((*f)["fix"].get<std::string>().empty());
  // NCCL's WARN (a CUDA failure: no driver here) explains it.
  const json* why = FindFinding(j, "nccl-failure");
  ASSERT_NE(why, nullptr) << j["findings"].dump();
  EXPECT_TRUE(AnyContains((*why)["evidence"], "Cuda failure")) << why->dump();
}

// /dev/shm too small for NCCL's SHM segments (Docker's default 64 MB, here 6 MB): the allreduce that
// failed is an error finding, with the rank and NCCL's result.
TEST(Failures, FullDevShmFailsAnOperationAndSaysSo) {
  json topo = json::parse(ReadFile(Topology("demo-8gpu.json")));
  topo["hosts"][0]["dev_shm_mb"] = 6;
  std::string topology = TempDir() + "/shm6.json";
  p2ptrace::testing::WriteFile(topology, topo.dump());
  std::string dir = TempDir() + "/shm-full", rendezvous = dir + "-id";
  std::filesystem::create_directories(rendezvous);
  Env env = SimEnv(topology);
  env["CUDA_VISIBLE_DEVICES"] = "3,4";  // across the sockets: SHM both ways
  env["P2PSIM_NCCL_TIMEOUT"] = "20";
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", P2PSIM, "launch", "--topology", topology, "--hosts",
                            "node0:2", "--", NCCL_RING, rendezvous, "4096"},
                           env);
  EXPECT_NE(r.exit_code, 0) << "the job failed: " << r.out;
  json j = ReportJson(dir);
  const json* f = FindFinding(j, "nccl-call-failed");
  ASSERT_NE(f, nullptr) << j["findings"].dump();
  EXPECT_EQ((*f)["severity"], "error");
  EXPECT_TRUE(AnyContains((*f)["evidence"], "returned ncclSystemError (2) on rank")) << f->dump();
  // Why, from NCCL's WARN line in the tapped log: the cause, the line, the fix.
  const json* why = FindFinding(j, "nccl-failure");
  ASSERT_NE(why, nullptr) << j["findings"].dump();
  EXPECT_EQ((*why)["cause"], "shm-too-small") << why->dump();
  EXPECT_TRUE(AnyContains((*why)["evidence"], "No space left on device")) << why->dump();
  EXPECT_NE((*why)["fix"].get<std::string>().find("shm-size"), std::string::npos) << why->dump();
  EXPECT_NE((*f)["fix"].get<std::string>().find("shm-too-small"), std::string::npos) << f->dump();
}

}  // namespace

namespace {

// Half the NVLinks of GPU0-GPU1 down: NCCL still takes P2P over NVLink, and the pair says why it
// may crawl (the job-start line is not the only place).
TEST(Links, NvlinkDownIsOnThePair) {
  json topo = json::parse(ReadFile(Topology("demo-8gpu.json")));
  for (json& l : topo["hosts"][0]["nvlinks"])
    if (l["a"] == 0 && l["b"] == 1) l["active"] = 2;
  std::string topology = TempDir() + "/nvlink-down.json";
  p2ptrace::testing::WriteFile(topology, topo.dump());
  std::string dir = RingJob("nvlink-down", topology, 2, "");
  json j = ReportJson(dir);
  const json* pair = nullptr;
  for (const json& p : j["pairs"])
    if (p["source"] == "nccl" && p["src"]["gpu"] == 0 && p["dst"]["gpu"] == 1) pair = &p;
  ASSERT_NE(pair, nullptr) << j["pairs"].dump();
  EXPECT_EQ((*pair)["transport"], "nvlink") << pair->dump();
  bool down = false;
  for (const json& c : (*pair)["causes"]) down |= c["id"] == "nvlink-down";
  EXPECT_TRUE(down) << pair->dump();
}

}  // namespace

namespace {

// A process in six communicators (world, eager split, lazy group, split destroyed and re-made, two
// made in one group; examples of PyTorch's new_group): every connection NCCL printed is on a pair
// of the report, both directions, none lost for want of its communicator.
TEST(Communicators, EveryConnectionOfEveryCommunicatorIsOnAPair) {
  std::string dir = TempDir() + "/comms", rendezvous = dir + "-id";
  std::filesystem::create_directories(rendezvous);
  Env env = SimEnv(Topology("demo-8gpu.json"));
  env["P2PSIM_NCCL_DIR"] = rendezvous;
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", P2PSIM, "launch", "--topology",
                            Topology("demo-8gpu.json"), "--hosts", "node0:2", "--", NCCL_COMMS_WORKLOAD, rendezvous},
                           env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> argv{P2PTRACE_CLI, "explain", "--json"};
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("nccl.", 0) == 0) argv.push_back(e.path().string());
  ASSERT_EQ(argv.size(), 5u) << "one tapped log per rank";
  RunResult ex = RunProgram(argv);
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  json e = json::parse(ex.out);
  size_t printed = 0;
  std::set<std::string> communicators;
  for (const json& c : e["connections"])
    if (c["dst_rank"].get<int>() >= 0) ++printed, communicators.insert(c["communicator"].get<std::string>());
  EXPECT_EQ(communicators.size(), 6u);
  json j = ReportJson(dir);
  int channels = 0;
  std::set<std::pair<int, int>> pairs;
  for (const json& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    channels += p["channels"].get<int>();
    pairs.insert({p["src"]["gpu"].get<int>(), p["dst"]["gpu"].get<int>()});
    EXPECT_EQ(p["transport"], "nvlink") << p.dump();
  }
  EXPECT_EQ(pairs, (std::set<std::pair<int, int>>{{0, 1}, {1, 0}}));
  EXPECT_EQ(static_cast<size_t>(channels), printed) << "connections lost: " << j["pairs"].dump();
  // The same from the connection records of the traces alone (the logs not copied off the node):
  // the shim ties each line to its communicator as the report would.
  for (size_t i = 3; i < argv.size(); ++i) std::filesystem::remove(argv[i]);
  json t = ReportJson(dir);
  int from_traces = 0;
  for (const json& p : t["pairs"]) {
    if (p["source"] != "nccl") continue;
    from_traces += p["channels"].get<int>();
    EXPECT_EQ(p["nccl_from"], "trace");
  }
  EXPECT_EQ(from_traces, channels) << t["pairs"].dump();
}

}  // namespace

namespace {

// One process driving all 8 GPUs from 8 threads (its job-start check ran at the first thread's
// init, one GPU): the node's links still name every NVLink pair.
TEST(Links, OneProcessOnEightGpusNamesItsNvlinks) {
  std::string dir = TempDir() + "/threads8", rendezvous = dir + "-id";
  std::filesystem::create_directories(rendezvous);
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir, "--", P2PSIM, "launch", "--topology",
                            Topology("demo-8gpu.json"), "--hosts", "node0:1", "--", NCCL_RING, "-t", "8", "-o",
                            "allreduce", "-n", "1", rendezvous},
                           SimEnv(Topology("demo-8gpu.json")));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = ReportJson(dir);
  int pairs = 0;
  for (const json& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    ++pairs;
    int a = p["src"]["gpu"].get<int>(), b = p["dst"]["gpu"].get<int>();
    EXPECT_EQ(p["transport"], (a < 4) == (b < 4) ? "nvlink" : "shm") << p.dump();
  }
  EXPECT_EQ(pairs, 8);  // the ring
}

}  // namespace
