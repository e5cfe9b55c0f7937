#include "tools/doctor/node_proof.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <ostream>
#include <sstream>

#include "core/causes.h"
#include "core/pair_verdict.h"
#include "core/printable.h"
#include "core/scheduler.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "probe/link_health.h"
#include "tools/common/json_text.h"
#include "tools/common/link_json.h"
#include "tools/common/output_file.h"
#include "tools/doctor/baseline.h"
#include "tools/doctor/nccl_choice.h"
#include "tools/doctor/pair_measure.h"
#include "tools/formats/prometheus.h"
#include "tools/formats/rows.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;
using PairKey = std::pair<int, int>;

// "pid 1234 (python3)"; NVML gives pid 0 for a process in another PID namespace (a container).
std::string ProcessName(unsigned pid) {
  if (pid == 0) return "a process outside this PID namespace";
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm.empty() ? fmt::format("pid {}", pid) : fmt::format("pid {} ({})", pid, comm);
}

std::string Latency(double us) { return us < 0 ? "-" : fmt::format("{:.2g}", us); }
std::string Figure(double gbps) { return gbps < 0 ? "-" : gbps >= 10 ? fmt::format("{:.0f}", gbps) : fmt::format("{:.1f}", gbps); }

json LinkChangesJson(const std::vector<LinkChange>& changes) {
  json out = json::array();
  for (const LinkChange& c : changes) out.push_back(LinkChangeJson(c));
  return out;
}

json PairJson(const JudgedPair& j, const std::map<PairKey, std::string>* regressions) {
  const PairMeasurement& m = j.measured;
  const PairVerdict& v = j.verdict;
  json causes = json::array();
  for (const CauseHit& c : v.causes) {
    const CauseInfo* info = FindCause(c.id);
    causes.push_back({{"id", c.id}, {"role", c.role}, {"evidence", c.evidence}, {"fix", info ? std::string(info->fix) : ""}});
  }
  auto num = [](double x) { return x < 0 ? json(nullptr) : json(x); };
  json out = {{"src", {{"gpu", m.src}}},
              {"dst", {{"gpu", m.dst}}},
              {"transport", m.tested ? json(TransportName(v.transport)) : json(nullptr)},
              {"can_access", m.can_access},
              {"gbps", num(m.gbps)},
              {"bidir_gbps", num(m.bidir_gbps)},
              {"staged_gbps", num(m.staged_gbps)},
              {"latency_us", num(m.latency_us)},
              {"expected_gbps", v.expected.low > 0 ? json({{"low", v.expected.low}, {"high", v.expected.high},
                                                           {"basis", v.expected.basis}})
                                                   : json(nullptr)},
              {"verdict", v.verdict},
              {"reason", v.reason},
              {"causes", causes},
              {"data_ok", m.data_checked ? json(m.data_ok) : json(nullptr)},
              // The copy by the source's own cores (tools/doctor/sm_copy.h), checked on the destination.
              {"sm_copy", m.sm_checked ? json({{"words", m.sm_words}, {"differing", m.sm_differing}})
                          : m.sm_note.empty() ? json(nullptr)
                                              : json({{"note", m.sm_note}})},
              {"link_changes", LinkChangesJson(j.link_changes)},
              {"timed_out", m.timed_out},
              {"error", m.error}};
  if (regressions) {
    auto it = regressions->find({m.src, m.dst});
    out["regression"] = it == regressions->end() ? json(nullptr) : json(it->second);
  }
  return out;
}

// What one test found, for every output.
struct TestRun {
  std::string host;                  // as the report names hosts ("" unknown)
  std::map<int, int> cuda_of;        // tested GPUs: node index -> CUDA ordinal
  std::vector<JudgedPair> pairs;
  std::vector<std::string> busy;     // "GPU0: pid 1234 (python3)" (tested with --allow-busy)
  bool busy_checked = true;          // NVML said which processes use every tested GPU
  const Baseline* baseline = nullptr;
  std::map<PairKey, std::string> regressions;  // against the baseline
  size_t without_baseline = 0;       // tested pairs the baseline has no figure for
  size_t failed = 0;
  bool nccl_asked = false;           // --nccl
  NcclChoice nccl;
  Prediction nccl_prediction;        // NCCL's rules, of the version that ran
};

