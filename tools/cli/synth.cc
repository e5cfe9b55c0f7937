#include "tools/cli/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "core/nccl_log.h"
#include "fmt/format.h"
#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"
#include "tools/cli/commands.h"

namespace p2ptrace::cli {
namespace {

// A compact layout (the format lets every region sit where its header offset says): the shim's
// files are sized for a whole job's recording; these hold just what was generated.
constexpr uint64_t kEnvOffset = 4096, kEnvSize = 4096, kCountersOffset = kEnvOffset + kEnvSize;
constexpr uint32_t kChunkSize = 16 * 1024;
static_assert(sizeof(p2ptrace_file_header) <= kEnvOffset);

// splitmix64: small, fast, and the same sequence on every platform for a seed.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }
  double Jitter(double fraction) { return 1 + fraction * (2 * Uniform() - 1); }
};

// What a scenario's links look like (GB/s are per direction, what a healthy H100 node measures).
struct Links {
  uint8_t direct;        // the direct path's class between two GPUs of a host
  bool staged;           // peer copies go through the host (peer access never enabled)
  double copy_gbps;      // cudaMemcpyPeer rate
  std::string nccl_intra;  // NCCL's transport text between two GPUs of a host
  double nccl_intra_gbps;
  bool p2p_disabled;     // NCCL_P2P_DISABLE=1 in the environment
};

constexpr double kNetGbps = 45;  // 400 Gb/s IB with GPUDirect RDMA
constexpr const char* kNetText = "NET/IB/0/GDRDMA";

Links LinksOf(const std::string& scenario) {
  if (scenario == "pcie") return {P2PTRACE_TRANSPORT_PCIE_P2P, false, 24, "P2P/CUMEM/read", 22, false};
  if (scenario == "fallback") return {P2PTRACE_TRANSPORT_NVLINK, true, 12, "SHM/direct/direct", 9, true};
  return {P2PTRACE_TRANSPORT_NVLINK, false, 370, "P2P/CUMEM/read", 330, false};
}

struct Layout {
  int ranks, hosts, ranks_per_host, gpus;
  std::vector<std::string> names;  // --host-names; empty: node0, node1, …
  int Host(int rank) const { return rank / ranks_per_host; }
  int Gpu(int rank) const { return rank % ranks_per_host; }
};

std::string HostName(int host, int hosts);
std::string HostName(const Layout& L, int host) {
  return static_cast<size_t>(host) < L.names.size() ? L.names[static_cast<size_t>(host)] : HostName(host, L.hosts);
}
std::string HostName(int host, int hosts) {
  int width = static_cast<int>(std::to_string(std::max(hosts - 1, 0)).size());
  return fmt::format("node{:0{}d}", host, width);
}

int BusNumber(int gpu) { return 0x10 + gpu * 6; }  // 32 GPUs stay below 0xff
std::string BusId(int gpu) { return fmt::format("0000:{:02x}:00.0", BusNumber(gpu)); }

int Pid(int rank) { return 10000 + rank; }
uint64_t CommPointer(int rank) { return 0x7f3a00000000ull + static_cast<uint64_t>(rank) * 0x10000; }

// One trace file being assembled in memory: header, environment, counters, then record chunks.
class TraceBuilder {
 public:
  explicit TraceBuilder(int max_devices)
      : max_devices_(max_devices), counters_(static_cast<size_t>(max_devices) * max_devices * 2) {
    chunks_offset_ = (kCountersOffset + counters_.size() * sizeof(p2ptrace_pair_counters) + 7) / 8 * 8;
  }
  p2ptrace_file_header& header() { return header_; }
  void AddEnv(const std::string& kv) { env_ += kv + '\0'; }
  p2ptrace_pair_counters& Counter(int src, int dst, int path) {
    return counters_[(static_cast<size_t>(src) * max_devices_ + static_cast<size_t>(dst)) * 2 + path];
  }
  uint32_t NextSeq() { return seq_++; }

  template <typename R>
  void Append(R& r, uint16_t type, uint32_t seq, uint64_t time_ns) {
    static_assert(sizeof(R) % 8 == 0);
    r.h.type = type;
    r.h.size = sizeof(R);
    r.h.seq = seq;
    r.h.time_ns = time_ns;
    if (chunks_.empty() || chunks_.back().size() + sizeof(R) > kChunkSize - sizeof(p2ptrace_chunk_header)) {
      chunks_.emplace_back();
      chunks_.back().reserve(kChunkSize);
    }
    chunks_.back().append(reinterpret_cast<const char*>(&r), sizeof(R));
  }

