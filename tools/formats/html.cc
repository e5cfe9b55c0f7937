#include "tools/formats/html.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "core/printable.h"
#include "core/vocabulary.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "p2ptrace/vocabulary.h"
#include "tools/common/json_text.h"
#include "tools/formats/json.h"
#include "tools/formats/text.h"

namespace p2ptrace::cli {
namespace {

using nlohmann::json;

// Text from files shown as it is on a terminal (core/printable: no control character, valid
// UTF-8), then HTML-escaped.
std::string Escape(std::string_view raw) {
  std::string s = Printable(raw), out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// JSON inside <script>: every '<' as \u003c (the same string to JSON.parse). "</script" would end
// the element early, and "<!--" followed by "<script" makes the parser skip past the real end tag.
std::string ScriptJson(const json& j) {
  std::string s = JsonText(j), out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

std::string PairLabel(const PairEntry& e) {
  return e.src.host == e.dst.host ? fmt::format("{} {} → {}", e.src.host, GpuName(e.src), GpuName(e.dst))
                                  : fmt::format("{} {} → {} {}", e.src.host, GpuName(e.src), e.dst.host, GpuName(e.dst));
}

std::string Gb(double v) { return v > 0 ? fmt::format("{:.1f} GB/s", v) : "not timed"; }
// A pair's rate as the text report says it: how it was measured, or why there is none.
std::string PairRate(const PairEntry& e) {
  if (e.Gbps() <= 0 && e.CollGbps() > 0)  // timed only inside ring collectives, by NCCL's kernel timers
    return fmt::format("{:.1f} GB/s in collectives (NCCL kernel timers){}", e.CollGbps(),
                       e.bounded_by.empty() ? "" : ", bounded by " + e.bounded_by);
  if (e.Gbps() <= 0 && !e.RateNote().empty()) return e.RateNote();
  if (e.Gbps() <= 0) return e.shared_calls > 0 ? "no per-pair rate (timed only together with other peers: a group, or an alltoall, gather or scatter)" : "not timed";
  std::string rate = e.Gbps() >= 0.1 ? fmt::format("{:.1f} GB/s", e.Gbps()) : fmt::format("{:.2g} GB/s", e.Gbps());
  return e.RateBasis() == "own events" ? rate : rate + " (" + e.RateBasis() + ")";
}

// "0-7, 9, 12-15"; "?" for none.
std::string RankList(const std::set<int>& ranks) {
  return ranks.empty() ? std::string("?") : RankRanges(std::vector<int>(ranks.begin(), ranks.end()));
}

constexpr const char* kStyle = R"css(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d232a;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#555}.note{color:#8a5300}
table{border-collapse:collapse}td,th{padding:3px 8px;text-align:left;vertical-align:top}
table.list tr:nth-child(even){background:#f6f7f9}
table.matrix td,table.matrix th{width:46px;height:30px;text-align:center;padding:0;font:12px monospace}
table.matrix td.cell{cursor:pointer;border:2px solid #fff}
table.matrix td.cell:hover,table.matrix td.selected{border-color:#1d232a}
td.self{background:#eee;color:#999}td.none{color:#bbb}
.t-nvlink{background:#1a9850;fill:#1a9850;color:#fff}.t-pcie_p2p,.t-p2p{background:#91cf60;fill:#91cf60}
.t-p2p_indirect{background:#d9ef8b;fill:#d9ef8b}.t-nvls,.t-collnet{background:#66bd63;fill:#66bd63}
.t-net_gdr{background:#a6d96a;fill:#a6d96a}.t-net_ib{background:#fee08b;fill:#fee08b}
.t-shm,.t-host_staged{background:#fc8d59;fill:#fc8d59}.t-net_socket{background:#d73027;fill:#d73027;color:#fff}
.t-unknown{background:#ccc;fill:#ccc}svg text{fill:#1d232a}
td.fallback{outline:3px solid #d73027;outline-offset:-5px}
td.multi::after{content:"*"}
#details{border:1px solid #ccc;border-radius:6px;padding:8px 12px;min-height:48px;background:#fafbfc;max-width:900px}
#call-sites code{font:12px monospace}#call-sites details{color:#555}#call-sites tr.staged td:first-child{color:#d73027}
.cause{margin:4px 0 8px}.cause code{background:#eef;padding:0 4px}.fix{color:#0b5394}
.legend span{display:inline-block;padding:1px 6px;margin:2px;border-radius:3px;font:12px monospace}
svg text{font:11px system-ui,sans-serif}
)css";

// Click or hover on a cell: the pair's transports, GB/s and causes in the details panel.
constexpr const char* kScript = R"js(
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var panel = document.getElementById('details');
  function text(tag, s, cls) { var e = document.createElement(tag); e.textContent = s; if (cls) e.className = cls; return e; }
  function show(ids) {
    panel.textContent = '';
    ids.forEach(function (i) {
      var p = data.pairs[i];
      panel.appendChild(text('h3', p.label + ' (' + p.source + ')'));
      var line = p.transport + (p.fallback ? ' instead of ' + p.expected : '') +
                 (p.nccl_transports.length ? ' — NCCL: ' + p.nccl_transports.join(', ') : '') +
                 (p.net ? ' — network: ' + p.net : '') +
                 ' — ' + p.rate + (p.expected_range ? ' (expected ' + p.expected_range + ')' : '') +
                 (p.lost ? ' — lost ' + p.lost : '');
      panel.appendChild(text('div', line));
      p.links.forEach(function (l) { panel.appendChild(text('div', 'link ' + l, 'cause')); });
      p.causes.forEach(function (c) {
        var d = text('div', '', 'cause');
        d.appendChild(text('code', c.id));
        d.appendChild(document.createTextNode(' ' + c.evidence.join('; ')));
        if (c.fix) d.appendChild(text('div', 'fix: ' + c.fix, 'fix'));
        panel.appendChild(d);
      });
    });
  }
  var selected = null;
  document.querySelectorAll('td.cell').forEach(function (td) {
    td.addEventListener('click', function () {
      if (selected) selected.classList.remove('selected');
      selected = td;
      td.classList.add('selected');
      show(td.dataset.pairs.split(',').map(Number));
    });
    td.addEventListener('mouseenter', function () { if (!selected) show(td.dataset.pairs.split(',').map(Number)); });
  });
  document.body.dataset.ready = '1';
})();
)js";

// A horizontal bar per pair: measured GB/s, with the class's expected range drawn behind it.
std::string BandwidthChart(const Report& rep, const std::vector<size_t>& order) {
  constexpr size_t kBars = 120;
  constexpr int kLabel = 330, kWidth = 520, kRow = 16;
  double max = 1;
  size_t n = std::min(order.size(), kBars);
  for (size_t k = 0; k < n; ++k) {
    const PairEntry& e = rep.pairs[order[k]];
    max = std::max({max, e.RatedGbps(), e.expected_gbps_high});
  }
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" role="img" aria-label="GB/s per pair">)",
                                kLabel + kWidth + 90, static_cast<int>(n) * kRow + 24);
  auto x = [&](double v) { return kLabel + v / max * kWidth; };
  for (size_t k = 0; k < n; ++k) {
    const PairEntry& e = rep.pairs[order[k]];
    int y = static_cast<int>(k) * kRow;
    std::string cls(TransportName(e.transport));
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{} · {}</text>)", kLabel - 6, y + 12,
                       Escape(PairLabel(e)), Escape(cls));
    if (e.expected_gbps_high > 0)
      svg += fmt::format(R"(<rect class="expected" x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="#e3e8ef"/>)",
                         x(e.expected_gbps_low), y + 2, std::max(1.0, x(e.expected_gbps_high) - x(e.expected_gbps_low)),
                         kRow - 4);
    if (e.RatedGbps() > 0)
      svg += fmt::format(R"(<rect class="bar t-{}" x="{}" y="{}" width="{:.1f}" height="{}"><title>{}: {}</title></rect>)",
                         cls, kLabel, y + 4, std::max(1.0, x(e.RatedGbps()) - kLabel), kRow - 8, Escape(PairLabel(e)),
                         Gb(e.RatedGbps()));
    svg += fmt::format(R"(<text x="{:.1f}" y="{}">{}</text>)", x(std::max(e.RatedGbps(), e.expected_gbps_high)) + 4, y + 12,
                       Gb(e.RatedGbps()));
  }
  int axis = static_cast<int>(n) * kRow + 14;
  for (int i = 0; i <= 4; ++i)
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{:.0f}</text>)", x(max * i / 4), axis, max * i / 4);
  svg += "</svg>";
  if (order.size() > kBars)
    svg += fmt::format("<p class=\"meta\">the {} slowest against their expectation of {} pairs; the data block holds all</p>",
                       kBars, order.size());
  return svg;
}

// When each process ran and how it ended, hosts as lanes.
std::string TimelineChart(const Report& rep) {
  constexpr size_t kLanes = 64;
  constexpr int kLabel = 160, kWidth = 700, kRow = 14;
  uint64_t t0 = UINT64_MAX;
  double end = 0;
  for (const ProcessInfo& p : rep.processes) t0 = std::min(t0, p.start_realtime_ns);
  std::vector<const ProcessInfo*> procs;
  for (const ProcessInfo& p : rep.processes) {
    procs.push_back(&p);
    end = std::max(end, static_cast<double>(p.start_realtime_ns - t0) * 1e-9 + std::max(p.seconds, 0.0));
  }
  std::sort(procs.begin(), procs.end(), [](const ProcessInfo* a, const ProcessInfo* b) {
    return std::tie(a->host, a->rank, a->pid) < std::tie(b->host, b->rank, b->pid);
  });
  size_t n = std::min(procs.size(), kLanes);
  if (end <= 0) end = 1;
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" role="img" aria-label="timeline">)",
                                kLabel + kWidth + 20, static_cast<int>(n) * kRow + 24);
  for (size_t k = 0; k < n; ++k) {
    const ProcessInfo& p = *procs[k];
    double start = static_cast<double>(p.start_realtime_ns - t0) * 1e-9;
    int y = static_cast<int>(k) * kRow;
    const char* fill = p.state == "exited" ? "#1a9850" : "#d73027";
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{} rank {}</text>)", kLabel - 6, y + 11, Escape(p.host), p.rank);
    svg += fmt::format(R"(<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}"><title>{} rank {} pid {}: {}, {}</title></rect>)",
                       kLabel + start / end * kWidth, y + 2, std::max(1.0, std::max(p.seconds, 0.0) / end * kWidth),
                       kRow - 4, fill, Escape(p.host), p.rank, p.pid, p.seconds >= 0 ? fmt::format("{:.3f} s", p.seconds) : "?",
                       Escape(p.state));
  }
  svg += fmt::format(R"(<text x="{}" y="{}">0 s</text><text x="{}" y="{}" text-anchor="end">{:.3f} s</text></svg>)",
                     kLabel, static_cast<int>(n) * kRow + 16, kLabel + kWidth, static_cast<int>(n) * kRow + 16, end);
  if (procs.size() > kLanes) svg += fmt::format("<p class=\"meta\">the first {} of {} processes</p>", kLanes, procs.size());
  return svg;
}

}  // namespace

std::string RenderHtml(const Report& rep) {
  std::set<std::string> hosts;
  std::set<int> ranks;
  for (const ProcessInfo& p : rep.processes) {
    hosts.insert(p.host);
    if (p.rank >= 0) ranks.insert(p.rank);
  }
  json job = JobJson(rep);
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                    // No network at all: nothing may load from anywhere but this file.
                    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
                    "script-src 'unsafe-inline'; img-src data:\">\n";
  out += fmt::format("<title>p2ptrace report: {}</title>\n<style>{}</style></head><body>\n", Escape(rep.path), kStyle);
  out += fmt::format("<h1>p2ptrace report</h1><div class=\"meta\">{} · {} rank{} · {} process{} · {} host{} · CUDA "
                     "runtime {}, driver {} · NCCL {}</div>\n",
                     Escape(rep.path), ranks.size(), ranks.size() == 1 ? "" : "s", rep.processes.size(),
                     rep.processes.size() == 1 ? "" : "es", hosts.size(), hosts.size() == 1 ? "" : "s",
                     job["cuda_runtime"].get<std::string>(), job["cuda_driver"].get<std::string>(),
                     NcclVersionGroups(rep).empty()
                         ? std::string("not seen")
                         : Escape(fmt::format("{}", fmt::join(NcclVersionGroups(rep), ", "))));  // as `report` says it
  std::map<std::pair<std::string, std::string>, size_t> modes;
  for (const ProcessInfo& p : rep.processes) ++modes[{p.capture_mode, p.trust}];
  out += "<ul class=\"capture\">";
  for (const auto& [m, n] : modes)
    out += fmt::format("<li>{} process{}: {} — <i>{}</i></li>", n, n == 1 ? "" : "es", Escape(m.first), Escape(m.second));
  out += "</ul>\n";
  if (!rep.problems.empty())
    out += fmt::format("<p class=\"note\">{} file{} skipped (p2ptrace names each on stderr)</p>\n", rep.problems.size(),
                       rep.problems.size() == 1 ? "" : "s");

  // A hung or dead job: who stopped first, what it did, who waits (the report's STOPPED lines).
  if (rep.stopped.present) {
    const StoppedFinding& st = rep.stopped;
    out += "<h2>Stopped</h2>\n<p class=\"note\"><b>" + Escape(st.verdict) + "</b></p>\n<ul>";
    if (st.first_process >= 0) out += "<li>it was doing: " + Escape(st.first_doing) + "</li>";
    for (const std::string& p : st.pair_notes) out += "<li>pair: " + Escape(p) + "</li>";
    size_t shown = 0;
    for (const StoppedComm& c : st.comms)
      if ((!c.waits.empty() || !c.mismatches.empty()) && shown++ < 8) {
        out += fmt::format("<li>communicator {} ({} ranks): {}", Escape(c.id), c.nranks, Escape(c.waits));
        for (const std::string& m : c.mismatches) out += "<br>mismatch " + Escape(m);
        out += "</li>";
      }
    for (const std::string& n : st.notes) out += "<li><i>" + Escape(n) + "</i></li>";
    out += "</ul>\n";
  }

  // A job that runs slow: the rank every step waits for, or the hop that bounds its rings.
  if (rep.slow_rank.present) {
    const SlowRankFinding& sr = rep.slow_rank;
    out += "<h2>Slow rank</h2>\n<p class=\"note\"><b>" + Escape(sr.kind + ": " + sr.verdict) + "</b></p>\n<ul>";
    for (const std::string& e : sr.evidence) out += "<li>" + Escape(e) + "</li>";
    if (!sr.fix.empty()) out += "<li>fix: " + Escape(sr.fix) + "</li>";
    for (const std::string& n : sr.notes) out += "<li><i>" + Escape(n) + "</i></li>";
    out += "</ul>\n";
  }
  if (!rep.slow_rank.comms.empty()) {
    out += "<h2>Arrivals</h2>\n<table><tr><th>communicator</th><th>ranks</th><th>collectives compared</th>"
           "<th>skew median</th><th>skew p90</th><th>last most often</th><th>clock</th></tr>\n";
    for (const CommArrivals& c : rep.slow_rank.comms) {
      auto top = std::max_element(c.last_by_rank.begin(), c.last_by_rank.end());
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2f} ms</td><td>{:.2f} ms</td><td>rank {} ({} times)</td>"
                         "<td>{}</td></tr>\n",
                         Escape(c.id), c.nranks, c.compared, c.skew_median_ms, c.skew_p90_ms, top - c.last_by_rank.begin(),
                         top == c.last_by_rank.end() ? 0 : *top, Escape(c.clock));
    }
    out += "</table>\n";
  }

