// NCCL: the exported ncclX wrappers (one pattern for all, from nccl_functions.h) and what each
// records. NCCL calls some of its own API through the PLT (ncclBcast → ncclBroadcast,
// ncclCommInitAll → ncclGetUniqueId); a thread-local depth makes such a self-call pass straight
// through, so one user call is recorded once. The shim's own CUDA calls (timing events) happen only
// on a runtime that has already answered the application (see cuda_hooks.cc).
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>

#include "p2ptrace/vocabulary.h"
#include "shim/base/bind.h"
#include "shim/base/fd.h"
#include "shim/interpose/nccl_functions.h"
#include "shim/interpose/nccl_profiler.h"
#include "shim/interpose/nccl_watchdog.h"
#include "shim/nccl_log_tap.h"
#include "shim/preflight.h"
#include "shim/record/call_sites.h"
#include "shim/record/copy_timer.h"
#include "shim/record/graphs.h"
#include "shim/record/process_uses.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

// initial-exec: a fixed offset from the thread pointer, no __tls_get_addr call on every NCCL call.
constinit thread_local int t_depth __attribute__((tls_model("initial-exec"))) = 0;  // inside a wrapped NCCL call
constinit thread_local int t_group_depth __attribute__((tls_model("initial-exec"))) = 0;  // inside a group

uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: return 2;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
    case ncclBfloat16: return 2;
#endif
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 1;  // fp8 and types newer than this header
  }
}

// Communicator → the hash its ranks share (for splits, derived from the parent's) and its size
// (0 until NCCL said it: a grouped init's, before the group's end).
struct CommFacts {
  uint64_t id_hash = 0;
  int nranks = 0;
  uint64_t ops = 0;  // operations called, for the kernel timers' sample (atomically)
};
std::mutex g_comms_mu;
std::unordered_map<ncclComm_t, CommFacts>& Comms() {
  static auto* m = new std::unordered_map<ncclComm_t, CommFacts>();
  return *m;
}

// NCCL's own queries the shim asks.
RealFunction g_comm_count{"ncclCommCount", Library::kNccl};
RealFunction g_comm_user_rank{"ncclCommUserRank", Library::kNccl};
RealFunction g_comm_cu_device{"ncclCommCuDevice", Library::kNccl};
using QueryFn = ncclResult_t (*)(ncclComm_t, int*);

// Once per process, at the first wrapped call and before it reaches NCCL (no release reads its
// environment earlier): which NCCL this is, asked through the real ncclGetVersion, which only
// reports a constant. The version goes into the trace header, and an NCCL that would ignore the
// log tap's NCCL_DEBUG_FILE gets the user's settings back before it reads them.
__attribute__((noinline, cold)) void FirstNcclCall() {
  KeepErrno keep;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (NcclCalled()) return;  // another thread did it
  // NCCL's transport lines into the trace directory: set up only now, at the process's first NCCL
  // call; each connection they state is held against the job-start prediction.
  StartNcclLogTap(TraceWriter::config(), PreflightObserveNccl);
  auto get_version = reinterpret_cast<ncclResult_t (*)(int*)>(ResolveReal("ncclGetVersion", Library::kNccl));
  int v = 0;
  if (get_version != nullptr && get_version(&v) == ncclSuccess && v > 0) {
    if (NcclIgnoresDebugFile(v)) WithdrawNcclLogTap();
    NoteNcclVersionForTap(v);
    if (TraceWriter::Ready()) __atomic_store_n(&TraceWriter::header()->nccl_version, v, __ATOMIC_RELAXED);
  }
  StartNcclProfiler(v);  // per-pair kernel times, where this NCCL has them
  // The environment NCCL is about to read (the tap's variables set, or the user's restored).
  if (TraceWriter::IsOpen()) TraceWriter::RecordEnvironment();
  NoteNcclCalled(v);
}

// A communicator made inside ncclGroupStart … ncclGroupEnd (several ranks of one process, a
// grouped ncclCommSplit) is initialised only at the outermost ncclGroupEnd: NCCL cannot say its
// rank and size before that. Its record waits until then (more than the table holds: recorded at
// once, with what NCCL can say then).
struct GroupComm {
  uint8_t api;
  ncclComm_t comm;
  uint64_t id_hash;
};
constexpr int kGroupComms = 64;
constinit thread_local int t_group_comm_count __attribute__((tls_model("initial-exec"))) = 0;
GroupComm* GroupComms();  // this thread's table (below); null when it cannot be had