  // The whole file, as the shim leaves it after a clean exit.
  std::string Finish(uint32_t tid) {
    p2ptrace_file_header& h = header_;
    std::memcpy(h.magic, P2PTRACE_MAGIC, 8);
    h.major = P2PTRACE_FORMAT_MAJOR;
    h.minor = P2PTRACE_FORMAT_MINOR;
    h.header_size = sizeof h;
    h.chunk_size = kChunkSize;
    h.max_devices = static_cast<uint32_t>(max_devices_);
    h.env_offset = kEnvOffset;
    h.env_size = kEnvSize;
    h.counters_offset = kCountersOffset;
    h.counters_size = counters_.size() * sizeof(p2ptrace_pair_counters);
    h.chunks_offset = chunks_offset_;
    h.chunks_claimed = chunks_.size();
    h.file_size = chunks_offset_ + chunks_.size() * kChunkSize;
    std::string file(h.file_size, '\0');
    std::memcpy(file.data(), &h, sizeof h);
    std::memcpy(file.data() + kEnvOffset, env_.data(), std::min<size_t>(env_.size(), kEnvSize - 1));
    std::memcpy(file.data() + kCountersOffset, counters_.data(), h.counters_size);
    for (size_t c = 0; c < chunks_.size(); ++c) {
      p2ptrace_chunk_header ch{P2PTRACE_CHUNK_MAGIC, tid, chunks_[c].size()};
      char* at = file.data() + chunks_offset_ + c * kChunkSize;
      std::memcpy(at, &ch, sizeof ch);
      std::memcpy(at + sizeof ch, chunks_[c].data(), chunks_[c].size());
    }
    return file;
  }

