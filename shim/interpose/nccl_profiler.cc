// The shim as NCCL's profiler plugin (nccl_profiler.h). NCCL calls it for every event its mask
// asks for, on the program's threads (P2p, Coll: when enqueued) and on its proxy or profiler thread
// (KernelCh: when the GPU's channel counters move), so the callbacks of an operation sampled out
// return at once: a null handle, and NCCL gives a null parent to its channels. A sampled operation
// holds one slot per channel; the thread that stops its last channel writes its record.
// Facts on the ABI and its callers: docs/research/nccl-profiler-abi.md.
#include "shim/interpose/nccl_profiler.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "p2ptrace/trace_format.h"
#include "p2ptrace/vocabulary.h"
#include "shim/base/fd.h"
#include "shim/interpose/nccl_profiler_abi.h"
#include "shim/nccl_log_tap.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

namespace np = nccl_profiler;

// The shim's soname: dlopen of a bare name finds an object already loaded under that soname, so NCCL
// gets the preloaded shim itself, and every release's name rule opens a "lib*.so" name verbatim
// (2.27.3 opens nothing else).
constexpr const char kPluginName[] = "libp2ptrace.so";
constexpr int kFirstVersion = 22703;  // 2.27.3: profiler ABI v4, the first with GPU timers
constexpr int kEvents = np::kP2p | np::kColl | np::kKernelCh;
constexpr size_t kMaxPending = 4096;  // operations of one communicator awaiting their channels

std::atomic<bool> g_env_ours{false};  // NCCL_PROFILER_PLUGIN holds the shim's name, set by it

enum class Kind : uint8_t { kOp = 1, kChannel = 2 };

