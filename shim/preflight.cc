#include "shim/preflight.h"

#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <mutex>
#include <set>
#include <thread>

#include "core/net_diagnosis.h"
#include "core/node_probe.h"
#include "core/warning_lines.h"
#include "core/preflight_block.h"
#include "core/printable.h"
#include "core/vocabulary.h"
#include "shim/identity.h"
#include "shim/record/process_uses.h"
#include "shim/nccl_log_tap.h"
#include "probe/probe.h"
#include "shim/link_readings.h"
#include "shim/record/text_block.h"
#include "shim/record/trace_dir.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

std::atomic<int> g_preflight{0};  // 0 not yet, 1 running or done
std::mutex g_mu;                  // the probe result below, and the copy-route warnings
NodeProbe* g_probe = nullptr;     // kept for later warnings about the application's copies
Prediction* g_nccl_prediction = nullptr;  // the job start's, with NCCL's rules (made once, under g_mu)

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return *end == '\0' && x >= 0 && x < (1 << 30) ? static_cast<int>(x) : fallback;
}

void WriteStderr(const std::string& line) {
  // Host names and values from the node and the other ranks, escaped: nothing can act on the terminal.
  std::string s = Printable(line, false) + "\n";
  ssize_t ignored = write(2, s.data(), s.size());
  (void)ignored;
}

// The block into the trace (in parts, as every text block).
void RecordText(const std::string& text) { WriteTextBlock(P2PTRACE_TEXT_PREFLIGHT, 0, text); }

// Whether this process prints: P2PTRACE_WARN=rank always; node only the first process of a node
// (an O_EXCL marker in the trace directory, keyed by what NCCL calls a node); off never.
bool ShouldPrint(const NodeProbe& p, const std::string& what) {
  const Config& c = TraceWriter::config();
  if (c.warn == "off") return false;
  if (c.warn == "rank") return true;
  ScopedFd dir = OpenTraceDir(c.dir);
  ScopedFd marks = dir.ok() ? OpenTraceSubdir(dir.get(), ".p2ptrace-warned") : ScopedFd();
  if (!marks.ok()) return true;  // cannot coordinate: better twice than never
  std::string key = p.hostname + "-" + p.boot_id + "-" + (p.shm_dev ? std::to_string(*p.shm_dev) : "") + "-" + what;
  for (char& ch : key)
    if (ch == '/' || ch == '\0') ch = '_';
  if (CreateTraceFile(marks.get(), key.c_str(), O_WRONLY).ok()) return true;
  return errno != EEXIST;
}

// --- ranks of the job: who drives which GPU, under which host identity ------------------------------

using Identity = RankIdentity;

ScopedFd OpenIdentityDir() {
  ScopedFd dir = OpenTraceDir(TraceWriter::config().dir);
  return dir.ok() ? OpenTraceSubdir(dir.get(), ".p2ptrace-ranks") : ScopedFd();
}

void Publish(const Identity& id) {
  ScopedFd ranks = OpenIdentityDir();
  if (!ranks.ok()) return;
  std::string text = SerializeIdentity(id);
  std::string final_name = std::to_string(id.pid) + ".id", tmp = final_name + ".tmp";
  unlinkat(ranks.get(), tmp.c_str(), 0);  // an earlier process of this pid's, in this directory of ours
  ScopedFd fd = CreateTraceFile(ranks.get(), tmp.c_str(), O_WRONLY);
  if (!fd.ok()) return;
  bool whole = write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  fd = ScopedFd();
  if (whole) renameat(ranks.get(), tmp.c_str(), ranks.get(), final_name.c_str());  // readers see whole files only
  else unlinkat(ranks.get(), tmp.c_str(), 0);
}

