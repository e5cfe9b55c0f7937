#include "probe/link_health.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <utility>

#include "core/fields.h"
#include "core/probe_parsers.h"
#include "probe/deadline.h"
#include "probe/files.h"
#include "probe/nvml.h"

namespace p2ptrace::probe {
namespace {

constexpr unsigned kMaxLinks = 36;  // NVML_NVLINK_MAX_LINKS in the newest headers (18 before)
constexpr int kSuccess = 0;

// nvmlDeviceGetNvLinkErrorCounter's counters (NVLink 4 and older).
constexpr std::pair<int, const char*> kLegacyCounters[] = {{0, "replay"}, {1, "recovery"}, {2, "crc_flit"}, {3, "crc_data"}};
// NVLink 5's per-link field values (scopeId = the link), where the calls above say "not supported".
constexpr unsigned kSpeedField = 164;  // NVML_FI_DEV_NVLINK_GET_SPEED, MB/s
constexpr std::pair<unsigned, const char*> kFieldCounters[] = {
    {208, "rcv_errors"}, {214, "recovery_failed"}, {215, "recovery_events"}, {219, "effective_errors"}, {221, "symbol_errors"}};

std::string BusId(const NvmlPciInfo& pci) { return NormalizeBusId(std::string_view(pci.busId, strnlen(pci.busId, sizeof pci.busId))); }

struct NvmlPart {
  std::vector<NvLinkHealth> nvlinks;
  std::map<int, PciePortHealth> gpu_ports;  // by GPU index: NVML's width, generation and replay counter
};

NvmlPart ReadNvml(const NvmlApi& n, const std::vector<int>& gpus) {
  NvmlPart out;
  for (int index : gpus) {
    void* h = nullptr;
    if (n.GetHandle == nullptr || n.GetHandle(static_cast<unsigned>(index), &h) != kSuccess) continue;
    PciePortHealth port;
    unsigned v = 0;
    if (n.CurGen && n.CurGen(h, &v) == kSuccess) port.gen = static_cast<int>(v);
    if (n.MaxGen && n.MaxGen(h, &v) == kSuccess) port.max_gen = static_cast<int>(v);
    if (n.CurWidth && n.CurWidth(h, &v) == kSuccess) port.width = static_cast<int>(v);
    if (n.MaxWidth && n.MaxWidth(h, &v) == kSuccess) port.max_width = static_cast<int>(v);
    LinkCounter replay{"replay", std::nullopt};
    if (n.PcieReplay && n.PcieReplay(h, &v) == kSuccess) replay.value = v;
    port.counters.push_back(replay);
    out.gpu_ports[index] = std::move(port);

    size_t first = out.nvlinks.size();
    for (unsigned link = 0; link < kMaxLinks && n.GetLinkState; ++link) {
      int active = 0;
      if (n.GetLinkState(h, link, &active) != kSuccess) continue;  // no such link
      NvLinkHealth l;
      l.gpu = index;
      l.link = static_cast<int>(link);
      l.up = active != 0;
      NvmlPciInfo remote{};
      if (n.GetLinkRemote && n.GetLinkRemote(h, link, &remote) == kSuccess) l.remote = BusId(remote);
      unsigned version = 0;
      if (n.NvLinkVersion && n.NvLinkVersion(h, link, &version) == kSuccess) l.version = static_cast<int>(version);
      for (auto [counter, name] : kLegacyCounters) {
        unsigned long long value = 0;
        LinkCounter c{name, std::nullopt};
        if (n.NvLinkErrorCounter && n.NvLinkErrorCounter(h, link, counter, &value) == kSuccess) c.value = value;
        l.counters.push_back(c);
      }
      out.nvlinks.push_back(std::move(l));
    }
    // One call for every link's speed and NVLink 5 counters.
    std::vector<NvmlFieldValue> fields;
    for (size_t i = first; i < out.nvlinks.size(); ++i) {
      NvmlFieldValue f{};
      f.scopeId = static_cast<unsigned>(out.nvlinks[i].link);
      f.fieldId = kSpeedField;
      fields.push_back(f);
      for (auto [id, name] : kFieldCounters) {
        f.fieldId = id;
        fields.push_back(f);
      }
    }
    if (fields.empty()) continue;
    bool answered = n.FieldValues && n.FieldValues(h, static_cast<int>(fields.size()), fields.data()) == kSuccess;
    auto value = [](const NvmlFieldValue& f) -> std::optional<uint64_t> {
      if (f.nvmlReturn != kSuccess) return std::nullopt;
      switch (f.valueType) {
        case 1: return f.value.uiVal;           // unsigned int
        case 2: return f.value.ulVal;           // unsigned long
        case 3: return f.value.ullVal;          // unsigned long long
        case 4: return f.value.sllVal >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(f.value.sllVal)) : std::nullopt;
        case 6: return f.value.siVal >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(f.value.siVal)) : std::nullopt;
        default: return std::nullopt;           // a double is no count
      }
    };
    size_t k = 0;
    for (size_t i = first; i < out.nvlinks.size(); ++i) {
      NvLinkHealth& l = out.nvlinks[i];
      if (answered)
        if (std::optional<uint64_t> speed = value(fields[k]); speed && *speed > 0) l.speed_mbps = static_cast<int>(*speed);
      ++k;
      for (auto [id, name] : kFieldCounters) {
        l.counters.push_back({name, answered ? value(fields[k]) : std::nullopt});
        ++k;
      }
    }
  }
  return out;
}