// A GPU matrix laid out as `nvidia-smi topo -m` lays it out: rows the source, columns the
// destination, `width` characters a cell, X on the diagonal.
std::string Matrix(const std::map<int, int>& gpus, int width, const std::function<std::string(int, int)>& cell) {
  std::string t = "      ";
  for (const auto& [g, c] : gpus) t += fmt::format("{:>{}}", "GPU" + std::to_string(g), width);
  t += "\n";
  for (const auto& [s, cs] : gpus) {
    t += fmt::format("{:<6}", "GPU" + std::to_string(s));
    for (const auto& [d, cd] : gpus) t += fmt::format("{:>{}}", s == d ? std::string("X") : cell(s, d), width);
    t += "\n";
  }
  return t;
}

// NCCL's choice for one ordered pair beside the prediction.
struct NcclVerdict {
  const NcclPairChoice* chose = nullptr;  // null: NCCL made no connection for it
  int predicted = 0;
  bool agrees = false;
};

NcclVerdict JudgeNccl(const TestRun& run, int s, int d) {
  NcclVerdict v;
  auto it = run.nccl.pairs.find({s, d});
  if (it != run.nccl.pairs.end()) v.chose = &it->second;
  if (const PairPrediction* p = run.nccl_prediction.Pair(s, d)) v.predicted = p->transport;
  // NCCL's log says P2P, not which link: any direct class predicted agrees with it.
  if (v.chose && v.chose->classes.size() == 1) {
    int c = *v.chose->classes.begin();
    v.agrees = c == v.predicted || (c == P2PTRACE_TRANSPORT_P2P && IsDirect(v.predicted));
  }
  return v;
}

void PrintNccl(const TestRun& run, std::ostringstream& t) {
  const NcclChoice& n = run.nccl;
  t << "\n" << fmt::format("NCCL {}: what it chose (one process per GPU; its own connection lines; * not as predicted)\n",
                           n.version.empty() ? "(version not printed)" : n.version);
  if (!n.error.empty()) t << "  " << (n.not_installed ? "not run: " : "failed: ") << n.error << "\n";
  if (n.pairs.empty()) return;
  std::vector<std::string> otherwise;
  t << Matrix(run.cuda_of, 12, [&](int s, int d) {
    NcclVerdict v = JudgeNccl(run, s, d);
    std::string cell = "-";
    if (v.chose) {
      std::vector<std::string> names;
      for (int c : v.chose->classes) names.emplace_back(TransportName(c));
      cell = fmt::format("{}", fmt::join(names, "+"));
    }
    if (!v.agrees)
      otherwise.push_back(fmt::format("GPU{} -> GPU{}: NCCL {}; predicted {}", s, d,
                                      v.chose ? "chose " + fmt::format("{}", fmt::join(v.chose->transports, ", "))
                                              : std::string("made no connection"),
                                      v.predicted ? std::string(TransportName(v.predicted)) : "nothing"));
    return cell + (v.agrees ? "" : "*");
  });
  if (otherwise.empty()) t << "  every pair as predicted\n";
  else t << fmt::format("  {} pair{} not as predicted:\n", otherwise.size(), otherwise.size() == 1 ? "" : "s");
  for (size_t i = 0; i < std::min<size_t>(otherwise.size(), 6); ++i) t << "    " << otherwise[i] << "\n";
  if (otherwise.size() > 6) t << fmt::format("    … {} more (--json has each)\n", otherwise.size() - 6);
  if (!n.env.empty()) t << fmt::format("  NCCL read: {}\n", fmt::join(n.env, " "));
  for (const std::string& w : n.warnings) t << "  NCCL WARN " << w << "\n";
}

json NcclJson(const TestRun& run) {
  const NcclChoice& n = run.nccl;
  json pairs = json::array();
  for (const auto& [s, cs] : run.cuda_of)
    for (const auto& [d, cd] : run.cuda_of) {
      if (s == d) continue;
      NcclVerdict v = JudgeNccl(run, s, d);
      json classes = json::array(), words = json::array();
      if (v.chose) {
        for (int c : v.chose->classes) classes.push_back(TransportName(c));
        for (const std::string& w : v.chose->transports) words.push_back(w);
      }
      pairs.push_back({{"src", {{"gpu", s}}},
                       {"dst", {{"gpu", d}}},
                       {"transport", classes.size() == 1 ? classes[0] : classes.empty() ? json(nullptr) : json(classes)},
                       {"nccl_transports", words},
                       {"predicted", v.predicted ? json(TransportName(v.predicted)) : json(nullptr)},
                       {"agrees", v.agrees}});
    }
  return {{"version", n.version.empty() ? json(nullptr) : json(n.version)},
          {"error", n.error.empty() ? json(nullptr) : json(n.error)},
          {"env", n.env},
          {"warnings", n.warnings},
          {"pairs", pairs}};
}

