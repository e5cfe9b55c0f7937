// `p2ptrace doctor --prometheus FILE` and `p2ptrace export DIR --prometheus FILE`: every
// file passes Prometheus' own `promtool check metrics` (Debian's prometheus package), and its values
// are what the node and the job say: parsed here, they are compared with `doctor --json` and
// `report --json` of the same node and job, and with what the job is known to have moved. Bad input
// exits 2 with one line and leaves no file (nor a temporary one) behind.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"
#include "tools/common/output_file.h"
#include "tools/formats/prometheus.h"
#include "tools/report/report.h"

namespace p2ptrace {
namespace {

using testing::Env;
using testing::RunProgram;
using testing::RunResult;
using testing::TempDir;

const std::string kMixed = std::string(P2PTRACE_TOPOLOGY_DIR) + "/mixed-8gpu.json";

Env CleanEnv() {
  return {{"P2PSIM_TOPOLOGY", std::nullopt}, {"P2PSIM_HOST", std::nullopt}, {"P2PTRACE_SYSROOT", std::nullopt},
          {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"P2PTRACE_SAMPLE", std::nullopt}, {"P2PTRACE_DIR", std::nullopt},
          {"NO_COLOR", "1"}};
}

// --- the text format, parsed independently of the writer -----------------------------------------

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> help, type;
  std::vector<std::string> problems;  // anything a scraper would refuse or the conventions forbid

  std::vector<const Sample*> Find(const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    std::vector<const Sample*> out;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& [k, v] : match) {
        auto l = s.labels.find(k);
        ok = ok && (v.empty() ? l == s.labels.end() : l != s.labels.end() && l->second == v);
      }
      if (ok) out.push_back(&s);
    }
    return out;
  }
};

Exposition Parse(const std::string& text) {
  Exposition x;
  std::set<std::string> series;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      std::string rest = line.substr(7);
      x.help[rest.substr(0, rest.find(' '))] = rest.substr(rest.find(' ') + 1);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::string rest = line.substr(7);
      x.type[rest.substr(0, rest.find(' '))] = rest.substr(rest.find(' ') + 1);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    std::string key = s.name;
    if (i < line.size() && line[i] == '{') {
      size_t close = i;
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        std::string label = line.substr(i, eq - i);
        i = eq + 2;  // past ="
        std::string value;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            char c = line[++i];
            value += c == 'n' ? '\n' : c;
          } else {
            value += line[i];
          }
        }
        ++i;  // past the closing quote
        if (s.labels.count(label)) x.problems.push_back("label twice: " + line);
        s.labels[label] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      key += line.substr(close, i + 1 - close);
      ++i;
    }
    std::string rest = line.substr(i);
    if (rest.empty() || rest[0] != ' ' || rest.find(' ', 1) != std::string::npos)
      x.problems.push_back("not `name{labels} value` (a timestamp?): " + line);
    s.value = std::stod(rest);
    if (!x.help.count(s.name) || !x.type.count(s.name)) x.problems.push_back("no HELP/TYPE before " + line);
    if (!series.insert(key).second) x.problems.push_back("duplicate series: " + line);
    for (const auto& [k, v] : s.labels) {
      if (k == "pid" || k.find("time") != std::string::npos || k == "rank")
        x.problems.push_back("unbounded label " + k + ": " + line);
      if (v.empty()) x.problems.push_back("empty label value: " + line);
    }
    bool counter = x.type[s.name] == "counter";
    if (counter != (s.name.size() > 6 && s.name.substr(s.name.size() - 6) == "_total"))
      x.problems.push_back("_total and counter go together: " + s.name);
    if (s.name.rfind("p2ptrace_", 0) != 0) x.problems.push_back("no p2ptrace_ prefix: " + s.name);
    x.samples.push_back(std::move(s));
  }
  return x;
}