std::vector<Identity> ReadIdentities() {
  std::vector<Identity> out;
  ScopedFd ranks = OpenIdentityDir();
  int listing = ranks.ok() ? dup(ranks.get()) : -1;  // fdopendir owns the one it is given
  DIR* d = listing >= 0 ? fdopendir(listing) : nullptr;
  if (d == nullptr) {
    if (listing >= 0) close(listing);
    return out;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 4 || name.compare(name.size() - 3, 3, ".id") != 0) continue;
    ScopedFd fd = OpenOwnFile(ranks.get(), name.c_str(), O_RDONLY);
    if (!fd.ok()) continue;
    char buf[1024];
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n <= 0 || n == sizeof buf) continue;  // empty, or longer than any the shim writes
    Identity id;
    if (!ParseIdentity(std::string_view(buf, static_cast<size_t>(n)), &id) || name != std::to_string(id.pid) + ".id")
      continue;
    out.push_back(std::move(id));
    if (out.size() > 4096) break;
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const Identity& a, const Identity& b) { return a.rank < b.rank || (a.rank == b.rank && a.pid < b.pid); });
  return out;
}

// Every rank of the job that published, waiting (bounded) for WORLD_SIZE of them: ranks call the
// same init at about the same time, so the wait is short when they share the trace directory and
// capped when they do not (other nodes).
std::vector<Identity> ExchangeIdentities(const Identity& self) {
  Publish(self);
  int world = EnvInt("WORLD_SIZE", 1);
  std::vector<Identity> all = ReadIdentities();
  if (world <= 1) return all;
  int wait_ms = TraceWriter::config().rank_wait_ms;
  for (int waited = 0; static_cast<int>(all.size()) < world && waited < wait_ms; waited += 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    all = ReadIdentities();
  }
  return all;
}

// Folds the other ranks into the probe: GPUs of this node get their rank; a rank on the same
// machine (boot id) under another hostname or /dev/shm is a separate container; another boot id
// is another node. The communicator becomes the GPUs the ranks drive.
void MergeIdentities(const Identity& self, const std::vector<Identity>& ids, NodeProbe* p) {
  std::vector<int> used;
  int next_foreign = 100;
  bool local_unknown = false;  // a rank of this node whose GPU is not known (its runtime had not answered)
  for (const Identity& id : ids) {
    bool same_machine = id.boot_id == self.boot_id;
    bool same_node = same_machine && id.host == self.host && id.shm_dev == self.shm_dev;
    if (id.bus.empty()) {
      local_unknown |= same_node;
      continue;
    }
    ProbedGpu* g = nullptr;
    // Only this machine's own GPUs: another node's GPU may have the same bus id (identical boards).
    if (same_machine)
      for (ProbedGpu& x : p->gpus)
        if (x.bus_id == id.bus && x.index < 100 && g == nullptr) g = &x;
    if (g == nullptr) {
      if (same_node) continue;  // a GPU this node's NVML does not list: nothing to pair
      ProbedGpu foreign;
      foreign.index = next_foreign++;
      foreign.bus_id = id.bus;
      foreign.cuda = id.gpu;  // shown as "<host> GPU<n>", its own node's number
      p->gpus.push_back(foreign);
      g = &p->gpus.back();
    }
    if (g->rank < 0 || id.pid == self.pid) g->rank = id.rank;
    if (!same_node) {
      g->hostname = id.host;
      g->boot_id = id.boot_id;
      if (id.shm_dev >= 0) g->shm_dev = static_cast<uint64_t>(id.shm_dev);
      if (id.shm_mb >= 0) g->shm_bytes = static_cast<uint64_t>(id.shm_mb) << 20;
    }
    if (std::find(used.begin(), used.end(), g->index) == used.end()) used.push_back(g->index);
  }
  std::sort(used.begin(), used.end());
  // The GPUs the job's processes drive, even one (then no pair): never the node's others. When a
  // rank of this node did not say which GPU it drives, every GPU of the node may be the job's.
  if (!used.empty() && !local_unknown) p->communicator = used;
}

std::string BusOfDevice(const CudaRuntime* rt, int device) {
  if (rt == nullptr || device < 0) return "";
  char bus[32] = {};
  if (rt->DeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) return "";
  return NormalizeBusId(bus);
}



