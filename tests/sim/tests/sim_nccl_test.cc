// The simulated NCCL (tests/sim/nccl): examples/nccl_ring run through `p2psim launch` on simulated
// nodes; results must be correct (exit 0) and the Channel lines of the NCCL_DEBUG_FILE logs must
// name exactly the transport NCCL 2.28's rules give each ring pair. Plus the library's shape
// (soname, weak ncclX + strong pncclX, PLT self-calls) against the real libnccl.so.2.
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <optional>
#include <tuple>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "tests/sim/common/sim_links.h"
#include "tests/support/subprocess.h"

namespace {

using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using p2ptrace::testing::WriteFile;
using Env = std::map<std::string, std::optional<std::string>>;
// (connIndex, src, dst) → transports named by "via" (SHM lines have no connIndex: -1).
using Connections = std::map<std::tuple<int, int, int>, std::set<std::string>>;

std::string Topology(const std::string& name) { return std::string(P2PTRACE_TOPOLOGY_DIR) + "/" + name; }

// A host with two CPUs, one switch each, two GPUs per switch: 0-1 and 2-3 PIX, across CPUs SYS.
std::string PcieHost(const std::string& name, const std::string& extra) {
  return R"({"name": ")" + name + R"(", "boot_id": "boot-)" + name + R"(", "cpus": [{"id": "cpu0"}, {"id": "cpu1"}],
     "switches": [{"id": "sw0", "parent": "cpu0"}, {"id": "sw1", "parent": "cpu1"}],
     "gpus": [{"index": 0, "bus_id": "0000:18:00.0", "parent": "sw0"}, {"index": 1, "bus_id": "0000:2a:00.0", "parent": "sw0"},
              {"index": 2, "bus_id": "0000:9a:00.0", "parent": "sw1"}, {"index": 3, "bus_id": "0000:ab:00.0", "parent": "sw1"}])" +
         extra + "}";
}

std::string WriteTopology(const std::string& dir, const std::vector<std::string>& hosts) {
  std::string json = R"({"version": 1, "hosts": [)";
  for (size_t i = 0; i < hosts.size(); ++i) json += (i ? "," : "") + hosts[i];
  json += "]}";
  std::string path = dir + "/topo.json";
  WriteFile(path, json);
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Logs(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind("nccl.", 0) == 0 && std::string(e->d_name).find(".log") != std::string::npos)
        out.push_back(ReadAll(dir + "/" + e->d_name));
    closedir(d);
  }
  return out;
}

struct Job {
  RunResult run;
  std::string dir;
  std::vector<std::string> logs;
  Connections conns;
  bool LogsContain(const std::string& text) const {
    for (const auto& l : logs)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }
};

Connections ParseConnections(const std::vector<std::string>& logs) {
  static const std::regex kLine(R"(NCCL INFO Channel \d\d(?:/(\d)) : (\d+)\[\d+\] -> (\d+)\[\d+\] (?:\[(?:send|receive)\] )?via (.+))");
  static const std::regex kShm(R"(NCCL INFO Channel \d\d : (\d+)\[\d+\] -> (\d+)\[\d+\] via (SHM/.+))");
  Connections out;
  for (const auto& log : logs) {
    std::istringstream in(log);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, kLine))
        out[{std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])}].insert(m[4]);
      else if (std::regex_search(line, m, kShm))
        out[{-1, std::stoi(m[1]), std::stoi(m[2])}].insert(m[3]);
    }
  }
  return out;
}

// Runs nccl_ring on `hosts` ("node0:4") of `topology` with NCCL_DEBUG=INFO into per-process files.
Job RunRing(const std::string& topology, const std::string& hosts, Env env = {}, const std::string& prefix = "",
            const std::string& options = "") {
  Job job;
  job.dir = TempDir() + "/job" + std::to_string(rand());
  RunProgram({"mkdir", "-p", job.dir});
  env["P2PSIM_NCCL_DIR"] = job.dir;
  env["P2PSIM_NCCL_TIMEOUT"] = "30";
  if (!env.count("NCCL_DEBUG")) env["NCCL_DEBUG"] = "INFO";
  env["NCCL_DEBUG_FILE"] = job.dir + "/nccl.%h.%p.log";
  std::string cmd = prefix + "exec " + NCCL_RING + " " + options + " " + job.dir + " 4096";
  job.run = RunProgram({P2PSIM_BINARY, "launch", "--topology", topology, "--hosts", hosts, "--", "sh", "-c", cmd}, env);
  job.logs = Logs(job.dir);
  job.conns = ParseConnections(job.logs);
  return job;
}

// The ring pairs r → r+1 on connIndex 0 (or the SHM form) must carry exactly `want(src, dst)`.
void ExpectRing(const Job& job, int nranks, const std::function<std::string(int, int)>& want) {
  for (int r = 0; r < nranks; ++r) {
    int next = (r + 1) % nranks;
    std::string t = want(r, next);
    int conn = t.rfind("SHM/", 0) == 0 ? -1 : 0;
    auto it = job.conns.find({conn, r, next});
    ASSERT_NE(it, job.conns.end()) << "no connection " << r << " -> " << next << " (" << t << ")";
    EXPECT_EQ(it->second, std::set<std::string>{t}) << r << " -> " << next;
  }
}

#define EXPECT_JOB_OK(job) \
  ASSERT_EQ((job).run.exit_code, 0) << (job).run.out << (job).run.err

TEST(SimNccl, NvlinkBoxIsAllP2p) {
  Job job = RunRing(Topology("demo-8gpu.json"), "node0:4");
  EXPECT_JOB_OK(job);
  EXPECT_NE(job.run.out.find("all results correct"), std::string::npos);
  // H100 is sm_90: NCCL 2.28 enables P2P read only for sm_80 NVLink pairs.
  ExpectRing(job, 4, [](int, int) { return "P2P/CUMEM"; });
  const std::set<std::string> cumem{"P2P/CUMEM"};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(job.conns.at(std::make_tuple(1, r, (r + 1) % 4)), cumem);
  EXPECT_TRUE(job.LogsContain("NCCL INFO NCCL version 2.28.9+cuda13.0"));
  EXPECT_TRUE(job.LogsContain("nranks 4 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x"));
  EXPECT_TRUE(job.LogsContain("Connected all rings, use ring PXN 0 GDR 1"));
}

