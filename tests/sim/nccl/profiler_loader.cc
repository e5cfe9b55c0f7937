#include "tests/sim/nccl/profiler_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <strings.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <type_traits>
#include <string>
#include <vector>

namespace p2psim::profiler {
namespace {

namespace np = p2ptrace::nccl_profiler;

constexpr int V(int minor, int patch) { return 20000 + minor * 100 + patch; }

enum class Status { kReady, kLoaded, kFailed };

struct State {
  std::mutex mu;
  Status status = Status::kReady;  // kFailed: never tried again in this process
  void* lib = nullptr;
  const void* table = nullptr;  // the ncclProfiler_vN found; every version starts with `const char* name`
  int version = 0;
  int refs = 0;  // communicators holding the library (NCCL's refCount)
  int mask = 0;  // the one activation mask every init writes (ncclProfilerEventMask)
};
State& S() {
  static auto* s = new State();  // never destroyed: a communicator may be finalized during exit
  return *s;
}

const char* PluginName() { return S().table ? *static_cast<const char* const*>(S().table) : ""; }

// The names tried for NCCL_PROFILER_PLUGIN=x, per release (§3.1).
std::vector<std::string> Candidates(const char* env, int code) {
  if (env == nullptr || *env == '\0') return {"libnccl-profiler.so"};
  std::string x = env, prefixed = "libnccl-profiler-" + x + ".so";
  if (code < V(26, 2)) return {x};
  if (code < V(27, 3)) return {x, prefixed};
  if (code < V(27, 5)) return {np::IsLibSoName(x) ? x : prefixed};  // 2.27.3's regression (NVIDIA/nccl#1732)
  if (x.find('/') == std::string::npos && !np::IsLibSoName(x)) return {x, prefixed};
  return {x};
}

// Loads the library and finds its newest ncclProfiler_vN the release knows; S().mu held.
bool Load(const Host& h) {
  State& s = S();
  if (s.status == Status::kLoaded) {
    ++s.refs;
    return true;
  }
  if (s.status == Status::kFailed) return false;
  const int code = h.version_code;
  const char* env = std::getenv("NCCL_PROFILER_PLUGIN");
  if (code >= V(28, 3) && env != nullptr && *env != '\0') {
    h.info(h.env_flag, "NCCL_PROFILER_PLUGIN set by environment to %s", env);
    if (strcasecmp(env, "none") == 0) {
      s.status = Status::kFailed;
      return false;
    }
  }
  void* lib = nullptr;
  std::string tried;
  for (const std::string& name : Candidates(env, code)) {
    bool in_program = !name.empty() && strncasecmp(name.c_str(), "STATIC_PLUGIN", name.size()) == 0;
    lib = dlopen(in_program ? nullptr : name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* why = dlerror();
    if (why != nullptr && std::strstr(why, "No such file") == nullptr)
      h.info(h.env_flag, "PROFILER/Plugin: %s: %s", name.c_str(), why);
    tried += " " + name;
  }
  if (lib == nullptr) {
    h.info(h.env_flag, code < V(26, 2) ? "PROFILER/Plugin: Could not find:%s." : "PROFILER/Plugin: Could not find:%s",
           tried.c_str());
  }
  // 2.28.3+: the network plugin library NCCL loaded, where there is one (the sim loads none for its
  // own networking: the first name of NCCL_NET_PLUGIN's rule that opens stands for it).
  bool from_net = false;
  if (lib == nullptr && code >= np::kNetPluginProfilerSince)
    for (const std::string& name : np::NetPluginNames(std::getenv("NCCL_NET_PLUGIN")))
      if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        from_net = true;
        break;
      }
  if (lib == nullptr) {
    s.status = Status::kFailed;
    return false;
  }
  if (from_net) {
    // no "Successfully loaded" line for the network plugin's library
  } else if (code >= V(28, 3)) {
    link_map* map = nullptr;
    dlinfo(lib, RTLD_DI_LINKMAP, &map);
    h.info(h.init_flag, "Successfully loaded external profiler plugin %s", map && map->l_name ? map->l_name : "");
  } else if (env != nullptr && *env != '\0') {
    h.info(h.init_flag | h.env_flag, "PROFILER/Plugin: Plugin name set by env to %s", env);
  }
  for (int v = np::NewestVersion(code); v >= 1 && s.table == nullptr; --v) {
    std::string symbol = "ncclProfiler_v" + std::to_string(v);
    if (const void* t = dlsym(lib, symbol.c_str())) {
      s.table = t;
      s.version = v;
    } else if (code >= V(30, 3)) {
      h.info(h.init_flag, "ncclOsDlsym(%s) failed: %s", symbol.c_str(), dlerror());
    } else if (code >= V(24, 3)) {
      h.info(h.init_flag | h.env_flag,
             code < V(26, 2) ? "PROFILER/Plugin: failed to find %s." : "PROFILER/Plugin: failed to find %s",
             symbol.c_str());
    }
  }
  if (s.table == nullptr) {
    if (!from_net) h.info(h.init_flag, "External profiler plugin %s is unsupported", env ? env : "libnccl-profiler.so");
    dlclose(lib);
    s.status = Status::kFailed;
    return false;
  }
  if (code >= V(28, 3)) h.info(h.init_flag, "PROFILER/Plugin: Loaded %s (v%d)", PluginName(), s.version);
  else if (code >= V(26, 2)) h.info(h.init_flag | h.env_flag, "PROFILER/Plugin: loaded %s", PluginName());
  else h.info(h.init_flag | h.env_flag, "PROFILER/Plugin: loaded ncclProfiler_v%d.", s.version);
  s.lib = lib;
  s.status = Status::kLoaded;
  s.refs = 1;
  return true;
}

// One communicator lets go of the library; the last one closes it. S().mu held.
void Unload(const Host& h) {
  State& s = S();
  if (s.status != Status::kLoaded || --s.refs > 0) return;
  unsigned long flag = h.version_code >= V(30, 0) ? h.destroy_flag : h.version_code >= V(28, 0) ? h.init_flag : h.env_flag;
  h.info(flag, "PROFILER/Plugin: Closing profiler plugin %s", PluginName());
  dlclose(s.lib);
  s.status = Status::kReady;  // the next communicator loads it anew
  s.lib = nullptr;
  s.table = nullptr;
  s.version = 0;
}

std::string MaskNames(int mask) {
  static const char* const kNames[] = {"Group",  "Coll",    "P2p",    "ProxyOp",      "ProxyStep", "ProxyCtrl",
                                       "KernelCh", "NetPlugin", "GroupApi", "CollApi", "P2pApi", "KernelLaunch",
                                       "CeColl", "CeSync",  "CeBatch", "KernelPhase"};
  std::string out;
  for (int i = 0; i < 16; ++i)
    if (mask & (1 << i)) out += (out.empty() ? "" : " ") + std::string(kNames[i]);
  return out.empty() ? "none" : out;
}

}  // namespace

CommProfiler InitComm(const Host& h, uint64_t comm_hash, const char* comm_name, int nnodes, int nranks, int rank) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (np::NewestVersion(h.version_code) == 0 || !Load(h)) return {};
  CommProfiler p;
  p.holds = true;
  ncclResult_t r;
  if (s.version <= 3) {
    r = static_cast<const np::PluginV1*>(s.table)->init(&p.context, &s.mask);
  } else if (s.version == 4) {
    r = static_cast<const np::PluginV4*>(s.table)->init(&p.context, &s.mask, comm_name, comm_hash, nnodes, nranks, rank,
                                                         h.log);
  } else {
    r = static_cast<const np::PluginV5*>(s.table)->init(&p.context, comm_hash, &s.mask, comm_name, nnodes, nranks, rank,
                                                         h.log);
  }
  const int code = h.version_code;
  if (r != ncclSuccess) {
    if (code < V(28, 3)) {  // off for the whole process; the library stays loaded
      h.warn("Profiler init failed with error (%d). Continue without profiler.", static_cast<int>(r));
      s.status = Status::kFailed;
      s.table = nullptr;
      return {};
    }
    if (code >= V(30, 3)) {  // lets go at once (NCCL's finalize would let go a second time, §3.4: not
      Unload(h);             // simulated, so that the other communicators keep the library)
      p.holds = false;
    }
    h.info(h.init_flag, "Profiler init failed with error '%d': %s. Continue without profiler.", static_cast<int>(r),
           std::strerror(errno));
    p.active = code < V(30, 3);  // 2.28-2.29 keep calling it
    return p;
  }
  p.active = true;
  if (code >= V(29, 2))
    h.info(h.init_flag, "Profiler event mask: 0x%x (%d) - Enabled: %s", s.mask, s.mask, MaskNames(s.mask).c_str());
  return p;
}

