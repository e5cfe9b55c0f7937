// NCCL's profiler plugin ABI, versions 1 to 7, as NCCL lays it out (the facts and their sources:
// docs/research/nccl-profiler-abi.md): what a plugin exports as ncclProfiler_vN and the event
// descriptors NCCL hands it. One definition for the shim (the plugin it will be) and the simulated
// NCCL (which loads plugins as NCCL does). The member names are p2ptrace's; the layout is NCCL's,
// pinned by the static_asserts below and checked field by field against NCCL's own headers with
// scripts/check-nccl-profiler-abi.py (by hand: no package carries those headers). Checked on
// 2026-12-04: v1-v6 against 2.30.7's headers (178 fields), v7 against 2.31.2's (60 more), and the
// event bits and state values.
#pragma once

#include <nccl.h>
#include <strings.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace p2ptrace::nccl_profiler {

// Event types: the activation mask's bits and a descriptor's `type`.
enum EventType : uint64_t {
  kGroup = 1u << 0,  // v1
  kColl = 1u << 1,
  kP2p = 1u << 2,
  kProxyOp = 1u << 3,
  kProxyStep = 1u << 4,
  kProxyCtrl = 1u << 5,
  kKernelCh = 1u << 6,  // v3 (a GPU timer from v4)
  kNetPlugin = 1u << 7,
  kGroupApi = 1u << 8,  // v5
  kCollApi = 1u << 9,
  kP2pApi = 1u << 10,
  kKernelLaunch = 1u << 11,
  kCeColl = 1u << 12,  // v6
  kCeSync = 1u << 13,
  kCeBatch = 1u << 14,
  kKernelPhase = 1u << 15,  // v7 (2.31.2; NCCL then turns kKernelCh on too)
};

// recordEventState's states (one numbering for every version).
enum State : int {
  kProxyOpSendPosted = 0,  // 0-7: proxy op states, deprecated in v4
  kProxyOpRecvDone = 7,
  kProxyStepSendGpuWait = 8,
  kProxyStepSendWait = 9,
  kProxyStepRecvWait = 10,
  kProxyStepRecvFlushWait = 11,
  kProxyStepRecvGpuWait = 12,
  kProxyCtrlIdle = 13,  // 13-18: proxy thread states
  kProxyCtrlAppendEnd = 18,
  kProxyOpInProgress = 19,  // v4
  kProxyStepSendPeerWait = 20,
  kNetPluginUpdate = 21,
  kKernelChStop = 22,  // args: kernel_ch.timer, the channel's GPU stop time
  kGroupStartApiStop = 23,  // v5
  kGroupEndApiStart = 24,
  kCeCollStart = 25,  // 25-30: v6, never sent by NCCL (CE events have no states)
  kCeBatchComplete = 30,
  kKernelPhaseStop = 31,  // v7
};

using Logger = void (*)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

// --- members every version shares -----------------------------------------------------------------
struct ProxyOp {
  pid_t pid;
  uint8_t channel;
  int peer;  // the remote rank of a send or receive
  int steps;
  int chunk_size;
  int is_send;
};
struct ProxyStep {
  int step;
};
struct NetPlugin {
  int64_t id;
  void* data;
};
struct KernelCh {  // v4+; v3's has the channel only
  uint8_t channel;
  uint64_t timer;  // the channel's GPU start time (%globaltimer, ns)
};
// v4 to v7's state arguments.
union StateArgs {
  struct {
    size_t bytes;  // transSize: bytes moved by the step
  } proxy_step;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
  struct {
    void* data;
  } net_plugin;
  struct {
    uint64_t timer;  // the channel's (or, v7, the phase's) GPU stop time
  } kernel_ch;
};

// --- v1 (2.23): func, datatype, algo and proto are NCCL's enum values ------------------------------
namespace v1 {
struct Descr {
  uint8_t type;
  void* parent;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t comm_hash, seq;
      uint8_t func;
      const void* send_buff;
      void* recv_buff;
      size_t count;
      int root;
      uint8_t datatype;
      uint32_t op;
      size_t traffic_bytes;
      uint8_t max_channels, warps, algo, proto;
      int is_collnet, is_nvls;
    } coll;
    struct {
      const char* name;
      uint64_t comm_hash;
      uint8_t func;
      void* buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    ProxyOp proxy_op;
    ProxyStep proxy_step;
  };
};
union StateArgs {  // v1 to v3
  struct {
    size_t bytes;
    int steps;
  } proxy_op;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
};
}  // namespace v1

