// nccl_ring: a real NCCL job, shaped like the programs people run. By default one process per
// rank, as torchrun or `p2psim launch` starts them (RANK, WORLD_SIZE, LOCAL_RANK): allreduce,
// broadcast, allgather, reducescatter and a send/recv ring. Options give the other shapes:
// nccl-tests' single-process multi-GPU (-g), one thread per GPU (-t), more operations (-o), size
// sweeps (-b/-e/-f), iterations (-n), a sub-communicator (-s, like PyTorch's new_group) and
// communicators destroyed and re-created (-r). Every result is checked against what the host
// computes; one line per operation and size: size, mean time (cudaEvents on each GPU's stream, the
// slowest GPU of the thread), and algbw/busbw by nccl-tests' definitions (its doc/PERFORMANCE.md).
// Exits nonzero on a wrong result or a failed call.
//
//   nccl_ring [options] [ID_DIR] [COUNT]
//     ID_DIR  where rank 0 publishes the NCCL unique id (fresh for each job; else $NCCL_RING_DIR, else .)
//     COUNT   NCCL's count argument of every operation, in floats (default 1048576), when -b is not
//             given: the whole buffer of allreduce, broadcast, reduce, sendrecv; one rank's block of
//             the others
//   -g N      GPUs per thread: one thread drives N GPUs, each operation issued for all of them
//             between ncclGroupStart and ncclGroupEnd (nccl-tests' -g)
//   -t N      threads per process, each with its own GPUs (nccl-tests' -t)
//   -i MODE   how communicators are made: rank (ncclCommInitRank; the default for -g 1), group
//             (ncclGroupStart, ncclCommInitRank per GPU, ncclGroupEnd; the default for -g > 1),
//             all (ncclCommInitAll: one process, one thread)
//   -o LIST   operations, comma-separated, in order (default allreduce,broadcast,allgather,
//             reducescatter,sendrecv): allreduce broadcast reduce allgather reducescatter
//             alltoall (ncclAlltoAll) alltoallp2p (the same with grouped ncclSend/ncclRecv, as
//             nccl-tests does before NCCL 2.28) gather scatter (ncclGather/ncclScatter to and from
//             root 0, NCCL 2.28's) gatherp2p scatterp2p (the same with grouped ncclSend/ncclRecv,
//             as nccl-tests does before NCCL 2.28) sendrecv (ring: send to the next rank, receive
//             from the previous one)
//   -b BYTES -e BYTES -f FACTOR   sizes as nccl-tests counts them (its "size" column), from -b to
//             -e, times FACTOR each step (default 2); K, M, G suffixes
//   -n N      iterations per size (each one timed; the line shows the mean)
//   -s        then the same operations on sub-communicators: ncclCommSplit(color = rank % 2, key = rank)
//   -r N      then destroy every communicator and create it again, N times, running the operations each time
//   -m        buffers from ncclMemAlloc (NCCL's cuMem allocator), registered with ncclCommRegister on
//             the communicator they are used with (user buffer registration), freed with ncclMemFree
//   -D DEV    every rank on device DEV, as a launcher that gives two ranks one GPU (NCCL refuses it)
//   -H        the heap in use (glibc's mallinfo2) after the first generation and after the last, one
//             line each: what a job that re-creates its communicators keeps
//   -B        nonblocking communicators (ncclConfig_t blocking = 0, ncclCommInitRankConfig), every
//             operation in a group: an init or ncclGroupEnd that returns ncclInProgress is waited out
//             by polling ncclCommGetAsyncError, as PyTorch does with such communicators
// World rank of a GPU: (process × threads + thread) × GPUs + i; its device: LOCAL_RANK × threads ×
// GPUs + thread × GPUs + i (nccl-tests' numbering), or -D's.
// Runs unchanged with the real NCCL on a GPU node and with the simulated one (tests/sim).
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/cuda_check.h"
#include "tests/support/nccl_check.h"

namespace {

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr, "nccl_ring: %s\nusage: nccl_ring [-g N] [-t N] [-i rank|group|all] [-o LIST] [-b BYTES] "
                       "[-e BYTES] [-f FACTOR] [-n N] [-s] [-r N] [-m] [-D DEV] [-M RANK:N:size|op] [-B] [-H] [ID_DIR] [COUNT]\n", why);
  std::exit(2);
}

