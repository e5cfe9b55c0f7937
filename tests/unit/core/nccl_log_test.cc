// core/nccl_log: every real log in tests/fixtures/nccl-logs parses to exactly what its sidecar says
// (the directory is listed when the test starts: adding a fixture adds a case), plus the shapes the
// fixtures do not cover and the inputs a log tap meets (any split, CRLF, huge lines, garbage).
#include "core/nccl_log.h"
#include "core/nccl_net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "p2ptrace/vocabulary.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::Connection;
using p2ptrace::NcclLog;
using p2ptrace::NcclLogParser;
using p2ptrace::ParseNcclLog;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> FixtureLogs() {
  std::vector<std::string> logs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(NCCL_FIXTURE_DIR, ec))
    if (entry.path().extension() == ".log") logs.push_back(entry.path().string());
  std::sort(logs.begin(), logs.end());
  return logs;
}

// ---- comparing with a sidecar -------------------------------------------------------------------
//
// Sidecar conventions (see tests/fixtures/nccl-logs/README.md): null means "the line has none"
// (conn_index -1, devices "", direction ""); "recv" is the parser's "receive"; a field that is
// absent from an entry is not compared (e.g. logged_by_* where the host name is redacted).

class Mismatches {
 public:
  template <typename A, typename B>
  void Check(uint64_t line, const std::string& what, const A& expected, const B& got) {
    if (expected == got) return;
    std::ostringstream s;
    s << "line " << line << ": " << what << ": expected '" << expected << "', got '" << got << "'";
    list_.push_back(s.str());
  }
  void Add(std::string text) { list_.push_back(std::move(text)); }
  std::string Text() const {
    std::string t;
    for (const auto& m : list_) t += "  " + m + "\n";
    return t;
  }
  bool empty() const { return list_.empty(); }

 private:
  std::vector<std::string> list_;
};

int IntOrNone(const json& e, const char* key) { return e.at(key).is_null() ? -1 : e.at(key).get<int>(); }
std::string StrOrNone(const json& e, const char* key) { return e.at(key).is_null() ? "" : e.at(key).get<std::string>(); }
std::string Direction(const json& e) {
  std::string d = StrOrNone(e, "direction");
  return d == "recv" ? "receive" : d;
}

// Expected entries and parsed records, paired by line (a line holds at most one record).
template <typename T>
void PairByLine(const json& expected, const std::vector<const T*>& got, const std::string& what, Mismatches* m,
                const std::function<void(const json&, const T&)>& compare) {
  std::map<uint64_t, const T*> by_line;
  for (const T* g : got) by_line[g->line] = g;
  std::set<uint64_t> seen;
  for (const json& e : expected) {
    uint64_t line = e.at("line").get<uint64_t>();
    seen.insert(line);
    auto it = by_line.find(line);
    if (it == by_line.end()) m->Add("line " + std::to_string(line) + ": expected a " + what + ", parsed none");
    else compare(e, *it->second);
  }
  for (const auto& [line, g] : by_line)
    if (!seen.count(line)) m->Add("line " + std::to_string(line) + ": parsed a " + what + " the sidecar does not list");
}

void CompareConnections(const json& expected, const NcclLog& log, Mismatches* m) {
  std::vector<const Connection*> peers;
  for (const Connection& c : log.connections)
    if (c.dst_rank >= 0) peers.push_back(&c);
  PairByLine<Connection>(expected, peers, "connection", m, [&](const json& e, const Connection& c) {
    uint64_t l = c.line;
    m->Check(l, "channel", e.at("channel").get<int>(), c.channel);
    m->Check(l, "src_rank", e.at("src_rank").get<int>(), c.src_rank);
    m->Check(l, "dst_rank", e.at("dst_rank").get<int>(), c.dst_rank);
    m->Check(l, "transport", e.at("transport").get<std::string>(), c.transport);
    m->Check(l, "direction", Direction(e), c.direction);
    m->Check(l, "conn_index", IntOrNone(e, "conn_index"), c.conn_index);
    if (e.contains("src_dev")) m->Check(l, "src_dev", StrOrNone(e, "src_dev"), c.src_dev);
    if (e.contains("dst_dev")) m->Check(l, "dst_dev", StrOrNone(e, "dst_dev"), c.dst_dev);
    if (e.contains("keyword")) m->Check(l, "keyword", e.at("keyword").get<std::string>(), c.keyword);
    if (e.contains("logged_by_host")) m->Check(l, "logged_by_host", StrOrNone(e, "logged_by_host"), c.logger.host);
    if (e.contains("logged_by_cudaDev")) m->Check(l, "logged_by_cudaDev", IntOrNone(e, "logged_by_cudaDev"), c.logger.cuda_dev);
    m->Check(l, "class", p2ptrace::ClassifyNcclTransport(c.transport), c.transport_class);
  });
}

void CompareCollNet(const json& expected, const NcclLog& log, Mismatches* m) {
  std::vector<const Connection*> collnet;
  for (const Connection& c : log.connections)
    if (c.dst_rank < 0) collnet.push_back(&c);
  PairByLine<Connection>(expected, collnet, "CollNet connection", m, [&](const json& e, const Connection& c) {
    m->Check(c.line, "channel", e.at("channel").get<int>(), c.channel);
    m->Check(c.line, "conn_index", IntOrNone(e, "conn_index"), c.conn_index);
    m->Check(c.line, "rank", e.at("rank").get<int>(), c.src_rank);
    m->Check(c.line, "direction", Direction(e), c.direction);
    m->Check(c.line, "transport", e.at("transport").get<std::string>(), c.transport);
    m->Check(c.line, "class", int{P2PTRACE_TRANSPORT_COLLNET}, c.transport_class);
  });
}

void CompareRefusals(const json& expected, const NcclLog& log, Mismatches* m) {
  std::vector<const p2ptrace::Refusal*> got;
  for (const auto& r : log.refusals) got.push_back(&r);
  PairByLine<p2ptrace::Refusal>(expected, got, "refusal", m, [&](const json& e, const p2ptrace::Refusal& r) {
    m->Check(r.line, "refusal text", e.at("text").get<std::string>(), r.text);
  });
}

// The sidecars' "p2p_type_info_lines" mix two of the parser's lists: environment echoes (which must
// be among `env`) and `Check P2P Type` / `NVLS multicast support` lines (exactly `p2p_notes`).
void CompareP2pInfo(const json& expected, const NcclLog& log, Mismatches* m) {
  constexpr std::string_view kEnv = " set by environment to ";
  json notes = json::array();
  for (const json& e : expected) {
    std::string text = e.at("text");
    uint64_t line = e.at("line");
    size_t p = text.find(kEnv);
    if (p == std::string::npos) {
      notes.push_back(e);
      continue;
    }
    auto it = std::find_if(log.env.begin(), log.env.end(), [&](const auto& env) { return env.line == line; });
    if (it == log.env.end()) m->Add("line " + std::to_string(line) + ": expected an environment line, parsed none");
    else m->Check(line, "env name", text.substr(0, p), it->name);
  }
  std::vector<const p2ptrace::NcclNote*> got;
  for (const auto& n : log.p2p_notes) got.push_back(&n);
  PairByLine<p2ptrace::NcclNote>(notes, got, "P2P note", m, [&](const json& e, const p2ptrace::NcclNote& n) {
    m->Check(n.line, "note text", e.at("text").get<std::string>(), n.text);
  });
}

void CompareVersions(const json& sidecar, const NcclLog& log, Mismatches* m) {
  const json& expected = sidecar.at("expected").at("version_lines");
  std::vector<const p2ptrace::VersionLine*> got;
  for (const auto& v : log.version_lines) got.push_back(&v);
  PairByLine<p2ptrace::VersionLine>(expected, got, "version line", m, [&](const json& e, const p2ptrace::VersionLine& v) {
    m->Check(v.line, "version", e.at("version").get<std::string>(), v.version);
  });
  // Without a version line, the sidecar's nccl_version is an inference ("2.21.x (inferred)").
  std::string want = expected.empty() ? "" : sidecar.at("nccl_version").get<std::string>();
  m->Check(0, "nccl_version", want, log.nccl_version);
}

