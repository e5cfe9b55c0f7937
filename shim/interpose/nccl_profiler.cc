// The shim as NCCL's profiler plugin (nccl_profiler.h). NCCL calls it for every event its mask
// asks for, on the program's threads (P2p, Coll: when enqueued) and on its proxy or profiler thread
// (KernelCh: when the GPU's channel counters move), so the callbacks of an operation sampled out
// return at once: a null handle, and NCCL gives a null parent to its channels. A sampled operation
// holds one slot per channel; the thread that stops its last channel writes its record.
// Facts on the ABI and its callers: docs/research/nccl-profiler-abi.md.
#include "shim/interpose/nccl_profiler.h"

#include <dlfcn.h>
#include <strings.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"
#include "shim/base/environment.h"
#include "shim/base/fd.h"
#include "shim/interpose/nccl_profiler_abi.h"
#include "shim/nccl_log_tap.h"
#include "shim/record/graphs.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

namespace np = nccl_profiler;

// The shim's soname: dlopen of a bare name finds an object already loaded under that soname, so NCCL
// gets the preloaded shim itself, and every release's name rule opens a "lib*.so" name verbatim
// (2.27.3 opens nothing else).
constexpr const char kPluginName[] = "libp2ptrace.so";
constexpr const char kDefaultPlugin[] = "libnccl-profiler.so";  // what NCCL loads when nothing is set
constexpr int kFirstTimedVersion = 4;  // profiler ABI v4 (NCCL 2.27.3): the first with GPU timers
constexpr int kEvents = np::kP2p | np::kColl | np::kKernelCh;
constexpr size_t kMaxPending = 4096;  // operations of one communicator awaiting their channels

std::atomic<bool> g_env_ours{false};  // NCCL_PROFILER_PLUGIN holds the shim's name, set by it
std::atomic<int> g_timing_contexts{0};  // communicators whose operations the kernel timers sample
std::atomic<int> g_live_contexts{0};    // communicators NCCL told the shim of, not finalized
std::atomic<bool> g_armed{false};       // the shim stood in NCCL_PROFILER_PLUGIN once: NCCL loads it
// The wrappers decide the sample (no program's plugin to forward to): NCCL's mask holds the shim's
// bits only while the sample window is open (BeginKernelSample), and every P2p or Coll event NCCL
// starts is of a call made then.
std::atomic<bool> g_by_call{false};
std::atomic<int*> g_mask{nullptr};  // NCCL's process-wide mask
int g_base_mask = 0;                // what stood in it before the shim's first init
// The window's holders (sampled calls whose operations have not taken their mask yet) and the
// shim's bits in NCCL's mask change together, under the mutex: the bits are in exactly while some
// call holds the window. Read unlocked only to see whether a window is open.
std::mutex g_window_mu;
std::atomic<int> g_holders{0};
constinit thread_local bool t_window __attribute__((tls_model("initial-exec"))) = false;  // this thread holds it

// This thread's call no longer needs the bits (its operations took the mask): the last holder out
// takes them out of NCCL's mask.
__attribute__((noinline)) void CloseWindow() {
  std::lock_guard<std::mutex> lock(g_window_mu);
  t_window = false;
  if (g_holders.fetch_sub(1) == 1)
    if (int* m = g_mask.load(std::memory_order_acquire)) __atomic_store_n(m, g_base_mask, __ATOMIC_RELAXED);
}

enum class Kind : uint8_t { kOp = 1, kChannel = 2, kFwd = 3 };

struct Op;
// A channel's times: written by NCCL's proxy or profiler thread, read by whichever thread writes the
// record (the last stop, or a finalize racing a late stop): atomics, so that neither is undefined.
struct Channel {
  Kind kind = Kind::kChannel;
  Op* op = nullptr;      // set with the operation, before NCCL sees it
  std::atomic<uint64_t> start{0}, stop{0};
};

struct Context;
struct Op {
  Kind kind = Kind::kOp;
  Context* ctx = nullptr;
  Op *prev = nullptr, *next = nullptr;  // the communicator's pending list
  uint64_t bytes = 0, coll_seq = 0;
  int peer = -1;
  uint8_t api = 0, algo = 0;
  uint32_t expected = 0;               // channels NCCL announced
  std::atomic<uint32_t> stopped{0};    // of them, stopped
  Channel ch[64];
};