// Prometheus' own checker: the text format and its naming lint. Fails the test when missing:
// scripts/common.sh installs Debian's prometheus package, which ships it.
void ExpectPromtoolAccepts(const std::string& file) {
  ASSERT_TRUE(std::filesystem::exists(PROMTOOL)) << "promtool not found (" << PROMTOOL
                                                 << "): install Debian's prometheus package (scripts/common.sh)";
  RunResult r = RunProgram({"/bin/sh", "-c", "exec \"$0\" check metrics < \"$1\"", PROMTOOL, file});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "") << "promtool's lint";
}

Exposition ReadChecked(const std::string& file) {
  ExpectPromtoolAccepts(file);
  std::string text = testing::ReadFile(file);
  EXPECT_FALSE(text.empty()) << file;
  Exposition x = Parse(text);
  EXPECT_TRUE(x.problems.empty()) << ::testing::PrintToString(x.problems);
  return x;
}

const Sample* One(const Exposition& x, const std::string& name, const std::map<std::string, std::string>& labels) {
  auto found = x.Find(name, labels);
  EXPECT_EQ(found.size(), 1u) << name;
  return found.size() == 1 ? found[0] : nullptr;
}

// The entries of a directory, sorted: to see that no temporary file was left behind.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string SmiBusId(std::string bus) {  // "0000:18:00.0" -> "00000000:18:00.0"
  for (char& c : bus) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return "0000" + bus;
}

const std::set<std::string> kDirect = {"nvlink", "pcie_p2p", "p2p", "p2p_indirect"};

// --- doctor on the simulated node ------------------------------------------------------------------

TEST(Prometheus, DoctorOnTheMixedNodeWritesEveryPairsPredictionAndTheNodeGauge) {
  std::string dir = TempDir() + "/doctor-prom";
  std::filesystem::create_directories(dir);
  std::string file = dir + "/p2ptrace.prom";
  RunResult r = RunProgram({P2PSIM, "launch", "--topology", kMixed, "--hosts", "node0:1", "--", P2PTRACE_CLI, "doctor",
                            "--prometheus", file},
                           CleanEnv());
  RunResult j = RunProgram({P2PSIM, "launch", "--topology", kMixed, "--hosts", "node0:1", "--", P2PTRACE_CLI, "doctor",
                            "--json"},
                           CleanEnv());
  ASSERT_EQ(r.exit_code, j.exit_code) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pairs (predicted path"), std::string::npos) << "the text still goes to stdout";
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"p2ptrace.prom"});
  struct stat st{};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0044, 0044u) << "node_exporter, another user, must be able to read it";
  std::string json_text;  // p2psim launch marks each line of its ranks' output with "[rank N] "
  std::istringstream lines(j.out);
  for (std::string line; std::getline(lines, line);)
    json_text += (line.rfind("[rank 0] ", 0) == 0 ? line.substr(9) : line) + "\n";
  nlohmann::json doc = nlohmann::json::parse(json_text);
  Exposition x = ReadChecked(file);

  std::map<int, std::string> bus;
  for (const auto& g : doc["gpus"]) bus[g["index"]] = SmiBusId(g["bus_id"]);
  ASSERT_EQ(bus.size(), 8u);
  EXPECT_EQ(bus[0], "00000000:18:00.0");
  ASSERT_EQ(doc["pairs"].size(), 28u);
  int without = 0;
  for (const auto& p : doc["pairs"]) {
    int a = p["a"], b = p["b"];
    std::set<std::string> causes;
    for (const auto& c : p["causes"])
      if (c["role"] != "context") causes.insert(c["id"]);
    for (auto [s, d] : {std::pair{a, b}, std::pair{b, a}}) {
      SCOPED_TRACE("GPU" + std::to_string(s) + " -> GPU" + std::to_string(d));
      std::map<std::string, std::string> pair = {{"source", "doctor"}, {"host", "node0"},
                                                 {"src_gpu", std::to_string(s)}, {"src_pci_bus_id", bus[s]},
                                                 {"dst_gpu", std::to_string(d)}, {"dst_pci_bus_id", bus[d]}};
      auto avail = x.Find("p2ptrace_pair_path_available_info", pair);
      ASSERT_EQ(avail.size(), 1u);
      EXPECT_EQ(avail[0]->labels.at("class"), p["predicted"]);
      EXPECT_EQ(avail[0]->labels.at("link"), p["link"]);
      EXPECT_EQ(avail[0]->value, 1);
      without += !kDirect.count(p["predicted"]);
      auto fb = x.Find("p2ptrace_pair_fallback", pair);
      ASSERT_FALSE(fb.empty());
      if (p["fallback"]) {
        std::set<std::string> named;
        for (const Sample* f : fb) {
          EXPECT_EQ(f->value, 1);
          named.insert(f->labels.at("cause"));
        }
        EXPECT_EQ(named, causes);
      } else {
        ASSERT_EQ(fb.size(), 1u);
        EXPECT_EQ(fb[0]->value, 0);
        EXPECT_EQ(fb[0]->labels.count("cause"), 0u);
      }
    }
  }
  // The mixed node for NCCL: NVLink 0-1 and 4-5, PCIe P2P 2-3 and 6-7; every other pair over SHM.
  EXPECT_EQ(without, 48);
  auto node = x.Find("p2ptrace_node_pairs_without_p2p", {{"source", "doctor"}, {"host", "node0"}});
  ASSERT_EQ(node.size(), 1u);
  EXPECT_EQ(node[0]->value, without);
  // A pair across the sockets: SHM instead of P2P, NCCL's P2P level the cause.
  auto cross = x.Find("p2ptrace_pair_fallback", {{"src_gpu", "3"}, {"dst_gpu", "4"}});
  ASSERT_EQ(cross.size(), 1u);
  EXPECT_EQ(cross[0]->labels.at("cause"), "topology-beyond-p2p-level");
  EXPECT_TRUE(x.Find("p2ptrace_pair_bytes_total").empty()) << "doctor moves nothing";
  const Sample* gpus = One(x, "p2ptrace_node_gpus", {{"source", "doctor"}, {"host", "node0"}});
  ASSERT_NE(gpus, nullptr);
  EXPECT_EQ(gpus->value, 8);
}

