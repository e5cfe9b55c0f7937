// peer_copy: what GPU-to-GPU copies cost on this node, in the spirit of NVIDIA's
// p2pBandwidthLatencyTest. It lists the devices, prints which pairs can use peer access, then times
// cudaMemcpyPeerAsync between every pair twice: with peer access disabled (the driver stages the
// copy through host memory) and with it enabled (a direct NVLink/PCIe path where the pair allows
// it). A slow "enabled" cell next to a capable pair is the symptom p2ptrace exists to explain.
//
// Plain C++ on the CUDA runtime API (no kernels, no nvcc), so it builds with the host compiler and
// runs unchanged on a GPU node or, through LD_LIBRARY_PATH, on p2ptrace's simulated node.
#include <cuda_runtime_api.h>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr size_t kDefaultBytes = size_t{64} << 20;
constexpr int kDefaultIters = 5;
constexpr int kMaxIters = 1'000'000;

template <typename T>
using Matrix = std::vector<std::vector<T>>;  // [row device][column device]

// ---------------------------------------------------------------------------------------------
// CUDA errors: the first failing call ends the program with one line naming it. Exiting at once
// (rather than unwinding) keeps later cleanup calls, which would fail too, from adding noise.

[[noreturn]] void FailCuda(cudaError_t error, const char* call) {
  std::fflush(stdout);
  std::fprintf(stderr, "peer_copy: CUDA error %d (%s): %s at %s\n", static_cast<int>(error),
               cudaGetErrorName(error), cudaGetErrorString(error), call);
  std::exit(1);
}

#define CUDA_CHECK(call)                                                      \
  do {                                                                        \
    cudaError_t cuda_check_error_ = (call);                                   \
    if (cuda_check_error_ != cudaSuccess) FailCuda(cuda_check_error_, #call); \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Command line

struct Options {
  size_t bytes = kDefaultBytes;
  int iters = kDefaultIters;
  bool json = false;
  bool help = false;
};

void PrintUsage() {
  std::printf(
      "usage: peer_copy [--size BYTES] [--iters N] [--json]\n"
      "\n"
      "Lists the CUDA devices, prints which pairs can use peer access (cudaDeviceCanAccessPeer),\n"
      "and times cudaMemcpyPeerAsync between every pair of devices with peer access disabled,\n"
      "then enabled. Rows are source devices, columns destinations; the diagonal is a copy within\n"
      "one device. Bandwidth is in GB/s (10^9 bytes per second).\n"
      "\n"
      "  --size BYTES  bytes per copy; suffix K, M or G for KiB, MiB, GiB (default 64M)\n"
      "  --iters N     timed copies per cell, after one untimed warm-up copy (default 5)\n"
      "  --json        print one JSON object instead of tables: devices, can_access (0/1, 0 on\n"
      "                the diagonal), gbps_p2p_off, gbps_p2p_on (null where nothing was timed)\n"
      "  --help        print this and exit\n");
}

// "4096", "64M", "1G", "512KiB" -> bytes; nullopt when malformed, zero, or too large.
std::optional<size_t> ParseSize(std::string_view text) {
  uint64_t value = 0;
  auto [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || rest == text.data()) return std::nullopt;
  std::string_view suffix(rest, static_cast<size_t>(text.data() + text.size() - rest));
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix.front()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: return std::nullopt;
    }
    suffix.remove_prefix(1);
    if (!suffix.empty() && suffix != "iB" && suffix != "B") return std::nullopt;
  }
  if (value == 0 || value > (std::numeric_limits<size_t>::max() >> shift)) return std::nullopt;
  return static_cast<size_t>(value) << shift;
}

std::optional<int> ParseIters(std::string_view text) {
  int value = 0;
  auto [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || rest != text.data() + text.size()) return std::nullopt;
  if (value < 1 || value > kMaxIters) return std::nullopt;
  return value;
}

