// NCCL between two simulated hosts (tests/sim/topologies/two-node-ib.json), node1's network broken
// one way at a time: no GPUDirect RDMA, no libibverbs, its port down, NCCL_IB_DISABLE. The traced
// job's report names, on both cross-host pairs, the cause that node1's own side shows (its NCCL
// log's lines, its job-start probe), never "unknown", and costs it against the NICs' line rate; the
// healthy job has none.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::testing::Env;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

struct Case {
  std::string name;
  std::string node1_change;  // JSON merged into node1's host object
  Env env;                   // the job's environment
  std::string transport;     // the cross-host pairs' class
  std::string cause;         // the cause both must name ("" for none)
};

std::ostream& operator<<(std::ostream& o, const Case& c) { return o << c.name; }

class NetCause : public ::testing::TestWithParam<Case> {};

// The traced ring job on two hosts of `topo`, and its report as JSON.
json TracedReport(const std::string& name, const json& topo, const Env& extra) {
  std::string dir = TempDir() + "/net-" + name;
  fs::create_directories(dir + "/id");
  fs::create_directories(dir + "/rendezvous");
  std::ofstream(dir + "/topology.json") << topo.dump(1);
  Env env = {{"P2PSIM_NCCL_TIMEOUT", "30"}, {"P2PSIM_NCCL_DIR", dir + "/rendezvous"}, {"NCCL_DEBUG", std::nullopt},
             {"NCCL_DEBUG_FILE", std::nullopt}, {"NCCL_DEBUG_SUBSYS", std::nullopt}, {"P2PTRACE_DIR", std::nullopt},
             {"P2PTRACE_NCCL_TAP", std::nullopt}, {"P2PTRACE_NCCL_TAP_FILE", std::nullopt},
             {"P2PTRACE_NCCL_FORWARD", std::nullopt}, {"P2PTRACE_NCCL_LOG", std::nullopt},
             {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"LD_PRELOAD", std::nullopt}, {"NO_COLOR", "1"}};
  for (const auto& [k, v] : extra) env[k] = v;
  RunResult job = RunProgram({P2PTRACE_CLI, "run", "--dir", dir + "/trace", "--", P2PSIM, "launch", "--topology",
                              dir + "/topology.json", "--hosts", "node0:2,node1:2", "--", NCCL_RING, dir + "/id"},
                             env);
  EXPECT_EQ(job.exit_code, 0) << job.out << job.err;
  EXPECT_NE(job.out.find("all results correct"), std::string::npos) << job.out;
  RunResult rep = RunProgram({P2PTRACE_CLI, "report", dir + "/trace", "--json"}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  return json::parse(rep.out, nullptr, false);
}

json TwoNodeTopology() { return json::parse(std::ifstream(std::string(P2PTRACE_TOPOLOGY_DIR) + "/two-node-ib.json")); }

TEST_P(NetCause, BothCrossHostPairsNameNode1sCause) {
  const Case& c = GetParam();
  json topo = TwoNodeTopology();
  topo["hosts"][1].merge_patch(json::parse(c.node1_change));
  json j = TracedReport(c.name, topo, c.env);
  ASSERT_TRUE(j.is_object());
  std::set<std::string> cross;  // "node0->node1", "node1->node0"
  for (const json& p : j["pairs"]) {
    if (p["src"]["host"] == p["dst"]["host"]) continue;
    std::string name = p["src"]["host"].get<std::string>() + "->" + p["dst"]["host"].get<std::string>();
    cross.insert(name);
    EXPECT_EQ(p["transport"], c.transport) << name << "\n" << p.dump(1);
    std::set<std::string> ids;
    for (const json& cause : p["causes"]) ids.insert(cause["id"].get<std::string>());
    EXPECT_EQ(ids.count("unknown"), 0u) << name << "\n" << p["causes"].dump(1);
    for (const std::string& id : ids)  // node1's side is explained: nobody's "does not say why" stays
      EXPECT_FALSE(id.ends_with("-unexplained")) << name << "\n" << p["causes"].dump(1);
    if (c.cause.empty()) {
      EXPECT_TRUE(ids.empty()) << name << "\n" << p["causes"].dump(1);
      EXPECT_FALSE(p["fallback"].get<bool>()) << name;
      continue;
    }
    EXPECT_EQ(ids.count(c.cause), 1u) << name << "\n" << p["causes"].dump(1);
    EXPECT_TRUE(p["fallback"].get<bool>()) << name;
    EXPECT_EQ(p["expected"], "net_gdr") << name;
    // What the fallback cost is measured against the NICs' own line rate (200 Gb/s: 25 GB/s).
    EXPECT_EQ(p["best_gbps"], 25.0) << name << "\n" << p.dump(1);
    EXPECT_NE(p["best_basis"].get<std::string>().find("node1 mlx5_0 200 Gb/s"), std::string::npos) << p["best_basis"];
    for (const json& cause : p["causes"])
      for (const json& ev : cause["evidence"])
        EXPECT_EQ(ev.get<std::string>().rfind("node1: ", 0), 0u) << name << ": the evidence says whose side: " << ev;
  }
  EXPECT_EQ(cross, (std::set<std::string>{"node0->node1", "node1->node0"}));
}

INSTANTIATE_TEST_SUITE_P(
    TwoHosts, NetCause,
    ::testing::Values(
        Case{"healthy", "{}", {}, "net_gdr", ""},
        // The job-start probe sees no nvidia_peermem on node1 and a kernel too old for DMA-BUF; NCCL's
        // own line (in its NET subsystem) says only that neither worked.
        Case{"no_gdr", R"({"gdr": false})", {}, "net_ib", "gdr-no-module"},
        Case{"no_gdr_net_lines", R"({"gdr": false})", {{"NCCL_DEBUG_SUBSYS", "INIT,ENV,NET"}}, "net_ib", "gdr-no-module"},
        // No peermem, but DMA-BUF (Linux 5.12+, open modules): NCCL 2.13+ has GPUDirect RDMA; 2.12 not.
        Case{"dmabuf", R"({"gdr": false, "dmabuf": true})", {}, "net_gdr", ""},
        Case{"dmabuf_2_12", R"({"gdr": false, "dmabuf": true})", {{"P2PSIM_NCCL_VERSION", "2.12.12"}}, "net_ib",
             "gdr-no-module"},
        // node1's NIC under the CPU, its GPUs under a switch: PHB, beyond NCCL_NET_GDR_LEVEL's PXB. The
        // job-start probe computes it; NCCL prints the distance only in its NET subsystem.
        Case{"nic_far_from_gpus", R"({"nics": [{"name": "mlx5_0", "parent": "cpu0", "kind": "ib"}]})", {}, "net_ib",
             "gdr-distance"},
        Case{"nic_far_net_lines", R"({"nics": [{"name": "mlx5_0", "parent": "cpu0", "kind": "ib"}]})",
             {{"NCCL_DEBUG_SUBSYS", "INIT,ENV,NET"}}, "net_ib", "gdr-distance"},
        // The user's level lets the PHB path through: GPUDirect RDMA again.
        Case{"nic_far_level_phb", R"({"nics": [{"name": "mlx5_0", "parent": "cpu0", "kind": "ib"}]})",
             {{"NCCL_NET_GDR_LEVEL", "PHB"}}, "net_gdr", ""},
        Case{"no_gdr_module_2_12", R"({"gdr": false})",
             {{"NCCL_DEBUG_SUBSYS", "INIT,ENV,NET"}, {"P2PSIM_NCCL_VERSION", "2.12.12"}}, "net_ib", "gdr-no-module"},
        Case{"no_verbs", R"({"libibverbs": false})", {}, "net_socket", "net-no-verbs"},
        Case{"port_down", R"({"nics": [{"name": "mlx5_0", "parent": "sw0", "kind": "ib", "state": "DOWN"}]})", {},
             "net_socket", "net-no-rdma-device"},
        // nvidia_peermem loaded but not registered: NCCL before 2.23 looks only at the registration.
        Case{"peermem_unregistered_2_22", R"({"peermem_registered": false})", {{"P2PSIM_NCCL_VERSION", "2.22.3"}},
             "net_ib", "peermem-not-registered"}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

std::vector<json> CrossHostPairs(const json& report) {
  std::vector<json> out;
  for (const json& p : report["pairs"])
    if (p["src"]["host"] != p["dst"]["host"]) out.push_back(p);
  return out;
}

// Each host has a second NIC under its CPU, and the job is told to use it (NCCL_IB_HCA=mlx5_1):
// each side's line names the NIC (from NCCL's `NET/IB : Using [0]mlx5_1:1/IB` line), its path from
// the GPU (PHB), that it is not the GPU's nearest (mlx5_0, PIX: crosses rails), and the GPUDirect
// RDMA it loses by the distance rule.
TEST(NetSides, EachSidesNicAndACrossRailChoice) {
  json topo = TwoNodeTopology();
  for (json& h : topo["hosts"]) h["nics"].push_back({{"name", "mlx5_1"}, {"parent", "cpu0"}, {"kind", "ib"}});
  json j = TracedReport("cross-rail", topo, {{"NCCL_IB_HCA", "=mlx5_1"}});
  ASSERT_TRUE(j.is_object());
  std::vector<json> pairs = CrossHostPairs(j);
  ASSERT_EQ(pairs.size(), 2u);
  for (const json& p : pairs) {
    EXPECT_EQ(p["transport"], "net_ib") << p.dump(1);
    ASSERT_EQ(p["net"].size(), 2u) << p.dump(1);
    EXPECT_EQ(p["net"][0]["host"], p["src"]["host"]);
    for (const json& side : p["net"]) {
      EXPECT_EQ(side["nic"], "mlx5_1") << side;
      EXPECT_EQ(side["nic_index"], 0) << side;
      EXPECT_EQ(side["nic_path"], "PHB") << side;
      EXPECT_EQ(side["nearest_nic"], "mlx5_0") << side;
      EXPECT_EQ(side["nearest_path"], "PIX") << side;
      EXPECT_EQ(side["crosses_rails"], true) << side;
      EXPECT_EQ(side["gdr"], false) << side;
    }
    std::set<std::string> ids;
    for (const json& cause : p["causes"]) ids.insert(cause["id"].get<std::string>());
    EXPECT_EQ(ids, std::set<std::string>{"gdr-distance"}) << p["causes"].dump(1);
  }
  // Without the setting, each side uses its nearest NIC and keeps GPUDirect RDMA.
  json healthy = TracedReport("rail-aligned", topo, {});
  for (const json& p : CrossHostPairs(healthy)) {
    EXPECT_EQ(p["transport"], "net_gdr") << p.dump(1);
    for (const json& side : p["net"]) {
      EXPECT_EQ(side["nic"], "mlx5_0") << side;
      EXPECT_EQ(side["crosses_rails"], false) << side;
    }
  }
}

// node1's GPU1 under a switch of its own, PHB from the NIC, NVLinked to GPU0 beside the NIC: NCCL
// relays its sends through GPU0's rank (PXN), and GPU0's distance keeps GPUDirect RDMA both ways.
TEST(NetSides, APxnRelayIsNamedOnItsSide) {
  json topo = TwoNodeTopology();
  topo["hosts"][1]["switches"].push_back({{"id", "sw1"}, {"parent", "cpu0"}});
  topo["hosts"][1]["gpus"][1]["parent"] = "sw1";
  json j = TracedReport("pxn", topo, {});
  ASSERT_TRUE(j.is_object());
  bool relayed = false;
  for (const json& p : CrossHostPairs(j)) {
    EXPECT_EQ(p["transport"], "net_gdr") << p.dump(1);
    EXPECT_TRUE(p["causes"].empty()) << p["causes"].dump(1);
    for (const json& side : p["net"])
      if (side["host"] == "node1" && p["src"]["host"] == "node1") {
        EXPECT_EQ(side["proxy_rank"], 2) << side;  // node1's GPU0 is rank 2
        EXPECT_EQ(side["nic_path"], "PHB") << side;
        EXPECT_EQ(side["crosses_rails"], false) << "a PXN relay is NCCL's own way round the distance: " << side;
        relayed = true;
      }
  }
  EXPECT_TRUE(relayed) << j["pairs"].dump(1);
}

// An NCCL_IB_HCA that names no device: NCCL finds none and takes sockets; the job-start check
// foresaw it and says which setting.
TEST(NetSides, AnIbHcaThatMatchesNothingLeavesSockets) {
  json j = TracedReport("hca-none", TwoNodeTopology(), {{"NCCL_IB_HCA", "mlx4"}});
  ASSERT_TRUE(j.is_object());
  std::vector<json> pairs = CrossHostPairs(j);
  ASSERT_EQ(pairs.size(), 2u);
  for (const json& p : pairs) {
    EXPECT_EQ(p["transport"], "net_socket") << p.dump(1);
    bool named = false;
    for (const json& cause : p["causes"])
      if (cause["id"] == "net-no-rdma-device")
        for (const json& ev : cause["evidence"])
          named |= ev.get<std::string>().find("NCCL_IB_HCA=mlx4 selects none of this node's RDMA NICs (mlx5_0)") !=
                   std::string::npos;
    EXPECT_TRUE(named) << p["causes"].dump(1);
    EXPECT_EQ(p["net"][0]["network"], "Socket") << p.dump(1);
  }
}

}  // namespace