// doctor --test --prometheus: what the test measured and judged, families of their own (a node's
// collector directory may hold doctor's file beside it), the same figures as --json.
TEST(Prometheus, DoctorTestWritesEachPairsMeasuresVerdictAndCauses) {
  const std::string faulty = std::string(P2PTRACE_TOPOLOGY_DIR) + "/faulty-pcie-4gpu.json";
  std::string dir = TempDir() + "/test-prom", root = dir + "/root";
  std::filesystem::create_directories(dir);
  ASSERT_EQ(RunProgram({P2PSIM, "sysroot", faulty, "bench4", root}).exit_code, 0);
  Env env = CleanEnv();
  env["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  env["P2PSIM_TOPOLOGY"] = faulty;
  env["P2PTRACE_SYSROOT"] = root;
  env["P2PSIM_NCCL_DIR"] = dir;
  std::string file = dir + "/test.prom";
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--test", "--time-limit", "0.5", "--json", "--prometheus", file}, env);
  ASSERT_EQ(r.exit_code, 1) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  Exposition x = ReadChecked(file);
  EXPECT_TRUE(x.Find("p2ptrace_pair_fallback").empty()) << "the test's own families only";
  int failed = 0;
  for (const auto& p : doc["pairs"]) {
    std::string s = std::to_string(p["src"]["gpu"].get<int>()), d = std::to_string(p["dst"]["gpu"].get<int>());
    SCOPED_TRACE("GPU" + s + " -> GPU" + d);
    std::map<std::string, std::string> pair = {{"source", "test"}, {"host", "bench4"}, {"src_gpu", s}, {"dst_gpu", d}};
    const Sample* verdict = One(x, "p2ptrace_pair_test_verdict_info", pair);
    ASSERT_NE(verdict, nullptr);
    EXPECT_EQ(verdict->labels.at("verdict"), p["verdict"]);
    auto one_way = pair;
    one_way["direction"] = "one_way";
    auto bw = x.Find("p2ptrace_pair_test_bandwidth_bytes_per_second", one_way);
    if (p["gbps"].is_null()) {
      EXPECT_TRUE(bw.empty());
    } else {
      ASSERT_EQ(bw.size(), 1u);
      EXPECT_NEAR(bw[0]->value, p["gbps"].get<double>() * 1e9, 1e3);
      EXPECT_EQ(bw[0]->labels.at("class"), p["transport"]);
    }
    auto data = x.Find("p2ptrace_pair_test_data_ok", pair);
    if (p["data_ok"].is_null()) EXPECT_TRUE(data.empty());
    else EXPECT_EQ(data.at(0)->value, p["data_ok"].get<bool>() ? 1 : 0);
    std::set<std::string> causes, named;
    for (const auto& c : p["causes"]) causes.insert(c["id"]);
    for (const Sample* f : x.Find("p2ptrace_pair_test_failure", pair)) named.insert(f->labels.at("cause"));
    if (p["verdict"] == "fail") {
      ++failed;
      EXPECT_EQ(named, causes.empty() ? std::set<std::string>{"unknown"} : causes);
    } else {
      EXPECT_TRUE(named.empty());
    }
  }
  EXPECT_EQ(failed, 4);
  const Sample* node = One(x, "p2ptrace_node_test_failed_pairs", {{"source", "test"}, {"host", "bench4"}});
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->value, 4);
  const Sample* when = One(x, "p2ptrace_node_test_timestamp_seconds", {{"host", "bench4"}});
  ASSERT_NE(when, nullptr);
  EXPECT_NEAR(when->value, static_cast<double>(time(nullptr)), 120);
  // The corrupting pair says so; the down-trained ones name their cause.
  EXPECT_EQ(One(x, "p2ptrace_pair_test_data_ok", {{"src_gpu", "0"}, {"dst_gpu", "1"}})->value, 0);
  EXPECT_EQ(One(x, "p2ptrace_pair_test_failure", {{"src_gpu", "0"}, {"dst_gpu", "3"}})->labels.at("cause"), "pcie-downtrained");
}