void CompareInitComplete(const json& expected, const NcclLog& log, Mismatches* m) {
  struct Completed {
    const p2ptrace::RankIdentity* r;
    uint64_t line;
  };
  std::vector<Completed> storage;
  for (const auto& r : log.ranks)
    if (r.complete_line) storage.push_back({&r, r.complete_line});
  std::vector<const Completed*> got;
  for (const auto& c : storage) got.push_back(&c);
  PairByLine<Completed>(expected, got, "Init COMPLETE identity", m, [&](const json& e, const Completed& c) {
    const auto& r = *c.r;
    m->Check(c.line, "comm", e.at("comm").get<std::string>(), r.comm);
    m->Check(c.line, "rank", e.at("rank").get<int>(), r.rank);
    m->Check(c.line, "nranks", e.at("nranks").get<int>(), r.nranks);
    m->Check(c.line, "cudaDev", IntOrNone(e, "cudaDev"), r.cuda_dev);
    m->Check(c.line, "nvmlDev", IntOrNone(e, "nvmlDev"), r.nvml_dev);
    m->Check(c.line, "busId", StrOrNone(e, "busId"), r.bus_id);
    if (e.contains("host")) m->Check(c.line, "host", StrOrNone(e, "host"), r.host);
  });
}

void CompareSummary(const json& summary, const NcclLog& log, Mismatches* m) {
  std::map<std::string, int> by_transport;
  int n = 0;
  for (const Connection& c : log.connections)
    if (c.dst_rank >= 0) ++n, ++by_transport[c.transport];
  m->Check(0, "summary.n_connection_lines", summary.at("n_connection_lines").get<int>(), n);
  for (const auto& [t, count] : summary.at("by_transport").items())
    m->Check(0, "summary.by_transport[" + t + "]", count.get<int>(), by_transport[t]);
  m->Check(0, "summary: transports", summary.at("by_transport").size(), by_transport.size());
}

// The sidecar's hand-read `net` block (core/nccl_net.h): every NET connection's network, NIC, PXN
// relay, GPUDirect RDMA and shared buffers; the devices of each `NET/… : Using` line; every GPUDirect
// RDMA decision; the lines that say why the RDMA network is unusable. (The sidecars also list
// plugins' own lines there, which name no such reason: those are not asked of the parser.)
void CompareNet(const json& net, const NcclLog& log, Mismatches* m) {
  std::map<uint64_t, const Connection*> conns;
  for (const Connection& c : log.connections) conns[c.line] = &c;
  for (const json& e : net.value("connections", json::array())) {
    uint64_t l = e.at("line").get<uint64_t>();
    auto it = conns.find(l);
    std::optional<p2ptrace::NetPath> p = it == conns.end() ? std::nullopt : p2ptrace::ParseNetPath(it->second->transport);
    if (!p) {
      m->Add("line " + std::to_string(l) + ": expected a NET connection, parsed none");
      continue;
    }
    m->Check(l, "network", e.at("plugin").get<std::string>(), p->network);
    m->Check(l, "nic", e.at("nic").get<int>(), p->nic);
    m->Check(l, "gdr", e.at("gdr").get<bool>(), p->gdr);
    m->Check(l, "proxy_rank", IntOrNone(e, "proxy_rank"), p->proxy_rank);
    m->Check(l, "shared", e.at("shared").get<bool>(), p->shared);
  }
  std::map<std::pair<uint64_t, int>, p2ptrace::NetDevice> devices;
  for (const p2ptrace::NcclNote& n : log.net_devices) {
    std::optional<std::vector<p2ptrace::NetDevice>> line = p2ptrace::ParseNetDevices(n.text);
    for (const p2ptrace::NetDevice& d : *line) devices[{n.line, d.index}] = d;
  }
  size_t listed = 0;
  for (const json& e : net.value("devices", json::array())) {
    if (e.at("index").is_null()) continue;  // a plugin's own device line (aws-ofi-nccl's NIC groups)
    ++listed;
    uint64_t l = e.at("line").get<uint64_t>();
    auto it = devices.find({l, e.at("index").get<int>()});
    if (it == devices.end()) {
      m->Add("line " + std::to_string(l) + ": expected NET device " + e.at("index").dump() + ", parsed none");
      continue;
    }
    const p2ptrace::NetDevice& d = it->second;
    m->Check(l, "device network", e.at("plugin").get<std::string>(), d.network);
    m->Check(l, "device name", StrOrNone(e, "name"), d.name);
    m->Check(l, "device port", IntOrNone(e, "port"), d.port);
    m->Check(l, "device link", StrOrNone(e, "link"), d.link);
    m->Check(l, "device interface", StrOrNone(e, "interface"), d.interface);
    m->Check(l, "device address", StrOrNone(e, "address"), d.address);
    if (e.contains("flags")) m->Check(l, "device flags", e.at("flags").dump(), json(d.flags).dump());
  }
  m->Check(0, "NET devices", listed, devices.size());
  std::vector<const p2ptrace::NcclNote*> gdr;
  for (const p2ptrace::NcclNote& n : log.gdr)  // decisions; the GPU's DMA-BUF line is no decision
    if (p2ptrace::ParseGdrDecision(n.text)) gdr.push_back(&n);
  PairByLine<p2ptrace::NcclNote>(net.value("gdr_lines", json::array()), gdr, "GPUDirect RDMA line", m,
                                 [&](const json& e, const p2ptrace::NcclNote& n) {
    uint64_t l = n.line;
    p2ptrace::GdrDecision g = *p2ptrace::ParseGdrDecision(n.text);
    m->Check(l, "gdr enabled", e.at("enabled").get<bool>(), g.enabled);
    m->Check(l, "gdr gpu", StrOrNone(e, "gpu"), g.gpu);
    if (!e.at("hca").is_null()) m->Check(l, "gdr hca", e.at("hca").get<int>(), g.hca);
    m->Check(l, "gdr distance", IntOrNone(e, "distance"), g.distance);
    m->Check(l, "gdr level", IntOrNone(e, "level"), g.level);
  });
  json failures = json::array();
  for (const json& e : net.value("net_errors", json::array()))
    if (!p2ptrace::NetFailureKind(e.at("text").get<std::string>()).empty()) failures.push_back(e);
  std::vector<const p2ptrace::NcclNote*> got;
  for (const p2ptrace::NcclNote& n : log.net_failures) got.push_back(&n);
  PairByLine<p2ptrace::NcclNote>(failures, got, "network failure line", m, [&](const json& e, const p2ptrace::NcclNote& n) {
    m->Check(n.line, "network failure", e.at("text").get<std::string>(), n.text);
  });
}

class NcclLogFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(NcclLogFixture, ParsesToItsSidecar) {
  fs::path log_path = GetParam();
  fs::path sidecar_path = fs::path(log_path).replace_extension(".json");
  ASSERT_TRUE(fs::exists(sidecar_path)) << log_path << " has no sidecar " << sidecar_path;
  json sidecar = json::parse(ReadFile(sidecar_path));
  const json& e = sidecar.at("expected");
  NcclLog log = ParseNcclLog(ReadFile(log_path));

  Mismatches m;
  CompareConnections(e.at("connections"), log, &m);
  CompareCollNet(e.value("collnet_connections", json::array()), log, &m);
  CompareRefusals(e.value("p2p_disabled_or_fallback_reasons", json::array()), log, &m);
  CompareP2pInfo(e.value("p2p_type_info_lines", json::array()), log, &m);
  CompareVersions(sidecar, log, &m);
  CompareInitComplete(e.value("init_complete_rank_map", json::array()), log, &m);
  if (e.contains("summary")) CompareSummary(e.at("summary"), log, &m);
  if (sidecar.contains("net")) CompareNet(sidecar.at("net"), log, &m);
  EXPECT_TRUE(m.empty()) << log_path.filename().string() << " differs from its sidecar:\n" << m.Text();
  EXPECT_EQ(log.long_lines, 0u);
}

// Fixture names made into test names: "01-v2.7.8-4gpu…" → "f01_v2_7_8_4gpu…".
std::string FixtureTestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = "f" + fs::path(info.param).stem().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, NcclLogFixture, ::testing::ValuesIn(FixtureLogs()), FixtureTestName);

TEST(NcclLogFixtures, DirectoryHoldsLogsWithSidecars) {
  std::vector<std::string> logs = FixtureLogs();
  EXPECT_GE(logs.size(), 20u) << NCCL_FIXTURE_DIR;
  for (const auto& entry : fs::directory_iterator(NCCL_FIXTURE_DIR)) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_TRUE(fs::exists(fs::path(entry.path()).replace_extension(".log"))) << entry.path() << " has no log";
  }
}

// ---- which communicator a line belongs to --------------------------------------------------------

NcclLog ParseFixture(const std::string& prefix) {
  for (const std::string& f : FixtureLogs())
    if (fs::path(f).filename().string().starts_with(prefix)) return ParseNcclLog(ReadFile(f));
  ADD_FAILURE() << "no fixture " << prefix;
  return {};
}

