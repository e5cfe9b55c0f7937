#include "tools/doctor_test.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <sstream>

#include "core/causes.h"
#include "core/pair_verdict.h"
#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "tools/json_text.h"
#include "tools/pair_test.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

struct Judged {
  PairMeasurement m;  // src/dst: the node's GPU indices
  PairVerdict v;
};

const PairPrediction* PredictionOf(const Prediction& pred, int a, int b) {
  for (const PairPrediction& p : pred.pairs)
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return &p;
  return nullptr;
}

std::string Latency(double us) { return us < 0 ? "-" : fmt::format("{:.2g}", us); }
std::string Figure(double gbps) { return gbps < 0 ? "-" : gbps >= 10 ? fmt::format("{:.0f}", gbps) : fmt::format("{:.1f}", gbps); }

json PairJson(const Judged& j) {
  json causes = json::array();
  for (const CauseHit& c : j.v.causes) {
    const CauseInfo* info = FindCause(c.id);
    causes.push_back({{"id", c.id}, {"role", c.role}, {"evidence", c.evidence}, {"fix", info ? std::string(info->fix) : ""}});
  }
  auto num = [](double v) { return v < 0 ? json(nullptr) : json(v); };
  return {{"src", {{"gpu", j.m.src}}},
          {"dst", {{"gpu", j.m.dst}}},
          {"transport", TransportName(j.v.transport)},
          {"can_access", j.m.can_access},
          {"gbps", num(j.m.gbps)},
          {"bidir_gbps", num(j.m.bidir_gbps)},
          {"staged_gbps", num(j.m.staged_gbps)},
          {"latency_us", num(j.m.latency_us)},
          {"expected_gbps", j.v.expected.low > 0 ? json({{"low", j.v.expected.low}, {"high", j.v.expected.high},
                                                         {"basis", j.v.expected.basis}})
                                                 : json(nullptr)},
          {"verdict", j.v.verdict},
          {"reason", j.v.reason},
          {"causes", causes},
          {"data_ok", j.m.data_ok},
          {"timed_out", j.m.timed_out},
          {"error", j.m.error}};
}

}  // namespace