// One communicator, from NCCL's init to its finalize. Never freed: NCCL may still report a channel
// of an operation after finalize (a handle into it must stay valid). A finalized one with nothing
// pending is taken again by a later init, once another init came in between (RecycledContext): a job
// that re-creates its communicators for days keeps two or three per rank.
struct Context {
  uint64_t comm_hash = 0;
  int rank = -1, nranks = 0, abi = 0;
  std::atomic<uint64_t> ops{0};  // operations seen, for the sample
  std::mutex mu;                 // the pending list
  Op* pending = nullptr;
  size_t npending = 0;
  bool finalized = false;
  bool timing = false;  // the shim times this communicator's operations
  // Forwarding to the program's own plugin (below): its table, its context, the handle ring.
  const struct UserPlugin* user = nullptr;
  void* user_ctx = nullptr;
  struct Fwd* fwd = nullptr;
  std::atomic<uint64_t> next_fwd{0};
  uint64_t finalized_before = 0;  // the number of inits seen when it was finalized
  Context* next_free = nullptr;   // the finalized ones (g_free_mu)
};

std::mutex g_free_mu;
Context* g_free = nullptr;  // finalized contexts, newest first
uint64_t g_inits = 0;       // inits seen (g_free_mu)

// A finalized context no callback has named since an init came after its finalize, reset for a new
// communicator (its forwarding ring kept); else a new one. Counts this init.
Context* RecycledContext() {
  std::lock_guard<std::mutex> lock(g_free_mu);
  ++g_inits;
  for (Context** at = &g_free; *at != nullptr; at = &(*at)->next_free) {
    Context* c = *at;
    if (c->finalized_before + 2 > g_inits || c->npending != 0) continue;
    *at = c->next_free;
    struct Fwd* fwd = c->fwd;
    c->~Context();
    new (c) Context();
    c->fwd = fwd;
    return c;
  }
  return new (std::nothrow) Context;
}

bool Sampled(Context* c, uint64_t bytes) {
  return detail::g_sample.Takes(c->ops.fetch_add(1, std::memory_order_relaxed), bytes);
}

uint8_t FuncApi(const char* f) {
  if (f == nullptr) return 0;
  static constexpr struct {
    const char* name;
    uint8_t api;
  } kFuncs[] = {{"Send", P2PTRACE_NCCL_Send},           {"Recv", P2PTRACE_NCCL_Recv},
                {"AllReduce", P2PTRACE_NCCL_AllReduce}, {"AllGather", P2PTRACE_NCCL_AllGather},
                {"ReduceScatter", P2PTRACE_NCCL_ReduceScatter}, {"Broadcast", P2PTRACE_NCCL_Broadcast},
                {"Reduce", P2PTRACE_NCCL_Reduce}};
  for (const auto& k : kFuncs)
    if (std::strcmp(f, k.name) == 0) return k.api;
  return 0;
}

// ncclDatatypeToString's words, by their last two characters ("ncclFloat32", "ncclBfloat16"; "Unknown"
// is what it says of ncclUint8; the fp8 types end in "m3"/"m2"). It runs for every operation, sampled
// or not: NCCL hands out the same constant string for a type each time, so the thread's last answer
// is kept by the string's address and a repeat costs a compare (bench.budgets.nccl).
size_t TypeSizeOf(const char* t) {
  if (t == nullptr) return 1;
  size_t n = std::strlen(t);
  if (n < 2) return 1;
  char a = t[n - 2], b = t[n - 1];
  return a == '6' && b == '4' ? 8 : a == '3' && b == '2' ? 4 : a == '1' && b == '6' ? 2 : 1;
}
struct LastType {
  const char* name;
  size_t size;
};
constinit thread_local LastType t_last_type __attribute__((tls_model("initial-exec"))) = {nullptr, 1};
inline size_t TypeSize(const char* t) {
  LastType& last = t_last_type;
  if (__builtin_expect(t == last.name && t != nullptr, 1)) return last.size;
  last = {t, TypeSizeOf(t)};
  return last.size;
}

uint8_t Algo(const char* a) {
  if (a == nullptr) return P2PTRACE_NCCL_ALGO_UNKNOWN;
  if (std::strcmp(a, "RING") == 0) return P2PTRACE_NCCL_ALGO_RING;
  if (std::strcmp(a, "TREE") == 0) return P2PTRACE_NCCL_ALGO_TREE;
  return P2PTRACE_NCCL_ALGO_OTHER;
}