// 2.7.8: the init thread prints its connections, then `comm … Init COMPLETE` (no START).
TEST(NcclLogComm, Before2_18_ConnectionsBelongToTheirThreadsNextInitComplete) {
  NcclLog log = ParseFixture("02-");
  ASSERT_EQ(log.ranks.size(), 4u);
  for (const Connection& c : log.connections) {
    const p2ptrace::RankIdentity* r = log.FindRank(c.logger.host, c.logger.pid, c.comm);
    ASSERT_NE(r, nullptr) << "line " << c.line << " has no comm";
    EXPECT_EQ(r->rank, c.LoggingRank()) << "line " << c.line;
  }
  EXPECT_EQ(log.connections.front().comm, "0x7fd634001060");  // rank 3's line 40
}

// 2.21: START, the init thread's connections, (COMPLETE cut off by the failure).
TEST(NcclLogComm, FromInitStartOnTheSameThread) {
  NcclLog log = ParseFixture("05-");
  ASSERT_EQ(log.connections.size(), 4u);
  for (const Connection& c : log.connections) EXPECT_EQ(c.comm, "0x564531f27c80") << "line " << c.line;
  EXPECT_EQ(log.trees.size(), 2u);
  EXPECT_EQ(log.trees[0].comm, "0x564531f27c80");
}

// 2.22 lazy connect: printed by other threads after init; the process holds one comm per rank.
TEST(NcclLogComm, LazyLinesByTheProcessCommOfTheLoggingRank) {
  NcclLog log = ParseFixture("07-");
  ASSERT_EQ(log.connections.size(), 16u);
  for (const Connection& c : log.connections)
    EXPECT_EQ(c.comm, c.src_rank == 0 ? "0xb94bf80" : "0xb981910") << "line " << c.line;
}

// 2.28 vLLM: lazy lines on the main thread, which later starts a second communicator with the same
// rank; the lines came before it existed.
TEST(NcclLogComm, LazyLinesBeforeASecondCommunicatorStarted) {
  NcclLog log = ParseFixture("16-");
  ASSERT_EQ(log.connections.size(), 4u);
  EXPECT_EQ(log.connections[0].comm, "0x38b52f50");
  EXPECT_EQ(log.connections[1].comm, "0x38b52f50");
  EXPECT_EQ(log.connections[2].comm, "0x1882d0d0");
  EXPECT_EQ(log.connections[3].comm, "0x1882d0d0");
  // The second communicator: START only, with its commId.
  const p2ptrace::RankIdentity* second = log.FindRank("proxmox", 1495819, "0x776f6820");
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->comm_id, "0x42e2e3d735bb45ab");
  EXPECT_EQ(second->api, "ncclCommInitRankConfig");
  EXPECT_GT(second->start_line, 0u);
  EXPECT_EQ(second->complete_line, 0u);
}

// Two communicators with rank 0 in one process, both alive when a lazy line arrives on a thread that
// initialized neither, and nothing in the line tells them apart: the newest, and it says so.
TEST(NcclLogComm, AmbiguousLazyLineGoesToTheNewestAndSaysSo) {
  const char* text =
      "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x1 - Init START\n"
      "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x1 - Init COMPLETE\n"
      "h:1:1 [0] NCCL INFO ncclCommSplit comm 0xb rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x2 - Init START\n"
      "h:1:1 [0] NCCL INFO ncclCommSplit comm 0xb rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x2 - Init COMPLETE\n"
      "h:1:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n";
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 1u);
  EXPECT_EQ(log.connections[0].comm, "0xb");
  EXPECT_EQ(log.connections[0].attribution, p2ptrace::Attribution::kAmbiguous);
  EXPECT_EQ(log.ranks.size(), 2u);
}

// NCCL 2.28's exact lines (init.cc ncclCommInitRankFunc, transport/p2p.cc p2pSendSetup) for the cases
// people meet: every connection of every communicator of a process is tied to its communicator.
namespace comm_cases {

std::string Init(const std::string& who, const std::string& comm, int rank, int nranks, int dev, const std::string& id,
                 const std::string& stage) {
  return who + " [" + std::to_string(dev) + "] NCCL INFO ncclCommInitRankConfig comm " + comm + " rank " +
         std::to_string(rank) + " nranks " + std::to_string(nranks) + " cudaDev " + std::to_string(dev) + " nvmlDev " +
         std::to_string(dev) + " busId " + std::to_string(dev + 1) + "000 commId " + id + " - Init " + stage + "\n";
}
// ncclCommSplit's START has no space before its dash; neither line prints a commId.
std::string Split(const std::string& who, const std::string& comm, int rank, int nranks, int dev,
                  const std::string& parent, int count, int color, const std::string& stage) {
  return who + " [" + std::to_string(dev) + "] NCCL INFO ncclCommSplit comm " + comm + " rank " + std::to_string(rank) +
         " nranks " + std::to_string(nranks) + " cudaDev " + std::to_string(dev) + " nvmlDev " + std::to_string(dev) +
         " busId " + std::to_string(dev + 1) + "000 parent " + parent + " splitCount " + std::to_string(count) +
         " color " + std::to_string(color) + " key " + std::to_string(rank) + (stage == "START" ? "- Init START" : " - Init COMPLETE") +
         "\n";
}
std::string Via(const std::string& who, int ch, int index, int src, int sdev, int dst, int ddev) {
  char b[160];
  std::snprintf(b, sizeof b, " [%d] NCCL INFO Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/CUMEM\n", sdev, ch, index, src,
                sdev, dst, ddev);
  return who + b;
}

// Every connection has a communicator, the logging rank's, and the pair it names is of that
// communicator's ranks (as the log's Init lines place them).
void ExpectAllTied(const NcclLog& log) {
  for (const Connection& c : log.connections) {
    const p2ptrace::RankIdentity* r = log.IdentityOf(c);
    ASSERT_NE(r, nullptr) << "line " << c.line << " has no communicator";
    EXPECT_EQ(r->rank, c.LoggingRank()) << "line " << c.line;
    EXPECT_EQ(r->host, c.logger.host);
    EXPECT_EQ(r->pid, c.logger.pid);
    EXPECT_FALSE(r->comm_key.empty()) << "line " << c.line;
  }
}

}  // namespace comm_cases

// ncclCommSplit at init (NCCL_RUNTIME_CONNECT=0): the child's START (`key 0- Init START`) opens it on
// the init thread; both processes' children share one key derived from the parent's commId.
TEST(NcclLogComm, SplitChildrenAtInitShareTheirParentsKey) {
  using namespace comm_cases;
  std::string text;
  text += Init("n:10:10", "0x1a0", 0, 2, 0, "0x5eed", "START") + Init("n:11:11", "0x2a0", 1, 2, 1, "0x5eed", "START");
  text += Via("n:10:10", 0, 0, 0, 0, 1, 1) + Via("n:11:11", 0, 0, 1, 1, 0, 0);
  text += Init("n:10:10", "0x1a0", 0, 2, 0, "0x5eed", "COMPLETE") + Init("n:11:11", "0x2a0", 1, 2, 1, "0x5eed", "COMPLETE");
  text += Split("n:10:10", "0x1b0", 0, 2, 0, "0x1a0", 1, 0, "START") + Split("n:11:11", "0x2b0", 1, 2, 1, "0x2a0", 1, 0, "START");
  text += Via("n:10:10", 0, 0, 0, 0, 1, 1) + Via("n:11:11", 0, 0, 1, 1, 0, 0);
  text += Split("n:10:10", "0x1b0", 0, 2, 0, "0x1a0", 1, 0, "COMPLETE") + Split("n:11:11", "0x2b0", 1, 2, 1, "0x2a0", 1, 0, "COMPLETE");
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.ranks.size(), 4u);
  ASSERT_EQ(log.connections.size(), 4u);
  ExpectAllTied(log);
  EXPECT_EQ(log.connections[2].comm, "0x1b0");
  EXPECT_EQ(log.connections[3].comm, "0x2b0");
  EXPECT_EQ(log.connections[2].attribution, p2ptrace::Attribution::kInit);
  const p2ptrace::RankIdentity* child0 = log.FindRank("n", 10, "0x1b0");
  const p2ptrace::RankIdentity* child1 = log.FindRank("n", 11, "0x2b0");
  ASSERT_NE(child0, nullptr);
  ASSERT_NE(child1, nullptr);
  EXPECT_GT(child0->start_line, 0u);
  EXPECT_EQ(child0->parent, "0x1a0");
  EXPECT_EQ(child0->split_count, 1);
  EXPECT_EQ(child0->comm_key, child1->comm_key);
  EXPECT_NE(child0->comm_key, "0x5eed");
  EXPECT_EQ(child0->comm_key.size(), 18u);  // commId's form: fits where a commId goes
  EXPECT_EQ(child0->parent_key, "0x5eed");
  EXPECT_EQ(child1->parent_key, "0x5eed");
}