// A node where no GPU answers: no pair, and the GPU count says why the node gauge is 0.
TEST(Prometheus, DoctorWithoutGpusSaysSo) {
  std::string root = TempDir() + "/bare-root";
  std::filesystem::create_directories(root + "/proc/sys/kernel");
  testing::WriteFile(root + "/proc/sys/kernel/hostname", "bare\n");
  std::string file = TempDir() + "/bare.prom";
  RunResult r = RunProgram({P2PTRACE_CLI, "doctor", "--no-cuda", "--prometheus", file},
                           {{"P2PTRACE_SYSROOT", root}, {"LD_LIBRARY_PATH", "/nonexistent"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Exposition x = ReadChecked(file);
  ASSERT_EQ(x.samples.size(), 2u) << testing::ReadFile(file);
  EXPECT_EQ(One(x, "p2ptrace_node_gpus", {{"host", "bare"}})->value, 0);
  EXPECT_EQ(One(x, "p2ptrace_node_pairs_without_p2p", {{"host", "bare"}})->value, 0);
}

// --- export of a traced job --------------------------------------------------------------------------

// peer_copy --size 1M --iters 1 on the mixed node under `p2ptrace run`: per directional pair one
// warm-up and one timed copy of 1 MiB with peer access off, then the same with it on.
struct Job {
  std::string dir;
  nlohmann::json report;
};

Job PeerCopyJob(const std::string& name, const std::optional<std::string>& sample) {
  Job job{TempDir() + "/" + name, {}};
  Env env = CleanEnv();
  env["P2PTRACE_SAMPLE"] = sample;
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", job.dir, "--", P2PSIM, "launch", "--topology", kMixed,
                            "--hosts", "node0:1", "--", PEER_COPY, "--size", "1M", "--iters", "1"},
                           env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  RunResult rep = RunProgram({P2PTRACE_CLI, "report", job.dir, "--json"});
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  job.report = nlohmann::json::parse(rep.out, nullptr, false);
  return job;
}

std::map<std::string, std::string> PairLabels(const nlohmann::json& p) {
  return {{"source", "job"},
          {"host", p["src"]["host"]},
          {"src_gpu", std::to_string(p["src"]["gpu"].get<int>())},
          {"src_pci_bus_id", SmiBusId(p["src"]["bus_id"])},
          {"dst_host", p["dst"]["host"]},
          {"dst_gpu", std::to_string(p["dst"]["gpu"].get<int>())},
          {"dst_pci_bus_id", SmiBusId(p["dst"]["bus_id"])},
          {"api", p["source"]},
          {"class", p["transport"]}};
}

// Every pair of the report in the file, with the report's values; `bytes`: the pairs' bytes summed.
void ExpectPairsAsReported(const Exposition& x, const nlohmann::json& report, bool timed, double* bytes) {
  *bytes = 0;
  for (const auto& p : report["pairs"]) {
    auto labels = PairLabels(p);
    SCOPED_TRACE(p["src"]["name"].get<std::string>() + " -> " + p["dst"]["name"].get<std::string>() + " " +
                 p["transport"].get<std::string>());
    if (const Sample* s = One(x, "p2ptrace_pair_bytes_total", labels)) {
      EXPECT_EQ(s->value, p["bytes"].get<double>());
      *bytes += s->value;
    }
    if (const Sample* s = One(x, "p2ptrace_pair_calls_total", labels)) {
      EXPECT_EQ(s->value, p["calls"].get<double>());
    }
    if (const Sample* s = One(x, "p2ptrace_pair_path_used_info", labels)) {
      EXPECT_EQ(s->value, 1);
    }
    auto bw = x.Find("p2ptrace_pair_bandwidth_bytes_per_second", labels);
    if (p["gbps"].is_null()) {
      EXPECT_TRUE(bw.empty()) << "no timed call, no bandwidth: not a made-up 0";
    } else {
      ASSERT_EQ(bw.size(), 1u);
      EXPECT_NEAR(bw[0]->value, p["gbps"].get<double>() * 1e9, p["gbps"].get<double>() * 1e9 * 1e-9);
    }
    EXPECT_EQ(p["gbps"].is_null(), !timed);
    auto pair = labels;
    pair.erase("class");
    auto avail = x.Find("p2ptrace_pair_path_available_info", pair);
    if (p["expected"].is_null() || p["expected"] == "unknown") {
      EXPECT_TRUE(avail.empty());
    } else {
      std::set<std::string> classes;
      for (const Sample* a : avail) classes.insert(a->labels.at("class"));
      EXPECT_TRUE(classes.count(p["expected"])) << ::testing::PrintToString(classes);
    }
    auto fb = x.Find("p2ptrace_pair_fallback", labels);
    auto lost = x.Find("p2ptrace_pair_lost_seconds_total", labels);
    if (p["fallback"]) {
      std::set<std::string> named, ids;
      for (const Sample* f : fb) {
        named.insert(f->labels.at("cause"));
        EXPECT_EQ(f->value, 1);
      }
      for (const auto& c : p["causes"]) ids.insert(c["id"]);
      EXPECT_EQ(named, ids);
      if (p["lost_seconds"].is_null()) {
        EXPECT_TRUE(lost.empty()) << "not computable, no sample";
      } else {
        ASSERT_EQ(lost.size(), 1u);
        EXPECT_NEAR(lost[0]->value, p["lost_seconds"].get<double>(), 1e-12);
      }
    } else {
      ASSERT_EQ(fb.size(), 1u);
      EXPECT_EQ(fb[0]->value, 0);
      ASSERT_EQ(lost.size(), 1u);
      EXPECT_EQ(lost[0]->value, 0);
    }
  }
}

// Same-host GPU pairs the job used whose available classes are known and none direct.
int PairsWithoutP2p(const nlohmann::json& report) {
  std::map<std::pair<std::string, std::string>, std::pair<bool, bool>> pairs;
  for (const auto& p : report["pairs"]) {
    if (p["src"]["host"] != p["dst"]["host"] || p["expected"].is_null() || p["expected"] == "unknown") continue;
    auto& v = pairs[{p["src"]["bus_id"], p["dst"]["bus_id"]}];
    v.first = true;
    v.second = v.second || kDirect.count(p["expected"]);
  }
  int n = 0;
  for (const auto& [k, v] : pairs) n += v.first && !v.second;
  return n;
}

TEST(Prometheus, ExportOfATracedJobHasItsBytesFallbacksAndCauses) {
  Job job = PeerCopyJob("peer-copy-prom", std::nullopt);
  ASSERT_TRUE(job.report.is_object());
  std::string dir = TempDir() + "/export-prom";
  std::filesystem::create_directories(dir);
  std::string file = dir + "/job.prom";
  RunResult r = RunProgram({P2PTRACE_CLI, "export", job.dir, "--prometheus", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"job.prom"});
  Exposition x = ReadChecked(file);
  ASSERT_EQ(job.report["pairs"].size(), 24u * 2 + 32u);
  // What peer_copy moved: 1 MiB four times over each of the 56 directional pairs.
  double bytes = 0;
  ExpectPairsAsReported(x, job.report, true, &bytes);
  EXPECT_EQ(bytes, 56.0 * 4 * (1 << 20));
  std::map<std::string, std::string> p01 = {{"src_gpu", "0"}, {"src_pci_bus_id", "00000000:18:00.0"},
                                            {"dst_gpu", "1"}, {"dst_pci_bus_id", "00000000:2A:00.0"},
                                            {"api", "cuda"}};
  auto with = [](std::map<std::string, std::string> m, const std::string& k, const std::string& v) {
    m[k] = v;
    return m;
  };
  EXPECT_EQ(One(x, "p2ptrace_pair_bytes_total", with(p01, "class", "nvlink"))->value, 2 << 20);
  EXPECT_NEAR(One(x, "p2ptrace_pair_bandwidth_bytes_per_second", with(p01, "class", "nvlink"))->value, 123e9, 0.5e9);
  EXPECT_EQ(One(x, "p2ptrace_pair_bytes_total", with(p01, "class", "host_staged"))->value, 2 << 20);
  const Sample* staged = One(x, "p2ptrace_pair_fallback", with(p01, "class", "host_staged"));
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(staged->labels.at("cause"), "peer-access-not-enabled");
  EXPECT_EQ(staged->value, 1);
  EXPECT_GT(One(x, "p2ptrace_pair_lost_seconds_total", with(p01, "class", "host_staged"))->value, 0);
  auto avail01 = x.Find("p2ptrace_pair_path_available_info", p01);
  ASSERT_EQ(avail01.size(), 1u) << "one available class for the pair, whichever path each copy took";
  EXPECT_EQ(avail01[0]->labels.at("class"), "nvlink");
  EXPECT_EQ(avail01[0]->labels.at("link"), "NV6");
  // Across the sockets the driver refuses peer access: host-staged as the node allows, no fallback.
  auto p34 = x.Find("p2ptrace_pair_fallback", {{"src_gpu", "3"}, {"dst_gpu", "4"}});
  ASSERT_EQ(p34.size(), 1u);
  EXPECT_EQ(p34[0]->value, 0);
  EXPECT_EQ(One(x, "p2ptrace_pair_bytes_total", {{"src_gpu", "3"}, {"dst_gpu", "4"}})->value, 4 << 20);
  // CUDA copies on the mixed node: peer access within each socket, none across (4 x 4 x 2 pairs).
  const Sample* node = One(x, "p2ptrace_node_pairs_without_p2p", {{"source", "job"}, {"host", "node0"}});
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->value, PairsWithoutP2p(job.report));
  EXPECT_EQ(node->value, 32);
  // '-': the same exposition on stdout (as --rows -), and no file named "-".
  RunResult piped = RunProgram({"sh", "-c", "cd \"$0\" && exec \"$@\"", dir, P2PTRACE_CLI, "export", job.dir,
                                "--prometheus", "-"});
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.out, p2ptrace::testing::ReadFile(file));
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"job.prom"});
}

