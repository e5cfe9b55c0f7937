// `p2ptrace doctor`'s link health (tools/doctor/link_check.cc) and `doctor --test`'s readings around
// each pair, on simulated nodes: the counters each NVLink generation gives (and the ones it does not,
// listed, never 0), a narrow link as a finding with the pairs it carries, and a replay storm charged
// to the pairs tested while it grew.
#include <filesystem>
#include <fstream>
#include <set>
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
  std::string root, topology;
};

// demo-8gpu.json (GPUs 0-3 and 4-7 NVLink islands; GPU2's links 12-17 go to GPU3) with `host`
// merged into its host and `top` into the file, written out and laid down as a sysroot.
Node DemoNode(const std::string& name, const json& host, const json& top = json::object()) {
  std::string dir = testing::TempDir() + "/links-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  json topo = json::parse(std::ifstream(std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json"));
  topo["hosts"][0].merge_patch(host);
  topo.merge_patch(top);
  Node n{dir + "/root", dir + "/topology.json"};
  std::ofstream(n.topology) << topo.dump(1);
  EXPECT_EQ(RunProgram({P2PSIM, "sysroot", n.topology, "node0", n.root}).exit_code, 0);
  return n;
}

// `doctor --prometheus FILE`'s file.
std::string Prometheus(const Node& n) {
  std::string file = n.root + "/../doctor.prom";
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--prometheus", file},
                           {{"P2PTRACE_SYSROOT", n.root}, {"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR}, {"P2PSIM_TOPOLOGY", n.topology},
                            {"P2PSIM_HOST", "node0"}, {"CUDA_VISIBLE_DEVICES", std::nullopt}});
  EXPECT_NE(r.exit_code, 2) << r.err;
  return testing::ReadFile(file);
}

