// NCCL: the exported ncclX wrappers (one pattern for all, from nccl_functions.h) and what each
// records. NCCL calls some of its own API through the PLT (ncclBcast → ncclBroadcast,
// ncclCommInitAll → ncclGetUniqueId); a thread-local depth makes such a self-call pass straight
// through, so one user call is recorded once. The shim's own CUDA calls (timing events) happen only
// on a runtime that has already answered the application (see cuda_hooks.cc).
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "p2ptrace/vocabulary.h"
#include "shim/interpose/cuda_hooks.h"
#include "shim/interpose/nccl_functions.h"
#include "shim/nccl_log_tap.h"
#include "shim/record/copy_timer.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

thread_local int t_depth = 0;        // inside a wrapped NCCL call
thread_local int t_group_depth = 0;  // inside ncclGroupStart … ncclGroupEnd

struct FindNccl {
  std::string path;
};
int FindLoadedNccl(struct dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* base = std::strrchr(name, '/');
  base = base ? base + 1 : name;
  if (std::strncmp(base, "libnccl.so", 10) != 0) return 0;
  static_cast<FindNccl*>(data)->path = name;
  return 1;
}

// pncclX, else ncclX (NCCL before 2.16 has no p-names), from the next object in search order or,
// for RTLD_LOCAL loads, from the loaded libnccl itself. Never a tail call (notes/interposer.md E8).
__attribute__((noinline)) void* ResolveNccl(const char* name) {
  std::string p = std::string("p") + name;
  void* fn = dlsym(RTLD_NEXT, p.c_str());
  if (fn == nullptr) fn = dlsym(RTLD_NEXT, name);
  if (fn != nullptr) return fn;
  FindNccl f;
  dl_iterate_phdr(FindLoadedNccl, &f);
  if (f.path.empty()) return nullptr;
  void* handle = dlopen(f.path.c_str(), RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) return nullptr;
  fn = dlsym(handle, p.c_str());
  if (fn == nullptr) fn = dlsym(handle, name);
  dlclose(handle);
  return fn;
}

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

// Communicator → the hash its ranks share (for splits, derived from the parent's).
std::mutex g_comms_mu;
std::unordered_map<ncclComm_t, uint64_t>& Comms() {
  static auto* m = new std::unordered_map<ncclComm_t, uint64_t>();
  return *m;
}

template <typename Fn>
Fn NcclFn(const char* name) {
  return reinterpret_cast<Fn>(ResolveNccl(name));
}

void RecordComm(uint8_t api, ncclComm_t comm, uint64_t id_hash, ncclResult_t r) {
  if (!TraceWriter::Ready()) return;
  p2ptrace_nccl_comm_record rec{};
  rec.comm = reinterpret_cast<uintptr_t>(comm);
  rec.id_hash = id_hash;
  rec.rank = rec.nranks = rec.cuda_device = -1;
  rec.result = r;
  rec.api = api;
  if (r == ncclSuccess && comm != nullptr) {
    // NCCL's own answers: no CUDA call of ours.
    static auto count = NcclFn<ncclResult_t (*)(ncclComm_t, int*)>("ncclCommCount");
    static auto user_rank = NcclFn<ncclResult_t (*)(ncclComm_t, int*)>("ncclCommUserRank");
    static auto device = NcclFn<ncclResult_t (*)(ncclComm_t, int*)>("ncclCommCuDevice");
    if (count) count(comm, &rec.nranks);
    if (user_rank) user_rank(comm, &rec.rank);
    if (device) device(comm, &rec.cuda_device);
    if (api <= P2PTRACE_NCCL_CommSplit) {
      std::lock_guard<std::mutex> lock(g_comms_mu);
      Comms()[comm] = id_hash;
    }
  }
  TraceWriter::Append(rec, P2PTRACE_RECORD_NCCL_COMM, TraceWriter::NextSeq());
}

uint64_t CommHash(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_comms_mu);
  auto it = Comms().find(comm);
  return it == Comms().end() ? 0 : it->second;
}

std::atomic<uint64_t> g_ops{0};

bool SampleOp(uint64_t bytes) {
  const SampleSpec& s = TraceWriter::config().sample;
  if (!s.enabled) return false;
  uint64_t n = g_ops.fetch_add(1, std::memory_order_relaxed);
  return n < s.first || n % s.every == 0 || bytes >= s.min_bytes;
}

