// NCCL jobs on the simulated node under the shim, judged by what the user sees and by
// `p2ptrace report --json`:
//  - the log tap (DESIGN.md §4): for each NCCL_DEBUG setting, each rank's stdout carries the same
//    NCCL lines, in the same order, as without the shim, and the report still names every pair's
//    transport;
//  - the jobs people run: a 4-rank examples/nccl_ring job under `p2ptrace run`; every NCCL pair of the
//    report carries exactly the transport NCCL printed and its class, and the operations their timings.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <regex>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace {

using p2ptrace::testing::Env;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using p2ptrace::testing::WriteFile;
using nlohmann::json;

std::string Topology(const std::string& name) { return std::string(P2PTRACE_TOPOLOGY_DIR) + "/" + name; }

// A host with two CPUs, one switch each, two GPUs per switch: 0-1 and 2-3 PIX, across CPUs SYS.
std::string PcieHost(const std::string& name, const std::string& extra = "") {
  return R"({"name": ")" + name + R"(", "boot_id": "boot-)" + name + R"(", "cpus": [{"id": "cpu0"}, {"id": "cpu1"}],
     "switches": [{"id": "sw0", "parent": "cpu0"}, {"id": "sw1", "parent": "cpu1"}],
     "gpus": [{"index": 0, "bus_id": "0000:18:00.0", "parent": "sw0"}, {"index": 1, "bus_id": "0000:2a:00.0", "parent": "sw0"},
              {"index": 2, "bus_id": "0000:9a:00.0", "parent": "sw1"}, {"index": 3, "bus_id": "0000:ab:00.0", "parent": "sw1"}])" +
         extra + "}";
}

std::string WriteTopology(const std::string& name, const std::vector<std::string>& hosts) {
  std::string json = R"({"version": 1, "hosts": [)";
  for (size_t i = 0; i < hosts.size(); ++i) json += (i ? "," : "") + hosts[i];
  std::string path = TempDir() + "/" + name + ".topo.json";
  WriteFile(path, json + "]}");
  return path;
}

Env SimEnv(const std::string& dir) {
  return {{"P2PSIM_NCCL_TIMEOUT", "30"}, {"P2PSIM_NCCL_DIR", dir}, {"NCCL_DEBUG", std::nullopt},
          {"NCCL_DEBUG_FILE", std::nullopt}, {"NCCL_DEBUG_SUBSYS", std::nullopt}, {"P2PTRACE_NCCL_TAP", std::nullopt},
          {"P2PTRACE_NCCL_TAP_FILE", std::nullopt}, {"P2PTRACE_NCCL_FORWARD", std::nullopt},
          {"P2PTRACE_NCCL_LOG", std::nullopt}, {"P2PTRACE_SAMPLE", std::nullopt}, {"CUDA_VISIBLE_DEVICES", std::nullopt},
          {"NO_COLOR", "1"}};
}

// nccl_ring under `p2psim launch`; `prefix` is a shell prefix to the command (e.g. env settings per rank).
RunResult Ring(const std::string& topology, const std::string& hosts, const std::string& dir, Env env,
               const std::string& prefix = "") {
  std::filesystem::create_directories(dir + "/id");
  std::string cmd = prefix + "exec " NCCL_RING " " + dir + "/id 4096";
  return RunProgram({P2PSIM, "launch", "--topology", topology, "--hosts", hosts, "--", "sh", "-c", cmd}, env);
}

json Report(const std::string& dir) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

// NCCL pairs of a report: "src->dst" (GPU indices of the host, hosts named when they differ) → pair.
std::map<std::string, json> NcclPairs(const json& report) {
  std::map<std::string, json> out;
  for (const json& p : report["pairs"]) {
    if (p["source"] != "nccl") continue;
    std::string key = p["src"]["host"].get<std::string>() + ":" + std::to_string(p["src"]["gpu"].get<int>()) + "->" +
                      p["dst"]["host"].get<std::string>() + ":" + std::to_string(p["dst"]["gpu"].get<int>());
    EXPECT_FALSE(out.count(key)) << "two entries for " << key << ": " << report["pairs"].dump();
    out[key] = p;
  }
  return out;
}

// ---- the user's output is unchanged -------------------------------------------------------------