// The ring 0 → 1 → 2 → 3 → 0 on PcieHost with GPUs 0-1 NVLinked: 0 → 1 over NVLink, 2 → 3 P2P over
// PCIe, 1 → 2 and 3 → 0 SHM. A storm on the NVLink and a downtrain of GPU 3 grow with the job's
// bytes (read here the way the fake NVML reads them).
TEST(SimNccl, TransfersChargeTheLinksTheyCross) {
  std::string dir = TempDir() + "/links";
  RunProgram({"mkdir", "-p", dir});
  std::string topo = dir + "/topo.json";
  WriteFile(topo, R"({"version": 1, "hosts": [)" + PcieHost("node0", R"(, "nvlinks": [{"a": 0, "b": 1, "links": 2}])") +
                      R"(], "link_faults": [{"host": "node0", "gpu": 0, "nvlink": 1, "per_gb": 1000000},
                                           {"host": "node0", "gpu": 3, "pcie_width": 8},
                                           {"host": "node0", "gpu": 3, "counter": "pcie_replay", "per_gb": 1000000}]})");
  p2psim::Topology t;
  std::string error;
  ASSERT_TRUE(p2psim::LoadTopology(topo, &t, &error)) << error;
  const p2ptrace::Host& h = t.hosts[0];
  using p2psim::LinkCounter;
  EXPECT_EQ(p2psim::CurrentPcie(t, h, 3).width, 16);
  Job job = RunRing(topo, "node0:4");
  EXPECT_JOB_OK(job);
  ExpectRing(job, 4, [](int a, int) { return a == 0 || a == 2 ? "P2P/CUMEM" : "SHM/direct/direct"; });
  uint64_t storm = p2psim::CounterValue(t, h, 0, 1, LinkCounter::kReplay);
  EXPECT_GT(storm, 0u);
  EXPECT_EQ(p2psim::CounterValue(t, h, 1, 1, LinkCounter::kReplay), storm);  // GPU 1's end of the same link
  EXPECT_EQ(p2psim::CounterValue(t, h, 0, 0, LinkCounter::kReplay), 0u);
  EXPECT_GT(p2psim::CounterValue(t, h, 3, -1, LinkCounter::kPcieReplay), 0u);
  EXPECT_EQ(p2psim::CurrentPcie(t, h, 3).width, 8);
}

TEST(SimNccl, P2pReadEnableAddsRead) {
  Job job = RunRing(Topology("demo-8gpu.json"), "node0:2", {{"NCCL_P2P_READ_ENABLE", "1"}});
  EXPECT_JOB_OK(job);
  ExpectRing(job, 2, [](int, int) { return "P2P/CUMEM/read"; });
}

TEST(SimNccl, PcieBoxBeyondPxbUsesShm) {
  std::string topo = WriteTopology(TempDir(), {PcieHost("box", "")});
  Job job = RunRing(topo, "box:4");
  EXPECT_JOB_OK(job);
  ExpectRing(job, 4, [](int a, int b) { return a / 2 == b / 2 ? "P2P/CUMEM" : "SHM/direct/direct"; });
}

TEST(SimNccl, P2pLevelSysStillNeedsCudaPeerAccess) {
  // The level admits the SYS pairs, but CUDA cannot peer across the CPUs: NCCL says so and uses SHM.
  std::string topo = WriteTopology(TempDir(), {PcieHost("box", "")});
  Job job = RunRing(topo, "box:4", {{"NCCL_P2P_LEVEL", "SYS"}});
  EXPECT_JOB_OK(job);
  EXPECT_TRUE(job.LogsContain("NCCL INFO NCCL_P2P_LEVEL set by environment to SYS\n"));
  EXPECT_TRUE(job.LogsContain("NCCL INFO Could not enable P2P between dev 1(=2a000) and dev 2(=9a000)\n"));
  ExpectRing(job, 4, [](int a, int b) { return a / 2 == b / 2 ? "P2P/CUMEM" : "SHM/direct/direct"; });
}

TEST(SimNccl, ConsumerGpusRefuseP2p) {
  // Both GPUs hang off the CPU (PHB): beyond the default PXB, so raise the level to reach NVML's check.
  Job job = RunRing(Topology("consumer-2gpu.json"), "desk:2", {{"NCCL_P2P_LEVEL", "PHB"}});
  EXPECT_JOB_OK(job);
  EXPECT_TRUE(job.LogsContain("P2P is disabled between connected GPUs 0 and 1. You can repress this message with "
                              "NCCL_IGNORE_DISABLED_P2P=1."));
  ExpectRing(job, 2, [](int, int) { return "SHM/direct/direct"; });
}

TEST(SimNccl, P2pDisableGivesShmAndSaysSo) {
  Job job = RunRing(Topology("demo-8gpu.json"), "node0:4", {{"NCCL_P2P_DISABLE", "1"}});
  EXPECT_JOB_OK(job);
  ExpectRing(job, 4, [](int, int) { return "SHM/direct/direct"; });
  EXPECT_TRUE(job.LogsContain("NCCL INFO NCCL_P2P_DISABLE set by environment to 1\n"));
}

