#include "core/topo_matrix.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include "core/topology.h"

namespace p2ptrace {
namespace {

// More columns than any machine has; keeps a hostile input from asking for a huge matrix.
constexpr size_t kMaxDevices = 512;

struct StatusCode {
  P2pStatus status;
  std::string_view code, meaning;
};
constexpr StatusCode kStatusCodes[] = {
    {P2pStatus::kOk, "OK", "status OK"},
    {P2pStatus::kChipsetNotSupported, "CNS", "chipset not supported"},
    {P2pStatus::kGpuNotSupported, "GNS", "GPU not supported"},
    {P2pStatus::kTopologyNotSupported, "TNS", "topology not supported"},
    {P2pStatus::kDisabledByRegkey, "DR", "disabled by regkey"},
    {P2pStatus::kNotSupported, "NS", "not supported"},
    {P2pStatus::kNvmlUnknown, "U", "unknown (NVML)"},
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsSpace(s[i])) ++i;
    size_t start = i;
    while (i < s.size() && !IsSpace(s[i])) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::vector<std::string_view> TabFields(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == '\t') {
      out.push_back(Trim(s.substr(start, i - start)));
      start = i + 1;
    }
  return out;
}

// "GPU12" → 12 (prefix "GPU"); nullopt for anything else.
std::optional<int> Numbered(std::string_view word, std::string_view prefix) {
  if (word.size() <= prefix.size() || word.substr(0, prefix.size()) != prefix) return std::nullopt;
  int n = 0;
  auto [p, ec] = std::from_chars(word.data() + prefix.size(), word.data() + word.size(), n);
  if (ec != std::errc() || p != word.data() + word.size() || n < 0) return std::nullopt;
  return n;
}

bool IsLinkCode(std::string_view w) { return w == "X" || ParsePathType(w).has_value(); }
bool IsStatusCode(std::string_view w) { return ParseP2pStatus(w) != P2pStatus::kUnknown; }
bool IsCode(std::string_view w) { return IsLinkCode(w) || IsStatusCode(w); }

// A token that sits where a cell belongs: capitals, then digits (X, NV12, PIX, CNS; also a cut "PI").
bool LooksLikeCell(std::string_view w) {
  size_t i = 0;
  while (i < w.size() && std::isupper(static_cast<unsigned char>(w[i]))) ++i;
  if (i == 0) return false;
  while (i < w.size() && std::isdigit(static_cast<unsigned char>(w[i]))) ++i;
  return i == w.size();
}

// RDMA device names as nvidia-smi prints them in old headers: mlx5_0, rocep1s0f0, mlx5_bond_0.
bool LooksLikeNicName(std::string_view w) {
  if (w.empty() || !std::islower(static_cast<unsigned char>(w[0]))) return false;
  return std::all_of(w.begin(), w.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_';
  });
}

// "NIC8NIC9" or "GPU0GPU1" (a re-rendered tab file lost its separator) → its parts; else {w}.
std::vector<std::string> SplitFusedNames(std::string_view w) {
  std::vector<std::string> parts;
  for (std::string_view prefix : {"GPU", "NIC"}) {
    if (w.size() <= prefix.size() || w.substr(0, prefix.size()) != prefix) continue;
    size_t start = 0;
    for (size_t i = prefix.size(); i <= w.size(); ++i)
      if (i == w.size() || (w.substr(i, prefix.size()) == prefix && i > start + prefix.size())) {
        parts.emplace_back(w.substr(start, i - start));
        start = i;
      }
    if (parts.size() > 1 && std::all_of(parts.begin(), parts.end(),
                                         [&](const std::string& p) { return Numbered(p, prefix).has_value(); }))
      return parts;
    parts.clear();
  }
  return {std::string(w)};
}

struct Header {
  std::vector<int> gpus;
  std::vector<std::string> nics, affinity;
  std::vector<std::string> notes;
};