// Fills *options from argv; on a bad argument returns false with *error set.
bool ParseArgs(int argc, char** argv, Options* options, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view name = arg, value;
    bool inline_value = false;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    bool takes_value = name == "--size" || name == "--iters";
    if (takes_value && !inline_value) {
      if (i + 1 >= argc) {
        *error = std::string(name) + " needs a value";
        return false;
      }
      value = argv[++i];
    } else if (!takes_value && inline_value) {
      *error = std::string(name) + " takes no value";
      return false;
    }

    if (name == "--help" || name == "-h") {
      options->help = true;
    } else if (name == "--json") {
      options->json = true;
    } else if (name == "--size") {
      std::optional<size_t> bytes = ParseSize(value);
      if (!bytes) {
        *error = "bad --size '" + std::string(value) + "' (want a positive byte count, optional K/M/G suffix)";
        return false;
      }
      options->bytes = *bytes;
    } else if (name == "--iters") {
      std::optional<int> iters = ParseIters(value);
      if (!iters) {
        *error = "bad --iters '" + std::string(value) + "' (want 1.." + std::to_string(kMaxIters) + ")";
        return false;
      }
      options->iters = *iters;
    } else {
      *error = "unknown argument '" + std::string(arg) + "' (see --help)";
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Per-device resources

// What one device needs to take part: a buffer to copy from and a separate one to copy into (so a
// device-local copy has two distinct buffers), and a stream with the two events that time it.
class DeviceKit {
 public:
  DeviceKit(int device, size_t bytes) : device_(device) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaMalloc(&src_, bytes));
    CUDA_CHECK(cudaMalloc(&dst_, bytes));
    // Defined bytes to copy; synchronize because the memset runs on the legacy stream, which a
    // non-blocking stream does not wait for.
    CUDA_CHECK(cudaMemset(src_, 0x5a, bytes));
    CUDA_CHECK(cudaDeviceSynchronize());
    // Non-blocking: timed copies must not queue behind other work on the legacy stream.
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }

  ~DeviceKit() {
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaEventDestroy(stop_));
    CUDA_CHECK(cudaEventDestroy(start_));
    CUDA_CHECK(cudaStreamDestroy(stream_));
    CUDA_CHECK(cudaFree(dst_));
    CUDA_CHECK(cudaFree(src_));
  }

  DeviceKit(const DeviceKit&) = delete;
  DeviceKit& operator=(const DeviceKit&) = delete;

  int device() const { return device_; }
  void* src() const { return src_; }
  void* dst() const { return dst_; }
  cudaStream_t stream() const { return stream_; }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }

 private:
  int device_;
  void* src_ = nullptr;
  void* dst_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

using Kits = std::vector<std::unique_ptr<DeviceKit>>;

// Peer access between two devices while it lives, in each direction the hardware allows. Enabled
// per pair and disabled again, like p2pBandwidthLatencyTest: a device can map only a limited
// number of peers at once (8 on current drivers), fewer than the peers of a 16-GPU node.
class PeerAccessScope {
 public:
  PeerAccessScope(int a, int b, const Matrix<bool>& can_access)
      : a_(a), b_(b), a_to_b_(can_access[a][b]), b_to_a_(can_access[b][a]) {
    if (a_to_b_) Enable(a_, b_);
    if (b_to_a_) Enable(b_, a_);
  }

  ~PeerAccessScope() {
    if (b_to_a_) Disable(b_, a_);
    if (a_to_b_) Disable(a_, b_);
  }

  PeerAccessScope(const PeerAccessScope&) = delete;
  PeerAccessScope& operator=(const PeerAccessScope&) = delete;

  bool enabled() const { return a_to_b_ || b_to_a_; }

 private:
  static void Enable(int device, int peer) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaDeviceEnablePeerAccess(peer, 0));
  }
  static void Disable(int device, int peer) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaDeviceDisablePeerAccess(peer));
  }

  int a_, b_;
  bool a_to_b_, b_to_a_;
};

// ---------------------------------------------------------------------------------------------
// Queries and measurements

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string pci_bus_id;
};

struct Report {
  size_t bytes = 0;
  int iters = 0;
  std::vector<DeviceInfo> devices;
  Matrix<bool> can_access;
  Matrix<double> gbps_p2p_off;
  Matrix<double> gbps_p2p_on;
};

int CountDevices() {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}

DeviceInfo DescribeDevice(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  char bus_id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device));
  return DeviceInfo{device, prop.name, bus_id};
}

// can_access[d][p]: device d can map memory of peer p. False on the diagonal, as CUDA answers.
Matrix<bool> QueryPeerAccess(int count) {
  Matrix<bool> can_access(count, std::vector<bool>(count, false));
  for (int d = 0; d < count; ++d) {
    for (int p = 0; p < count; ++p) {
      if (d == p) continue;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, d, p));
      can_access[d][p] = can != 0;
    }
  }
  return can_access;
}

double GigabytesPerSecond(double bytes, float milliseconds) {
  // A zero reading means the copies finished within the event timer's resolution: not a rate.
  if (!(milliseconds > 0)) return std::nan("");
  return bytes / (static_cast<double>(milliseconds) * 1e-3) / 1e9;
}