TEST(SimNccl, ShmAndP2pDisabledWithoutNicGiveSocket) {
  std::string topo = WriteTopology(TempDir(), {PcieHost("box", "")});
  Job job = RunRing(topo, "box:4", {{"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}});
  EXPECT_JOB_OK(job);
  ExpectRing(job, 4, [](int, int) { return "NET/Socket/0"; });
  EXPECT_TRUE(job.LogsContain("NCCL_SHM_DISABLE set by environment to 1."));
  EXPECT_TRUE(job.LogsContain("[receive] via NET/Socket/0"));
}

std::string TwoHosts(bool gdr) {
  std::string extra = std::string(R"(, "gdr": )") + (gdr ? "true" : "false") + R"(, "nics": [{"name": "mlx5_0", "parent": "sw0", "kind": "ib"}])";
  return WriteTopology(TempDir() + "/" + (gdr ? "gdr" : "nogdr"), {PcieHost("a", extra), PcieHost("b", extra)});
}

std::string CrossHost(int a, int b, const std::string& net, const std::string& local) {
  return a / 2 == b / 2 ? local : net;
}

TEST(SimNccl, TwoHostsWithGdr) {
  RunProgram({"mkdir", "-p", TempDir() + "/gdr"});
  Job job = RunRing(TwoHosts(true), "a:2,b:2");
  EXPECT_JOB_OK(job);
  ExpectRing(job, 4, [](int a, int b) { return CrossHost(a, b, "NET/IB/0/GDRDMA", "P2P/CUMEM"); });
}

TEST(SimNccl, TwoHostsWithoutGdr) {
  RunProgram({"mkdir", "-p", TempDir() + "/nogdr"});
  Job job = RunRing(TwoHosts(false), "a:2,b:2");
  EXPECT_JOB_OK(job);
  ExpectRing(job, 4, [](int a, int b) { return CrossHost(a, b, "NET/IB/0", "P2P/CUMEM"); });
}

TEST(SimNccl, TwoHostsIbDisabledUseSockets) {
  RunProgram({"mkdir", "-p", TempDir() + "/gdr"});
  Job job = RunRing(TwoHosts(true), "a:2,b:2", {{"NCCL_IB_DISABLE", "1"}});
  EXPECT_JOB_OK(job);
  ExpectRing(job, 4, [](int a, int b) { return CrossHost(a, b, "NET/Socket/0", "P2P/CUMEM"); });
}

TEST(SimNccl, ContainersWithSeparateShmUseNet) {
  Job job = RunRing(Topology("demo-8gpu.json"), "node0:4", {}, "P2PSIM_SHM_DEVICE=$((LOCAL_RANK + 10)) ");
  EXPECT_JOB_OK(job);
  // GPU0 and GPU1 share sw0 with mlx5_0 (PIX); GPU2 and GPU3 sit under sw1, PHB from it, and reach it
  // through GPU0 over NVLink (PXN): their sends name rank 0 as proxy, and GPU0's distance keeps
  // GPUDirect RDMA both ways.
  for (int r = 0; r < 4; ++r) {
    int next = (r + 1) % 4;
    auto it = job.conns.find({0, r, next});
    ASSERT_NE(it, job.conns.end()) << "no connection " << r << " -> " << next;
    std::string send = r < 2 ? "NET/IB/0/GDRDMA" : "NET/IB/0(0)/GDRDMA";
    EXPECT_EQ(it->second, (std::set<std::string>{send, "NET/IB/0/GDRDMA"})) << r << " -> " << next;
  }
  // Without PXN, GPU2's and GPU3's own distance is beyond NCCL_NET_GDR_LEVEL's default PXB.
  Job direct = RunRing(Topology("demo-8gpu.json"), "node0:4", {{"NCCL_PXN_DISABLE", "1"}},
                       "P2PSIM_SHM_DEVICE=$((LOCAL_RANK + 10)) ");
  EXPECT_JOB_OK(direct);
  auto side = [](int gpu) { return std::string(gpu < 2 ? "NET/IB/0/GDRDMA" : "NET/IB/0"); };
  for (int r = 0; r < 4; ++r) {
    int next = (r + 1) % 4;
    auto it = direct.conns.find({0, r, next});
    ASSERT_NE(it, direct.conns.end()) << "no connection " << r << " -> " << next;
    EXPECT_EQ(it->second, (std::set<std::string>{side(r), side(next)})) << r << " -> " << next;
  }
}

// Position of the first line containing `what` in a log, npos when absent.
size_t Where(const std::string& log, const std::string& what) { return log.find(what); }

TEST(SimNccl, LazyConnectPrintsChannelsAtTheFirstOperation) {
  Job job = RunRing(Topology("demo-8gpu.json"), "node0:2");
  EXPECT_JOB_OK(job);
  ASSERT_EQ(job.logs.size(), 2u);
  for (const auto& log : job.logs) {
    size_t complete = Where(log, "- Init COMPLETE"), via = Where(log, " via ");
    ASSERT_NE(complete, std::string::npos);
    ASSERT_NE(via, std::string::npos);
    EXPECT_GT(via, complete) << log;
  }
}

TEST(SimNccl, RuntimeConnectZeroPrintsRingsAtInit) {
  Job job = RunRing(Topology("demo-8gpu.json"), "node0:2", {{"NCCL_RUNTIME_CONNECT", "0"}});
  EXPECT_JOB_OK(job);
  for (const auto& log : job.logs) {
    size_t complete = Where(log, "- Init COMPLETE"), ring = Where(log, "Channel 00/0 :");
    ASSERT_NE(ring, std::string::npos) << log;
    EXPECT_LT(ring, complete) << log;
    EXPECT_GT(Where(log, "Channel 00/1 :"), complete) << log;  // send/recv stays lazy
  }
}

TEST(SimNccl, DevShmExhaustionFailsLikeNccl) {
  std::string topo = WriteTopology(TempDir() + "/small", {PcieHost("box", R"(, "dev_shm_mb": 12)")});
  RunProgram({"mkdir", "-p", TempDir() + "/small"});
  topo = WriteTopology(TempDir() + "/small", {PcieHost("box", R"(, "dev_shm_mb": 12)")});
  Job job = RunRing(topo, "box:4", {{"NCCL_P2P_DISABLE", "1"}, {"NCCL_DEBUG", "WARN"}});
  EXPECT_NE(job.run.exit_code, 0);
  EXPECT_TRUE(job.LogsContain("NCCL WARN Error: failed to extend /dev/shm/nccl-")) << job.run.out << job.run.err;
  EXPECT_TRUE(job.LogsContain("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-"));
  EXPECT_NE((job.run.out + job.run.err).find("unhandled system error"), std::string::npos) << job.run.out << job.run.err;
}

TEST(SimNccl, InitAllInOneProcessUsesDirectPointers) {
  std::string dir = TempDir() + "/initall";
  RunProgram({"mkdir", "-p", dir});
  RunResult r = RunProgram({NCCL_INIT_ALL, "4"}, {{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR},
                                                  {"P2PSIM_TOPOLOGY", Topology("demo-8gpu.json")},
                                                  {"P2PSIM_HOST", "node0"}, {"P2PSIM_NCCL_DIR", dir},
                                                  {"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", dir + "/nccl.%h.%p.log"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto logs = Logs(dir);
  ASSERT_EQ(logs.size(), 1u);
  Connections c = ParseConnections(logs);
  const std::set<std::string> direct{"P2P/direct pointer"};
  for (int d = 0; d < 4; ++d) EXPECT_EQ(c[std::make_tuple(0, d, (d + 1) % 4)], direct);
  EXPECT_NE(logs[0].find("ncclCommInitAll comm 0x"), std::string::npos);
}

// ---- alltoall, gather and scatter: NCCL's grouped sends and receives reach every peer -------------

// The connIndex-1 (point-to-point) pairs the logs name, with their transports (SHM lines have no
// connIndex and count here too: only p2p operations run in these jobs).
std::map<std::pair<int, int>, std::set<std::string>> P2pPairs(const Job& job) {
  std::map<std::pair<int, int>, std::set<std::string>> out;
  for (auto& [key, transports] : job.conns) {
    auto [conn, src, dst] = key;
    EXPECT_NE(conn, 0) << "a ring connection " << src << " -> " << dst << " in a job without ring collectives";
    out[{src, dst}].insert(transports.begin(), transports.end());
  }
  return out;
}

TEST(SimNccl, MemAllocBuffersForAllreduceAndAlltoall) {
  // nccl_ring -m: ncclMemAlloc buffers, registered with ncclCommRegister; results are checked.
  Job job = RunRing(Topology("demo-8gpu.json"), "node0:4", {{"NCCL_DEBUG_SUBSYS", "INIT,ALLOC,REG"}}, "",
                    "-m -o allreduce,alltoall");
  EXPECT_JOB_OK(job);
  EXPECT_NE(job.run.out.find("all results correct"), std::string::npos);
  EXPECT_EQ(job.run.out.find("WRONG"), std::string::npos);
  EXPECT_TRUE(job.LogsContain("NCCL INFO register comm 0x"));
  EXPECT_TRUE(job.LogsContain("NCCL INFO P2P not supported between GPU0 and GPU4\n"));  // 0-3 and 4-7: no peer access
  const std::set<std::string> cumem{"P2P/CUMEM"};
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      if (a == b) continue;
      auto it = job.conns.find({1, a, b});
      ASSERT_NE(it, job.conns.end()) << "alltoall: no connection " << a << " -> " << b;
      EXPECT_EQ(it->second, cumem) << a << " -> " << b;
    }
  // Both channels per pair, as the sim's send/recv connections; none to itself.
  EXPECT_TRUE(job.LogsContain("Channel 01/1 : 3[3] -> 1[1] via P2P/CUMEM\n"));
  EXPECT_FALSE(job.LogsContain(": 0[0] -> 0[0]"));
}

TEST(SimNccl, AlltoallTransportsPerPairFromTheTopology) {
  // PCIe box: 0-1 and 2-3 share a switch (P2P), across the CPUs SHM. Every ordered pair connects.
  std::string topo = WriteTopology(TempDir() + "/a2a", {PcieHost("box", "")});
  RunProgram({"mkdir", "-p", TempDir() + "/a2a"});
  topo = WriteTopology(TempDir() + "/a2a", {PcieHost("box", "")});
  Job job = RunRing(topo, "box:4", {}, "", "-m -o alltoall");
  EXPECT_JOB_OK(job);
  auto pairs = P2pPairs(job);
  EXPECT_EQ(pairs.size(), 12u);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b) {
        std::set<std::string> want{a / 2 == b / 2 ? "P2P/CUMEM" : "SHM/direct/direct"};
        EXPECT_EQ(pairs[std::make_pair(a, b)], want) << a << " -> " << b;
      }
  EXPECT_FALSE(job.LogsContain("Connected all rings"));  // no ring was built
}

TEST(SimNccl, GatherAndScatterConnectTheRootOnly) {
  Job job = RunRing(Topology("demo-8gpu.json"), "node0:4", {}, "", "-o gather,scatter");
  EXPECT_JOB_OK(job);
  EXPECT_NE(job.run.out.find("all results correct"), std::string::npos);
  std::set<std::pair<int, int>> want, got;
  for (int r = 1; r < 4; ++r) want.insert({r, 0}), want.insert({0, r});
  for (auto& [pair, t] : P2pPairs(job)) got.insert(pair);
  EXPECT_EQ(got, want);
}

// ---- ncclMemAlloc, registration, windows, the 2.29+ calls, the version ----------------------------

std::map<std::string, long long> Probe(const std::string& dir, Env extra = {}) {
  Env env{{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR}, {"P2PSIM_TOPOLOGY", Topology("demo-8gpu.json")},
          {"P2PSIM_HOST", "node0"}, {"P2PSIM_NCCL_DIR", dir}, {"NCCL_DEBUG", "INFO"},
          {"NCCL_DEBUG_SUBSYS", "ALL"}, {"NCCL_DEBUG_FILE", dir + "/nccl.%h.%p.log"}};
  for (auto& [k, v] : extra) env[k] = v;
  RunResult r = RunProgram({NCCL_API_PROBE}, env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::map<std::string, long long> out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (size_t eq = line.find('='); eq != std::string::npos) out[line.substr(0, eq)] = std::stoll(line.substr(eq + 1));
  return out;
}

TEST(SimNcclApi, MemAllocRegistrationWindowsAndSuspendAnswerLikeNccl) {
  std::string dir = TempDir() + "/probe";
  RunProgram({"mkdir", "-p", dir});
  auto v = Probe(dir);
  const std::map<std::string, long long> want{
      {"version", 22809}, {"memalloc_null", 1}, {"memalloc_zero", 0}, {"memalloc_zero_null", 1}, {"memalloc", 0},
      {"memcpy_to", 0}, {"memcpy_from", 0}, {"memcpy_same", 1}, {"memalloc_is_device", 1}, {"memfree_null", 0},
      {"memfree_host", 1}, {"initall", 0}, {"register", 0}, {"register_handle", 1}, {"register_inside", 0},
      {"register_same_handle", 1}, {"register_null_comm", 4}, {"register_host", 0}, {"register_host_null_handle", 1},
      {"register_unknown", 1}, {"deregister1", 0}, {"deregister2", 0}, {"deregister3", 5}, {"deregister_null", 0},
      {"window", 0}, {"window_handle", 1}, {"window_null_buffer", 4}, {"window_null_out", 4}, {"win_user_ptr", 0},
      {"win_user_ptr_same", 1}, {"window_deregister", 0}, {"window_deregister_again", 4}, {"comm_unique_id", 0},
      {"comm_unique_id_null", 4}, {"comm_unique_id_null_comm", 4}, {"suspend", 0}, {"stats_suspended_rc", 0},
      {"stats_suspended", 1}, {"resume", 0}, {"stats_resumed", 0}, {"stats_bad_stat", 4}, {"stats_null_value", 4},
      {"suspend_null_comm", 4}, {"memfree", 0}, {"premul_create", 0}, {"premul_null_op", 4}, {"premul_group", 0},
      {"premul_sum", 1}, {"premul_wrong_type", 4}, {"premul_destroy", 0}, {"premul_destroy_again", 4},
      {"premul_destroy_builtin", 4}, {"fp8_group", 0}, {"fp8_e4m3_sum", 1}, {"fp8_e5m2_sum", 1}};
  for (auto& [name, value] : want) {
    ASSERT_TRUE(v.count(name)) << name;
    EXPECT_EQ(v[name], value) << name;
  }
  auto logs = Logs(dir);
  ASSERT_EQ(logs.size(), 1u);
  for (const char* line : {"NCCL WARN Cuda failure 1 'invalid argument'\n", "NCCL WARN Deregister: Could not find handle\n",
                           "NCCL WARN ncclCommRegister : comm argument is NULL\n",
                           "NCCL WARN ncclCommWindowRegister: invalid pointer (nil) / size 1000\n",
                           "NCCL INFO ncclCommSuspend: rank 0 suspending memory\n",
                           "NCCL INFO ncclCommResume: rank 0 resuming all resources\n",
                           "since it contains segments backed by CPU memory\n", "NCCL INFO register comm 0x"})
    EXPECT_NE(logs[0].find(line), std::string::npos) << line << "\n" << logs[0];
}

TEST(SimNcclApi, VersionFollowsTheSetting) {
  for (auto [setting, code, banner] : {std::tuple{"2.32.6", 23206, "NCCL version 2.32.6+cuda13.0"},
                                       std::tuple{"23007", 23007, "NCCL version 2.30.7+cuda13.0"},
                                       std::tuple{"", 22809, "NCCL version 2.28.9+cuda13.0"}}) {
    std::string dir = TempDir() + "/version" + std::to_string(code);
    RunProgram({"mkdir", "-p", dir});
    auto v = Probe(dir, {{"P2PSIM_NCCL_VERSION", std::string(setting)}});
    EXPECT_EQ(v["version"], code) << setting;
    auto logs = Logs(dir);
    ASSERT_EQ(logs.size(), 1u);
    EXPECT_NE(logs[0].find(std::string("NCCL INFO ") + banner + "\n"), std::string::npos) << setting;
  }
}

TEST(SimNcclApi, ShmLineFollowsTheVersion) {
  // 2.30.7 removed SHM's copy-engine mode: its line reads SHM/direct.
  RunProgram({"mkdir", "-p", TempDir() + "/shm2307"});
  std::string topo = WriteTopology(TempDir() + "/shm2307", {PcieHost("box", "")});
  Job job = RunRing(topo, "box:4", {{"P2PSIM_NCCL_VERSION", "2.32.6"}});
  EXPECT_JOB_OK(job);
  ExpectRing(job, 4, [](int a, int b) { return a / 2 == b / 2 ? "P2P/CUMEM" : "SHM/direct"; });
  EXPECT_TRUE(job.LogsContain("NCCL INFO NCCL version 2.32.6+cuda13.0"));
}

// Older releases print what they printed then: 2.8's and 2.14's lines name a connection's
// ends by bus id (`0[18000]`), SHM in words before 2.13, no connection index on P2P lines before 2.14,
// CUDA IPC (not cuMem) between processes before 2.19, and an Init line without commId before 2.16.
TEST(SimNcclApi, OldReleasesPrintTheirOwnLineForms) {
  std::string topo = Topology("demo-8gpu.json");
  struct Want {
    const char* version;
    const char* p2p;    // GPU0 -> GPU1 (NVLink), in full after the ends
    const char* shm;    // GPU3 -> GPU4 (SYS)
    const char* init;   // rank 0's Init COMPLETE line, after its pointer
    const char* banner;
  };
  for (const Want& w : {Want{"2.8.4", "Channel 00 : 0[18000] -> 1[2a000] via P2P/IPC",
                              "Channel 00 : 3[5d000] -> 4[9a000] via direct shared memory",
                              " rank 0 nranks 8 cudaDev 0 busId 18000 - Init COMPLETE", "NCCL version 2.8.4+cuda13.0"},
                        Want{"2.14.3", "Channel 00/0 : 0[18000] -> 1[2a000] via P2P/IPC",
                              "Channel 00 : 3[5d000] -> 4[9a000] via SHM/direct/direct",
                              " rank 0 nranks 8 cudaDev 0 busId 18000 - Init COMPLETE", "NCCL version 2.14.3+cuda13.0"},
                        Want{"2.18.3", "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
                              "Channel 00 : 3[3] -> 4[4] via SHM/direct/direct",
                              " rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x", "NCCL version 2.18.3+cuda13.0"}}) {
    SCOPED_TRACE(w.version);
    Job job = RunRing(topo, "node0:8", {{"P2PSIM_NCCL_VERSION", w.version}});
    EXPECT_JOB_OK(job);
    EXPECT_TRUE(job.LogsContain(std::string("NCCL INFO ") + w.p2p + "\n"));
    EXPECT_TRUE(job.LogsContain(std::string("NCCL INFO ") + w.shm + "\n"));
    EXPECT_TRUE(job.LogsContain(w.init));
    EXPECT_TRUE(job.LogsContain(w.banner));
    EXPECT_EQ(job.LogsContain("Init START"), std::string(w.version) == "2.18.3");
    EXPECT_FALSE(job.LogsContain("Init timings"));  // 2.22's
    EXPECT_FALSE(job.LogsContain("ncclCommInitRank comm"));  // the API's name came with 2.23
  }
}

// ---- files of aborted jobs ----------------------------------------------------------------------

std::vector<std::string> SimSegments(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind("p2psim-nccl-", 0) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

TEST(SimNcclCleanup, KilledRankLeavesNothingAfterTheRun) {
  // Rank 1 is killed with SIGKILL once the SHM connections are charged (the ring's first
  // collective); rank 0 times out, fails and exits without ncclCommDestroy. p2psim launch sweeps.
  std::string dir = TempDir() + "/killed";
  RunProgram({"mkdir", "-p", dir});
  std::string topo = WriteTopology(dir, {PcieHost("box", "")});
  std::string ring = std::string(NCCL_RING) + " -o allreduce -n 2 -r 2000 " + dir + " 4096";
  std::string cmd = "if [ \"$RANK\" = 1 ]; then " + ring + " & pid=$!; i=0; "
                    "while [ -z \"$(ls " + dir + " | grep p2psim-nccl-shm-)\" ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; "
                    "kill -9 $pid; wait $pid; exit 9; else exec " + ring + "; fi";
  Env env{{"P2PSIM_NCCL_DIR", dir}, {"P2PSIM_NCCL_TIMEOUT", "3"}, {"NCCL_P2P_DISABLE", "1"}};
  RunResult r = RunProgram({P2PSIM_BINARY, "launch", "--topology", topo, "--hosts", "box:2", "--", "sh", "-c", cmd}, env);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("[rank 0] nccl_ring: "), std::string::npos) << r.out << r.err;  // killed mid-run
  EXPECT_EQ(SimSegments(dir), std::vector<std::string>{}) << r.out << r.err;
}

TEST(SimNcclCleanup, NextInitRemovesWhatDeadProcessesLeft) {
  // A communicator directory whose only member is gone, an empty one (its rank killed while making
  // or removing it: a live one is never empty), and a /dev/shm account charged by the dead rank: the
  // next communicator's init removes them all; a live process's directory stays.
  std::string dir = TempDir() + "/stale";
  RunProgram({"mkdir", "-p", dir + "/p2psim-nccl-deadbeef", dir + "/p2psim-nccl-alive", dir + "/p2psim-nccl-empty"});
  RunResult dead = RunProgram({"sh", "-c", "echo $$"});
  std::string pid = dead.out.substr(0, dead.out.find('\n'));
  WriteFile(dir + "/p2psim-nccl-deadbeef/pid." + pid, "");
  WriteFile(dir + "/p2psim-nccl-deadbeef/rank.0", "x");
  WriteFile(dir + "/p2psim-nccl-alive/pid.1", "");  // init: alive as long as the machine runs
  int32_t record[4] = {std::stoi(pid), 0, 5 << 20, 0};
  WriteFile(dir + "/p2psim-nccl-shm-node0-1", std::string(reinterpret_cast<char*>(record), sizeof record));
  RunResult r = RunProgram({NCCL_INIT_ALL, "2"}, {{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR},
                                                  {"P2PSIM_TOPOLOGY", Topology("demo-8gpu.json")},
                                                  {"P2PSIM_HOST", "node0"}, {"P2PSIM_NCCL_DIR", dir}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(SimSegments(dir), std::vector<std::string>{"p2psim-nccl-alive"});
}

// ---- the library's shape, compared with the real libnccl.so.2 ------------------------------------
std::string Fake() { return std::string(P2PTRACE_SIM_LIB_DIR) + "/libnccl.so.2"; }

// name → (binding, value) of the defined functions.
std::map<std::string, std::pair<std::string, std::string>> DynSyms(const std::string& lib) {
  RunResult r = RunProgram({"readelf", "--dyn-syms", "-W", lib});
  std::map<std::string, std::pair<std::string, std::string>> out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string num, value, size, type, bind, vis, ndx, name;
    if (f >> num >> value >> size >> type >> bind >> vis >> ndx >> name && ndx != "UND" && type == "FUNC")
      out[name] = {bind, value};
  }
  return out;
}

TEST(SimNcclLibrary, SonameAndNoVersionNode) {
  RunResult d = RunProgram({"readelf", "-d", Fake()});
  EXPECT_NE(d.out.find("Library soname: [libnccl.so.2]"), std::string::npos);
  EXPECT_EQ(d.out.find("SYMBOLIC"), std::string::npos);
  EXPECT_EQ(d.out.find("libcudart"), std::string::npos);  // cudaGetDevice & co. come from dlsym
  EXPECT_EQ(RunProgram({"readelf", "-V", Fake()}).out.find("Version definition"), std::string::npos);
}

std::set<std::string> Lines(const std::string& path) {
  std::set<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.insert(line);
  return out;
}

TEST(SimNcclLibrary, WeakNcclAndGlobalPncclPairsLikeTheRealOne) {
  // The fake exports symbols/nccl.syms (2.28.9's and the newest release's union); the toolkit's
  // 2.28.9 functions are all there, bound as the real library binds them.
  auto fake = DynSyms(Fake()), real = DynSyms(REAL_NCCL);
  ASSERT_FALSE(real.empty());
  std::set<std::string> fake_names;
  for (auto& [n, v] : fake) fake_names.insert(n);
  EXPECT_EQ(fake_names, Lines(NCCL_SYMS));
  for (auto& [name, bind_value] : real) {
    ASSERT_TRUE(fake.count(name)) << name;
    EXPECT_EQ(fake[name].first, bind_value.first) << name;
    if (name.rfind("pnccl", 0) == 0) {
      EXPECT_EQ(fake[name].second, fake[name.substr(1)].second) << name;
    }
  }
}

TEST(SimNcclLibrary, SelfCallsGoThroughThePlt) {
  // Like the real one: ncclBcast calls ncclBroadcast and ncclCommInitAll calls ncclGetUniqueId
  // through JUMP_SLOT relocations, so an LD_PRELOAD shim sees the nested call.
  for (const std::string& lib : {Fake(), std::string(REAL_NCCL)}) {
    RunResult r = RunProgram({"readelf", "-r", "-W", lib});
    std::set<std::string> slots;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string offset, info, type, value, name;
      if (f >> offset >> info >> type >> value >> name && type == "R_X86_64_JUMP_SLOT") slots.insert(name);
    }
    EXPECT_TRUE(slots.count("ncclBroadcast")) << lib;
    EXPECT_TRUE(slots.count("ncclGetUniqueId")) << lib;
  }
}

TEST(SimNcclLibrary, EveryNameOfTheNewestReleaseResolves) {
  // A program linked against the newest release (or 2.28.9) loads: dlopen the fake and find every
  // function the real libraries export, bound the same way (weak ncclX, strong pncclX).
  void* lib = dlopen(Fake().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto fake = DynSyms(Fake());
  std::vector<std::string> reals{REAL_NCCL};
  const char* home = std::getenv("HOME");
  std::string cached = std::string(home != nullptr ? home : "") + "/.cache/p2ptrace/nccl/2.32.3/libnccl.so.2";
  if (access(cached.c_str(), R_OK) == 0) reals.push_back(cached);  // scripts/fetch-nccl-releases.py's
  size_t checked = 0;
  for (const std::string& real : reals) {
    for (auto& [name, bind_value] : DynSyms(real)) {
      EXPECT_NE(dlsym(lib, name.c_str()), nullptr) << real << ": " << name;
      ASSERT_TRUE(fake.count(name)) << real << ": " << name;
      EXPECT_EQ(fake[name].first, bind_value.first) << real << ": " << name;
      ++checked;
    }
  }
  for (const std::string& name : Lines(NCCL_SYMS)) EXPECT_NE(dlsym(lib, name.c_str()), nullptr) << name;
  EXPECT_GE(checked, 105u);
  // The functions PyTorch 2.15 (NCCL 2.30.7) needed first and 2.29's others.
  for (const char* name : {"ncclCommResume", "ncclCommSuspend", "ncclCommGetUniqueId", "ncclCommGrow",
                           "ncclCommMemStats", "ncclGetLsaMultimemDevicePointer", "ncclGetPeerDevicePointer",
                           "ncclPutSignal", "ncclSignal", "ncclWaitSignal", "ncclWinGetUserPtr"})
    EXPECT_NE(dlsym(lib, name), nullptr) << name;
  dlclose(lib);
}

TEST(SimNcclLibrary, UnmodelledFunctionsSayNotSimulated) {
  // ncclPutSignal (2.29+) is exported but not modelled: the stub answers ncclInvalidUsage (5).
  std::string py = "import ctypes; l = ctypes.CDLL('" + Fake() + "'); print(l.ncclPutSignal())";
#ifdef P2PTRACE_SANITIZED
  GTEST_SKIP() << "python3 is not instrumented: it cannot dlopen a sanitizer-built library";
#endif
  RunResult r = RunProgram({"python3", "-c", py});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "5\n");
  EXPECT_EQ(r.err, "p2psim: ncclPutSignal is not simulated; it returns ncclInvalidUsage (5)\n");
}

// --- the profiler plugin host (tests/sim/nccl/profiler_loader.h) -------------------------------------
// nccl_ring's ranks (`hosts`: two on one host unless said), as release `version` of NCCL, with NCCL_PROFILER_PLUGIN=`plugin`
// (unset when empty); the recording plugins (tests/sim/nccl/recording_profiler.cc) write what they
// were asked into job.dir/rec.txt, returned as its lines.
struct Profiled {
  Job job;
  std::vector<std::string> calls;
  size_t Count(const std::string& prefix) const {
    size_t n = 0;
    for (const std::string& c : calls) n += c.find(prefix) != std::string::npos;
    return n;
  }
};
Profiled RunProfiled(const std::string& version, const std::string& plugin, Env env = {}, const std::string& options = "",
                     const std::string& hosts = "node0:2") {
  std::string rec = TempDir() + "/rec" + std::to_string(rand()) + ".txt";
  env["P2PSIM_NCCL_VERSION"] = version;
  env["RECORDING_PROFILER_OUT"] = rec;
  env["NCCL_PROFILER_PLUGIN"] = plugin.empty() ? std::optional<std::string>() : plugin;
  Profiled p;
  p.job = RunRing(Topology("demo-8gpu.json"), hosts, env, "", options);
  std::istringstream in(ReadAll(rec));
  for (std::string line; std::getline(in, line);) p.calls.push_back(line);
  return p;
}
size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
std::string Plugin(const std::string& name) { return std::string(P2PTRACE_SIM_LIB_DIR) + "/" + name + ".so"; }

TEST(SimNcclProfiler, APluginIsLoadedOnceInitialisedPerCommunicatorAndFinalisedAtItsDestroy) {
  // -s: each rank also makes a one-rank split of the world: two communicators per process.
  Profiled p = RunProfiled("2.28.9", Plugin("librecording-profiler-v5"), {}, "-s");
  EXPECT_JOB_OK(p.job);
  ASSERT_EQ(p.calls.size(), 8u) << p.job.run.err;
  EXPECT_EQ(p.Count("init v5 hash="), 4u);
  EXPECT_EQ(p.Count(" nnodes=1 nranks=2 rank=0 mask_in=0"), 1u);  // v5's arguments, in v5's order
  EXPECT_EQ(p.Count(" nnodes=1 nranks=2 rank=1 mask_in=0"), 1u);
  EXPECT_EQ(p.Count(" nnodes=1 nranks=1 rank=0 mask_in=0"), 2u);
  EXPECT_EQ(p.Count("finalize v5"), 4u);
  ASSERT_EQ(p.job.logs.size(), 2u);
  for (const std::string& log : p.job.logs) {  // once per process, for both of its communicators
    EXPECT_EQ(Count(log, "NCCL INFO Successfully loaded external profiler plugin " + Plugin("librecording-profiler-v5")), 1u);
    EXPECT_EQ(Count(log, "NCCL INFO PROFILER/Plugin: Loaded recording-v5 (v5)"), 1u);
    EXPECT_EQ(Count(log, "NCCL INFO PROFILER/Plugin: Closing profiler plugin recording-v5"), 1u);  // at the last destroy
  }
  EXPECT_TRUE(p.job.LogsContain("NCCL INFO NCCL_PROFILER_PLUGIN set by environment to " + Plugin("librecording-profiler-v5")));
}

TEST(SimNcclProfiler, EachReleaseTakesTheNewestVersionItKnows) {
  // The plugin exports v7 and v4: 2.28 looks from v5 down and finds v4, 2.31.2 finds v7, 2.26 (v3
  // down) nothing.
  Profiled old = RunProfiled("2.28.9", Plugin("librecording-profiler-v7v4"));
  EXPECT_JOB_OK(old.job);
  EXPECT_EQ(old.Count("init v4 hash="), 2u);
  EXPECT_TRUE(old.job.LogsContain("PROFILER/Plugin: Loaded recording-v4 (v4)"));
  Profiled now = RunProfiled("2.31.2", Plugin("librecording-profiler-v7v4"));
  EXPECT_JOB_OK(now.job);
  EXPECT_EQ(now.Count("init v7 hash="), 2u);
  EXPECT_TRUE(now.job.LogsContain("PROFILER/Plugin: Loaded recording-v7 (v7)"));
  Profiled none = RunProfiled("2.26.6", Plugin("librecording-profiler-v7v4"));
  EXPECT_JOB_OK(none.job);
  EXPECT_TRUE(none.calls.empty());
  EXPECT_TRUE(none.job.LogsContain("PROFILER/Plugin: failed to find ncclProfiler_v3"));
  EXPECT_TRUE(none.job.LogsContain("External profiler plugin"));
  Profiled v1 = RunProfiled("2.23.4", Plugin("librecording-profiler-v1"));  // v1's init: context and mask only
  EXPECT_JOB_OK(v1.job);
  EXPECT_EQ(v1.Count("init v1 mask_in="), 2u);
  EXPECT_TRUE(v1.job.LogsContain("PROFILER/Plugin: loaded ncclProfiler_v1."));
}

TEST(SimNcclProfiler, TheNameRulesOfEachRelease) {
  // A bare name is tried as given, then as libnccl-profiler-<name>.so (2.27.5+); "none" turns the
  // plugin off (2.28+); unset, libnccl-profiler.so is looked for and not found.
  Profiled bare = RunProfiled("2.28.9", "recording");
  EXPECT_JOB_OK(bare.job);
  EXPECT_EQ(bare.Count("init v5"), 2u);
  Profiled off = RunProfiled("2.28.9", "none");
  EXPECT_JOB_OK(off.job);
  EXPECT_TRUE(off.calls.empty());
  EXPECT_TRUE(off.job.LogsContain("NCCL_PROFILER_PLUGIN set by environment to none"));
  EXPECT_FALSE(off.job.LogsContain("Could not find"));
  Profiled unset = RunProfiled("2.28.9", "");
  EXPECT_JOB_OK(unset.job);
  EXPECT_TRUE(unset.calls.empty());
  EXPECT_TRUE(unset.job.LogsContain("PROFILER/Plugin: Could not find: libnccl-profiler.so"));
  // 2.27.3 opened only lib*.so names as given: a path became libnccl-profiler-<path>.so (NVIDIA/nccl#1732).
  Profiled regressed = RunProfiled("2.27.3", Plugin("librecording-profiler-v5"));
  EXPECT_JOB_OK(regressed.job);
  EXPECT_TRUE(regressed.calls.empty());
  EXPECT_TRUE(regressed.job.LogsContain("Could not find: libnccl-profiler-" + Plugin("librecording-profiler-v5") + ".so"));
}

TEST(SimNcclProfiler, AFailedInitIsHandledAsEachReleaseHandlesIt) {
  Env fail{{"RECORDING_PROFILER_FAIL_INIT", "1"}};
  // Up to 2.27: WARN, and no profiler for the process (no finalize).
  Profiled old = RunProfiled("2.27.5", Plugin("librecording-profiler-v5"), fail);
  EXPECT_JOB_OK(old.job);
  EXPECT_EQ(old.Count("init-failed v4"), 0u);
  EXPECT_EQ(old.Count("init-failed v5"), 0u);  // 2.27 looks from v4 down: this plugin has none of v1-v4
  Profiled old4 = RunProfiled("2.27.5", Plugin("librecording-profiler-v7v4"), fail);
  EXPECT_JOB_OK(old4.job);
  EXPECT_EQ(old4.Count("init-failed v4"), 2u);
  EXPECT_EQ(old4.Count("finalize"), 0u);
  EXPECT_TRUE(old4.job.LogsContain("NCCL WARN Profiler init failed with error (3). Continue without profiler."));
  // 2.28 and 2.29: an INFO line, and the plugin is still called (finalize with the context it made).
  Profiled kept = RunProfiled("2.28.9", Plugin("librecording-profiler-v5"), fail);
  EXPECT_JOB_OK(kept.job);
  EXPECT_EQ(kept.Count("init-failed v5"), 2u);
  EXPECT_EQ(kept.Count("finalize v5"), 2u);
  EXPECT_TRUE(kept.job.LogsContain("NCCL INFO Profiler init failed with error '3'"));
  // 2.30.3 on: the communicator lets the plugin go at once.
  Profiled dropped = RunProfiled("2.30.7", Plugin("librecording-profiler-v5"), fail);
  EXPECT_JOB_OK(dropped.job);
  EXPECT_EQ(dropped.Count("init-failed v5"), 2u);
  EXPECT_EQ(dropped.Count("finalize"), 0u);
  EXPECT_TRUE(dropped.job.LogsContain("NCCL INFO Profiler init failed with error '3'"));
  // Its closing line is NCCL_DESTROY's from 2.30, a subsystem NCCL does not show by default.
  EXPECT_FALSE(dropped.job.LogsContain("Closing profiler plugin"));
  Profiled shown = RunProfiled("2.30.7", Plugin("librecording-profiler-v5"), {{"RECORDING_PROFILER_FAIL_INIT", "1"},
                                                                              {"NCCL_DEBUG_SUBSYS", "INIT,ENV,DESTROY"}});
  EXPECT_TRUE(shown.job.LogsContain("NCCL INFO PROFILER/Plugin: Closing profiler plugin recording-v5"));
}

TEST(SimNcclProfiler, TheActivationMaskIsSaidFrom2_29) {
  Profiled p = RunProfiled("2.30.7", Plugin("librecording-profiler-v5"), {{"RECORDING_PROFILER_MASK", "70"}});
  EXPECT_JOB_OK(p.job);
  EXPECT_TRUE(p.job.LogsContain("NCCL INFO Profiler event mask: 0x46 (70) - Enabled: Coll P2p KernelCh"));
  Profiled q = RunProfiled("2.28.9", Plugin("librecording-profiler-v5"), {{"RECORDING_PROFILER_MASK", "70"}});
  EXPECT_FALSE(q.job.LogsContain("Profiler event mask"));
}

// The events a plugin records, by process: p2p and collective operations with the times of their
// kernel channels (KernelCh start timer to KernelChStop's timer).
struct TimedOp {
  std::string func;
  int rank = -1, peer = -1;
  uint64_t count = 0;
  std::vector<uint64_t> ns;  // per channel
};
std::vector<TimedOp> TimedOps(const Profiled& p) {
  static const std::regex kOp(R"(pid=(\d+) start v\d id=(\d+) parent=\d+ type=\d+ rank=(\d+) (?:p2p|coll) func=(\w+) (?:peer=(\d+) )?(?:seq=\d+ )?count=(\d+))");
  static const std::regex kCh(R"(pid=(\d+) start v\d id=(\d+) parent=(\d+) type=64 rank=\d+ kernel_ch channel=\d+ start=(\d+))");
  static const std::regex kStop(R"(pid=(\d+) state v\d id=(\d+) 22 stop=(\d+))");
  std::map<std::pair<std::string, int>, size_t> op_of;                 // (pid, id) → op
  std::map<std::pair<std::string, int>, std::pair<size_t, uint64_t>> ch;  // (pid, id) → (op, start)
  std::vector<TimedOp> ops;
  for (const std::string& line : p.calls) {
    std::smatch m;
    if (std::regex_search(line, m, kOp)) {
      TimedOp op;
      op.rank = std::stoi(m[3]);
      op.func = m[4];
      op.peer = m[5].matched ? std::stoi(m[5]) : -1;
      op.count = std::stoull(m[6]);
      op_of[{m[1], std::stoi(m[2])}] = ops.size();
      ops.push_back(op);
    } else if (std::regex_search(line, m, kCh)) {
      auto it = op_of.find({m[1], std::stoi(m[3])});
      if (it != op_of.end()) ch[{m[1], std::stoi(m[2])}] = {it->second, std::stoull(m[4])};
    } else if (std::regex_search(line, m, kStop)) {
      auto it = ch.find({m[1], std::stoi(m[2])});
      if (it != ch.end()) ops[it->second.first].ns.push_back(std::stoull(m[3]) - it->second.second);
    }
  }
  return ops;
}

TEST(SimNcclProfiler, EachSendAndReceiveOfAGroupIsTimedOnItsOwnPair) {
  // The demo's 8-GPU ring: NVLink within each half, SHM across (3 → 4, 7 → 0). Every rank sends to
  // r+1 and receives from r-1 in one group: the group takes as long as its SHM half, but each
  // operation's kernel channel carries its own pair's time.
  Profiled p = RunProfiled("2.28.9", Plugin("librecording-profiler-v5"),
                           {{"RECORDING_PROFILER_MASK", "70"}},        // Coll | P2p | KernelCh
                           "-o sendrecv -b 16M -e 16M", "node0:8");  // 16 MiB: far past the launch time
  EXPECT_JOB_OK(p.job);
  std::vector<TimedOp> ops = TimedOps(p);
  ASSERT_EQ(ops.size(), 16u) << p.job.run.err;
  auto shm = [](int a, int b) { return (a == 3 && b == 4) || (a == 7 && b == 0); };
  double slowest_nvlink = 1e18, fastest_shm = 0;
  for (const TimedOp& op : ops) {
    ASSERT_EQ(op.ns.size(), 1u) << op.func << " " << op.rank;  // one channel per peer
    int src = op.func == "Send" ? op.rank : op.peer, dst = op.func == "Send" ? op.peer : op.rank;
    EXPECT_EQ(dst, (src + 1) % 8) << op.func << " " << op.rank << " " << op.peer;
    double gbps = double(op.count * 4) / double(op.ns[0]);
    if (shm(src, dst)) fastest_shm = std::max(fastest_shm, gbps);
    else slowest_nvlink = std::min(slowest_nvlink, gbps);
  }
  EXPECT_GE(slowest_nvlink, 5 * fastest_shm) << slowest_nvlink << " vs " << fastest_shm;
  EXPECT_GT(fastest_shm, 0);
}

TEST(SimNcclProfiler, ACollectiveIsTimedOnEveryChannelItRanOn) {
  Profiled p = RunProfiled("2.28.9", Plugin("librecording-profiler-v5"), {{"RECORDING_PROFILER_MASK", "70"}},
                           "-o allreduce");
  EXPECT_JOB_OK(p.job);
  std::vector<TimedOp> ops = TimedOps(p);
  ASSERT_EQ(ops.size(), 2u);  // one allreduce per rank
  for (const TimedOp& op : ops) {
    EXPECT_EQ(op.func, "AllReduce");
    ASSERT_EQ(op.ns.size(), 2u);  // the sim's two channels
    EXPECT_EQ(op.ns[0], op.ns[1]);
    EXPECT_GT(op.ns[0], 0u);
  }
}

TEST(SimNcclProfiler, OlderVersionsGetTheirOwnView) {
  // v3 (2.26): kernel channels without timers, no KernelChStop; v1 (2.23): no kernel channels, and
  // func and datatype as NCCL's enums (Send = 6, ncclFloat32 = 7).
  Profiled v3 = RunProfiled("2.26.6", Plugin("librecording-profiler-v3"), {{"RECORDING_PROFILER_MASK", "70"}},
                            "-o sendrecv");
  EXPECT_JOB_OK(v3.job);
  EXPECT_EQ(v3.Count("kernel_ch channel="), 4u);  // both ranks' send and receive, one channel each
  EXPECT_EQ(v3.Count(" start="), 0u);
  EXPECT_EQ(v3.Count(" 22"), 0u);
  EXPECT_EQ(v3.Count("p2p func=Send peer=1 count=4096 datatype=ncclFloat32"), 1u);
  Profiled v1 = RunProfiled("2.23.4", Plugin("librecording-profiler-v1"), {{"RECORDING_PROFILER_MASK", "70"}},
                            "-o sendrecv");
  EXPECT_JOB_OK(v1.job);
  EXPECT_EQ(v1.Count("kernel_ch"), 0u);
  EXPECT_EQ(v1.Count(" 22"), 0u);
  EXPECT_EQ(v1.Count("p2p func=6 peer=1 count=4096 datatype=7"), 1u);  // rank 0's send
  EXPECT_EQ(v1.Count("p2p func=7 peer=1 count=4096 datatype=7"), 1u);  // its receive
}

TEST(SimNcclProfiler, NothingIsToldThatTheMaskDoesNotAsk) {
  Profiled p = RunProfiled("2.28.9", Plugin("librecording-profiler-v5"), {}, "-o sendrecv");  // mask 0
  EXPECT_JOB_OK(p.job);
  EXPECT_EQ(p.Count(" start "), 0u);
  EXPECT_EQ(p.Count("init v5"), 2u);
}

}  // namespace