// What differs between two runs of the same job whatever the shim does: pids, tids, pointers, ids,
// timestamps and NCCL's own init timings.
std::string Normalized(std::string line) {
  static const std::pair<std::regex, const char*> kRules[] = {
      {std::regex(R"(:\d+:\d+ )"), ":PID:TID "},
      {std::regex(R"(0x[0-9a-f]+)"), "0xHEX"},
      {std::regex(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] )"), "[TIME] "},
      {std::regex(R"((Init timings.*total) .*)"), "$1 …"},
      {std::regex(R"(/dev/shm/nccl-[A-Za-z0-9]+)"), "/dev/shm/nccl-X"},
      {std::regex(R"(p2psim-[A-Za-z0-9]+)"), "p2psim-X"}};
  for (const auto& [re, with] : kRules) line = std::regex_replace(line, re, with);
  return line;
}

// Per rank (p2psim prefixes "[rank N] "), every line in order, NCCL's (and blank ones) and the
// program's interleaved as the user reads them: the wrappers forward NCCL's lines of each call when
// it returns, so they must keep their places between the program's own.
struct RankOutput {
  std::vector<std::string> lines;  // "nccl| …" or "prog| …"
  bool operator==(const RankOutput&) const = default;
};
std::map<std::string, RankOutput> PerRank(const std::string& out) {
  std::map<std::string, RankOutput> ranks;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    size_t close = line.find("] ");
    std::string who = line.rfind("[rank ", 0) == 0 && close != std::string::npos ? line.substr(0, close + 1) : "";
    std::string rest = who.empty() ? line : line.substr(close + 2);
    bool nccl = rest.empty() || rest.find("NCCL ") != std::string::npos;
    ranks[who].lines.push_back((nccl ? "nccl| " : "prog| ") + Normalized(rest));
  }
  return ranks;
}

std::string Show(const RankOutput& r) {
  std::string s;
  for (const auto& l : r.lines) s += "  " + l + "\n";
  return s;
}

struct TapCase {
  const char* name;
  Env env;             // the user's NCCL settings
  bool user_file;      // NCCL_DEBUG_FILE into a directory of their own
  const char* expect;  // a line the user must see (in both runs), "" for none
  const char* trace = "trace";  // P2PTRACE_DIR under the test's directory
};

class NcclTap : public ::testing::TestWithParam<TapCase> {};