// GB/s of `iters` back-to-back copies from `from`'s source buffer into `to`'s destination buffer,
// timed by events on a stream of the source device.
double TimeCopies(const DeviceKit& from, const DeviceKit& to, size_t bytes, int iters) {
  CUDA_CHECK(cudaSetDevice(from.device()));
  // Untimed warm-up: the first copy on a path may pay one-time setup (mappings, staging buffers).
  CUDA_CHECK(cudaMemcpyPeerAsync(to.dst(), to.device(), from.src(), from.device(), bytes, from.stream()));
  CUDA_CHECK(cudaStreamSynchronize(from.stream()));

  CUDA_CHECK(cudaEventRecord(from.start(), from.stream()));
  for (int i = 0; i < iters; ++i)
    CUDA_CHECK(cudaMemcpyPeerAsync(to.dst(), to.device(), from.src(), from.device(), bytes, from.stream()));
  CUDA_CHECK(cudaEventRecord(from.stop(), from.stream()));
  CUDA_CHECK(cudaEventSynchronize(from.stop()));

  float milliseconds = 0;
  CUDA_CHECK(cudaEventElapsedTime(&milliseconds, from.start(), from.stop()));
  return GigabytesPerSecond(static_cast<double>(bytes) * iters, milliseconds);
}

// The bandwidth matrix; with can_access given, peer access is enabled for each capable pair while
// its cell is timed (pairs that are not capable are timed on the staged path all the same).
Matrix<double> MeasureBandwidth(const Kits& kits, size_t bytes, int iters, const Matrix<bool>* can_access) {
  size_t n = kits.size();
  Matrix<double> gbps(n, std::vector<double>(n, 0.0));
  for (size_t src = 0; src < n; ++src) {
    for (size_t dst = 0; dst < n; ++dst) {
      std::optional<PeerAccessScope> peer;
      if (can_access != nullptr && src != dst)
        peer.emplace(static_cast<int>(src), static_cast<int>(dst), *can_access);
      gbps[src][dst] = TimeCopies(*kits[src], *kits[dst], bytes, iters);
    }
  }
  return gbps;
}

Report RunMeasurements(const Options& options) {
  Report report;
  report.bytes = options.bytes;
  report.iters = options.iters;
  int count = CountDevices();
  for (int d = 0; d < count; ++d) report.devices.push_back(DescribeDevice(d));
  report.can_access = QueryPeerAccess(count);

  Kits kits;
  for (int d = 0; d < count; ++d) kits.push_back(std::make_unique<DeviceKit>(d, options.bytes));
  report.gbps_p2p_off = MeasureBandwidth(kits, options.bytes, options.iters, nullptr);
  report.gbps_p2p_on = MeasureBandwidth(kits, options.bytes, options.iters, &report.can_access);
  return report;  // kits freed here, each on its own device
}

// ---------------------------------------------------------------------------------------------
// Output: tables