// ncclCommSplit's Init lines by release (init.cc): 2.21–2.22 print a commId (derived from the
// parent's hash and the color, shared by the child's ranks); 2.23 `parent %p color %d key %d- Init
// START` with none; 2.24–2.28 add `splitCount %d`, 2.29+ call it `childCount %d`.
TEST(NcclLogComm, SplitLinesOfEveryRelease) {
  const char* parent = "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0xp rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1a000 commId 0xfeed - Init COMPLETE\n";
  NcclLog v221 = ParseNcclLog(std::string(parent) +
      "h:1:9 [0] NCCL INFO ncclCommSplit comm 0xc rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1a000 parent 0xp color 1684518034 key 0 commId 0x5a16c3838ce6f1f8 - Init START\n");
  ASSERT_EQ(v221.ranks.size(), 2u);
  EXPECT_EQ(v221.ranks[1].comm_key, "0x5a16c3838ce6f1f8");
  EXPECT_EQ(v221.ranks[1].parent, "0xp");
  EXPECT_EQ(v221.ranks[1].color, 1684518034);
  EXPECT_GT(v221.ranks[1].start_line, 0u);
  // 2.23: no count; two splits of one color in a row are two communicators.
  NcclLog v223 = ParseNcclLog(std::string(parent) +
      "h:1:1 [0] NCCL INFO ncclCommSplit comm 0xc1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1a000 parent 0xp color 0 key 0- Init START\n"
      "h:1:1 [0] NCCL INFO ncclCommSplit comm 0xc2 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1a000 parent 0xp color 0 key 0- Init START\n");
  ASSERT_EQ(v223.ranks.size(), 3u);
  EXPECT_EQ(v223.ranks[1].parent_key, "0xfeed");
  EXPECT_FALSE(v223.ranks[1].comm_key.empty());
  EXPECT_NE(v223.ranks[1].comm_key, v223.ranks[2].comm_key);
  // 2.29: childCount; a different count or color is another communicator, the same is the same.
  auto child = [&](const std::string& comm, int count, int color) {
    return "h:1:1 [0] NCCL INFO ncclCommSplit comm " + comm + " rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1a000 parent 0xp childCount " +
           std::to_string(count) + " color " + std::to_string(color) + " key 0- Init START\n";
  };
  NcclLog v229 = ParseNcclLog(std::string(parent) + child("0xd1", 1, 0) + child("0xd2", 2, 0) + child("0xd3", 2, 1));
  ASSERT_EQ(v229.ranks.size(), 4u);
  EXPECT_EQ(v229.ranks[1].split_count, 1);
  std::set<std::string> keys{v229.ranks[1].comm_key, v229.ranks[2].comm_key, v229.ranks[3].comm_key};
  EXPECT_EQ(keys.size(), 3u);
  NcclLog other = ParseNcclLog(std::string(parent) + child("0xe9", 2, 1));  // another process, same split
  EXPECT_EQ(other.ranks[1].comm_key, v229.ranks[3].comm_key);
  // A split whose parent's Init line is not in the log: no key (it cannot be matched across processes).
  NcclLog orphan = ParseNcclLog(child("0xf1", 1, 0));
  ASSERT_EQ(orphan.ranks.size(), 1u);
  EXPECT_EQ(orphan.ranks[0].comm_key, "");
}

// PyTorch's lazy init: each process group's communicator is created at its first collective, which
// connects right after (on the same thread); world and subgroup have the same rank and nranks.
TEST(NcclLogComm, LazyInitOfTwoGroupsWithTheSameRanks) {
  using namespace comm_cases;
  std::string text;
  for (const char* id : {"0x1111", "0x2222"}) {
    std::string c0 = std::string(id) == "0x1111" ? "0xa0" : "0xb0", c1 = std::string(id) == "0x1111" ? "0xa1" : "0xb1";
    text += Init("n:10:10", c0, 0, 2, 0, id, "START") + Init("n:11:11", c1, 1, 2, 1, id, "START");
    text += Init("n:10:10", c0, 0, 2, 0, id, "COMPLETE") + Init("n:11:11", c1, 1, 2, 1, id, "COMPLETE");
    for (int ch = 0; ch < 2; ++ch) text += Via("n:11:11", ch, 0, 1, 1, 0, 0) + Via("n:10:10", ch, 0, 0, 0, 1, 1);
  }
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 8u);
  ExpectAllTied(log);
  for (size_t i = 0; i < 8; ++i) {
    const p2ptrace::RankIdentity* r = log.IdentityOf(log.connections[i]);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->comm_id, i < 4 ? "0x1111" : "0x2222") << "line " << log.connections[i].line;
  }
}

// Eager init of the world, ncclCommSplit for a subgroup, then collectives long after (2.22+ lazy
// connect, on the main thread): both directions of both communicators, the subgroup's too.
TEST(NcclLogComm, EagerSplitThenLazyConnectAtTheFirstCollectives) {
  using namespace comm_cases;
  std::string text;
  text += Init("n:10:10", "0xa0", 0, 2, 0, "0x77", "START") + Init("n:11:11", "0xa1", 1, 2, 1, "0x77", "START");
  text += Init("n:10:10", "0xa0", 0, 2, 0, "0x77", "COMPLETE") + Init("n:11:11", "0xa1", 1, 2, 1, "0x77", "COMPLETE");
  text += Split("n:10:10", "0xb0", 0, 2, 0, "0xa0", 1, 0, "START") + Split("n:11:11", "0xb1", 1, 2, 1, "0xa1", 1, 0, "START");
  text += Split("n:10:10", "0xb0", 0, 2, 0, "0xa0", 1, 0, "COMPLETE") + Split("n:11:11", "0xb1", 1, 2, 1, "0xa1", 1, 0, "COMPLETE");
  text += "user output: step 1\n";
  // The first collective on the world, then one on the subgroup: the same lines again.
  for (int comm = 0; comm < 2; ++comm)
    for (int ch = 0; ch < 2; ++ch) text += Via("n:10:10", ch, 0, 0, 0, 1, 1) + Via("n:11:11", ch, 0, 1, 1, 0, 0);
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 8u);
  ExpectAllTied(log);
  // Each communicator holds both directions on both channels: a repeated line is the other one's.
  std::map<std::string, std::set<std::tuple<int, int, int>>> per_key;
  for (const Connection& c : log.connections)
    per_key[log.IdentityOf(c)->comm_key].insert({c.channel, c.src_rank, c.dst_rank});
  ASSERT_EQ(per_key.size(), 2u);
  for (const auto& [key, conns] : per_key) EXPECT_EQ(conns.size(), 4u) << key;
}

// Several communicators created in one ncclGroupStart/End: NCCL runs each init on its own thread,
// and their lines interleave.
TEST(NcclLogComm, SeveralCommunicatorsInOneGroup) {
  using namespace comm_cases;
  std::string text;
  text += Init("n:10:21", "0xa0", 0, 2, 0, "0x1", "START") + Init("n:10:22", "0xb0", 0, 2, 0, "0x2", "START");
  text += Via("n:10:22", 0, 0, 0, 0, 1, 2) + Via("n:10:21", 0, 0, 0, 0, 1, 1);
  text += Init("n:10:22", "0xb0", 0, 2, 0, "0x2", "COMPLETE") + Init("n:10:21", "0xa0", 0, 2, 0, "0x1", "COMPLETE");
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 2u);
  ExpectAllTied(log);
  EXPECT_EQ(log.connections[0].comm, "0xb0");
  EXPECT_EQ(log.connections[1].comm, "0xa0");
}

// A communicator destroyed and created again (the allocator may hand out the same pointer): lines
// before the destroy are the first one's, lazy lines after it the second one's.
TEST(NcclLogComm, DestroyedAndCreatedAgain) {
  using namespace comm_cases;
  std::string text;
  text += Init("n:10:10", "0xa0", 0, 2, 0, "0x1", "START") + Init("n:10:10", "0xa0", 0, 2, 0, "0x1", "COMPLETE");
  text += Via("n:10:10", 0, 0, 0, 0, 1, 1);
  text += "n:10:10 [0] NCCL INFO comm 0xa0 rank 0 nranks 2 cudaDev 0 busId 1000 - Destroy COMPLETE\n";
  text += Init("n:10:10", "0xc0", 0, 2, 0, "0x2", "START") + Init("n:10:10", "0xc0", 0, 2, 0, "0x2", "COMPLETE");
  text += Via("n:10:10", 0, 0, 0, 0, 1, 1);
  text += "n:10:10 [0] NCCL INFO comm 0xc0 rank 0 nranks 2 cudaDev 0 busId 1000 - Destroy COMPLETE\n";
  text += Init("n:10:10", "0xa0", 0, 2, 0, "0x3", "START") + Init("n:10:10", "0xa0", 0, 2, 0, "0x3", "COMPLETE");
  text += Via("n:10:10", 0, 0, 0, 0, 1, 1);
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 3u);
  ExpectAllTied(log);
  const char* want[] = {"0x1", "0x2", "0x3"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(log.IdentityOf(log.connections[i])->comm_id, want[i]) << i;
    EXPECT_EQ(log.connections[i].attribution, p2ptrace::Attribution::kLazy) << i;
  }
}

