// The post-mortem viewer's outputs beyond `report`: `synth` (synthetic jobs in the real format),
// `export --perfetto` (Chrome trace-event rules that Perfetto relies on), `diff` (exit 1 when a pair
// got worse), and loading directories with damaged, foreign, newer, empty and very many files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/causes.h"
#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"
#include "tools/cli/synth.h"
#include "tools/formats/json.h"
#include "tools/formats/text.h"
#include "tools/report/builder.h"
#include "tools/report/load.h"
#include "tools/report/report.h"
#include "tools/report/traces.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Synth(const std::string& name, int ranks, int events, const std::string& scenario = "healthy",
                  uint64_t seed = 1, int gpus_per_host = 8) {
  std::string dir = TempDir() + "/" + name;
  RunResult r = RunProgram({P2PTRACE_CLI, "synth", "--ranks", std::to_string(ranks), "--events", std::to_string(events),
                            "--out", dir, "--scenario", scenario, "--seed", std::to_string(seed), "--gpus-per-host",
                            std::to_string(gpus_per_host)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

std::string SynthStacks(const std::string& name, int events, const std::string& scenario) {
  std::string dir = TempDir() + "/" + name;
  RunResult r = RunProgram({P2PTRACE_CLI, "synth", "--ranks", "8", "--events", std::to_string(events), "--out", dir,
                            "--scenario", scenario, "--stacks"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

json ReportJson(const std::string& dir) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

std::vector<std::string> Files(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// ------------------------------------------------------------------------------------------------
// synth

TEST(Synth, WritesOneTraceAndOneNcclLogPerRankThatTheReportReads) {
  std::string dir = Synth("synth-healthy", 16, 64);
  EXPECT_EQ(Files(dir, ".p2ptrace").size(), 16u);
  EXPECT_EQ(Files(dir, ".log").size(), 16u);
  json j = ReportJson(dir);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["ranks"].size(), 16u);
  EXPECT_EQ(j["capture"]["nccl_logs"], 16);
  EXPECT_TRUE(j["capture"]["skipped_files"].empty());
  int cuda = 0, nccl_p2p = 0, nccl_net = 0;
  for (const auto& p : j["pairs"]) {
    if (p["source"] == "cuda") {
      ++cuda;
      EXPECT_EQ(p["transport"], "nvlink");
      EXPECT_EQ(p["fallback"], false);
      EXPECT_NEAR(p["gbps"].get<double>(), 370, 370 * 0.06) << p.dump();
    } else {
      nccl_p2p += p["transport"] == "p2p";
      nccl_net += p["transport"] == "net_gdr";
    }
  }
  EXPECT_EQ(cuda, 2 * 8 * 7);  // every ordered GPU pair of both hosts
  EXPECT_EQ(nccl_p2p, 14);     // the ring inside each host
  EXPECT_EQ(nccl_net, 2);      // node0 GPU7 -> node1 GPU0, and back around
  bool allreduce = false;
  for (const auto& o : j["nccl_ops"])
    if (o["op"] == "ncclAllReduce") {
      allreduce = true;
      EXPECT_EQ(o["calls"], 16 * 8);  // one in every 8 events of each rank
      EXPECT_NEAR(o["busbw_gbps"].get<double>(), 45, 45 * 0.06);  // the ring's slowest link: IB
    }
  EXPECT_TRUE(allreduce);
}

TEST(Synth, TheSameSeedWritesTheSameBytes) {
  std::string a = Synth("synth-seed-a", 4, 40, "healthy", 7), b = Synth("synth-seed-b", 4, 40, "healthy", 7);
  std::string c = Synth("synth-seed-c", 4, 40, "healthy", 8);
  std::vector<std::string> fa = Files(a, ".p2ptrace"), fb = Files(b, ".p2ptrace"), fc = Files(c, ".p2ptrace");
  ASSERT_EQ(fa.size(), 4u);
  ASSERT_EQ(fb.size(), 4u);
  ASSERT_EQ(fc.size(), 4u);
  for (size_t i = 0; i < fa.size(); ++i) {
    EXPECT_EQ(ReadAll(fa[i]), ReadAll(fb[i])) << fa[i];
    EXPECT_NE(ReadAll(fa[i]), ReadAll(fc[i])) << fc[i];
  }
}

TEST(Synth, FallbackScenarioShowsBothFallbacksWithTheirCauses) {
  json j = ReportJson(Synth("synth-fallback", 8, 40, "fallback"));
  std::set<std::string> findings;
  for (const auto& f : j["findings"]) findings.insert(f["id"]);
  EXPECT_TRUE(findings.count("peer-access-not-enabled")) << j["findings"].dump();
  EXPECT_TRUE(findings.count("env-p2p-disabled")) << j["findings"].dump();
  for (const auto& p : j["pairs"]) {
    EXPECT_EQ(p["fallback"], true) << p.dump();
    EXPECT_EQ(p["transport"], p["source"] == "cuda" ? "host_staged" : "shm");
  }
}

// What the report computes, computed again here from the traces' own counters and records: the
// time lost per fallback pair, bytes × (1/achieved − 1/best), where best is the catalog's low figure
// for the expected class (no pair of the fallback job measured it); ncclSend bytes on the pair they
// crossed; and each NCCL pair's expected class.
TEST(Synth, FallbackCostsAndNcclSendBytesMatchAHandComputation) {
  std::string dir = Synth("synth-costs", 8, 48, "fallback");
  json j = ReportJson(dir);
  ASSERT_FALSE(j.is_discarded());
  const double best = p2ptrace::ExpectedBandwidth(P2PTRACE_TRANSPORT_NVLINK, "", 0).low;
  ASSERT_GT(best, 0);
  struct Sums {
    uint64_t calls = 0, bytes = 0, timed_bytes = 0, timed_ns = 0;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Sums> staged;  // (host, src bus, dst bus)
  std::map<std::pair<int, int>, Sums> sends;                                  // (rank, peer rank)
  std::map<std::pair<std::string, std::string>, int> rank_of;                 // (host, bus) -> rank
  for (const std::string& f : Files(dir, ".p2ptrace")) {
    auto t = p2ptrace::ReadTrace(f);
    ASSERT_TRUE(t.ok()) << t.error().message;
    for (const p2ptrace::PairCounter& pc : t->counters) {
      int cell = static_cast<int>(pc.index / 2), a = cell / t->header.max_devices, b = cell % t->header.max_devices;
      ASSERT_EQ(pc.index % 2, 1u) << "the fallback job's copies are all host-staged";
      Sums& s = staged[{t->Host(), t->BusId(a), t->BusId(b)}];
      s.calls += pc.c.calls, s.bytes += pc.c.bytes, s.timed_bytes += pc.c.timed_bytes, s.timed_ns += pc.c.timed_ns;
    }
    std::map<uint32_t, uint64_t> duration;  // seq -> ns
    for (const auto& r : t->records)
      if (const auto* tr = std::get_if<p2ptrace_timing_record>(&r.body); tr && tr->src_device < 0)
        duration[tr->h.seq] = tr->duration_ns;
    for (const auto& r : t->records) {
      if (const auto* c = std::get_if<p2ptrace_nccl_comm_record>(&r.body)) rank_of[{t->Host(), c->bus_id}] = c->rank;
      if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&r.body); o && o->api == P2PTRACE_NCCL_Send) {
        Sums& s = sends[{t->header.rank, o->peer}];
        ++s.calls, s.bytes += o->bytes, s.timed_bytes += o->bytes, s.timed_ns += duration.at(o->h.seq);
      }
    }
  }
  auto lost = [&](const Sums& s) {
    return static_cast<double>(s.bytes) * 1e-9 * (static_cast<double>(s.timed_ns) / static_cast<double>(s.timed_bytes) - 1 / best);
  };
  double total = 0;
  size_t cuda = 0, nccl = 0;
  for (const auto& p : j["pairs"]) {
    ASSERT_EQ(p["fallback"], true) << p.dump();
    EXPECT_EQ(p["expected"], "nvlink") << p.dump();  // NCCL's pairs too: the link the copies saw
    const Sums* s = nullptr;
    if (p["source"] == "cuda") {
      ++cuda;
      auto it = staged.find({p["src"]["host"], p["src"]["bus_id"], p["dst"]["bus_id"]});
      ASSERT_NE(it, staged.end()) << p.dump();
      s = &it->second;
    } else {
      ++nccl;
      int src = rank_of.at({p["src"]["host"], p["src"]["bus_id"]}), dst = rank_of.at({p["dst"]["host"], p["dst"]["bus_id"]});
      EXPECT_EQ(p["src"]["rank"], src);
      EXPECT_EQ(p["dst"]["rank"], dst);
      auto it = sends.find({src, dst});
      ASSERT_NE(it, sends.end()) << p.dump();
      s = &it->second;
    }
    EXPECT_EQ(p["calls"], s->calls) << p.dump();
    EXPECT_EQ(p["bytes"], s->bytes) << p.dump();
    EXPECT_EQ(p["best_gbps"], best) << p.dump();
    EXPECT_NEAR(p["lost_seconds"].get<double>(), lost(*s), lost(*s) * 1e-9) << p.dump();
    EXPECT_GT(lost(*s), 0);
    total += lost(*s);
  }
  EXPECT_EQ(cuda, staged.size());
  EXPECT_EQ(nccl, sends.size());  // every rank's sends went to one pair: its ring neighbour
  EXPECT_EQ(nccl, 8u);
  EXPECT_NEAR(j["lost_seconds"].get<double>(), total, total * 1e-9);
}

// On a healthy job NCCL's pairs expect what they got: P2P inside a host, GPUDirect RDMA across.
TEST(Synth, HealthyNcclPairsExpectTheirOwnClass) {
  json j = ReportJson(Synth("synth-expected", 16, 16));
  int nccl = 0;
  for (const auto& p : j["pairs"]) {
    if (p["source"] != "nccl") continue;
    ++nccl;
    EXPECT_EQ(p["expected"], p["transport"]) << p.dump();
    EXPECT_TRUE(p["expected"] == "p2p" || p["expected"] == "net_gdr") << p.dump();
    EXPECT_EQ(p["fallback"], false);
    EXPECT_TRUE(p["lost_seconds"].is_null());
  }
  EXPECT_EQ(nccl, 16);
  EXPECT_EQ(j["lost_seconds"], 0);
}

// The streaming fold (every command) and the all-in-memory load (BuildReport) give the same report.
TEST(Report, StreamingEqualsTheAllInMemoryReport) {
  std::vector<std::string> dirs = {Synth("same-fallback", 8, 64, "fallback"), Synth("same-healthy", 16, 40)};
  for (const std::string& dir : dirs) {
    auto loaded = p2ptrace::cli::LoadTraces(dir);
    ASSERT_TRUE(loaded.ok());
    auto streamed = p2ptrace::cli::StreamReport(dir);
    ASSERT_TRUE(streamed.ok());
    json a = p2ptrace::cli::RenderJson(p2ptrace::cli::BuildReport(dir, *loaded)), b = p2ptrace::cli::RenderJson(*streamed);
    EXPECT_FALSE(a["pairs"].empty());
    EXPECT_EQ(a, b) << dir;
    EXPECT_EQ(p2ptrace::cli::RenderText(p2ptrace::cli::BuildReport(dir, *loaded), false),
              p2ptrace::cli::RenderText(*streamed, false));
  }
}

// Two hosts, NCCL over SHM inside each (NCCL_P2P_DISABLE=1) and IB between them; every NCCL log
// deleted: each rank's trace holds the connection lines its shim read (synth writes them as the
// shim does), so the NCCL pairs, transports, fallbacks and causes are those the logs gave, and
// each pair says it came from the traces; the cause's evidence is the recorded environment.
TEST(Report, NcclPairsFromTheTracesWhenEveryLogIsGone) {
  std::string dir = Synth("conn-records", 16, 24, "fallback");
  json from_logs = ReportJson(dir);
  for (const std::string& log : Files(dir, ".log")) fs::remove(log);
  ASSERT_TRUE(Files(dir, ".log").empty());
  json from_traces = ReportJson(dir);
  auto nccl = [](const json& j) {
    json out = json::array();
    for (const auto& p : j["pairs"])
      if (p["source"] == "nccl")
        out.push_back({p["src"], p["dst"], p["transport"], p["nccl_transports"], p["channels"], p["bytes"],
                       p["fallback"], p["expected"], p["lost_seconds"], p["causes"].size(),
                       p["causes"].empty() ? json(nullptr) : p["causes"][0]["id"]});
    return out;
  };
  json a = nccl(from_logs), b = nccl(from_traces);
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(a, b);
  int net = 0, shm = 0;
  for (const auto& p : from_traces["pairs"]) {
    if (p["source"] != "nccl") continue;
    EXPECT_EQ(p["nccl_from"], "trace") << p.dump();
    net += p["transport"] == "net_gdr";
    if (p["transport"] == "shm") {
      ++shm;
      ASSERT_EQ(p["causes"].size(), 1u) << p.dump();
      EXPECT_EQ(p["causes"][0]["id"], "env-p2p-disabled");
      EXPECT_NE(p["causes"][0]["evidence"][0].get<std::string>().find("NCCL_P2P_DISABLE=1 in the environment"),
                std::string::npos) << p.dump();
    }
  }
  EXPECT_EQ(net, 2);  // node0's last rank to node1's first, and back around the ring
  EXPECT_EQ(shm, 14);
  EXPECT_EQ(from_traces["capture"]["nccl_logs"], 0);
  EXPECT_EQ(from_traces["capture"]["nccl_from_traces"], 16);
  for (const auto& p : from_logs["pairs"]) {
    if (p["source"] == "nccl") {
      EXPECT_EQ(p["nccl_from"], "log");
    }
  }
}

// An NCCL that printed no commId (before 2.16) and that the shim never saw init
// its communicators (linked into the program): the traces cannot tie its ranks together, so the
// processes' communicators of one size whose ranks never repeat are taken as one, as `explain`
// takes a paste. The logs are fixture 04's (NCCL 2.7.8, four processes), one file per process.
TEST(Report, OldNcclLogsOfSeveralProcessesMakeTheirPairs) {
  std::string dir = Synth("old-logs", 4, 4);
  for (const std::string& log : Files(dir, ".log")) fs::remove(log);
  std::ifstream in(std::string(NCCL_FIXTURE_DIR) + "/04-v2.7.8-1node-4gpu-ipc-and-shm.log");
  std::map<std::string, std::string> by_process;  // "host.pid" -> its lines
  static const std::regex kPrefix(R"(^([^:\s]+):(\d+):\d+ )");
  for (std::string line; std::getline(in, line);)
    if (std::smatch m; std::regex_search(line, m, kPrefix)) by_process[m[1].str() + "." + m[2].str()] += line + "\n";
  ASSERT_EQ(by_process.size(), 4u);
  for (const auto& [who, lines] : by_process) std::ofstream(dir + "/nccl." + who + ".log") << lines;
  json j = ReportJson(dir);
  std::map<std::pair<std::string, std::string>, std::string> classes;  // (src bus, dst bus) -> class
  for (const json& p : j["pairs"])
    if (p["source"] == "nccl" && p["src"]["host"] == "tesla-106")
      classes[{p["src"]["bus_id"], p["dst"]["bus_id"]}] = p["transport"];
  // The fixture's four GPUs: P2P/IPC between 18000-1a000 and af000-b1000, SHM between the two halves.
  ASSERT_EQ(classes.size(), 12u) << j["pairs"].dump();
  auto half = [](const std::string& bus) { return bus < "0000:80"; };
  for (const auto& [pair, cls] : classes)
    EXPECT_EQ(cls, half(pair.first) == half(pair.second) ? "p2p" : "shm") << pair.first << " -> " << pair.second;
}

// `report --json` is written one array element at a time (WriteJson); its text is the whole tree's
// dump(2), byte for byte, for jobs with fallbacks, several hosts, findings and empty sections.
TEST(Report, JsonWrittenElementByElementIsTheTreesTextByteForByte) {
  std::vector<std::string> dirs = {Synth("bytes-fallback", 16, 32, "fallback", 1, 4), Synth("bytes-healthy", 8, 16)};
  for (const std::string& dir : dirs) {
    auto rep = p2ptrace::cli::StreamReport(dir);
    ASSERT_TRUE(rep.ok());
    std::ostringstream streamed;
    p2ptrace::cli::WriteJson(*rep, streamed);
    std::string tree = p2ptrace::cli::RenderJson(*rep).dump(2);
    EXPECT_EQ(streamed.str(), tree) << dir;
    RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, tree + "\n") << dir;
  }
  // Empty arrays and a report of nothing print as the tree does ("[]", no element lines).
  p2ptrace::cli::Report empty;
  std::ostringstream streamed;
  p2ptrace::cli::WriteJson(empty, streamed);
  EXPECT_EQ(streamed.str(), p2ptrace::cli::RenderJson(empty).dump(2));
  EXPECT_NE(streamed.str().find("\"pairs\": []"), std::string::npos) << streamed.str();
}

// Memory grows with pairs, not events: 100x the events over the same ranks and pairs leaves every
// command's peak within a few MB (one file mapped at a time, one file's timings for export). The
// all-in-memory load that export and diff used before took ~130 bytes per record: +120 MB here.
TEST(Viewer, PeakMemoryGrowsWithPairsNotEvents) {
#ifdef P2PTRACE_SANITIZED
  // ASan keeps freed memory in quarantine (and TSan shadows it): peaks there grow with what was
  // ever allocated, not with what is live. The default build measures.
  GTEST_SKIP() << "sanitizer build";
#endif
  std::string small = Synth("mem-small", 16, 400), big = Synth("mem-big", 16, 40000);
  auto peak = [](const std::string& dir, const std::string& name) {
    std::string html = TempDir() + "/" + name + ".html", trace = TempDir() + "/" + name + ".json";
    std::map<std::string, long> kb;
    for (const auto& [what, argv] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"report", {P2PTRACE_CLI, "report", dir}},
             {"report --json", {P2PTRACE_CLI, "report", dir, "--json"}},
             {"html", {P2PTRACE_CLI, "html", dir, "-o", html}},
             {"export", {P2PTRACE_CLI, "export", dir, "--perfetto", trace, "--max-slices", "4000"}},
             {"diff", {P2PTRACE_CLI, "diff", dir, dir}}}) {
      RunResult r = RunProgram(argv);
      EXPECT_EQ(r.exit_code, 0) << what << ": " << r.err;
      kb[what] = r.max_rss_kb;
    }
    return kb;
  };
  auto a = peak(small, "mem-small"), b = peak(big, "mem-big");
  for (const auto& [what, kb] : a) {
    EXPECT_GT(kb, 0) << what;
    // A big file is ~4.5 MB mapped while read, export's timings of one file ~2 MB.
    EXPECT_LT(b[what], kb + 16 * 1024) << what << ": " << kb << " KB for 400 events per rank, " << b[what]
                                       << " KB for 40000";
  }
}

// Progress on stderr: only on a terminal, only once the run has taken a second, and erased after.
TEST(Viewer, ProgressLineOnATerminalAfterASecondThenErased) {
  auto long_ago = std::chrono::steady_clock::now() - std::chrono::seconds(2);
  std::ostringstream piped, fresh, shown;
  {
    p2ptrace::cli::ProgressLine p(piped, false, "reading", long_ago);
    p.Update(3, 10);
  }
  EXPECT_EQ(piped.str(), "");  // stderr is not a terminal
  {
    p2ptrace::cli::ProgressLine p(fresh, true);
    p.Update(3, 10);
  }
  EXPECT_EQ(fresh.str(), "");  // under a second
  {
    p2ptrace::cli::ProgressLine p(shown, true, "writing the timeline of", long_ago);
    p.Update(3, 10, "processes");
  }
  EXPECT_EQ(shown.str(), "\rp2ptrace: writing the timeline of 3 of 10 processes (30%)\r\033[K");
}

// Ranks on two NCCL releases: the header names each with its ranks; a header's version wins over
// a log line's; an old file (no version in its header) falls back to the log's.
TEST(Report, NcclVersionPerRankGroupFromTheHeaders) {
  p2ptrace::cli::Report rep;
  rep.nccl_versions = {"2.18.3+cuda12.2"};  // what a log line printed
  for (int r = 0; r < 4; ++r) {
    p2ptrace::cli::ProcessInfo p;
    p.rank = r;
    p.nccl_version = r < 3 ? 22809 : 21803;
    rep.processes.push_back(p);
  }
  EXPECT_EQ(p2ptrace::cli::NcclVersionGroups(rep), (std::vector<std::string>{"2.18.3 (rank 3)", "2.28.9 (ranks 0-2)"}));
  EXPECT_NE(p2ptrace::cli::RenderText(rep, false).find("; NCCL 2.18.3 (rank 3), 2.28.9 (ranks 0-2)\n"), std::string::npos);
  json j = p2ptrace::cli::RenderJson(rep);
  EXPECT_EQ(j["job"]["nccl_versions"], json::array({"2.18.3", "2.28.9"}));
  EXPECT_EQ(j["ranks"][0]["nccl_version"], "2.28.9");
  EXPECT_EQ(p2ptrace::cli::NcclVersionText(2804), "2.8.4");  // the code's form before 2.9
  for (auto& p : rep.processes) p.nccl_version = 0;
  EXPECT_EQ(p2ptrace::cli::NcclVersionGroups(rep), std::vector<std::string>{"2.18.3+cuda12.2"});
  EXPECT_TRUE(p2ptrace::cli::RenderJson(rep)["ranks"][0]["nccl_version"].is_null());
}

TEST(Synth, BadOptionsGiveOneLineAndExit2) {
  std::string out = TempDir() + "/synth-bad";
  for (std::vector<std::string> args : {std::vector<std::string>{"--ranks", "0", "--events", "1"},
                                        {"--ranks", "4", "--events", "1", "--scenario", "nope"},
                                        {"--ranks", "40", "--events", "1", "--hosts", "2"},
                                        {"--ranks", "4", "--events", "1", "--gpus-per-host", "33"}}) {
    std::vector<std::string> argv = {P2PTRACE_CLI, "synth", "--out", out};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = RunProgram(argv);
    EXPECT_EQ(r.exit_code, 2) << args[1];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("p2ptrace synth: ", 0), 0u) << r.err;
  }
  // A directory that already holds a job: refused rather than mixed.
  std::string used = Synth("synth-used", 2, 4);
  RunResult r = RunProgram({P2PTRACE_CLI, "synth", "--ranks", "2", "--events", "4", "--out", used});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already holds traces"), std::string::npos) << r.err;
}

// ------------------------------------------------------------------------------------------------
// export --perfetto: the trace-event rules (Chrome's Trace Event Format, as ui.perfetto.dev reads it)

struct ExportCheck {
  size_t slices = 0, flows = 0, counters = 0;
  size_t arrival_counters = 0;  // the job process's "arrival lag" samples: one per collective compared
  std::map<int64_t, std::string> process_names;
  std::set<std::pair<int64_t, int64_t>> named_threads;
  json job_events = json::array();  // instant events of the metadata process
};

// Checks every rule a Chrome/Perfetto JSON reader relies on; returns what it saw.
ExportCheck CheckChromeTrace(const std::string& path) {
  ExportCheck c;
  json doc = json::parse(ReadAll(path), nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << path << " is not valid JSON";
  if (doc.is_discarded()) return c;
  EXPECT_TRUE(doc["traceEvents"].is_array());
  const std::set<std::string> metadata = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"};
  std::map<std::tuple<int64_t, std::string, std::string>, json> open;  // (pid, cat, id) -> the 'b'
  std::map<uint64_t, std::vector<json>> flows;
  std::set<std::pair<int64_t, int64_t>> used_threads;
  for (const json& e : doc["traceEvents"]) {
    std::string ph = e.at("ph");
    EXPECT_TRUE(e["pid"].is_number_integer()) << e.dump();
    if (ph == "M") {
      EXPECT_TRUE(metadata.count(e["name"])) << e.dump();
      if (e["name"] == "process_name") c.process_names[e["pid"].get<int64_t>()] = e["args"]["name"];
      if (e["name"] == "thread_name") c.named_threads.insert({e["pid"].get<int64_t>(), e["tid"].get<int64_t>()});
      continue;
    }
    EXPECT_TRUE(e["ts"].is_number() && e["ts"].get<double>() >= 0) << e.dump();
    used_threads.insert({e["pid"].get<int64_t>(), e["tid"].get<int64_t>()});
    if (ph == "b") {
      EXPECT_TRUE(e["cat"].is_string() && e["id"].is_string() && e["name"].is_string()) << e.dump();
      auto key = std::make_tuple(e["pid"].get<int64_t>(), e["cat"].get<std::string>(), e["id"].get<std::string>());
      EXPECT_EQ(open.count(key), 0u) << "id reused while open: " << e.dump();
      open[key] = e;
      if (e.contains("bind_id")) flows[e["bind_id"].get<uint64_t>()].push_back(e);
    } else if (ph == "e") {
      auto key = std::make_tuple(e["pid"].get<int64_t>(), e["cat"].get<std::string>(), e["id"].get<std::string>());
      auto it = open.find(key);
      if (it == open.end()) {
        ADD_FAILURE() << "'e' without its 'b': " << e.dump();
        continue;
      }
      EXPECT_EQ(it->second["name"], e["name"]);
      EXPECT_EQ(it->second["tid"], e["tid"]);
      EXPECT_GE(e["ts"].get<double>(), it->second["ts"].get<double>());
      // ts is in µs: bytes / (dur µs × 1000) is the GB/s the slice carries.
      double dur_us = e["ts"].get<double>() - it->second["ts"].get<double>();
      const json& args = it->second["args"];
      if (dur_us > 1 && args.contains("gbps")) {
        EXPECT_NEAR(args["bytes"].get<double>() / (dur_us * 1000), args["gbps"].get<double>(),
                    args["gbps"].get<double>() * 0.01 + 0.01)
            << it->second.dump();
      } else if (dur_us > 1 && args.value("timing", "") == "NCCL kernel timers") {
        // A collective's kernel (trace 1.9): its bytes are not one link's, so no rate; a send's or
        // receive's has one.
        EXPECT_NE(args.value("op", ""), "ncclSend") << it->second.dump();
        EXPECT_NE(args.value("op", ""), "ncclRecv") << it->second.dump();
      } else if (dur_us > 1) {
        // An NCCL call inside a group spans its group's duration: no rate of its own.
        EXPECT_NE(args.value("timing", "").find("group"), std::string::npos) << it->second.dump();
      }
      open.erase(it);
      ++c.slices;
    } else if (ph == "C") {
      EXPECT_TRUE(e["args"].is_object() && !e["args"].empty());
      for (const auto& [k, v] : e["args"].items()) EXPECT_TRUE(v.is_number()) << e.dump();
      ++(e["name"].get<std::string>().rfind("arrival lag", 0) == 0 ? c.arrival_counters : c.counters);
    } else if (ph == "i") {
      EXPECT_EQ(e["s"], "t");
      c.job_events.push_back(e);
    } else {
      ADD_FAILURE() << "unexpected phase " << e.dump();
    }
  }
  EXPECT_TRUE(open.empty()) << open.size() << " async slices never ended";
  for (const auto& [id, ends] : flows) {
    EXPECT_EQ(ends.size(), 2u) << "flow " << id;
    if (ends.size() != 2) continue;
    EXPECT_NE(ends[0]["pid"], ends[1]["pid"]) << "a flow crosses ranks";
    int out = 0, in = 0;
    for (const json& e : ends) out += e.value("flow_out", false), in += e.value("flow_in", false);
    EXPECT_EQ(out, 1);
    EXPECT_EQ(in, 1);
    ++c.flows;
  }
  for (const auto& t : used_threads) EXPECT_TRUE(c.named_threads.count(t)) << t.first << "/" << t.second;
  for (const auto& t : used_threads) EXPECT_TRUE(c.process_names.count(t.first)) << t.first;
  return c;
}

TEST(Export, SynthJobFollowsTheTraceEventRules) {
  std::string dir = Synth("export-synth", 8, 64, "fallback");
  std::string out = TempDir() + "/export-synth.json";
  RunResult r = RunProgram({P2PTRACE_CLI, "export", dir, "--perfetto", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExportCheck c = CheckChromeTrace(out);
  EXPECT_EQ(c.slices, 8u * 64);  // every event of every rank is timed
  EXPECT_EQ(c.flows, 8u * 8);    // every ncclSend (one in 8 events) meets its ncclRecv
  EXPECT_EQ(c.counters, 2 * c.slices);
  EXPECT_EQ(c.arrival_counters, 8u);      // each of the 8 collectives every rank called
  EXPECT_EQ(c.process_names.size(), 9u);  // 8 ranks and the job
  EXPECT_EQ(c.process_names[4], "rank 3 · node0 GPU3 (pid 10003)");
  bool matrix = false, cause = false;
  for (const json& e : c.job_events) {
    if (e["name"] == "pair matrix node0") {
      matrix = true;
      EXPECT_EQ(e["args"]["rows"]["GPU0"]["GPU1"], "host_staged+shm");
    }
    if (e["args"].value("id", "") == "peer-access-not-enabled") {
      cause = true;
      EXPECT_FALSE(e["args"]["fix"].get<std::string>().empty());
    }
  }
  EXPECT_TRUE(matrix);
  EXPECT_TRUE(cause);
}

TEST(Export, ManySlicesAreThinnedAlikeOnBothEndsOfAFlow) {
  std::string dir = Synth("export-thin", 8, 160);
  std::string out = TempDir() + "/export-thin.json";
  RunResult r = RunProgram({P2PTRACE_CLI, "export", dir, "--perfetto", out, "--max-slices", "400"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("every 4th of 1280 events"), std::string::npos) << r.err;
  ExportCheck c = CheckChromeTrace(out);
  EXPECT_LE(c.slices, 400u);
  EXPECT_GE(c.slices, 250u);
  EXPECT_EQ(c.flows, 8u * 20 / 4);  // 20 sends per rank, every 4th kept, each still meeting its recv
}

TEST(Export, BadInputGivesOneLineAndExit2) {
  RunResult r = RunProgram({P2PTRACE_CLI, "export", TempDir() + "/no-such-dir", "--perfetto", TempDir() + "/x.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  std::string dir = Synth("export-unwritable", 2, 8);
  r = RunProgram({P2PTRACE_CLI, "export", dir, "--perfetto", TempDir() + "/no-such-dir/x.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("x.json: cannot write"), std::string::npos) << r.err;
}

std::map<std::string, std::optional<std::string>> SimEnv() {
  return {{"LD_LIBRARY_PATH", P2PTRACE_SIM_LIB_DIR},
          {"P2PSIM_TOPOLOGY", std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json"},
          {"P2PSIM_HOST", std::nullopt}, {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"P2PTRACE_SAMPLE", std::nullopt},
          {"NCCL_DEBUG", std::nullopt}, {"NCCL_DEBUG_FILE", std::nullopt}, {"P2PTRACE_NCCL_TAP", std::nullopt},
          {"NO_COLOR", "1"}};
}

// Real runs on the simulated node: peer copies in one process, and a 4-rank NCCL ring.
TEST(Export, SimulatedRunsFollowTheTraceEventRules) {
  std::string copies = TempDir() + "/export-peer-copy";
  RunResult r = RunProgram({P2PTRACE_CLI, "run", "--dir", copies, "--", PEER_COPY, "--size", "1M", "--iters", "1"}, SimEnv());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string out = TempDir() + "/export-peer-copy.json";
  r = RunProgram({P2PTRACE_CLI, "export", copies, "--perfetto", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExportCheck c = CheckChromeTrace(out);
  EXPECT_EQ(c.slices, 24u * 4 + 32 * 4);  // every cross-device copy was timed (cli_test counts them)
  EXPECT_EQ(c.process_names.size(), 2u);

  std::string ring = TempDir() + "/export-ring", rendezvous = TempDir() + "/export-ring-id";
  fs::create_directories(rendezvous);
  r = RunProgram({P2PTRACE_CLI, "run", "--dir", ring, "--", P2PSIM, "launch", "--topology",
                  std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json", "--hosts", "node0:4", "--", NCCL_RING, rendezvous},
                 SimEnv());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  out = TempDir() + "/export-ring.json";
  r = RunProgram({P2PTRACE_CLI, "export", ring, "--perfetto", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  c = CheckChromeTrace(out);
  EXPECT_EQ(c.process_names.size(), 5u);  // 4 ranks and the job
  EXPECT_GE(c.flows, 4u);                 // each rank's send to the next meets that rank's recv
  bool ring_cells = false;
  for (const json& e : c.job_events)
    ring_cells |= e["name"] == "pair matrix node0" &&
                  e["args"]["rows"]["GPU0"]["GPU1"].get<std::string>().find("nvlink") != std::string::npos;
  EXPECT_TRUE(ring_cells);
}

// ------------------------------------------------------------------------------------------------
// html (the page in a real browser: html_chromium_test.py)

// synth --stacks names three program locations in every rank; the page's call-site table lists
// the report's sites in its order, host-staging ones marked; without sites it says how to get them.
TEST(Html, CallSiteTableAsTheReportRanksTheSites) {
  std::string dir = SynthStacks("html-sites", 64, "fallback");
  json j = ReportJson(dir);
  ASSERT_EQ(j["call_sites"].size(), 3u) << j["call_sites"].dump();
  EXPECT_GT(j["call_sites"][0]["host_staged_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["call_sites"][0]["processes"], 8);
  std::string page = TempDir() + "/html-sites.html";
  RunResult r = RunProgram({P2PTRACE_CLI, "html", dir, "-o", page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string html = ReadAll(page);
  size_t table = html.find("<table class=\"list\" id=\"call-sites\">");
  ASSERT_NE(table, std::string::npos);
  size_t one = html.find("<tr data-site=\"1\" class=\"staged\">", table), two = html.find("<tr data-site=\"2\">", table),
         three = html.find("<tr data-site=\"3\">", table);
  EXPECT_TRUE(one != std::string::npos && one < two && two < three && three != std::string::npos) << html.substr(table, 3000);
  EXPECT_NE(html.find("<code>train+0x4a1f7 (exchange_halo(float*, float*, unsigned long)+0x5b)</code>", table),
            std::string::npos);
  EXPECT_EQ(html.find("id=\"no-call-sites\""), std::string::npos);

  std::string plain = Synth("html-no-sites", 8, 16);
  r = RunProgram({P2PTRACE_CLI, "html", plain, "-o", page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  html = ReadAll(page);
  EXPECT_NE(html.find("id=\"no-call-sites\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"call-sites\""), std::string::npos);
}

// ------------------------------------------------------------------------------------------------
// diff

TEST(Diff, FallbackAfterHealthyIsWorseAndSaysWhy) {
  std::string healthy = Synth("diff-healthy", 8, 64), fallback = Synth("diff-fallback", 8, 64, "fallback");
  RunResult r = RunProgram({P2PTRACE_CLI, "diff", healthy, fallback, "--json"});
  ASSERT_EQ(r.exit_code, 1) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["worse"], true);
  EXPECT_EQ(j["causes_appeared"], json::array({"env-p2p-disabled", "peer-access-not-enabled"}));
  bool staged = false, shm = false;
  for (const auto& p : j["pairs"]) {
    EXPECT_EQ(p["worse"], true) << p.dump();
    if (p["pair"] == "node0 GPU0 -> GPU1 (cuda)") {
      staged = true;
      EXPECT_EQ(p["before"], "nvlink");
      EXPECT_EQ(p["after"], "host_staged");
      EXPECT_LT(p["gbps_after"].get<double>(), 0.1 * p["gbps_before"].get<double>());
      EXPECT_EQ(p["causes_appeared"], json::array({"peer-access-not-enabled"}));
    }
    if (p["pair"] == "node0 GPU0 -> GPU1 (nccl)") {
      shm = true;
      EXPECT_EQ(p["before"], "p2p");
      EXPECT_EQ(p["after"], "shm");
    }
  }
  EXPECT_TRUE(staged && shm) << r.out;
  EXPECT_FALSE(j["nccl_ops"].empty());
  // An operation's busbw is the report's, its factor included (8 ranks' allreduce: 2·7/8).
  RunResult rep = RunProgram({P2PTRACE_CLI, "report", healthy, "--json"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  double report_busbw = -1;
  json report = json::parse(rep.out);
  for (const auto& o : report["nccl_ops"])
    if (o["op"] == "ncclAllReduce") report_busbw = o["busbw_gbps"].get<double>();
  bool allreduce = false;
  for (const auto& o : j["nccl_ops"])
    if (o["pair"] == "ncclAllReduce (8 ranks)") {
      allreduce = true;
      EXPECT_NEAR(o["gbps_before"].get<double>(), report_busbw, 1e-6 * report_busbw) << o.dump();
    }
  EXPECT_TRUE(allreduce) << j["nccl_ops"].dump();
  // Text: one line per change, the worst first.
  r = RunProgram({P2PTRACE_CLI, "diff", healthy, fallback});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("worse  node0 GPU0 -> GPU1 (cuda): nvlink -> host_staged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("causes that appeared: env-p2p-disabled, peer-access-not-enabled"), std::string::npos);
}

TEST(Diff, BetterOrUnchangedExitsZero) {
  std::string healthy = Synth("diff-h2", 8, 64), fallback = Synth("diff-f2", 8, 64, "fallback");
  std::string reseeded = Synth("diff-h3", 8, 64, "healthy", 99);
  RunResult r = RunProgram({P2PTRACE_CLI, "diff", fallback, healthy, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  json j = json::parse(r.out);
  EXPECT_EQ(j["causes_vanished"], json::array({"env-p2p-disabled", "peer-access-not-enabled"}));
  EXPECT_FALSE(j["pairs"].empty());
  // Another seed moves bandwidth by a few percent only: nothing to report.
  r = RunProgram({P2PTRACE_CLI, "diff", healthy, reseeded, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  j = json::parse(r.out);
  EXPECT_TRUE(j["pairs"].empty()) << r.out;
  EXPECT_TRUE(j["nccl_ops"].empty()) << r.out;
}


// Call sites (P2PTRACE_STACKS) matched across runs by their frames: a site that newly stages bytes
// through the host is worse (exit 1); one that stages more than 20% more is listed, not gating (a
// longer run stages more); one that stages less is not listed.
TEST(Diff, CallSitesWhoseHostStagedBytesAppearedOrGrew) {
  std::string healthy = SynthStacks("diff-sites-h", 64, "healthy"), staged = SynthStacks("diff-sites-f", 64, "fallback"),
              longer = SynthStacks("diff-sites-f2", 128, "fallback");
  RunResult r = RunProgram({P2PTRACE_CLI, "diff", healthy, staged, "--json"});
  ASSERT_EQ(r.exit_code, 1) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["call_sites"].size(), 1u) << j["call_sites"].dump();
  const json& site = j["call_sites"][0];
  EXPECT_EQ(site["change"], "appeared");
  EXPECT_EQ(site["worse"], true);
  EXPECT_EQ(site["host_staged_bytes_before"], 0);
  EXPECT_GT(site["host_staged_bytes_after"].get<uint64_t>(), 0u);
  EXPECT_EQ(site["host_staged_bytes_after"], site["bytes_after"]);  // every copy of the site staged
  EXPECT_GT(site["bytes_before"].get<uint64_t>(), 0u);              // the same site, matched by its frames
  ASSERT_FALSE(site["frames"].empty());
  EXPECT_NE(site["frames"][0].get<std::string>().find("exchange_halo"), std::string::npos) << site.dump();
  r = RunProgram({P2PTRACE_CLI, "diff", healthy, staged});
  EXPECT_NE(r.out.find("call sites staging more through host memory (matched by their frames):\n  worse  #1 "
                       "host-staged 0 B -> "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("         at train+0x4a1f7 (exchange_halo(float*, float*, unsigned long)+0x5b)\n"), std::string::npos)
      << r.out;

  // Twice the copies, the same paths: listed as grown, and the exit status stays 0.
  r = RunProgram({P2PTRACE_CLI, "diff", staged, longer, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  j = json::parse(r.out);
  ASSERT_EQ(j["call_sites"].size(), 1u) << j["call_sites"].dump();
  EXPECT_EQ(j["call_sites"][0]["change"], "grew");
  EXPECT_EQ(j["call_sites"][0]["worse"], false);
  EXPECT_GT(j["call_sites"][0]["host_staged_bytes_after"].get<double>(),
            1.2 * j["call_sites"][0]["host_staged_bytes_before"].get<double>());

  // Back to healthy: nothing stages more.
  r = RunProgram({P2PTRACE_CLI, "diff", staged, healthy, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(json::parse(r.out)["call_sites"].empty()) << r.out;
}

TEST(Diff, PcieInsteadOfNvlinkIsWorse) {
  RunResult r = RunProgram({P2PTRACE_CLI, "diff", Synth("diff-nvl", 8, 32), Synth("diff-pcie", 8, 32, "pcie")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("nvlink -> pcie_p2p"), std::string::npos) << r.out;
}

TEST(Diff, MissingRunIsAnInputError) {
  RunResult r = RunProgram({P2PTRACE_CLI, "diff", Synth("diff-one", 2, 8), TempDir() + "/diff-none"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("diff-none"), std::string::npos) << r.err;
}

// ------------------------------------------------------------------------------------------------
// Loading what crashes, copies and other versions leave behind

void Patch(const std::string& path, size_t offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

p2ptrace_file_header HeaderOf(const std::string& path) {
  p2ptrace_file_header h{};
  std::string bytes = ReadAll(path);
  std::memcpy(&h, bytes.data(), sizeof h);
  return h;
}

int StderrLines(const std::string& err, const std::string& prefix) {
  int n = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(Loading, DamagedAndForeignFilesAreNamedSkippedAndCounted) {
  std::string dir = Synth("load-mixed", 8, 64);
  std::vector<std::string> traces = Files(dir, ".p2ptrace");
  ASSERT_EQ(traces.size(), 8u);
  // 0: cut inside its records (an interrupted copy); 1: cut inside its header.
  p2ptrace_file_header h0 = HeaderOf(traces[0]);
  fs::resize_file(traces[0], h0.chunks_offset + h0.chunk_size / 2);
  fs::resize_file(traces[1], 1000);
  // 2: a newer major version; 3: a newer minor with a record type this reader does not know.
  uint16_t major = P2PTRACE_FORMAT_MAJOR + 1, minor = P2PTRACE_FORMAT_MINOR + 1, unknown_type = 99;
  Patch(traces[2], offsetof(p2ptrace_file_header, major), &major, 2);
  Patch(traces[3], offsetof(p2ptrace_file_header, minor), &minor, 2);
  p2ptrace_file_header h3 = HeaderOf(traces[3]);
  Patch(traces[3], h3.chunks_offset + sizeof(p2ptrace_chunk_header), &unknown_type, 2);
  // Empty, not a trace, not a file.
  p2ptrace::testing::WriteFile(dir + "/empty.p2ptrace", "");
  p2ptrace::testing::WriteFile(dir + "/notes.p2ptrace", std::string(8192, 'x'));
  fs::create_directories(dir + "/subdir.p2ptrace");

  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(StderrLines(r.err, "p2ptrace: skipped "), 5) << r.err;
  EXPECT_EQ(StderrLines(r.err, "p2ptrace: partly read "), 2) << r.err;
  EXPECT_NE(r.err.find(traces[1] + ": truncated before the end of its header"), std::string::npos) << r.err;
  // The patched file keeps this build's minor: the message names the version the file claims.
  const std::string newer = std::to_string(P2PTRACE_FORMAT_MAJOR + 1) + "." + std::to_string(P2PTRACE_FORMAT_MINOR);
  EXPECT_NE(r.err.find(traces[2] + ": trace format " + newer + " is newer than this p2ptrace reads (" +
                       std::to_string(P2PTRACE_FORMAT_MAJOR) + ".x)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(dir + "/empty.p2ptrace: empty file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir + "/notes.p2ptrace: not a p2ptrace trace"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir + "/subdir.p2ptrace: not a regular file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(traces[0] + ": cut short at"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(traces[3] + ": 1 record of unknown type skipped (written as format " +
                       std::to_string(P2PTRACE_FORMAT_MAJOR) + "." + std::to_string(P2PTRACE_FORMAT_MINOR + 1)),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("p2ptrace: 6 traces used (2 files in part), 5 files skipped\n"), std::string::npos) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["ranks"].size(), 6u);
  EXPECT_EQ(j["capture"]["skipped_files"].size(), 5u);
}

TEST(Loading, NothingUsableIsExit2WithEveryFileNamed) {
  std::string dir = TempDir() + "/load-none";
  fs::create_directories(dir);
  p2ptrace::testing::WriteFile(dir + "/a.p2ptrace", "");
  p2ptrace::testing::WriteFile(dir + "/b.p2ptrace", "P2PTRACE");
  for (const char* command : {"report", "export", "diff"}) {
    std::vector<std::string> argv = {P2PTRACE_CLI, command, dir};
    if (std::string(command) == "export") argv.insert(argv.end(), {"--perfetto", TempDir() + "/none.json"});
    if (std::string(command) == "diff") argv.push_back(dir);
    RunResult r = RunProgram(argv);
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_NE(r.err.find(dir + "/a.p2ptrace: empty file"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(dir + "/b.p2ptrace: truncated before the end of its header"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no usable trace in " + dir), std::string::npos) << r.err;
  }
}

TEST(Loading, UnreadableFileIsNamed) {
  std::string dir = Synth("load-unreadable", 2, 8);
  std::string f = Files(dir, ".p2ptrace")[0];
  chmod(f.c_str(), 0);
  // Root reads a mode-000 file: as root (CI), the CLI runs as nobody (setpriv), who can reach the
  // directory but not that file.
  std::vector<std::string> argv = {P2PTRACE_CLI, "report", dir};
  if (geteuid() == 0) {
    // The test's own directories only, up to TempDir(): never /tmp itself.
    for (std::string d = dir; d.size() >= TempDir().size(); d = d.substr(0, d.rfind('/'))) chmod(d.c_str(), 0755);
    for (const std::string& other : Files(dir, ".p2ptrace"))
      if (other != f) chmod(other.c_str(), 0644);
    argv.insert(argv.begin(), {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"});
  }
  RunResult r = RunProgram(argv);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find(f + ": Permission denied"), std::string::npos) << r.err;
}

// 10k files, nearly all of them bad: the summary stays short and the good ones are used.
TEST(Loading, TenThousandFilesGiveABoundedSummary) {
  std::string dir = Synth("load-10k", 4, 8);
  for (int i = 0; i < 10000; ++i) p2ptrace::testing::WriteFile(dir + "/junk" + std::to_string(i) + ".p2ptrace", "x");
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  EXPECT_EQ(StderrLines(r.err, "p2ptrace: skipped "), 20);
  EXPECT_NE(r.err.find("p2ptrace: 4 traces used (0 files in part), 10000 files skipped; 9980 more lines not shown"),
            std::string::npos) << r.err.substr(r.err.size() > 500 ? r.err.size() - 500 : 0);
  EXPECT_EQ(json::parse(r.out)["ranks"].size(), 4u);
  // The text report names 20 skipped files, then one line for the rest.
  r = RunProgram({P2PTRACE_CLI, "report", dir});
  ASSERT_EQ(r.exit_code, 0);
  int named = 0;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) named += line.rfind("skipped: ", 0) == 0 && line.find(".p2ptrace") != std::string::npos;
  EXPECT_EQ(named, 20) << r.out.substr(0, 3000);
  EXPECT_NE(r.out.find("skipped: … 9980 more files (each is named on stderr)\n"), std::string::npos) << r.out.substr(0, 3000);
}

// A huge file: records past the cap are counted, not kept; pair totals stay exact (counters).
TEST(Loading, RecordsPastTheCapAreCountedAndTotalsStayExact) {
  std::string dir = Synth("load-cap", 2, 400);
  p2ptrace::cli::LoadOptions capped;
  capped.max_records_per_file = 100;
  capped.max_records_total = 150;
  auto full = p2ptrace::cli::LoadTraces(dir), part = p2ptrace::cli::LoadTraces(dir, capped);
  ASSERT_TRUE(full.ok() && part.ok());
  ASSERT_EQ(part->traces.size(), 2u);
  EXPECT_EQ(part->traces[0].records.size(), 100u);
  EXPECT_EQ(part->traces[1].records.size(), 50u);  // what the total left
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(part->traces[i].records.size() + part->traces[i].records_not_kept, full->traces[i].records.size());
    EXPECT_EQ(part->traces[i].counters.size(), full->traces[i].counters.size());
    for (size_t k = 0; k < full->traces[i].counters.size(); ++k)
      EXPECT_EQ(part->traces[i].counters[k].c.bytes, full->traces[i].counters[k].c.bytes);
  }
  ASSERT_EQ(part->partial.size(), 2u);
  EXPECT_NE(part->partial[0].find("records past the memory cap not kept (100 kept)"), std::string::npos)
      << part->partial[0];
}


// ------------------------------------------------------------------------------------------------
// Hostile files in the trace directory: what another user, a crash or a full disk can
// leave there must not hang, crash or exhaust the commands that read it.

// Killed after 20 s: a command that would hang fails its test instead of stalling the suite.
RunResult RunBounded(std::vector<std::string> argv) {
  // A guard against hangs, not a timing: ThreadSanitizer reads the 256 MiB cap in ~25 s here.
#ifdef P2PTRACE_SANITIZED
  const char* bound = "120";
#else
  const char* bound = "20";
#endif
  argv.insert(argv.begin(), {"timeout", "-s", "KILL", bound});
  return RunProgram(argv);
}

// Every command that reads a job directory, on `dir` (html and export write into the test's dir).
std::vector<std::vector<std::string>> JobCommands(const std::string& dir) {
  return {{P2PTRACE_CLI, "report", dir},
          {P2PTRACE_CLI, "report", dir, "--json"},
          {P2PTRACE_CLI, "html", dir, "-o", TempDir() + "/hostile.html"},
          {P2PTRACE_CLI, "export", dir, "--perfetto", TempDir() + "/hostile.json"},
          {P2PTRACE_CLI, "diff", dir, dir},
          {P2PTRACE_CLI, "diff", dir, dir, "--json"},
          // `run`'s report stage: the job records nothing, the report reads what DIR already holds.
          {P2PTRACE_CLI, "run", "--dir", dir, "--", "true"}};
}

TEST(Hostile, FifoNamedLikeATraceIsSkippedByEveryCommand) {
  std::string dir = Synth("hostile-fifo", 2, 8), fifo = dir + "/x.p2ptrace";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string skipped = fifo + ": not a regular file (a FIFO)";
  for (const auto& argv : JobCommands(dir)) {
    RunResult r = RunBounded(argv);
    EXPECT_EQ(r.signal, 0) << argv[1];
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << argv[1] << " exit " << r.exit_code << "\n" << r.err;
    // run prints the text report (its skipped: lines); the others name the file on stderr.
    EXPECT_NE((argv[1] == "run" ? r.out : r.err).find(skipped), std::string::npos) << argv[1] << "\n" << r.err;
  }
  RunResult r = RunBounded({P2PTRACE_CLI, "dump", fifo, "--json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("p2ptrace: skipped " + skipped), std::string::npos) << r.err;
}

TEST(Hostile, NcclLogThatIsAFifoOrLinksToDevZeroIsSkipped) {
  std::string dir = Synth("hostile-logs", 2, 8);
  std::vector<std::string> logs = Files(dir, ".log");
  ASSERT_EQ(logs.size(), 2u);
  fs::remove(logs[0]);
  fs::remove(logs[1]);
  ASSERT_EQ(mkfifo(logs[0].c_str(), 0600), 0);
  fs::create_symlink("/dev/zero", logs[1]);
  for (const auto& argv : JobCommands(dir)) {
    RunResult r = RunBounded(argv);
    EXPECT_EQ(r.signal, 0) << argv[1];
    const std::string& said = argv[1] == "run" ? r.out : r.err;
    EXPECT_NE(said.find(logs[0] + ": not a regular file (a FIFO)"), std::string::npos) << argv[1] << "\n" << said;
    EXPECT_NE(said.find(logs[1] + ": not a regular file (a character device)"), std::string::npos) << argv[1] << "\n" << said;
  }
  RunResult r = RunBounded({P2PTRACE_CLI, "explain", logs[0], logs[1]});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("p2ptrace explain: " + logs[0] + ": not a regular file (a FIFO)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("p2ptrace explain: " + logs[1] + ": not a regular file (a character device)"), std::string::npos)
      << r.err;
}

// A log past the cap (a sparse 300 MiB file) is read up to it, and the report says so.
TEST(Hostile, HugeNcclLogIsReadUpToTheCap) {
  std::string dir = Synth("hostile-huge-log", 2, 8);
  std::string log = Files(dir, ".log")[0];
  fs::resize_file(log, 300ull << 20);
  RunResult r = RunBounded({P2PTRACE_CLI, "report", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("p2ptrace: partly read " + log + ": only its first 256 MiB of 300 MiB read"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("p2ptrace: 2 traces used (1 file in part), 0 files skipped\n"), std::string::npos) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["capture"]["nccl_logs"], 2);  // its head (the connection lines) is used
  EXPECT_EQ(j["capture"]["partial_files"].size(), 1u);
  r = RunBounded({P2PTRACE_CLI, "explain", log});
  EXPECT_NE(r.err.find(log + ": only its first 256 MiB of 300 MiB read"), std::string::npos) << r.err;
}

// A trace's capacity is its file size (sparse until written): the reader reads it in pieces, so a
// capacity far beyond the address-space limit (ulimit -v) reads like any other file.
TEST(Hostile, TraceLargerThanTheAddressSpaceLimitIsRead) {
#ifdef P2PTRACE_SANITIZED
  GTEST_SKIP() << "sanitizers reserve terabytes of address space";
#endif
  std::string dir = Synth("hostile-8g", 2, 8);
  std::string trace = Files(dir, ".p2ptrace")[0];
  uint64_t capacity = 8ull << 30;
  fs::resize_file(trace, capacity);
  Patch(trace, offsetof(p2ptrace_file_header, file_size), &capacity, sizeof capacity);
  RunResult r = RunProgram({"sh", "-c", std::string("ulimit -v 1048576 && exec ") + P2PTRACE_CLI + " report --json " + dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  json j = json::parse(r.out);
  EXPECT_EQ(j["ranks"].size(), 2u);
  EXPECT_TRUE(j["capture"]["skipped_files"].empty()) << j["capture"].dump();
}

// Bytes that are not UTF-8, and terminal controls, in every place a file can carry them: the
// directory's name, a trace's host, program and recorded environment, an NCCL log line.
constexpr char kBadBytes[] = "\xff\xfe\x1b[31m";         // not UTF-8, then ESC [31m (red)
constexpr char kBadEscaped[] = "\\xff\\xfe\x1b[31m";  // as JSON strings hold them (ESC is JSON's \u001b)
constexpr char kBadShown[] = "\\xff\\xfe\\x1b[31m";  // as a terminal is shown them

// A job in a directory named with kBadBytes; trace 0's host, exe and NCCL_SOCKET_IFNAME, and a
// connection line and an environment line of its NCCL log, hold them too.
std::string HostileJob(const std::string& name) {
  std::string dir = Synth(name + kBadBytes, 2, 8);
  std::string trace = Files(dir, ".p2ptrace")[0], log = Files(dir, ".log")[0];
  char host[64] = {}, exe[128] = {};
  std::snprintf(host, sizeof host, "%sevil", kBadBytes);
  std::snprintf(exe, sizeof exe, "/bin/%s\xc2\x9b" "2J", kBadBytes);  // and U+009B, the C1 CSI
  Patch(trace, offsetof(p2ptrace_file_header, host), host, sizeof host);
  Patch(trace, offsetof(p2ptrace_file_header, exe), exe, sizeof exe);
  p2ptrace_file_header h = HeaderOf(trace);
  std::string env;
  for (const std::string& kv : {std::string("RANK=0"), std::string("P2PTRACE_NCCL_TAP=1"),
                                "NCCL_SOCKET_IFNAME=" + std::string(kBadBytes) + "eth0", std::string()})
    env += kv + '\0';
  Patch(trace, h.env_offset, env.data(), env.size());
  std::string text = ReadAll(log);
  size_t via = text.find(" via P2P");
  EXPECT_NE(via, std::string::npos);
  text.insert(via + 8, kBadBytes);
  text += std::string("node0:10000:10000 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ") + kBadBytes + "eth0\n";
  p2ptrace::testing::WriteFile(log, text);
  return dir;
}

// `path` (made with kBadBytes) as JSON output holds it.
std::string Escaped(std::string path) {
  for (size_t at; (at = path.find(kBadBytes)) != std::string::npos;) path.replace(at, std::strlen(kBadBytes), kBadEscaped);
  return path;
}

// Parsed as nlohmann parses: strictly, invalid UTF-8 is a parse error.
json ParseStrict(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << text.substr(0, 2000);
    return json();
  }
}

TEST(Hostile, BytesThatAreNotUtf8ComeOutEscapedInEveryJsonOutput) {
  std::string dir = HostileJob("hostile-utf8-");
  std::string trace = Files(dir, ".p2ptrace")[0];
  const std::string escaped_dir = Escaped(dir);

  RunResult r = RunBounded({P2PTRACE_CLI, "report", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = ParseStrict(r.out);
  std::set<std::string> hosts;
  for (const auto& rank : j["ranks"]) {
    hosts.insert(rank["host"].get<std::string>());
    EXPECT_EQ(rank["file"].get<std::string>().rfind(escaped_dir + "/", 0), 0u) << rank["file"];
  }
  EXPECT_TRUE(hosts.count(std::string(kBadEscaped) + "evil")) << j["ranks"].dump();
  bool transport = false;
  for (const auto& p : j["pairs"])
    for (const auto& t : p["nccl_transports"]) transport |= t == std::string("P2P") + kBadEscaped + "/CUMEM/read";
  EXPECT_TRUE(transport) << j["pairs"].dump();

  r = RunBounded({P2PTRACE_CLI, "dump", trace, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json header = ParseStrict(r.out.substr(0, r.out.find('\n')));
  EXPECT_EQ(header["host"], std::string(kBadEscaped) + "evil");
  EXPECT_EQ(header["exe"], std::string("/bin/") + kBadEscaped + "\xc2\x9b" "2J");
  EXPECT_EQ(header["env"]["NCCL_SOCKET_IFNAME"], std::string(kBadEscaped) + "eth0");
  EXPECT_EQ(header["file"], Escaped(trace));
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) ParseStrict(line);

  r = RunBounded({P2PTRACE_CLI, "diff", dir, dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseStrict(r.out)["a"], escaped_dir);

  std::string timeline = TempDir() + "/hostile-utf8.json";
  r = RunBounded({P2PTRACE_CLI, "export", dir, "--perfetto", timeline});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string exported = ReadAll(timeline);
  ParseStrict(exported);
  EXPECT_NE(exported.find(R"(\\xff\\xfe\u001b[31mevil)"), std::string::npos);

  r = RunBounded({P2PTRACE_CLI, "explain", Files(dir, ".log")[0], "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(ParseStrict(r.out).dump().find(R"(NCCL_SOCKET_IFNAME set by environment to \\xff\\xfe\u001b[31meth0)"),
            std::string::npos);
}

// On a terminal (or a file, or a pipe), text output shows a control byte as \xHH, never raw.
TEST(Hostile, TextOutputShowsControlBytesEscaped) {
  std::string dir = HostileJob("hostile-text-");
  std::string trace = Files(dir, ".p2ptrace")[0], log = Files(dir, ".log")[0];
  std::vector<std::vector<std::string>> commands = {{P2PTRACE_CLI, "report", dir},
                                                    {P2PTRACE_CLI, "dump", trace},
                                                    {P2PTRACE_CLI, "diff", dir, dir},
                                                    {P2PTRACE_CLI, "explain", log}};
  for (const auto& argv : commands) {
    RunResult r = RunBounded(argv);
    EXPECT_EQ(r.signal, 0) << argv[1];
    for (const std::string* text : {&r.out, &r.err})
      for (unsigned char c : *text)
        if ((c < 0x20 && c != '\n') || c == 0x7f) {
          ADD_FAILURE() << argv[1] << ": a raw control byte " << static_cast<int>(c) << " in\n" << *text;
          break;
        }
    EXPECT_NE(r.out.find(kBadShown), std::string::npos) << argv[1] << "\n" << r.out;
  }
  RunResult r = RunBounded({P2PTRACE_CLI, "report", dir});
  EXPECT_NE(r.out.find(std::string("on 2 hosts (node0, ") + kBadShown + "evil)"), std::string::npos) << r.out;
  r = RunBounded({P2PTRACE_CLI, "dump", trace});
  EXPECT_NE(r.out.find(std::string(", host ") + kBadShown + "evil, pid"), std::string::npos) << r.out;
}

// A host named to open an HTML comment and a script: the page's data stays data, its script runs.
TEST(Hostile, HtmlScriptSurvivesAHostNamedLikeMarkup) {
  std::string dir = Synth("hostile-html", 2, 8);
  const char host[64] = "<!--<script></script><b>x";
  Patch(Files(dir, ".p2ptrace")[0], offsetof(p2ptrace_file_header, host), host, sizeof host);
  std::string page = TempDir() + "/hostile.html";
  RunResult r = RunBounded({P2PTRACE_CLI, "html", dir, "-o", page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string html = ReadAll(page);
  // Inside each <script> element, no markup at all: what a browser would take for a comment or a tag.
  size_t scripts = 0;
  for (size_t at = 0; (at = html.find("<script", at)) != std::string::npos; ++scripts) {
    size_t body = html.find('>', at) + 1, end = html.find("</script>", body);
    ASSERT_NE(end, std::string::npos);
    std::string inside = html.substr(body, end - body);
    EXPECT_EQ(inside.find("<!--"), std::string::npos) << inside.substr(0, 500);
    EXPECT_EQ(inside.find("<script"), std::string::npos) << inside.substr(0, 500);
    at = end;
  }
  EXPECT_EQ(scripts, 2u);
  // The data still names the host, to JSON.parse.
  size_t data = html.find(R"(<script type="application/json" id="report-data">)");
  ASSERT_NE(data, std::string::npos);
  data = html.find('>', data) + 1;
  json j = ParseStrict(html.substr(data, html.find("</script>", data) - data));
  bool named = false;
  for (const auto& p : j["pairs"]) named |= p["label"].get<std::string>().rfind(host, 0) == 0;
  EXPECT_TRUE(named);
  // And the text of the page shows it escaped.
  EXPECT_NE(html.find("&lt;!--&lt;script&gt;&lt;/script&gt;&lt;b&gt;x"), std::string::npos);
  EXPECT_EQ(html.find("<b>x"), std::string::npos);
}

// A process a signal killed: the text report says which signal, by name (the JSON says it too).
TEST(Report, FatalSignalIsNamedInTheText) {
  std::string dir = Synth("fatal-signal", 2, 8);
  std::string trace = Files(dir, ".p2ptrace")[1];
  uint32_t state = P2PTRACE_STATE_FATAL_SIGNAL;
  int32_t signal = 11;
  Patch(trace, offsetof(p2ptrace_file_header, state), &state, sizeof state);
  Patch(trace, offsetof(p2ptrace_file_header, fatal_signal), &signal, sizeof signal);
  RunResult r = RunBounded({P2PTRACE_CLI, "report", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 1 on node0 (pid 10001): killed by SIGSEGV (signal 11)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("killed by SIGSEGV (signal 11): complete up to that moment"), std::string::npos) << r.out;
  json j = ReportJson(dir);
  EXPECT_EQ(j["ranks"][1]["state"], "fatal signal 11");
}

}  // namespace