// The record of an operation whose channels are in (some of them, when `partial`).
void Write(const Op& op, bool partial) {
  uint64_t mask = 0, first = UINT64_MAX, last = 0, sum = 0;
  for (int c = 0; c < 64; ++c) {
    uint64_t start = op.ch[c].start.load(std::memory_order_relaxed), stop = op.ch[c].stop.load(std::memory_order_relaxed);
    if (stop == 0 || stop < start) continue;  // not stopped (or a clock gone backwards): not measured
    mask |= 1ull << c;
    first = start < first ? start : first;
    last = stop > last ? stop : last;
    sum += stop - start;
  }
  if (mask == 0 || !TraceWriter::Ready()) return;
  const Context& ctx = *op.ctx;
  TraceWriter::Emit<p2ptrace_nccl_kernel_record>(P2PTRACE_RECORD_NCCL_KERNEL, 0, [&](p2ptrace_nccl_kernel_record& r) {
    r.comm_hash = ctx.comm_hash;
    r.bytes = op.bytes;
    r.coll_seq = op.coll_seq;
    r.channel_mask = mask;
    r.gpu_start_ns = first;
    r.duration_ns = last - first;
    r.channel_ns = sum;
    r.rank = ctx.rank;
    r.nranks = ctx.nranks;
    r.peer = op.peer;
    r.api = op.api;
    r.channels = static_cast<uint8_t>(__builtin_popcountll(mask));
    r.abi = static_cast<uint8_t>(ctx.abi);
    r.algo = op.algo;
    r.flags = partial ? P2PTRACE_NCCL_KERNEL_PARTIAL : 0;
  });
}

void Unlink(Op* op) {  // ctx->mu held
  Context* c = op->ctx;
  (op->prev ? op->prev->next : c->pending) = op->next;
  if (op->next) op->next->prev = op->prev;
  --c->npending;
}

// The operation's last channel stopped: its record, and its memory back.
void Complete(Op* op) {
  KeepErrno keep;  // NCCL's errno is the program's: a chunk claimed here must not change it
  Context* c = op->ctx;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->finalized) return;  // written at finalize; its slots stay for NCCL's late calls
    Unlink(op);
  }
  Write(*op, false);
  delete op;
}

template <typename Descr>
Op* MakeOp(Context* c, const Descr& d, uint64_t bytes, uint32_t expected);

// Every P2p and Coll event of a timed communicator comes here, sampled or not: the sampled-out case
// is kept to a few instructions and no stack frame (bench.budgets.nccl); the rest is out of line.
template <typename Descr>
inline Op* NewOp(Context* c, const Descr& d) {
  const bool p2p = d.type == np::kP2p;
  uint64_t bytes = p2p ? d.p2p.count * TypeSize(d.p2p.datatype) : d.coll.count * TypeSize(d.coll.datatype);
  uint32_t expected = p2p ? d.p2p.channels : d.coll.channels;
  if (expected == 0 || expected > 64) return nullptr;
  if (!g_by_call.load(std::memory_order_relaxed) && !Sampled(c, bytes)) return nullptr;
  return MakeOp(c, d, bytes, expected);
}

template <typename Descr>
__attribute__((noinline)) Op* MakeOp(Context* c, const Descr& d, uint64_t bytes, uint32_t expected) {
  const bool p2p = d.type == np::kP2p;
  uint8_t api = FuncApi(p2p ? d.p2p.func : d.coll.func), algo = 0;
  int peer = p2p ? d.p2p.peer : -1;
  uint64_t coll_seq = 0;
  if (!p2p) {
    if (api == P2PTRACE_NCCL_Broadcast || api == P2PTRACE_NCCL_Reduce) peer = d.coll.root;
    coll_seq = d.coll.seq;
    algo = Algo(d.coll.algo);
  }
  if (api == 0) return nullptr;
  KeepErrno keep;
  auto* op = new (std::nothrow) Op;
  if (op == nullptr) return nullptr;
  op->ctx = c;
  for (Channel& ch : op->ch) ch.op = op;
  op->bytes = bytes;
  op->coll_seq = coll_seq;
  op->peer = peer;
  op->api = api;
  op->algo = algo;
  op->expected = expected;
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->finalized || c->npending >= kMaxPending) {
    delete op;
    return nullptr;
  }
  op->next = c->pending;
  if (c->pending) c->pending->prev = op;
  c->pending = op;
  ++c->npending;
  return op;
}

