// Links that degrade without failing, end to end: the simulated node injects a replay storm on one
// NVLink and a lane downtrain while peer_copy runs under the shim; the shim reads the links at start
// and exit; the report charges each change to exactly the pairs whose path crosses that link (over
// all 56 directed pairs of the demo node, each by every path it took), names link-errors on the pair
// the storm slowed and link-downtrained on the pairs a narrowed PCIe link slowed, in JSON, text,
// rows, Prometheus and HTML alike.
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
using p2ptrace::testing::WriteFile;

std::string Topology(const std::string& name) { return std::string(P2PTRACE_TOPOLOGY_DIR) + "/" + name; }

Env SimEnv(const std::string& topology) {
  return {{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR}, {"P2PSIM_TOPOLOGY", topology}, {"P2PSIM_HOST", std::nullopt},
          {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"P2PTRACE_SAMPLE", std::nullopt}, {"P2PTRACE_WARN", "off"},
          {"NO_COLOR", "1"}};
}

// `base` with `faults` as its link_faults, written to a fresh directory (the sim keeps the faults'
// counters beside the topology file), without its copy faults; peer_copy on one process of the host under `p2ptrace run`
// through p2psim's sysroot. The trace directory.
std::string FaultedJob(const std::string& name, const std::string& base, const json& faults) {
  std::string dir = TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  json topo = json::parse(ReadFile(Topology(base)));
  topo["link_faults"] = faults;
  topo.erase("copy_faults");  // doctor's broken copies (a hang) are not these tests' faults
  std::string topology = dir + "/topology.json";
  WriteFile(topology, topo.dump(1));
  std::string host = topo["hosts"][0]["name"];
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir + "/trace", "--", P2PSIM, "launch", "--topology", topology,
                            "--hosts", host + ":1", "--", PEER_COPY},
                           SimEnv(topology));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return dir + "/trace";
}

json ReportJson(const std::string& dir) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

// What each pair entry (source, destination, path) was charged: the links' names.
using Entry = std::tuple<int, int, std::string>;
std::map<Entry, std::set<std::string>> Charged(const json& report) {
  std::map<Entry, std::set<std::string>> out;
  for (const json& p : report["pairs"]) {
    std::set<std::string>& links = out[{p["src"]["gpu"].get<int>(), p["dst"]["gpu"].get<int>(), p["transport"].get<std::string>()}];
    for (const json& l : p["link_changes"]) links.insert(l["where"].get<std::string>());
  }
  return out;
}

bool HasCause(const json& report, int src, int dst, const std::string& transport, const std::string& id) {
  for (const json& p : report["pairs"])
    if (p["src"]["gpu"] == src && p["dst"]["gpu"] == dst && p["transport"] == transport)
      for (const json& c : p["causes"])
        if (c["id"] == id) return true;
  return false;
}