// A collective or send/recv: recorded, and timed with events on the user's stream when it runs
// now (inside a group NCCL only launches at ncclGroupEnd, so those are not timed).
template <typename Call>
ncclResult_t Op(uint8_t api, ncclComm_t comm, cudaStream_t stream, uint64_t bytes, int peer, Call&& call) {
  if (!TraceWriter::Ready()) return call();
  uint32_t seq = TraceWriter::NextSeq();
  TimedCopy t;
  bool timed = false;
  // Events through the runtime the application itself uses (the one that has answered it).
  const CudaRuntime* rt = nullptr;
  for (Node n : {Node::kCudart13, Node::kCudart12, Node::kCudart11})
    if (rt == nullptr && g_runtimes[static_cast<int>(n)].load(std::memory_order_acquire) && RuntimeAnswered(Runtime(n)))
      rt = &Runtime(n);
  if (t_group_depth == 0 && rt != nullptr && SampleOp(bytes)) {
    int device = -1;
    static auto cu_device = NcclFn<ncclResult_t (*)(ncclComm_t, int*)>("ncclCommCuDevice");
    if (cu_device && cu_device(comm, &device) == ncclSuccess) timed = CopyTimer::Begin(*rt, device, stream, &t);
  }
  ncclResult_t r = call();
  if (timed) {
    t.bytes = bytes;
    t.seq = seq;
    CopyTimer::End(stream, r == ncclSuccess, &t);
  }
  p2ptrace_nccl_op_record rec{};
  rec.comm = reinterpret_cast<uintptr_t>(comm);
  rec.stream = reinterpret_cast<uintptr_t>(stream);
  rec.bytes = bytes;
  rec.peer = peer;
  rec.result = r;
  rec.api = api;
  rec.flags = static_cast<uint8_t>((t_group_depth > 0 ? P2PTRACE_NCCL_IN_GROUP : 0) |
                                   (timed && r == ncclSuccess ? P2PTRACE_NCCL_TIMED : 0));
  TraceWriter::Append(rec, P2PTRACE_RECORD_NCCL_OP, seq);
  return r;
}

}  // namespace