// A nonblocking communicator's init (ncclConfig_t blocking = 0) returns ncclInProgress: NCCL finishes
// it on a thread of its own, and the program asks ncclCommGetAsyncError until it says ncclSuccess.
// Its record then says so, with its rank and size (SettleAsyncInit). Few at a time: a fixed table.
struct AsyncInit {
  ncclComm_t comm;
  uint64_t id_hash;
  uint8_t api;
};
constexpr int kAsyncInits = 256;
AsyncInit g_async_inits[kAsyncInits];  // g_comms_mu
int g_async_count = 0;                 // g_comms_mu; read unlocked as a hint
void AwaitAsyncInit(uint8_t api, ncclComm_t comm, uint64_t id_hash) {
  std::lock_guard<std::mutex> lock(g_comms_mu);
  Comms()[comm].id_hash = id_hash;  // its operations may be called before it settles
  if (g_async_count == kAsyncInits) return;
  g_async_inits[g_async_count] = {comm, id_hash, api};
  __atomic_store_n(&g_async_count, g_async_count + 1, __ATOMIC_RELAXED);
}
// Takes `comm`'s waiting init out of the table into `*out`; false when none waits. g_comms_mu held.
bool TakeAsyncInit(ncclComm_t comm, AsyncInit* out) {
  for (int i = 0; i < g_async_count; ++i)
    if (g_async_inits[i].comm == comm) {
      *out = g_async_inits[i];
      g_async_inits[i] = g_async_inits[g_async_count - 1];
      __atomic_store_n(&g_async_count, g_async_count - 1, __ATOMIC_RELAXED);
      return true;
    }
  return false;
}

// `entered`: the init's record written when it was entered (EnteringInit), completed in place.
void RecordComm(uint8_t api, ncclComm_t comm, uint64_t id_hash, ncclResult_t r,
                p2ptrace_nccl_comm_record* entered = nullptr) {
  if (!TraceWriter::Ready()) return;
  if (t_group_depth > 0 && r == ncclSuccess && comm != nullptr && api <= P2PTRACE_NCCL_CommSplit &&
      t_group_comm_count < kGroupComms && GroupComms() != nullptr) {
    {
      std::lock_guard<std::mutex> lock(g_comms_mu);
      Comms()[comm].id_hash = id_hash;  // the group's operations and splits may name it before its end
    }
    GroupComms()[t_group_comm_count++] = GroupComm{api, comm, id_hash};
    return;
  }
  if (r != ncclInProgress) ReturnNcclProfilerEnvironment();  // NCCL has read it by now
  if (r == ncclInProgress && comm != nullptr && api <= P2PTRACE_NCCL_CommSplit) AwaitAsyncInit(api, comm, id_hash);
  // The shim's thread comes with the process's first communicator (a fork child's too: its parent's
  // did not come along); a process that only asks NCCL its version or an id stays single-threaded.
  if (r == ncclSuccess && comm != nullptr && api <= P2PTRACE_NCCL_CommSplit) StartNcclWatchdog();
  // Again here: a forked child's trace opens after the process's first call.
  // Atomic: every thread's first communicator writes the same value into the shared header.
  if (int v = LoadedNcclVersion())
    __atomic_store_n(&TraceWriter::header()->nccl_version, v, __ATOMIC_RELAXED);
  p2ptrace_nccl_comm_record rec{};
  rec.comm = reinterpret_cast<uintptr_t>(comm);
  rec.id_hash = id_hash;
  rec.rank = rec.nranks = rec.cuda_device = -1;
  rec.result = r;
  rec.api = api;
  if (r == ncclSuccess && comm != nullptr) {
    // NCCL's own answers: no CUDA call of ours.
    if (auto count = g_comm_count.As<QueryFn>()) count(comm, &rec.nranks);
    if (auto user_rank = g_comm_user_rank.As<QueryFn>()) user_rank(comm, &rec.rank);
    if (auto device = g_comm_cu_device.As<QueryFn>()) device(comm, &rec.cuda_device);
    if (api <= P2PTRACE_NCCL_CommSplit) {
      std::lock_guard<std::mutex> lock(g_comms_mu);
      Comms()[comm] = CommFacts{id_hash, rec.nranks};
    }
  }
  if (entered == nullptr) {
    TraceWriter::Append(rec, P2PTRACE_RECORD_NCCL_COMM, TraceWriter::NextSeq());
    return;
  }
  entered->comm = rec.comm;
  entered->rank = rec.rank;
  entered->nranks = rec.nranks;
  entered->cuda_device = rec.cuda_device;
  __atomic_store_n(&entered->result, rec.result, __ATOMIC_RELEASE);  // last: the rest is in place
}

uint64_t CommHash(ncclComm_t comm);  // below

// A blocking init is about to be entered (outside a group; inside one nothing blocks before its
// end): on record first, pending, so that a rank that never comes out of it is seen there.
// RecordComm completes the record when it returns.
p2ptrace_nccl_comm_record* EnteringInit(uint8_t api, uint64_t id_hash, int rank, int nranks) {
  if (t_group_depth > 0 || !TraceWriter::Ready()) return nullptr;
  StartNcclWatchdog();  // a rank that never comes out of its init is seen by it
  return TraceWriter::Emit<p2ptrace_nccl_comm_record>(P2PTRACE_RECORD_NCCL_COMM, 0, [&](p2ptrace_nccl_comm_record& rec) {
    rec.id_hash = id_hash;
    rec.rank = rank;
    rec.nranks = nranks;
    rec.cuda_device = -1;
    rec.result = P2PTRACE_RESULT_PENDING;
    rec.api = api;
  });
}