// The column names of a matrix, or nullopt when the line is not a header.
std::optional<Header> ParseHeader(std::string_view line) {
  std::vector<std::string_view> raw = Words(line);
  if (raw.empty() || !Numbered(raw[0], "GPU") || Numbered(raw[0], "GPU") != 0) {
    // Headers start at GPU0 (nvidia-smi renumbers visible GPUs from 0), possibly fused: GPU0GPU1.
    if (raw.empty() || SplitFusedNames(raw[0]).front() != "GPU0") return std::nullopt;
  }
  Header h;
  for (size_t i = 0; i < raw.size(); ++i) {
    std::string_view w = raw[i];
    auto next_is = [&](size_t k, std::string_view s) { return i + k < raw.size() && raw[i + k] == s; };
    if (w == "CPU" && next_is(1, "Affinity")) { h.affinity.emplace_back("CPU Affinity"); ++i; continue; }
    if (w == "NUMA" && next_is(1, "Affinity")) { h.affinity.emplace_back("NUMA Affinity"); ++i; continue; }
    if (w == "GPU" && next_is(1, "NUMA") && next_is(2, "ID")) { h.affinity.emplace_back("GPU NUMA ID"); i += 2; continue; }
    if (!h.affinity.empty()) return std::nullopt;  // devices never follow the affinity columns
    std::vector<std::string> parts = SplitFusedNames(w);
    if (parts.size() > 1) h.notes.push_back("header token '" + std::string(w) + "' read as " + std::to_string(parts.size()) +
                                            " fused column names");
    for (const std::string& p : parts) {
      if (auto g = Numbered(p, "GPU")) {
        if (!h.nics.empty()) return std::nullopt;
        h.gpus.push_back(*g);
      } else if (Numbered(p, "NIC") || LooksLikeNicName(p)) {
        h.nics.push_back(p);
      } else {
        return std::nullopt;  // prose, a row (X), or something we do not know
      }
    }
  }
  if (h.gpus.size() + h.nics.size() > kMaxDevices) return std::nullopt;
  return h;
}

// Cells of one row: the label, then up to `n` cell tokens. A fused pair of codes ("NODENODE") is
// split; a token that is no code is kept verbatim (and noted), or dropped as cut when it ends the text.
struct RowCells {
  std::vector<std::string> cells;
  size_t words_used = 0;  // words of the line consumed (label included)
};

RowCells ReadCells(const std::vector<std::string_view>& words, size_t n, bool last_line, std::vector<std::string>* notes,
                   bool* truncated, std::string_view label) {
  RowCells r;
  size_t i = 1;
  for (; i < words.size() && r.cells.size() < n && LooksLikeCell(words[i]); ++i) {
    std::string_view w = words[i];
    if (IsCode(w)) {
      r.cells.emplace_back(w);
      continue;
    }
    bool split = false;
    for (size_t k = 1; k < w.size() && !split; ++k)
      if (IsCode(w.substr(0, k)) && IsCode(w.substr(k)) && r.cells.size() + 2 <= n) {
        r.cells.emplace_back(w.substr(0, k));
        r.cells.emplace_back(w.substr(k));
        notes->push_back("row " + std::string(label) + ": cell '" + std::string(w) + "' read as two fused cells");
        split = true;
      }
    if (split) continue;
    if (last_line && i + 1 == words.size()) {
      *truncated = true;
      notes->push_back("row " + std::string(label) + " ends mid-cell ('" + std::string(w) + "')");
      r.cells.emplace_back();
      continue;
    }
    r.cells.emplace_back(w);
    notes->push_back("row " + std::string(label) + ": unknown cell '" + std::string(w) + "'");
  }
  r.words_used = i;
  return r;
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// The affinity values of a GPU row, mapped onto the header's affinity columns.
void ReadAffinity(std::string_view line, const std::vector<std::string_view>& words, const RowCells& rc,
                  size_t n_columns, TopoMatrix* m, TopoAffinity* aff, std::string_view label) {
  std::vector<std::string> values;
  bool from_tabs = false;
  if (line.find('\t') != std::string_view::npos) {
    // With tabs, empty cells keep their place (an empty CPU Affinity); use that when the tab fields
    // agree with the cells read from words.
    std::vector<std::string_view> f = TabFields(line);
    size_t skip = 0;
    while (skip < f.size() && f[skip].empty()) ++skip;  // `topo -p2p` rows start with a space/tab
    if (f.size() >= skip + 1 + rc.cells.size() && Words(f[skip]).size() == 1) {
      bool agree = true;
      for (size_t k = 0; k < rc.cells.size() && agree; ++k) agree = f[skip + 1 + k] == rc.cells[k];
      if (agree) {
        from_tabs = true;
        for (size_t k = skip + 1 + rc.cells.size(); k < f.size(); ++k) values.emplace_back(f[k]);
        while (!values.empty() && values.back().empty()) values.pop_back();
        // nvidia-smi prints an extra TAB before GPU NUMA ID: drop empty fields, last first, until
        // the values fit the columns.
        for (size_t k = values.size(); values.size() > n_columns && k-- > 0;)
          if (values[k].empty()) values.erase(values.begin() + static_cast<long>(k));
      }
    }
  }
  if (!from_tabs)
    for (size_t k = rc.words_used; k < words.size(); ++k) values.emplace_back(words[k]);
  // "0N/A": NUMA id fused onto GPU NUMA ID's N/A when a tab file lost its separators.
  if (n_columns == 3 && values.size() == 2 && values[1].size() > 3 && values[1].ends_with("N/A") &&
      IsDigits(std::string_view(values[1]).substr(0, values[1].size() - 3))) {
    values.push_back("N/A");
    values[1].resize(values[1].size() - 3);
    m->notes.push_back("row " + std::string(label) + ": NUMA affinity fused with 'N/A', split");
  }
  std::string extra;
  for (size_t k = 0; k < values.size(); ++k) {
    if (k < n_columns) {
      std::string* slot = k == 0 ? &aff->cpu : k == 1 ? &aff->numa : &aff->gpu_numa;
      *slot = values[k];
    } else {
      extra += (extra.empty() ? "" : " ") + values[k];
    }
  }
  if (!extra.empty()) m->annotations.push_back(std::string(label) + ": " + extra);
}

std::string StripAnsi(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
      size_t j = i + 2;
      while (j < s.size() && !std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
      i = j;  // skip the final letter too
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == '\n') {
      std::string_view l = text.substr(start, i - start);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      if (i < text.size() || !l.empty()) lines.push_back(StripAnsi(l));
      start = i + 1;
    }
  return lines;
}

// `nvidia-smi topo -p2p r` echoed before a matrix: the mode letter(s).
std::string P2pModeOf(std::string_view line) {
  size_t at = line.find("-p2p");
  if (at == std::string_view::npos) return "";
  std::vector<std::string_view> w = Words(line.substr(at + 4));
  return w.empty() ? "" : std::string(w[0]);
}

void SettleKind(TopoMatrix* m) {
  bool any_status = false, any_link = false;
  for (size_t r = 0; r < m->gpus.size(); ++r)
    for (size_t c = 0; c < m->gpus.size() && c < m->cells[r].size(); ++c) {
      const std::string& cell = m->cells[r][c];
      if (cell.empty() || cell == "X") continue;
      if (IsStatusCode(cell)) any_status = true;
      else if (IsLinkCode(cell)) any_link = true;
    }
  m->kind = any_status && !any_link ? TopoMatrixKind::kP2pStatus : TopoMatrixKind::kLinks;
}

}  // namespace

