// P2PTRACE_STACKS end to end: the report's call sites from hand-made traces (copies, host-staged
// bytes, pairs, sites merged over ranks); libp2ptrace.so on the simulated node with call sites on
// (the program's output unchanged, NCCL operations carrying their call site, each site described
// once per file, `dump` and `report` showing them); a malformed value warned once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace_reader.h"
#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using p2ptrace::testing::Env;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;

constexpr uint64_t MiB = 1 << 20;
const std::string kDemo = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";

std::vector<p2ptrace::Trace> ReadDir(const std::string& dir) {
  std::vector<p2ptrace::Trace> out;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".p2ptrace") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    auto t = p2ptrace::ReadTrace(f);
    if (!t.ok()) ADD_FAILURE() << t.error().message;
    else out.push_back(std::move(t.value()));
  }
  return out;
}

json ReportJson(const std::string& dir) {
  RunResult r = RunProgram({P2PTRACE_CLI, "report", dir, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

// ------------------------------------------------------------------------------------------------
// The report, from traces written by hand: one process per rank, two GPUs each.

struct MiniCopy {
  uint32_t site;
  int src, dst;
  uint8_t transport;
  uint64_t bytes;
  int result = 0;
};

// A minimal trace file in the on-disk format: header, an empty counter table, one chunk holding
// the copies and the call-site blocks.
void WriteMiniTrace(const std::string& path, int rank, const std::vector<MiniCopy>& copies,
                    const std::map<uint32_t, std::string>& sites) {
  constexpr uint32_t kChunk = 64 * 1024;
  p2ptrace_file_header h{};
  std::memcpy(h.magic, P2PTRACE_MAGIC, 8);
  h.major = P2PTRACE_FORMAT_MAJOR;
  h.minor = P2PTRACE_FORMAT_MINOR;
  h.header_size = sizeof h;
  h.chunk_size = kChunk;
  h.max_devices = 2;
  h.env_offset = 4096;
  h.env_size = 0;
  h.counters_offset = 4096;
  h.counters_size = 2 * 2 * 2 * sizeof(p2ptrace_pair_counters);
  h.chunks_offset = 8192;
  h.chunks_claimed = 1;
  h.file_size = h.chunks_offset + kChunk;
  h.state = P2PTRACE_STATE_EXITED;
  h.pid = 1000 + rank;
  h.rank = rank;
  h.device_count = 2;
  std::strcpy(h.host, "node0");
  std::strcpy(h.bus_id[0], "0000:1a:00.0");
  std::strcpy(h.bus_id[1], "0000:1b:00.0");
  std::string records;
  uint32_t seq = 1;
  for (const MiniCopy& c : copies) {
    p2ptrace_copy_record r{};
    r.h = {P2PTRACE_RECORD_COPY, sizeof r, seq++, 1000};
    r.bytes = c.bytes;
    r.result = c.result;
    r.api = P2PTRACE_API_cudaMemcpyPeer;
    r.src_device = static_cast<int8_t>(c.src);
    r.dst_device = static_cast<int8_t>(c.dst);
    r.transport = c.transport;
    r.site = c.site;
    records.append(reinterpret_cast<const char*>(&r), sizeof r);
  }
  uint32_t block = 1;
  for (const auto& [id, text] : sites) {
    p2ptrace_text_record r{};
    r.h = {P2PTRACE_RECORD_TEXT, sizeof r, seq++, 1000};
    r.block = block++;
    r.parts = 1;
    r.kind = P2PTRACE_TEXT_CALL_SITE;
    r.length = static_cast<uint16_t>(text.size());
    r.tag = id;
    std::memcpy(r.text, text.data(), text.size());
    records.append(reinterpret_cast<const char*>(&r), sizeof r);
  }
  std::string file(h.file_size, '\0');
  std::memcpy(file.data(), &h, sizeof h);
  p2ptrace_chunk_header ch{P2PTRACE_CHUNK_MAGIC, 1, records.size()};
  std::memcpy(file.data() + h.chunks_offset, &ch, sizeof ch);
  std::memcpy(file.data() + h.chunks_offset + sizeof ch, records.data(), records.size());
  std::ofstream(path, std::ios::binary) << file;
}

TEST(CallSiteReport, SitesMergedOverRanksHostStagedFirstWithTheirPairs) {
  std::string dir = TempDir() + "/sites-report";
  fs::create_directories(dir);
  const std::string staged = "/app+0x10 (copy_staged+0x4)\n/app+0x20 (main+0x8)\n";
  const std::string direct = "/app+0x30 (copy_direct+0x4)\n/app+0x20 (main+0x8)\n";
  constexpr uint8_t kStaged = P2PTRACE_TRANSPORT_HOST_STAGED, kNvlink = P2PTRACE_TRANSPORT_NVLINK;
  // Rank 0: three staged copies 0->1 at site 1, two NVLink copies and a failed one at site 2. Rank 1:
  // the staged site under another id (5), and a site (7) its process never described.
  WriteMiniTrace(dir + "/node0.r0.p1000.p2ptrace", 0,
                 {{1, 0, 1, kStaged, MiB}, {2, 0, 1, kNvlink, 8 * MiB}, {1, 0, 1, kStaged, MiB},
                  {2, 0, 1, kNvlink, 8 * MiB}, {2, 0, 1, P2PTRACE_TRANSPORT_UNKNOWN, MiB, 1}, {1, 0, 1, kStaged, MiB},
                  {0, 0, 1, kStaged, 32 * MiB}},  // no site: not in any
                 {{1, staged}, {2, direct}});
  WriteMiniTrace(dir + "/node0.r1.p1001.p2ptrace", 1, {{5, 1, 0, kStaged, 2 * MiB}, {7, 1, 0, kNvlink, MiB}},
                 {{5, staged}});
  json j = ReportJson(dir);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["call_sites"].size(), 3u) << j["call_sites"].dump(1);
  const json& s1 = j["call_sites"][0];  // most host-staged bytes
  EXPECT_EQ(s1["id"], 1);
  EXPECT_EQ(s1["frames"], json({"/app+0x10 (copy_staged+0x4)", "/app+0x20 (main+0x8)"}));
  EXPECT_EQ(s1["copies"], 4);
  EXPECT_EQ(s1["bytes"], 5 * MiB);
  EXPECT_EQ(s1["host_staged_bytes"], 5 * MiB);
  EXPECT_EQ(s1["ranks"], json({0, 1}));
  EXPECT_EQ(s1["processes"], 2);
  ASSERT_EQ(s1["pairs"].size(), 2u);
  EXPECT_EQ(s1["pairs"][0]["src"]["gpu"], 0);
  EXPECT_EQ(s1["pairs"][0]["dst"]["gpu"], 1);
  EXPECT_EQ(s1["pairs"][0]["transport"], "host_staged");
  EXPECT_EQ(s1["pairs"][0]["copies"], 3);
  EXPECT_EQ(s1["pairs"][1]["src"]["gpu"], 1);
  EXPECT_EQ(s1["pairs"][1]["bytes"], 2 * MiB);
  const json& s2 = j["call_sites"][1];  // then most bytes
  EXPECT_EQ(s2["id"], 2);
  EXPECT_EQ(s2["frames"][0], "/app+0x30 (copy_direct+0x4)");
  EXPECT_EQ(s2["copies"], 2);
  EXPECT_EQ(s2["errors"], 1);
  EXPECT_EQ(s2["bytes"], 16 * MiB);
  EXPECT_EQ(s2["host_staged_bytes"], 0);
  EXPECT_EQ(s2["pairs"][0]["transport"], "nvlink");
  const json& s3 = j["call_sites"][2];
  EXPECT_EQ(s3["copies"], 1);
  ASSERT_EQ(s3["frames"].size(), 1u);
  EXPECT_NE(s3["frames"][0].get<std::string>().find("site 7 not described"), std::string::npos) << s3.dump();

  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("top call sites (3 in all"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("#1  4 copies, 5.0 MiB (5.0 MiB host-staged); 2 processes (ranks 0-1)"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("      at /app+0x10 (copy_staged+0x4)\n         /app+0x20 (main+0x8)\n"), std::string::npos)
      << text.out;
  // dump: the site on each copy, and the sites the file describes.
  RunResult d = RunProgram({P2PTRACE_CLI, "dump", dir + "/node0.r0.p1000.p2ptrace", "--json"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("\"site\":2"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("{\"frames\":[\"/app+0x10 (copy_staged+0x4)\",\"/app+0x20 (main+0x8)\"],\"id\":1,\"kind\":\"call_site\"}"),
            std::string::npos)
      << d.out;
}

TEST(CallSiteReport, NoSectionWithoutSites) {
  std::string dir = TempDir() + "/sites-none";
  fs::create_directories(dir);
  WriteMiniTrace(dir + "/node0.r0.p1000.p2ptrace", 0, {{0, 0, 1, P2PTRACE_TRANSPORT_NVLINK, MiB}}, {});
  json j = ReportJson(dir);
  EXPECT_TRUE(j["call_sites"].empty()) << j["call_sites"];
  RunResult text = RunProgram({P2PTRACE_CLI, "report", dir});
  EXPECT_EQ(text.out.find("call sites"), std::string::npos) << text.out;
}

// ------------------------------------------------------------------------------------------------
// Through the shim on the simulated node.

// The environment of a run on demo-8gpu.json: nothing inherited that the shim, the sim or NCCL reads.
Env SimEnv(const std::string& rendezvous) {
  Env env;
  for (const char* name : {"LD_PRELOAD", "P2PTRACE_DIR", "P2PTRACE_SAMPLE", "P2PTRACE_MAX_MB", "P2PTRACE_DISABLE",
                           "P2PTRACE_SYSROOT", "P2PTRACE_STACKS", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                           "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "P2PSIM_HOST", "NCCL_DEBUG", "NCCL_DEBUG_FILE",
                           "NCCL_DEBUG_SUBSYS", "P2PTRACE_NCCL_TAP", "P2PTRACE_NCCL_TAP_FILE", "P2PTRACE_NCCL_FORWARD",
                           "P2PTRACE_NCCL_LOG", "NCCL_RUNTIME_CONNECT"})
    env[name] = std::nullopt;
  env["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  env["P2PSIM_TOPOLOGY"] = kDemo;
  env["P2PSIM_NCCL_TIMEOUT"] = "30";
  env["P2PSIM_NCCL_DIR"] = rendezvous;
  env["P2PTRACE_WARN"] = "off";
  env["NO_COLOR"] = "1";
  return env;
}

Env Traced(Env env, const std::string& dir, const char* stacks) {
  env["LD_PRELOAD"] = P2PTRACE_SHIM;
  env["P2PTRACE_DIR"] = dir;
  if (stacks) env["P2PTRACE_STACKS"] = stacks;
  return env;
}

// The script of every wrapped call prints exactly the same with call sites on (backtrace() loads
// libgcc_s at the shim's start: nothing of that may show).
TEST(CallSitesShim, ScriptOutputUnchangedWithStacksOn) {
  RunResult bare = RunProgram({SHIM_WORKLOAD, "script"}, SimEnv(TempDir()));
  ASSERT_EQ(bare.signal, 0) << bare.err;
  EXPECT_GE(std::count(bare.out.begin(), bare.out.end(), '\n'), 100) << bare.out;
  for (const char* stacks : {"1", "32"}) {
    std::string dir = TempDir() + "/script-stacks-" + stacks;
    RunResult traced = RunProgram({SHIM_WORKLOAD, "script"}, Traced(SimEnv(TempDir()), dir, stacks));
    EXPECT_EQ(traced.signal, bare.signal) << traced.err;
    EXPECT_EQ(traced.exit_code, bare.exit_code) << traced.err;
    EXPECT_EQ(traced.out, bare.out);
    EXPECT_EQ(traced.err, bare.err);
    EXPECT_EQ(ReadDir(dir).size(), 1u);
  }
}

TEST(CallSitesShim, MalformedValueWarnsOnceAndLeavesCallSitesOff) {
  std::string dir = TempDir() + "/stacks-bad";
  RunResult bare = RunProgram({SHIM_WORKLOAD, "pairs"}, SimEnv(TempDir()));
  RunResult r = RunProgram({SHIM_WORKLOAD, "pairs"}, Traced(SimEnv(TempDir()), dir, "deep"));
  EXPECT_EQ(r.exit_code, bare.exit_code);
  EXPECT_EQ(r.out.substr(0, r.out.find("pid=")), bare.out.substr(0, bare.out.find("pid=")));
  EXPECT_EQ(r.err, "p2ptrace: warning: P2PTRACE_STACKS=deep is not 0, off, 1, on or a depth up to 32; call sites off\n" +
                       bare.err);
  std::vector<p2ptrace::Trace> traces = ReadDir(dir);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_GT(traces[0].Counter(0, 1, 0).calls, 0u);  // still traced
  EXPECT_TRUE(traces[0].call_sites.empty());
}

// nccl_ring on two ranks with call sites on: every operation names the line of nccl_ring that
// issued it; both ranks' sites are one in the report.
TEST(CallSitesShim, EveryNcclOperationCarriesItsCallSite) {
  std::string dir = TempDir() + "/nccl-sites";
  auto run = [&](const std::string& name, const char* stacks) {  // each run meets in directories of its own
    std::string base = dir + "/" + name;
    fs::create_directories(base + "/rendezvous");
    fs::create_directories(base + "/id");
    return RunProgram({P2PTRACE_CLI, "run", "--dir", base + "/trace", "--", P2PSIM, "launch", "--topology", kDemo,
                       "--hosts", "node0:2", "--", NCCL_RING, base + "/id", "4096"},
                      Traced(SimEnv(base + "/rendezvous"), base + "/trace", stacks));
  };
  RunResult r = run("on", "1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("top call sites"), std::string::npos) << r.out;  // `run` ends in the report
  int ranks = 0;
  uint64_t ops = 0;
  for (const p2ptrace::Trace& t : ReadDir(dir + "/on/trace")) {
    if (t.header.nccl_version == 0) continue;  // the launcher
    ++ranks;
    std::set<uint32_t> used;
    for (const p2ptrace::TraceRecord& rec : t.records)
      if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&rec.body)) {
        ++ops;
        EXPECT_NE(o->site, 0u) << t.path << " seq " << o->h.seq;
        used.insert(o->site);
      }
    // allreduce, broadcast, allgather, reducescatter, send, recv: each from its own line.
    EXPECT_GE(used.size(), 6u) << t.path;
    EXPECT_EQ(t.call_sites.size(), used.size()) << t.path;
    for (uint32_t id : used) {
      const p2ptrace::CallSite* s = t.FindCallSite(id);
      ASSERT_NE(s, nullptr) << t.path << " does not describe site " << id;
      ASSERT_FALSE(s->frames.empty());
      EXPECT_LE(s->frames.size(), 8u);
      EXPECT_EQ(s->frames[0].rfind(std::string(NCCL_RING) + "+0x", 0), 0u) << s->frames[0];  // no shim frame
    }
  }
  EXPECT_EQ(ranks, 2);
  json j = ReportJson(dir + "/on/trace");
  ASSERT_FALSE(j.is_discarded());
  ASSERT_GE(j["call_sites"].size(), 6u);
  uint64_t site_ops = 0, op_calls = 0;
  for (const json& s : j["call_sites"]) {
    site_ops += s["nccl_ops"].get<uint64_t>();
    EXPECT_EQ(s["processes"], 2) << s.dump();  // the same line in both ranks: one site
    EXPECT_EQ(s["ranks"], json({0, 1})) << s.dump();
    EXPECT_EQ(s["nccl_operations"].size(), 1u) << s.dump();
  }
  for (const json& o : j["nccl_ops"]) op_calls += o["calls"].get<uint64_t>();
  EXPECT_EQ(site_ops, ops);
  EXPECT_EQ(site_ops, op_calls);

  // Off (the default): no site anywhere, no section.
  RunResult off = run("off", nullptr);
  ASSERT_EQ(off.exit_code, 0) << off.out << off.err;
  EXPECT_EQ(off.out.find("call sites"), std::string::npos) << off.out;
  for (const p2ptrace::Trace& t : ReadDir(dir + "/off/trace")) {
    EXPECT_TRUE(t.call_sites.empty()) << t.path;
    for (const p2ptrace::TraceRecord& rec : t.records) {
      if (const auto* o = std::get_if<p2ptrace_nccl_op_record>(&rec.body)) {
        EXPECT_EQ(o->site, 0u);
      }
    }
  }
}

// CUDA peer copies carry their call site (with call sites on, every copy takes the slow path).
TEST(CallSitesShim, EveryPeerCopyCarriesItsCallSite) {
  std::string dir = TempDir() + "/copy-sites";
  RunResult r = RunProgram({SHIM_WORKLOAD, "pairs"}, Traced(SimEnv(TempDir()), dir, "1"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<p2ptrace::Trace> traces = ReadDir(dir);
  ASSERT_EQ(traces.size(), 1u);
  const p2ptrace::Trace& t = traces[0];
  std::set<uint32_t> used;
  for (const p2ptrace::TraceRecord& rec : t.records)
    if (const auto* c = std::get_if<p2ptrace_copy_record>(&rec.body)) {
      EXPECT_NE(c->site, 0u) << "seq " << c->h.seq;
      used.insert(c->site);
    }
  // `pairs` copies between devices from five lines (0->1 x3 in a loop, 0->4 x2, 2->3, 0->1, 0->4).
  EXPECT_GE(used.size(), 5u);
  for (uint32_t id : used) {
    const p2ptrace::CallSite* s = t.FindCallSite(id);
    ASSERT_NE(s, nullptr) << "site " << id << " not described";
    EXPECT_EQ(s->frames[0].rfind(std::string(SHIM_WORKLOAD) + "+0x", 0), 0u) << s->frames[0];
  }
  // The report's sites account for every recorded copy and every host-staged byte of its pairs.
  json j = ReportJson(dir);
  uint64_t site_copies = 0, site_staged = 0, pair_calls = 0, pair_staged = 0;
  for (const json& s : j["call_sites"]) {
    site_copies += s["copies"].get<uint64_t>();
    site_staged += s["host_staged_bytes"].get<uint64_t>();
  }
  for (const json& p : j["pairs"])
    if (p["source"] == "cuda") {
      pair_calls += p["calls"].get<uint64_t>();
      if (p["transport"] == "host_staged") pair_staged += p["bytes"].get<uint64_t>();
    }
  EXPECT_EQ(site_copies, pair_calls);
  EXPECT_EQ(site_staged, pair_staged);
  EXPECT_GT(site_staged, 0u);  // 0->4 without peer access
  EXPECT_EQ(j["call_sites"][0]["host_staged_bytes"], 64 * MiB);  // the single 64 MiB copy 0->4 first
}

}  // namespace