// ---- the program's own plugin, forwarded ----------------------------------------------------------
// Where the program set NCCL_PROFILER_PLUGIN, the shim loads that plugin itself and takes its place:
// NCCL calls the shim, the shim calls the plugin with the same arguments, events and states it
// would have had alone. Only the same ABI version NCCL picks for the shim can be forwarded (no
// descriptor is converted); else the program's plugin stays, untouched.
struct UserPlugin {
  std::string name;      // as the program set it: given back once NCCL has read it
  bool by_default = false;  // NCCL's default libnccl-profiler.so: the program set nothing
  int version = 0;       // the ncclProfiler_vN found (NCCL's newest for its release)
  const void* table = nullptr;  // ncclProfiler_vN: name, init, start, stop, state, finalize
  ncclResult_t (*start)(void*, void**, void*) = nullptr;
  ncclResult_t (*stop)(void*) = nullptr;
  ncclResult_t (*state)(void*, np::State, np::StateArgs*) = nullptr;
  ncclResult_t (*finalize)(void*) = nullptr;
};
std::atomic<const UserPlugin*> g_user{nullptr};
int g_user_mask = 0;  // the mask the program's plugin sets and reads (NCCL's, as it would be alone)
std::atomic<int*> g_nccl_mask{nullptr};

// An event the program's plugin would have seen alone: its bit, or a child's that NCCL starts its
// ancestors for (docs/research/nccl-profiler-abi.md §4, "Parent events are started implicitly").
bool UserWants(uint64_t type, int m) {
  constexpr int kChildren = np::kProxyOp | np::kProxyStep | np::kKernelCh | np::kNetPlugin;
  switch (type) {
    case np::kGroupApi: return m != 0;
    case np::kCollApi: return m & (np::kCollApi | np::kColl | kChildren | np::kCeColl | np::kCeSync | np::kCeBatch);
    case np::kP2pApi: return m & (np::kP2pApi | np::kP2p | kChildren);
    case np::kGroup: return m & (np::kGroup | np::kColl | np::kP2p | kChildren);
    case np::kColl: return m & (np::kColl | kChildren);
    case np::kP2p: return m & (np::kP2p | kChildren);
    case np::kProxyOp: return m & (np::kProxyOp | np::kProxyStep | np::kNetPlugin);
    case np::kProxyStep: return m & (np::kProxyStep | np::kNetPlugin);
    case np::kKernelCh: return m & (np::kKernelCh | np::kKernelPhase);
    default: return (m & type) != 0;
  }
}

// NCCL's mask: the program's plugin's bits and the shim's.
void SyncMask() {
  if (int* m = g_nccl_mask.load(std::memory_order_relaxed))
    __atomic_store_n(m, __atomic_load_n(&g_user_mask, __ATOMIC_RELAXED) | kEvents, __ATOMIC_RELAXED);
}

// A forwarded event's handle: the plugin's and the shim's own. Taken from the communicator's ring of
// slots, as NCCL's example plugin keeps its events: a parent must stay valid until NCCL has started
// its children (after the parent's stop), so no slot is freed; the oldest is reused.
struct Fwd {
  Kind kind = Kind::kFwd;
  void* user = nullptr;
  void* own = nullptr;
};
constexpr size_t kFwdSlots = 1 << 13;

Fwd* NextFwd(Context* c) {
  if (c->fwd == nullptr) return nullptr;
  return &c->fwd[c->next_fwd.fetch_add(1, std::memory_order_relaxed) % kFwdSlots];
}

void* Inner(void* handle, void** user) {
  auto* f = static_cast<Fwd*>(handle);
  if (f == nullptr || f->kind != Kind::kFwd) {
    if (user) *user = nullptr;
    return handle;
  }
  if (user) *user = f->user;
  return f->own;
}

// ---- the callbacks --------------------------------------------------------------------------------

// The shim's own handle for an event (parent: the shim's own handle of its parent).
template <typename Descr>
void* Own(Context* c, const Descr& d, void* parent) {
  if (d.type == np::kKernelCh) {
    auto* op = static_cast<Op*>(parent);  // the P2p or Coll handle: an Op of ours, or null
    unsigned ch = d.kernel_ch.channel;
    if (op == nullptr || op->kind != Kind::kOp || ch >= 64) return nullptr;
    Channel& slot = op->ch[ch];
    slot.start.store(d.kernel_ch.timer, std::memory_order_relaxed);
    slot.stop.store(0, std::memory_order_relaxed);
    return &slot;
  }
  if (d.type == np::kP2p || d.type == np::kColl) {
    // NCCL starts these at the launch, after the call's operations copied the mask: the window this
    // thread holds can close now, before the launch waits for anything.
    if (__builtin_expect(t_window, 0)) CloseWindow();
    if (c->timing) return NewOp(c, d);
  }
  return nullptr;
}