// The physical GPU (the probe's NVML index) of a CUDA ordinal of this process, without asking
// CUDA: through CUDA_VISIBLE_DEVICES (indices, or UUIDs and their prefixes), else CUDA's ordinals in
// NVML's order (PCI order: CUDA's own with CUDA_DEVICE_ORDER=PCI_BUS_ID or identical GPUs). -1 unknown.
int PhysicalOfOrdinal(const NodeProbe& p, int ordinal) {
  if (ordinal < 0) return -1;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) return ordinal < static_cast<int>(p.gpus.size()) ? p.gpus[static_cast<size_t>(ordinal)].index : -1;
  std::vector<std::string> items;
  for (const char* at = v;;) {
    const char* comma = std::strchr(at, ',');
    items.emplace_back(at, comma ? static_cast<size_t>(comma - at) : std::strlen(at));
    if (comma == nullptr) break;
    at = comma + 1;
  }
  if (ordinal >= static_cast<int>(items.size())) return -1;
  std::string item = items[static_cast<size_t>(ordinal)];
  while (!item.empty() && item.front() == ' ') item.erase(0, 1);
  if (!item.empty() && item.find_first_not_of("0123456789") == std::string::npos) {
    int index = std::atoi(item.c_str());
    for (const ProbedGpu& g : p.gpus)
      if (g.index == index) return index;
    return -1;
  }
  if (item.rfind("GPU-", 0) == 0)
    for (const ProbedGpu& g : p.gpus)
      if (!g.uuid.empty() && g.uuid.rfind(item, 0) == 0) return g.index;
  return -1;  // a MIG instance or something CUDA would not accept: not guessed
}

// NCCL's version for its rules: the loaded NCCL's (its real ncclGetVersion, asked at the process's
// first NCCL call); when that did not answer, the newest rules, and the lines say they were assumed.
void NoteNcclVersion(NodeProbe* p) {
  int code = LoadedNcclVersion();
  if (code <= 0) {
    p->nccl_version_note = "NCCL's version unknown (ncclGetVersion did not answer), its newest rules assumed";
    return;
  }
  // 2.9 on: 2*10000 + minor*100 + patch; before: 2*1000 + minor*100 + patch.
  NcclVersion v = code >= 10000 ? NcclVersion{code / 10000, code % 10000 / 100, code % 100}
                                : NcclVersion{code / 1000, code % 1000 / 100, code % 100};
  p->nccl_version = v;
}

