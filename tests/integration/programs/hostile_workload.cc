// Programs that do what real jobs do to the ground a tracer stands on (tests/integration/shim/hostile_test.cc
// runs each bare and under the shim; what it prints and leaves behind must be the same).
// Linked to the real libcudart and libnccl (RUNPATH); runs on the simulated node.
//   closefds DATA      NCCL logs once (its debug file opens), then every descriptor from 3 to 1023 is
//                      closed, DATA is opened (it gets a low number) and written, NCCL runs a ring on
//                      two GPUs, DATA is written again: DATA must hold the program's lines only
//   errno              errno set to a sentinel before each kind of call the shim wraps; prints the
//                      errno each left (the first call of each kind included: the trace opens there)
//   copies N           N peer copies 0->1 and N back, 64 KiB each (a full disk's test)
//   ring N             N allreduces on two GPUs through one process (ncclCommInitAll)
//   dlerror            a failed dlopen's dlerror() text printed after an fopen (NCCL's WARN for a
//                      missing libcuda.so does exactly this: its first log line opens the tap file)
//   untouched DIR      no CUDA or NCCL call at all: prints its environment (sorted) and how many
//                      entries DIR has (a launcher, a shell of the job)
//   profiler           an NCCL gone wrong, driving the profiler plugin it was given (the shim, under
//                      it) as NCCL never should: null arguments, unknown events, a channel past 64,
//                      a storm of operations whose channels never stop, a finalize in flight and
//                      calls after it; one clean send in between (channels 0-1: 1000-3000, 1100-3100),
//                      and 2000 sends of another communicator whose two channels two threads report
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shim/interpose/nccl_profiler_abi.h"

extern char** environ;