RunResult Doctor(const Node& n, std::vector<std::string> args) {
  args.insert(args.begin(), {P2PTRACE_CLI, "doctor"});
  return RunProgram(args, {{"P2PTRACE_SYSROOT", n.root}, {"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR},
                           {"P2PSIM_TOPOLOGY", n.topology}, {"P2PSIM_HOST", "node0"}, {"NO_COLOR", "1"},
                           {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"P2PSIM_NCCL_DIR", n.root}});
}

json DoctorJson(const Node& n, std::vector<std::string> args = {}) {
  args.push_back("--json");
  RunResult r = Doctor(n, args);
  json j = json::parse(r.out, nullptr, false);
  EXPECT_TRUE(j.is_object()) << r.out << r.err;
  return j;
}

// Every GPU renamed: the NVLink generation (and so the counters) follows the model.
json AllGpusNamed(const std::string& name) {
  json gpus = json::parse(std::ifstream(std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json"))["hosts"][0]["gpus"];
  for (json& g : gpus) g["name"] = name;
  return {{"gpus", gpus}};
}

TEST(DoctorLinks, EachGenerationsCountersAreReadAndTheOthersListedNeverZero) {
  // NVLink 4: the per-link error counters; NVLink 5's field counters are not given.
  json h100 = DoctorJson(DemoNode("h100", json::object()))["links"];
  ASSERT_EQ(h100["reading"]["nvlinks"].size(), 8u * 18u);
  const json& link = h100["reading"]["nvlinks"][0];
  EXPECT_EQ(link["counters"]["replay"], 0);
  EXPECT_TRUE(link["counters"]["effective_errors"].is_null());
  EXPECT_EQ(h100["unsupported"], json::array({"NVLink, all 144 links: effective_errors, rcv_errors, recovery_events, "
                                              "recovery_failed, symbol_errors"}));
  // NVLink 5: the other way round.
  json b200 = DoctorJson(DemoNode("b200", AllGpusNamed("NVIDIA B200")))["links"];
  const json& link5 = b200["reading"]["nvlinks"][0];
  EXPECT_TRUE(link5["counters"]["replay"].is_null());
  EXPECT_EQ(link5["counters"]["effective_errors"], 0);
  EXPECT_GT(link5["speed_mbps"].get<int>(), link["speed_mbps"].get<int>());
  // A vGPU hides every error counter: none reads 0, all are listed, and Prometheus has no sample of them.
  Node vgpu = DemoNode("vgpu", {{"virtualization", "vgpu"}});
  json v = DoctorJson(vgpu)["links"];
  for (const json& l : v["reading"]["nvlinks"])
    for (const auto& [name, value] : l["counters"].items()) EXPECT_TRUE(value.is_null()) << name;
  for (const json& p : v["reading"]["pcie"]) {
    if (p["gpu"].is_number()) {
      EXPECT_TRUE(p["counters"]["replay"].is_null());
    }
  }
  std::string unsupported = v["unsupported"].dump();
  for (const char* name : {"replay", "recovery", "crc_flit", "crc_data"}) EXPECT_NE(unsupported.find(name), std::string::npos) << name;
  RunResult text = Doctor(vgpu, {});
  EXPECT_NE(text.out.find("errors: none given"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("not counted here (unsupported, not zero): NVLink, all 144 links:"), std::string::npos);
  EXPECT_EQ(Prometheus(vgpu).find("p2ptrace_link_errors_total{host=\"node0\",gpu=\"0\",nvlink=\"0\""), std::string::npos);
  std::string prom_h100 = Prometheus(DemoNode("h100-prom", json::object()));
  EXPECT_NE(prom_h100.find("p2ptrace_link_errors_total{host=\"node0\",gpu=\"0\",nvlink=\"0\",counter=\"replay\"} 0"),
            std::string::npos) << prom_h100;
}

TEST(DoctorLinks, ANarrowLinkIsAFindingWithThePairsItCarries) {
  json gpus = json::parse(std::ifstream(std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json"))["hosts"][0]["gpus"];
  gpus[5]["pcie"] = {{"gen", 5}, {"width", 8}, {"max_gen", 5}, {"max_width", 16}};
  gpus[6]["pcie"] = {{"gen", 4}, {"width", 16}, {"max_gen", 5}, {"max_width", 16}};  // a lower generation alone
  Node n = DemoNode("narrow", {{"gpus", gpus}});
  json j = DoctorJson(n);
  const json* finding = nullptr;
  for (const json& f : j["findings"])
    if (f["id"] == "link-downtrained") finding = &f;
  ASSERT_NE(finding, nullptr) << j["findings"].dump();
  // GPU5's PCIe carries GPU5's staged traffic with GPUs 0-3 (NVLink to 4, 6, 7); GPU6's Gen4 is no finding.
  EXPECT_EQ((*finding)["pairs"], json::array({"GPU0-GPU5", "GPU1-GPU5", "GPU2-GPU5", "GPU3-GPU5"}));
  EXPECT_EQ((*finding)["evidence"], json::array({"GPU5 PCIe (0000:ab:00.0): x8 of x16"}));
  ASSERT_EQ(j["links"]["downtrained"].size(), 2u);
  EXPECT_EQ(j["links"]["downtrained"][1]["trained"], "Gen4 of Gen5");
  std::string prom = Prometheus(n);
  EXPECT_NE(prom.find("p2ptrace_link_downtrained{host=\"node0\",gpu=\"5\",pci_bus_id=\"00000000:AB:00.0\",trained=\"x8 of x16\"} 1"),
            std::string::npos) << prom;
}

TEST(DoctorTestLinks, AStormIsChargedToThePairsTestedWhileItGrew) {
  Node n = DemoNode("storm", json::object(),
                    {{"link_faults", json::array({{{"host", "node0"}, {"gpu", 2}, {"nvlink", 12}, {"per_gb", 100000}, {"slowdown", 0.5}}})}});
  json j = DoctorJson(n, {"--test", "--gpus", "0,2,3"});
  ASSERT_EQ(j["pairs"].size(), 6u) << j.dump();
  for (const json& p : j["pairs"]) {
    int a = p["src"]["gpu"], b = p["dst"]["gpu"];
    bool storm = std::set<int>{a, b} == std::set<int>{2, 3};
    std::set<std::string> where;
    for (const json& c : p["link_changes"]) where.insert(c["where"].get<std::string>());
    const std::set<std::string> expected = storm ? std::set<std::string>{"GPU2 NVLink 12", "GPU3 NVLink 12"} : std::set<std::string>{};
    EXPECT_EQ(where, expected) << a << "->" << b;
    EXPECT_EQ(p["verdict"], storm ? "fail" : "pass") << p.dump();
    if (storm) {
      ASSERT_FALSE(p["causes"].empty());
      EXPECT_EQ(p["causes"][0]["id"], "link-errors");  // named, not "p2p-degraded: no cause found"
      for (const json& c : p["causes"]) EXPECT_NE(c["id"], "p2p-degraded");
    }
  }
}

}  // namespace
}  // namespace p2ptrace