// ncclCommGetAsyncError's answer when it is an error: once per communicator and value (PyTorch's
// watchdog asks every communicator many times a second).
void RecordAsyncError(ncclComm_t comm, ncclResult_t error) {
  static std::mutex mu;
  static auto* seen = new std::vector<std::pair<ncclComm_t, ncclResult_t>>();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (std::find(seen->begin(), seen->end(), std::make_pair(comm, error)) != seen->end() || seen->size() >= 4096) return;
    seen->push_back({comm, error});
  }
  if (!TraceWriter::Ready()) return;
  p2ptrace_nccl_comm_record rec{};
  rec.comm = reinterpret_cast<uintptr_t>(comm);
  rec.id_hash = CommHash(comm);
  rec.rank = rec.nranks = rec.cuda_device = -1;
  rec.result = error;
  rec.api = P2PTRACE_NCCL_CommGetAsyncError;
  TraceWriter::Append(rec, P2PTRACE_RECORD_NCCL_COMM, 0);
}

// The CUDA device of a communicator an init just made; -1 when it failed or NCCL does not say.
int CommDevice(ncclResult_t r, ncclComm_t* comm) {
  int device = -1;
  auto cu_device = g_comm_cu_device.As<QueryFn>();
  if (r != ncclSuccess || comm == nullptr || *comm == nullptr || cu_device == nullptr || cu_device(*comm, &device) != ncclSuccess)
    return -1;
  return device;
}

// ncclCommGetAsyncError said a nonblocking init is over (`state`: ncclSuccess or its error): the
// communicator's record, as a blocking init's return would have written it.
void SettleAsyncInit(ncclComm_t comm, ncclResult_t state) {
  if (__atomic_load_n(&g_async_count, __ATOMIC_RELAXED) == 0) return;  // the common case: none waits
  AsyncInit settled{};
  {
    std::lock_guard<std::mutex> lock(g_comms_mu);
    if (!TakeAsyncInit(comm, &settled)) return;
  }
  RecordComm(settled.api, state == ncclSuccess ? comm : nullptr, settled.id_hash, state);
  if (state == ncclSuccess) PreflightAfterNcclInit(CommDevice(state, &comm));  // where the init left it for later
}

uint64_t CommHash(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_comms_mu);
  auto it = Comms().find(comm);
  return it == Comms().end() ? 0 : it->second.id_hash;
}

// The facts of `comm`, null when no record named it. A thread keeps its last few answers (tensor- and
// data-parallel communicators alternate), good while no communicator was forgotten since: an element
// of Comms() stays where it is until its communicator is destroyed, and one made again at the same
// address is assigned in place.
std::atomic<uint64_t> g_comms_epoch{1};  // moves when a communicator is forgotten (ForgetComm)
constexpr int kCachedFacts = 4;
struct FactsCache {
  uint64_t epoch;  // 0: never filled
  unsigned next;
  ncclComm_t comm[kCachedFacts];
  CommFacts* facts[kCachedFacts];
};
constinit thread_local FactsCache t_facts __attribute__((tls_model("initial-exec"))) = {};
CommFacts* FactsOf(ncclComm_t comm) {
  FactsCache& cache = t_facts;
  const uint64_t epoch = g_comms_epoch.load(std::memory_order_acquire);
  if (cache.epoch == epoch)
    for (int i = 0; i < kCachedFacts; ++i)
      if (cache.comm[i] == comm && cache.facts[i] != nullptr) return cache.facts[i];
  std::lock_guard<std::mutex> lock(g_comms_mu);
  auto it = Comms().find(comm);
  if (it == Comms().end()) return nullptr;
  if (cache.epoch != epoch) cache = FactsCache{epoch, 0, {}, {}};
  unsigned slot = cache.next++ % kCachedFacts;
  cache.comm[slot] = comm;
  return cache.facts[slot] = &it->second;
}

// A communicator destroyed or aborted: its facts go (the address may come back as another one's),
// and when it was the process's last, the log's reader forgets what its lines said.
void ForgetComm(ncclComm_t comm) {
  bool none = false;
  {
    std::lock_guard<std::mutex> lock(g_comms_mu);
    if (Comms().erase(comm) == 0) return;
    g_comms_epoch.fetch_add(1, std::memory_order_acq_rel);
    AsyncInit never_settled;
    TakeAsyncInit(comm, &never_settled);
    none = Comms().empty();
  }
  if (none) NcclCommunicatorsGone();
}

// A communicator of one rank moves nothing between GPUs: its operations are not timed.
bool OneRank(ncclComm_t comm) {
  const CommFacts* f = FactsOf(comm);
  return f != nullptr && f->nranks == 1;
}

// Whether NCCL's kernel timers measure this call: P2PTRACE_SAMPLE per communicator (its first K
// operations, then 1 in N, and every one of SIZE bytes or more), never one of one rank, never while
// a capture runs (NCCL would add a host node to the program's graph for it: BeginKernelSample).
bool KernelSampled(ncclComm_t comm, uint64_t bytes) {
  CommFacts* f = FactsOf(comm);
  if (f == nullptr || f->nranks == 1) return false;
  return detail::g_sample.Takes(__atomic_fetch_add(&f->ops, 1, __ATOMIC_RELAXED), bytes);
}