// demo-8gpu.json: GPUs 0-3 and 4-7 are NVLink islands (6 links per pair, NVML numbering each GPU's
// links pair by pair: GPU2's links 12-17 go to GPU3, and GPU3's 12-17 to GPU2), on two CPUs (no
// P2P across them: staged through the host).
TEST(LinkHealth, EveryChangeIsChargedToExactlyThePairsThatCrossItsLink) {
  json faults = json::array({{{"host", "node0"}, {"gpu", 2}, {"nvlink", 12}, {"counter", "replay"}, {"per_gb", 100000}, {"slowdown", 0.5}},
                             {{"host", "node0"}, {"gpu", 5}, {"pcie_width", 4}}});
  std::string dir = FaultedJob("link-health-demo", "demo-8gpu.json", faults);
  json j = ReportJson(dir);
  ASSERT_TRUE(j.is_object());

  std::map<Entry, std::set<std::string>> charged = Charged(j);
  std::set<std::pair<int, int>> directed;
  int misattributed = 0, entries = 0;
  for (const auto& [entry, links] : charged) {
    auto [a, b, transport] = entry;
    directed.insert({a, b});
    ++entries;
    std::set<std::string> expected;
    // The storm: only NVLink traffic between GPU2 and GPU3, counted at both ends of the link.
    if (transport == "nvlink" && std::set<int>{a, b} == std::set<int>{2, 3}) expected = {"GPU2 NVLink 12", "GPU3 NVLink 12"};
    // The narrowed PCIe link of GPU5: every path of GPU5's through the host, none over NVLink.
    if (transport == "host_staged" && (a == 5 || b == 5)) expected = {"GPU5 PCIe (0000:ab:00.0)"};
    if (links != expected) {
      ++misattributed;
      ADD_FAILURE() << "GPU" << a << " -> GPU" << b << " " << transport << ": charged " << json(links).dump()
                    << ", expected " << json(expected).dump();
    }
  }
  EXPECT_EQ(directed.size(), 56u);  // every directed pair of the node was used
  EXPECT_GE(entries, 56);
  EXPECT_EQ(misattributed, 0);

  // The storm halved the pair's rate: link-errors on it, both ways, and on no other pair.
  for (const json& p : j["pairs"]) {
    int a = p["src"]["gpu"], b = p["dst"]["gpu"];
    bool storm_pair = p["transport"] == "nvlink" && std::set<int>{a, b} == std::set<int>{2, 3};
    EXPECT_EQ(HasCause(j, a, b, p["transport"], "link-errors"), storm_pair) << p.dump();
    // The staged paths ran at the host's rate whatever GPU5's width: no pair below its class there.
    EXPECT_FALSE(HasCause(j, a, b, p["transport"], "link-downtrained")) << p.dump();
  }
  const json* finding = nullptr;
  for (const json& f : j["findings"])
    if (f["id"] == "link-errors") finding = &f;
  ASSERT_NE(finding, nullptr);
  EXPECT_EQ((*finding)["severity"], "warning");
  EXPECT_EQ((*finding)["pairs"].size(), 2u);

  // The host's view: three changes, the storm's two with their equal growth, each with its pairs.
  ASSERT_EQ(j["links"].size(), 1u);
  const json& host = j["links"][0];
  EXPECT_EQ(host["host"], "node0");
  EXPECT_EQ(host["readings"], 1);
  EXPECT_EQ(host["exit_readings"], 1);
  ASSERT_EQ(host["changes"].size(), 3u) << host.dump();
  uint64_t storm = 0;
  for (const json& c : host["changes"]) {
    if (c["kind"] == "errors") {
      EXPECT_EQ(c["counter"], "replay");
      EXPECT_GT(c["delta"].get<uint64_t>(), 0u);
      storm = c["delta"];
      EXPECT_EQ(c["pairs"], json::array({"GPU2 -> GPU3", "GPU3 -> GPU2"})) << c.dump();
    } else {
      EXPECT_EQ(c["where"], "GPU5 PCIe (0000:ab:00.0)");
      EXPECT_EQ(c["trained"], "x4 of x16");
      EXPECT_EQ(c["narrowed_between"], true);
      EXPECT_EQ(c["pairs"].size(), 14u);  // GPU5 with each other GPU, both ways, staged
    }
  }
  // NVLink 4 gives the legacy counters, not NVLink 5's: those are listed, never read as 0.
  ASSERT_FALSE(host["unsupported"].empty());
  EXPECT_NE(host["unsupported"][0].get<std::string>().find("effective_errors"), std::string::npos) << host.dump();

  // The same in the text report, the rows, Prometheus and the page.
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir}, {{"NO_COLOR", "1"}});
  EXPECT_NE(text.out.find("link health on node0"), std::string::npos);
  EXPECT_NE(text.out.find("GPU2 NVLink 12: replay +" + std::to_string(storm)), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("[link-errors]"), std::string::npos);

  RunResult rows = RunProgram({P2PTRACE_CLI, "export", dir, "--rows", "-"}, {{"NO_COLOR", "1"}});
  ASSERT_EQ(rows.exit_code, 0) << rows.err;
  int rows_with_storm = 0;
  for (size_t at = 0; at < rows.out.size();) {
    size_t nl = rows.out.find('\n', at);
    json r = json::parse(rows.out.substr(at, nl - at), nullptr, false);
    at = nl == std::string::npos ? rows.out.size() : nl + 1;
    if (!r.is_object() || r["kind"] != "pair") continue;
    for (const json& l : r["link_changes"]) rows_with_storm += l["where"] == "GPU2 NVLink 12";
  }
  EXPECT_EQ(rows_with_storm, 2);

  RunResult prom = RunProgram({P2PTRACE_CLI, "export", dir, "--prometheus", "-"}, {{"NO_COLOR", "1"}});
  ASSERT_EQ(prom.exit_code, 0) << prom.err;
  // Labels that do not apply (an NVLink's bus id, a PCIe port's link number) are left out.
  EXPECT_NE(prom.out.find("p2ptrace_link_error_count_increase{host=\"node0\",gpu=\"2\",nvlink=\"12\",counter=\"replay\"} " +
                          std::to_string(storm)),
            std::string::npos)
      << prom.out;
  EXPECT_NE(prom.out.find("p2ptrace_link_downtrained{host=\"node0\",gpu=\"5\",pci_bus_id=\"00000000:AB:00.0\","
                          "trained=\"x4 of x16\"} 1"),
            std::string::npos);
  EXPECT_NE(prom.out.find("p2ptrace_pair_link_degraded{source=\"job\",host=\"node0\",src_gpu=\"2\""), std::string::npos);

  std::string page = dir + "/../report.html";
  RunResult html = RunProgram({P2PTRACE_CLI, "html", dir, "-o", page}, {{"NO_COLOR", "1"}});
  ASSERT_EQ(html.exit_code, 0) << html.err;
  std::string h = ReadFile(page);
  EXPECT_NE(h.find("<h2>Link health</h2>"), std::string::npos);
  EXPECT_NE(h.find("GPU2 NVLink 12: replay +" + std::to_string(storm)), std::string::npos);
}