size_t ParseBytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) Usage("a size must be a number of bytes");
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default: Usage("a size's suffix is K, M or G");
  }
  return static_cast<size_t>(v);
}

struct Options {
  int gpus = 1, threads = 1, iters = 1, recreate = 0;
  int device = -1;  // -D: every rank's device
  std::string init;  // rank | group | all
  std::vector<std::string> ops{"allreduce", "broadcast", "allgather", "reducescatter", "sendrecv"};
  size_t min_bytes = 0, max_bytes = 0;
  double factor = 2;
  bool split = false, mem_alloc = false, nonblocking = false, heap = false;
  // -M R:N:size|op: the rank R's N-th allreduce is called with half the count, or as a broadcast
  // (a rank that calls a different collective or size: what the stopped-job report must name).
  int mismatch_rank = -1, mismatch_call = 0;
  std::string mismatch_kind;
  std::string dir;
  // The job as started: this process's place in it.
  int proc = 0, nprocs = 1, local_rank = 0;
  int WorldSize() const { return nprocs * threads * gpus; }
};

Options g_opt;
std::mutex g_print_mu;

// The id file of generation g > 0 (a re-created communicator) is a file of its own.
ncclUniqueId ShareId(int rank, int generation) {
  return p2ptrace::test::ShareNcclId(
      rank, g_opt.dir + "/nccl_ring.id" + (generation > 0 ? "." + std::to_string(generation) : ""), 120);
}