// Out of line: the program's own plugin is rare, and inlined it would give StartEvent's common path
// its frame and saved registers.
template <typename Descr>
__attribute__((noinline, cold)) ncclResult_t Forward(Context* c, void** handle, Descr* d, const UserPlugin& u) {
  void* user_parent = nullptr;
  void* own = Own(c, *d, Inner(d->parent, &user_parent));
  void* user = nullptr;
  if (d->type == np::kGroup || d->type == np::kGroupApi) SyncMask();  // the plugin may have changed its mask
  if (c->user_ctx != nullptr && UserWants(d->type, __atomic_load_n(&g_user_mask, __ATOMIC_RELAXED))) {
    Descr copy = *d;
    copy.parent = user_parent;
    if constexpr (requires { copy.p2p.parent_group; }) {  // v5+: the Group as well as the API parent
      if (d->type == np::kP2p) Inner(d->p2p.parent_group, &copy.p2p.parent_group);
      if (d->type == np::kColl) Inner(d->coll.parent_group, &copy.coll.parent_group);
    }
    u.start(c->user_ctx, &user, &copy);
  }
  if (own == nullptr && user == nullptr) return ncclSuccess;
  Fwd* f = NextFwd(c);
  if (f == nullptr) return ncclSuccess;
  f->user = user;
  f->own = own;
  *handle = f;
  return ncclSuccess;
}

template <typename Descr>
ncclResult_t StartEvent(void* context, void** handle, Descr* d) {
  if (handle == nullptr) return ncclSuccess;
  *handle = nullptr;
  auto* c = static_cast<Context*>(context);
  if (c == nullptr || d == nullptr) return ncclSuccess;
  if (const UserPlugin* u = c->user; __builtin_expect(u != nullptr, 0)) return Forward(c, handle, d, *u);
  *handle = Own(c, *d, d->parent);
  return ncclSuccess;
}

ncclResult_t RecordEventState(void* handle, np::State state, np::StateArgs* args) {
  void* user = nullptr;
  auto* ch = static_cast<Channel*>(Inner(handle, &user));
  if (user != nullptr)
    if (const UserPlugin* u = g_user.load(std::memory_order_acquire)) u->state(user, state, args);
  if (ch != nullptr && ch->kind == Kind::kChannel && state == np::kKernelChStop && args != nullptr)
    ch->stop.store(args->kernel_ch.timer, std::memory_order_relaxed);
  return ncclSuccess;
}

ncclResult_t StopEvent(void* handle) {
  void* user = nullptr;
  auto* ch = static_cast<Channel*>(Inner(handle, &user));
  if (user != nullptr)
    if (const UserPlugin* u = g_user.load(std::memory_order_acquire)) u->stop(user);
  if (ch == nullptr || ch->kind != Kind::kChannel) return ncclSuccess;  // an Op stops when enqueued: nothing yet
  Op* op = ch->op;
  // Read before the count moves: once it has, another channel's thread may complete and free `op`.
  const uint32_t expected = op->expected;
  if (op->stopped.fetch_add(1, std::memory_order_acq_rel) + 1 == expected) Complete(op);
  return ncclSuccess;
}

ncclResult_t Finalize(void* context) {
  auto* c = static_cast<Context*>(context);
  if (c == nullptr) return ncclSuccess;
  KeepErrno keep;
  if (c->user != nullptr && c->user_ctx != nullptr) c->user->finalize(c->user_ctx);
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->finalized) return ncclSuccess;
  if (c->timing) g_timing_contexts.fetch_sub(1, std::memory_order_relaxed);
  g_live_contexts.fetch_sub(1, std::memory_order_release);
  c->finalized = true;
  // What had started and not finished (a communicator destroyed or aborted in flight): the channels
  // that stopped, flagged partial. The operations stay allocated: NCCL may still name their slots.
  for (Op* op = c->pending; op != nullptr; op = op->next) Write(*op, true);
  std::lock_guard<std::mutex> free_lock(g_free_mu);
  c->finalized_before = g_inits;
  c->next_free = g_free;
  g_free = c;
  return ncclSuccess;
}

// NCCL's init arguments, whichever version called.
struct InitArgs {
  void** context;
  int* mask;
  const char* name;
  uint64_t comm_hash;
  int nodes, nranks, rank;
  np::Logger log;
};