  // Pairs for the script: what the details panel shows; each pair's JSON text in turn (a big job's
  // pairs as one JSON tree would take several times the page).
  std::string pairs_data = "{\"pairs\":[";
  for (size_t i = 0; i < rep.pairs.size(); ++i) {
    const PairEntry& e = rep.pairs[i];
    json causes = json::array();
    for (const Cause& c : e.causes) causes.push_back(CauseJson(c));
    json p{{"label", PairLabel(e)}, {"source", e.source}, {"transport", TransportName(e.transport)},
           {"expected", TransportName(e.expected)}, {"fallback", e.fallback}, {"nccl_transports", e.nccl_transports},
           {"rate", PairRate(e)}, {"causes", std::move(causes)}};
    p["expected_range"] = e.expected_gbps_high > 0 ? fmt::format("{:.0f}-{:.0f} GB/s", e.expected_gbps_low, e.expected_gbps_high) : "";
    p["lost"] = e.lost_seconds > 0 ? fmt::format("{:.3g} s", e.lost_seconds) : "";
    p["net"] = e.NetSidesText();
    json links = json::array();
    for (const PairEntry::LinkCharge& l : e.link_changes) links.push_back(l.where + ": " + l.what);
    p["links"] = std::move(links);
    if (i) pairs_data += ',';
    pairs_data += ScriptJson(p);
  }
  pairs_data += "]}";