namespace {

constexpr int kSentinel = 4242;

void WriteLine(int fd, const char* line) {
  ssize_t ignored = write(fd, line, std::strlen(line));
  (void)ignored;
}

// One allreduce on each of two devices, in a group; true when both returned success.
bool AllReduceTwo(ncclComm_t* comms, float** bufs, cudaStream_t* streams, size_t count) {
  bool ok = ncclGroupStart() == ncclSuccess;
  for (int d = 0; d < 2; ++d)
    ok &= ncclAllReduce(bufs[d], bufs[d], count, ncclFloat, ncclSum, comms[d], streams[d]) == ncclSuccess;
  ok &= ncclGroupEnd() == ncclSuccess;
  for (int d = 0; d < 2; ++d) ok &= cudaSetDevice(d) == cudaSuccess && cudaStreamSynchronize(streams[d]) == cudaSuccess;
  return ok;
}

int Ring(int iterations) {
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) return 2;
  float* bufs[2];
  cudaStream_t streams[2];
  const size_t count = 4096;
  for (int d = 0; d < 2; ++d) {
    std::vector<float> h(count, float(d + 1));
    if (cudaSetDevice(d) != cudaSuccess || cudaMalloc(&bufs[d], count * sizeof(float)) != cudaSuccess ||
        cudaStreamCreate(&streams[d]) != cudaSuccess ||
        cudaMemcpy(bufs[d], h.data(), count * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
      return 2;
  }
  for (int i = 0; i < iterations; ++i)
    if (!AllReduceTwo(comms, bufs, streams, count)) return 3;
  std::vector<float> h(count);
  if (cudaMemcpy(h.data(), bufs[0], count * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
  for (int d = 0; d < 2; ++d) ncclCommDestroy(comms[d]);
  std::printf("ring %d: first value %g\n", iterations, static_cast<double>(h[0]));
  return 0;
}

int CloseFds(const char* data) {
  int version = 0;
  ncclUniqueId id;
  if (ncclGetVersion(&version) != ncclSuccess || ncclGetUniqueId(&id) != ncclSuccess) return 2;  // NCCL has logged
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  int fd = open(data, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) return 2;
  WriteLine(fd, "program data before NCCL\n");
  int r = Ring(3);
  WriteLine(fd, "program data after NCCL\n");
  close(fd);
  return r;
}

// errno after a call, with the sentinel set before it.
#define ERRNO_AFTER(call)                                                                      \
  do {                                                                                         \
    errno = kSentinel;                                                                         \
    int r_ = static_cast<int>(call);                                                           \
    int e_ = errno;                                                                            \
    std::printf("%-40s -> %d, errno %s\n", #call, r_, e_ == kSentinel ? "kept" : std::to_string(e_).c_str()); \
  } while (0)

int Errno() {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  int can = -1;
  cudaStream_t s = nullptr;
  ERRNO_AFTER(cudaSetDevice(0));
  ERRNO_AFTER(cudaMalloc(&a, 1 << 20));
  ERRNO_AFTER(cudaMalloc(&c, 1 << 20));
  ERRNO_AFTER(cudaSetDevice(1));
  ERRNO_AFTER(cudaMalloc(&b, 1 << 20));
  ERRNO_AFTER(cudaStreamCreate(&s));
  ERRNO_AFTER(cudaDeviceCanAccessPeer(&can, 0, 1));
  ERRNO_AFTER(cudaMemcpyPeer(b, 1, a, 0, 1 << 20));
  ERRNO_AFTER(cudaMemcpy(a, b, 1 << 20, cudaMemcpyDeviceToDevice));
  ERRNO_AFTER(cudaMemcpy(a, c, 1 << 20, cudaMemcpyDeviceToDevice));
  ERRNO_AFTER(cudaMemcpyAsync(b, a, 4096, cudaMemcpyDefault, s));
  ERRNO_AFTER(cudaMemcpyPeerAsync(a, 0, b, 1, 4096, s));
  ERRNO_AFTER(cudaDeviceEnablePeerAccess(0, 0));
  ERRNO_AFTER(cudaMemcpyPeer(a, 0, b, 1, 1 << 20));
  ERRNO_AFTER(cudaMemcpyPeer(a, 0, b, 1, size_t{1} << 40));  // fails
  ERRNO_AFTER(cudaStreamSynchronize(s));
  ERRNO_AFTER(cudaStreamDestroy(s));
  ERRNO_AFTER(cudaFree(b));
  ERRNO_AFTER(cudaMalloc(&b, 1 << 20));
  int version = 0;
  ncclUniqueId id;
  ERRNO_AFTER(ncclGetVersion(&version));
  ERRNO_AFTER(ncclGetUniqueId(&id));
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  ERRNO_AFTER(ncclCommInitAll(comms, 2, devs));
  ERRNO_AFTER(ncclGroupStart());
  ERRNO_AFTER(ncclAllReduce(a, a, 16, ncclFloat, ncclSum, comms[0], nullptr));
  ERRNO_AFTER(ncclAllReduce(b, b, 16, ncclFloat, ncclSum, comms[1], nullptr));
  ERRNO_AFTER(ncclGroupEnd());
  ERRNO_AFTER(ncclCommDestroy(comms[0]));
  ERRNO_AFTER(ncclCommDestroy(comms[1]));
  return 0;
}

int DlerrorAcrossFopen() {
  if (dlopen("libp2ptrace-test-missing.so", RTLD_NOW) != nullptr) return 2;
  const char* error = dlerror();
  FILE* f = std::fopen("/proc/self/stat", "r");  // the process's first fopen
  std::printf("dlerror: %s\n", error ? error : "(none)");
  if (f != nullptr) std::fclose(f);
  return 0;
}

int Untouched(const char* dir) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  std::sort(env.begin(), env.end());
  for (const std::string& e : env) std::printf("%s\n", e.c_str());
  int entries = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++entries;
    closedir(d);
  }
  std::printf("entries: %d\n", entries);
  return 0;
}

int Copies(int n) {
  void *a = nullptr, *b = nullptr;
  const size_t bytes = 64 << 10;
  if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&a, bytes) != cudaSuccess || cudaSetDevice(1) != cudaSuccess ||
      cudaMalloc(&b, bytes) != cudaSuccess)
    return 2;
  for (int i = 0; i < n; ++i)
    if (cudaMemcpyPeer(b, 1, a, 0, bytes) != cudaSuccess || cudaMemcpyPeer(a, 0, b, 1, bytes) != cudaSuccess) return 3;
  std::printf("copies %d done\n", n);
  return 0;
}

int ProfilerGoneWrong() {
  namespace np = p2ptrace::nccl_profiler;
  int version = 0;
  ncclGetVersion(&version);  // the process's first NCCL call: the shim sets NCCL_PROFILER_PLUGIN here
  const char* name = std::getenv("NCCL_PROFILER_PLUGIN");
  void* lib = name ? dlopen(name, RTLD_NOW | RTLD_LOCAL) : nullptr;
  auto* pl = lib ? static_cast<const np::PluginV5*>(dlsym(lib, "ncclProfiler_v5")) : nullptr;
  if (pl == nullptr) {
    std::printf("no profiler plugin\n");
    return 0;
  }
  int mask = 0;
  void* ctx = nullptr;
  if (pl->init(&ctx, 0xabcull, &mask, "hostile", 1, 2, 0, nullptr) != ncclSuccess) return 1;
  std::printf("plugin %s mask 0x%x\n", pl->name, mask);
  np::v5::Descr d{};
  void* h = reinterpret_cast<void*>(1);
  pl->start_event(ctx, nullptr, &d);        // no handle to fill
  pl->start_event(nullptr, &h, &d);         // no context
  pl->start_event(ctx, &h, nullptr);        // no descriptor
  d.type = 1ull << 40;                      // an event type from the future
  pl->start_event(ctx, &h, &d);
  pl->record_event_state(nullptr, np::kKernelChStop, nullptr);
  pl->stop_event(nullptr);
  auto op = [&](const char* func, int peer, int channels) {
    np::v5::Descr o{};
    o.type = std::strcmp(func, "Send") == 0 ? np::kP2p : np::kColl;
    if (o.type == np::kP2p) o.p2p = {func, nullptr, "ncclFloat32", 1024, peer, static_cast<uint8_t>(channels), nullptr};
    else o.coll = {1, func, nullptr, nullptr, 1024, -1, "ncclFloat32", static_cast<uint8_t>(channels), 16, "RING", "SIMPLE", nullptr};
    void* handle = nullptr;
    pl->start_event(ctx, &handle, &o);
    if (handle) pl->stop_event(handle);  // enqueued
    return handle;
  };
  auto channel = [&](void* parent, int c, uint64_t start) {
    np::v5::Descr k{};
    k.type = np::kKernelCh;
    k.parent = parent;
    k.kernel_ch = {static_cast<uint8_t>(c), start};
    void* handle = nullptr;
    pl->start_event(ctx, &handle, &k);
    return handle;
  };
  auto stop = [&](void* ch, uint64_t at) {
    np::StateArgs a{};
    a.kernel_ch.timer = at;
    pl->record_event_state(ch, np::kKernelChStop, &a);
    pl->stop_event(ch);
  };
  void* send = op("Send", 1, 2);
  void* c0 = channel(send, 0, 1000);
  pl->record_event_state(c0, np::kKernelChStop, nullptr);  // a stop state without its arguments
  stop(c0, 3000);
  stop(channel(send, 1, 1100), 3100);
  std::printf("channel 200: %s\n", channel(op("Send", 1, 1), 200, 5) ? "handle" : "null");
  void* partial = op("AllReduce", -1, 2);
  void* late = channel(partial, 1, 7000);
  stop(channel(partial, 0, 7000), 9000);
  int held = 0;  // a storm: operations whose channels never stop
  for (int i = 0; i < 10000; ++i) held += channel(op("AllReduce", -1, 1), 0, 10) != nullptr;
  std::printf("storm: %d held\n", held);
  // NCCL's threads: a second communicator's operations made on this thread, each of their two
  // channels reported by a thread of its own (its proxy and profiler threads), the last one to stop
  // writing the record.
  void* ctx2 = nullptr;
  int mask2 = 0;
  pl->init(&ctx2, 0xdefull, &mask2, "threads", 1, 2, 0, nullptr);
  std::swap(ctx, ctx2);
  constexpr int kThreaded = 2000;
  std::vector<void*> sends(kThreaded);
  for (void*& s : sends) s = op("Send", 1, 2);
  std::swap(ctx, ctx2);
  std::vector<std::thread> reporters;
  for (int c = 0; c < 2; ++c)
    reporters.emplace_back([&, c] {
      for (void* send_op : sends) {
        np::v5::Descr k{};
        k.type = np::kKernelCh;
        k.parent = send_op;
        k.kernel_ch = {static_cast<uint8_t>(c), 100};
        void* ch = nullptr;
        pl->start_event(ctx2, &ch, &k);
        np::StateArgs a{};
        a.kernel_ch.timer = 300 + c;
        pl->record_event_state(ch, np::kKernelChStop, &a);
        pl->stop_event(ch);
      }
    });
  for (std::thread& t : reporters) t.join();
  pl->finalize(ctx2);
  pl->finalize(ctx);                // in flight: what stopped is written, flagged partial
  stop(late, 9500);                 // after finalize: nothing written, nothing broken
  std::printf("after finalize: %s\n", op("Send", 1, 1) ? "handle" : "null");
  pl->finalize(nullptr);
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  int n = argc > 2 ? std::atoi(argv[2]) : 0;
  if (cmd == "closefds" && argc > 2) return CloseFds(argv[2]);
  if (cmd == "errno") return Errno();
  if (cmd == "copies" && n > 0) return Copies(n);
  if (cmd == "ring" && n > 0) return Ring(n);
  if (cmd == "untouched" && argc > 2) return Untouched(argv[2]);
  if (cmd == "dlerror") return DlerrorAcrossFopen();
  if (cmd == "profiler") return ProfilerGoneWrong();
  std::fprintf(stderr, "usage: hostile_workload closefds DATA | errno | copies N | ring N | dlerror | untouched DIR | profiler\n");
  return 64;
}
