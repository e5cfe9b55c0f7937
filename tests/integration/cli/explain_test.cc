// `p2ptrace explain` end to end: the built CLI on real NCCL logs from tests/fixtures/nccl-logs, its
// JSON (DESIGN.md §7) and text, and what it says about a file that is not an NCCL log.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>
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

std::string Made(const std::string& name) { return std::string(NCCL_MADE_FIXTURE_DIR) + "/" + name; }

// What people paste from old clusters. Each release era's connection form, from real
// public logs (their sidecars name the source), gives its pairs with the right class: 2.3's `Ring`
// with cudaDev, 2.4's nvmlDev and tagged NET lines, 2.5's bus ids, 2.7's `direct shared memory`,
// 2.16's `SHM/direct/direct`. (2.2's prefix without `NCCL`: nccl_log_test's ReleasesBeforeTwoThree….)
TEST(Explain, ConnectionFormsOfOldReleases) {
  struct Case {
    const char* fixture;
    int src, dst;
    const char* cls;
    const char* transport;
  };
  for (const Case& c : {Case{"40-", 3, 2, "p2p", "P2P/IPC"}, Case{"41-", 0, 2, "p2p", "P2P/IPC"},
                        Case{"41-", 6, 2, "net_ib", "NET/IB/0"}, Case{"42-", 0, 7, "shm", "direct shared memory"},
                        Case{"01-", 2, 3, "shm", "direct shared memory"}, Case{"43-", 0, 1, "shm", "SHM/direct/direct"}}) {
    json j = ExplainJson({Fixture(c.fixture)});
    const json* p = FindPair(j, c.src, c.dst);
    ASSERT_NE(p, nullptr) << c.fixture << " " << c.src << "->" << c.dst << "\n" << j["pairs"].dump();
    EXPECT_EQ((*p)["class"], c.cls) << c.fixture;
    EXPECT_NE(std::find((*p)["transports"].begin(), (*p)["transports"].end(), c.transport), (*p)["transports"].end())
        << c.fixture << " " << p->dump();
  }
}