std::atomic<uint64_t> g_ops{0};

bool SampleOp(uint64_t bytes) {
  const SampleSpec& s = TraceWriter::config().sample;
  if (!s.enabled) return false;
  return s.Takes(g_ops.fetch_add(1, std::memory_order_relaxed), bytes);
}

// Starts a timing pair for an operation of `comm` on `stream`. False when it cannot be timed, or
// need not be: where NCCL's kernel timers measure (the shim is its profiler plugin), no event goes on
// NCCL's stream (one there costs the job its compute/communication overlap under
// CUDA_DEVICE_MAX_CONNECTIONS=1, pytorch#143890), and a one-rank communicator moves nothing.
bool BeginTiming(ncclComm_t comm, cudaStream_t stream, uint64_t bytes, TimedCopy* t) {
  if (!detail::g_sample.enabled || NcclKernelTimersMeasure()) return false;
  // The runtime the application itself uses: the only one the shim's timing events may go through
  // (a cudart: the driver's table cannot switch devices).
  const CudaRuntime* rt = AnsweredRuntime(false);
  if (rt == nullptr || OneRank(comm) || !SampleOp(bytes)) return false;
  int device = -1;
  auto cu_device = g_comm_cu_device.As<QueryFn>();
  return cu_device && cu_device(comm, &device) == ncclSuccess && CopyTimer::Begin(*rt, device, stream, t);
}

// Inside ncclGroupStart … ncclGroupEnd NCCL only queues operations and launches them all at the
// outermost ncclGroupEnd, so an operation there cannot be timed alone: the group is timed instead,
// one event pair per stream, started at the group's first operation on that stream and ended after
// ncclGroupEnd. The operations of one stream share that pair's seq, so each gets the group's
// duration (they run concurrently) with its own bytes.
struct GroupStream {
  cudaStream_t stream = nullptr;
  uint32_t seq = 0;
  bool timed = false;
  TimedCopy t;
};
constexpr int kGroupStreams = 8;  // more streams in one group: the rest untimed
constinit thread_local int t_group_streams __attribute__((tls_model("initial-exec"))) = 0;

// A grouped operation is queued by its call and runs (connects, waits for its peer) inside the
// outermost ncclGroupEnd: its record stays pending until then, so that a rank stuck there is seen in
// its sends and receives. More than the table holds: completed at their call.
constexpr int kGroupOps = 256;
constinit thread_local int t_group_ops __attribute__((tls_model("initial-exec"))) = 0;

// A thread's group tables live on the heap, made at its first grouped call, with only a pointer in
// static TLS: under LD_AUDIT glibc sizes the static TLS block before the program's libraries load,
// and a preloaded library's initial-exec TLS must then fit in the small surplus left over (about
// 1.5 KiB measured on glibc 2.36; 2.3 KiB of tables here made the job fail to start, DESIGN.md §4).
struct GroupTables {
  GroupComm comms[kGroupComms];
  GroupStream streams[kGroupStreams];
  p2ptrace_nccl_op_record* ops[kGroupOps];
};
constinit thread_local GroupTables* t_group_tables __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_key_t g_group_key;

GroupTables* Tables() {
  if (__builtin_expect(t_group_tables != nullptr, 1)) return t_group_tables;
  static bool keyed = [] {
    // Freed at the thread's exit (the key's destructor runs on that thread).
    return pthread_key_create(&g_group_key, [](void* p) {
             delete static_cast<GroupTables*>(p);
             t_group_tables = nullptr;
           }) == 0;
  }();
  auto* t = new (std::nothrow) GroupTables{};
  if (t == nullptr) return nullptr;  // no memory: the group's records are written at once, untimed
  if (keyed) pthread_setspecific(g_group_key, t);
  t_group_tables = t;
  return t;
}

GroupComm* GroupComms() {
  GroupTables* tables = Tables();
  return tables ? tables->comms : nullptr;
}

// The group's entry for `stream`, made at its first operation there; null when the table is full.
GroupStream* GroupEntry(ncclComm_t comm, cudaStream_t stream, uint64_t bytes) {
  GroupTables* tables = Tables();
  if (tables == nullptr) return nullptr;
  GroupStream* t_group = tables->streams;
  for (int i = 0; i < t_group_streams; ++i)
    if (t_group[i].stream == stream) return &t_group[i];
  if (t_group_streams == kGroupStreams) return nullptr;
  GroupStream& g = t_group[t_group_streams++];
  g = GroupStream{};
  g.stream = stream;
  g.seq = TraceWriter::NextSeq();
  g.timed = BeginTiming(comm, stream, bytes, &g.t);
  return &g;
}

inline void Returned(p2ptrace_nccl_op_record* rec, ncclResult_t r);  // below