P2pStatus ParseP2pStatus(std::string_view code) {
  for (const StatusCode& s : kStatusCodes)
    if (s.code == code) return s.status;
  return P2pStatus::kUnknown;
}

std::string_view P2pStatusCode(P2pStatus status) {
  for (const StatusCode& s : kStatusCodes)
    if (s.status == status) return s.code;
  return "?";
}

std::string_view P2pStatusMeaning(P2pStatus status) {
  for (const StatusCode& s : kStatusCodes)
    if (s.status == status) return s.meaning;
  return "not known";
}

int TopoMatrix::GpuColumn(int gpu) const {
  auto it = std::find(gpus.begin(), gpus.end(), gpu);
  return it == gpus.end() ? -1 : static_cast<int>(it - gpus.begin());
}

std::string TopoMatrix::Cell(int gpu_a, int gpu_b) const {
  int a = GpuColumn(gpu_a), b = GpuColumn(gpu_b);
  if (a < 0 || b < 0) return "";
  const std::string& ab = cells[static_cast<size_t>(a)][static_cast<size_t>(b)];
  return ab.empty() ? cells[static_cast<size_t>(b)][static_cast<size_t>(a)] : ab;
}

std::string TopoMatrix::NicCell(int gpu, size_t nic) const {
  int a = GpuColumn(gpu);
  if (a < 0 || nic >= nics.size()) return "";
  size_t col = gpus.size() + nic;
  const std::string& ab = cells[static_cast<size_t>(a)][col];
  return ab.empty() ? cells[col][static_cast<size_t>(a)] : ab;
}

std::string TopoMatrix::NicName(size_t nic) const {
  if (nic >= nics.size()) return "";
  auto it = nic_names.find(nics[nic]);
  return it == nic_names.end() ? nics[nic] : it->second;
}

const TopoMatrix* TopoText::Links() const {
  for (const TopoMatrix& m : matrices)
    if (m.kind == TopoMatrixKind::kLinks) return &m;
  return nullptr;
}

const TopoMatrix* TopoText::P2p(std::string_view mode) const {
  for (const TopoMatrix& m : matrices)
    if (m.kind == TopoMatrixKind::kP2pStatus && (mode.empty() || m.p2p_mode == mode)) return &m;
  return nullptr;
}

