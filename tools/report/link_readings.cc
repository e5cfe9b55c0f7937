#include "tools/report/link_readings.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "core/causes.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"

namespace p2ptrace::cli {
namespace {

using ChangeKey = std::tuple<bool, int, int, std::string, int, std::string>;
ChangeKey KeyOf(const LinkChange& c) {
  return {c.nvlink, c.gpu, c.link, c.bus_id, static_cast<int>(c.kind), c.counter};
}

// One change per link and counter over the host's processes: an error counter's widest span (the
// earliest reading before, the latest after), a training's first evidence.
std::vector<LinkChange> Merge(const std::vector<std::vector<LinkChange>>& per_process) {
  std::map<ChangeKey, LinkChange> merged;
  for (const auto& changes : per_process)
    for (const LinkChange& c : changes) {
      auto [it, fresh] = merged.emplace(KeyOf(c), c);
      if (fresh || c.kind != LinkChange::Kind::kErrors) {
        if (!fresh) it->second.narrowed_between |= c.narrowed_between;
        continue;
      }
      it->second.before = std::min(it->second.before, c.before);
      it->second.after = std::max(it->second.after, c.after);
    }
  std::vector<LinkChange> out;
  for (auto& [k, c] : merged) out.push_back(std::move(c));
  return out;
}

std::string GpuPair(const PairEntry& e) {
  return fmt::format("{} -> {}{}", GpuName(e.src), e.dst.host == e.src.host ? "" : e.dst.host + " ", GpuName(e.dst));
}

}  // namespace

void LinkReadings::AddTrace(const Trace& t, std::vector<std::string>* partial) {
  std::optional<LinkHealth> start, exit;
  for (const auto& [kind, text] : t.text_blocks) {
    if (kind != P2PTRACE_TEXT_LINK_HEALTH) continue;
    Expected<LinkHealth> h = ParseLinkHealth(text);
    if (!h.ok()) {
      partial->push_back(fmt::format("{}: link reading unreadable ({})", t.path, h.error().message));
      continue;
    }
    (h->when == "exit" ? exit : start) = std::move(*h);
  }
  if (!start) return;  // an exit reading alone has nothing to compare with
  std::string host = start->host.empty() ? t.Host() : start->host;
  hosts_[host].push_back({std::move(*start), std::move(exit)});
}

void LinkReadings::Charge(Report& rep) const {
  for (const auto& [host, processes] : hosts_) {
    Report::HostLinks hl;
    hl.host = host;
    std::vector<std::vector<LinkChange>> per_process;
    std::set<std::string> notes;
    for (const Process& p : processes) {
      ++hl.readings;
      if (p.exit) ++hl.exit_readings;
      for (const LinkHealth* r : {&p.start, p.exit ? &*p.exit : nullptr})
        if (r != nullptr) {
          hl.read_ms = std::max(hl.read_ms, r->read_ms);
          notes.insert(r->notes.begin(), r->notes.end());
        }
      per_process.push_back(CompareLinkHealth(p.start, p.exit ? *p.exit : p.start));
    }
    const LinkHealth& reading = processes.front().start;  // the links' places (remote ends, GPUs below)
    hl.unsupported = UnsupportedCounters(reading);
    hl.notes.assign(notes.begin(), notes.end());
    if (hl.exit_readings < hl.readings)
      hl.notes.push_back(fmt::format("{} of {} processes left no exit reading (they did not exit normally): a counter that "
                                     "moved in their time only is not seen",
                                     hl.readings - hl.exit_readings, hl.readings));
    for (LinkChange& c : Merge(per_process)) {
      Report::HostLinks::Change ch{std::move(c), {}};
      for (PairEntry& e : rep.pairs) {
        bool src_here = e.src.host == host, dst_here = e.dst.host == host;
        std::optional<LinkRoute> route = RouteOf(e.transport, e.link);
        if ((!src_here && !dst_here) || !route) continue;
        // A pair with a GPU on another node crosses only this side's links.
        int a = src_here ? e.src.gpu : e.dst.gpu;
        int b = src_here && dst_here ? e.dst.gpu : -1;
        if (a < 0 || !PairCrosses(ch.change, a, b, *route, reading)) continue;
        ch.pairs.push_back(GpuPair(e));
        bool errors = ch.change.kind == LinkChange::Kind::kErrors;
        e.link_changes.push_back({host, ch.change.Where(), ch.change.What(), errors ? "errors" : "downtrained"});
        double gbps = e.RatedGbps();
        if (gbps <= 0 || e.expected_gbps_low <= 0 || gbps >= e.expected_gbps_low) continue;
        // A GPU's own narrow link the job-start probe already named (pcie-downtrained) is not said twice.
        bool gpu_link_named = std::any_of(e.causes.begin(), e.causes.end(), [](const Cause& x) { return x.id == "pcie-downtrained"; });
        if (!errors && gpu_link_named && !ch.change.nvlink && ch.change.gpu >= 0) continue;
        std::string id = errors ? "link-errors" : "link-downtrained";
        auto cause = std::find_if(e.causes.begin(), e.causes.end(), [&](const Cause& x) { return x.id == id; });
        if (cause == e.causes.end()) {
          const CauseInfo* info = FindCause(id);
          Cause fresh;
          fresh.id = id;
          fresh.fix = LinkChangeFix(ch.change);
          if (info != nullptr) fresh.confirm = std::string(info->confirm);
          std::string range = e.expected_gbps_high > e.expected_gbps_low
                                  ? fmt::format("{:.0f}-{:.0f}", e.expected_gbps_low, e.expected_gbps_high)
                                  : fmt::format("{:.0f}", e.expected_gbps_low);
          fresh.evidence.push_back(fmt::format("measured {:.1f} GB/s ({}), below the {} GB/s its {} class gives", gbps,
                                               e.RateBasis(), range, TransportName(e.transport)));
          e.causes.push_back(std::move(fresh));
          cause = e.causes.end() - 1;
        }
        cause->evidence.push_back(fmt::format("{} {}: {}{}", host, ch.change.Where(), ch.change.What(),
                                              errors ? (hl.exit_readings ? " between the job's start and exit readings" : "") : ""));
      }
      hl.changes.push_back(std::move(ch));
    }
    rep.links.push_back(std::move(hl));
  }
}

}  // namespace p2ptrace::cli