// The kernel's AER totals for a device ("TOTAL_ERR_COR 3" in aer_dev_correctable), unset when the
// file is absent (kernels before 4.19, AER not enabled or not reported on this port).
std::optional<uint64_t> AerTotal(const Files& fs, const std::string& dir, const char* file, const char* total) {
  std::optional<std::string> text = fs.Read(dir + "/" + file, 16384);
  if (!text) return std::nullopt;
  for (std::string_view line : Split(*text, '\n')) {
    size_t space = line.find_last_of(' ');
    if (space == std::string_view::npos || line.substr(0, space) != total) continue;
    std::string_view v = line.substr(space + 1);
    uint64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec == std::errc() && p == v.data() + v.size()) return n;
  }
  return std::nullopt;
}

void ReadSysfsPort(const Files& fs, PciePortHealth* port, bool link_from_sysfs) {
  std::string dir = "/sys/bus/pci/devices/" + port->bus_id;
  if (link_from_sysfs) {
    port->gen = PcieGenFromLinkSpeed(fs.Line(dir + "/current_link_speed"));
    port->max_gen = PcieGenFromLinkSpeed(fs.Line(dir + "/max_link_speed"));
    port->width = ToInt(fs.Line(dir + "/current_link_width"), -1);
    port->max_width = ToInt(fs.Line(dir + "/max_link_width"), -1);
    for (int* v : {&port->gen, &port->max_gen, &port->width, &port->max_width})
      if (*v <= 0) *v = -1;
  }
  port->counters.push_back({"aer_correctable", AerTotal(fs, dir, "aer_dev_correctable", "TOTAL_ERR_COR")});
  port->counters.push_back({"aer_nonfatal", AerTotal(fs, dir, "aer_dev_nonfatal", "TOTAL_ERR_NONFATAL")});
  port->counters.push_back({"aer_fatal", AerTotal(fs, dir, "aer_dev_fatal", "TOTAL_ERR_FATAL")});
}

}  // namespace

LinkHealth ReadLinkHealth(const NodeProbe& probe, const std::string& when, int nvml_timeout_ms) {
  auto started = std::chrono::steady_clock::now();
  LinkHealth h;
  h.host = probe.hostname;
  h.when = when;
  Files fs{probe.sysroot};
  while (!fs.root.empty() && fs.root.back() == '/') fs.root.pop_back();
  std::vector<int> gpus;
  for (const ProbedGpu& g : probe.gpus)
    if (g.index >= 0 && g.index < 100 && !g.bus_id.empty()) gpus.push_back(g.index);  // this host's (others' from 100)

  std::optional<NvmlPart> nvml;
  if (!probe.nvml) h.notes.push_back("NVML did not answer the probe: no NVLink state or error counter, no PCIe replay counter");
  else if (const NvmlApi* api = LoadNvml(); api == nullptr) h.notes.push_back("libnvidia-ml.so.1 is not loaded");
  else {
    nvml = WithDeadline([api, gpus] { return ReadNvml(*api, gpus); }, nvml_timeout_ms);
    if (!nvml) h.notes.push_back("NVML did not answer within " + std::to_string(nvml_timeout_ms) + " ms: no NVLink or replay counter");
  }
  if (nvml) h.nvlinks = std::move(nvml->nvlinks);

  std::map<std::string, size_t> bridge_ports;  // bus id → index into h.pcie
  for (const ProbedGpu& g : probe.gpus) {
    if (std::find(gpus.begin(), gpus.end(), g.index) == gpus.end()) continue;
    PciePortHealth port;
    bool from_nvml = nvml && nvml->gpu_ports.count(g.index) != 0;
    if (from_nvml) port = nvml->gpu_ports[g.index];
    else port.counters.push_back({"replay", std::nullopt});
    port.bus_id = g.bus_id;
    port.gpu = g.index;
    port.below = {g.index};
    ReadSysfsPort(fs, &port, !from_nvml);
    h.pcie.push_back(std::move(port));
    for (const std::string& br : g.bridges) {
      auto [it, fresh] = bridge_ports.emplace(br, 0);
      if (!fresh) {
        h.pcie[it->second].below.push_back(g.index);
        continue;
      }
      PciePortHealth b;
      b.bus_id = br;
      b.below = {g.index};
      ReadSysfsPort(fs, &b, true);
      it->second = h.pcie.size();
      h.pcie.push_back(std::move(b));
    }
  }
  h.read_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return h;
}

}  // namespace p2ptrace::probe
