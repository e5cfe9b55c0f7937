// `p2ptrace doctor` (tools/doctor/node_check.cc) on simulated sysroots: this node's side of the
// network — each RDMA NIC's place and port, GPUDirect RDMA's means, each GPU's NIC and the path
// NCCL would take to another node, with its cause — in text, JSON and Prometheus.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"

namespace p2ptrace {
namespace {

using nlohmann::json;
using testing::Env;
using testing::RunProgram;
using testing::RunResult;

struct Node {
  std::string root, topology, host;
};

// demo-8gpu's host with `change` merged into it, written out and laid down as a sysroot.
Node DemoNode(const std::string& name, const std::string& change) {
  std::string dir = testing::TempDir() + "/net-" + name;
  std::filesystem::create_directories(dir);
  json topo = json::parse(std::ifstream(std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json"));
  topo["hosts"][0].merge_patch(json::parse(change));
  Node n{dir + "/root", dir + "/topology.json", topo["hosts"][0]["name"]};
  std::ofstream(n.topology) << topo.dump(1);
  EXPECT_EQ(RunProgram({P2PSIM, "sysroot", n.topology, n.host, n.root}).exit_code, 0);
  return n;
}

RunResult Doctor(const Node& n, std::vector<std::string> args, Env env = {}) {
  args.insert(args.begin(), {P2PTRACE_CLI, "doctor"});
  env["P2PTRACE_SYSROOT"] = n.root;
  env["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  env["P2PSIM_TOPOLOGY"] = n.topology;
  env["P2PSIM_HOST"] = n.host;
  if (!env.count("NCCL_DMABUF_ENABLE")) env["NCCL_DMABUF_ENABLE"] = std::nullopt;
  return RunProgram(args, env);
}

std::map<int, json> NetworkGpus(const json& j) {
  std::map<int, json> out;
  for (const json& g : j["network"]["gpus"]) out[g["gpu"].get<int>()] = g;
  return out;
}

std::string CauseIds(const json& g) {
  std::string ids;
  for (const json& c : g["causes"])
    if (c["role"] != "context") ids += (ids.empty() ? "" : ",") + c["id"].get<std::string>();
  return ids;
}

// The demo node has one NIC per CPU, under the switch of GPUs 0-1 (mlx5_0) and 4-5 (mlx5_1): GPUs
// 2-3 and 6-7 sit under another switch, PHB from their NIC, beyond NCCL_NET_GDR_LEVEL's PXB. NCCL
// relays them through an NVLink peer near the NIC (PXN), unless NCCL_PXN_DISABLE=1.
TEST(DoctorNetwork, EachGpusNicPathAndWhyItLosesGpuDirectRdma) {
  Node n = DemoNode("demo", "{}");
  json pxn = json::parse(Doctor(n, {"--json", "--no-cuda"}).out, nullptr, false);
  ASSERT_TRUE(pxn.is_object());
  for (const auto& [gpu, g] : NetworkGpus(pxn)) {
    EXPECT_EQ(g["predicted"], "net_gdr") << gpu << ": PXN relays it";
    if (gpu % 4 >= 2) EXPECT_EQ(g["pxn_relay"], gpu - gpu % 4) << gpu << ": the first NVLink peer beside the NIC";
    else EXPECT_TRUE(g["pxn_relay"].is_null()) << gpu;
  }
  RunResult r = Doctor(n, {"--json", "--no-cuda"}, {{"NCCL_PXN_DISABLE", "1"}});
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out << r.err;
  ASSERT_EQ(j["network"]["nics"].size(), 2u);
  EXPECT_EQ(j["network"]["nics"][0]["name"], "mlx5_0");
  EXPECT_EQ(j["network"]["nics"][0]["port_state"], "ACTIVE");
  EXPECT_EQ(j["network"]["nics"][0]["rate_gbps"], 200);
  EXPECT_EQ(j["network"]["nics"][1]["numa_node"], 1);
  EXPECT_FALSE(j["network"]["nics"][0]["bus_id"].get<std::string>().empty());
  std::map<int, json> gpus = NetworkGpus(j);
  ASSERT_EQ(gpus.size(), 8u);
  for (int g = 0; g < 8; ++g) {
    bool near = g % 4 < 2;
    EXPECT_EQ(gpus[g]["nic"], g < 4 ? "mlx5_0" : "mlx5_1") << g;
    EXPECT_EQ(gpus[g]["path"], near ? "PIX" : "PHB") << g;
    EXPECT_EQ(gpus[g]["predicted"], near ? "net_gdr" : "net_ib") << g;
    EXPECT_EQ(gpus[g]["fallback"], !near) << g;
    EXPECT_EQ(CauseIds(gpus[g]), near ? "" : "gdr-distance") << g;
  }
  std::string why = gpus[2]["causes"][0]["evidence"][0];
  EXPECT_NE(why.find("GPU2 and mlx5_0, the RDMA NIC NCCL pairs it with, are PHB apart, beyond NCCL_NET_GDR_LEVEL PXB"), std::string::npos) << why;
  bool finding = false;
  for (const json& f : j["findings"])
    if (f["id"] == "gdr-distance") finding = f["pairs"].size() == 4u && f["pairs"][0] == "GPU2-another node";
  EXPECT_TRUE(finding) << j["findings"].dump(1);

  // The user's level lets PHB through.
  json phb = json::parse(
      Doctor(n, {"--json", "--no-cuda"}, {{"NCCL_PXN_DISABLE", "1"}, {"NCCL_NET_GDR_LEVEL", "PHB"}}).out, nullptr, false);
  EXPECT_EQ(NetworkGpus(phb)[2]["predicted"], "net_gdr");

  // The text says the same, a GPU per line.
  RunResult text = Doctor(n, {"--no-cuda"}, {{"NCCL_PXN_DISABLE", "1"}});
  EXPECT_NE(text.out.find("GPU2  mlx5_0   PHB   net_ib      expected net_gdr    FALLBACK"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("GPU0  mlx5_0   PIX   net_gdr"), std::string::npos) << text.out;
}

// GPUDirect RDMA's means: without nvidia_peermem, DMA-BUF carries it where the kernel (5.12+) and the
// open driver allow, unless NCCL_DMABUF_ENABLE=0; a port that is down leaves sockets.
TEST(DoctorNetwork, PeerMemoryDmaBufAndPortsDecideTheNetworkPath) {
  Node dmabuf = DemoNode("dmabuf", R"({"gdr": false, "dmabuf": true})");
  json j = json::parse(Doctor(dmabuf, {"--json", "--no-cuda"}).out, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["network"]["dmabuf"]["possible"], true);
  EXPECT_EQ(NetworkGpus(j)[0]["predicted"], "net_gdr");

  json off = json::parse(Doctor(dmabuf, {"--json", "--no-cuda"}, {{"NCCL_DMABUF_ENABLE", "0"}}).out, nullptr, false);
  json g0 = NetworkGpus(off)[0];
  EXPECT_EQ(g0["predicted"], "net_ib");
  EXPECT_EQ(CauseIds(g0), "gdr-no-module");
  EXPECT_NE(g0["causes"][0]["evidence"][0].get<std::string>().find("NCCL_DMABUF_ENABLE=0"), std::string::npos) << g0.dump(1);

  Node old_kernel = DemoNode("nogdr", R"({"gdr": false})");
  json k = json::parse(Doctor(old_kernel, {"--json", "--no-cuda"}).out, nullptr, false);
  EXPECT_EQ(k["network"]["dmabuf"]["possible"], false);
  json k0 = NetworkGpus(k)[0];
  EXPECT_EQ(CauseIds(k0), "gdr-no-module");
  EXPECT_NE(k0["causes"][0]["evidence"][0].get<std::string>().find("Linux 5.10.0 is older than 5.12"), std::string::npos)
      << k0.dump(1);

  Node down = DemoNode("down", R"({"nics": [{"name": "mlx5_0", "parent": "sw0", "kind": "ib", "state": "DOWN"}]})");
  json d = json::parse(Doctor(down, {"--json", "--no-cuda"}).out, nullptr, false);
  json d0 = NetworkGpus(d)[0];
  EXPECT_EQ(d0["predicted"], "net_socket");
  EXPECT_EQ(CauseIds(d0), "net-no-rdma-device");
  EXPECT_EQ(d["network"]["nics"][0]["port_state"], "DOWN");
}

TEST(DoctorNetwork, PrometheusCarriesEachPortAndEachGpusNetworkFallback) {
  Node n = DemoNode("prom", R"({"nics": [{"name": "mlx5_0", "parent": "sw0", "kind": "ib"},
                                        {"name": "mlx5_1", "parent": "sw2", "kind": "ib", "state": "DOWN"}]})");
  std::string file = testing::TempDir() + "/net-prom.prom";
  RunResult r = Doctor(n, {"--no-cuda", "--prometheus", file});
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty()) << r.err;
  EXPECT_NE(text.find("p2ptrace_nic_port_active{source=\"doctor\",host=\"" + n.host + "\",nic=\"mlx5_0\",pci_bus_id=\""),
            std::string::npos) << text;
  EXPECT_NE(text.find("nic=\"mlx5_1\""), std::string::npos);
  EXPECT_NE(text.find("state=\"DOWN\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("p2ptrace_nic_line_rate_bytes_per_second{source=\"doctor\",host=\"" + n.host +
                      "\",nic=\"mlx5_0\""), std::string::npos);
  EXPECT_NE(text.find("} 25000000000\n"), std::string::npos) << "200 Gb/s is 25e9 bytes/s";
  // mlx5_1 is down: every GPU pairs with mlx5_0, GPUs 4-7 across the CPUs (SYS), where no NVLink peer
  // of theirs is near it for PXN.
  EXPECT_NE(text.find("p2ptrace_gpu_network_path_info{source=\"doctor\",host=\"" + n.host +
                      "\",gpu=\"0\",pci_bus_id=\""), std::string::npos) << text;
  EXPECT_NE(text.find("class=\"net_ib\",nic=\"mlx5_0\",pcie_path=\"SYS\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("class=\"net_gdr\",nic=\"mlx5_0\",pcie_path=\"PIX\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("cause=\"gdr-distance\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("p2ptrace_node_gpudirect_rdma_means{source=\"doctor\",host=\"" + n.host +
                      "\",means=\"peer_memory\"} 1"), std::string::npos) << text;
}

}  // namespace
}  // namespace p2ptrace