struct Op;
struct Channel {
  Kind kind = Kind::kChannel;
  Op* op = nullptr;
  uint64_t start = 0, stop = 0;
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
// of an operation after finalize (a handle into it must stay valid), and communicators are few.
struct Context {
  uint64_t comm_hash = 0;
  int rank = -1, nranks = 0, abi = 0;
  std::atomic<uint64_t> ops{0};  // operations seen, for the sample
  std::mutex mu;                 // the pending list
  Op* pending = nullptr;
  size_t npending = 0;
  bool finalized = false;
};

bool Sampled(Context* c, uint64_t bytes) {
  const SampleSpec& s = detail::g_sample;
  uint64_t n = c->ops.fetch_add(1, std::memory_order_relaxed);
  return n < s.first || n % s.every == 0 || bytes >= s.min_bytes;
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
// is what it says of ncclUint8; the fp8 types end in "m3"/"m2"): cheap, it runs for every operation.
size_t TypeSize(const char* t) {
  if (t == nullptr) return 1;
  size_t n = std::strlen(t);
  if (n < 2) return 1;
  char a = t[n - 2], b = t[n - 1];
  return a == '6' && b == '4' ? 8 : a == '3' && b == '2' ? 4 : a == '1' && b == '6' ? 2 : 1;
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
    const Channel& ch = op.ch[c];
    if (ch.op == nullptr || ch.stop < ch.start || ch.stop == 0) continue;
    mask |= 1ull << c;
    first = ch.start < first ? ch.start : first;
    last = ch.stop > last ? ch.stop : last;
    sum += ch.stop - ch.start;
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

// The sample decides first: an operation sampled out costs a type size and a counter.
template <typename Descr>
Op* NewOp(Context* c, const Descr& d) {
  const bool p2p = d.type == np::kP2p;
  uint64_t bytes = p2p ? d.p2p.count * TypeSize(d.p2p.datatype) : d.coll.count * TypeSize(d.coll.datatype);
  uint32_t expected = p2p ? d.p2p.channels : d.coll.channels;
  if (expected == 0 || expected > 64 || !Sampled(c, bytes)) return nullptr;
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

template <typename Descr>
ncclResult_t StartEvent(void* context, void** handle, Descr* d) {
  if (handle == nullptr) return ncclSuccess;
  *handle = nullptr;
  auto* c = static_cast<Context*>(context);
  if (c == nullptr || d == nullptr) return ncclSuccess;
  if (d->type == np::kKernelCh) {
    auto* op = static_cast<Op*>(d->parent);  // the P2p or Coll handle: an Op of ours, or null
    unsigned ch = d->kernel_ch.channel;
    if (op == nullptr || op->kind != Kind::kOp || ch >= 64) return ncclSuccess;
    Channel& slot = op->ch[ch];
    slot.op = op;
    slot.start = d->kernel_ch.timer;
    slot.stop = 0;
    *handle = &slot;
  } else if (d->type == np::kP2p || d->type == np::kColl) {
    *handle = NewOp(c, *d);
  }
  return ncclSuccess;
}

ncclResult_t RecordEventState(void* handle, np::State state, np::StateArgs* args) {
  auto* ch = static_cast<Channel*>(handle);
  if (ch != nullptr && ch->kind == Kind::kChannel && state == np::kKernelChStop && args != nullptr)
    ch->stop = args->kernel_ch.timer;
  return ncclSuccess;
}

ncclResult_t StopEvent(void* handle) {
  auto* ch = static_cast<Channel*>(handle);
  if (ch == nullptr || ch->kind != Kind::kChannel) return ncclSuccess;  // an Op stops when enqueued: nothing yet
  Op* op = ch->op;
  if (op->stopped.fetch_add(1, std::memory_order_acq_rel) + 1 == op->expected) Complete(op);
  return ncclSuccess;
}

ncclResult_t Finalize(void* context) {
  auto* c = static_cast<Context*>(context);
  if (c == nullptr) return ncclSuccess;
  KeepErrno keep;
  std::lock_guard<std::mutex> lock(c->mu);
  c->finalized = true;
  // What had started and not finished (a communicator destroyed or aborted in flight): the channels
  // that stopped, flagged partial. The operations stay allocated: NCCL may still name their slots.
  for (Op* op = c->pending; op != nullptr; op = op->next) Write(*op, true);
  return ncclSuccess;
}

ncclResult_t Init(void** context, int* mask, uint64_t comm_hash, int nranks, int rank, int abi) {
  KeepErrno keep;
  ReturnNcclProfilerEnvironment();
  if (context == nullptr) return ncclSuccess;
  *context = nullptr;
  if (!TraceWriter::Ready() || !detail::g_sample.enabled) return ncclSuccess;  // NCCL runs on, nothing timed
  auto* c = new (std::nothrow) Context;
  if (c == nullptr) return ncclSuccess;
  c->comm_hash = comm_hash;
  c->nranks = nranks;
  c->rank = rank;
  c->abi = abi;
  // One int for the whole process (every communicator's init is handed the same pointer).
  if (mask != nullptr) __atomic_fetch_or(mask, kEvents, __ATOMIC_RELAXED);
  __atomic_fetch_or(&TraceWriter::header()->capture_flags, P2PTRACE_CAPTURE_NCCL_PROFILER, __ATOMIC_RELAXED);
  *context = c;
  return ncclSuccess;
}

ncclResult_t InitV4(void** context, int* mask, const char*, uint64_t comm_hash, int, int nranks, int rank, np::Logger) {
  return Init(context, mask, comm_hash, nranks, rank, 4);
}
template <int kAbi>
ncclResult_t InitV5(void** context, uint64_t comm_hash, int* mask, const char*, int, int nranks, int rank, np::Logger) {
  return Init(context, mask, comm_hash, nranks, rank, kAbi);
}

}  // namespace

void StartNcclProfiler(int nccl_version) {
  if (!TraceWriter::Ready() || !detail::g_sample.enabled || nccl_version < kFirstVersion) return;
  const char* off = std::getenv("P2PTRACE_NCCL_PROFILER");
  if (off != nullptr && std::strcmp(off, "off") == 0) return;
  const char* set = std::getenv("NCCL_PROFILER_PLUGIN");
  if (set != nullptr && *set != '\0' && std::strcmp(set, kPluginName) != 0) {  // (ours: a traced parent's)
    Warn(std::string("NCCL_PROFILER_PLUGIN=") + set +
         " is the program's own: p2ptrace leaves it in place and times NCCL's operations per call and per group "
         "(no per-pair kernel times)");
    __atomic_fetch_or(&TraceWriter::header()->capture_flags, P2PTRACE_CAPTURE_NCCL_PROFILER_USER, __ATOMIC_RELAXED);
    return;
  }
  if (NcclInfoShownToUser()) return;
  if (setenv("NCCL_PROFILER_PLUGIN", kPluginName, 1) == 0) g_env_ours.store(true, std::memory_order_release);
}

void ReturnNcclProfilerEnvironment() {
  if (!g_env_ours.load(std::memory_order_acquire) || !g_env_ours.exchange(false)) return;
  const char* now = std::getenv("NCCL_PROFILER_PLUGIN");
  if (now != nullptr && std::strcmp(now, kPluginName) == 0) unsetenv("NCCL_PROFILER_PLUGIN");
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
