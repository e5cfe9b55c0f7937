// How fast `report` folds traces: events per second on one core, for big synthetic traces
// (tools/synth: each event is a timed copy or NCCL call, i.e. two records). Two views: the whole
// streaming path (read each file, fold it, drop it) and the fold alone over traces already read.
// The aim is >= 10 M events/s per core; the numbers are reported, never asserted.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "tools/cli/synth.h"
#include "tools/report/builder.h"
#include "tools/report/load.h"
#include "tools/report/report.h"
#include "tools/report/traces.h"

namespace {

using namespace p2ptrace::cli;

// One synthetic job per shape, written once per process run.
const std::string& Job(int ranks, int events) {
  static std::map<std::pair<int, int>, std::string> jobs;
  std::string& dir = jobs[{ranks, events}];
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() /
           ("p2ptrace-bench-" + std::to_string(getpid()) + "-" + std::to_string(ranks) + "x" + std::to_string(events)))
              .string();
    std::filesystem::remove_all(dir);
    SynthOptions o;
    o.out = dir;
    o.ranks = ranks;
    o.events = events;
    if (absl::Status s = WriteSyntheticJob(o); !s.ok()) {
      fprintf(stderr, "synth: %s\n", std::string(s.message()).c_str());
      std::abort();
    }
  }
  return dir;
}

// The whole `report` path: list, read each file, fold it, parse the NCCL logs, finish.
void BM_StreamReport(benchmark::State& state) {
  int ranks = static_cast<int>(state.range(0)), events = static_cast<int>(state.range(1));
  const std::string& dir = Job(ranks, events);
  for (auto _ : state) {
    absl::StatusOr<Report> rep = StreamReport(dir);
    benchmark::DoNotOptimize(rep->pairs.data());
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(ranks) * events,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_StreamReport)->Args({8, 200000})->Args({512, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();

// The fold alone: ReportBuilder over traces already in memory (what the reader costs is above).
void BM_FoldTraces(benchmark::State& state) {
  int ranks = static_cast<int>(state.range(0)), events = static_cast<int>(state.range(1));
  absl::StatusOr<LoadedTraces> loaded = LoadTraces(Job(ranks, events));
  for (auto _ : state) {
    ReportBuilder b("bench");
    for (const p2ptrace::Trace& t : loaded->traces) b.AddTrace(t);
    Report rep = b.Finish();
    benchmark::DoNotOptimize(rep.pairs.data());
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(ranks) * events,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FoldTraces)->Args({8, 200000})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // The jobs written for this run.
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    if (e.path().filename().string().rfind("p2ptrace-bench-" + std::to_string(getpid()) + "-", 0) == 0)
      std::filesystem::remove_all(e.path());
  return 0;
}