// Lazy connect at the first collective long after init, printed after another communicator's Init
// lines: the rank in the line, and the peer's device (its Init line is in the merged log) decide.
TEST(NcclLogComm, LazyLinesAfterAnotherCommunicatorsInit) {
  using namespace comm_cases;
  std::string text;
  // World of 4 (pids 10..13 on GPUs 0..3); process 11 is also rank 0 of a subgroup {1, 2} and
  // process 12 is rank 1 of it; process 10 is rank 0 of the world and of a subgroup {0, 3}.
  for (int r = 0; r < 4; ++r) text += Init("n:" + std::to_string(10 + r) + ":1", "0xw" + std::to_string(r), r, 4, r, "0xaaa", "COMPLETE");
  text += Init("n:11:1", "0xs1", 0, 2, 1, "0xbbb", "COMPLETE") + Init("n:12:1", "0xs2", 1, 2, 2, "0xbbb", "COMPLETE");
  text += Init("n:10:1", "0xt0", 0, 2, 0, "0xccc", "COMPLETE") + Init("n:13:1", "0xt3", 1, 2, 3, "0xccc", "COMPLETE");
  text += Via("n:10:1", 0, 0, 0, 0, 1, 1);  // world: 0 -> 1 is GPU0 -> GPU1
  text += Via("n:10:1", 0, 0, 0, 0, 1, 3);  // subgroup {0, 3}: 0 -> 1 is GPU0 -> GPU3
  text += Via("n:11:1", 0, 0, 0, 1, 1, 2);  // subgroup {1, 2}: rank 0 is world rank 1
  text += Via("n:12:1", 0, 0, 2, 2, 3, 3);  // world: rank 2
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 4u);
  ExpectAllTied(log);
  EXPECT_EQ(log.IdentityOf(log.connections[0])->comm_id, "0xaaa");
  EXPECT_EQ(log.IdentityOf(log.connections[1])->comm_id, "0xccc");
  EXPECT_EQ(log.IdentityOf(log.connections[2])->comm_id, "0xbbb");
  EXPECT_EQ(log.IdentityOf(log.connections[3])->comm_id, "0xaaa");
  for (const Connection& c : log.connections) EXPECT_EQ(c.attribution, p2ptrace::Attribution::kLazy) << c.line;
}

// Two hosts, same pid, same comm pointer value, interleaved line by line.
TEST(NcclLogComm, InterleavedHostsKeepTheirOwnCommunicators) {
  const char* text =
      "nodeA:100:100 [0] NCCL INFO ncclCommInitRank comm 0x5555 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1a000 commId 0xfeed - Init START\n"
      "nodeB:100:100 [0] NCCL INFO ncclCommInitRank comm 0x5555 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1a000 commId 0xfeed - Init START\n"
      "nodeA:100:100 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
      "nodeB:100:100 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [receive] via NET/IB/0/GDRDMA\n"
      "nodeA:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
      "nodeB:100:100 [0] NCCL INFO Channel 00/0 : 2[0] -> 3[1] via P2P/CUMEM/read\n"
      "nodeA:100:100 [0] NCCL INFO ncclCommInitRank comm 0x5555 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1a000 commId 0xfeed - Init COMPLETE\n"
      "nodeB:100:100 [0] NCCL INFO ncclCommInitRank comm 0x5555 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1a000 commId 0xfeed - Init COMPLETE\n";
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.ranks.size(), 2u);
  ASSERT_EQ(log.connections.size(), 4u);
  for (const Connection& c : log.connections) {
    const p2ptrace::RankIdentity* r = log.FindRank(c.logger.host, c.logger.pid, c.comm);
    ASSERT_NE(r, nullptr) << c.line;
    EXPECT_EQ(r->host, c.logger.host);
    EXPECT_EQ(r->rank, c.LoggingRank()) << c.line;
    EXPECT_EQ(r->comm_id, "0xfeed");
  }
  EXPECT_EQ(log.connections[1].direction, "receive");
  EXPECT_EQ(log.connections[1].LoggingRank(), 2);
}

// ---- the shapes of every release ----------------------------------------------------------------

Connection OneConnection(const std::string& line) {
  NcclLog log = ParseNcclLog(line + "\n");
  EXPECT_EQ(log.connections.size(), 1u) << line;
  return log.connections.empty() ? Connection{} : log.connections[0];
}

TEST(NcclLogGrammar, ConnectionLinesOfEveryRelease) {
  // 2.3: cudaDev in brackets; NET printed on the receiving side without a tag.
  Connection c = OneConnection("h:1:2 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC");
  EXPECT_EQ(c.keyword, "Ring");
  EXPECT_EQ(c.src_dev, "0");
  c = OneConnection("h:1:2 [0] NCCL INFO Ring 01 : 3 -> 0 via NET/IB/0/GDRDMA/GDCopy");
  EXPECT_EQ(c.src_dev, "");
  EXPECT_EQ(c.LoggingRank(), 0);
  EXPECT_EQ(c.transport_class, P2PTRACE_TRANSPORT_NET_GDR);
  c = OneConnection("h:1:2 [0] NCCL INFO Ring 00 : 0 -> 1 via P2P/common device");
  EXPECT_EQ(c.transport_class, P2PTRACE_TRANSPORT_SAME_DEVICE);
  // 2.8+: indirect through another GPU; 2.12 PXN proxy rank; 2.18.1 CUMEM with cudaDev in hex.
  c = OneConnection("h:1:2 [2] NCCL INFO Channel 03 : 2[3d000] -> 5[b2000] via P2P/indirect/4[89000]/read");
  EXPECT_EQ(c.transport, "P2P/indirect/4[89000]/read");
  EXPECT_EQ(c.transport_class, P2PTRACE_TRANSPORT_P2P_INDIRECT);
  c = OneConnection("h:1:2 [5] NCCL INFO Channel 02/0 : 13[5] -> 21[5] [send] via NET/IBext_v8/5(2)/GDRDMA");
  EXPECT_EQ(c.transport, "NET/IBext_v8/5(2)/GDRDMA");
  EXPECT_EQ(c.conn_index, 0);
  c = OneConnection("h:1:2 [0] NCCL INFO Channel 00/1 : 0[a] -> 1[b] via P2P/CUMEM/CE");
  EXPECT_EQ(c.dst_dev, "b");
  EXPECT_EQ(c.transport_class, P2PTRACE_TRANSPORT_P2P);
  // 2.26+: GDR through C2C, shared buffers; 2.30.7 two-part SHM; MNNVL.
  c = OneConnection("h:1:2 [0] NCCL INFO Channel 01/1 : 0[0] -> 9[0] [send] via NET/IB/1/GDRDMA(PCI)/Shared");
  EXPECT_EQ(c.transport, "NET/IB/1/GDRDMA(PCI)/Shared");
  EXPECT_EQ(c.transport_class, P2PTRACE_TRANSPORT_NET_GDR);
  EXPECT_EQ(OneConnection("h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct").transport_class,
            P2PTRACE_TRANSPORT_SHM);
  EXPECT_EQ(OneConnection("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] via P2P/MNNVL/read").transport_class,
            P2PTRACE_TRANSPORT_NVLINK);
  // CollNet (2.6 `Coll`, 2.9 `CollNet NN`, 2.14 `CollNet NN/c`).
  c = OneConnection("h:1:2 [0] NCCL INFO Coll 00 : 0 [send] via COLLNET/SHARP/0/GDRDMA");
  EXPECT_EQ(c.dst_rank, -1);
  EXPECT_EQ(c.direction, "send");
  EXPECT_EQ(c.transport_class, P2PTRACE_TRANSPORT_COLLNET);
  c = OneConnection("h:1:2 [1] NCCL INFO CollNet 01/1 : 1 [receive] via COLLNET/SHARP/1/GDRDMA(PCI)");
  EXPECT_EQ(c.conn_index, 1);
  EXPECT_EQ(c.LoggingRank(), 1);
  // RCCL's suffix names the comm.
  c = OneConnection("h:1:2 [0] NCCL INFO Channel 00/0 : 0[1000] -> 1[2000] via NET/AWS Libfabric/2/GDRDMA comm 0x9bbf3b0 nRanks 4096");
  EXPECT_EQ(c.transport, "NET/AWS Libfabric/2/GDRDMA");
  EXPECT_EQ(c.comm, "0x9bbf3b0");
}