ncclResult_t Init(const InitArgs& a, int abi) {
  KeepErrno keep;
  ReturnNcclProfilerEnvironment();
  if (a.context == nullptr) return ncclSuccess;
  *a.context = nullptr;
  const UserPlugin* u = g_user.load(std::memory_order_acquire);
  if (u != nullptr && u->version != abi) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      Warn("NCCL called p2ptrace's profiler v" + std::to_string(abi) + ", not v" + std::to_string(u->version) +
           " as expected: NCCL_PROFILER_PLUGIN=" + u->name + " gets no events in this process");
    u = nullptr;
  }
  bool timing = TraceWriter::Ready() && detail::g_sample.enabled;
  if (!timing && u == nullptr) return ncclSuccess;  // NCCL runs on, nothing timed
  Context* c = RecycledContext();
  if (c == nullptr) return ncclSuccess;
  c->comm_hash = a.comm_hash;
  c->nranks = a.nranks;
  c->rank = a.rank;
  c->abi = abi;
  c->timing = timing;
  g_live_contexts.fetch_add(1, std::memory_order_release);
  if (u != nullptr && a.mask != nullptr) {
    // The program's plugin keeps its own view of the one process-wide mask: what it set last.
    static std::once_flag first;
    std::call_once(first, [&] { __atomic_store_n(&g_user_mask, __atomic_load_n(a.mask, __ATOMIC_RELAXED), __ATOMIC_RELAXED); });
    g_nccl_mask.store(a.mask, std::memory_order_relaxed);
    if (c->fwd == nullptr) c->fwd = new (std::nothrow) Fwd[kFwdSlots];
    ncclResult_t r = ncclSuccess;
    if (u->version == 4)
      r = static_cast<const np::PluginV4*>(u->table)->init(&c->user_ctx, &g_user_mask, a.name, a.comm_hash, a.nodes,
                                                           a.nranks, a.rank, a.log);
    else
      r = static_cast<const np::PluginV5*>(u->table)->init(&c->user_ctx, a.comm_hash, &g_user_mask, a.name, a.nodes,
                                                           a.nranks, a.rank, a.log);
    if (r != ncclSuccess || c->fwd == nullptr) {
      // NCCL would have gone on without it (each release its own way): the shim stops calling it
      // for this communicator and says so once.
      static std::atomic<bool> said{false};
      if (!said.exchange(true))
        Warn("the profiler plugin NCCL_PROFILER_PLUGIN=" + u->name + " failed its init (" + std::to_string(r) +
             "): p2ptrace calls it no more for that communicator");
      c->user_ctx = nullptr;
    } else {
      c->user = u;
    }
  }
  if (a.mask != nullptr) {
    if (u != nullptr) {
      SyncMask();
    } else if (timing) {
      // One int for the whole process, read by NCCL at each call: the shim's bits come and go with
      // the sampled calls (BeginKernelSample).
      static std::once_flag first;
      std::call_once(first, [&] { g_base_mask = __atomic_load_n(a.mask, __ATOMIC_RELAXED); });
      g_mask.store(a.mask, std::memory_order_release);
      g_by_call.store(true, std::memory_order_release);
    }
  }
  if (timing) {
    __atomic_fetch_or(&TraceWriter::header()->capture_flags, P2PTRACE_CAPTURE_NCCL_PROFILER, __ATOMIC_RELAXED);
    g_timing_contexts.fetch_add(1, std::memory_order_relaxed);
  }
  *a.context = c;
  return ncclSuccess;
}

ncclResult_t InitV4(void** context, int* mask, const char* name, uint64_t comm_hash, int nodes, int nranks, int rank,
                    np::Logger log) {
  return Init({context, mask, name, comm_hash, nodes, nranks, rank, log}, 4);
}
template <int kAbi>
ncclResult_t InitV5(void** context, uint64_t comm_hash, int* mask, const char* name, int nodes, int nranks, int rank,
                    np::Logger log) {
  return Init({context, mask, name, comm_hash, nodes, nranks, rank, log}, kAbi);
}

// The names NCCL opens for NCCL_PROFILER_PLUGIN (§3.1, 2.27.5's rule): as given, then
// libnccl-profiler-NAME.so for a bare name not of the form lib*.so.
std::vector<std::string> ProfilerNames(const std::string& x) {
  if (x.find('/') == std::string::npos && !np::IsLibSoName(x)) return {x, "libnccl-profiler-" + x + ".so"};
  return {x};
}

// The program's plugin, the first of `names` that opens (as NCCL tries them), its ncclProfiler_vN for
// NCCL's version; `name` is how the program named it. Null, with the reason, when it cannot be
// forwarded.
const UserPlugin* LoadUserPlugin(const std::vector<std::string>& names, const char* name, int version, bool by_default,
                                 bool* found, std::string* why) {
  void* lib = nullptr;
  for (size_t i = 0; i < names.size() && lib == nullptr; ++i) lib = dlopen(names[i].c_str(), RTLD_NOW | RTLD_LOCAL);
  *found = lib != nullptr;
  if (lib == nullptr) {
    const char* e = dlerror();
    *why = std::string("it could not be loaded (") + (e ? e : "dlopen failed") + ")";
    return nullptr;
  }
  std::string symbol = "ncclProfiler_v" + std::to_string(version);
  const void* table = dlsym(lib, symbol.c_str());
  if (table == nullptr) {
    *why = "it has no " + symbol + ", the version this NCCL calls";
    dlclose(lib);
    return nullptr;
  }
  auto* u = new UserPlugin;  // for the process's life: NCCL may call it until exit
  u->name = name;
  u->by_default = by_default;
  u->version = version;
  u->table = table;
  const auto* any = static_cast<const np::PluginV5*>(table);  // the members after init: the same in v4-v7
  u->start = reinterpret_cast<ncclResult_t (*)(void*, void**, void*)>(any->start_event);
  u->stop = any->stop_event;
  u->state = any->record_event_state;
  u->finalize = any->finalize;
  return u;
}