// `devices`: the CUDA ordinals of a one-process communicator (ncclCommInitAll), when known.
// `cuda_device`: this process's device when no runtime could be asked (after an NCCL init), else -1.
void Run(const CudaRuntime* rt, bool nccl_rules, const std::vector<int>* devices = nullptr, int cuda_device = -1) {
  const Config& c = TraceWriter::config();
  // An untraced process (its trace directory unusable, as the one warning said) stays silent: its
  // output is exactly the bare run's.
  if (c.disabled || !TraceWriter::Ready()) return;
  probe::ProbeOptions o;
  o.sysroot = c.sysroot;
  o.nvml_timeout_ms = c.nvml_timeout_ms;
  probe::CudaQueries q;
  if (rt != nullptr && RuntimeAnswered(*rt)) {
    q.GetDeviceCount = reinterpret_cast<int (*)(int*)>(rt->GetDeviceCount);
    q.DeviceGetPCIBusId = reinterpret_cast<int (*)(char*, int, int)>(rt->DeviceGetPCIBusId);
    q.CanAccessPeer = reinterpret_cast<int (*)(int*, int, int)>(rt->CanAccessPeer);
    q.GetP2PAttribute = reinterpret_cast<int (*)(int*, int, int, int)>(rt->GetP2PAttribute);
    o.cuda = &q;
  }
  auto* probe = new NodeProbe(p2ptrace::probe::GatherNodeProbe(o));
  if (nccl_rules) NoteNcclVersion(probe);
  Identity self;
  self.host = probe->hostname;
  self.boot_id = probe->boot_id;
  self.shm_dev = probe->shm_dev ? static_cast<long>(*probe->shm_dev) : -1;
  self.shm_mb = probe->shm_bytes ? static_cast<long>(*probe->shm_bytes >> 20) : -1;
  self.rank = EnvInt("RANK", -1);
  self.pid = static_cast<int>(getpid());
  int device = -1;
  if (rt != nullptr && RuntimeAnswered(*rt) && rt->GetDevice(&device) == cudaSuccess) self.bus = BusOfDevice(rt, device);
  if (self.bus.empty() && cuda_device >= 0)
    if (const ProbedGpu* g = probe->Gpu(PhysicalOfOrdinal(*probe, cuda_device))) self.bus = g->bus_id;
  for (const ProbedGpu& g : probe->gpus)
    if (!self.bus.empty() && g.bus_id == self.bus) self.gpu = g.index;
  if (EnvInt("WORLD_SIZE", 1) > 1) MergeIdentities(self, ExchangeIdentities(self), probe);
  if (probe->communicator.empty()) {  // one process driving several GPUs: the ones it uses or sees
    for (const ProbedGpu& g : probe->gpus)
      if (g.cuda >= 0 && (devices == nullptr || std::find(devices->begin(), devices->end(), g.cuda) != devices->end()))
        probe->communicator.push_back(g.index);
    // No runtime to ask (NCCL's init was the first call): CUDA's ordinals mapped without CUDA.
    if (probe->communicator.empty() && devices != nullptr)
      for (int d : *devices)
        if (int index = PhysicalOfOrdinal(*probe, d); index >= 0) probe->communicator.push_back(index);
    // One process, one GPU known (a rank of a job without WORLD_SIZE): no pair of its own to judge.
    if (probe->communicator.empty() && self.gpu >= 0) probe->communicator.push_back(self.gpu);
    // Nothing known of the GPUs the process uses: the GPUs it may use (CUDA_VISIBLE_DEVICES).
    if (probe->communicator.empty() && std::getenv("CUDA_VISIBLE_DEVICES") != nullptr)
      for (int d = 0; d < static_cast<int>(probe->gpus.size()); ++d)
        if (int index = PhysicalOfOrdinal(*probe, d); index >= 0) probe->communicator.push_back(index);
  }
  // A process that has not called NCCL moves data with CUDA copies: NCCL's rules (P2P level, SHM,
  // network) would warn about paths it never takes.
  bool cuda_copies = !nccl_rules;
  Prediction pred = PredictNode(*probe, cuda_copies);
  std::vector<std::string> lines = WarningLines(*probe, pred);
  if (ShouldPrint(*probe, nccl_rules ? "preflight-nccl" : "preflight-cuda")) {
    for (const std::string& l : lines) WriteStderr(l);
    // Where the rest is: every pair, all its causes and their evidence.
    if (!lines.empty() && lines.front().rfind("p2ptrace: warning:", 0) == 0)
      WriteStderr("p2ptrace: every pair, cause and its evidence: p2ptrace report " + c.dir);
  }
  RecordText(SerializePreflight(MakePreflightBlock(*probe, pred, lines)));
  RecordLinkReadings(*probe);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_probe == nullptr || nccl_rules) g_probe = probe;  // the NCCL check's probe names NCCL's ranks
  if (nccl_rules) g_nccl_prediction = new Prediction(std::move(pred));  // what NCCL's connections meet
}

}  // namespace

// Each check runs once: the CUDA one (a process that has not called NCCL), the NCCL one (NCCL's
// rules, at the first CUDA trigger after an NCCL call or at NCCL's init). 0 not yet, 1 running or done.
namespace {
std::atomic<int> g_preflight_nccl{0};
}  // namespace

void PreflightFromCuda(const CudaRuntime& rt) {
  KeepErrno keep;
  bool nccl = NcclCalled();
  std::atomic<int>& once = nccl ? g_preflight_nccl : g_preflight;
  int expected = 0;
  if (once.load(std::memory_order_relaxed) != 0 || !once.compare_exchange_strong(expected, 1)) return;
  if (nccl) g_preflight.store(1, std::memory_order_relaxed);  // no CUDA-rules check after NCCL's
  Run(&rt, nccl);
}

void PreflightIfNccl(const CudaRuntime& rt) {
  KeepErrno keep;
  if (g_preflight_nccl.load(std::memory_order_relaxed) != 0) return;
  if (NcclCalled()) PreflightFromCuda(rt);
}