 private:
  int max_devices_;
  p2ptrace_file_header header_{};
  std::string env_;
  std::vector<p2ptrace_pair_counters> counters_;
  uint64_t chunks_offset_;
  std::vector<std::string> chunks_;
  uint32_t seq_ = 0;
};

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return absl::PermissionDeniedError(path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      close(fd);
      return absl::ResourceExhaustedError(path + ": " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) return absl::ResourceExhaustedError(path + ": " + std::strerror(errno));
  return absl::OkStatus();
}

// One ring connection of a rank, as NCCL 2.28 prints it during init.
struct RingConn {
  int channel, conn_index;  // conn_index -1: the "Channel 00 :" form (no /N)
  int src, dst;             // ranks
  const char* direction;    // "send", "receive", "" (P2P/SHM lines carry no tag)
  std::string transport;
};

// Each rank's ring connections (NCCL_RUNTIME_CONNECT=0 order): to the next rank, and from the
// previous one when that one is on another host (NET lines are printed by both ends).
std::vector<RingConn> RingConns(const SynthOptions& o, const Layout& L, const Links& links, int rank) {
  std::vector<RingConn> out;
  int next = (rank + 1) % o.ranks, prev = (rank + o.ranks - 1) % o.ranks;
  for (int ch = 0; ch < 2; ++ch) {
    if (L.Host(prev) != L.Host(rank)) out.push_back({ch, 0, prev, rank, "receive", kNetText});
    if (L.Host(next) != L.Host(rank)) out.push_back({ch, 0, rank, next, "send", kNetText});
    else out.push_back({ch, links.p2p_disabled ? -1 : 0, rank, next, "", links.nccl_intra});
  }
  return out;
}

// NCCL 2.28's INIT lines for one rank of the job-wide communicator, with the ring connections
// printed during init: what the shim's log tap writes.
std::string NcclLog(const SynthOptions& o, const Layout& L, const Links& links, int rank, uint64_t comm_id) {
  std::string host = HostName(L, L.Host(rank));
  int dev = L.Gpu(rank), pid = Pid(rank);
  std::string prefix = fmt::format("{}:{}:{} [{}] NCCL INFO ", host, pid, pid, dev);
  std::string out = prefix + "NCCL version 2.28.9+cuda13.0\n";
  if (links.p2p_disabled) out += prefix + "NCCL_P2P_DISABLE set by environment to 1\n";
  auto init = [&](const char* what) {
    return fmt::format("{}ncclCommInitRank comm {:#x} rank {} nranks {} cudaDev {} nvmlDev {} busId {:x} commId {:#x} - {}\n",
                       prefix, CommPointer(rank), rank, o.ranks, dev, dev, BusNumber(dev) << 12, comm_id, what);
  };
  out += init("Init START");
  for (const RingConn& c : RingConns(o, L, links, rank))
    out += fmt::format("{}Channel {:02d}{} : {}[{}] -> {}[{}]{} via {}\n", prefix, c.channel,
                       c.conn_index < 0 ? "" : fmt::format("/{}", c.conn_index), c.src, L.Gpu(c.src), c.dst, L.Gpu(c.dst),
                       *c.direction ? fmt::format(" [{}]", c.direction) : "", c.transport);
  out += prefix + fmt::format("Connected all rings, use ring PXN 0 GDR {}\n", L.hosts > 1 ? 1 : 0);
  out += init("Init COMPLETE");
  return out;
}

// The program locations a --stacks job's records name (the same in every rank, so the report
// merges them), innermost frame first, as the shim describes a call site.
constexpr const char* kSiteFrames[] = {
    "",
    "train+0x4a1f7 (exchange_halo(float*, float*, unsigned long)+0x5b)\n"
    "train+0x4b3a1 (step(int)+0x111)\ntrain+0x3f100 (main+0x2d0)\nlibc.so.6+0x2724d (__libc_start_main+0xcd)",
    "libnccl.so.2+0x5e1c3 (ncclAllReduce+0x53)\ntrain+0x4b41f (step(int)+0x18f)\ntrain+0x3f100 (main+0x2d0)\n"
    "libc.so.6+0x2724d (__libc_start_main+0xcd)",
    "train+0x4c00b (ring_pass(float*, int)+0x7b)\ntrain+0x4b4e2 (step(int)+0x252)\ntrain+0x3f100 (main+0x2d0)\n"
    "libc.so.6+0x2724d (__libc_start_main+0xcd)"};
enum SynthSite : uint32_t { kSiteCopies = 1, kSiteAllReduce = 2, kSiteSendRecv = 3 };

// One rank's process: peer-access setup, then `events` timed operations.
std::string RankTrace(const SynthOptions& o, const Layout& L, const Links& links, int rank, uint64_t comm_id) {
  Rng rng{o.seed * 0x100000001b3ull + static_cast<uint64_t>(rank)};
  int host = L.Host(rank), dev = L.Gpu(rank), gpus = L.gpus;
  TraceBuilder b(gpus);
  p2ptrace_file_header& h = b.header();
  h.state = P2PTRACE_STATE_EXITED;
  h.capture_flags = P2PTRACE_CAPTURE_CUDART_13 | P2PTRACE_CAPTURE_NVML_LINKS;
  h.cuda_runtime_version = h.cuda_driver_version = 13000;
  h.device_count = gpus;
  h.pid = Pid(rank);
  h.ppid = 9999;
  h.rank = rank;
  h.local_rank = dev;
  h.world_size = o.ranks;
  h.local_world_size = L.ranks_per_host;
  // Each host's monotonic clock started at its own boot; the wall clock is shared (NTP).
  h.start_monotonic_ns = (1000ull + 37ull * static_cast<uint64_t>(host)) * 1000000000ull + rng.Next() % 1000000;
  h.start_realtime_ns = o.start_time * 1000000000ull + rng.Next() % 5000000;
  std::snprintf(h.host, sizeof h.host, "%s", HostName(L, host).c_str());
  std::snprintf(h.boot_id, sizeof h.boot_id, "synth-boot-%d", host);
  if (!o.job_id.empty()) std::snprintf(h.job_id, sizeof h.job_id, "%s", o.job_id.c_str());
  else std::snprintf(h.job_id, sizeof h.job_id, "synth-%s-%llu", o.scenario.c_str(), static_cast<unsigned long long>(o.seed));
  std::snprintf(h.exe, sizeof h.exe, "p2ptrace-synth");
  h.sample_first = UINT32_MAX;
  h.sample_every = 1;
  for (int g = 0; g < gpus; ++g) {
    std::snprintf(h.bus_id[g], sizeof h.bus_id[g], "%s", BusId(g).c_str());
    for (int p = 0; p < gpus; ++p) {
      if (p == g) continue;
      h.direct_transport[g][p] = links.direct;
      h.nvml_p2p_status[g][p] = 1;  // NVML: OK
    }
  }
  b.AddEnv(fmt::format("RANK={}", rank));
  b.AddEnv(fmt::format("LOCAL_RANK={}", dev));
  b.AddEnv(fmt::format("WORLD_SIZE={}", o.ranks));
  b.AddEnv("P2PTRACE_NCCL_TAP=1");
  for (std::string kv : o.env) {  // --env: {host} and {rank} are this rank's
    for (auto [key, value] : {std::pair<std::string, std::string>{"{host}", HostName(L, host)},
                              std::pair<std::string, std::string>{"{rank}", std::to_string(rank)}})
      for (size_t at; (at = kv.find(key)) != std::string::npos;) kv.replace(at, key.size(), value);
    b.AddEnv(kv);
  }
  if (links.p2p_disabled) b.AddEnv("NCCL_P2P_DISABLE=1");

  uint64_t t = h.start_monotonic_ns + 2000000;
  auto step = [&](uint64_t duration) { t += duration + 20000 + rng.Next() % 60000; };
  if (o.stacks) {
    for (uint32_t id : {kSiteCopies, kSiteAllReduce, kSiteSendRecv}) {
      p2ptrace_text_record tr{};
      tr.block = id;
      tr.parts = 1;
      tr.kind = P2PTRACE_TEXT_CALL_SITE;
      tr.tag = id;
      tr.length = static_cast<uint16_t>(std::strlen(kSiteFrames[id]));
      std::memcpy(tr.text, kSiteFrames[id], tr.length);
      b.Append(tr, P2PTRACE_RECORD_TEXT, 0, t);
    }
  }
  auto site = [&](uint32_t id) { return o.stacks ? id : 0u; };
  // The application asks, then (unless it forgets: the fallback) enables peer access to every
  // other GPU of its host.
  for (int p = 0; p < gpus; ++p) {
    if (p == dev) continue;
    p2ptrace_peer_record q{};
    q.api = P2PTRACE_API_cudaDeviceCanAccessPeer;
    q.device = static_cast<int8_t>(dev);
    q.peer = static_cast<int8_t>(p);
    q.value = 1;
    b.Append(q, P2PTRACE_RECORD_PEER, b.NextSeq(), t);
    step(1000);
    if (links.staged) continue;
    p2ptrace_peer_record e{};
    e.api = P2PTRACE_API_cudaDeviceEnablePeerAccess;
    e.device = static_cast<int8_t>(dev);
    e.peer = static_cast<int8_t>(p);
    b.Append(e, P2PTRACE_RECORD_PEER, b.NextSeq(), t);
    step(1000);
  }
  bool nccl = o.ranks > 1;
  if (nccl) {
    p2ptrace_nccl_comm_record c{};
    c.comm = CommPointer(rank);
    c.id_hash = comm_id;
    c.rank = rank;
    c.nranks = o.ranks;
    c.cuda_device = dev;
    c.api = P2PTRACE_NCCL_CommInitRank;
    std::snprintf(c.bus_id, sizeof c.bus_id, "%s", BusId(dev).c_str());
    b.Append(c, P2PTRACE_RECORD_NCCL_COMM, b.NextSeq(), t);
    // The connection lines the shim reads from its log tap during init (P2PTRACE_RECORD_NCCL_CONN).
    uint32_t line = 3;
    for (const RingConn& rc : RingConns(o, L, links, rank)) {
      p2ptrace_nccl_conn_record r{};
      std::snprintf(r.comm, sizeof r.comm, "%s", fmt::format("{:#x}", CommPointer(rank)).c_str());
      std::snprintf(r.comm_id, sizeof r.comm_id, "%s", fmt::format("{:#x}", comm_id).c_str());
      std::snprintf(r.keyword, sizeof r.keyword, "Channel");
      r.channel = rc.channel;
      r.conn_index = rc.conn_index;
      r.src_rank = rc.src;
      r.dst_rank = rc.dst;
      r.direction = std::string(rc.direction) == "send"      ? P2PTRACE_NCCL_CONN_SEND
                    : std::string(rc.direction) == "receive" ? P2PTRACE_NCCL_CONN_RECEIVE
                                                             : P2PTRACE_NCCL_CONN_UNTAGGED;
      r.transport_class = static_cast<uint8_t>(ClassifyNcclTransport(rc.transport));
      r.line = line++;
      std::snprintf(r.src_dev, sizeof r.src_dev, "%d", L.Gpu(rc.src));
      std::snprintf(r.dst_dev, sizeof r.dst_dev, "%d", L.Gpu(rc.dst));
      std::snprintf(r.transport, sizeof r.transport, "%s", rc.transport.c_str());
      b.Append(r, P2PTRACE_RECORD_NCCL_CONN, b.NextSeq(), t);
    }
    step(5000000);
  }
  int next = (rank + 1) % o.ranks, prev = (rank + o.ranks - 1) % o.ranks;
  auto link_gbps = [&](int a, int c) { return L.Host(a) == L.Host(c) ? links.nccl_intra_gbps : kNetGbps; };
  double ring_gbps = L.hosts > 1 ? std::min(links.nccl_intra_gbps, kNetGbps) : links.nccl_intra_gbps;

  for (int i = 0; i < o.events; ++i) {
    int slot = i % 8;
    bool copy = gpus > 1 && (!nccl || slot < 4 || slot == 7);
    uint32_t seq = b.NextSeq();
    if (copy) {
      int peer = (dev + 1 + static_cast<int>(rng.Next() % static_cast<uint64_t>(gpus - 1))) % gpus;
      uint64_t bytes = (1ull << 20) << (rng.Next() % 4);
      uint64_t ns = static_cast<uint64_t>(static_cast<double>(bytes) / (links.copy_gbps * rng.Jitter(0.05)));
      uint8_t transport = links.staged ? uint8_t{P2PTRACE_TRANSPORT_HOST_STAGED} : links.direct;
      p2ptrace_copy_record r{};
      r.bytes = bytes;
      r.api = P2PTRACE_API_cudaMemcpyPeerAsync;
      r.src_device = static_cast<int8_t>(dev);
      r.dst_device = static_cast<int8_t>(peer);
      r.transport = transport;
      r.flags = P2PTRACE_COPY_ASYNC | P2PTRACE_COPY_TIMED;
      r.site = site(kSiteCopies);
      b.Append(r, P2PTRACE_RECORD_COPY, seq, t);
      p2ptrace_timing_record tr{};
      tr.bytes = bytes;
      tr.duration_ns = ns;
      tr.src_device = r.src_device;
      tr.dst_device = r.dst_device;
      tr.transport = transport;
      b.Append(tr, P2PTRACE_RECORD_TIMING, seq, t + ns);
      p2ptrace_pair_counters& c = b.Counter(dev, peer, links.staged ? 1 : 0);
      ++c.calls;
      c.bytes += bytes;
      ++c.timed_calls;
      c.timed_bytes += bytes;
      c.timed_ns += ns;
      step(ns);
      continue;
    }
    if (!nccl) continue;
    p2ptrace_nccl_op_record r{};
    r.comm = CommPointer(rank);
    r.peer = -1;
    r.flags = P2PTRACE_NCCL_TIMED;
    double gbps;
    if (slot == 4) {
      r.api = P2PTRACE_NCCL_Send, r.peer = next, r.bytes = 4ull << 20;
      gbps = link_gbps(rank, next);
    } else if (slot == 5) {
      r.api = P2PTRACE_NCCL_Recv, r.peer = prev, r.bytes = 4ull << 20;
      gbps = link_gbps(prev, rank);
    } else {  // ring allreduce: each link carries 2(n-1)/n of the buffer
      r.api = P2PTRACE_NCCL_AllReduce, r.bytes = 32ull << 20;
      gbps = ring_gbps * o.ranks / (2.0 * (o.ranks - 1));
    }
    uint64_t ns = static_cast<uint64_t>(static_cast<double>(r.bytes) / (gbps * rng.Jitter(0.05)));
    r.site = site(r.api == P2PTRACE_NCCL_AllReduce ? kSiteAllReduce : kSiteSendRecv);
    b.Append(r, P2PTRACE_RECORD_NCCL_OP, seq, t);
    p2ptrace_timing_record tr{};
    tr.bytes = r.bytes;
    tr.duration_ns = ns;
    tr.src_device = tr.dst_device = -1;
    b.Append(tr, P2PTRACE_RECORD_TIMING, seq, t + ns);
    step(ns);
  }
  h.end_monotonic_ns = t;
  if (o.stop_rank >= 0) {  // hung: the others wait in one more allreduce; stop_rank never called it
    h.state = P2PTRACE_STATE_RUNNING;
    h.end_monotonic_ns = 0;
    h.heartbeat_period_ms = 1000;
    h.heartbeat_ns = rank == o.stop_rank ? t : t + 60ull * 1000000000ull;
    if (rank != o.stop_rank) {
      p2ptrace_nccl_op_record r{};
      r.comm = CommPointer(rank);
      r.peer = -1;
      r.api = P2PTRACE_NCCL_AllReduce;
      r.bytes = 32ull << 20;
      r.result = P2PTRACE_RESULT_PENDING;
      b.Append(r, P2PTRACE_RECORD_NCCL_OP, 0, t + 1000);
    }
  }
  return b.Finish(static_cast<uint32_t>(h.pid));
}

}  // namespace