TEST_P(NcclTap, TheUsersOutputIsUnchangedAndTheReportNamesEveryTransport) {
  const TapCase& c = GetParam();
  std::string root = TempDir() + "/tap-" + c.name;
  Env env = SimEnv(root + "/rendezvous");
  for (const auto& [k, v] : c.env) env[k] = v;
  auto run = [&](const std::string& which, bool traced) {
    Env e = env;
    std::filesystem::create_directories(root + "/" + which + "/rendezvous");
    e["P2PSIM_NCCL_DIR"] = root + "/" + which + "/rendezvous";
    if (c.user_file) {
      std::filesystem::create_directories(root + "/" + which + "/mine");
      e["NCCL_DEBUG_FILE"] = root + "/" + which + "/mine/log.%h.%p";
    }
    if (traced) {
      e["LD_PRELOAD"] = P2PTRACE_SHIM;
      e["P2PTRACE_DIR"] = root + "/" + c.trace;
      e["P2PTRACE_WARN"] = "off";  // p2ptrace's own job-start findings on stderr are not NCCL's output
    }
    return Ring(Topology("demo-8gpu.json"), "node0:2", root + "/" + which, e);
  };
  RunResult bare = run("bare", false), traced = run("traced", true);
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  EXPECT_EQ(traced.exit_code, bare.exit_code) << traced.err;
  EXPECT_EQ(Normalized(traced.err), Normalized(bare.err));
  auto want = PerRank(bare.out), got = PerRank(traced.out);
  ASSERT_EQ(got.size(), want.size()) << traced.out;
  for (const auto& [rank, w] : want) EXPECT_EQ(got[rank], w) << rank << " with the shim:\n" << Show(got[rank]) << "without:\n" << Show(w);
  if (*c.expect) {
    EXPECT_NE(bare.out.find(c.expect), std::string::npos) << bare.out;
  }
  if (c.user_file) {  // their files, where they wanted them
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(root + "/traced/mine")) files += e.is_regular_file();
    EXPECT_EQ(files, 2);
  }
  json j = Report(root + "/" + c.trace);
  ASSERT_FALSE(j.is_discarded());
  auto pairs = NcclPairs(j);
  EXPECT_EQ(pairs.size(), 2u) << j["pairs"].dump();
  for (const char* key : {"node0:0->node0:1", "node0:1->node0:0"}) {
    ASSERT_TRUE(pairs.count(key)) << key << " " << j["pairs"].dump();
    EXPECT_EQ(pairs[key]["nccl_transports"], json::array({"P2P/CUMEM"}));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sim, NcclTap,
    ::testing::Values(
        TapCase{"unset", {}, false, ""},
        TapCase{"version", {{"NCCL_DEBUG", "VERSION"}}, false, "NCCL version 2.28.9+cuda13.0"},
        TapCase{"warn", {{"NCCL_DEBUG", "WARN"}}, false, "NCCL version 2.28.9+cuda13.0"},
        TapCase{"info", {{"NCCL_DEBUG", "INFO"}}, false, "via P2P/CUMEM"},
        // A mask without ENV: the tap keeps it, so NCCL's environment echo stays hidden.
        TapCase{"info_subsys", {{"NCCL_DEBUG", "info"}, {"NCCL_DEBUG_SUBSYS", "INIT,COLL"}, {"NCCL_RUNTIME_CONNECT", "1"}},
                false, "via P2P/CUMEM"},
        TapCase{"user_file", {{"NCCL_DEBUG", "INFO"}}, true, ""},
        // NCCL expands '%' in NCCL_DEBUG_FILE: a trace directory with one is taken literally, else NCCL
        // cannot open the tap file and prints its INFO lines on the program's stdout.
        TapCase{"percent_dir", {}, false, "", "run%p%h%%x"},
        TapCase{"percent_dir_warn", {{"NCCL_DEBUG", "WARN"}}, false, "NCCL version 2.28.9+cuda13.0", "run%p"},
        // Before 2.22 rank 0's init puts the version line on stdout at any level from VERSION: the
        // tap's INFO must not make it appear where the user set no level (PyTorch 2.1-2.4's NCCL).
        TapCase{"old_unset", {{"P2PSIM_NCCL_VERSION", "2.21.5"}}, false, ""},
        TapCase{"old_warn", {{"P2PSIM_NCCL_VERSION", "2.21.5"}, {"NCCL_DEBUG", "WARN"}}, false,
                "NCCL version 2.21.5+cuda13.0"},
        TapCase{"old_info", {{"P2PSIM_NCCL_VERSION", "2.21.5"}, {"NCCL_DEBUG", "INFO"}}, false,
                "NCCL version 2.21.5+cuda13.0"}),
    [](const ::testing::TestParamInfo<TapCase>& p) { return std::string(p.param.name); });

TEST(NcclTapSubsys, TheUsersMaskStillHidesWhatItHid) {
  // Guard for the case above: without the shim the mask hides the env echo and shows the transports.
  std::string dir = TempDir() + "/subsys";
  Env env = SimEnv(dir);
  env["NCCL_DEBUG"] = "INFO";
  env["NCCL_DEBUG_SUBSYS"] = "INIT,COLL";
  env["NCCL_RUNTIME_CONNECT"] = "1";
  RunResult r = Ring(Topology("demo-8gpu.json"), "node0:2", dir, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("NCCL_RUNTIME_CONNECT set by environment"), std::string::npos);
  env["NCCL_DEBUG_SUBSYS"] = std::nullopt;
  r = Ring(Topology("demo-8gpu.json"), "node0:2", dir + "2", env);
  EXPECT_NE(r.out.find("NCCL_RUNTIME_CONNECT set by environment to 1."), std::string::npos);
}

// ---- the jobs people run, through `p2ptrace run` and the report ---------------------------------

struct Scenario {
  const char* name;
  std::string topology, hosts;
  Env env;
  std::string prefix;  // shell prefix per rank
  // The transport NCCL prints for ring pair r → r+1, from the ranks' GPU indices and hosts' order.
  std::function<std::string(int src, int dst)> transport;
};