bool PreflightAtNcclInit(int ndev, const int* devlist) {
  KeepErrno keep;
  if (g_preflight_nccl.load(std::memory_order_relaxed) != 0) return true;
  // The runtime the application called (NCCL's init comes after CUDA's first calls): with it the
  // probe knows which GPUs this process sees; without it, none are asked.
  const CudaRuntime* rt = AnsweredRuntime(true);
  if (rt == nullptr && ndev == 0) return false;  // its GPU is known after the init
  int expected = 0;
  if (!g_preflight_nccl.compare_exchange_strong(expected, 1)) return true;
  g_preflight.store(1, std::memory_order_relaxed);
  std::vector<int> devices;
  for (int i = 0; i < ndev; ++i) devices.push_back(devlist != nullptr ? devlist[i] : i);
  Run(rt, true, ndev > 0 ? &devices : nullptr);
  return true;
}

void PreflightAfterNcclInit(int cuda_device) {
  KeepErrno keep;
  int expected = 0;
  if (g_preflight_nccl.load(std::memory_order_relaxed) != 0 || !g_preflight_nccl.compare_exchange_strong(expected, 1)) return;
  g_preflight.store(1, std::memory_order_relaxed);
  Run(AnsweredRuntime(true), true, nullptr, cuda_device);
}

void PreflightCopyRoute(const CudaRuntime& rt, int src, int dst, bool direct) {
  KeepErrno keep;
  if (direct || !RuntimeAnswered(rt)) return;
  PreflightFromCuda(rt);
  auto can = rt.CanAccessPeer;
  int ab = 0, ba = 0;
  if (can == nullptr || can(&ab, src, dst) != cudaSuccess || can(&ba, dst, src) != cudaSuccess || !(ab || ba)) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_probe == nullptr) return;
  const NodeProbe& p = *g_probe;
  const ProbedGpu* ga = nullptr;
  const ProbedGpu* gb = nullptr;
  for (const ProbedGpu& g : p.gpus) {
    if (g.cuda == src) ga = &g;
    if (g.cuda == dst) gb = &g;
  }
  int a = ga ? ga->index : src, b = gb ? gb->index : dst;
  const ProbedPair* pr = p.Pair(a, b);
  int best = pr && pr->link.rfind("NV", 0) == 0 ? P2PTRACE_TRANSPORT_NVLINK : P2PTRACE_TRANSPORT_PCIE_P2P;
  PreflightBlock block;
  block.host = p.hostname;
  block.boot_id = p.boot_id;
  PreflightPair q;
  q.a = a;
  q.b = b;
  q.bus_a = ga ? ga->bus_id : "";
  q.bus_b = gb ? gb->bus_id : "";
  q.link = pr ? pr->link : "";
  q.transport = P2PTRACE_TRANSPORT_HOST_STAGED;
  q.best = best;
  q.fallback = true;
  q.impact = ImpactText(q.transport, best, q.link, 0);
  std::string ev = "the application copied from CUDA device " + std::to_string(src) + " to " + std::to_string(dst) +
                   " without cudaDeviceEnablePeerAccess, though cudaDeviceCanAccessPeer says " + std::to_string(ab) + "/" +
                   std::to_string(ba);
  q.causes.push_back({"peer-access-not-enabled", "decided", {ev}});
  std::string line = WarningLine(p.hostname, "GPU" + std::to_string(a), "GPU" + std::to_string(b), -1, -1, q);
  block.pairs.push_back(std::move(q));
  block.warnings.push_back(line);
  // One line for this cause per process, however many pairs the program copies between: the next
  // pairs go into the trace only, and the line says where to find them.
  static std::atomic<bool> printed{false};
  if (!printed.load(std::memory_order_relaxed) &&
      ShouldPrint(p, "copy-" + std::to_string(std::min(a, b)) + "-" + std::to_string(std::max(a, b))) &&
      !printed.exchange(true))
    WriteStderr(line + " (other pairs copied the same way: p2ptrace report " + TraceWriter::config().dir + ")");
  RecordText(SerializePreflight(block));
}

// --- after the first NCCL operation: what NCCL did against what the job start predicted ----------