// A torchrun job whose processes are each in three communicators (the world, an
// eager ncclCommSplit of it, a group initialized lazily), connected lazily at their first
// collectives: every connection line is tied to a communicator, and each communicator has both
// directions between the two GPUs.
TEST(Explain, EveryConnectionOfEveryCommunicatorIsAttributed) {
  json j = ExplainJson({Made("torchrun-world-split-lazy-v2.28.9.log")});
  ASSERT_EQ(j["connections"].size(), 16u);
  for (const json& c : j["connections"]) {
    EXPECT_FALSE(c["comm"].is_null()) << c.dump();
    EXPECT_FALSE(c["communicator"].is_null()) << c.dump();
  }
  std::map<std::string, std::set<std::pair<int, int>>> pairs;
  for (const json& p : j["pairs"]) {
    ASSERT_FALSE(p["communicator"].is_null()) << p.dump();
    pairs[p["communicator"].get<std::string>()].insert({p["src_rank"].get<int>(), p["dst_rank"].get<int>()});
  }
  ASSERT_EQ(pairs.size(), 3u);
  for (const auto& [key, set] : pairs)
    EXPECT_EQ(set, (std::set<std::pair<int, int>>{{0, 1}, {1, 0}})) << key;
  // The split's ranks (two processes) are one communicator, whose parent is the world.
  std::set<std::string> split_keys;
  for (const json& r : j["ranks"])
    if (r["parent_communicator"] == "0x8e3c5b1f9a7d2640") split_keys.insert(r["communicator"].get<std::string>());
  ASSERT_EQ(split_keys.size(), 1u);
  EXPECT_TRUE(pairs.count(*split_keys.begin()));
  RunResult text = RunProgram({P2PTRACE_CLI, "explain", Made("torchrun-world-split-lazy-v2.28.9.log")});
  EXPECT_EQ(text.out.find("does not tie to a communicator"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ncclCommSplit of 0x8e3c5b1f9a7d2640 (split 1), color 0"), std::string::npos) << text.out;
}

// The WARN lines of a full /dev/shm become a finding with its cause, the lines
// as evidence and the fix; the failed return codes they explain add none of their own.
TEST(Explain, NcclFailureLinesBecomeFindingsWithCauseEvidenceAndFix) {
  json j = ExplainJson({Made("dev-shm-full-v2.28.9.log")});
  const json* shm = nullptr;
  for (const json& f : j["findings"])
    if (f["id"] == "nccl-failure") {
      EXPECT_EQ(shm, nullptr) << "one finding per cause: " << f.dump();
      shm = &f;
    }
  ASSERT_NE(shm, nullptr) << j["findings"].dump();
  EXPECT_EQ((*shm)["cause"], "shm-too-small");
  EXPECT_EQ((*shm)["severity"], "error");
  ASSERT_EQ((*shm)["evidence"].size(), 2u);
  EXPECT_NE((*shm)["evidence"][0].get<std::string>().find(":9 "), std::string::npos) << (*shm)["evidence"][0];
  EXPECT_NE((*shm)["evidence"][0].get<std::string>().find("No space left on device (28)"), std::string::npos);
  std::string fix = (*shm)["fix"];
  EXPECT_NE(fix.find("--shm-size"), std::string::npos) << fix;
  EXPECT_NE(fix.find("--ipc=host"), std::string::npos) << fix;
  EXPECT_NE(fix.find("NCCL_SHM_DISABLE"), std::string::npos) << fix;
  ASSERT_EQ(j["failures"].size(), 1u);
  RunResult text = RunProgram({P2PTRACE_CLI, "explain", Made("dev-shm-full-v2.28.9.log")});
  EXPECT_NE(text.out.find("[shm-too-small] /dev/shm is full"), std::string::npos) << text.out;
}

// A paste without host:pid:tid, numbered by hand, with the user's notes after
// the transport: accepted, tied where its Init lines allow, the notes kept out of the transport.
TEST(Explain, PastesAsPeoplePasteThem) {
  const std::string file = Made("pasted-numbered-with-notes.log");
  json j = ExplainJson({file});
  ASSERT_EQ(j["connections"].size(), 3u);
  const json& c = j["connections"];
  EXPECT_EQ(c[0]["line"], 5);
  EXPECT_EQ(c[0]["transport"], "P2P/CUMEM");
  EXPECT_EQ(c[0]["note"], "(all 256 connect lines are P2P/CUMEM)");
  EXPECT_EQ(c[0]["comm"], "0x55d0c1a2b3c0");
  EXPECT_EQ(c[1]["comm"], "0x55d0c1a2b3c0");
  EXPECT_TRUE(c[1]["note"].is_null());
  EXPECT_EQ(c[2]["transport"], "SHM/direct/direct");
  EXPECT_EQ(c[2]["class"], "shm");
  EXPECT_TRUE(c[2]["comm"].is_null());  // rank 1's Init line is not in the paste
  for (const json& p : j["pairs"])
    for (const json& t : p["transports"]) EXPECT_EQ(t.get<std::string>().find(' '), std::string::npos) << t;
  EXPECT_EQ(j["nccl_version"], "2.28.9+cuda12.9");
  RunResult text = RunProgram({P2PTRACE_CLI, "explain", file});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("no host:pid:tid prefix"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("left out of the transport"), std::string::npos) << text.out;
  // The note appears once, in the notice, not in the pair's transports.
  size_t first = text.out.find("all 256 connect lines");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(text.out.find("all 256 connect lines", first + 1), std::string::npos) << text.out;
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
  // 2.7.8's node went over TCP sockets because libibverbs was missing: its own line says so.
  ASSERT_EQ(j["findings"].size(), 1u) << j["findings"];
  const json& f = j["findings"][0];
  EXPECT_EQ(f["id"], "nccl-net");
  EXPECT_EQ(f["cause"], "net-no-verbs");
  EXPECT_NE(f["title"].get<std::string>().find("tesla-105: TCP sockets"), std::string::npos) << f;
  EXPECT_NE(f["evidence"][0].get<std::string>().find(":4: Failed to open libibverbs.so"), std::string::npos) << f;
  ASSERT_EQ(j["net"].size(), 1u);
  EXPECT_EQ(j["net"][0]["settled"], true);
  // 2.7.8's four processes each print `NET/Socket : Using [0]eno2:192.168.1.105<0>`; 2.22.3's one
  // process `NET/IB : Using [0]mlx5_0:1/IB` and three more HCAs.
  ASSERT_EQ(j["net_devices"].size(), 8u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(j["net_devices"][i]["interface"], "eno2") << j["net_devices"][i];
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(j["net_devices"][i]["name"], "mlx5_" + std::to_string(i - 4));
}

// Multi-node logs: every NET connection read apart (NIC, PXN relay, GPUDirect RDMA), and each host's
// degraded connections with the cause its own lines show, or the plain word that they show none.
TEST(Explain, NetConnectionsAndWhyTheyTookTheHostPath) {
  json pxn = ExplainJson({Fixture("52-")});  // 2.27.5 RoCE, PXN through rank 8, GDR everywhere
  size_t relayed = 0;
  for (const json& c : pxn["connections"]) {
    if (c["net"].is_null()) continue;
    EXPECT_TRUE(c["net"]["gdr"].get<bool>()) << c;
    relayed += c["net"]["proxy_rank"] == 8;
  }
  EXPECT_EQ(relayed, 4u);  // the sends of rank 9's channels through rank 8's NIC
  EXPECT_TRUE(pxn["net"].empty());

  json module = ExplainJson({Fixture("47-")});  // `(no module)` printed on one of the two hosts
  ASSERT_EQ(module["net"].size(), 2u) << module["net"];
  EXPECT_EQ(module["net"][0]["cause"], "gdr-no-module");
  EXPECT_EQ(module["net"][1]["cause"], "gdr-off-unexplained");
  EXPECT_EQ(module["net"][1]["settled"], false);
  bool doctor_named = false;
  for (const json& f : module["findings"])
    for (const json& ev : f["evidence"])
      doctor_named |= ev.get<std::string>() == "the log does not say why: run `p2ptrace doctor` on 6a5a91752e39";
  EXPECT_TRUE(doctor_named) << module["findings"];

  json distance = ExplainJson({Fixture("41-")});  // 2.4: `distance 3 >= 2`
  ASSERT_FALSE(distance["net"].empty());
  for (const json& n : distance["net"]) EXPECT_EQ(n["cause"], "gdr-distance") << n;
  for (const json& f : distance["findings"]) EXPECT_NE(f["cause"], "no-gdr") << "the refusal line is the net finding's evidence";

  RunResult text = RunProgram({P2PTRACE_CLI, "explain", Fixture("45-"), Fixture("46-")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("[net-no-rdma-device] ip-172-31-1-93: TCP sockets instead of InfiniBand/RoCE"),
            std::string::npos) << text.out;
  EXPECT_NE(text.out.find("[net-socket-unexplained] ip-172-31-12-210: TCP sockets"), std::string::npos) << text.out;
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

TEST(Explain, AFileOfNeitherKindIsAUsageError) {
  std::string dir = TempDir();
  std::string other = dir + "/notes.txt";
  WriteFile(other, "GPU0 and GPU1 are slow\nplease help\n");
  RunResult r = RunProgram({P2PTRACE_CLI, "explain", other});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find(other + ": neither an NCCL log"), std::string::npos) << r.err;
  // Alongside a usable log, the same file is reported and skipped.
  r = RunProgram({P2PTRACE_CLI, "explain", "--json", other, Fixture("34-")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(other), std::string::npos);
  EXPECT_EQ(json::parse(r.out)["findings"].size(), 8u);
  r = RunProgram({P2PTRACE_CLI, "explain", dir + "/missing.log"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.log: cannot read it"), std::string::npos) << r.err;
}

// --- nvidia-smi topo -m -------------------------------------------------------------------------

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const json* Predicted(const json& j, int a, int b) {
  for (const json& p : j["predicted"])
    if (p["a"] == std::min(a, b) && p["b"] == std::max(a, b)) return &p;
  return nullptr;
}

// case.json's class words ("p2p (inferred…)", "shm", "net") against explain's classes.
std::string Kind(const std::string& cls) {
  if (cls == "nvlink" || cls == "pcie_p2p" || cls == "p2p") return "p2p";
  if (cls.starts_with("net")) return "net";
  return cls;
}

TEST(ExplainTopo, TopologyAloneGivesTheMatrixAndAPredictionPerPair) {
  std::string topo = std::string(TOPO_FIXTURE_DIR) + "/18-nccl1608-3xh100nvl-nv12-sys-p2pdisable-plus-level-nvl/topo.txt";
  json j = ExplainJson({topo});
  EXPECT_EQ(j["topology"]["gpus"], json::array({0, 1, 2}));
  EXPECT_EQ(j["topology"]["matrix"][0][1], "NV12");
  EXPECT_EQ(j["topology"]["affinity"][2]["cpu"], "16-31,48-63");
  ASSERT_EQ(j["predicted"].size(), 3u);
  EXPECT_EQ((*Predicted(j, 0, 1))["class"], "nvlink");
  EXPECT_EQ((*Predicted(j, 0, 1))["link"], "NV12");
  const json& sys = *Predicted(j, 0, 2);
  EXPECT_EQ(sys["class"], "shm");  // newest rules, CPU not singled out: PXB
  EXPECT_EQ(sys["causes"][0]["id"], "topology-beyond-p2p-level");
  EXPECT_FALSE(sys["causes"][0]["fix"].get<std::string>().empty());
  // Unknown CPU vendor and NCCL version are stated, and where they change the answer, said so.
  EXPECT_EQ(j["assumptions"].size(), 2u);
  bool amd = false;
  for (const json& d : sys["depends_on"]) amd |= d["assumption"] == "CPU vendor amd" && d["class"] == "pcie_p2p";
  EXPECT_FALSE(amd);  // 3 GPUs: AMD gets SYS only with at most 2
  RunResult r = RunProgram({P2PTRACE_CLI, "explain", topo, "--env", "NCCL_P2P_DISABLE=1", "--env", "NCCL_P2P_LEVEL=NVL",
                            "--gpus", "0,1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU0-GPU1    NV12  shm        instead of nvlink"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[env-p2p-disabled]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NCCL_P2P_LEVEL=NVL is ignored"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("GPU0-GPU2"), std::string::npos) << r.out;  // not in the communicator
  EXPECT_NE(r.out.find("NCCL version not given"), std::string::npos) << r.out;
}

TEST(ExplainTopo, BadOptionsAreUsageErrors) {
  std::string topo = std::string(TOPO_FIXTURE_DIR) + "/10-nccl2079-2x-rtx5880ada-node-amd-docker-acs-hang/topo.txt";
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--env", "NCCL_P2P_DISABLE"}, {"--nccl-version", "latest"}, {"--cpu-vendor", "sparc"}, {"--gpus", "0,7"}}) {
    std::vector<std::string> argv{P2PTRACE_CLI, "explain", topo};
    argv.insert(argv.end(), bad.begin(), bad.end());
    RunResult r = RunProgram(argv);
    EXPECT_EQ(r.exit_code, 2) << bad[0];
    EXPECT_NE(r.err.find(bad[0]), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

// Topology and NCCL's log together: 2.7.8 on a Broadwell-class Xeon, every logged pair as predicted.
TEST(ExplainTopo, PredictionAgreesWithWhatNcclLogged) {
  std::string dir = std::string(TOPO_FIXTURE_DIR) + "/17-nccl644-8gpu-pix-phb-sys-nccl278-p2p-vs-shm";
  json j = ExplainJson({dir + "/topo.txt", dir + "/nccl.log", "--nccl-version", "2.7.8", "--cpu-vendor", "intel-bdw"});
  EXPECT_EQ(j["nccl_rules"], "2.7.8");
  ASSERT_GE(j["comparison"].size(), 10u);
  for (const json& c : j["comparison"]) EXPECT_TRUE(c["agrees"].get<bool>()) << c;
  // Without the CPU generation the PHB pairs are predicted P2P, and the log disagrees.
  json k = ExplainJson({dir + "/topo.txt", dir + "/nccl.log", "--nccl-version", "2.7.8", "--cpu-vendor", "intel"});
  size_t disagree = 0;
  for (const json& c : k["comparison"]) disagree += !c["agrees"].get<bool>();
  EXPECT_GT(disagree, 0u);
  bool mismatch = false;
  for (const json& f : k["findings"]) mismatch |= f["id"] == "prediction-mismatch";
  EXPECT_TRUE(mismatch);
}

// Every fixture: the class predicted for each pair of its case.json is the class NCCL used there
// (run conditions as explain flags in expect.json; a known mismatch must stay one).
class TopoCase : public ::testing::TestWithParam<std::string> {};

TEST_P(TopoCase, PredictsWhatNcclDid) {
  fs::path dir = fs::path(TOPO_FIXTURE_DIR) / GetParam();
  json c = json::parse(Slurp(dir / "case.json"));
  json x = json::parse(Slurp(dir / "expect.json"))["explain"];
  if (x.contains("skip")) GTEST_SKIP() << x["skip"];
  size_t checked = 0, index = 0;
  for (const json& p : c["expected"]["pairs"]) {
    int a = p["a"], b = p["b"];
    std::string key = std::to_string(a) + "-" + std::to_string(b);
    std::string run = p.value("run", "");
    if (x.contains("pair_runs") && x["pair_runs"].contains(key + "#" + std::to_string(index))) run = x["pair_runs"][key + "#" + std::to_string(index)];
    ++index;
    std::string cls = p["class"].get<std::string>();
    std::string want = cls.substr(0, cls.find_first_of(" :("));
    if (want == "unknown" || x.value("skip_pairs", json::object()).contains(key)) continue;
    ASSERT_TRUE(x["runs"].contains(run)) << GetParam() << ": no run '" << run << "' in expect.json";
    std::vector<std::string> files{(dir / x.value("pair_topo", json::object()).value(key, "topo.txt")).string()};
    std::vector<std::string> args;
    for (const std::string& arg : x["runs"][run].get<std::vector<std::string>>())
      if (arg.starts_with("@")) files.push_back((dir / arg.substr(1)).string());
      else args.push_back(arg);
    files.insert(files.end(), args.begin(), args.end());
    json j = ExplainJson(files);
    const json* pred = Predicted(j, a, b);
    ASSERT_NE(pred, nullptr) << key;
    std::string got = Kind((*pred)["class"].get<std::string>());
    if (x.value("mismatch", json::object()).contains(run))
      EXPECT_NE(got, want) << GetParam() << " " << key << " run '" << run << "': " << x["mismatch"][run];
    else
      EXPECT_EQ(got, want) << GetParam() << " " << key << " run '" << run << "': " << cls << "\n" << (*pred).dump();
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

std::vector<std::string> TopoCases() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(TOPO_FIXTURE_DIR))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TopoCase, ::testing::ValuesIn(TopoCases()),
                         [](const auto& p) { return "case" + p.param.substr(0, p.param.find('-')); });

}  // namespace