std::string ClassOf(const std::string& transport) {
  if (transport.rfind("P2P/", 0) == 0) return "p2p";
  if (transport.rfind("SHM/", 0) == 0) return "shm";
  if (transport.find("/GDRDMA") != std::string::npos) return "net_gdr";
  if (transport.rfind("NET/Socket", 0) == 0) return "net_socket";
  return "net_ib";
}

std::string TwoHosts(bool gdr) {
  std::string extra = std::string(R"(, "gdr": )") + (gdr ? "true" : "false") +
                      R"(, "nics": [{"name": "mlx5_0", "parent": "sw0", "kind": "ib"}])";
  return WriteTopology(gdr ? "two-gdr" : "two-nogdr", {PcieHost("a", extra), PcieHost("b", extra)});
}

class NcclScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(NcclScenario, EveryPairCarriesTheTransportNcclPrintedAndOperationsTheirTimings) {
  const Scenario& s = GetParam();
  std::string dir = TempDir() + "/scenario-" + s.name;
  Env env = SimEnv(dir + "/rendezvous");
  for (const auto& [k, v] : s.env) env[k] = v;
  std::filesystem::create_directories(dir + "/rendezvous");
  std::filesystem::create_directories(dir + "/id");
  std::string cmd = s.prefix + "exec " NCCL_RING " " + dir + "/id 4096";
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", dir + "/trace", "--", P2PSIM, "launch", "--topology",
                            s.topology, "--hosts", s.hosts, "--", "sh", "-c", cmd},
                           env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("all results correct"), std::string::npos);
  json j = Report(dir + "/trace");
  ASSERT_FALSE(j.is_discarded());
  // Ranks fill the hosts in order, GPU i of each host for its local rank i.
  std::vector<std::pair<std::string, int>> where;
  std::istringstream hosts(s.hosts);
  for (std::string h; std::getline(hosts, h, ',');)
    for (int i = 0; i < std::stoi(h.substr(h.find(':') + 1)); ++i) where.push_back({h.substr(0, h.find(':')), i});
  int n = static_cast<int>(where.size());
  std::map<std::string, json> pairs = NcclPairs(j);
  std::set<std::string> expected_keys;
  for (int rank = 0; rank < n; ++rank) {
    int next = (rank + 1) % n;
    std::string key = where[rank].first + ":" + std::to_string(where[rank].second) + "->" + where[next].first + ":" +
                      std::to_string(where[next].second);
    expected_keys.insert(key);
    std::string t = s.transport(rank, next);
    auto it = pairs.find(key);
    ASSERT_NE(it, pairs.end()) << key << " missing: " << j["pairs"].dump();
    const json& p = it->second;
    // The send/recv ring (connIndex 1) uses the same transport; NET's shares its buffers ("/Shared").
    json printed = t.rfind("NET/", 0) == 0 ? json::array({t, t + "/Shared"}) : json::array({t});
    EXPECT_EQ(p["nccl_transports"], printed) << key;
    // NCCL's "P2P" is named by the node's link (the job-start probe's `topo -m` cell): NVLink for
    // NV<n>, PCIe P2P for a PCIe path, as NVML answered on the simulated node.
    if (ClassOf(t) == "p2p") {
      ASSERT_TRUE(p["link"].is_string()) << key << ": " << p.dump();
      EXPECT_EQ(p["transport"], p["link"].get<std::string>().rfind("NV", 0) == 0 ? "nvlink" : "pcie_p2p") << key;
    } else {
      EXPECT_EQ(p["transport"], ClassOf(t)) << key;
    }
    EXPECT_EQ(p["src"]["rank"], rank) << key;
  }
  std::set<std::string> got_keys;
  for (const auto& [k, p] : pairs) got_keys.insert(k);
  EXPECT_EQ(got_keys, expected_keys);  // the ring's pairs, no other
  // Every operation nccl_ring ran, from all ranks, with bytes, every one timed (the default sample
  // times the first calls) with nccl-tests' bandwidths; send/recv run inside ncclGroupStart/End, and
  // are timed as their group.
  std::set<std::string> ops;
  for (const json& o : j["nccl_ops"]) {
    std::string op = o["op"].get<std::string>();
    ops.insert(op);
    EXPECT_EQ(o["nranks"], n) << o.dump();
    EXPECT_EQ(o["ranks"].size(), static_cast<size_t>(n)) << o.dump();
    EXPECT_GT(o["bytes"].get<uint64_t>(), 0u) << o.dump();
    EXPECT_EQ(o["timed_calls"], o["calls"]) << o.dump();
    ASSERT_TRUE(o["seconds"].is_number()) << o.dump();
    EXPECT_GT(o["seconds"].get<double>(), 0) << o.dump();
    EXPECT_GT(o["algbw_gbps"].get<double>(), 0) << o.dump();
    EXPECT_GT(o["busbw_gbps"].get<double>(), 0) << o.dump();
  }
  for (const char* op : {"ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv"})
    EXPECT_TRUE(ops.count(op)) << op << " missing: " << j["nccl_ops"].dump();
}