// --- v2 (2.24): strings for func, datatype, algo, proto ---------------------------------------------
// The collective's fields v2 and v3 share, as a list (see the v4 lists below for why not a base).
#define P2PTRACE_PROFILER_COLL_V2_HEAD \
  const char* name;                    \
  uint64_t comm_hash, seq;             \
  const char* func;                    \
  const void* send_buff;               \
  void* recv_buff;                     \
  size_t count;                        \
  int root;                            \
  const char* datatype;
namespace v2 {
struct Descr {
  uint8_t type;
  void* parent;
  int rank;
  union {
    struct {
      P2PTRACE_PROFILER_COLL_V2_HEAD
      size_t traffic_bytes;
      uint8_t max_channels, warps;
      const char *algo, *proto;
    } coll;
    struct {
      const char* name;
      uint64_t comm_hash;
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
    } p2p;
    ProxyOp proxy_op;
    ProxyStep proxy_step;
  };
};
}  // namespace v2

// --- v3 (2.26): kernel channels (no timer yet), net plugin events -----------------------------------
namespace v3 {
struct Descr {
  uint8_t type;
  void* parent;
  int rank;
  union {
    struct {
      P2PTRACE_PROFILER_COLL_V2_HEAD  // traffic_bytes gone
      uint8_t max_channels, warps;
      const char *algo, *proto;
    } coll;
    decltype(v2::Descr::p2p) p2p;
    ProxyOp proxy_op;
    ProxyStep proxy_step;
    struct {
      uint8_t channel;
    } kernel_ch;
    NetPlugin net_plugin;
  };
};
}  // namespace v3

// --- v4 (2.27): GPU timers on kernel channels; init names the communicator -------------------------
// The fields later versions extend, as lists: C's layout, which a derived C++ struct need not keep.
#define P2PTRACE_PROFILER_COLL_V4 \
  uint64_t seq;                   \
  const char* func;               \
  const void* send_buff;          \
  void* recv_buff;                \
  size_t count;                   \
  int root;                       \
  const char* datatype;           \
  uint8_t channels, warps;        \
  const char *algo, *proto;
#define P2PTRACE_PROFILER_P2P_V4 \
  const char* func;              \
  void* buff;                    \
  const char* datatype;          \
  size_t count;                  \
  int peer;                      \
  uint8_t channels;
#define P2PTRACE_PROFILER_COLL_API_V5 \
  const char* func;                   \
  size_t count;                       \
  const char* datatype;               \
  int root;                           \
  void* stream;                       \
  bool graph_captured;
#define P2PTRACE_PROFILER_P2P_API_V5 \
  const char* func;                  \
  size_t count;                      \
  const char* datatype;              \
  void* stream;                      \
  bool graph_captured;
#define P2PTRACE_PROFILER_CE_COLL_V6   \
  uint64_t seq;                        \
  const char* func;                    \
  const void* send_buff;               \
  void* recv_buff;                     \
  size_t count;                        \
  int root;                            \
  const char *datatype, *sync_strategy; \
  bool intra_batch_sync;               \
  uint32_t batch_size, batches, ce_seq; \
  void* stream;

namespace v4 {
struct Coll {
  P2PTRACE_PROFILER_COLL_V4
};
struct P2p {
  P2PTRACE_PROFILER_P2P_V4
};
struct Descr {
  uint8_t type;
  void* parent;
  int rank;
  union {
    Coll coll;
    P2p p2p;
    ProxyOp proxy_op;
    ProxyStep proxy_step;
    KernelCh kernel_ch;
    NetPlugin net_plugin;
  };
};
}  // namespace v4