void PrintText(const DoctorOptions& o, const TestRun& run, std::ostream& out) {
  std::ostringstream t;
  std::string host = run.host.empty() ? "this machine" : run.host;
  t << fmt::format("p2ptrace doctor --test: {}, {} GPU pairs, {} failed", host, run.pairs.size(), run.failed);
  if (run.baseline) t << fmt::format(", {} slower than the baseline", run.regressions.size());
  t << "\n";
  if (!run.busy.empty())
    t << fmt::format("note: tested beside other processes (--allow-busy: {}): figures may read low\n", fmt::join(run.busy, "; "));
  if (!run.busy_checked)
    t << "note: tested with --allow-busy where NVML could not say which processes use the GPUs: a job beside the test "
         "would make its figures read low\n";
  t << "\nGB/s one way with peer access (row: source, column: destination; ! fail, ~ expected, x no peer access, "
       "? not tested)\n";
  t << Matrix(run.cuda_of, 9, [&](int s, int d) {
    const JudgedPair& j = *std::find_if(run.pairs.begin(), run.pairs.end(),
                                        [&](const JudgedPair& x) { return x.measured.src == s && x.measured.dst == d; });
    std::string mark = j.verdict.verdict == "fail" ? "!" : j.verdict.verdict == "expected" ? "~" : "";
    return (!j.measured.tested ? "?" : j.measured.can_access ? Figure(j.measured.gbps) : "x") + mark;
  });
  // Pairs that did not pass, those with the same verdict, reason and causes together, each cause
  // with the evidence of every pair in the group (once each).
  struct Group {
    std::string head;  // "fail — reason"
    std::vector<std::string> ids, pairs;
    std::vector<std::vector<std::string>> evidence;  // per id
  };
  std::vector<Group> groups;
  for (const JudgedPair& j : run.pairs) {
    const PairMeasurement& m = j.measured;
    if (j.verdict.verdict == "pass") continue;
    Group key{fmt::format("{} — {}", j.verdict.verdict, j.verdict.reason), {}, {}, {}};
    for (const CauseHit& c : j.verdict.causes) key.ids.push_back(c.id);
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.head == key.head && x.ids == key.ids; });
    if (g == groups.end()) {
      key.evidence.resize(key.ids.size());
      groups.push_back(key);
      g = groups.end() - 1;
    }
    std::string pair = fmt::format("GPU{} -> GPU{}", m.src, m.dst);
    if (m.tested)
      pair += fmt::format(" (both ways {} GB/s, staged {} GB/s, small copy {} us)", Figure(m.bidir_gbps),
                          Figure(m.staged_gbps), Latency(m.latency_us));
    g->pairs.push_back(pair);
    for (size_t i = 0; i < j.verdict.causes.size(); ++i)
      for (const std::string& e : j.verdict.causes[i].evidence)
        if (std::find(g->evidence[i].begin(), g->evidence[i].end(), e) == g->evidence[i].end()) g->evidence[i].push_back(e);
  }
  // Failures first, then what could not be tested, then what is as the node's design has it.
  auto rank = [](const Group& x) { return x.head.rfind("fail", 0) == 0 ? 0 : x.head.rfind("untested", 0) == 0 ? 1 : 2; };
  std::stable_sort(groups.begin(), groups.end(), [&](const Group& x, const Group& y) { return rank(x) < rank(y); });
  constexpr size_t kShown = 6;
  auto some = [&](const std::vector<std::string>& items, const char* sep) {
    std::string s;
    for (size_t i = 0; i < std::min(kShown, items.size()); ++i) s += (i ? sep : "") + items[i];
    if (items.size() > kShown) s += fmt::format("{}… {} more (--json has each)", sep, items.size() - kShown);
    return s;
  };
  for (const Group& g : groups) {
    t << "\n" << fmt::format("{} pair{}: {}\n", g.pairs.size(), g.pairs.size() == 1 ? "" : "s", g.head);
    t << "  " << some(g.pairs, "\n  ") << "\n";
    for (size_t i = 0; i < g.ids.size(); ++i) {
      const CauseInfo* info = FindCause(g.ids[i]);
      t << fmt::format("  [{}] {}\n", g.ids[i], some(g.evidence[i], "; "));
      if (info) t << "    fix: " << info->fix << "\n";
    }
  }
  // What the links did while each pair was tested (read before the first pair and after each).
  std::vector<std::string> moved;
  for (const JudgedPair& j : run.pairs)
    for (const LinkChange& c : j.link_changes)
      moved.push_back(fmt::format("GPU{} -> GPU{}: {}: {}", j.measured.src, j.measured.dst, c.Where(), c.What()));
  if (!moved.empty()) t << "\nlinks the pairs crossed that counted errors during their test or run trained low:\n  " << some(moved, "\n  ") << "\n";
  if (run.nccl_asked) PrintNccl(run, t);
  if (run.baseline) {
    t << "\n" << fmt::format("against the baseline {} (a pair {}% or more below it, or of another class, regressed):\n",
                             o.baseline, static_cast<int>(o.baseline_tolerance * 100 + 0.5));
    std::vector<std::string> lines;
    for (const auto& [key, why] : run.regressions) lines.push_back(fmt::format("GPU{} -> GPU{}: {}", key.first, key.second, why));
    if (lines.empty()) lines.push_back("no pair regressed");
    t << "  " << some(lines, "\n  ") << "\n";
    if (run.without_baseline)
      t << fmt::format("  {} pair{} the baseline has no figure for (not in it, or not passed there)\n", run.without_baseline,
                       run.without_baseline == 1 ? "" : "s");
  }
  out << Printable(t.str());
}

}  // namespace