absl::Status WriteSyntheticJob(const SynthOptions& o) {
  if (o.out.empty()) return absl::InvalidArgumentError("--out: a directory is needed");
  if (o.ranks < 1 || o.ranks > 1000000) return absl::InvalidArgumentError(fmt::format("--ranks {}: 1 to 1000000", o.ranks));
  if (o.stop_rank < -1 || o.stop_rank >= o.ranks)
    return absl::InvalidArgumentError(fmt::format("--stop-rank {}: a rank of the job, 0 to {}", o.stop_rank, o.ranks - 1));
  if (o.events < 0 || o.events > 100000000)
    return absl::InvalidArgumentError(fmt::format("--events {}: 0 to 100000000", o.events));
  if (o.gpus_per_host < 1 || o.gpus_per_host > P2PTRACE_MAX_DEVICES)
    return absl::InvalidArgumentError(fmt::format("--gpus-per-host {}: 1 to {}", o.gpus_per_host, P2PTRACE_MAX_DEVICES));
  if (o.scenario != "healthy" && o.scenario != "pcie" && o.scenario != "fallback")
    return absl::InvalidArgumentError("--scenario " + o.scenario + ": one of healthy, pcie, fallback");
  if (o.ranks == 1 && o.gpus_per_host == 1)
    return absl::InvalidArgumentError("one rank on a one-GPU host moves nothing between GPUs: raise --ranks or --gpus-per-host");
  Layout L;
  L.ranks = o.ranks;
  L.gpus = o.gpus_per_host;
  L.hosts = o.hosts > 0 ? o.hosts : (o.ranks + o.gpus_per_host - 1) / o.gpus_per_host;
  if (o.hosts < 0 || L.hosts > o.ranks)
    return absl::InvalidArgumentError(fmt::format("--hosts {}: 1 to the number of ranks ({})", o.hosts, o.ranks));
  L.ranks_per_host = (o.ranks + L.hosts - 1) / L.hosts;
  if (L.ranks_per_host > o.gpus_per_host)
    return absl::InvalidArgumentError(fmt::format("{} ranks on {} hosts need {} GPUs per host; --gpus-per-host is {}",
                                                  o.ranks, L.hosts, L.ranks_per_host, o.gpus_per_host));
  L.hosts = (o.ranks + L.ranks_per_host - 1) / L.ranks_per_host;  // the hosts that actually hold ranks
  for (size_t at = 0; !o.host_names.empty() && at <= o.host_names.size();) {
    size_t comma = std::min(o.host_names.find(',', at), o.host_names.size());
    L.names.push_back(o.host_names.substr(at, comma - at));
    at = comma + 1;
  }
  if (!L.names.empty() && static_cast<int>(L.names.size()) < L.hosts)
    return absl::InvalidArgumentError(fmt::format("--host-names names {} host{}; the job has {}", L.names.size(),
                                                  L.names.size() == 1 ? "" : "s", L.hosts));
  for (const std::string& n : L.names)
    if (n.empty() || n.size() >= sizeof(p2ptrace_file_header{}.host) || n.find_first_of("/ \t") != std::string::npos)
      return absl::InvalidArgumentError("--host-names: '" + n + "' is not a host name");
  for (const std::string& kv : o.env)
    if (kv.find('=') == std::string::npos || kv.front() == '=')
      return absl::InvalidArgumentError("--env " + kv + ": NAME=VALUE");
  if (o.start_time > 4102444800ull) return absl::InvalidArgumentError("--start-time: seconds since 1970, before 2100");
  if (o.job_id.size() >= sizeof(p2ptrace_file_header{}.job_id))
    return absl::InvalidArgumentError("--job-id: at most 63 characters");
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) return absl::PermissionDeniedError(o.out + ": " + ec.message());
  // Another job's traces left there would merge into this one's report.
  for (std::filesystem::directory_iterator it(o.out, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".p2ptrace")
      return absl::AlreadyExistsError(o.out + ": already holds traces (" + it->path().filename().string() +
                                      "); give an empty or new directory");
  Links links = LinksOf(o.scenario);
  uint64_t comm_id = (o.seed * 0x9e3779b97f4a7c15ull) | 1;
  for (int rank = 0; rank < o.ranks; ++rank) {
    std::string host = HostName(L, L.Host(rank));
    std::string stem = fmt::format("{}/{}.r{}.p{}", o.out, host, rank, Pid(rank));
    if (absl::Status s = WriteFile(stem + ".p2ptrace", RankTrace(o, L, links, rank, comm_id)); !s.ok()) return s;
    if (o.ranks > 1)
      if (absl::Status s = WriteFile(fmt::format("{}/nccl.{}.{}.log", o.out, host, Pid(rank)),
                                     NcclLog(o, L, links, rank, comm_id));
          !s.ok())
        return s;
  }
  return absl::OkStatus();
}