// After the outermost ncclGroupEnd: the grouped operations' records completed with the group's
// result, the group's communicators recorded (rank and size known now, or the group's failure),
// every timing pair of the group ended (returned to the pool if it failed).
void EndGroup(ncclResult_t r) {
  if (t_group_ops > 0) {
    for (int i = 0; i < t_group_ops; ++i) Returned(t_group_tables->ops[i], r);  // the group's result is theirs
    t_group_ops = 0;
  }
  int comms = t_group_comm_count;
  t_group_comm_count = 0;
  if (comms == 0 && t_group_streams == 0) return;  // nothing entered: perhaps no table was ever made
  GroupTables* tables = Tables();
  for (int i = 0; i < comms; ++i)
    RecordComm(tables->comms[i].api, r == ncclSuccess || r == ncclInProgress ? tables->comms[i].comm : nullptr,
               tables->comms[i].id_hash, r);
  // The job-start check over the GPUs of the communicators the group made (nccl-tests' -g N: one
  // process, one communicator per GPU, made in one group), now that NCCL can say their devices.
  int devices[kGroupComms], ndev = 0;
  for (int i = 0; i < comms && r == ncclSuccess; ++i) {
    if (tables->comms[i].api == P2PTRACE_NCCL_CommSplit) continue;
    ncclComm_t c = tables->comms[i].comm;
    int d = CommDevice(ncclSuccess, &c);
    if (d >= 0 && std::find(devices, devices + ndev, d) == devices + ndev) devices[ndev++] = d;
  }
  if (ndev > 0) PreflightAtNcclInit(ndev, devices);
  for (int i = 0; i < t_group_streams; ++i) {
    GroupStream& g = tables->streams[i];
    if (g.timed) {
      g.t.seq = g.seq;
      CopyTimer::End(g.stream, r == ncclSuccess, &g.t);
    }
  }
  t_group_streams = 0;
}

// The operation record, written in place in this thread's chunk when the call is made, its result
// pending until the call returns (a call that never returns is still on record: a stopped job's
// ranks are compared by what each was inside). Stamped with the CPU counter: no clock_gettime call.
__attribute__((always_inline)) inline p2ptrace_nccl_op_record* RecordOp(uint8_t api, ncclComm_t comm, cudaStream_t stream,
                                                                         uint64_t bytes, int peer, ncclDataType_t type,
                                                                         uint8_t flags, uint32_t seq, uint32_t site = 0) {
  return TraceWriter::EmitAt<p2ptrace_nccl_op_record>(
      P2PTRACE_RECORD_NCCL_OP, seq, CpuTicks(), [&](p2ptrace_nccl_op_record& rec) {
        rec.comm = reinterpret_cast<uintptr_t>(comm);
        rec.stream = reinterpret_cast<uintptr_t>(stream);
        rec.bytes = bytes;
        rec.peer = peer;
        rec.result = P2PTRACE_RESULT_PENDING;
        rec.api = api;
        rec.flags = static_cast<uint8_t>(flags | (kCpuTicks ? P2PTRACE_NCCL_TICKS : 0));
        rec.datatype = static_cast<uint8_t>(type + 1);
        rec.site = site;
      });
}

// The call returned: its result, stored last (a reader of the live file that sees it sees the rest).
inline void Returned(p2ptrace_nccl_op_record* rec, ncclResult_t r) {
  if (rec != nullptr) __atomic_store_n(&rec->result, static_cast<int32_t>(r), __ATOMIC_RELEASE);
}

// Everything but the common case: the trace not open yet, timing on, inside a group, call sites on,
// a capture running.
template <typename Fn, typename... Args>
__attribute__((noinline)) ncclResult_t SlowOp(uint8_t api, ncclComm_t comm, cudaStream_t stream, uint64_t bytes,
                                              int peer, ncclDataType_t type, Fn real, Args... args) {
  if (!TraceWriter::Ready()) return real(args...);
  uint32_t site = CallSitesEnabled() ? CaptureCallSite() : 0;  // before any record of this call
  uint32_t seq;
  TimedCopy t;
  bool timed = false;
  GroupStream* group = nullptr;
  if (t_group_depth > 0 && (group = GroupEntry(comm, stream, bytes)) != nullptr) {
    seq = group->seq;
  } else {
    seq = TraceWriter::NextSeq();
    if (t_group_depth == 0) timed = BeginTiming(comm, stream, bytes, &t);
  }
  uint8_t in_group = t_group_depth > 0 ? P2PTRACE_NCCL_IN_GROUP : 0;
  p2ptrace_nccl_op_record* rec = RecordOp(api, comm, stream, bytes, peer, type, in_group, seq, site);
  // NCCL copies its profiler mask into the operation during this call: KernelCh (and the P2p and
  // Coll events) are on for it only when it is in the sample, so that NCCL's own per-operation
  // work for the timers (timestamps, proxy work per channel) stays with the sampled ones.
  const bool kernel = NcclSamplesByCall() && KernelSampled(comm, bytes) && BeginKernelSample();
  if (!kernel && graphs::AnyCapture() && NcclSamplesByCall()) AwaitNoKernelSample();
  ncclResult_t r = real(args...);
  if (kernel) EndKernelSample();
  if (timed) {
    t.bytes = bytes;
    t.seq = seq;
    CopyTimer::End(stream, r == ncclSuccess, &t);
  }
  // Captured into a graph (never timed: nothing is while a capture runs): its graph id for a seq.
  uint32_t graph = 0;
  const CudaRuntime* rt = r == ncclSuccess && graphs::AnyCapture() ? AnsweredRuntime(false) : nullptr;
  uint8_t flags = 0;
  if (rt != nullptr && graphs::CapturedOn(*rt, stream, &graph)) {
    flags = P2PTRACE_NCCL_CAPTURED;
    seq = graph;
  } else {
    if (group != nullptr && group->timed && r == ncclSuccess) group->t.bytes += bytes;
    bool will_time = group != nullptr ? group->timed : timed;
    if (will_time && r == ncclSuccess) flags = P2PTRACE_NCCL_TIMED;
  }
  if (rec != nullptr) {  // what only the call's end tells, before its result says it returned
    rec->h.seq = seq;
    __atomic_fetch_or(&rec->flags, flags, __ATOMIC_RELAXED);
  }
  if (rec != nullptr && r == ncclSuccess && t_group_depth > 0 && t_group_ops < kGroupOps && t_group_tables != nullptr) {
    t_group_tables->ops[t_group_ops++] = rec;  // in progress until the group's end
    return r;
  }
  Returned(rec, r);
  return r;
}