// faulty-pcie-4gpu.json: GPUs 0,1 under one switch, 2,3 under another, PCIe P2P between all;
// GPU3 trained Gen3 of its Gen4. A downtrain to x4 of GPU1 while the job runs: the direct pairs that
// cross GPU1's or GPU3's port ran below their class, and only those are link-downtrained.
TEST(LinkHealth, ANarrowedPcieLinkIsOnThePairsItSlowed) {
  json faults = json::array({{{"host", "pcie4"}, {"gpu", 1}, {"pcie_width", 4}}});
  json base = json::parse(ReadFile(Topology("faulty-pcie-4gpu.json")));
  faults[0]["host"] = base["hosts"][0]["name"];
  std::string dir = FaultedJob("link-health-pcie", "faulty-pcie-4gpu.json", faults);
  json j = ReportJson(dir);
  ASSERT_TRUE(j.is_object());
  int checked = 0;
  for (const auto& [entry, links] : Charged(j)) {
    auto [a, b, transport] = entry;
    if (transport != "pcie_p2p") continue;
    ++checked;
    std::set<std::string> expected;
    for (int g : {1, 3})
      if (a == g || b == g) expected.insert("GPU" + std::to_string(g) + " PCIe");
    std::set<std::string> got;
    for (const std::string& l : links) got.insert(l.substr(0, l.find(" (")));
    EXPECT_EQ(got, expected) << "GPU" << a << " -> GPU" << b;
    EXPECT_EQ(HasCause(j, a, b, transport, "link-downtrained"), !expected.empty()) << "GPU" << a << " -> GPU" << b;
  }
  EXPECT_EQ(checked, 12);
}

}  // namespace