// --- v5 (2.28): API events, parent groups; init takes the communicator's id first --------------------
namespace v5 {
struct GroupApi {
  bool graph_captured;
  int depth;
};
struct KernelLaunch {
  void* stream;
};
struct Descr {
  uint64_t type;
  void* parent;
  int rank;
  union {
    GroupApi group_api;
    struct {
      P2PTRACE_PROFILER_COLL_API_V5
    } coll_api;
    struct {
      P2PTRACE_PROFILER_P2P_API_V5
    } p2p_api;
    KernelLaunch kernel_launch;
    struct {
      P2PTRACE_PROFILER_COLL_V4
      void* parent_group;
    } coll;
    struct {
      P2PTRACE_PROFILER_P2P_V4
      void* parent_group;
    } p2p;
    ProxyOp proxy_op;
    ProxyStep proxy_step;
    KernelCh kernel_ch;
    NetPlugin net_plugin;
  };
};
}  // namespace v5

// --- v6 (2.29): copy-engine collectives -------------------------------------------------------------
namespace v6 {
struct CeSync {
  bool complete;
  int nranks;
};
struct CeBatch {
  int ops;
  size_t total_bytes;
  bool intra_sync;
};
struct Descr {
  uint64_t type;
  void* parent;
  int rank;
  union {
    v5::GroupApi group_api;
    decltype(v5::Descr::coll_api) coll_api;
    decltype(v5::Descr::p2p_api) p2p_api;
    v5::KernelLaunch kernel_launch;
    decltype(v5::Descr::coll) coll;
    decltype(v5::Descr::p2p) p2p;
    ProxyOp proxy_op;
    ProxyStep proxy_step;
    KernelCh kernel_ch;
    NetPlugin net_plugin;
    struct {
      P2PTRACE_PROFILER_CE_COLL_V6
    } ce_coll;
    CeSync ce_sync;
    CeBatch ce_batch;
  };
};
}  // namespace v6

// --- v7 (2.31): user tags, symmetric kernels, kernel phases -----------------------------------------
namespace v7 {
struct Descr {
  uint64_t type;
  void* parent;
  int rank;
  union {
    v5::GroupApi group_api;
    struct {
      P2PTRACE_PROFILER_COLL_API_V5
      uint64_t user_tag;  // 0: untagged
    } coll_api;
    struct {
      P2PTRACE_PROFILER_P2P_API_V5
      uint64_t user_tag;
    } p2p_api;
    v5::KernelLaunch kernel_launch;
    struct {
      P2PTRACE_PROFILER_COLL_V4
      void* parent_group;
      const char* kernel_variant;
      bool is_sym_coll;
      uint64_t user_tag;
    } coll;
    struct {
      P2PTRACE_PROFILER_P2P_V4
      void* parent_group;
      uint64_t user_tag;
    } p2p;
    ProxyOp proxy_op;
    ProxyStep proxy_step;
    KernelCh kernel_ch;
    NetPlugin net_plugin;
    struct {
      P2PTRACE_PROFILER_CE_COLL_V6
      uint64_t user_tag;
    } ce_coll;
    v6::CeSync ce_sync;
    v6::CeBatch ce_batch;
    struct {
      uint8_t channel, phase;  // 0 initial sync, 1 compute, 2 final sync
      const char* phase_name;
      uint64_t timer;  // the phase's GPU start time
    } kernel_phase;
  };
};
}  // namespace v7

// The ABI version a release looks up first (docs/research/nccl-profiler-abi.md §0, §3.2): the
// version it calls a plugin with when the plugin exports it. `version_code` as ncclGetVersion
// gives it (22809 for 2.28.9); 0 before 2.23.4, which has no profiler interface.
constexpr int NewestVersion(int version_code) {
  return version_code >= 23102   ? 7
         : version_code >= 22902 ? 6
         : version_code >= 22803 ? 5
         : version_code >= 22703 ? 4
         : version_code >= 22602 ? 3
         : version_code >= 22403 ? 2
         : version_code >= 22304 ? 1
                                 : 0;
}

// NCCL_PROFILER_PLUGIN's name rule (§3.1): a name of the form lib*.so is opened as given; from
// 2.27.5 any other name without a '/' is also tried as libnccl-profiler-NAME.so (2.27.3 tried only
// that).
constexpr bool IsLibSoName(std::string_view name) {
  return name.substr(0, 3) == "lib" && name.size() >= 6 && name.substr(name.size() - 3) == ".so";
}