TEST(NcclLogGrammar, PrefixesOfLaunchersAndReleases) {
  const char* text =
      "[1,3]<stdout>:node-a:33:73 [3] NCCL INFO Channel 00 : 3[1] -> 4[1] via P2P/IPC\n"           // mpirun
      "0: node-b:12:13 [1] NCCL INFO Channel 00 : 1[1] -> 2[2] via P2P/IPC\n"                      // srun -l
      "(RayWorker pid=77) 2024-05-11 14:10:52.148 node-c:77:78 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\n"
      "[2025-06-12 16:57:52.123456] node-d:5:6 [2] NCCL INFO Channel 00/0 : 2[2] -> 3[3] via P2P/IPC\n"
      "\n"
      "[2025-06-12 16:57:52] node-d:5:6 [2] misc/socket.cc:537 NCCL WARN bad socket\n"
      "node-e:5:6 [0] transport/p2p.cc:321 (ncclP2pImport) NCCL WARN failed to peer with device 1(=1b000): 217 peer access is not supported\n"
      "node-f:1:1 NCCL CALL ncclAllReduce(…)\n"
      "send 0.000node-g:9:9 [4] NCCL INFO Channel 00 : 4[4] -> 5[5] via SHM/direct/direct\n";  // spliced
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 5u);
  EXPECT_EQ(log.connections[0].logger.host, "node-a");
  EXPECT_EQ(log.connections[0].logger.pid, 33);
  EXPECT_EQ(log.connections[0].logger.tid, 73);
  EXPECT_EQ(log.connections[0].logger.cuda_dev, 3);
  EXPECT_EQ(log.connections[1].logger.host, "node-b");
  EXPECT_EQ(log.connections[2].logger.host, "node-c");
  EXPECT_EQ(log.connections[3].logger.host, "node-d");
  // The digits glued in front cannot be told from a host name that starts with digits
  // ("10-90-43-152" is a real one); the message itself is recovered.
  EXPECT_EQ(log.connections[4].logger.host, "000node-g");
  EXPECT_EQ(log.connections[4].line, 9u);
  ASSERT_EQ(log.warnings.size(), 2u);
  EXPECT_EQ(log.warnings[0].text, "bad socket");
  EXPECT_EQ(log.warnings[0].line, 6u);
  ASSERT_EQ(log.refusals.size(), 1u);
  EXPECT_EQ(log.refusals[0].kind, "cuda-peer-enable-failed");
  EXPECT_EQ(log.refusals[0].logger.host, "node-e");
  EXPECT_EQ(log.nccl_lines, 8u);  // all but the blank line
  EXPECT_EQ(log.lines_read, 9u);
}

// What users paste: the prefix cut down to `NCCL INFO`, or gone.
TEST(NcclLogGrammar, PastedLinesWithoutTheHostPrefix) {
  const char* text =
      "NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send]    via NET/Socket/0\n"
      "NCCL INFO P2P is disabled between connected GPUs 0 and 1.\n"
      "  Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
      "Channel 00/02 :    0   1\n";
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 2u);
  EXPECT_EQ(log.connections[0].direction, "send");
  EXPECT_EQ(log.connections[0].transport, "NET/Socket/0");
  EXPECT_EQ(log.connections[0].logger.host, "");
  EXPECT_EQ(log.connections[1].transport, "SHM/direct/direct");
  EXPECT_EQ(log.connections[1].line, 3u);
  ASSERT_EQ(log.refusals.size(), 1u);
  EXPECT_EQ(log.refusals[0].kind, "nvml-p2p-disabled");
  EXPECT_EQ(log.nccl_lines, 2u);
  EXPECT_EQ(log.lines_skipped, 1u);  // a bare ring-order line is not taken without a prefix
}

// Pastes keep NCCL's messages behind numbers or tags of the user's, with the
// host:pid:tid gone; what they can tie (ranks, a paste's own Init lines) is tied.
TEST(NcclLogGrammar, PastedLinesNumberedByHand) {
  const char* text =
      "1: NCCL INFO ncclCommInitRank comm 0x7f00 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xabc - Init START\n"
      "2: NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
      "[3] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
      "[rank1]: NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
      "  12 | NCCL WARN Error: failed to extend /dev/shm/nccl-x to 9637892 bytes, error: No space left on device (28)\n"
      "We saw NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM in the log\n";  // prose, not a line of NCCL's
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 3u);
  EXPECT_EQ(log.connections[0].line, 2u);
  EXPECT_EQ(log.connections[1].transport, "P2P/CUMEM/read");
  EXPECT_EQ(log.connections[2].line, 4u);
  // The paste's own Init line ties rank 0's line; rank 1's Init line is not in it.
  EXPECT_EQ(log.connections[0].comm, "0x7f00");
  EXPECT_EQ(log.connections[1].comm, "");
  EXPECT_EQ(log.connections[1].attribution, p2ptrace::Attribution::kNone);
  ASSERT_EQ(log.ranks.size(), 1u);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_EQ(log.nccl_lines, 5u);
}

// What follows NCCL's transport in a pasted line is the user's, not NCCL's: cut by the grammar of
// NCCL's format strings, kept as the connection's note.
TEST(NcclLogGrammar, TransportIsNcclsTokenAndTrailingNotesAreCut) {
  struct Case {
    std::string after_via, transport, note;
  } cases[] = {
      {"P2P/CUMEM (all 256 connect lines are P2P/CUMEM)", "P2P/CUMEM", "(all 256 connect lines are P2P/CUMEM)"},
      {"P2P/CUMEM/read  <- NVLink", "P2P/CUMEM/read", "<- NVLink"},
      {"P2P/direct pointer/read why not IPC?", "P2P/direct pointer/read", "why not IPC?"},
      {"P2P/IPC/CE", "P2P/IPC/CE", ""},
      {"P2P/indirect/4[89000]/read (through GPU4)", "P2P/indirect/4[89000]/read", "(through GPU4)"},
      {"P2P/common device", "P2P/common device", ""},
      {"P2P/MNNVL/read", "P2P/MNNVL/read", ""},
      {"SHM/direct/direct # slow!", "SHM/direct/direct", "# slow!"},
      {"SHM/CE/direct", "SHM/CE/direct", ""},
      {"SHM/direct", "SHM/direct", ""},
      {"direct shared memory (old NCCL)", "direct shared memory", "(old NCCL)"},
      {"NET/IB/0/GDRDMA", "NET/IB/0/GDRDMA", ""},
      {"NET/IB/1/GDRDMA(PCI)/Shared -- GH200", "NET/IB/1/GDRDMA(PCI)/Shared", "-- GH200"},
      {"NET/IBext_v8/5(2)/GDRDMA", "NET/IBext_v8/5(2)/GDRDMA", ""},
      {"NET/AWS Libfabric/3/GDRDMA (EFA)", "NET/AWS Libfabric/3/GDRDMA", "(EFA)"},
      {"NET/Socket/0 that is TCP", "NET/Socket/0", "that is TCP"},
      {"NET/IB/0/GDRDMA/GDCopy", "NET/IB/0/GDRDMA/GDCopy", ""},
      {"NET/IB/0/GDRDMA/flush=C2c", "NET/IB/0/GDRDMA/flush=C2c", ""},  // 2.31's receive side
      {"NET/IB/0/GDRDMA/Shared/flush=None", "NET/IB/0/GDRDMA/Shared/flush=None", ""},
      {"P2P/FUTURE/fast", "P2P/FUTURE/fast", ""},  // a form NCCL may add: kept whole
      {"P2P/FUTURE/fast (note)", "P2P/FUTURE/fast", "(note)"},
  };
  for (const Case& c : cases) {
    Connection conn = OneConnection("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via " + c.after_via);
    EXPECT_EQ(conn.transport, c.transport) << c.after_via;
    EXPECT_EQ(conn.note, c.note) << c.after_via;
    EXPECT_EQ(conn.transport_class, p2ptrace::ClassifyNcclTransport(c.transport)) << c.after_via;
  }
}