TEST(Prometheus, ExportOfAnUntimedJobHasNoBandwidthAndNoLostTimeSamples) {
  Job job = PeerCopyJob("peer-copy-untimed", std::string("off"));
  ASSERT_TRUE(job.report.is_object());
  std::string file = TempDir() + "/untimed.prom";
  RunResult r = RunProgram({P2PTRACE_CLI, "export", job.dir, "--prometheus", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Exposition x = ReadChecked(file);
  double bytes = 0;
  ExpectPairsAsReported(x, job.report, false, &bytes);
  EXPECT_EQ(bytes, 56.0 * 4 * (1 << 20));
  EXPECT_TRUE(x.Find("p2ptrace_pair_bandwidth_bytes_per_second").empty());
  // Fallback pairs' time lost cannot be computed without a rate; pairs on their path lost none.
  for (const Sample* s : x.Find("p2ptrace_pair_lost_seconds_total")) EXPECT_EQ(s->value, 0);
  EXPECT_EQ(x.Find("p2ptrace_pair_lost_seconds_total").size(), 24u + 32u);
  EXPECT_NE(x.help["p2ptrace_pair_bandwidth_bytes_per_second"].find("No sample where no call was timed"),
            std::string::npos);
}

TEST(Prometheus, ExportOfSynthTracesNamesNcclsFallbackCause) {
  std::string dir = TempDir() + "/synth-fallback";
  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "synth", "--ranks", "8", "--events", "40", "--scenario", "fallback", "--out", dir})
                .exit_code,
            0);
  std::string file = TempDir() + "/synth.prom", perfetto = TempDir() + "/synth.json";
  RunResult r = RunProgram({P2PTRACE_CLI, "export", dir, "--prometheus", file, "--perfetto", perfetto});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(perfetto)) << "both outputs in one command";
  RunResult rep = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  nlohmann::json report = nlohmann::json::parse(rep.out, nullptr, false);
  ASSERT_TRUE(report.is_object());
  Exposition x = ReadChecked(file);
  double bytes = 0;
  ExpectPairsAsReported(x, report, true, &bytes);
  EXPECT_GT(bytes, 0);
  auto nccl = x.Find("p2ptrace_pair_fallback", {{"api", "nccl"}});
  ASSERT_FALSE(nccl.empty());
  for (const Sample* s : nccl) {
    EXPECT_EQ(s->labels.at("class"), "shm");
    EXPECT_EQ(s->labels.at("cause"), "env-p2p-disabled");  // synth's NCCL_P2P_DISABLE=1
  }
  const Sample* node = One(x, "p2ptrace_node_pairs_without_p2p", {{"host", "node0"}});
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->value, PairsWithoutP2p(report));
}