  // One matrix per distinct host layout; the hosts that share it are listed.
  struct Cell {
    std::vector<size_t> pairs;
    size_t top = 0;  // the pair that moved most bytes
  };
  // A GPU by (the host's index, bus id when the index is unknown), in nvidia-smi's order.
  using Gpu = std::pair<int, std::string>;
  using Grid = std::map<std::pair<Gpu, Gpu>, Cell>;
  std::map<std::string, Grid> grids;
  std::map<std::string, std::map<Gpu, std::string>> gpus;  // -> its name
  auto key = [](const GpuRef& g) { return Gpu{g.gpu, g.gpu >= 0 ? "" : g.bus_id}; };
  for (size_t i = 0; i < rep.pairs.size(); ++i) {
    const PairEntry& e = rep.pairs[i];
    if (e.src.host != e.dst.host) continue;
    Cell& c = grids[e.src.host][{key(e.src), key(e.dst)}];
    if (c.pairs.empty() || e.bytes > rep.pairs[c.top].bytes) c.top = i;
    c.pairs.push_back(i);
    gpus[e.src.host][key(e.src)] = GpuName(e.src);
    gpus[e.src.host][key(e.dst)] = GpuName(e.dst);
  }
  auto signature = [&](const std::string& host) {
    std::string s;
    for (const auto& [g, name] : gpus[host]) s += name + ",";
    s += "|";
    for (const auto& [rc, c] : grids[host]) {
      const PairEntry& top = rep.pairs[c.top];
      s += fmt::format("{},{}:{}:{}:{};", gpus[host][rc.first], gpus[host][rc.second], top.transport, top.fallback,
                       c.pairs.size());
    }
    return s;
  };
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // signature, hosts
  for (const auto& [host, g] : grids) {
    std::string sig = signature(host);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == sig; });
    if (it == groups.end()) groups.push_back({sig, {host}});
    else it->second.push_back(host);
  }
  out += "<h2>GPU pairs by path, per host</h2>\n<p class=\"legend\">";
  for (int t = 1; t < P2PTRACE_TRANSPORT_SAME_DEVICE; ++t)
    out += fmt::format("<span class=\"t-{0}\">{1} {0}</span>", TransportName(t), TransportCell(t));
  out += " · red outline: fallback · *: several paths · row: source GPU, column: destination GPU · click a cell</p>\n";
  constexpr size_t kMatrices = 64;
  for (size_t gi = 0; gi < std::min(groups.size(), kMatrices); ++gi) {
    const auto& names = groups[gi].second;
    const std::string& host = names[0];
    out += fmt::format("<h3>{}{}</h3>\n<table class=\"matrix\" data-host=\"{}\"><tr><th></th>", Escape(host),
                       names.size() > 1 ? fmt::format(" <span class=\"meta\">and {} more host{} with the same matrix</span>",
                                                      names.size() - 1, names.size() == 2 ? "" : "s")
                                        : std::string(),
                       Escape(host));
    for (const auto& [g, name] : gpus[host]) out += fmt::format("<th>{}</th>", Escape(name));
    out += "</tr>\n";
    for (const auto& [row, row_name] : gpus[host]) {
      out += fmt::format("<tr><th>{}</th>", Escape(row_name));
      for (const auto& [col, col_name] : gpus[host]) {
        if (row == col) {
          out += "<td class=\"self\">X</td>";
          continue;
        }
        auto c = grids[host].find({row, col});
        if (c == grids[host].end()) {
          out += "<td class=\"none\">.</td>";
          continue;
        }
        const PairEntry& top = rep.pairs[c->second.top];
        bool fallback = false;
        std::vector<std::string> title;
        for (size_t i : c->second.pairs) {
          fallback |= rep.pairs[i].fallback;
          title.push_back(fmt::format("{} {}", TransportName(rep.pairs[i].transport), Gb(rep.pairs[i].RatedGbps())));
        }
        out += fmt::format("<td class=\"cell t-{}{}{}\" data-pairs=\"{}\" title=\"{} → {}: {}\">{}</td>",
                           TransportName(top.transport), fallback ? " fallback" : "", c->second.pairs.size() > 1 ? " multi" : "",
                           fmt::join(c->second.pairs, ","), Escape(row_name), Escape(col_name), Escape(fmt::format("{}", fmt::join(title, "; "))),
                           TransportCell(top.transport));
      }
      out += "</tr>\n";
    }
    out += "</table>\n";
  }
  if (groups.size() > kMatrices) out += fmt::format("<p class=\"meta\">… {} more matrices</p>\n", groups.size() - kMatrices);
  out += "<div id=\"details\"><span class=\"meta\">Hover or click a cell: its transports, GB/s and causes.</span></div>\n";

  // Cross-host pairs, by host pair.
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> cross;
  for (size_t i = 0; i < rep.pairs.size(); ++i)
    if (rep.pairs[i].src.host != rep.pairs[i].dst.host) cross[{rep.pairs[i].src.host, rep.pairs[i].dst.host}].push_back(i);
  if (!cross.empty()) {
    out += "<h2>Cross-host pairs</h2>\n<table class=\"list\"><tr><th>hosts</th><th>GPUs</th><th>path</th><th>NCCL said</th>"
           "<th>GB/s</th></tr>\n";
    size_t rows = 0;
    for (const auto& [hp, ids] : cross)
      for (size_t i : ids) {
        if (rows++ >= 200) continue;
        const PairEntry& e = rep.pairs[i];
        out += fmt::format("<tr><td>{} → {}</td><td>{} → {}</td><td class=\"t-{}\">{}</td><td>{}</td><td>{}</td></tr>\n",
                           Escape(hp.first), Escape(hp.second), Escape(GpuName(e.src)), Escape(GpuName(e.dst)), TransportName(e.transport),
                           TransportName(e.transport), Escape(fmt::format("{}", fmt::join(e.nccl_transports, ", "))),
                           Escape(PairRate(e)));
      }
    out += "</table>\n";
    if (rows > 200) out += fmt::format("<p class=\"meta\">… {} more rows</p>\n", rows - 200);
  }

  // Bandwidth per pair, the furthest below its expectation first.
  std::vector<size_t> order;
  for (size_t i = 0; i < rep.pairs.size(); ++i)
    if (rep.pairs[i].RatedGbps() > 0) order.push_back(i);
  auto shortfall = [&](size_t i) {
    const PairEntry& e = rep.pairs[i];
    // A ring hop bounded by a slower one is not short of its own link: it goes last.
    return e.expected_gbps_low > 0 && e.bounded_by.empty() ? e.RatedGbps() / e.expected_gbps_low : 1e9;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    bool fa = rep.pairs[a].fallback, fb = rep.pairs[b].fallback;
    return fa != fb ? fa : shortfall(a) < shortfall(b);
  });
  out += "<h2>Bandwidth per pair</h2>\n<p class=\"meta\">measured GB/s (bar) against the range the path should give "
         "(grey); fallbacks first</p>\n";
  out += order.empty() ? std::string("<p>no pair was timed</p>\n") : BandwidthChart(rep, order);

  // Each host's link health: what changed on which link, and the pairs that crossed it.
  if (!rep.links.empty()) {
    out += "<h2>Link health</h2>\n<p class=\"meta\">each process read every NVLink and PCIe port at start and at exit; "
           "what changed is charged to the pairs whose path crosses the link</p>\n";
    for (const Report::HostLinks& h : rep.links) {
      out += fmt::format("<h3>{}</h3>\n<p class=\"meta\">{} start reading{}, {} at exit{}</p>\n", Escape(h.host), h.readings,
                         h.readings == 1 ? "" : "s", h.exit_readings,
                         h.read_ms >= 0 ? fmt::format("; the slowest took {:.1f} ms", h.read_ms) : "");
      if (h.changes.empty()) out += "<p>no error counter moved and no link trained below what it can do</p>\n";
      else {
        out += "<table class=\"list\"><tr><th>link</th><th>what</th><th>pairs that crossed it</th></tr>\n";
        for (const Report::HostLinks::Change& c : h.changes) {
          std::string pairs;
          for (const std::string& p : c.pairs) pairs += (pairs.empty() ? "" : ", ") + Escape(p);
          out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>\n", Escape(c.change.Where()), Escape(c.change.What()),
                             pairs.empty() ? std::string("<i>no traced pair</i>") : pairs);
        }
        out += "</table>\n";
      }
      for (const std::string& u : h.unsupported) out += "<p class=\"meta\">not counted here (unsupported, not zero): " + Escape(u) + "</p>\n";
      for (const std::string& n : h.notes) out += "<p class=\"meta\">" + Escape(n) + "</p>\n";
    }
  }

  // Fallbacks with their causes and fixes.
  out += fmt::format("<h2>Fallbacks</h2>\n");
  std::vector<size_t> falls;
  for (size_t i = 0; i < rep.pairs.size(); ++i)
    if (rep.pairs[i].fallback) falls.push_back(i);
  std::stable_sort(falls.begin(), falls.end(),
                   [&](size_t a, size_t b) { return rep.pairs[a].lost_seconds > rep.pairs[b].lost_seconds; });
  if (falls.empty()) {
    out += "<p id=\"no-fallbacks\">No pair fell back.</p>\n";
  } else {
    out += fmt::format("<p>{} pair{}; time lost in total: <b id=\"lost-total\">{:.3g} s</b> (bytes on the fallback path × "
                       "(1/achieved − 1/expected-best GB/s))</p>\n<table class=\"list\" id=\"fallbacks\"><tr><th>pair</th>"
                       "<th>path</th><th>GB/s</th><th>lost</th><th>causes and fixes</th></tr>\n",
                       falls.size(), falls.size() == 1 ? "" : "s", rep.lost_seconds);
    for (size_t k = 0; k < std::min<size_t>(falls.size(), 500); ++k) {
      const PairEntry& e = rep.pairs[falls[k]];
      std::string causes;
      for (const Cause& c : e.causes)
        causes += fmt::format("<div class=\"cause\"><code>{}</code> {}<div class=\"fix\">fix: {}</div></div>", Escape(c.id),
                              Escape(fmt::format("{}", fmt::join(c.evidence, "; "))), Escape(c.fix));
      out += fmt::format("<tr><td>{}</td><td class=\"t-{}\">{} instead of {}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         Escape(PairLabel(e)), TransportName(e.transport), TransportName(e.transport),
                         TransportName(e.expected), Escape(PairRate(e)),
                         e.lost_seconds >= 0 ? fmt::format("{:.3g} s", e.lost_seconds) : "?", causes);
    }
    out += "</table>\n";
    if (falls.size() > 500) out += fmt::format("<p class=\"meta\">… {} more</p>\n", falls.size() - 500);
  }

  // Where in the program the traffic came from (P2PTRACE_STACKS), as `report` ranks the sites.
  out += "<h2>Call sites</h2>\n";
  if (rep.call_sites.empty()) {
    out += "<p id=\"no-call-sites\" class=\"meta\">No call site was captured: run the job with P2PTRACE_STACKS=1 to "
           "see where in the program each copy and NCCL operation came from.</p>\n";
  } else {
    constexpr size_t kSites = 100, kPairs = 4;
    out += fmt::format("<p class=\"meta\">{} site{}, most host-staged bytes first, then most bytes; frames innermost "
                       "first (<code>addr2line -e MODULE OFFSET</code> names the line)</p>\n<table class=\"list\" "
                       "id=\"call-sites\"><tr><th>#</th><th>where</th><th>copies</th><th>bytes</th><th>host-staged</th>"
                       "<th>NCCL operations</th><th>pairs</th><th>ranks</th></tr>\n",
                       rep.call_sites.size(), rep.call_sites.size() == 1 ? "" : "s");
    for (size_t k = 0; k < std::min(rep.call_sites.size(), kSites); ++k) {
      const CallSiteSummary& c = rep.call_sites[k];
      std::string where = c.frames.empty() ? std::string("?") : "<code>" + Escape(c.frames[0]) + "</code>";
      if (c.frames.size() > 1) {
        where += fmt::format("<details><summary>{} more frame{}</summary>", c.frames.size() - 1,
                             c.frames.size() == 2 ? "" : "s");
        for (size_t f = 1; f < c.frames.size(); ++f) where += "<code>" + Escape(c.frames[f]) + "</code><br>";
        where += "</details>";
      }
      std::vector<std::string> pairs;
      for (size_t i = 0; i < std::min(c.pairs.size(), kPairs); ++i) {
        const CallSiteSummary::Pair& p = c.pairs[i];
        pairs.push_back(fmt::format("{} {} → {} <span class=\"t-{}\">{}</span> ({})", Escape(p.src.host),
                                    Escape(GpuName(p.src)), Escape(GpuName(p.dst)), TransportName(p.transport), TransportName(p.transport), BytesText(p.bytes)));
      }
      if (c.pairs.size() > kPairs) pairs.push_back(fmt::format("… {} more", c.pairs.size() - kPairs));
      std::string nccl = c.nccl_ops || c.nccl_errors
                             ? fmt::format("{} ({}), {}{}", c.nccl_ops, Escape(fmt::format("{}", fmt::join(c.nccl_operations, ", "))),
                                           BytesText(c.nccl_bytes), c.nccl_errors ? fmt::format(", {} failed", c.nccl_errors) : "")
                             : std::string();
      out += fmt::format("<tr data-site=\"{}\"{}><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td{}>{}</td><td>{}</td>"
                         "<td>{}</td><td>{} ({} process{})</td></tr>\n",
                         c.id, c.host_staged_bytes ? " class=\"staged\"" : "", c.id, where, c.copies,
                         c.errors ? fmt::format(", {} failed", c.errors) : "", c.bytes ? BytesText(c.bytes) : "",
                         c.host_staged_bytes ? " class=\"t-host_staged\"" : "",
                         c.host_staged_bytes ? BytesText(c.host_staged_bytes) : "", nccl, fmt::join(pairs, "<br>"),
                         RankList(c.ranks), c.processes, c.processes == 1 ? "" : "es");
    }
    out += "</table>\n";
    if (rep.call_sites.size() > kSites)
      out += fmt::format("<p class=\"meta\">… {} more call sites (`p2ptrace report --json` lists them all)</p>\n",
                         rep.call_sites.size() - kSites);
  }

  // Timeline summary.
  out += "<h2>Timeline</h2>\n<p class=\"meta\">when each process ran (green: exited, red: killed, crashed or still "
         "running); `p2ptrace export DIR --perfetto OUT` gives the full timeline for ui.perfetto.dev</p>\n";
  out += TimelineChart(rep);
  if (!rep.nccl_ops.empty()) {
    out += "<table class=\"list\"><tr><th>communicator</th><th>ranks</th><th>operation</th><th>calls</th><th>bytes</th>"
           "<th>algbw</th><th>busbw</th></tr>\n";
    for (const NcclOpSummary& s : rep.nccl_ops)
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         s.comm.substr(0, 8), s.nranks, Escape(s.op), s.calls, s.bytes,
                         s.AlgBw() < 0 && !s.RateNote().empty() ? Escape(s.RateNote()) : Gb(s.AlgBw()), Gb(s.BusBw()));
    out += "</table>\n";
  }
  out += fmt::format("<script type=\"application/json\" id=\"report-data\">{}</script>\n",
                     pairs_data);
  out += fmt::format("<script>{}</script>\n</body></html>\n", kScript);
  return out;
}

}  // namespace p2ptrace::cli