TEST(NcclLogGrammar, IdentityLinesOfEveryRelease) {
  const char* text =
      "a:1:2 [0] NCCL INFO comm 0x7f3fd4001980 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE\n"        // 2.4
      "a:1:3 [1] NCCL INFO comm 0x7f6f48000dc0 rank 1 nranks 2 cudaDev 1 busId 160 - Init COMPLETE\n"         // 2.5–2.15
      "a:1:4 [2] NCCL INFO comm 0x3 rank 2 nranks 4 cudaDev 2 busId 3000 commId 0x99 - Init COMPLETE\n"       // 2.16
      "a:1:5 [3] NCCL INFO [Rank 3] ncclCommInitRank comm 0x4 rank 3 nranks 4 cudaDev 3 nvmlDev 5 busId 4000 commId 0x99 - Init START\n"
      "a:1:5 [3] NCCL INFO ncclCommInitRank comm 0x4 rank 3 nranks 4 cudaDev 3 nvmlDev 5 busId 4000 commId 0x99 - Init COMPLETE\n"
      "a:1:5 [3] NCCL INFO comm 0x4 rank 3 nRanks 4 nNodes 1 localRanks 4 localRank 3 MNNVL 0\n"             // not one
      "a:1:5 [3] NCCL INFO comm 0x4 rank 3 nranks 4 cudaDev 3 busId 4000 - Destroy COMPLETE\n";
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.ranks.size(), 4u);
  EXPECT_EQ(log.ranks[0].nvml_dev, 0);
  EXPECT_EQ(log.ranks[0].bus_id, "");
  EXPECT_EQ(log.ranks[1].bus_id, "160");
  EXPECT_EQ(log.ranks[2].comm_id, "0x99");
  const auto& r = log.ranks[3];
  EXPECT_EQ(r.api, "ncclCommInitRank");
  EXPECT_EQ(r.nvml_dev, 5);
  EXPECT_EQ(r.start_line, 4u);
  EXPECT_EQ(r.complete_line, 5u);
  EXPECT_EQ(r.end_line, 7u);
  EXPECT_EQ(r.host, "a");
  EXPECT_EQ(r.pid, 1);
}

// NCCL 2.2 and older printed no `NCCL` before the level (binary releases; 2.3.5's debug.h added it).
// The prefix and the init line are fixture 39's (horovod/horovod#489, libnccl 2.2.13), the ring line
// fixture 40's (NVIDIA/nccl#147, 2.3): no public 2.2 log with a connection line could be found, and
// 2.3.5's `Ring %02d : %d[%d] -> %d[%d] via P2P/IPC` is the format 2.2 shipped with. 2.3.7 ended its
// init line with ` - COMPLETE` (init.cu).
TEST(NcclLogGrammar, ReleasesBeforeTwoThreeWithoutNcclBeforeTheLevel) {
  const char* text =
      "nmyjs-202-75:24499:24701 [0] INFO comm 0x55d07fb87c10 rank 0 nranks 16\n"
      "nmyjs-202-75:24499:24701 [0] INFO Ring 04 : 3[3] -> 2[2] via P2P/IPC\n"
      "nmyjs-202-75:24499:24701 [0] INFO Ring 05 : 0 -> 4 via NET/IB/0\n"
      "nmyjs-202-75:24499:24701 [0] INFO Using NCCL Low-latency algorithm for sizes below 16384\n"
      "learnfair062:40503:40616 [0] NCCL INFO comm 0x7f8 rank 0 nranks 8 - COMPLETE\n"
      "a user's own line: INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC\n";  // no prefix: not NCCL's
  NcclLog log = ParseNcclLog(text);
  ASSERT_EQ(log.connections.size(), 2u);
  EXPECT_EQ(log.connections[0].logger.host, "nmyjs-202-75");
  EXPECT_EQ(log.connections[0].logger.pid, 24499);
  EXPECT_EQ(log.connections[0].logger.cuda_dev, 0);
  EXPECT_EQ(log.connections[0].src_rank, 3);
  EXPECT_EQ(log.connections[0].dst_rank, 2);
  EXPECT_EQ(log.connections[0].transport_class, P2PTRACE_TRANSPORT_P2P);
  EXPECT_EQ(log.connections[1].transport_class, P2PTRACE_TRANSPORT_NET_IB);
  ASSERT_EQ(log.ranks.size(), 2u);
  EXPECT_EQ(log.ranks[0].comm, "0x55d07fb87c10");
  EXPECT_EQ(log.ranks[0].nranks, 16);
  EXPECT_EQ(log.ranks[0].start_line, 1u);
  EXPECT_EQ(log.ranks[1].nranks, 8);
  EXPECT_EQ(log.ranks[1].complete_line, 5u);
  EXPECT_EQ(log.nccl_lines, 5u);
}

TEST(NcclLogGrammar, VersionEnvRefusalsRingsTrees) {
  const char* text =
      "[1,0]<stdout>:NCCL version 2.8.4+cuda11.2\n"                                   // bare, < 2.22
      "h:1:1 [0] NCCL INFO NCCL version 2.22.3+cuda12.2\n"
      "h:1:1 [0] NCCL INFO NCCL git version master be4d833-dirty\n"
      "h:1:1 [0] NCCL INFO NCCL_SHM_DISABLE set by environment to 1.\n"
      "h:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0.\n"
      "h:1:1 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to PXB\n"
      "h:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 0\n"
      "h:1:1 [0] NCCL INFO peer query failed between dev 0(=1a000) and dev 1(=1b000)\n"
      "h:1:1 [0] NCCL INFO Channel 00/02 :    0   1   2   3\n"
      "h:1:1 [0] NCCL INFO Channel 01/02 : 0 3 2 1\n"
      "h:1:1 [0] NCCL INFO Ring 00 : 3 -> 0 -> 1\n"
      "h:1:1 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 2/3/-1->0->-1\n"                 // 2.9+
      "h:1:1 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1|-1->0->1/-1/-1\n"                    // 2.5–2.8
      "h:1:1 [0] NCCL INFO Trees [0] -1->0->1/-1/-1\n";                                  // 2.4
  NcclLog log = ParseNcclLog(text);
  EXPECT_EQ(log.nccl_version, "2.8.4+cuda11.2");
  ASSERT_EQ(log.version_lines.size(), 2u);
  ASSERT_EQ(log.env.size(), 4u);
  EXPECT_EQ(log.env[0].value, "1");
  EXPECT_EQ(log.env[1].value, "eth0.");  // not a number: the period stays
  ASSERT_EQ(log.refusals.size(), 2u);
  EXPECT_EQ(log.refusals[0].kind, "env-shm-disabled");
  EXPECT_EQ(log.refusals[0].text, "NCCL_SHM_DISABLE set by environment to 1.");
  EXPECT_EQ(log.refusals[1].kind, "cuda-peer-query-failed");
  ASSERT_EQ(log.rings.size(), 2u);
  EXPECT_EQ(log.rings[0].nchannels, 2);
  EXPECT_EQ(log.rings[1].ranks, (std::vector<int>{0, 3, 2, 1}));
  EXPECT_TRUE(log.connections.empty());
  ASSERT_EQ(log.trees.size(), 4u);
  EXPECT_EQ(log.trees[1].children, (std::vector<int>{2, 3}));
  EXPECT_EQ(log.trees[1].parent, -1);
  EXPECT_EQ(log.trees[2].children, (std::vector<int>{1}));
  EXPECT_EQ(log.trees[3].parent, -1);
  EXPECT_EQ(log.trees[3].children, (std::vector<int>{1}));
}

TEST(NcclLogGrammar, ClassifiesEveryTransportFamily) {
  using p2ptrace::ClassifyNcclTransport;
  EXPECT_EQ(ClassifyNcclTransport("P2P/CUMEM/read"), P2PTRACE_TRANSPORT_P2P);
  EXPECT_EQ(ClassifyNcclTransport("P2P/IPC"), P2PTRACE_TRANSPORT_P2P);
  EXPECT_EQ(ClassifyNcclTransport("P2P/direct pointer"), P2PTRACE_TRANSPORT_P2P);
  EXPECT_EQ(ClassifyNcclTransport("SHM/CE/direct"), P2PTRACE_TRANSPORT_SHM);
  EXPECT_EQ(ClassifyNcclTransport("direct shared memory"), P2PTRACE_TRANSPORT_SHM);
  EXPECT_EQ(ClassifyNcclTransport("NET/IB/0"), P2PTRACE_TRANSPORT_NET_IB);
  EXPECT_EQ(ClassifyNcclTransport("NET/AWS Libfabric/0"), P2PTRACE_TRANSPORT_NET_IB);
  EXPECT_EQ(ClassifyNcclTransport("NET/Socket/0/Shared"), P2PTRACE_TRANSPORT_NET_SOCKET);
  EXPECT_EQ(ClassifyNcclTransport("NET/IB/0/GDRDMA"), P2PTRACE_TRANSPORT_NET_GDR);
  EXPECT_EQ(ClassifyNcclTransport("NVLS"), P2PTRACE_TRANSPORT_NVLS);
  EXPECT_EQ(ClassifyNcclTransport("COLLNET/SHARP/0"), P2PTRACE_TRANSPORT_COLLNET);
  EXPECT_EQ(ClassifyNcclTransport("carrier pigeon"), P2PTRACE_TRANSPORT_UNKNOWN);
}