INSTANTIATE_TEST_SUITE_P(
    Sim, NcclScenario,
    ::testing::Values(
        Scenario{"nvlink_box", Topology("demo-8gpu.json"), "node0:4", {}, "", [](int, int) { return std::string("P2P/CUMEM"); }},
        Scenario{"pcie_beyond_pxb", WriteTopology("pcie", {PcieHost("box")}), "box:4", {}, "",
                 [](int a, int b) { return std::string(a / 2 == b / 2 ? "P2P/CUMEM" : "SHM/direct/direct"); }},
        Scenario{"p2p_disable", Topology("demo-8gpu.json"), "node0:4", {{"NCCL_P2P_DISABLE", "1"}}, "",
                 [](int, int) { return std::string("SHM/direct/direct"); }},
        // The level admits SYS, but CUDA cannot peer across the CPUs: still SHM there.
        Scenario{"p2p_level_sys", WriteTopology("pcie-sys", {PcieHost("box")}), "box:4", {{"NCCL_P2P_LEVEL", "SYS"}}, "",
                 [](int a, int b) { return std::string(a / 2 == b / 2 ? "P2P/CUMEM" : "SHM/direct/direct"); }},
        // Beyond PXB with SHM off: the network, here sockets (no NIC).
        Scenario{"shm_disable", WriteTopology("pcie-noshm", {PcieHost("box")}), "box:4", {{"NCCL_SHM_DISABLE", "1"}}, "",
                 [](int a, int b) { return std::string(a / 2 == b / 2 ? "P2P/CUMEM" : "NET/Socket/0"); }},
        Scenario{"two_hosts_gdr", TwoHosts(true), "a:2,b:2", {}, "",
                 [](int a, int b) { return std::string(a / 2 == b / 2 ? "P2P/CUMEM" : "NET/IB/0/GDRDMA"); }},
        Scenario{"two_hosts_no_gdr", TwoHosts(false), "a:2,b:2", {}, "",
                 [](int a, int b) { return std::string(a / 2 == b / 2 ? "P2P/CUMEM" : "NET/IB/0"); }},
        Scenario{"two_hosts_ib_disable", TwoHosts(true), "a:2,b:2", {{"NCCL_IB_DISABLE", "1"}}, "",
                 [](int a, int b) { return std::string(a / 2 == b / 2 ? "P2P/CUMEM" : "NET/Socket/0"); }},
        // Two "containers" on one machine: same boot_id, each rank its own /dev/shm device. GPUs 2-3
        // are PHB from the NIC: without PXN relays, NCCL_NET_GDR_LEVEL=PHB keeps GPUDirect RDMA on
        // every side and every line the same.
        Scenario{"containers", Topology("demo-8gpu.json"), "node0:4",
                 {{"NCCL_NET_GDR_LEVEL", "PHB"}, {"NCCL_PXN_DISABLE", "1"}},
                 "P2PSIM_SHM_DEVICE=$((LOCAL_RANK + 10)) ",
                 [](int, int) { return std::string("NET/IB/0/GDRDMA"); }},
        Scenario{"lazy_connect", Topology("demo-8gpu.json"), "node0:4", {{"NCCL_RUNTIME_CONNECT", std::nullopt}}, "",
                 [](int, int) { return std::string("P2P/CUMEM"); }},
        Scenario{"runtime_connect_0", Topology("demo-8gpu.json"), "node0:4", {{"NCCL_RUNTIME_CONNECT", "0"}}, "",
                 [](int, int) { return std::string("P2P/CUMEM"); }}),
    [](const ::testing::TestParamInfo<Scenario>& p) { return std::string(p.param.name); });

}  // namespace