// From 2.28.3, when no profiler library was found (NCCL_PROFILER_PLUGIN's or the default), NCCL looks
// for ncclProfiler_vN in the network plugin library it loaded (src/plugin/profiler.cc,
// ncclGetNetPluginLib). That library's names, by NCCL_NET_PLUGIN's rule (plugin_open.cc): unset,
// libnccl-net.so; "none", none; else the name as given, then libnccl-net-NAME.so for a name without
// a '/' not of the form lib*.so.
constexpr int kNetPluginProfilerSince = 22803;
inline std::vector<std::string> NetPluginNames(const char* env) {
  if (env == nullptr || *env == '\0') return {"libnccl-net.so"};
  if (strcasecmp(env, "none") == 0) return {};
  std::string x = env;
  if (x.find('/') == std::string::npos && !IsLibSoName(x)) return {x, "libnccl-net-" + x + ".so"};
  return {x};
}

// --- the exported table, ncclProfiler_vN -------------------------------------------------------------
// The same six members in every version; init's arguments change in v4 and again in v5.
template <typename Descr, typename Args, typename Init>
struct PluginOf {
  const char* name;
  Init init;
  ncclResult_t (*start_event)(void* context, void** event, Descr* descr);
  ncclResult_t (*stop_event)(void* event);
  ncclResult_t (*record_event_state)(void* event, State state, Args* args);
  ncclResult_t (*finalize)(void* context);
};
using InitV1 = ncclResult_t (*)(void** context, int* activation_mask);
using InitV4 = ncclResult_t (*)(void** context, int* activation_mask, const char* comm_name, uint64_t comm_hash,
                                int nodes, int nranks, int rank, Logger log);
using InitV5 = ncclResult_t (*)(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                                int nodes, int nranks, int rank, Logger log);
using PluginV1 = PluginOf<v1::Descr, v1::StateArgs, InitV1>;
using PluginV2 = PluginOf<v2::Descr, v1::StateArgs, InitV1>;
using PluginV3 = PluginOf<v3::Descr, v1::StateArgs, InitV1>;
using PluginV4 = PluginOf<v4::Descr, StateArgs, InitV4>;
using PluginV5 = PluginOf<v5::Descr, StateArgs, InitV5>;
using PluginV6 = PluginOf<v6::Descr, StateArgs, InitV5>;
using PluginV7 = PluginOf<v7::Descr, StateArgs, InitV5>;

// The layout, as NCCL's headers give it on LP64 (docs/research/nccl-profiler-abi.md §1.9).
static_assert(sizeof(v1::Descr) == 120 && offsetof(v1::Descr, rank) == 16 && offsetof(v1::Descr, coll) == 24);
static_assert(sizeof(v2::Descr) == 128 && sizeof(v3::Descr) == 120 && sizeof(v4::Descr) == 104);
static_assert(sizeof(v5::Descr) == 112 && sizeof(v6::Descr) == 112 && sizeof(v7::Descr) == 136);
static_assert(sizeof(ProxyOp) == 24 && sizeof(KernelCh) == 16 && sizeof(StateArgs) == 8 && sizeof(v1::StateArgs) == 16);
static_assert(offsetof(v5::Descr, p2p.parent_group) == 24 + 40 && offsetof(v7::Descr, p2p.user_tag) == 24 + 48);
static_assert(offsetof(v7::Descr, coll.user_tag) == 24 + 104 && offsetof(v7::Descr, kernel_phase.timer) == 24 + 16);
static_assert(sizeof(PluginV7) == 48);

}  // namespace p2ptrace::nccl_profiler

#undef P2PTRACE_PROFILER_COLL_V2_HEAD
#undef P2PTRACE_PROFILER_COLL_V4
#undef P2PTRACE_PROFILER_P2P_V4
#undef P2PTRACE_PROFILER_COLL_API_V5
#undef P2PTRACE_PROFILER_P2P_API_V5
#undef P2PTRACE_PROFILER_CE_COLL_V6