TEST(NcclLogGrammar, MalformedLinesAreSkipped) {
  const char* text =
      "h:1:1 [0] NCCL INFO Channel 99999999999999999999/0 : 0[0] -> 1[1] via P2P/IPC\n"
      "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via \n"
      "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> x[1] via P2P/IPC\n"
      "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0 -> 1[1] via P2P/IPC\n"
      "h:1:1 [0] NCCL INFO comm 0x1 rank abc nranks 2 cudaDev 0 - Init COMPLETE\n"
      "h:1:1 [0] NCCL INFO comm 0x1 rank 1 nranks 99999999999 cudaDev x - Init COMPLETE\n"
      "h:1:1 [0] NCCL INFO Trees [0] 1/x/-1->0->-1\n"
      "h:99999999999:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
      "h:1:1 [x] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
      "NCCL INFO Channel 00/0 : 0[0] -> 1[1]\n"
      "h:1:1 [2] NCCL INFO Channel -101 : 2[8000] -> 3[9000] via P2P/direct pointer\n"  // found by the fuzzer
      "h:1:1 [2] NCCL INFO Channel 01 : -2[8000] -> 3[9000] via P2P/direct pointer\n";
  NcclLog log = ParseNcclLog(text);
  EXPECT_TRUE(log.connections.empty());
  ASSERT_EQ(log.ranks.size(), 1u);  // rank 1 is readable; the bad numbers stay unknown
  EXPECT_EQ(log.ranks[0].nranks, -1);
  EXPECT_EQ(log.ranks[0].cuda_dev, -1);
  EXPECT_TRUE(log.trees.empty());
  EXPECT_EQ(log.lines_read, 12u);
  EXPECT_EQ(log.lines_skipped, 11u);
}

// ---- what a log tap meets -----------------------------------------------------------------------

std::string AllFixturesText() {
  std::string all;
  for (const std::string& f : FixtureLogs()) all += ReadFile(f);
  return all;
}

TEST(NcclLogFeed, EverySplitOfALineGivesTheSameLog) {
  const std::string text =
      "[1,0]<stdout>:node-a:26:67 [0] NCCL INFO Channel 01/0 : 0[101c0] -> 3[201d0] via P2P/IPC/read\r\n"
      "node-a:26:67 [0] NCCL INFO ncclCommInitRank comm 0x5 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 101c0 commId 0x7 - Init COMPLETE\n"
      "NCCL version 2.8.4+cuda11.2\n"
      "node-a:26:67 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1\n"
      "node-a:26:67 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer";  // no final newline
  const NcclLog whole = ParseNcclLog(text);
  ASSERT_EQ(whole.connections.size(), 2u);
  ASSERT_EQ(whole.lines_read, 5u);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    NcclLogParser p;
    p.Feed(std::string_view(text).substr(0, cut));
    p.Feed(std::string_view(text).substr(cut));
    p.Finish();
    ASSERT_EQ(p.log(), whole) << "split at byte " << cut;
  }
  for (size_t a = 0; a < text.size(); a += 7) {
    for (size_t b = a; b <= text.size(); b += 13) {
      NcclLogParser p;
      p.Feed(std::string_view(text).substr(0, a));
      p.Feed(std::string_view(text).substr(a, b - a));
      p.Feed(std::string_view(text).substr(b));
      p.Finish();
      ASSERT_EQ(p.log(), whole) << "splits at " << a << " and " << b;
    }
  }
}

TEST(NcclLogFeed, EveryFixtureByteByByte) {
  for (const std::string& f : FixtureLogs()) {
    std::string text = ReadFile(f);
    NcclLogParser p;
    for (char c : text) p.Feed(std::string_view(&c, 1));
    p.Finish();
    EXPECT_EQ(p.log(), ParseNcclLog(text)) << f;
  }
}

TEST(NcclLogFeed, CrlfLineEndsGiveTheSameLog) {
  std::string lf = AllFixturesText(), crlf;
  for (char c : lf) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  NcclLog a = ParseNcclLog(lf), b = ParseNcclLog(crlf);
  EXPECT_GT(a.connections.size(), 200u);
  EXPECT_EQ(a, b);
}

TEST(NcclLogFeed, MegabyteLines) {
  const std::string conn = "h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\n";
  std::string junk(1 << 20, 'A');
  std::string progress;
  while (progress.size() < (1u << 20)) progress += " 42%|#####     | 420/1000 [00:42<00:58]\r";
  std::string text = conn + junk + "\n" + conn + progress + conn + junk + conn;
  NcclLogParser p;
  for (size_t i = 0; i < text.size(); i += 4096) p.Feed(std::string_view(text).substr(i, 4096));
  p.Finish();
  const NcclLog& log = p.log();
  ASSERT_EQ(log.connections.size(), 3u);  // the one glued after a megabyte of 'A' is cut away
  EXPECT_EQ(log.connections[0].line, 1u);
  EXPECT_EQ(log.connections[1].line, 3u);
  EXPECT_EQ(log.connections[2].line, 4u);  // a progress bar redrawn with '\r', then the NCCL line
  EXPECT_EQ(log.lines_read, 5u);
  EXPECT_EQ(log.long_lines, 2u);
  EXPECT_EQ(log.lines_skipped, 2u);
}

TEST(NcclLogFeed, BinaryGarbageNeverCrashesAndKeepsCounting) {
  std::mt19937 rng(12345);
  const std::string seed = AllFixturesText();
  std::string garbage;
  for (int i = 0; i < 200000; ++i) {
    int r = static_cast<int>(rng() % 100);
    if (r < 70) garbage += static_cast<char>(rng() & 0xff);
    else if (r < 85) garbage += seed.substr(rng() % seed.size(), rng() % 80);
    else if (r < 95) garbage += " NCCL INFO ";
    else garbage += (r % 2) ? "[0] " : "\n";
  }
  NcclLogParser p;
  for (size_t i = 0; i < garbage.size();) {
    size_t n = 1 + rng() % 3000;
    p.Feed(std::string_view(garbage).substr(i, n));
    i += n;
  }
  p.Finish();
  size_t newlines = static_cast<size_t>(std::count(garbage.begin(), garbage.end(), '\n'));
  bool trailing = !garbage.empty() && garbage.back() != '\n';
  EXPECT_EQ(p.log().lines_read, newlines + (trailing ? 1 : 0));
  EXPECT_EQ(p.log(), ParseNcclLog(garbage));
  // A valid log after the garbage still parses.
  NcclLogParser q;
  q.Feed(garbage + "\nh:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\n");
  q.Finish();
  ASSERT_FALSE(q.log().connections.empty());
  EXPECT_EQ(q.log().connections.back().transport, "P2P/IPC");
}

// The tap file's name: made by the shim (NcclTapFilePattern, expanded as NCCL expands it) and read
// back by the report (NcclLogFileHost) through one pair of functions; the host survives whole.
TEST(NcclTapFile, TheNameTheShimMakesGivesItsHostBack) {
  using namespace p2ptrace;
  struct Case {
    std::string host, file, back;
  };
  for (const Case& c : std::vector<Case>{{"gpu01.cluster.local", "nccl.gpu01.cluster.local.42.log", "gpu01.cluster.local"},
                                         {"a%b", "nccl.a%b.42.log", "a%b"},
                                         {"a/b\x01", "nccl.a_b_.42.log", "a_b_"},
                                         {"", "nccl.host.42.log", "host"}}) {
    std::string file = ExpandNcclDebugFile(NcclTapFilePattern(c.host), "ignored-no-%h", 42);
    EXPECT_EQ(file, c.file) << c.host;
    EXPECT_TRUE(IsNcclLogFileName(file));
    EXPECT_EQ(NcclLogFileHost(file), c.back) << file;
  }
}

TEST(NcclTapFile, OtherNamesGiveNoHost) {
  using namespace p2ptrace;
  EXPECT_TRUE(IsNcclLogFileName("nccl.log"));  // a user's own log in the directory is still read
  EXPECT_EQ(NcclLogFileHost("nccl.log"), "");
  EXPECT_EQ(NcclLogFileHost("nccl.host.x.log"), "");  // no pid
  EXPECT_EQ(NcclLogFileHost("nccl..42.log"), "");      // no host
  EXPECT_EQ(NcclLogFileHost("nccl.host.42.txt"), "");
  EXPECT_FALSE(IsNcclLogFileName("trace.log"));
  EXPECT_FALSE(IsNcclLogFileName("nccl.p2ptrace"));
}

}  // namespace