// The tests' witness of what NCCL's timers cost: how many operations ran with KernelCh in their mask
// (real NCCL then writes device timestamps and gives its proxy work per channel for each), one line
// "PID OPERATIONS" per communicator finalized, appended to $P2PSIM_KERNELCH_FILE.
std::atomic<uint64_t> g_kernel_ch_ops{0};

void FinalizeComm(const Host& h, CommProfiler* p) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!p->holds) return;
  if (const char* path = std::getenv("P2PSIM_KERNELCH_FILE"))
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%d %llu\n", int(getpid()), static_cast<unsigned long long>(g_kernel_ch_ops.load()));
      std::fclose(f);
    }
  // Up to 2.27 finalize is called whatever init left; from 2.28 only with a context.
  if (s.status == Status::kLoaded && (p->context != nullptr || h.version_code < V(28, 3)))
    static_cast<const np::PluginV1*>(s.table)->finalize(p->context);  // the same member in every version
  Unload(h);
  *p = CommProfiler{};
}

namespace {

// Every ncclProfiler_vN has the same members (pointers all): the calls below take the descriptor and
// state arguments of the loaded version as a plain pointer.
struct AnyPlugin {
  const char* name;
  void* init;
  ncclResult_t (*start_event)(void* context, void** event, void* descr);
  ncclResult_t (*stop_event)(void* event);
  ncclResult_t (*record_event_state)(void* event, int state, void* args);
  ncclResult_t (*finalize)(void* context);
};

const char* FuncName(int f) {
  switch (f) {
    case kBroadcast: return "Broadcast";
    case kReduce: return "Reduce";
    case kAllGather: return "AllGather";
    case kReduceScatter: return "ReduceScatter";
    case kAllReduce: return "AllReduce";
    case kSend: return "Send";
    case kRecv: return "Recv";
    default: return "Unknown";
  }
}

// ncclDatatypeToString's words (2.28).
const char* TypeName(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "Unknown";  // NCCL's own table maps it so (§4)
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    default: return "Unknown";
  }
}