int RunDoctorTest(const DoctorOptions& o, std::ostream& out, std::ostream& err, bool err_is_tty) {
  constexpr const char* kWho = "p2ptrace doctor --test";
  // What could stop the outputs, before anything is measured.
  for (const std::string* file : {&o.prometheus, &o.rows})
    if (!file->empty() && *file != "-")
      if (std::string why = OutputFileProblem(*file); !why.empty()) {
        err << kWho << ": " << why << "\n";
        return 2;
      }
  Baseline baseline;
  if (!o.baseline.empty()) {
    std::string why;
    if (!LoadBaseline(o.baseline, &baseline, &why)) {
      err << kWho << ": --baseline " << Printable(why) << "\n";
      return 2;
    }
  }
  NodeProbe probe = ProbeNode(o);
  // The test's copies are CUDA's: the driver's answer and the links matter, NCCL's rules do not.
  Prediction pred = PredictNode(probe, /*cuda_copies=*/true);
  CudaCopies cuda;
  std::string why;
  if (!cuda.Load(&why)) {
    err << kWho << ": nothing tested: " << why << "\n";
    return 2;
  }
  SmCopyKernels sm;  // loaded here, used in MeasurePairs
  std::string sm_why;
  bool sm_loaded = sm.Load(&sm_why);
  TestRun run;
  run.host = probe.hostname;
  // The node's GPUs by index, tested through their CUDA ordinals in this process.
  for (const ProbedGpu& g : probe.gpus)
    if (g.cuda >= 0 && (o.gpus.empty() || std::count(o.gpus.begin(), o.gpus.end(), g.index)))
      run.cuda_of[g.index] = g.cuda;
  for (int g : o.gpus)
    if (!run.cuda_of.count(g)) {
      err << kWho << ": --gpus names GPU" << g << ", which this process cannot use (not on this node, "
          << "or hidden by CUDA_VISIBLE_DEVICES)\n";
      return 2;
    }
  // A baseline from another kind of node sets no bar: said, not compared.
  for (const auto& [index, model] : baseline.models)
    if (const ProbedGpu* g = probe.Gpu(index); g && run.cuda_of.count(index) && !g->name.empty() && g->name != model) {
      err << kWho << ": --baseline " << Printable(o.baseline) << " is of another kind of node: its GPU" << index << " is "
          << Printable(model) << ", this node's is " << Printable(g->name) << "\n";
      return 2;
    }
  // Other processes on the GPUs: a test would slow their job and read low, so it is refused; so is
  // a test on GPUs whose processes NVML could not list (no NVML: they may be just as busy).
  std::vector<std::string> unknown;
  for (const ProbedGpu& g : probe.gpus) {
    if (!run.cuda_of.count(g.index)) continue;
    if (!g.compute_pids) {
      run.busy_checked = false;
      unknown.push_back(fmt::format("GPU{}", g.index));
      continue;
    }
    std::vector<std::string> who;
    for (unsigned pid : *g.compute_pids)
      if (pid != static_cast<unsigned>(getpid())) who.push_back(ProcessName(pid));
    if (!who.empty()) run.busy.push_back(fmt::format("GPU{}: {}", g.index, fmt::join(who, ", ")));
  }
  if (!unknown.empty() && !o.allow_busy) {
    std::string nvml = "NVML did not answer";
    for (const ProbeStep& st : probe.steps)
      if (st.name == "NVML" && st.status != "ok") nvml = fmt::format("NVML {}{}", st.status, st.detail.empty() ? "" : ": " + st.detail);
    err << kWho << ": refused: which processes use " << fmt::format("{}", fmt::join(unknown, ", "))
        << " cannot be told (" << Printable(nvml) << "); a job there would be slowed by the test and make it measure less "
        << "than the links give. Run it where NVML answers (the driver's libnvidia-ml.so.1), or pass --allow-busy when "
           "you know the GPUs are idle\n";
    return 2;
  }
  if (!run.busy.empty() && !o.allow_busy) {
    err << kWho << ": refused: other processes use the GPUs (" << Printable(fmt::format("{}", fmt::join(run.busy, "; ")))
        << "); a test would slow them and measure less than the links give. Run it when the GPUs are idle, or pass "
           "--allow-busy\n";
    return 2;
  }
  if (run.cuda_of.size() < 2) {
    std::string note = fmt::format("{} GPU{}, no pairs to test", run.cuda_of.size(), run.cuda_of.size() == 1 ? "" : "s");
    if (o.json)
      out << JsonText({{"version", 1}, {"host", run.host}, {"pairs", json::array()}, {"failed", 0}, {"note", note}}, 2) << "\n";
    else
      out << Printable(fmt::format("{}: {}: {}\n", kWho, run.host.empty() ? "this machine" : run.host, note));
    return run.cuda_of.empty() ? 2 : 0;
  }
  PairTestOptions po;
  po.copy_limit_seconds = o.copy_limit_seconds;
  if (sm_loaded) po.sm = &sm;
  else po.sm_note = "not checked: " + sm_why;
  for (const auto& [index, ordinal] : run.cuda_of) po.gpus.push_back({ordinal, index});
  // The links read before the first pair and after each: what changed during a pair's test is
  // charged to it when its copies crossed the link.
  std::vector<LinkHealth> readings{probe::ReadLinkHealth(probe, "before the test")};
  auto progress = [&](size_t done, size_t total) {
    readings.push_back(probe::ReadLinkHealth(probe, fmt::format("after pair {}", done)));
    if (err_is_tty) err << fmt::format("\r{}: {}/{} pairs", kWho, done, total) << (done == total ? "\n" : "") << std::flush;
  };
  auto started = std::chrono::system_clock::now();
  // Judges and prints what was measured; `stuck`: a CUDA call never returned (MeasurePairs' watch
  // calls this from its thread, then the process ends).
  auto finish = [&](const std::vector<PairMeasurement>& measured, bool stuck) -> int {
    for (const PairMeasurement& m : measured) {
      const ProbedGpu* a = probe.Gpu(m.src);
      const ProbedGpu* b = probe.Gpu(m.dst);
      // The generation the links are built for: a link trained below it is judged by what it should give.
      auto built = [](const ProbedGpu* g) { return g->pcie.max_gen > 0 ? g->pcie.max_gen : g->pcie.gen; };
      int gen = a && b ? std::min(built(a), built(b)) : 0;
      const PairPrediction* predicted = pred.Pair(m.src, m.dst);
      run.pairs.push_back({m, JudgePair(m, predicted, gen), {}});
      size_t i = run.pairs.size() - 1;
      if (i + 1 < readings.size()) ChargeLinkChanges(&run.pairs.back(), readings[i], readings[i + 1], predicted ? predicted->link : "");
    }
    run.failed = std::count_if(run.pairs.begin(), run.pairs.end(), [](const JudgedPair& j) { return j.verdict.verdict == "fail"; });
    if (!o.baseline.empty()) {
      run.baseline = &baseline;
      for (const JudgedPair& j : run.pairs) {
        auto it = baseline.pairs.find({j.measured.src, j.measured.dst});
        if (it == baseline.pairs.end()) {
          run.without_baseline += j.measured.tested;
          continue;
        }
        if (std::string r = RegressionOf(it->second, j, o.baseline_tolerance); !r.empty())
          run.regressions[{j.measured.src, j.measured.dst}] = r;
      }
    }
    if (o.nccl && !stuck) {  // after a stuck call no GPU is left to NCCL
      run.nccl_asked = true;
      if (err_is_tty) err << kWho << ": NCCL: one process per GPU…\n" << std::flush;
      run.nccl = RunNcclChoice(po.gpus, 6 * o.copy_limit_seconds);
      // The prediction by the rules of the NCCL that ran.
      NodeProbe with_version = probe;
      if (std::optional<NcclVersion> v = ParseNcclVersion(run.nccl.version)) {
        with_version.nccl_version = v;
        with_version.nccl_version_note.clear();
      }
      run.nccl_prediction = PredictNode(with_version);
    }
    // NCCL that could not connect the GPUs fails the node; NCCL not installed is only said.
    bool nccl_failed = run.nccl_asked && !run.nccl.error.empty() && !run.nccl.not_installed;
    int code = run.failed || !run.regressions.empty() || nccl_failed ? 1 : 0;
    const std::map<PairKey, std::string>* regressions = run.baseline ? &run.regressions : nullptr;
    uint64_t unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(started.time_since_epoch()).count();
    if (!o.prometheus.empty())
      if (std::string w = WriteOutput(o.prometheus, PrometheusFromTest(probe, run.pairs, unix_ns * 1e-9)); !w.empty()) {
        err << kWho << ": " << w << "\n";
        return 2;
      }
    if (!o.rows.empty()) {
      SchedulerIds ids = ReadSchedulerIds([](const char* name) { return std::getenv(name); });
      if (std::string w = WriteOutput(o.rows, RowsText(BuildTestRows(probe, run.pairs, ids, unix_ns, regressions))); !w.empty()) {
        err << kWho << ": " << w << "\n";
        return 2;
      }
    }
    // Another output on stdout ("-") takes it: the report goes to stderr then, as export does.
    bool stdout_taken = o.prometheus == "-" || o.rows == "-";
    std::ostream& report = stdout_taken ? err : out;
    if (o.json) {
      json pairs = json::array();
      for (const JudgedPair& j : run.pairs) pairs.push_back(PairJson(j, regressions));
      json gpus = json::array();
      for (const auto& [index, ordinal] : run.cuda_of) {
        const ProbedGpu* g = probe.Gpu(index);
        gpus.push_back({{"gpu", index}, {"cuda_device", ordinal}, {"name", g ? g->name : ""}, {"bus_id", g ? g->bus_id : ""}});
      }
      json j = {{"version", 1}, {"host", run.host}, {"gpus", gpus}, {"busy", run.busy}, {"busy_checked", run.busy_checked},
                {"pairs", pairs}, {"failed", run.failed}};
      j["baseline"] = run.baseline ? json(o.baseline) : json(nullptr);
      j["regressions"] = run.baseline ? json(run.regressions.size()) : json(nullptr);
      j["nccl"] = run.nccl_asked ? NcclJson(run) : json(nullptr);
      report << JsonText(j, 2) << "\n";
      return code;
    }
    PrintText(o, run, report);
    return code;
  };
  po.on_stuck = [&](std::vector<PairMeasurement> measured) {
    int code = finish(measured, true);
    out.flush();
    err.flush();
    std::fflush(nullptr);
    _exit(code == 2 ? 2 : 1);  // a stuck call fails the node
  };
  return finish(MeasurePairs(cuda, po, progress), false);
}

}  // namespace p2ptrace::cli