// A collective or send/recv: recorded, and timed with events on the user's stream — alone when it
// runs now, with its group (above) inside ncclGroupStart … ncclGroupEnd. The common case (trace
// open, P2PTRACE_SAMPLE=off, no group) is inlined into the exported wrapper: the record, the real
// call, its result; no timing state on the stack.
template <typename Fn, typename... Args>
__attribute__((always_inline)) inline ncclResult_t Op(uint8_t api, ncclComm_t comm, cudaStream_t stream,
                                                      uint64_t bytes, int peer, ncclDataType_t type, Fn real,
                                                      Args... args) {
  if (__builtin_expect(detail::g_sample.enabled || t_group_depth > 0 || !TraceWriter::IsOpen() || CallSitesEnabled() ||
                           graphs::AnyCapture(), 0))
    return SlowOp(api, comm, stream, bytes, peer, type, real, args...);
  p2ptrace_nccl_op_record* rec = RecordOp(api, comm, stream, bytes, peer, type, 0, 0);  // untimed: no seq
  ncclResult_t r = real(args...);
  Returned(rec, r);
  return r;
}

}  // namespace

namespace nccl_hooks {

// The operation hooks are inlined into their exported wrapper: one frame per call.
#define P2PTRACE_OP_HOOK __attribute__((always_inline)) inline

ncclResult_t ncclCommInitRank(decltype(&::ncclCommInitRank) real, ncclComm_t* comm, int nranks, ncclUniqueId id,
                              int rank) {
  RearmNcclProfiler();  // NCCL loads its profiler again where its last communicator unloaded it
  // Before the real init, so that warnings precede the first traffic; when the process's GPU is not
  // known yet (no CUDA call answered), right after it, from the communicator's device. Inside a
  // group NCCL tells the device only at the group's end: checked there (EndGroup).
  bool later = t_group_depth == 0 && !PreflightAtNcclInit();
  p2ptrace_nccl_comm_record* entered = EnteringInit(P2PTRACE_NCCL_CommInitRank, Fnv(&id, sizeof id), rank, nranks);
  ncclResult_t r = [&] {
    NcclInitOnThisThread in_init;  // an old NCCL's version line, printed only where the tap made it
    return real(comm, nranks, id, rank);
  }();
  if (later && r != ncclInProgress) PreflightAfterNcclInit(CommDevice(r, comm));  // else when it settles
  RecordComm(P2PTRACE_NCCL_CommInitRank, comm ? *comm : nullptr, Fnv(&id, sizeof id), r, entered);
  return r;
}
ncclResult_t ncclCommInitRankConfig(decltype(&::ncclCommInitRankConfig) real, ncclComm_t* comm, int nranks,
                                    ncclUniqueId id, int rank, ncclConfig_t* config) {
  RearmNcclProfiler();  // NCCL loads its profiler again where its last communicator unloaded it
  // Before the real init, so that warnings precede the first traffic; when the process's GPU is not
  // known yet (no CUDA call answered), right after it, from the communicator's device. Inside a
  // group NCCL tells the device only at the group's end: checked there (EndGroup).
  bool later = t_group_depth == 0 && !PreflightAtNcclInit();
  p2ptrace_nccl_comm_record* entered = EnteringInit(P2PTRACE_NCCL_CommInitRankConfig, Fnv(&id, sizeof id), rank, nranks);
  ncclResult_t r = [&] {
    NcclInitOnThisThread in_init;
    return real(comm, nranks, id, rank, config);
  }();
  if (later && r != ncclInProgress) PreflightAfterNcclInit(CommDevice(r, comm));  // else when it settles
  RecordComm(P2PTRACE_NCCL_CommInitRankConfig, comm ? *comm : nullptr, Fnv(&id, sizeof id), r, entered);
  return r;
}
ncclResult_t ncclCommInitAll(decltype(&::ncclCommInitAll) real, ncclComm_t* comm, int ndev, const int* devlist) {
  RearmNcclProfiler();  // NCCL loads its profiler again where its last communicator unloaded it
  PreflightAtNcclInit(ndev, devlist);  // before the real init: warnings precede the first traffic
  ncclResult_t r = [&] {
    NcclInitOnThisThread in_init;
    return real(comm, ndev, devlist);
  }();
  if (comm == nullptr || ndev <= 0) return r;
  uint64_t h = Fnv(comm, sizeof *comm);  // one communicator, all in this process
  for (int i = 0; i < ndev; ++i) RecordComm(P2PTRACE_NCCL_CommInitAll, r == ncclSuccess ? comm[i] : nullptr, h, r);
  return r;
}
ncclResult_t ncclCommInitRankScalable(decltype(&::ncclCommInitRankScalable) real, ncclComm_t* comm, int nranks,
                                      int rank, int nids, ncclUniqueId* ids, ncclConfig_t* config) {
  RearmNcclProfiler();  // NCCL loads its profiler again where its last communicator unloaded it
  // Before the real init, so that warnings precede the first traffic; when the process's GPU is not
  // known yet (no CUDA call answered), right after it, from the communicator's device. Inside a
  // group NCCL tells the device only at the group's end: checked there (EndGroup).
  bool later = t_group_depth == 0 && !PreflightAtNcclInit();
  p2ptrace_nccl_comm_record* entered = EnteringInit(P2PTRACE_NCCL_CommInitRankScalable, ids && nids > 0 ? Fnv(ids, sizeof *ids) : 0, rank, nranks);
  ncclResult_t r = [&] {
    NcclInitOnThisThread in_init;
    return real(comm, nranks, rank, nids, ids, config);
  }();
  if (later && r != ncclInProgress) PreflightAfterNcclInit(CommDevice(r, comm));  // else when it settles
  RecordComm(P2PTRACE_NCCL_CommInitRankScalable, comm ? *comm : nullptr,
             ids && nids > 0 ? Fnv(ids, sizeof *ids) : 0, r, entered);
  return r;
}
ncclResult_t ncclCommSplit(decltype(&::ncclCommSplit) real, ncclComm_t comm, int color, int key,
                           ncclComm_t* newcomm, ncclConfig_t* config) {
  RearmNcclProfiler();  // NCCL loads its profiler again where its last communicator unloaded it
  ncclResult_t r = [&] {
    NcclInitOnThisThread in_init;
    return real(comm, color, key, newcomm, config);
  }();
  if (newcomm != nullptr && (*newcomm != nullptr || r != ncclSuccess)) {
    uint64_t parent = CommHash(comm);
    RecordComm(P2PTRACE_NCCL_CommSplit, *newcomm, Fnv(&color, sizeof color, parent), r);
  }
  return r;
}
ncclResult_t ncclCommFinalize(decltype(&::ncclCommFinalize) real, ncclComm_t comm) {
  ncclResult_t r = real(comm);
  RecordComm(P2PTRACE_NCCL_CommFinalize, comm, CommHash(comm), r);
  return r;
}
ncclResult_t ncclCommDestroy(decltype(&::ncclCommDestroy) real, ncclComm_t comm) {
  uint64_t h = CommHash(comm);
  ncclResult_t r = real(comm);
  RecordComm(P2PTRACE_NCCL_CommDestroy, nullptr, h, r);
  if (r == ncclSuccess) ForgetComm(comm);
  return r;
}
ncclResult_t ncclCommAbort(decltype(&::ncclCommAbort) real, ncclComm_t comm) {
  uint64_t h = CommHash(comm);
  ncclResult_t r = real(comm);
  RecordComm(P2PTRACE_NCCL_CommAbort, nullptr, h, r);
  if (r == ncclSuccess) ForgetComm(comm);
  return r;
}
ncclResult_t ncclCommGetAsyncError(decltype(&::ncclCommGetAsyncError) real, ncclComm_t comm, ncclResult_t* error) {
  ncclResult_t r = real(comm, error);
  if (r == ncclSuccess && error != nullptr && *error != ncclInProgress) {
    KeepErrno keep;
    SettleAsyncInit(comm, *error);
    if (*error != ncclSuccess) RecordAsyncError(comm, *error);
  }
  return r;
}
ncclResult_t ncclGroupStart(decltype(&::ncclGroupStart) real) {
  ncclResult_t r = real();
  if (r == ncclSuccess && t_group_depth++ == 0) t_group_streams = t_group_comm_count = t_group_ops = 0;
  return r;
}
ncclResult_t ncclGroupEnd(decltype(&::ncclGroupEnd) real) {
  ncclResult_t r = [&] {
    if (t_group_depth != 1 || t_group_comm_count == 0) return real();
    NcclInitOnThisThread in_init;  // the outermost end makes the group's communicators
    return real();
  }();
  // The group is over whatever the result says; only the outermost end launches it.
  if (t_group_depth > 0 && --t_group_depth == 0) EndGroup(r);
  return r;
}
ncclResult_t ncclGetUniqueId(decltype(&::ncclGetUniqueId) real, ncclUniqueId* id) { return real(id); }
ncclResult_t ncclGetVersion(decltype(&::ncclGetVersion) real, int* version) { return real(version); }

P2PTRACE_OP_HOOK ncclResult_t ncclAllReduce(decltype(&::ncclAllReduce) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_AllReduce, comm, s, n * TypeSize(t), -1, t, real, sb, rb, n, t, op, comm, s);
}
P2PTRACE_OP_HOOK ncclResult_t ncclBroadcast(decltype(&::ncclBroadcast) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                           int root, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Broadcast, comm, s, n * TypeSize(t), root, t, real, sb, rb, n, t, root, comm, s);
}
P2PTRACE_OP_HOOK ncclResult_t ncclBcast(decltype(&::ncclBcast) real, void* b, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                       cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Broadcast, comm, s, n * TypeSize(t), root, t, real, b, n, t, root, comm, s);
}
P2PTRACE_OP_HOOK ncclResult_t ncclReduce(decltype(&::ncclReduce) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Reduce, comm, s, n * TypeSize(t), root, t, real, sb, rb, n, t, op, root, comm, s);
}
P2PTRACE_OP_HOOK ncclResult_t ncclAllGather(decltype(&::ncclAllGather) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_AllGather, comm, s, n * TypeSize(t), -1, t, real, sb, rb, n, t, comm, s);
}
P2PTRACE_OP_HOOK ncclResult_t ncclReduceScatter(decltype(&::ncclReduceScatter) real, const void* sb, void* rb, size_t n,
                               ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_ReduceScatter, comm, s, n * TypeSize(t), -1, t, real, sb, rb, n, t, op, comm, s);
}
P2PTRACE_OP_HOOK ncclResult_t ncclAlltoAll(decltype(&::ncclAlltoAll) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                          ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_AlltoAll, comm, s, n * TypeSize(t), -1, t, real, sb, rb, n, t, comm, s);
}
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
P2PTRACE_OP_HOOK ncclResult_t ncclGather(decltype(&::ncclGather) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                                         int root, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Gather, comm, s, n * TypeSize(t), root, t, real, sb, rb, n, t, root, comm, s);
}
P2PTRACE_OP_HOOK ncclResult_t ncclScatter(decltype(&::ncclScatter) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                                          int root, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Scatter, comm, s, n * TypeSize(t), root, t, real, sb, rb, n, t, root, comm, s);
}
#endif
P2PTRACE_OP_HOOK ncclResult_t ncclSend(decltype(&::ncclSend) real, const void* sb, size_t n, ncclDataType_t t, int peer,
                      ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Send, comm, s, n * TypeSize(t), peer, t, real, sb, n, t, peer, comm, s);
}
P2PTRACE_OP_HOOK ncclResult_t ncclRecv(decltype(&::ncclRecv) real, void* rb, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Recv, comm, s, n * TypeSize(t), peer, t, real, rb, n, t, peer, comm, s);
}

}  // namespace nccl_hooks
}  // namespace p2ptrace::shim