namespace nccl_hooks {

ncclResult_t ncclCommInitRank(decltype(&::ncclCommInitRank) real, ncclComm_t* comm, int nranks, ncclUniqueId id,
                              int rank) {
  ncclResult_t r = real(comm, nranks, id, rank);
  RecordComm(P2PTRACE_NCCL_CommInitRank, comm ? *comm : nullptr, Fnv(&id, sizeof id), r);
  return r;
}
ncclResult_t ncclCommInitRankConfig(decltype(&::ncclCommInitRankConfig) real, ncclComm_t* comm, int nranks,
                                    ncclUniqueId id, int rank, ncclConfig_t* config) {
  ncclResult_t r = real(comm, nranks, id, rank, config);
  RecordComm(P2PTRACE_NCCL_CommInitRankConfig, comm ? *comm : nullptr, Fnv(&id, sizeof id), r);
  return r;
}
ncclResult_t ncclCommInitAll(decltype(&::ncclCommInitAll) real, ncclComm_t* comm, int ndev, const int* devlist) {
  ncclResult_t r = real(comm, ndev, devlist);
  if (comm == nullptr || ndev <= 0) return r;
  uint64_t h = Fnv(comm, sizeof *comm);  // one communicator, all in this process
  for (int i = 0; i < ndev; ++i) RecordComm(P2PTRACE_NCCL_CommInitAll, r == ncclSuccess ? comm[i] : nullptr, h, r);
  return r;
}
ncclResult_t ncclCommInitRankScalable(decltype(&::ncclCommInitRankScalable) real, ncclComm_t* comm, int nranks,
                                      int rank, int nids, ncclUniqueId* ids, ncclConfig_t* config) {
  ncclResult_t r = real(comm, nranks, rank, nids, ids, config);
  RecordComm(P2PTRACE_NCCL_CommInitRankScalable, comm ? *comm : nullptr,
             ids && nids > 0 ? Fnv(ids, sizeof *ids) : 0, r);
  return r;
}
ncclResult_t ncclCommSplit(decltype(&::ncclCommSplit) real, ncclComm_t comm, int color, int key,
                           ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclResult_t r = real(comm, color, key, newcomm, config);
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
  return r;
}
ncclResult_t ncclCommAbort(decltype(&::ncclCommAbort) real, ncclComm_t comm) {
  uint64_t h = CommHash(comm);
  ncclResult_t r = real(comm);
  RecordComm(P2PTRACE_NCCL_CommAbort, nullptr, h, r);
  return r;
}
ncclResult_t ncclGroupStart(decltype(&::ncclGroupStart) real) {
  ncclResult_t r = real();
  if (r == ncclSuccess) ++t_group_depth;
  return r;
}
ncclResult_t ncclGroupEnd(decltype(&::ncclGroupEnd) real) {
  if (t_group_depth > 0) --t_group_depth;  // the group is over whatever the result says
  return real();
}
ncclResult_t ncclGetUniqueId(decltype(&::ncclGetUniqueId) real, ncclUniqueId* id) { return real(id); }
ncclResult_t ncclGetVersion(decltype(&::ncclGetVersion) real, int* version) { return real(version); }

ncclResult_t ncclAllReduce(decltype(&::ncclAllReduce) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_AllReduce, comm, s, n * TypeSize(t), -1, [&] { return real(sb, rb, n, t, op, comm, s); });
}
ncclResult_t ncclBroadcast(decltype(&::ncclBroadcast) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                           int root, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Broadcast, comm, s, n * TypeSize(t), root, [&] { return real(sb, rb, n, t, root, comm, s); });
}
ncclResult_t ncclBcast(decltype(&::ncclBcast) real, void* b, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                       cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Broadcast, comm, s, n * TypeSize(t), root, [&] { return real(b, n, t, root, comm, s); });
}
ncclResult_t ncclReduce(decltype(&::ncclReduce) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Reduce, comm, s, n * TypeSize(t), root, [&] { return real(sb, rb, n, t, op, root, comm, s); });
}
ncclResult_t ncclAllGather(decltype(&::ncclAllGather) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_AllGather, comm, s, n * TypeSize(t), -1, [&] { return real(sb, rb, n, t, comm, s); });
}
ncclResult_t ncclReduceScatter(decltype(&::ncclReduceScatter) real, const void* sb, void* rb, size_t n,
                               ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_ReduceScatter, comm, s, n * TypeSize(t), -1, [&] { return real(sb, rb, n, t, op, comm, s); });
}
ncclResult_t ncclAlltoAll(decltype(&::ncclAlltoAll) real, const void* sb, void* rb, size_t n, ncclDataType_t t,
                          ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_AlltoAll, comm, s, n * TypeSize(t), -1, [&] { return real(sb, rb, n, t, comm, s); });
}
ncclResult_t ncclSend(decltype(&::ncclSend) real, const void* sb, size_t n, ncclDataType_t t, int peer,
                      ncclComm_t comm, cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Send, comm, s, n * TypeSize(t), peer, [&] { return real(sb, n, t, peer, comm, s); });
}
ncclResult_t ncclRecv(decltype(&::ncclRecv) real, void* rb, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t s) {
  return Op(P2PTRACE_NCCL_Recv, comm, s, n * TypeSize(t), peer, [&] { return real(rb, n, t, peer, comm, s); });
}

}  // namespace nccl_hooks
}  // namespace p2ptrace::shim

// The exported wrappers. An NCCL without the function (older releases) gets ncclInvalidUsage and
// nothing is recorded; a self-call from inside NCCL goes straight through.
#define P2PTRACE_NCCL_WRAP(name, params, args)                                                   \
  extern "C" __attribute__((visibility("default"))) ncclResult_t name params {                   \
    static std::atomic<void*> slot;                                                              \
    void* fn = slot.load(std::memory_order_acquire);                                             \
    if (__builtin_expect(fn == nullptr, 0)) {                                                    \
      fn = p2ptrace::shim::ResolveNccl(#name);                                                   \
      if (fn == nullptr) return ncclInvalidUsage;                                                \
      slot.store(fn, std::memory_order_release);                                                 \
    }                                                                                            \
    auto real = reinterpret_cast<decltype(&::name)>(fn);                                         \
    if (p2ptrace::shim::t_depth > 0) return real args;                                           \
    ++p2ptrace::shim::t_depth;                                                                   \
    ncclResult_t r = p2ptrace::shim::nccl_hooks::name(real P2PTRACE_NCCL_COMMA_ARGS args);       \
    --p2ptrace::shim::t_depth;                                                                   \
    p2ptrace::shim::PumpNcclLog(); /* NCCL's lines of this call before the program's next */     \
    return r;                                                                                    \
  }
#define P2PTRACE_NCCL_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__

P2PTRACE_NCCL_FUNCTIONS(P2PTRACE_NCCL_WRAP)