// --- the writer's text: escaping, what is left out ---------------------------------------------

TEST(Prometheus, LabelValuesAreEscapedAndUnknownsLeftOut) {
  cli::Report rep;
  cli::PairEntry e;
  e.src = {"no\"de\\0\nx\xff", "0000:1a:00.0", 3};
  e.dst = {"no\"de\\0\nx\xff", "not a bus id", -1};
  e.transport = P2PTRACE_TRANSPORT_HOST_STAGED;
  e.fallback = true;
  e.bytes = (uint64_t{1} << 60) + 1;  // exact beyond a double's 53 bits
  e.calls = 7;
  rep.pairs.push_back(e);
  std::string file = TempDir() + "/escaped.prom";
  ASSERT_EQ(cli::WriteFileAtomically(file, cli::PrometheusFromReport(rep)), "");
  Exposition x = ReadChecked(file);
  ASSERT_EQ(x.samples.size(), 4u) << testing::ReadFile(file);  // used, bytes, calls, fallback
  const Sample* bytes = One(x, "p2ptrace_pair_bytes_total", {});
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(bytes->labels.at("host"), "no\"de\\0\\x0ax\\xff");  // as every output writes such bytes
  EXPECT_EQ(bytes->labels.at("src_pci_bus_id"), "00000000:1A:00.0");
  EXPECT_EQ(bytes->labels.at("src_gpu"), "3");
  EXPECT_EQ(bytes->labels.at("dst_pci_bus_id"), "not a bus id");
  EXPECT_EQ(bytes->labels.count("dst_gpu"), 0u) << "unknown index: no label";
  EXPECT_NE(testing::ReadFile(file).find(" 1152921504606846977\n"), std::string::npos);
  EXPECT_EQ(One(x, "p2ptrace_pair_fallback", {})->labels.at("cause"), "unknown");
  EXPECT_TRUE(x.Find("p2ptrace_pair_path_available_info").empty()) << "expected class unknown";
  EXPECT_TRUE(x.Find("p2ptrace_pair_lost_seconds_total").empty()) << "not computable";
  EXPECT_TRUE(x.Find("p2ptrace_node_pairs_without_p2p").empty()) << "no pair with a known class";
}

