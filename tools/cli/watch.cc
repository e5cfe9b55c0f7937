#include "tools/cli/watch.h"

#include <chrono>
#include <iostream>
#include <map>
#include <thread>

#include "CLI/CLI.hpp"
#include "core/printable.h"
#include "fmt/format.h"
#include "tools/cli/commands.h"
#include "tools/formats/json.h"
#include "tools/formats/text.h"
#include "tools/report/load.h"

namespace p2ptrace::cli {

int RunWatch(const std::string& dir, const WatchOptions& options, std::ostream& out, std::ostream& err) {
  using Clock = std::chrono::steady_clock;
  // Per communicator: the most operations any member has called, and when the watch saw it change.
  std::map<std::string, std::pair<uint64_t, Clock::time_point>> progress;
  std::string last_finding, last_slow;
  for (int look = 0;; ++look) {
    StreamOptions so;
    so.stall_seconds = options.stall_seconds;
    std::optional<Report> rep = LoadReportOrSay(dir, "p2ptrace", err, false, so);
    Clock::time_point now = Clock::now();
    if (!rep) {
      if (options.once || look == 0) return 2;
    } else {
      const StoppedFinding& st = rep->stopped;
      size_t exited = 0, beating = 0;
      for (const StoppedProcess& p : st.processes) {
        exited += p.exited;
        beating += p.beating;
      }
      std::vector<std::string> idle;  // communicators without progress for --stall
      for (const StoppedComm& c : st.comms) {
        uint64_t top = 0;
        for (const StoppedMember& m : c.members) top = std::max(top, m.collectives + m.p2p);
        auto [it, fresh] = progress.try_emplace(c.id, top, now);
        if (!fresh && it->second.first != top) it->second = {top, now};
        double still = std::chrono::duration<double>(now - it->second.second).count();
        if (!fresh && still >= options.stall_seconds && exited < st.processes.size())
          idle.push_back(fmt::format("{} ({:.0f} s)", c.id, still));
      }
      bool done = !st.processes.empty() && exited == st.processes.size();
      if (options.json) {
        nlohmann::json j = {{"look", look}, {"processes", st.processes.size()}, {"exited", exited},
                            {"beating", beating}, {"no_progress", idle}, {"stopped", StoppedJson(st)},
                            {"slow_rank", SlowRankJson(rep->slow_rank)}};
        out << j.dump() << "\n";
      } else {
        // Through Printable: the directory, host names and log text come from files.
        out << Printable(fmt::format("watch {}: {} process{}, {} beating, {} exited; {} communicator{}{}", dir,
                           st.processes.size(), st.processes.size() == 1 ? "" : "es", beating, exited,
                           st.comms.size(), st.comms.size() == 1 ? "" : "s",
                           idle.empty() ? "" : fmt::format(", no progress: {}", fmt::join(idle, ", "))))
            << "\n";
        // The finding when something stopped or a communicator went quiet, once per change.
        std::string finding = StoppedText(st);
        if (!finding.empty() && (!idle.empty() || st.first_process >= 0) && finding != last_finding)
          out << Printable(finding);
        if (!finding.empty() && (!idle.empty() || st.first_process >= 0)) last_finding = finding;
        // A job that runs slow: its late rank or slow hop, once per change of who or which pair.
        const SlowRankFinding& sr = rep->slow_rank;
        std::string slow = sr.present ? fmt::format("{} {} {} {}", sr.kind, sr.comm, sr.rank, sr.pair) : "";
        if (slow != last_slow && sr.present) out << Printable("SLOW: " + sr.kind + ": " + sr.verdict) << "\n";
        last_slow = slow;
      }
      out.flush();
      if (done) return 0;
    }
    if (options.once) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(options.interval_seconds));
  }
}

namespace {

class WatchCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("DIR", path_, "the job's trace directory (P2PTRACE_DIR)")->required();
    c.add_option("--interval", options_.interval_seconds, "seconds between looks (default 5)")
        ->check(CLI::Range(0.1, 3600.0));
    c.add_option("--stall", options_.stall_seconds, "seconds without progress before a communicator is "
                 "called stuck (default 60)")->check(CLI::Range(0.0, 604800.0));
    c.add_flag("--once", options_.once, "look once and exit");
    c.add_flag("--json", options_.json, "one JSON object per look");
  }
  int Run() override { return RunWatch(path_, options_, std::cout, std::cerr); }

 private:
  std::string path_;
  WatchOptions options_;
};

}  // namespace

std::unique_ptr<Command> MakeWatchCommand() { return std::make_unique<WatchCommand>(); }

}  // namespace p2ptrace::cli