// What the program had in NCCL_PROFILER_PLUGIN while the shim's name stands there, for a child
// started meanwhile: unset when the program had none (kWasUnset).
constexpr const char kWas[] = "P2PTRACE_PROFILER_WAS";
constexpr const char kWasUnset[] = "P2PTRACE_PROFILER_WAS_UNSET";

// NCCL_PROFILER_PLUGIN as the program set it: a traced parent's stand-in (the shim's name, with the
// marker it left) is taken back first, so that a child started between its parent's first NCCL call
// and its first communicator still has its program's plugin.
const char* ProgramsPlugin() {
  const char* set = std::getenv("NCCL_PROFILER_PLUGIN");
  if (set == nullptr || std::strcmp(set, kPluginName) != 0) return set;
  if (const char* was = std::getenv(kWas)) {
    std::string value = was;
    SetEnvironment("NCCL_PROFILER_PLUGIN", value.c_str());
  } else if (std::getenv(kWasUnset) != nullptr) {
    UnsetEnvironment("NCCL_PROFILER_PLUGIN");
  } else {
    return set;  // the program's own choice of the shim's name: left as it is
  }
  UnsetEnvironment(kWas);
  UnsetEnvironment(kWasUnset);
  return std::getenv("NCCL_PROFILER_PLUGIN");
}

// The shim's name in NCCL_PROFILER_PLUGIN, with the marker of what stood there (StartNcclProfiler,
// and again for a communicator made after NCCL unloaded the plugin).
void PutShimInPlace() {
  const UserPlugin* u = g_user.load(std::memory_order_acquire);
  bool marked = u != nullptr && !u->by_default ? SetEnvironment(kWas, u->name.c_str()) : SetEnvironment(kWasUnset, "1");
  if (marked && SetEnvironment("NCCL_PROFILER_PLUGIN", kPluginName)) g_env_ours.store(true, std::memory_order_release);
}

}  // namespace

void StartNcclProfiler(int nccl_version) {
  if (!TraceWriter::Ready() || !detail::g_sample.enabled || np::NewestVersion(nccl_version) < kFirstTimedVersion) return;
  if (!TraceWriter::config().nccl_profiler) return;
  if (NcclInfoShownToUser()) return;
  const char* set = ProgramsPlugin();
  std::string name = set != nullptr && *set != '\0' ? set : "";
  if (strcasecmp(name.c_str(), "none") == 0) return;  // the program turned NCCL's profiler off: so be it
  // Unset, NCCL loads libnccl-profiler.so where one is on the library path: the program's plugin too.
  bool by_default = name.empty();
  std::string why;
  const UserPlugin* u = nullptr;
  if (by_default) name = kDefaultPlugin;
  if (name != kPluginName) {
    bool found = false;
    const int version = np::NewestVersion(nccl_version);
    u = LoadUserPlugin(ProfilerNames(name), name.c_str(), version, by_default, &found, &why);
    if (u == nullptr && by_default && !found && nccl_version >= np::kNetPluginProfilerSince) {
      // NCCL would look in its network plugin next: a profiler there is the program's too.
      std::vector<std::string> net = np::NetPluginNames(std::getenv("NCCL_NET_PLUGIN"));
      if (!net.empty()) u = LoadUserPlugin(net, net.front().c_str(), version, true, &found, &why);
      if (u == nullptr && found) found = false;  // a network plugin without a profiler: nothing to forward
    }
    if (u == nullptr && by_default && !found) {
      // none: the common case
    } else if (u == nullptr) {
      Warn((by_default ? std::string(kDefaultPlugin) + " (NCCL's default profiler plugin)"
                       : "NCCL_PROFILER_PLUGIN=" + name) +
           " is left in place: p2ptrace cannot forward to it (" + why +
           "), so NCCL's operations are timed per call and per group only (no per-pair kernel times)");
      __atomic_fetch_or(&TraceWriter::header()->capture_flags, P2PTRACE_CAPTURE_NCCL_PROFILER_USER, __ATOMIC_RELAXED);
      return;
    } else {
      g_user.store(u, std::memory_order_release);
    }
  }
  PutShimInPlace();
  g_armed.store(true, std::memory_order_release);
}