int RunSynth(const SynthOptions& options, std::ostream& out, std::ostream& err) {
  if (absl::Status s = WriteSyntheticJob(options); !s.ok()) {
    err << "p2ptrace synth: " << s.message() << "\n";
    return 2;
  }
  out << fmt::format("p2ptrace synth: {} rank{} × {} events ({} scenario, seed {}) written to {}\n", options.ranks,
                     options.ranks == 1 ? "" : "s", options.events, options.scenario, options.seed, options.out);
  return 0;
}

namespace {

class SynthCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("--ranks", o_.ranks, "ranks (one process and one GPU each)")->required();
    c.add_option("--events", o_.events, "timed operations per rank (copies and NCCL calls)")->required();
    c.add_option("--out", o_.out, "directory to write into (created when missing)")->required();
    c.add_option("--hosts", o_.hosts, "hosts (default: as few as --gpus-per-host allows)");
    c.add_option("--gpus-per-host", o_.gpus_per_host, "GPUs per host")->capture_default_str();
    c.add_option("--seed", o_.seed, "the same seed writes the same files")->capture_default_str();
    c.add_option("--stop-rank", o_.stop_rank, "a job that hung: this rank stopped, the others wait in "
                 "one more allreduce (the report's stopped finding)");
    c.add_option("--scenario", o_.scenario,
                 "healthy (NVLink, NCCL P2P and IB GDR), pcie (PCIe P2P), fallback (peer access never enabled: "
                 "host-staged copies; NCCL_P2P_DISABLE=1: NCCL over SHM)")
        ->capture_default_str();
    c.add_flag("--stacks", o_.stacks,
               "call sites, as P2PTRACE_STACKS records them: copies, allreduce and send/recv from three program "
               "locations");
    c.add_option("--host-names", o_.host_names, "the hosts' names, comma-separated (default node0, …)");
    c.add_option("--job-id", o_.job_id, "the job id the trace headers carry (default synth-SCENARIO-SEED)");
    c.add_option("--env", o_.env, "NAME=VALUE in every rank's recorded environment (repeatable; "
                 "{host} and {rank} are the rank's), e.g. SLURM_JOB_ID=42");
    c.add_option("--start-time", o_.start_time, "when the job started, seconds since 1970 (UTC)")
        ->capture_default_str();
    c.footer(
        "Writes one trace per rank in the real format (trace_format.h) and the NCCL log its shim would have tapped, so that\n"
        "report, html, export and diff run on them. Ranks 0..N-1 fill hosts in order; each rank copies to the other\n"
        "GPUs of its host and runs an NCCL ring (send to rank+1, recv from rank-1, allreduce).");
  }
  int Run() override { return RunSynth(o_, std::cout, std::cerr); }

 private:
  SynthOptions o_;
};

}  // namespace

std::unique_ptr<Command> MakeSynthCommand() { return std::make_unique<SynthCommand>(); }

}  // namespace p2ptrace::cli