// One GPU a thread drives: its world rank, device, stream and timing events.
struct Gpu {
  int rank = 0, dev = 0;
  ncclComm_t comm = nullptr;  // the world communicator
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

// A GPU's place in the communicator an operation runs on (the world, or a split of it).
struct Member {
  Gpu* gpu;
  ncclComm_t comm;
  int rank, nranks;
};

// A call on nonblocking communicators: ncclInProgress is no failure; their async error is polled
// until it is no longer ncclInProgress, and then it must be ncclSuccess.
#define NCCL_RING_AWAIT(call, comms)                                                                        \
  do {                                                                                                       \
    ncclResult_t a_ = (call);                                                                                \
    if (a_ == ncclInProgress) {                                                                              \
      a_ = ncclSuccess;                                                                                      \
      for (ncclComm_t c_ : comms) {                                                                          \
        ncclResult_t s_ = ncclInProgress;                                                                    \
        for (; s_ == ncclInProgress; std::this_thread::yield()) P2PTRACE_NCCL_CHECK(ncclCommGetAsyncError(c_, &s_)); \
        if (a_ == ncclSuccess) a_ = s_;                                                                      \
      }                                                                                                      \
    }                                                                                                        \
    if (a_ != ncclSuccess) {                                                                                 \
      std::fprintf(stderr, "nccl_ring: %s failed: %s\n", #call, ncclGetErrorString(a_));                     \
      std::exit(2);                                                                                          \
    }                                                                                                        \
  } while (0)

std::vector<ncclComm_t> CommsOf(const std::vector<Member>& members) {
  std::vector<ncclComm_t> comms;
  for (const Member& m : members) comms.push_back(m.comm);
  return comms;
}

float* DeviceBuffer(int dev, size_t n) {
  P2PTRACE_CHECK(cudaSetDevice(dev));
  void* p = nullptr;
  if (g_opt.mem_alloc) P2PTRACE_NCCL_CHECK(ncclMemAlloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
  else P2PTRACE_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
  return static_cast<float*>(p);
}

void FreeBuffer(int dev, float* p) {
  P2PTRACE_CHECK(cudaSetDevice(dev));
  if (g_opt.mem_alloc) P2PTRACE_NCCL_CHECK(ncclMemFree(p));
  else P2PTRACE_CHECK(cudaFree(p));
}

void Upload(int dev, float* d, const std::vector<float>& h) {
  P2PTRACE_CHECK(cudaSetDevice(dev));
  P2PTRACE_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}

std::vector<float> Download(int dev, const float* d, size_t n) {
  P2PTRACE_CHECK(cudaSetDevice(dev));
  std::vector<float> h(n);
  P2PTRACE_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

// Compares and says where the first difference is; true when equal. Not instrumented by
// ThreadSanitizer: the buffer is this thread's own, and checking each element was most of a job's run.
__attribute__((no_sanitize("thread"))) bool Check(int rank, const std::string& name, const std::vector<float>& got, const std::function<float(size_t)>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      std::fprintf(stderr, "nccl_ring: rank %d: %s: element %zu is %g, expected %g\n", rank, name.c_str(), i,
                   double(got[i]), double(want(i)));
      return false;
    }
  }
  return true;
}

// What one rank contributes (small integers: sums stay exact in float).
float Value(int rank, size_t i) { return float(rank + 1 + int(i % 7)); }

// One operation at one size, on every member of this thread: buffers per member, the issuing of
// the NCCL calls, what each member must hold afterwards, and nccl-tests' figures for it.
struct OpPlan {
  size_t send = 0, recv = 0;   // floats per member
  size_t param = 0;            // the count argument nccl-tests passes (its getBw's `count`)
  double alg_factor = 1;       // algbw = param × 4 × alg_factor / time
  double bus_factor = 1;       // busbw = algbw × bus_factor
  bool p2p = false;            // grouped send/recv: a group of its own inside the thread's group
  std::function<std::vector<float>(const Member&)> input;
  std::function<void(const Member&, const float*, float*)> issue;
  std::function<bool(const Member&, const std::vector<float>&)> check;  // the member's receive buffer
};

// Whole-buffer operations take `count` as their count, the rest as the block of one rank.
bool Plan(const std::string& op, int N, size_t count, OpPlan* p) {
  size_t whole = count, part = count;
  double n = N;
  auto value_input = [](size_t n_floats) {
    return [n_floats](const Member& m) {
      std::vector<float> h(n_floats);
      for (size_t i = 0; i < n_floats; ++i) h[i] = Value(m.rank, i);
      return h;
    };
  };
  if (op == "allreduce") {
    *p = OpPlan{whole, whole, whole, 1, 2 * (n - 1) / n};
    p->input = value_input(whole);
    p->issue = [p](const Member& m, const float* s, float* r) {
      static thread_local int calls = 0;
      if (m.rank == g_opt.mismatch_rank && ++calls == g_opt.mismatch_call) {
        if (g_opt.mismatch_kind == "op") P2PTRACE_NCCL_CHECK(ncclBroadcast(s, r, p->param, ncclFloat32, 0, m.comm, m.gpu->stream));
        else P2PTRACE_NCCL_CHECK(ncclAllReduce(s, r, std::max<size_t>(p->param / 2, 1), ncclFloat32, ncclSum, m.comm, m.gpu->stream));
        return;
      }
      P2PTRACE_NCCL_CHECK(ncclAllReduce(s, r, p->param, ncclFloat32, ncclSum, m.comm, m.gpu->stream));
    };
    p->check = [N](const Member& m, const std::vector<float>& got) {
      return Check(m.gpu->rank, "allreduce", got, [&](size_t i) { return float(N * (N + 1) / 2 + N * int(i % 7)); });
    };
  } else if (op == "broadcast" || op == "reduce") {
    bool bcast = op == "broadcast";
    *p = OpPlan{whole, whole, whole, 1, 1};
    p->input = value_input(whole);
    p->issue = [p, bcast](const Member& m, const float* s, float* r) {
      if (bcast) P2PTRACE_NCCL_CHECK(ncclBroadcast(s, r, p->param, ncclFloat32, 0, m.comm, m.gpu->stream));
      else P2PTRACE_NCCL_CHECK(ncclReduce(s, r, p->param, ncclFloat32, ncclSum, 0, m.comm, m.gpu->stream));
    };
    p->check = [N, bcast, op](const Member& m, const std::vector<float>& got) {
      if (bcast) return Check(m.gpu->rank, op, got, [](size_t i) { return Value(0, i); });
      if (m.rank != 0) return true;  // only the root's buffer is defined
      return Check(m.gpu->rank, op, got, [&](size_t i) { return float(N * (N + 1) / 2 + N * int(i % 7)); });
    };
  } else if (op == "allgather") {
    *p = OpPlan{part, part * N, part, n, (n - 1) / n};
    p->input = value_input(part);
    p->issue = [p](const Member& m, const float* s, float* r) {
      P2PTRACE_NCCL_CHECK(ncclAllGather(s, r, p->param, ncclFloat32, m.comm, m.gpu->stream));
    };
    p->check = [part](const Member& m, const std::vector<float>& got) {
      return Check(m.gpu->rank, "allgather", got, [&](size_t j) { return Value(int(j / part), j % part); });
    };
  } else if (op == "reducescatter") {
    *p = OpPlan{part * N, part, part, n, (n - 1) / n};
    p->input = value_input(part * N);
    p->issue = [p](const Member& m, const float* s, float* r) {
      P2PTRACE_NCCL_CHECK(ncclReduceScatter(s, r, p->param, ncclFloat32, ncclSum, m.comm, m.gpu->stream));
    };
    p->check = [N, part](const Member& m, const std::vector<float>& got) {
      return Check(m.gpu->rank, "reducescatter", got, [&](size_t i) {
        size_t j = size_t(m.rank) * part + i;
        return float(N * (N + 1) / 2 + N * int(j % 7));
      });
    };
  } else if (op == "alltoall" || op == "alltoallp2p") {
    bool p2p = op == "alltoallp2p";
    *p = OpPlan{part * N, part * N, part, n, (n - 1) / n, p2p};
    // Block b of rank r's send buffer goes to rank b: element i of it is r·1000 + b·10 + i % 10.
    p->input = [part, N](const Member& m) {
      std::vector<float> h(part * N);
      for (size_t j = 0; j < h.size(); ++j) h[j] = float(m.rank * 1000 + int(j / part) * 10 + int(j % part % 10));
      return h;
    };
    p->issue = [p, p2p, part](const Member& m, const float* s, float* r) {
      if (!p2p) {
        P2PTRACE_NCCL_CHECK(ncclAlltoAll(s, r, p->param, ncclFloat32, m.comm, m.gpu->stream));
        return;
      }
      for (int peer = 0; peer < m.nranks; ++peer) {
        P2PTRACE_NCCL_CHECK(ncclSend(s + size_t(peer) * part, part, ncclFloat32, peer, m.comm, m.gpu->stream));
        P2PTRACE_NCCL_CHECK(ncclRecv(r + size_t(peer) * part, part, ncclFloat32, peer, m.comm, m.gpu->stream));
      }
    };
    p->check = [part, op](const Member& m, const std::vector<float>& got) {
      return Check(m.gpu->rank, op, got, [&](size_t j) { return float(int(j / part) * 1000 + m.rank * 10 + int(j % part % 10)); });
    };
  } else if (op == "gather" || op == "scatter") {  // NCCL 2.28's, as nccl-tests calls them from 2.28 on
    bool gather = op == "gather";
    *p = gather ? OpPlan{part, part * N, part, n, (n - 1) / n} : OpPlan{part * N, part, part, n, (n - 1) / n};
    p->input = value_input(gather ? part : part * N);
    p->issue = [part, gather](const Member& m, const float* s, float* r) {
      if (gather) P2PTRACE_NCCL_CHECK(ncclGather(s, r, part, ncclFloat32, 0, m.comm, m.gpu->stream));
      else P2PTRACE_NCCL_CHECK(ncclScatter(s, r, part, ncclFloat32, 0, m.comm, m.gpu->stream));
    };
    p->check = [part, gather, op](const Member& m, const std::vector<float>& got) {
      if (!gather) return Check(m.gpu->rank, op, got, [&](size_t i) { return Value(0, size_t(m.rank) * part + i); });
      if (m.rank != 0) return true;
      return Check(m.gpu->rank, op, got, [&](size_t j) { return Value(int(j / part), j % part); });
    };
  } else if (op == "gatherp2p") {
    *p = OpPlan{part, part * N, part, n, (n - 1) / n, true};
    p->input = value_input(part);
    p->issue = [part](const Member& m, const float* s, float* r) {
      P2PTRACE_NCCL_CHECK(ncclSend(s, part, ncclFloat32, 0, m.comm, m.gpu->stream));
      if (m.rank == 0)
        for (int peer = 0; peer < m.nranks; ++peer)
          P2PTRACE_NCCL_CHECK(ncclRecv(r + size_t(peer) * part, part, ncclFloat32, peer, m.comm, m.gpu->stream));
    };
    p->check = [part](const Member& m, const std::vector<float>& got) {
      if (m.rank != 0) return true;
      return Check(m.gpu->rank, "gatherp2p", got, [&](size_t j) { return Value(int(j / part), j % part); });
    };
  } else if (op == "scatterp2p") {
    *p = OpPlan{part * N, part, part, n, (n - 1) / n, true};
    p->input = value_input(part * N);  // only the root's is sent: block b of it to rank b
    p->issue = [part](const Member& m, const float* s, float* r) {
      if (m.rank == 0)
        for (int peer = 0; peer < m.nranks; ++peer)
          P2PTRACE_NCCL_CHECK(ncclSend(s + size_t(peer) * part, part, ncclFloat32, peer, m.comm, m.gpu->stream));
      P2PTRACE_NCCL_CHECK(ncclRecv(r, part, ncclFloat32, 0, m.comm, m.gpu->stream));
    };
    p->check = [part](const Member& m, const std::vector<float>& got) {
      return Check(m.gpu->rank, "scatterp2p", got, [&](size_t i) { return Value(0, size_t(m.rank) * part + i); });
    };
  } else if (op == "sendrecv") {
    *p = OpPlan{whole, whole, whole, 1, 1, true};
    p->input = value_input(whole);
    p->issue = [whole](const Member& m, const float* s, float* r) {
      int next = (m.rank + 1) % m.nranks, prev = (m.rank + m.nranks - 1) % m.nranks;
      P2PTRACE_NCCL_CHECK(ncclSend(s, whole, ncclFloat32, next, m.comm, m.gpu->stream));
      P2PTRACE_NCCL_CHECK(ncclRecv(r, whole, ncclFloat32, prev, m.comm, m.gpu->stream));
    };
    p->check = [](const Member& m, const std::vector<float>& got) {
      int prev = (m.rank + m.nranks - 1) % m.nranks;
      return Check(m.gpu->rank, "sendrecv", got, [&](size_t i) { return Value(prev, i); });
    };
  } else {
    return false;
  }
  return true;
}

// Runs `op` at `bytes` on the members (every GPU of this thread, one communicator each), g_opt.iters
// times; prints one line; true when every member's result is right.
// `size` is a size in nccl-tests' sense (bytes), or 0: then `count` is NCCL's count argument.
bool RunOp(const std::string& op, const std::string& label, std::vector<Member>& members, size_t size, size_t count) {
  int N = members.front().nranks;
  OpPlan plan;
  bool whole = op == "allreduce" || op == "broadcast" || op == "reduce" || op == "sendrecv";
  if (size > 0) count = whole ? size / sizeof(float) : size / sizeof(float) / size_t(N);
  Plan(op, N, count, &plan);
  if (plan.send == 0 && plan.recv == 0) return true;  // too small to split over the ranks
  size_t m_count = members.size();
  std::vector<float*> send(m_count), recv(m_count);
  std::vector<void*> handles;  // -m: ncclCommRegister's, deregistered before the buffers are freed
  for (size_t k = 0; k < m_count; ++k) {
    int dev = members[k].gpu->dev;
    send[k] = DeviceBuffer(dev, plan.send);
    recv[k] = DeviceBuffer(dev, plan.recv);
    Upload(dev, send[k], plan.input(members[k]));
    if (g_opt.mem_alloc) {
      for (auto [buf, n] : {std::pair{send[k], plan.send}, std::pair{recv[k], plan.recv}}) {
        void* h = nullptr;
        P2PTRACE_NCCL_CHECK(ncclCommRegister(members[k].comm, buf, std::max<size_t>(n, 1) * sizeof(float), &h));
        handles.push_back(h);
      }
    }
  }
  double total = 0;
  for (int it = 0; it < g_opt.iters; ++it) {
    for (Member& m : members) P2PTRACE_CHECK(cudaEventRecord(m.gpu->start, m.gpu->stream));
    // nccl-tests: one group around the thread's GPUs; send/recv forms in a group of their own.
    // Nonblocking: everything in one group, whose end is waited out.
    const bool outer = m_count > 1 || g_opt.nonblocking;
    if (outer) P2PTRACE_NCCL_CHECK(ncclGroupStart());
    for (size_t k = 0; k < m_count; ++k) {
      P2PTRACE_CHECK(cudaSetDevice(members[k].gpu->dev));
      if (plan.p2p) P2PTRACE_NCCL_CHECK(ncclGroupStart());
      plan.issue(members[k], send[k], recv[k]);
      if (plan.p2p) P2PTRACE_NCCL_CHECK(ncclGroupEnd());
    }
    if (outer) NCCL_RING_AWAIT(ncclGroupEnd(), CommsOf(members));
    double slowest = 0;
    for (Member& m : members) {
      P2PTRACE_CHECK(cudaEventRecord(m.gpu->stop, m.gpu->stream));
      P2PTRACE_CHECK(cudaStreamSynchronize(m.gpu->stream));
      float ms = 0;
      P2PTRACE_CHECK(cudaEventElapsedTime(&ms, m.gpu->start, m.gpu->stop));
      slowest = std::max(slowest, ms / 1e3);
    }
    total += slowest;
  }
  double seconds = total / g_opt.iters;
  bool ok = true;
  for (size_t k = 0; k < m_count; ++k) {
    ok = plan.check(members[k], Download(members[k].gpu->dev, recv[k], plan.recv)) && ok;
    if (g_opt.mem_alloc) {
      P2PTRACE_NCCL_CHECK(ncclCommDeregister(members[k].comm, handles[2 * k]));
      P2PTRACE_NCCL_CHECK(ncclCommDeregister(members[k].comm, handles[2 * k + 1]));
    }
    FreeBuffer(members[k].gpu->dev, send[k]);
    FreeBuffer(members[k].gpu->dev, recv[k]);
  }
  // nccl-tests' figures: size = the larger buffer; algbw = count × type size × factor / time.
  size = std::max(plan.send, plan.recv) * sizeof(float);
  double algbw = seconds > 0 ? double(plan.param * sizeof(float)) * plan.alg_factor / seconds / 1e9 : 0;
  std::lock_guard<std::mutex> lock(g_print_mu);
  std::printf("%-14s size %10zu B  time %10.2f us  algbw %8.2f GB/s  busbw %8.2f GB/s\n", label.c_str(), size,
              seconds * 1e6, algbw, algbw * plan.bus_factor);
  std::fflush(stdout);
  return ok;
}

// The sizes to run: -b … -e by -f; else one run with COUNT as every operation's count (0).
std::vector<size_t> Sizes() {
  if (g_opt.min_bytes == 0) return {0};
  std::vector<size_t> sizes;
  for (double b = double(g_opt.min_bytes); b <= double(std::max(g_opt.max_bytes, g_opt.min_bytes)) * 1.0000001;
       b = g_opt.factor > 1 ? b * g_opt.factor : b + 1e300)
    sizes.push_back(size_t(b));
  return sizes;
}

bool RunAll(std::vector<Member>& members, const std::string& suffix, size_t count) {
  bool ok = true;
  for (size_t size : Sizes())
    for (const std::string& op : g_opt.ops) ok = RunOp(op, op + suffix, members, size, count) && ok;
  return ok;
}

// Communicators for this thread's GPUs: ncclCommInitAll, or ncclCommInitRank per GPU (in a group
// when one thread holds several).
void InitComms(std::vector<Gpu>& gpus, int generation) {
  if (g_opt.init == "all") {
    std::vector<ncclComm_t> comms(gpus.size());
    std::vector<int> devs;
    for (const Gpu& g : gpus) devs.push_back(g.dev);
    P2PTRACE_NCCL_CHECK(ncclCommInitAll(comms.data(), int(gpus.size()), devs.data()));
    for (size_t i = 0; i < gpus.size(); ++i) gpus[i].comm = comms[i];
    return;
  }
  ncclUniqueId id = ShareId(gpus.front().rank, generation);
  bool group = g_opt.init == "group";
  if (group) P2PTRACE_NCCL_CHECK(ncclGroupStart());
  std::vector<ncclComm_t> made;
  for (Gpu& g : gpus) {
    P2PTRACE_CHECK(cudaSetDevice(g.dev));
    if (g_opt.nonblocking) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      ncclResult_t r = ncclCommInitRankConfig(&g.comm, g_opt.WorldSize(), id, g.rank, &config);
      P2PTRACE_NCCL_CHECK(r == ncclInProgress ? ncclSuccess : r);
      made.push_back(g.comm);
    } else {
      P2PTRACE_NCCL_CHECK(ncclCommInitRank(&g.comm, g_opt.WorldSize(), id, g.rank));
    }
  }
  if (group) NCCL_RING_AWAIT(ncclGroupEnd(), made);
  else if (g_opt.nonblocking) NCCL_RING_AWAIT(ncclInProgress, made);
}

// One thread: its GPUs, their communicators, every operation, then the split and re-creations.
bool Worker(int thread, size_t count) {
  std::vector<Gpu> gpus(g_opt.gpus);
  for (int i = 0; i < g_opt.gpus; ++i) {
    Gpu& g = gpus[i];
    g.rank = (g_opt.proc * g_opt.threads + thread) * g_opt.gpus + i;
    g.dev = g_opt.device >= 0 ? g_opt.device : g_opt.local_rank * g_opt.threads * g_opt.gpus + thread * g_opt.gpus + i;
    P2PTRACE_CHECK(cudaSetDevice(g.dev));
    P2PTRACE_CHECK(cudaStreamCreate(&g.stream));
    P2PTRACE_CHECK(cudaEventCreate(&g.start));
    P2PTRACE_CHECK(cudaEventCreate(&g.stop));
  }
  bool ok = true;
  for (int generation = 0; generation <= g_opt.recreate; ++generation) {
    InitComms(gpus, generation);
    {
      std::lock_guard<std::mutex> lock(g_print_mu);
      if (gpus.size() == 1)
        std::printf("rank %d of %d on device %d: %zu floats per rank\n", gpus[0].rank, g_opt.WorldSize(), gpus[0].dev, count);
      else
        std::printf("ranks %d-%d of %d on devices %d-%d: %zu floats per rank\n", gpus.front().rank, gpus.back().rank,
                    g_opt.WorldSize(), gpus.front().dev, gpus.back().dev, count);
      std::fflush(stdout);
    }
    std::vector<Member> world;
    for (Gpu& g : gpus) world.push_back(Member{&g, g.comm, g.rank, g_opt.WorldSize()});
    ok = RunAll(world, "", count) && ok;
    if (g_opt.split) {
      // Like PyTorch's new_group: every rank of the parent takes part (in one group when this
      // thread holds several of them).
      std::vector<ncclComm_t> subs(gpus.size(), nullptr);
      if (gpus.size() > 1) P2PTRACE_NCCL_CHECK(ncclGroupStart());
      for (size_t i = 0; i < gpus.size(); ++i) {
        P2PTRACE_CHECK(cudaSetDevice(gpus[i].dev));
        P2PTRACE_NCCL_CHECK(ncclCommSplit(gpus[i].comm, gpus[i].rank % 2, gpus[i].rank, &subs[i], nullptr));
      }
      if (gpus.size() > 1) P2PTRACE_NCCL_CHECK(ncclGroupEnd());
      std::vector<Member> sub;
      for (size_t i = 0; i < gpus.size(); ++i) {
        Member m{&gpus[i], subs[i], 0, 0};
        P2PTRACE_NCCL_CHECK(ncclCommUserRank(subs[i], &m.rank));
        P2PTRACE_NCCL_CHECK(ncclCommCount(subs[i], &m.nranks));
        sub.push_back(m);
      }
      ok = RunAll(sub, "/split", count) && ok;
      for (ncclComm_t c : subs) P2PTRACE_NCCL_CHECK(ncclCommDestroy(c));
    }
    for (Gpu& g : gpus) {
      P2PTRACE_NCCL_CHECK(ncclCommDestroy(g.comm));
      g.comm = nullptr;
    }
    if (g_opt.heap && (generation == 0 || generation == g_opt.recreate)) {
      std::lock_guard<std::mutex> lock(g_print_mu);
      std::printf("heap in use after generation %d: %zu B\n", generation, mallinfo2().uordblks);
      std::fflush(stdout);
    }
  }
  for (Gpu& g : gpus) {
    P2PTRACE_CHECK(cudaSetDevice(g.dev));
    P2PTRACE_CHECK(cudaEventDestroy(g.start));
    P2PTRACE_CHECK(cudaEventDestroy(g.stop));
    P2PTRACE_CHECK(cudaStreamDestroy(g.stream));
  }
  return ok;
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "+g:t:i:o:b:e:f:n:sr:mD:M:BH")) != -1) {
    switch (c) {
      case 'g': g_opt.gpus = std::atoi(optarg); break;
      case 't': g_opt.threads = std::atoi(optarg); break;
      case 'i': g_opt.init = optarg; break;
      case 'o': g_opt.ops = SplitList(optarg); break;
      case 'b': g_opt.min_bytes = ParseBytes(optarg); break;
      case 'e': g_opt.max_bytes = ParseBytes(optarg); break;
      case 'f': g_opt.factor = std::atof(optarg); break;
      case 'n': g_opt.iters = std::atoi(optarg); break;
      case 's': g_opt.split = true; break;
      case 'r': g_opt.recreate = std::atoi(optarg); break;
      case 'm': g_opt.mem_alloc = true; break;
      case 'D': g_opt.device = std::atoi(optarg); break;
      case 'B': g_opt.nonblocking = true; break;
      case 'H': g_opt.heap = true; break;
      case 'M': {
        char kind[8] = {};
        if (std::sscanf(optarg, "%d:%d:%7s", &g_opt.mismatch_rank, &g_opt.mismatch_call, kind) != 3 ||
            (std::strcmp(kind, "size") != 0 && std::strcmp(kind, "op") != 0))
          Usage("-M is RANK:N:size or RANK:N:op");
        g_opt.mismatch_kind = kind;
        break;
      }
      default: Usage("unknown option");
    }
  }
  if (g_opt.gpus < 1 || g_opt.threads < 1 || g_opt.iters < 1 || g_opt.recreate < 0) Usage("-g, -t and -n take a positive number");
  OpPlan probe;
  for (const std::string& op : g_opt.ops)
    if (!Plan(op, 1, 1, &probe)) Usage(("unknown operation " + op).c_str());
  if (g_opt.init.empty()) g_opt.init = g_opt.gpus > 1 ? "group" : "rank";
  if (g_opt.init != "rank" && g_opt.init != "group" && g_opt.init != "all") Usage("-i is rank, group or all");
  g_opt.proc = p2ptrace::test::EnvInt("RANK", 0);
  g_opt.nprocs = p2ptrace::test::EnvInt("WORLD_SIZE", 1);
  g_opt.local_rank = p2ptrace::test::EnvInt("LOCAL_RANK", 0);
  if (g_opt.init == "all" && (g_opt.nprocs != 1 || g_opt.threads != 1)) Usage("-i all needs one process and one thread");
  if (g_opt.nonblocking && (g_opt.init == "all" || g_opt.split)) Usage("-B makes its communicators with ncclCommInitRankConfig: not with -i all or -s");
  const char* dir_env = std::getenv("NCCL_RING_DIR");
  g_opt.dir = optind < argc ? argv[optind] : dir_env != nullptr ? dir_env : ".";
  size_t count = optind + 1 < argc ? std::strtoull(argv[optind + 1], nullptr, 0) : (1u << 20);

  bool ok = true;
  if (g_opt.threads == 1) {
    ok = Worker(0, count);
  } else {
    std::vector<std::thread> threads;
    std::vector<char> results(g_opt.threads, 0);
    for (int t = 0; t < g_opt.threads; ++t) threads.emplace_back([&, t] { results[t] = Worker(t, count); });
    for (std::thread& t : threads) t.join();
    ok = std::all_of(results.begin(), results.end(), [](char r) { return r != 0; });
  }
  std::printf("%s\n", ok ? "all results correct" : "WRONG RESULTS");
  return ok ? 0 : 1;
}