// --- bad input -------------------------------------------------------------------------------------

TEST(Prometheus, BadInputExitsTwoAndLeavesNoFile) {
  std::string dir = TempDir() + "/bad-input";
  std::filesystem::create_directories(dir);
  std::string file = dir + "/keep.prom";
  testing::WriteFile(file, "# the previous run's file\n");
  std::string job = TempDir() + "/synth-ok";
  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "synth", "--ranks", "2", "--events", "4", "--out", job}).exit_code, 0);

  // A missing DIR: the previous file stays as it was.
  RunResult r = RunProgram({P2PTRACE_CLI, "export", dir + "/no-such-job", "--prometheus", file});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no-such-job"), std::string::npos) << r.err;
  EXPECT_EQ(testing::ReadFile(file), "# the previous run's file\n");

  // FILE's directory missing, a regular file, or FILE a directory: one line naming it, exit 2.
  testing::WriteFile(dir + "/plain", "x");
  std::filesystem::create_directories(dir + "/adir.prom");
  for (const std::string& target : {dir + "/missing/p.prom", dir + "/plain/p.prom", dir + "/adir.prom"}) {
    SCOPED_TRACE(target);
    RunResult e = RunProgram({P2PTRACE_CLI, "export", job, "--prometheus", target});
    EXPECT_EQ(e.exit_code, 2);
    EXPECT_EQ(e.err.rfind("p2ptrace export: " + target + ": cannot write", 0), 0u) << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
    RunResult d = RunProgram({P2PSIM, "launch", "--topology", kMixed, "--hosts", "node0:1", "--", P2PTRACE_CLI,
                              "doctor", "--prometheus", target},
                             CleanEnv());
    EXPECT_EQ(d.exit_code, 2);
    EXPECT_NE(d.err.find("p2ptrace doctor: " + target + ": cannot write"), std::string::npos) << d.err;
    EXPECT_EQ(d.out.find("pairs (predicted"), std::string::npos) << "stops before probing";
  }
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"adir.prom", "keep.prom", "plain"}));
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/adir.prom"));

  // Neither output asked for.
  r = RunProgram({P2PTRACE_CLI, "export", job});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--prometheus"), std::string::npos) << r.err;
}

TEST(Prometheus, HelpOfBothCommandsDocumentsTheOption) {
  for (const char* command : {"doctor", "export"}) {
    RunResult r = RunProgram({P2PTRACE_CLI, command, "--help"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("--prometheus"), std::string::npos) << command << ":\n" << r.out;
    EXPECT_NE(r.out.find("textfile collector"), std::string::npos) << command << ":\n" << r.out;
  }
  RunResult top = RunProgram({P2PTRACE_CLI, "--help"});
  EXPECT_NE(top.out.find("export DIR --prometheus FILE"), std::string::npos) << top.out;
}

}  // namespace
}  // namespace p2ptrace