namespace {

// Paths of one kind: a fallback only when NCCL took a worse kind than predicted (P2P over NVLink
// vs PCIe is not in NCCL's text, so those compare equal).
int Family(int transport) {
  switch (transport) {
    case P2PTRACE_TRANSPORT_NVLINK: case P2PTRACE_TRANSPORT_PCIE_P2P: case P2PTRACE_TRANSPORT_P2P:
    case P2PTRACE_TRANSPORT_P2P_INDIRECT: case P2PTRACE_TRANSPORT_SAME_DEVICE: case P2PTRACE_TRANSPORT_NVLS:
      return 0;
    case P2PTRACE_TRANSPORT_SHM: case P2PTRACE_TRANSPORT_HOST_STAGED: return 1;
    case P2PTRACE_TRANSPORT_NET_GDR: return 2;
    case P2PTRACE_TRANSPORT_NET_IB: return 3;
    case P2PTRACE_TRANSPORT_NET_SOCKET: return 4;
    default: return -1;  // unknown, collnet: nothing to compare
  }
}

// The probe's GPU of a rank of NCCL's line: the identity exchange's rank, else (one process) the
// device NCCL printed in brackets (a busId in hex, or a CUDA ordinal).
const ProbedGpu* GpuOfRank(const NodeProbe& p, int rank, const std::string& dev) {
  for (const ProbedGpu& g : p.gpus)
    if (g.rank >= 0 && g.rank == rank) return &g;
  if (dev.empty() || EnvInt("WORLD_SIZE", 1) > 1) return nullptr;
  bool decimal = dev.find_first_not_of("0123456789") == std::string::npos && dev.size() <= 3;
  if (decimal) {
    int d = std::atoi(dev.c_str());
    for (const ProbedGpu& g : p.gpus)
      if (g.cuda == d) return &g;
    return nullptr;
  }
  std::string bus = NormalizeBusId(dev);
  for (const ProbedGpu& g : p.gpus)
    if (!bus.empty() && g.bus_id == bus) return &g;
  return nullptr;
}

// A network connection over TCP sockets or without GPUDirect RDMA: the cause this process's own NCCL
// lines show (libibverbs missing, no device, the GDR decision, a setting), or that they show none.
// Its side is the only one it sees: the other host's lines are in the report.
void NetCause(const Connection& c, const NcclLog& log, const std::string& observed, PreflightPair* q) {
  if (c.transport_class != P2PTRACE_TRANSPORT_NET_SOCKET && c.transport_class != P2PTRACE_TRANSPORT_NET_IB) return;
  NetShortfall want = c.transport_class == P2PTRACE_TRANSPORT_NET_SOCKET ? NetShortfall::kSockets : NetShortfall::kNoGdr;
  for (NetFinding& n : DiagnoseNet({NamedNcclLog{"", &log}})) {
    if (n.shortfall != want && !(want == NetShortfall::kNoGdr && n.shortfall == NetShortfall::kNoGdrSends)) continue;
    std::vector<std::string> evidence{observed};
    if (n.settled) evidence.insert(evidence.end(), n.evidence.begin(), n.evidence.end());
    else evidence.push_back("this process's NCCL lines do not say why; the other host's may (`p2ptrace report` reads every host's)");
    q->causes.push_back({n.cause, "decided", std::move(evidence)});
    return;
  }
}

// Pairs already compared (under g_mu). Never destroyed: exit reads the rest of NCCL's log after
// the library's static destructors may have run.
std::set<std::pair<int, int>>& Observed() {
  static auto* s = new std::set<std::pair<int, int>>();
  return *s;
}

}  // namespace