Expected<TopoText> ParseTopoText(std::string_view text) {
  std::vector<std::string> lines = Lines(text);
  TopoText out;
  std::string pending_mode;  // from an echoed `topo -p2p X` line, for the next matrix
  size_t i = 0;
  while (i < lines.size()) {
    std::optional<Header> h = ParseHeader(lines[i]);
    if (!h) {
      if (std::string mode = P2pModeOf(lines[i]); !mode.empty()) pending_mode = mode;
      ++i;
      continue;
    }
    TopoMatrix m;
    m.first_line = i + 1;
    m.gpus = h->gpus;
    m.nics = h->nics;
    m.affinity_columns = h->affinity;
    m.notes = h->notes;
    const size_t n = m.devices();
    m.cells.assign(n, std::vector<std::string>(n));
    m.affinity.assign(m.gpus.size(), {});
    std::vector<bool> seen(n, false);
    size_t rows = 0;
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      std::string_view line = lines[j];
      std::vector<std::string_view> words = Words(line);
      if (words.empty()) {
        if (rows == 0) continue;  // a blank line between header and rows
        break;
      }
      // The row's device: GPU<n> or a NIC column name.
      long dev = -1;
      if (auto g = Numbered(words[0], "GPU")) dev = m.GpuColumn(*g);
      for (size_t k = 0; dev < 0 && k < m.nics.size(); ++k)
        if (words[0] == m.nics[k]) dev = static_cast<long>(m.gpus.size() + k);
      if (dev < 0) break;
      const size_t d = static_cast<size_t>(dev);
      bool last_line = j + 1 == lines.size();
      RowCells rc = ReadCells(words, n, last_line, &m.notes, &m.truncated, words[0]);
      if (seen[d]) m.notes.push_back("row " + std::string(words[0]) + " printed twice; the first kept");
      else {
        for (size_t k = 0; k < rc.cells.size(); ++k) m.cells[d][k] = rc.cells[k];
        if (rc.cells.size() < n) {
          m.truncated = true;
          m.notes.push_back("row " + std::string(words[0]) + " has " + std::to_string(rc.cells.size()) + " of " +
                            std::to_string(n) + " cells");
        }
        if (d < m.gpus.size())
          ReadAffinity(line, words, rc, m.affinity_columns.size(), &m, &m.affinity[d], words[0]);
        else if (rc.words_used < words.size()) {
          std::string extra;
          for (size_t k = rc.words_used; k < words.size(); ++k) extra += (extra.empty() ? "" : " ") + std::string(words[k]);
          m.annotations.push_back(std::string(words[0]) + ": " + extra);
        }
      }
      seen[d] = true;
      ++rows;
    }
    if (rows == 0) {
      i = j;
      continue;
    }
    for (size_t d = 0; d < n; ++d)
      if (!seen[d]) {
        m.truncated = true;
        m.notes.push_back("no row for " + (d < m.gpus.size() ? "GPU" + std::to_string(m.gpus[d]) : m.nics[d - m.gpus.size()]));
      }
    SettleKind(&m);
    if (m.kind == TopoMatrixKind::kP2pStatus) m.p2p_mode = pending_mode;
    pending_mode.clear();
    // After the rows: the legend and the NIC legend, up to the next matrix.
    bool legend_nv = false, legend_pix = false, legend_node = false, legend_u = false;
    for (; j < lines.size() && !ParseHeader(lines[j]); ++j) {
      std::string_view t = Trim(lines[j]);
      if (t == "Legend:") m.legend = TopoLegend::kCut;
      if (std::string mode = P2pModeOf(t); !mode.empty()) pending_mode = mode;
      size_t colon = t.find(':');
      if (colon != std::string_view::npos && Numbered(t.substr(0, colon), "NIC")) {
        std::vector<std::string_view> w = Words(t.substr(colon + 1));
        if (w.size() == 1) m.nic_names[std::string(t.substr(0, colon))] = std::string(w[0]);
        continue;
      }
      if (m.legend == TopoLegend::kAbsent) continue;
      size_t eq = t.find('=');
      if (eq == std::string_view::npos) continue;
      std::string_view code = Trim(t.substr(0, eq));
      legend_nv |= code == "NV#";
      legend_pix |= code == "PIX";
      legend_node |= code == "NODE";
      legend_u |= code == "U";
    }
    if (m.legend == TopoLegend::kCut) {
      bool complete = m.kind == TopoMatrixKind::kP2pStatus ? legend_u : legend_pix && (!legend_node || legend_nv);
      if (complete) m.legend = TopoLegend::kComplete;
    }
    out.matrices.push_back(std::move(m));
    i = j;
  }
  if (out.matrices.empty())
    return Error{"no `nvidia-smi topo -m` or `topo -p2p` matrix in it (looked for a line of column names GPU0 GPU1 … "
                 "followed by rows such as `GPU0  X  NV12 …`)"};
  return out;
}

}  // namespace p2ptrace
