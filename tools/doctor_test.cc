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
  std::map<int, int> index_of;
  PairTestOptions po;
  po.copy_limit_seconds = o.copy_limit_seconds;
  for (const auto& [index, ordinal] : cuda_of) po.cuda_devices.push_back(ordinal), index_of[ordinal] = index;
  auto progress = [&](size_t done, size_t total) {
    if (err_is_tty) err << fmt::format("\rp2ptrace doctor --test: {}/{} pairs", done, total) << (done == total ? "\n" : "") << std::flush;
  };
  std::vector<Judged> judged;
  for (PairMeasurement& m : MeasurePairs(cuda, po, progress)) {
    m.src = index_of[m.src], m.dst = index_of[m.dst];
    const ProbedGpu* a = nullptr;
    const ProbedGpu* b = nullptr;
    for (const ProbedGpu& g : probe.gpus) {
      if (g.index == m.src) a = &g;
      if (g.index == m.dst) b = &g;
    }
    int gen = a && b ? std::min(a->pcie.gen, b->pcie.gen) : 0;
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
  t << "GB/s with peer access (row: source, column: destination; ! fail, ~ expected, x no peer access)\n      ";
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
      t << fmt::format("{:>9}", (j.m.can_access ? Figure(j.m.gbps) : "x") + mark);
    }
    t << "\n";
  }
  // Pairs that did not pass, those with the same verdict, reason and causes together.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // text, pairs
  for (const Judged& j : judged) {
    if (j.v.verdict == "pass") continue;
    std::string text = fmt::format("{} — {}\n", j.v.verdict, j.v.reason);
    for (const CauseHit& c : j.v.causes) {
      const CauseInfo* info = FindCause(c.id);
      text += fmt::format("  [{}] {}{}\n", c.id, c.evidence.empty() ? "" : c.evidence.front(),
                          info ? "\n    fix: " + std::string(info->fix) : "");
    }
    std::string pair = fmt::format("GPU{} -> GPU{} (staged {} GB/s, small copy {} us)", j.m.src, j.m.dst,
                                   Figure(j.m.staged_gbps), Latency(j.m.latency_us));
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == text; });
    if (g == groups.end()) groups.push_back({text, {pair}});
    else g->second.push_back(pair);
  }
  for (const auto& [text, pairs] : groups) {
    t << "\n" << fmt::format("{} pair{}: {}\n", pairs.size(), pairs.size() == 1 ? "" : "s", text.substr(0, text.find('\n')));
    constexpr size_t kShown = 6;
    for (size_t i = 0; i < std::min(kShown, pairs.size()); ++i) t << "  " << pairs[i] << "\n";
    if (pairs.size() > kShown) t << fmt::format("  … {} more (--json has each)\n", pairs.size() - kShown);
    t << text.substr(text.find('\n') + 1);
  }
  out << Printable(t.str());
  return code;
}

}  // namespace p2ptrace::cli