namespace p2ptrace::shim {
// Around every hook: a self-call from inside NCCL goes straight through; the process's first call
// does its once-only work first. Nothing else: no system call on the way (NCCL's log lines reach
// stdout as NCCL writes them, and the trace through the shim's thread, nccl_log_tap.h).
template <auto Hook, typename Fn, typename... A>
__attribute__((always_inline)) inline ncclResult_t CallNccl(Fn real, A... args) {
  if (t_depth > 0) return real(args...);
  if (__builtin_expect(!NcclCalled(), 0)) FirstNcclCall();
  ++t_depth;
  ncclResult_t r = Hook(real, args...);
  --t_depth;
  return r;
}
}  // namespace p2ptrace::shim

// The exported wrappers (bind.h). An NCCL without the function (older releases) gets
// ncclInvalidUsage and nothing is recorded.
#define P2PTRACE_NCCL_WRAP(name, params, args)                                                             \
  static constinit p2ptrace::shim::RealFunction p2pn_real_##name{#name, p2ptrace::shim::Library::kNccl};   \
  P2PTRACE_WRAPPER(ncclResult_t, name, p2pn_real_##name, decltype(&::name), ncclInvalidUsage, (void)0,       \
                   (p2ptrace::shim::CallNccl<&p2ptrace::shim::nccl_hooks::name>(                           \
                       p2p_real P2PTRACE_NCCL_COMMA_ARGS args)),                                               \
                   params, args)
#define P2PTRACE_NCCL_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__

P2PTRACE_NCCL_FUNCTIONS(P2PTRACE_NCCL_WRAP)