void RearmNcclProfiler() {
  if (!g_armed.load(std::memory_order_acquire) || g_env_ours.load(std::memory_order_acquire) ||
      g_live_contexts.load(std::memory_order_acquire) > 0)
    return;
  const char* now = std::getenv("NCCL_PROFILER_PLUGIN");
  const UserPlugin* u = g_user.load(std::memory_order_acquire);
  bool as_returned = u != nullptr && !u->by_default ? now != nullptr && u->name == now : now == nullptr;
  if (as_returned) PutShimInPlace();  // else the program changed it since: its choice stands
}

bool NcclKernelTimersMeasure() { return g_timing_contexts.load(std::memory_order_relaxed) > 0; }

bool NcclSamplesByCall() { return g_by_call.load(std::memory_order_relaxed) && NcclKernelTimersMeasure(); }

// The bits go in with the window's first holder and out with its last, under one lock: no call
// sampled here is left without them. None while a capture runs anywhere in the process (an
// operation another thread captured meanwhile would take the timer work into its graph for every
// replay): the holder is counted before the capture is looked at, and a captured call looks at the
// holders after its capture began (AwaitNoKernelSample), so one of the two sees the other.
bool BeginKernelSample() {
  int* m = g_mask.load(std::memory_order_acquire);
  if (m == nullptr) return false;
  std::lock_guard<std::mutex> lock(g_window_mu);
  if (g_holders.fetch_add(1) == 0) {
    if (graphs::AnyCapture()) {
      g_holders.fetch_sub(1);
      return false;
    }
    __atomic_store_n(m, g_base_mask | kEvents, __ATOMIC_RELAXED);
  }
  t_window = true;
  return true;
}
void EndKernelSample() {
  if (t_window) CloseWindow();
}

void AwaitNoKernelSample() {
  // A window lasts from a sampled call's entry to its launch: microseconds, or a first connect's
  // wait. Bounded, so that nothing can wait on a window whose holder waits on this thread.
  for (int spins = 0; g_holders.load() > 0 && spins < 20000; ++spins) {
    struct timespec pause = {0, 50000};
    nanosleep(&pause, nullptr);
  }
}

// In the reverse order of PutShimInPlace (the variable, then its marker), so that each change takes
// off the environment's last variable and allocates nothing (environment.h).
void ReturnNcclProfilerEnvironment() {
  if (!g_env_ours.load(std::memory_order_acquire) || !g_env_ours.exchange(false)) return;
  const char* now = std::getenv("NCCL_PROFILER_PLUGIN");
  if (now != nullptr && std::strcmp(now, kPluginName) == 0) {  // else someone else changed it since
    const UserPlugin* u = g_user.load(std::memory_order_acquire);
    if (u != nullptr && !u->by_default) SetEnvironment("NCCL_PROFILER_PLUGIN", u->name.c_str());
    else UnsetEnvironment("NCCL_PROFILER_PLUGIN");
  }
  UnsetEnvironment(kWas);
  UnsetEnvironment(kWasUnset);
}

}  // namespace p2ptrace::shim

// The tables NCCL looks up (newest first, from its own newest version). Not const: NCCL's
// headers declare them as plain objects.
#define P2PTRACE_PROFILER_TABLE(N, Plugin, Descr, InitFn)                                                         \
  extern "C" __attribute__((visibility("default"))) p2ptrace::nccl_profiler::Plugin ncclProfiler_v##N;            \
  p2ptrace::nccl_profiler::Plugin ncclProfiler_v##N = {                                                           \
      "p2ptrace", InitFn, p2ptrace::shim::StartEvent<p2ptrace::nccl_profiler::Descr>, p2ptrace::shim::StopEvent, \
      p2ptrace::shim::RecordEventState, p2ptrace::shim::Finalize};
P2PTRACE_PROFILER_TABLE(4, PluginV4, v4::Descr, p2ptrace::shim::InitV4)
P2PTRACE_PROFILER_TABLE(5, PluginV5, v5::Descr, p2ptrace::shim::InitV5<5>)
P2PTRACE_PROFILER_TABLE(6, PluginV6, v6::Descr, p2ptrace::shim::InitV5<6>)
P2PTRACE_PROFILER_TABLE(7, PluginV7, v7::Descr, p2ptrace::shim::InitV5<7>)
