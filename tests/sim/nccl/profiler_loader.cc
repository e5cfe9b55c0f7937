#include "tests/sim/nccl/profiler_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <strings.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
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

bool IsLibSo(const std::string& x) {
  return x.rfind("lib", 0) == 0 && x.size() >= 6 && x.compare(x.size() - 3, 3, ".so") == 0;
}

// The names tried for NCCL_PROFILER_PLUGIN=x, per release (§3.1).
std::vector<std::string> Candidates(const char* env, int code) {
  if (env == nullptr || *env == '\0') return {"libnccl-profiler.so"};
  std::string x = env, prefixed = "libnccl-profiler-" + x + ".so";
  if (code < V(26, 2)) return {x};
  if (code < V(27, 3)) return {x, prefixed};
  if (code < V(27, 5)) return {IsLibSo(x) ? x : prefixed};  // 2.27.3's regression (NVIDIA/nccl#1732)
  if (x.find('/') == std::string::npos && !IsLibSo(x)) return {x, prefixed};
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
    s.status = Status::kFailed;
    return false;
  }
  if (code >= V(28, 3)) {
    link_map* map = nullptr;
    dlinfo(lib, RTLD_DI_LINKMAP, &map);
    h.info(h.init_flag, "Successfully loaded external profiler plugin %s", map && map->l_name ? map->l_name : "");
  } else if (env != nullptr && *env != '\0') {
    h.info(h.init_flag | h.env_flag, "PROFILER/Plugin: Plugin name set by env to %s", env);
  }
  for (int v = NewestVersion(code); v >= 1 && s.table == nullptr; --v) {
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
    h.info(h.init_flag, "External profiler plugin %s is unsupported", env ? env : "libnccl-profiler.so");
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

int NewestVersion(int code) {
  if (code >= V(31, 2)) return 7;
  if (code >= V(29, 2)) return 6;
  if (code >= V(28, 3)) return 5;
  if (code >= V(27, 3)) return 4;
  if (code >= V(26, 2)) return 3;
  if (code >= V(24, 3)) return 2;
  if (code >= V(23, 4)) return 1;
  return 0;
}

CommProfiler InitComm(const Host& h, uint64_t comm_hash, const char* comm_name, int nnodes, int nranks, int rank) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (NewestVersion(h.version_code) == 0 || !Load(h)) return {};
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

void FinalizeComm(const Host& h, CommProfiler* p) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!p->holds) return;
  // Up to 2.27 finalize is called whatever init left; from 2.28 only with a context.
  if (s.status == Status::kLoaded && (p->context != nullptr || h.version_code < V(28, 3)))
    static_cast<const np::PluginV1*>(s.table)->finalize(p->context);  // the same member in every version
  Unload(h);
  *p = CommProfiler{};
}

int LoadedVersion() {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().status == Status::kLoaded ? S().version : 0;
}

int ActivationMask() {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().mask;
}

}  // namespace p2psim::profiler
