#include "core/nccl_net.h"

#include <charconv>
#include <cstdlib>

namespace p2ptrace {
namespace {

bool Number(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && *out >= 0;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t p = s.find(sep, start);
    parts.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) return parts;
    start = p + 1;
  }
}

// The integer that follows `key` in `s` ("distance 7" → 7); -1 when absent.
int After(std::string_view s, std::string_view key) {
  size_t p = s.find(key);
  if (p == std::string_view::npos) return -1;
  p += key.size();
  size_t n = 0;
  while (p + n < s.size() && IsDigit(s[p + n])) ++n;
  int v = -1;
  return Number(s.substr(p, n), &v) ? v : -1;
}

}  // namespace

std::optional<NetPath> ParseNetPath(std::string_view t) {
  if (!t.starts_with("NET/")) return std::nullopt;
  std::vector<std::string_view> parts = Split(t.substr(4), '/');
  // The network's name runs to the first part that starts with a digit: the NIC.
  size_t nic = 1;
  while (nic < parts.size() && (parts[nic].empty() || !IsDigit(parts[nic].front()))) ++nic;
  if (nic >= parts.size() || parts[0].empty()) return std::nullopt;
  NetPath p;
  for (size_t i = 0; i < nic; ++i) p.network += (i ? "/" : "") + std::string(parts[i]);
  std::string_view n = parts[nic];
  size_t open = n.find('(');
  if (!Number(n.substr(0, open), &p.nic)) return std::nullopt;
  if (open != std::string_view::npos) {
    if (!n.ends_with(")") || !Number(n.substr(open + 1, n.size() - open - 2), &p.proxy_rank)) return std::nullopt;
  }
  for (size_t i = nic + 1; i < parts.size(); ++i) {
    std::string_view part = parts[i];
    if (part.starts_with("GDRDMA")) {
      p.gdr = true;
      p.gdr_over_pci = part == "GDRDMA(PCI)";
    } else if (part == "Shared") {
      p.shared = true;
    }
  }
  return p;
}

std::optional<std::vector<NetDevice>> ParseNetDevices(std::string_view m) {
  if (!m.starts_with("NET/")) return std::nullopt;
  size_t using_at = m.find(" : Using");
  if (using_at == std::string_view::npos) return std::nullopt;
  std::string network(m.substr(4, using_at - 4));
  std::string_view list = m.substr(using_at + 8);
  if (size_t oob = list.find(';'); oob != std::string_view::npos) list = list.substr(0, oob);
  std::vector<NetDevice> devices;
  for (std::string_view item : Split(list, ' ')) {
    if (item.empty() || item.front() != '[') continue;  // "[RO]" (relaxed ordering) is no device
    size_t close = item.find(']');
    NetDevice d;
    d.network = network;
    if (close == std::string_view::npos || !Number(item.substr(1, close - 1), &d.index)) continue;
    std::string_view rest = item.substr(close + 1);
    size_t colon = rest.find(':');
    if (colon == std::string_view::npos) continue;
    if (network == "Socket") {
      d.interface = std::string(rest.substr(0, colon));
      d.address = std::string(rest.substr(colon + 1));
    } else {
      d.name = std::string(rest.substr(0, colon));
      std::vector<std::string_view> tags = Split(rest.substr(colon + 1), '/');  // "1", "IB", "SHARP"
      if (!Number(tags[0], &d.port)) continue;
      if (tags.size() > 1) d.link = std::string(tags[1]);
      for (size_t i = 2; i < tags.size(); ++i) d.flags.emplace_back(tags[i]);
    }
    devices.push_back(std::move(d));
  }
  return devices;
}

std::optional<GdrDecision> ParseGdrDecision(std::string_view m) {
  size_t at = m.find("GPU Direct RDMA ");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = m.substr(at + 16);
  GdrDecision g;
  if (rest.starts_with("Enabled for ")) g.enabled = true;
  else if (!rest.starts_with("Disabled for ")) return std::nullopt;
  rest = rest.substr(rest.find(" for ") + 5);
  if (rest.starts_with("GPU ")) {
    std::string_view gpu = rest.substr(4);
    g.gpu = std::string(gpu.substr(0, gpu.find(' ')));
  }
  if (size_t h = rest.find("HCA "); h != std::string_view::npos) {
    std::string_view hca = rest.substr(h + 4);
    hca = hca.substr(0, hca.find_first_of(" ,("));
    if (!Number(hca, &g.hca)) g.hca = -1;  // 2.21+ print the NIC's topology node id in hex
    if (size_t q = rest.find('\'', h); q != std::string_view::npos) {
      size_t end = rest.find('\'', q + 1);
      if (end != std::string_view::npos) g.hca_name = std::string(rest.substr(q + 1, end - q - 1));
    }
  }
  if (size_t d = rest.find("(distance "); d != std::string_view::npos) {
    g.distance = After(rest, "(distance ");
    std::string_view cmp = rest.substr(d + 10);
    size_t op = cmp.find_first_of("<>");
    if (op != std::string_view::npos) {
      size_t num = cmp.find_first_of("0123456789", op);
      if (num != std::string_view::npos) {
        size_t n = 0;
        while (num + n < cmp.size() && IsDigit(cmp[num + n])) ++n;
        if (!Number(cmp.substr(num, n), &g.level)) g.level = -1;
      }
    }
  }
  g.read = After(rest, "read ");
  g.no_module = rest.find("(no module") != std::string_view::npos;
  return g;
}

std::string_view NetFailureKind(std::string_view m) {
  if (m.starts_with("NET/IB : No device found")) return "net-no-ib-device";
  if (m.starts_with("Failed to open libibverbs")) return "net-no-verbs";
  return {};
}

std::optional<RingNetUse> ParseRingNetUse(std::string_view m) {
  size_t p = m.find("use ring PXN ");
  if (!m.starts_with("Connected all rings") || p == std::string_view::npos) return std::nullopt;
  int pxn = After(m, "use ring PXN "), gdr = After(m, " GDR ");
  if (pxn < 0 || gdr < 0) return std::nullopt;
  return RingNetUse{pxn != 0, gdr != 0};
}

bool IsDmaBufAvailable(std::string_view m) { return m.starts_with("DMA-BUF is available on GPU device "); }

bool IbHcaSelects(std::string_view spec, std::string_view device, int port) {
  bool exclude = !spec.empty() && spec.front() == '^';
  if (exclude) spec.remove_prefix(1);
  bool exact = !spec.empty() && spec.front() == '=';
  if (exact) spec.remove_prefix(1);
  bool listed = false, any = false;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view entry = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (entry.empty()) continue;
    any = true;
    size_t colon = entry.find(':');
    std::string_view name = entry.substr(0, colon);
    int want_port = colon == std::string_view::npos ? -1 : std::atoi(std::string(entry.substr(colon + 1)).c_str());
    bool name_ok = exact ? name == device : device.substr(0, name.size()) == name;
    if (name_ok && (want_port < 0 || want_port == port)) listed = true;
  }
  return (any ? listed : true) != exclude;  // NCCL: an empty list matches all, so "^" alone excludes all
}

}  // namespace p2ptrace