std::string DescribeBytes(size_t bytes) {
  constexpr struct { int shift; const char* unit; } kUnits[] = {{30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (const auto& u : kUnits)
    if (bytes >= (size_t{1} << u.shift) && bytes % (size_t{1} << u.shift) == 0)
      return std::to_string(bytes >> u.shift) + " " + u.unit;
  return std::to_string(bytes) + " bytes";
}

std::string GpuLabel(size_t device) { return "GPU" + std::to_string(device); }

void PrintDevices(const std::vector<DeviceInfo>& devices) {
  std::printf("Devices:\n");
  for (const DeviceInfo& d : devices)
    std::printf("  %-6s %-13s %s\n", GpuLabel(d.index).c_str(), d.pci_bus_id.c_str(), d.name.c_str());
}

// Laid out like `nvidia-smi topo -m`: a GPU per row and column, X on the diagonal.
void PrintPeerAccess(const Matrix<bool>& can_access) {
  size_t n = can_access.size();
  std::printf("\nPeer access (cudaDeviceCanAccessPeer; row: device, column: peer):\n%-6s", "");
  for (size_t p = 0; p < n; ++p) std::printf("%6s", GpuLabel(p).c_str());
  std::printf("\n");
  for (size_t d = 0; d < n; ++d) {
    std::printf("%-6s", GpuLabel(d).c_str());
    for (size_t p = 0; p < n; ++p) std::printf("%6s", d == p ? "X" : can_access[d][p] ? "1" : "0");
    std::printf("\n");
  }
}

// Prints one table line without the padding that right-aligned cells leave at its end.
void PrintLine(std::string line) {
  line.erase(line.find_last_not_of(' ') + 1);
  std::printf("%s\n", line.c_str());
}

// A cell is a right-aligned value plus a one-character marker column, so that marked and unmarked
// cells stay aligned.
std::string BandwidthCell(double gbps, bool mark) {
  char cell[32];
  if (std::isnan(gbps)) std::snprintf(cell, sizeof cell, "%8s%c", "n/a", mark ? '*' : ' ');
  else std::snprintf(cell, sizeof cell, "%8.2f%c", gbps, mark ? '*' : ' ');
  return cell;
}

void PrintBandwidth(const char* title, const Matrix<double>& gbps, const Matrix<bool>* staged) {
  size_t n = gbps.size();
  std::printf("\n%s (GB/s; row: source, column: destination):\n", title);
  char cell[32];
  std::string header = "      ";
  for (size_t dst = 0; dst < n; ++dst) {
    std::snprintf(cell, sizeof cell, "%8s ", GpuLabel(dst).c_str());
    header += cell;
  }
  PrintLine(header);
  bool any_staged = false;
  for (size_t src = 0; src < n; ++src) {
    std::snprintf(cell, sizeof cell, "%-6s", GpuLabel(src).c_str());
    std::string line = cell;
    for (size_t dst = 0; dst < n; ++dst) {
      bool mark = staged != nullptr && (*staged)[src][dst];
      any_staged |= mark;
      line += BandwidthCell(gbps[src][dst], mark);
    }
    PrintLine(line);
  }
  if (any_staged) std::printf("* no peer access between these devices: the copy was staged through host memory\n");
}

// Cells of the P2P-on matrix whose pair could not enable peer access in either direction.
Matrix<bool> StagedPairs(const Matrix<bool>& can_access) {
  size_t n = can_access.size();
  Matrix<bool> staged(n, std::vector<bool>(n, false));
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b) staged[a][b] = a != b && !can_access[a][b] && !can_access[b][a];
  return staged;
}

void PrintTables(const Report& report) {
  std::printf("peer_copy: %zu device(s); cudaMemcpyPeerAsync of %s, %d timed %s per cell\n\n",
              report.devices.size(), DescribeBytes(report.bytes).c_str(), report.iters,
              report.iters == 1 ? "copy" : "copies");
  PrintDevices(report.devices);
  PrintPeerAccess(report.can_access);
  PrintBandwidth("Unidirectional bandwidth, peer access disabled", report.gbps_p2p_off, nullptr);
  Matrix<bool> staged = StagedPairs(report.can_access);
  PrintBandwidth("Unidirectional bandwidth, peer access enabled", report.gbps_p2p_on, &staged);
}

// ---------------------------------------------------------------------------------------------
// Output: JSON

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

template <typename T, typename Format>
std::string JsonMatrix(const Matrix<T>& m, Format format) {
  std::string out = "[";
  for (size_t r = 0; r < m.size(); ++r) {
    out += r ? ",[" : "[";
    for (size_t c = 0; c < m[r].size(); ++c) out += (c ? "," : "") + format(m[r][c]);
    out += "]";
  }
  return out + "]";
}

void PrintJson(const Report& report) {
  std::string out = "{\"size_bytes\":" + std::to_string(report.bytes) + ",\"iters\":" + std::to_string(report.iters);
  out += ",\"devices\":[";
  for (size_t i = 0; i < report.devices.size(); ++i) {
    const DeviceInfo& d = report.devices[i];
    out += (i ? ",{" : "{") + std::string("\"index\":") + std::to_string(d.index) + ",\"name\":" + JsonString(d.name) +
           ",\"pci_bus_id\":" + JsonString(d.pci_bus_id) + "}";
  }
  out += "]";
  out += ",\"can_access\":" + JsonMatrix(report.can_access, [](bool b) { return std::string(b ? "1" : "0"); });
  out += ",\"gbps_p2p_off\":" + JsonMatrix(report.gbps_p2p_off, JsonNumber);
  out += ",\"gbps_p2p_on\":" + JsonMatrix(report.gbps_p2p_on, JsonNumber);
  out += "}";
  std::printf("%s\n", out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::string error;
  if (!ParseArgs(argc, argv, &options, &error)) {
    std::fprintf(stderr, "peer_copy: %s\n", error.c_str());
    return 2;
  }
  if (options.help) {
    PrintUsage();
    return 0;
  }
  Report report = RunMeasurements(options);
  if (options.json) PrintJson(report);
  else PrintTables(report);
  return 0;
}