void PreflightObserveNccl(const Connection& c, const NcclLog& log) {
  KeepErrno keep;
  if (c.dst_rank < 0 || c.src_rank == c.dst_rank || Family(c.transport_class) < 0) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_probe == nullptr) return;
  const NodeProbe& p = *g_probe;
  const ProbedGpu* ga = GpuOfRank(p, c.src_rank, c.src_dev);
  const ProbedGpu* gb = GpuOfRank(p, c.dst_rank, c.dst_dev);
  if (ga == nullptr || gb == nullptr || ga == gb) return;
  if (!Observed().insert({ga->index, gb->index}).second) return;
  // What the job start predicted with NCCL's rules and the environment it saw, and the same with
  // the environment now (a program may set NCCL_* after the check and before NCCL reads it).
  NodeProbe now_probe = p;
  if (!now_probe.nccl_version) NoteNcclVersion(&now_probe);  // the check ran for CUDA: NCCL's rules now
  if (g_nccl_prediction == nullptr) g_nccl_prediction = new Prediction(PredictNode(now_probe));
  const Prediction& before = *g_nccl_prediction;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "NCCL_", 5) == 0)
      if (const char* eq = std::strchr(*e, '=')) now_probe.env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  for (auto it = now_probe.env.begin(); it != now_probe.env.end();)
    it = it->first.rfind("NCCL_", 0) == 0 && std::getenv(it->first.c_str()) == nullptr ? now_probe.env.erase(it) : ++it;
  Prediction after = PredictNode(now_probe);
  const PairPrediction* was = before.Pair(ga->index, gb->index);
  if (was == nullptr || Family(was->transport) < 0 || Family(c.transport_class) <= Family(was->transport)) return;
  PreflightPair q;
  q.a = ga->index;
  q.b = gb->index;
  q.bus_a = ga->bus_id;
  q.bus_b = gb->bus_id;
  q.link = was->link;
  q.transport = c.transport_class;
  q.best = was->best;
  q.fallback = true;
  q.impact = ImpactText(q.transport, was->transport, q.link, 0);
  std::string observed = "NCCL connected rank " + std::to_string(c.src_rank) + " to " + std::to_string(c.dst_rank) +
                         " via " + c.transport + " where the job-start check predicted " +
                         std::string(TransportName(was->transport));
  const PairPrediction* is = after.Pair(ga->index, gb->index);
  if (is != nullptr && Family(is->transport) == Family(c.transport_class) && !is->causes.empty()) {
    // NCCL's debug and profiler settings never choose a path (and the shim sets them, then gives the
    // user's back).
    auto debug_setting = [](const std::string& k) { return k.rfind("NCCL_DEBUG", 0) == 0 || k == "NCCL_PROFILER_PLUGIN"; };
    std::vector<std::string> changed;
    for (const auto& [k, v] : now_probe.env) {
      auto old = p.env.find(k);
      if ((old == p.env.end() || old->second != v) && !debug_setting(k) && !IsNcclLogTapSetting(k, v))
        changed.push_back(k + "=" + v);
    }
    for (const auto& [k, v] : p.env)
      if (k.rfind("NCCL_", 0) == 0 && !debug_setting(k) && now_probe.env.count(k) == 0) changed.push_back(k + " unset");
    for (const CauseHit& h : is->causes) {
      if (h.role == "context") continue;
      CauseHit hit = h;
      if (!changed.empty()) hit.evidence.push_back("set after the job-start check: " + Join(changed, ", "));
      q.causes.push_back(hit);
    }
  }
  if (q.causes.empty()) NetCause(c, log, observed, &q);
  if (q.causes.empty()) q.causes.push_back({"unknown", "decided", {observed, "checked: the node probes and NCCL_* as the process sees them now"}});
  PairPrediction shown = q;
  shown.best = was->transport;  // the line compares with what the job start predicted
  // Another host's GPU is named with its host ("node1 GPU0"); then so is this host's.
  bool across = GpuLabel(p, q.a) != "GPU" + std::to_string(q.a) || GpuLabel(p, q.b) != "GPU" + std::to_string(q.b);
  auto label = [&](int gpu) {
    std::string l = GpuLabel(p, gpu);
    return across && l == "GPU" + std::to_string(gpu) ? p.hostname + " " + l : l;
  };
  std::string line = WarningLine(across ? "" : p.hostname, label(q.a), label(q.b), c.src_rank, c.dst_rank, shown,
                                 "observed after the first NCCL operation");
  PreflightBlock block;
  block.host = p.hostname;
  block.boot_id = p.boot_id;
  block.pairs.push_back(std::move(q));
  block.warnings.push_back(line);
  int lo = std::min(ga->index, gb->index), hi = std::max(ga->index, gb->index);
  if (ShouldPrint(p, "observed-" + std::to_string(lo) + "-" + std::to_string(hi))) WriteStderr(line);
  RecordText(SerializePreflight(block));
}

}  // namespace p2ptrace::shim