int RunDoctorTest(const DoctorOptions& o, std::ostream& out, std::ostream& err, bool err_is_tty) {
  Prediction pred;
  NodeProbe probe = ProbeNode(o, &pred);
  // The test's copies are CUDA's: the driver's answer and the links matter, NCCL's rules do not.
  pred = PredictNode(probe, /*cuda_copies=*/true);
  CudaCopies cuda;
  std::string why;
  if (!cuda.Load(&why)) {
    err << "p2ptrace doctor --test: nothing tested: " << why << "\n";
    return 2;
  }
  // The node's GPUs by index, tested through their CUDA ordinals in this process.
  std::map<int, int> cuda_of;  // node index -> CUDA ordinal
  for (const ProbedGpu& g : probe.gpus)
    if (g.cuda >= 0 && (o.gpus.empty() || std::count(o.gpus.begin(), o.gpus.end(), g.index)))
      cuda_of[g.index] = g.cuda;
  for (int g : o.gpus)
    if (!cuda_of.count(g)) {
      err << "p2ptrace doctor --test: --gpus names GPU" << g << ", which this process cannot use (not on this node, "
          << "or hidden by CUDA_VISIBLE_DEVICES)\n";
      return 2;
    }
  std::string host = probe.hostname.empty() ? "this machine" : probe.hostname;
  if (cuda_of.size() < 2) {
    out << fmt::format("p2ptrace doctor --test: {}: {} GPU{}, no pairs to test\n", host, cuda_of.size(),
                       cuda_of.size() == 1 ? "" : "s");
    return cuda_of.empty() ? 2 : 0;
  }
  PairTestOptions po;
  po.copy_limit_seconds = o.copy_limit_seconds;
  for (const auto& [index, ordinal] : cuda_of) po.gpus.push_back({ordinal, index});
  auto progress = [&](size_t done, size_t total) {
    if (err_is_tty) err << fmt::format("\rp2ptrace doctor --test: {}/{} pairs", done, total) << (done == total ? "\n" : "") << std::flush;
  };
  std::vector<Judged> judged;
  for (const PairMeasurement& m : MeasurePairs(cuda, po, progress)) {
    const ProbedGpu* a = nullptr;
    const ProbedGpu* b = nullptr;
    for (const ProbedGpu& g : probe.gpus) {
      if (g.index == m.src) a = &g;
      if (g.index == m.dst) b = &g;
    }
    // The generation the links are built for: a link trained below it is judged by what it should give.
    auto built = [](const ProbedGpu* g) { return g->pcie.max_gen > 0 ? g->pcie.max_gen : g->pcie.gen; };
    int gen = a && b ? std::min(built(a), built(b)) : 0;
    judged.push_back({m, JudgePair(m, PredictionOf(pred, m.src, m.dst), gen)});
  }
  size_t failed = std::count_if(judged.begin(), judged.end(), [](const Judged& j) { return j.v.verdict == "fail"; });
  int code = failed ? 1 : 0;
  if (o.json) {
    json pairs = json::array();
    for (const Judged& j : judged) pairs.push_back(PairJson(j));
    out << JsonText({{"version", 1}, {"host", probe.hostname}, {"pairs", pairs}, {"failed", failed}}, 2) << "\n";
    return code;
  }
  // The matrix: rows the source, columns the destination, GB/s and a verdict mark.
  std::ostringstream t;
  t << fmt::format("p2ptrace doctor --test: {}, {} GPU pairs, {} failed\n\n", host, judged.size(), failed);
  t << "GB/s one way with peer access (row: source, column: destination; ! fail, ~ expected, x no peer access, "
       "? not tested)\n      ";
  for (const auto& [g, c] : cuda_of) t << fmt::format("{:>9}", "GPU" + std::to_string(g));
  t << "\n";
  for (const auto& [s, cs] : cuda_of) {
    t << fmt::format("{:<6}", "GPU" + std::to_string(s));
    for (const auto& [d, cd] : cuda_of) {
      if (s == d) {
        t << fmt::format("{:>9}", "X");
        continue;
      }
      const Judged& j = *std::find_if(judged.begin(), judged.end(), [&](const Judged& x) { return x.m.src == s && x.m.dst == d; });
      std::string mark = j.v.verdict == "fail" ? "!" : j.v.verdict == "expected" ? "~" : "";
      std::string cell = !j.m.tested ? "?" : j.m.can_access ? Figure(j.m.gbps) : "x";
      t << fmt::format("{:>9}", cell + mark);
    }
    t << "\n";
  }
  // Pairs that did not pass, those with the same verdict, reason and causes together, each cause
  // with the evidence of every pair in the group (once each).
  struct Group {
    std::string head;  // "fail — reason"
    std::vector<std::string> ids, pairs;
    std::vector<std::vector<std::string>> evidence;  // per id
  };
  std::vector<Group> groups;
  for (const Judged& j : judged) {
    if (j.v.verdict == "pass") continue;
    Group key{fmt::format("{} — {}", j.v.verdict, j.v.reason), {}, {}, {}};
    for (const CauseHit& c : j.v.causes) key.ids.push_back(c.id);
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.head == key.head && x.ids == key.ids; });
    if (g == groups.end()) {
      key.evidence.resize(key.ids.size());
      groups.push_back(key);
      g = groups.end() - 1;
    }
    std::string pair = fmt::format("GPU{} -> GPU{}", j.m.src, j.m.dst);
    if (j.m.tested)
      pair += fmt::format(" (both ways {} GB/s, staged {} GB/s, small copy {} us)", Figure(j.m.bidir_gbps),
                          Figure(j.m.staged_gbps), Latency(j.m.latency_us));
    g->pairs.push_back(pair);
    for (size_t i = 0; i < j.v.causes.size(); ++i)
      for (const std::string& e : j.v.causes[i].evidence)
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
  out << Printable(t.str());
  return code;
}

}  // namespace p2ptrace::cli