constexpr int kRingAlgo = 1, kSimpleProto = 2;  // NCCL_ALGO_RING, NCCL_PROTO_SIMPLE (v1's enums)

// This process's simulated GPU clock, in ns (a %globaltimer of its own).
std::atomic<uint64_t> g_gpu_ns{1'700'000'000'000'000'000ull};

template <typename Descr>
void FillOp(Descr& d, const OpEvent& op, int rank, void* group) {
  d.rank = rank;
  d.parent = group;  // v1-v4 see the group as the parent; v5+ the API event (not simulated)
  if (op.p2p) {
    d.type = np::kP2p;
    auto& q = d.p2p;
    q.buff = const_cast<void*>(op.send_buff);
    q.count = op.count;
    q.peer = op.peer_or_root;
    if constexpr (requires { q.name; }) q.name = nullptr;  // v1-v3: gone since, NCCL's adapters leave them empty
    if constexpr (requires { q.comm_hash; }) q.comm_hash = 0;
    if constexpr (requires { q.channels; }) q.channels = static_cast<uint8_t>(op.channels);
    if constexpr (requires { q.parent_group; }) q.parent_group = group;
    if constexpr (std::is_same_v<decltype(q.func), uint8_t>) {
      q.func = static_cast<uint8_t>(op.func);
      q.datatype = static_cast<uint8_t>(op.type);
    } else {
      q.func = FuncName(op.func);
      q.datatype = TypeName(op.type);
    }
  } else {
    d.type = np::kColl;
    auto& q = d.coll;
    q.seq = op.seq;
    q.send_buff = op.send_buff;
    q.recv_buff = op.recv_buff;
    q.count = op.count;
    q.root = op.peer_or_root;
    q.warps = 16;
    if constexpr (requires { q.name; }) q.name = nullptr;
    if constexpr (requires { q.comm_hash; }) q.comm_hash = 0;
    if constexpr (requires { q.channels; }) q.channels = static_cast<uint8_t>(op.channels);
    if constexpr (requires { q.max_channels; }) q.max_channels = static_cast<uint8_t>(op.channels);
    if constexpr (requires { q.parent_group; }) q.parent_group = group;
    if constexpr (std::is_same_v<decltype(q.func), uint8_t>) {
      q.func = static_cast<uint8_t>(op.func);
      q.datatype = static_cast<uint8_t>(op.type);
      q.algo = kRingAlgo;
      q.proto = kSimpleProto;
    } else {
      q.func = FuncName(op.func);
      q.datatype = TypeName(op.type);
      q.algo = "RING";
      q.proto = "SIMPLE";
    }
  }
}

