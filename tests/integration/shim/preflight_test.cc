// Job-start warnings end to end: each scenario is a topology + environment + workload run
// on the simulated node under the shim, with the host's /proc and /sys from `p2psim sysroot`. It
// asserts the exact causes the trace's preflight block holds for every GPU pair, and the warning
// lines on stderr. Plus `p2ptrace doctor` against simulated sysroots.
#include <dirent.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/node_probe.h"
#include "core/warning_lines.h"
#include "core/preflight_block.h"
#include "core/trace_reader.h"
#include "core/vocabulary.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"

namespace p2ptrace {
namespace {

using testing::Env;
using testing::RunProgram;
using testing::RunResult;

// A GPU for the topology: index, parent, and what else the scenario needs.
std::string GpuJson(int index, const std::string& parent, const std::string& bus, const std::string& extra = "") {
  return R"({"index": )" + std::to_string(index) + R"(, "bus_id": ")" + bus + R"(", "parent": ")" + parent + "\"" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string HostJson(const std::string& name, const std::string& fields, const std::vector<std::string>& gpus,
                     const std::string& nvlinks = "") {
  std::string g;
  for (const std::string& x : gpus) g += (g.empty() ? "" : ", ") + x;
  return R"({"name": ")" + name + "\", " + fields + (fields.empty() ? "" : ", ") + R"("gpus": [)" + g + "]" +
         (nvlinks.empty() ? "" : R"(, "nvlinks": [)" + nvlinks + "]") + "}";
}

std::string Topology(const std::vector<std::string>& hosts) {
  std::string h;
  for (const std::string& x : hosts) h += (h.empty() ? "" : ", ") + x;
  return R"({"version": 1, "hosts": [)" + h + "]}";
}

// Two GPUs under one PCIe switch (the scenarios' usual base), with fields per GPU and host.
std::string SwitchPair(const std::string& host_fields = "", const std::string& gpu0 = "", const std::string& gpu1 = "",
                       const std::string& sw = "") {
  return Topology({HostJson("node0",
                            R"("cpus": [{"id": "cpu0"}], "switches": [{"id": "sw0", "parent": "cpu0")" +
                                (sw.empty() ? "" : ", " + sw) + "}]" + (host_fields.empty() ? "" : ", " + host_fields),
                            {GpuJson(0, "sw0", "0000:1a:00.0", gpu0), GpuJson(1, "sw0", "0000:1b:00.0", gpu1)})});
}

std::string NvlinkPair(const std::string& nvlink) {
  return Topology({HostJson("node0", R"("cpus": [{"id": "cpu0"}, {"id": "cpu1"}])",
                            {GpuJson(0, "cpu0", "0000:1a:00.0"), GpuJson(1, "cpu1", "0000:9a:00.0")}, nvlink)});
}

struct Scenario {
  std::string name;
  std::string topology;
  Env env;
  std::string workload = "query";  // preflight_workload mode, or "two-ranks" (one query process per GPU)
  std::vector<Env> rank_env;       // for two-ranks: each rank's own variables
  std::vector<std::string> hosts = {"node0"};  // the host of each rank (two-ranks)
  // "0-1" → the pair's cause ids (every role but context, in order); only pairs named are checked,
  // but every pair must be named in exactly one scenario's expectations of its topology.
  std::map<std::string, std::vector<std::string>> causes;
  std::map<std::string, std::string> transport;  // "0-1" → predicted class
  std::vector<std::string> stderr_has;            // substrings of the warning lines
  std::vector<std::string> stderr_lacks;
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

std::vector<Scenario> Scenarios() {
  const std::string ib = R"("nics": [{"name": "mlx5_0", "parent": "cpu0", "kind": "ib"}])";
  return {
      {.name = "HealthyNvlink",
       .topology = NvlinkPair(R"({"a": 0, "b": 1, "links": 18})"),
       .causes = {{"0-1", {}}},
       .transport = {{"0-1", "nvlink"}},
       .stderr_has = {"p2ptrace: all 1 GPU pairs on node0 can use NVLink/P2P"},
       .stderr_lacks = {"warning"}},
      {.name = "PcieSwitchWithoutNvlink",
       .topology = SwitchPair(),
       .causes = {{"0-1", {}}},
       .transport = {{"0-1", "pcie_p2p"}},
       .stderr_has = {"p2ptrace: all 1 GPU pairs on node0 can use NVLink/P2P"}},
      {.name = "CrossSocketBeyondPxb",
       .topology = Topology({HostJson("node0", R"("cpus": [{"id": "cpu0"}, {"id": "cpu1"}])",
                                      {GpuJson(0, "cpu0", "0000:1a:00.0"), GpuJson(1, "cpu1", "0000:9a:00.0")})}),
       .causes = {{"0-1", {"topology-beyond-p2p-level"}}},
       .transport = {{"0-1", "shm"}},
       .stderr_has = {"p2ptrace: warning: node0 GPU0 <-> GPU1: shm instead of pcie_p2p [topology-beyond-p2p-level] path SYS "
                      "is beyond the P2P level PXB", "; fix: "}},
      // The same machine running a CUDA-only program: NCCL's P2P level is not its business, the
      // driver's peer answer is (the simulated driver reports TNS across the sockets, as many
      // Intel platforms do): its copies are staged through the host.
      {.name = "CudaOnlyCrossSocket",
       .topology = Topology({HostJson("node0", R"("cpus": [{"id": "cpu0"}, {"id": "cpu1"}])",
                                      {GpuJson(0, "cpu0", "0000:1a:00.0"), GpuJson(1, "cpu1", "0000:9a:00.0")})}),
       .workload = "cuda-query",
       .causes = {{"0-1", {"nvml-p2p-status", "cuda-no-peer-access"}}},
       .transport = {{"0-1", "host_staged"}},
       .stderr_has = {"p2ptrace: warning: node0 GPU0 <-> GPU1: host_staged instead of pcie_p2p [nvml-p2p-status] NVML P2P "
                      "status TNS"},
       .stderr_lacks = {"topology-beyond-p2p-level", "shm instead"}},
      {.name = "NcclP2pDisable",
       .topology = NvlinkPair(R"({"a": 0, "b": 1, "links": 12})"),
       .env = {{"NCCL_P2P_DISABLE", "1"}},
       .causes = {{"0-1", {"env-p2p-disabled"}}},
       .transport = {{"0-1", "shm"}},
       .stderr_has = {"GPU0 <-> GPU1: shm instead of nvlink [env-p2p-disabled] NCCL_P2P_DISABLE=1"}},
      {.name = "NcclP2pLevelLoc",
       .topology = SwitchPair(),
       .env = {{"NCCL_P2P_LEVEL", "LOC"}},
       .causes = {{"0-1", {"env-p2p-level"}}},
       .transport = {{"0-1", "shm"}},
       .stderr_has = {"shm instead of pcie_p2p [env-p2p-level] NCCL_P2P_LEVEL=LOC"}},
      {.name = "ConsumerGeForce",
       .topology = SwitchPair("", R"("name": "NVIDIA GeForce RTX 4090")", R"("name": "NVIDIA GeForce RTX 4090")"),
       .causes = {{"0-1", {"nvml-p2p-status", "cuda-no-peer-access", "consumer-gpu"}}},
       .transport = {{"0-1", "shm"}},
       .stderr_has = {"shm instead of pcie_p2p [consumer-gpu] GPU0 is a NVIDIA GeForce RTX 4090",
                      "(also: nvml-p2p-status, cuda-no-peer-access)"}},
      {.name = "Mig",
       .topology = SwitchPair("", R"("mig": true)"),
       .causes = {{"0-1", {"mig-enabled"}}},
       .transport = {{"0-1", "shm"}},
       .stderr_has = {"[mig-enabled] GPU0 has MIG mode on"}},
      {.name = "VmPassthrough",
       .topology = SwitchPair(R"("virtualization": "passthrough")"),
       .causes = {{"0-1", {"nvml-p2p-status", "cuda-no-peer-access", "virtualized"}}},
       .transport = {{"0-1", "shm"}},
       .stderr_has = {"[virtualized] the GPUs are passed through to a VM; /proc/cpuinfo has the hypervisor flag; DMI sys_vendor is QEMU"}},
      {.name = "IommuOn",
       .topology = SwitchPair(R"("kernel_cmdline": "BOOT_IMAGE=/vmlinuz ro intel_iommu=on")"),
       .causes = {{"0-1", {"iommu-enabled"}}},
       .transport = {{"0-1", "pcie_p2p"}},
       .stderr_has = {"pcie_p2p at risk (slow or hanging) instead of pcie_p2p at full speed [iommu-enabled]",
                      "/proc/cmdline: intel_iommu=on", "has type DMA-FQ"}},
      {.name = "AcsRedirectReadableAsRoot",
       .topology = SwitchPair(R"("kernel_cmdline": "ro intel_iommu=on iommu=pt", "config_space_readable": true)", "", "",
                              R"("acs_redirect": true)"),
       .causes = {{"0-1", {"acs-redirect"}}},
       .transport = {{"0-1", "pcie_p2p"}},
       .stderr_has = {"[acs-redirect] a PCIe bridge between GPU0 and GPU1 has ACS redirect on",
                      "ACSCtl ReqRedir+/CmpltRedir+ on bridge 0000:01:00.0"},
       .stderr_lacks = {"iommu-enabled"}},
      {.name = "AcsRedirectNotReadable",
       .topology = SwitchPair(R"("kernel_cmdline": "ro intel_iommu=on iommu=pt")", "", "", R"("acs_redirect": true)"),
       .causes = {{"0-1", {"acs-suspected"}}},
       .transport = {{"0-1", "pcie_p2p"}},
       .stderr_has = {"[acs-suspected] the GPUs sit in different IOMMU groups",
                      "run: sudo lspci -vvv -s 0000:01:00.0 | grep -A3 'Access Control Services'"}},
      {.name = "P2pDisabledByRegkey",
       .topology = SwitchPair("", R"("p2p_regkey_disabled": true)", R"("p2p_regkey_disabled": true)"),
       .causes = {{"0-1", {"nvml-p2p-status", "cuda-no-peer-access"}}},
       .transport = {{"0-1", "shm"}},
       .stderr_has = {"[nvml-p2p-status] NVML P2P status DR", "RegistryDwords: \"ForceP2P=0x0\""}},
      {.name = "NvlinksDown",
       .topology = NvlinkPair(R"({"a": 0, "b": 1, "links": 18, "active": 12})"),
       .causes = {{"0-1", {"nvlink-down"}}},
       .transport = {{"0-1", "nvlink"}},
       .stderr_has = {"[nvlink-down] 12 of 18 NVLinks active"}},
      {.name = "PcieDowntrained",
       .topology = SwitchPair("", R"("pcie": {"gen": 3, "width": 8, "max_gen": 5, "max_width": 16})"),
       .causes = {{"0-1", {"pcie-downtrained"}}},
       .transport = {{"0-1", "pcie_p2p"}},
       .stderr_has = {"[pcie-downtrained] GPU0 runs PCIe Gen3 x8 of Gen5 x16"}},
      {.name = "ShmTooSmall",
       .topology = Topology({HostJson("node0", R"("cpus": [{"id": "cpu0"}, {"id": "cpu1"}], "dev_shm_mb": 64)",
                                      {GpuJson(0, "cpu0", "0000:1a:00.0"), GpuJson(1, "cpu1", "0000:9a:00.0")})}),
       .causes = {{"0-1", {"topology-beyond-p2p-level", "shm-too-small"}}},
       .transport = {{"0-1", "shm"}},
       .stderr_has = {"(also: shm-too-small)"}},
      {.name = "SeparateDevShm",
       .topology = SwitchPair(),
       .workload = "two-ranks",
       .rank_env = {{{"P2PSIM_SHM_DEVICE", "1"}}, {{"P2PSIM_SHM_DEVICE", "2"}}},
       .hosts = {"node0", "node0"},
       .causes = {{"0-1", {"container-separate-shm"}}},
       .transport = {{"0-1", "socket"}},
       .stderr_has = {"GPU0 <-> GPU1 (ranks 0<->1): net_socket instead of pcie_p2p [container-separate-shm] /dev/shm is "
                      "device 1 for GPU0's rank and 2 for GPU1's"}},
      {.name = "SeparateHostIdentityOneMachine",
       .topology = Topology({HostJson("ctr-a", R"("boot_id": "5f0b8c1e-0000-4000-8000-000000000001")",
                                      {GpuJson(0, "cpu0", "0000:1a:00.0")}),
                             HostJson("ctr-b", R"("boot_id": "5f0b8c1e-0000-4000-8000-000000000001")",
                                      {GpuJson(0, "cpu0", "0000:1b:00.0")})}),
       .workload = "two-ranks",
       .rank_env = {{}, {}},
       .hosts = {"ctr-a", "ctr-b"},
       .causes = {{"0-100", {"container-separate-host"}}},
       .stderr_has = {"ctr-a GPU0 <-> ctr-b GPU0 (ranks 0<->1): net_socket instead of p2p [container-separate-host] "
                      "GPU0's rank sees hostname 'ctr-a', GPU100's 'ctr-b'"}},
      {.name = "NoGdrAcrossNodes",
       .topology = Topology({HostJson("n0", ib, {GpuJson(0, "cpu0", "0000:1a:00.0")}),
                             HostJson("n1", ib, {GpuJson(0, "cpu0", "0000:1a:00.0")})}),
       .workload = "two-ranks",
       .rank_env = {{}, {}},
       .hosts = {"n0", "n1"},
       .causes = {{"0-100", {"gdr-no-module"}}},
       .transport = {{"0-100", "net_ib"}},
       .stderr_has = {"n0 GPU0 <-> n1 GPU0 (ranks 0<->1): net_ib instead of net_gdr [gdr-no-module] nvidia_peermem is "
                      "not loaded"}},
      {.name = "CopyWithoutPeerAccess",
       .topology = SwitchPair(),
       .workload = "copy-no-peer",
       .stderr_has = {"p2ptrace: warning: node0 GPU0 -> GPU1: host_staged instead of pcie_p2p [peer-access-not-enabled]",
                      "without cudaDeviceEnablePeerAccess", "fix: call cudaDeviceEnablePeerAccess"}},
  };
}

std::vector<std::string> TraceFiles(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 9 && n.compare(n.size() - 9, 9, ".p2ptrace") == 0) out.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<PreflightBlock> Blocks(const std::string& dir) {
  std::vector<PreflightBlock> out;
  for (const std::string& f : TraceFiles(dir)) {
    auto t = ReadTrace(f);
    EXPECT_TRUE(t.ok()) << f;
    if (!t.ok()) continue;
    for (const auto& [kind, text] : t->text_blocks) {
      if (kind != P2PTRACE_TEXT_PREFLIGHT) continue;
      auto b = ParsePreflight(text);
      EXPECT_TRUE(b.ok()) << b.error().message;
      if (b.ok()) out.push_back(*b);
    }
  }
  return out;
}

class PreflightScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(PreflightScenario, CausesAndWarnings) {
  const Scenario& s = GetParam();
  std::string dir = testing::TempDir() + "/" + s.name;
  std::string topo = dir + ".json";
  testing::WriteFile(topo, s.topology);
  std::set<std::string> hosts(s.hosts.begin(), s.hosts.end());
  for (const std::string& h : hosts) {
    RunResult r = RunProgram({P2PSIM, "sysroot", topo, h, dir + "-root-" + h});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  Env base = s.env;
  base["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  base["LD_PRELOAD"] = P2PTRACE_SHIM;
  base["P2PSIM_TOPOLOGY"] = topo;
  base["P2PTRACE_DIR"] = dir + "/trace";
  base["P2PTRACE_NVML_TIMEOUT_MS"] = "20000";  // sanitizer builds are slow; the sim never stalls
  std::string err;
  if (s.workload == "two-ranks") {
    std::vector<std::unique_ptr<testing::ChildProcess>> ranks;
    for (size_t r = 0; r < s.hosts.size(); ++r) {
      Env e = base;
      for (const auto& [k, v] : s.rank_env[r]) e[k] = v;
      e["RANK"] = std::to_string(r);
      e["WORLD_SIZE"] = std::to_string(s.hosts.size());
      e["P2PSIM_HOST"] = s.hosts[r];
      e["P2PTRACE_SYSROOT"] = dir + "-root-" + s.hosts[r];
      if (hosts.size() == 1) e["CUDA_VISIBLE_DEVICES"] = std::to_string(r);  // one GPU per rank
      ranks.push_back(std::make_unique<testing::ChildProcess>(std::vector<std::string>{PREFLIGHT_WORKLOAD, "query"}, e));
    }
    for (auto& c : ranks) {
      RunResult r = c->Finish();
      EXPECT_EQ(r.exit_code, 0) << r.err;
      err += r.err;
    }
  } else {
    base["P2PSIM_HOST"] = "node0";
    base["P2PTRACE_SYSROOT"] = dir + "-root-node0";
    RunResult r = RunProgram({PREFLIGHT_WORKLOAD, s.workload}, base);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    err = r.err;
  }
  for (const std::string& want : s.stderr_has) EXPECT_NE(err.find(want), std::string::npos) << "want: " << want << "\nstderr:\n" << err;
  for (const std::string& bad : s.stderr_lacks) EXPECT_EQ(err.find(bad), std::string::npos) << "unwanted: " << bad << "\n" << err;

  std::vector<PreflightBlock> blocks = Blocks(dir + "/trace");
  ASSERT_FALSE(blocks.empty()) << "no preflight block in the traces";
  // Rank 0's node speaks for the scenario (the first trace is rank 0's; file names carry the rank).
  std::map<std::string, const PreflightPair*> pairs;
  for (const PreflightBlock& b : blocks)
    for (const PreflightPair& p : b.pairs) pairs.emplace(std::to_string(p.a) + "-" + std::to_string(p.b), &p);
  for (const auto& [key, ids] : s.causes) {
    ASSERT_TRUE(pairs.count(key)) << "no prediction for pair " << key;
    std::vector<std::string> got;
    for (const CauseHit& c : pairs[key]->causes)
      if (c.role != "context") got.push_back(c.id);
    EXPECT_EQ(got, ids) << "pair " << key;
  }
  for (const auto& [key, cls] : s.transport) {
    ASSERT_TRUE(pairs.count(key)) << key;
    std::string got = std::string(TransportName(pairs[key]->transport));
    if (cls == "socket") EXPECT_EQ(got, "net_socket");
    else EXPECT_EQ(got, cls) << "pair " << key;
  }
  // The warnings went into the trace too.
  bool recorded = false;
  for (const PreflightBlock& b : blocks)
    for (const std::string& w : b.warnings)
      if (!s.stderr_has.empty() && w.find(s.stderr_has.front()) != std::string::npos) recorded = true;
  EXPECT_TRUE(recorded) << "the warning line is not in the trace";
}

INSTANTIATE_TEST_SUITE_P(Sim, PreflightScenario, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& i) { return i.param.name; });

TEST(Preflight, OncePerNodeByDefaultEveryRankOnRequestOffSilences) {
  std::string dir = testing::TempDir() + "/warn-modes";
  std::string topo = dir + ".json";
  testing::WriteFile(topo, SwitchPair());
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", topo, "node0", dir + "-root"}).exit_code, 0);
  auto run = [&](const std::string& mode, const std::string& trace) {
    Env e{{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR}, {"LD_PRELOAD", P2PTRACE_SHIM}, {"P2PSIM_TOPOLOGY", topo},
          {"P2PTRACE_SYSROOT", dir + "-root"}, {"P2PTRACE_DIR", dir + "/" + trace}, {"P2PTRACE_WARN", mode}};
    return RunProgram({PREFLIGHT_WORKLOAD, "query"}, e).err;
  };
  const std::string line = "p2ptrace: all 1 GPU pairs on node0 can use NVLink/P2P";
  EXPECT_NE(run("node", "a").find(line), std::string::npos);
  EXPECT_EQ(run("node", "a").find(line), std::string::npos) << "a second process of the node printed again";
  EXPECT_NE(run("rank", "a").find(line), std::string::npos);
  EXPECT_EQ(run("off", "b").find(line), std::string::npos);
  EXPECT_NE(run("bogus", "c").find("P2PTRACE_WARN='bogus' is not node, rank or off"), std::string::npos);
}

// --- the preflight in `p2ptrace report` ------------------------------------------------------------

// One workload process on the simulated node0 of `topology` under the shim; its trace directory.
std::string TraceWorkload(const std::string& name, const std::string& topology, const std::string& workload) {
  std::string dir = testing::TempDir() + "/" + name;
  std::string topo = dir + ".json";
  testing::WriteFile(topo, topology);
  RunResult s = RunProgram({P2PSIM, "sysroot", topo, "node0", dir + "-root"});
  EXPECT_EQ(s.exit_code, 0) << s.err;
  Env e{{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR}, {"LD_PRELOAD", P2PTRACE_SHIM}, {"P2PSIM_TOPOLOGY", topo},
        {"P2PSIM_HOST", "node0"}, {"P2PTRACE_SYSROOT", dir + "-root"}, {"P2PTRACE_DIR", dir + "/trace"},
        {"P2PTRACE_NVML_TIMEOUT_MS", "20000"}};
  RunResult r = RunProgram({PREFLIGHT_WORKLOAD, workload}, e);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir + "/trace";
}

const nlohmann::json* ReportPair(const nlohmann::json& j, int src, int dst, const std::string& transport) {
  for (const auto& p : j["pairs"])
    if (p["src"]["gpu"] == src && p["dst"]["gpu"] == dst && p["transport"] == transport) return &p;
  return nullptr;
}

std::vector<std::string> CauseIds(const nlohmann::json& pair) {
  std::vector<std::string> ids;
  for (const auto& c : pair["causes"]) ids.push_back(c["id"]);
  return ids;
}

// Every cause the report gives carries evidence and a fix, and the predicted ones say so.
void ExpectExplained(const nlohmann::json& pair) {
  for (const auto& c : pair["causes"]) {
    EXPECT_FALSE(c["evidence"].empty()) << c.dump();
    for (const auto& ev : c["evidence"]) EXPECT_FALSE(ev.get<std::string>().empty()) << c.dump();
    EXPECT_FALSE(c["fix"].get<std::string>().empty()) << c.dump();
  }
}

// copy-no-peer on a switch pair: the report derives [peer-access-not-enabled] from the copies; the
// preflight predicted the same cause, which must not appear twice. The host's warning line is kept.
TEST(PreflightReport, HostStagedCopyCarriesItsCauseOnceAndTheWarningLine) {
  std::string trace = TraceWorkload("report-copy-no-peer", SwitchPair(), "copy-no-peer");
  RunResult r = RunProgram({P2PTRACE_CLI, "report", trace, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json* staged = ReportPair(j, 0, 1, "host_staged");
  ASSERT_NE(staged, nullptr) << r.out;
  EXPECT_EQ((*staged)["fallback"], true);
  EXPECT_EQ((*staged)["expected"], "pcie_p2p");
  EXPECT_EQ(CauseIds(*staged), std::vector<std::string>{"peer-access-not-enabled"});
  ExpectExplained(*staged);
  ASSERT_EQ(j["preflight"].size(), 1u) << j["preflight"].dump();
  EXPECT_EQ(j["preflight"][0]["host"], "node0");
  bool warned = false;
  for (const auto& w : j["preflight"][0]["warnings"])
    warned |= w.get<std::string>().find("host_staged instead of pcie_p2p [peer-access-not-enabled]") != std::string::npos;
  EXPECT_TRUE(warned) << j["preflight"].dump();

  RunResult text = RunProgram({P2PTRACE_CLI, "report", trace}, {{"NO_COLOR", "1"}});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("job-start preflight (predicted before the first transfer):\n  node0:\n"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("\n    p2ptrace: warning: node0 GPU0 -> GPU1: host_staged instead of pcie_p2p "
                          "[peer-access-not-enabled]"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("      [peer-access-not-enabled] "), std::string::npos) << text.out;
}

// Consumer GPUs copying without peer access: NVML refuses P2P, so the report's own cause comes
// first; the preflight adds what the copies cannot show (the GPU model), marked as predicted.
TEST(PreflightReport, ConsumerGpuPairGainsThePredictedCauses) {
  std::string trace = TraceWorkload(
      "report-consumer", SwitchPair("", R"("name": "NVIDIA GeForce RTX 4090")", R"("name": "NVIDIA GeForce RTX 4090")"),
      "copy-no-peer");
  RunResult r = RunProgram({P2PTRACE_CLI, "report", trace, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json* staged = ReportPair(j, 0, 1, "host_staged");
  ASSERT_NE(staged, nullptr) << r.out;
  EXPECT_EQ(CauseIds(*staged), (std::vector<std::string>{"nvml-p2p-status", "cuda-no-peer-access", "consumer-gpu"}))
      << staged->dump();
  ExpectExplained(*staged);
  EXPECT_EQ((*staged)["causes"][0]["origin"], "trace");
  EXPECT_EQ((*staged)["causes"][2]["origin"], "preflight");
  EXPECT_NE((*staged)["causes"][2]["evidence"][0].get<std::string>().find("GeForce RTX 4090"), std::string::npos);
  std::set<std::string> findings;
  for (const auto& f : j["findings"]) findings.insert(f["id"]);
  EXPECT_TRUE(findings.count("consumer-gpu")) << j["findings"].dump();
}

// --- p2ptrace doctor --------------------------------------------------------------------------------

nlohmann::json Doctor(const std::string& root, const std::string& topo, const std::string& host, int* exit_code) {
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--json"},
                           {{"P2PTRACE_SYSROOT", root}, {"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR},
                            {"P2PSIM_TOPOLOGY", topo}, {"P2PSIM_HOST", host}});
  *exit_code = r.exit_code;
  return nlohmann::json::parse(r.out, nullptr, false);
}

TEST(Doctor, JsonOnASimulatedSysrootNamesEveryPairsCauses) {
  std::string dir = testing::TempDir() + "/doctor";
  std::string topo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/pcie-iommu-acs-4gpu.json";
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", topo, "iommu4", dir}).exit_code, 0);
  int code = -1;
  nlohmann::json j = Doctor(dir, topo, "iommu4", &code);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(code, 0);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["host"], "iommu4");
  ASSERT_EQ(j["gpus"].size(), 4u);
  EXPECT_EQ(j["gpus"][2]["bus_id"], "0000:5e:00.0");
  ASSERT_EQ(j["pairs"].size(), 6u);
  std::map<std::string, nlohmann::json> pairs;
  for (const auto& p : j["pairs"]) pairs[std::to_string(p["a"].get<int>()) + "-" + std::to_string(p["b"].get<int>())] = p;
  EXPECT_EQ(pairs["0-1"]["link"], "PIX");
  EXPECT_EQ(pairs["0-1"]["predicted"], "pcie_p2p");
  EXPECT_EQ(pairs["0-2"]["link"], "PHB");
  EXPECT_EQ(pairs["0-2"]["predicted"], "shm");
  EXPECT_EQ(pairs["0-2"]["causes"][0]["id"], "topology-beyond-p2p-level");
  std::vector<std::string> ids23;
  for (const auto& c : pairs["2-3"]["causes"]) ids23.push_back(c["id"]);
  EXPECT_EQ(ids23, (std::vector<std::string>{"acs-suspected", "iommu-enabled", "no-nvlink"}));
  std::set<std::string> findings;
  for (const auto& f : j["findings"]) findings.insert(f["id"]);
  EXPECT_EQ(findings, (std::set<std::string>{"acs-suspected", "iommu-enabled", "topology-beyond-p2p-level"}));
  bool acs_step = false;
  for (const auto& s : j["probes"])
    if (s["name"] == "ACS control") acs_step = s["status"] == "unknown" && s["detail"].get<std::string>().find("sudo lspci -vvv -s") != std::string::npos;
  EXPECT_TRUE(acs_step);
}

TEST(Doctor, NoDriverNoGpuSaysSoWithoutCrashing) {
  std::string root = testing::TempDir() + "/empty-root";
  std::filesystem::create_directories(root + "/proc/sys/kernel");
  testing::WriteFile(root + "/proc/sys/kernel/hostname", "bare\n");
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--no-cuda"}, {{"P2PTRACE_SYSROOT", root}, {"LD_LIBRARY_PATH", "/nonexistent"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no NVIDIA GPU found on bare"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("libnvidia-ml.so.1 not found"), std::string::npos) << r.out;
  RunResult j = RunProgram({P2PTRACE_CLI, "doctor", "--json", "--no-cuda"}, {{"P2PTRACE_SYSROOT", root}, {"LD_LIBRARY_PATH", "/nonexistent"}});
  nlohmann::json doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << j.out;
  EXPECT_TRUE(doc["pairs"].empty());
  EXPECT_EQ(doc["no_gpu"], "no NVIDIA GPU found on bare");
}

}  // namespace
}  // namespace p2ptrace