// Group, then each operation's P2p or Coll (parent: the group), stopped at once: NCCL's "enqueued".
template <typename Descr>
void Launch(const AnyPlugin& pl, void* context, int rank, LaunchedBatch* b) {
  constexpr int kChildren = np::kProxyOp | np::kProxyStep | np::kKernelCh | np::kNetPlugin;
  const std::vector<OpEvent>& ops = b->ops;
  int mask = 0;  // the batch's: any of its operations' masks
  for (const OpEvent& op : ops) mask |= op.mask;
  b->handles.assign(ops.size(), nullptr);
  // NCCL starts a batch's Group for any of these bits, whatever the batch holds (a Coll-only mask
  // gets the Group of a batch of sends too: ncclProfilerStartGroupEvent, src/plugin/profiler.cc).
  if ((mask & (np::kGroup | np::kColl | np::kP2p | kChildren)) == 0) return;
  void* group = nullptr;
  Descr g{};
  g.type = np::kGroup;
  pl.start_event(context, &group, &g);
  for (size_t i = 0; i < ops.size(); ++i) {
    if ((ops[i].mask & ((ops[i].p2p ? np::kP2p : np::kColl) | kChildren)) == 0) continue;
    Descr d{};
    FillOp(d, ops[i], rank, group);
    pl.start_event(context, &b->handles[i], &d);
  }
  for (void* h : b->handles)
    if (h != nullptr) pl.stop_event(h);
  if (group != nullptr) pl.stop_event(group);
}

// The kernels: the collectives one after another, then the send/recv side by side; per channel an
// operation ran on, KernelCh (v3+) with the channel's GPU start time, KernelChStop with its stop
// time (v4+), stop.
template <typename Descr>
void Kernels(const AnyPlugin& pl, void* context, const LaunchedBatch& b) {
  const std::vector<OpEvent>& ops = b.ops;
  uint64_t start = g_gpu_ns.load(), colls = 0, p2p = 0;
  for (const OpEvent& op : ops)
    if (!op.p2p) colls += static_cast<uint64_t>(op.seconds * 1e9);
  uint64_t next_coll = start;
  for (size_t i = 0; i < ops.size(); ++i) {
    uint64_t ns = static_cast<uint64_t>(ops[i].seconds * 1e9);
    uint64_t t0 = ops[i].p2p ? start + colls : next_coll;
    if (ops[i].p2p) p2p = std::max(p2p, ns);
    else next_coll += ns;
    if constexpr (requires(Descr k) { k.kernel_ch; }) {  // v3+
      // KernelCh by the operation's own mask (v3+: the descriptors that have kernel_ch).
      if ((ops[i].mask & np::kKernelCh) == 0 || b.handles[i] == nullptr) continue;
      for (int c = 0; c < ops[i].channels; ++c) {
        Descr k{};
        k.type = np::kKernelCh;
        k.parent = b.handles[i];
        k.kernel_ch.channel = static_cast<uint8_t>(ops[i].channel_lo + c);
        if constexpr (requires { k.kernel_ch.timer; }) k.kernel_ch.timer = t0;
        void* ch = nullptr;
        pl.start_event(context, &ch, &k);
        if constexpr (requires { k.kernel_ch.timer; }) {  // v4+: the stop time; v3's adapter drops the state
          np::StateArgs args{};
          args.kernel_ch.timer = t0 + ns;
          if (ch != nullptr) pl.record_event_state(ch, np::kKernelChStop, &args);
        }
        if (ch != nullptr) pl.stop_event(ch);
      }
    }
  }
  for (const OpEvent& op : ops) g_kernel_ch_ops += (op.mask & np::kKernelCh) != 0;
  g_gpu_ns.fetch_add(colls + p2p);
}

// Calls `f.template operator()<Descr>()` with the descriptor of the loaded plugin's version.
template <typename F>
void ByVersion(int version, F&& f) {
  switch (version) {
    case 1: f.template operator()<np::v1::Descr>(); break;
    case 2: f.template operator()<np::v2::Descr>(); break;
    case 3: f.template operator()<np::v3::Descr>(); break;
    case 4: f.template operator()<np::v4::Descr>(); break;
    case 5: f.template operator()<np::v5::Descr>(); break;
    case 6: f.template operator()<np::v6::Descr>(); break;
    default: f.template operator()<np::v7::Descr>(); break;
  }
}

}  // namespace

int ActivationMask() { return __atomic_load_n(&S().mask, __ATOMIC_RELAXED); }

LaunchedBatch LaunchBatch(const CommProfiler& p, int rank, std::vector<OpEvent> ops) {
  LaunchedBatch b{&p, std::move(ops), {}};
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!p.active || s.status != Status::kLoaded || b.ops.empty()) return b;
  const auto& pl = *static_cast<const AnyPlugin*>(s.table);
  ByVersion(s.version, [&]<typename Descr>() { Launch<Descr>(pl, p.context, rank, &b); });
  return b;
}

void KernelsRan(const LaunchedBatch& b) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!b.profiler->active || s.status != Status::kLoaded || b.handles.empty()) return;
  const auto& pl = *static_cast<const AnyPlugin*>(s.table);
  ByVersion(s.version, [&]<typename Descr>() { Kernels<Descr>(pl, b.profiler->context, b); });
}

}  // namespace p2psim::profiler
