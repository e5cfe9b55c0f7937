// A profiler plugin that records what NCCL (real or simulated) asks of it, one line per call, into
// $RECORDING_PROFILER_OUT: the tests' witness of how a plugin is loaded, initialised, fed and
// finalised. Built once per set of ABI versions it exports (RECORDING_V1 … RECORDING_V7, each
// named "recording-vN"). Its init sets the activation mask to $RECORDING_PROFILER_MASK (0 when
// unset) and fails with ncclInternalError when $RECORDING_PROFILER_FAIL_INIT is set, after making
// its context, as a plugin that fails late would.
#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "shim/interpose/nccl_profiler_abi.h"

namespace {

namespace np = p2ptrace::nccl_profiler;

// One line, appended whole (O_APPEND): the processes of a job share the file.
__attribute__((format(printf, 1, 2))) void Record(const char* fmt, ...) {
  const char* path = std::getenv("RECORDING_PROFILER_OUT");
  if (path == nullptr) return;
  char line[512];
  int n = std::snprintf(line, sizeof line, "pid=%d ", static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  n += std::vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
  va_end(ap);
  if (n > static_cast<int>(sizeof line) - 2) n = sizeof line - 2;
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t w = write(fd, line, n);
  (void)w;
  close(fd);
}

ncclResult_t Initialised(int version, void** context, int* mask) {
  static int contexts = 0;
  *context = &contexts;
  const char* m = std::getenv("RECORDING_PROFILER_MASK");
  *mask = m ? std::atoi(m) : 0;
  if (std::getenv("RECORDING_PROFILER_FAIL_INIT") != nullptr) {
    Record("init-failed v%d", version);
    return ncclInternalError;
  }
  return ncclSuccess;
}

template <int kVersion>
ncclResult_t InitV1(void** context, int* mask) {
  Record("init v%d mask_in=%d", kVersion, *mask);
  return Initialised(kVersion, context, mask);
}
[[maybe_unused]] ncclResult_t InitV4(void** context, int* mask, const char* name, uint64_t hash, int nodes, int nranks, int rank,
                    np::Logger) {
  Record("init v4 hash=%" PRIx64 " name=%s nnodes=%d nranks=%d rank=%d mask_in=%d", hash, name ? name : "-", nodes,
         nranks, rank, *mask);
  return Initialised(4, context, mask);
}
template <int kVersion>
ncclResult_t InitV5(void** context, uint64_t id, int* mask, const char* name, int nodes, int nranks, int rank,
                    np::Logger) {
  Record("init v%d hash=%" PRIx64 " name=%s nnodes=%d nranks=%d rank=%d mask_in=%d", kVersion, id, name ? name : "-",
         nodes, nranks, rank, *mask);
  return Initialised(kVersion, context, mask);
}

// Events: the type and, for the members per-pair timing reads, their values. A handle is the
// event's number, so that states and stops name the event they belong to.
int g_events = 0;  // one plugin instance per process; NCCL calls it from one thread at a time here

template <typename T>
std::string Text(T v) {
  if constexpr (std::is_same_v<T, const char*>) return v ? v : "-";
  else return std::to_string(static_cast<long long>(v));
}

template <int kVersion, typename Descr>
ncclResult_t Start(void*, void** event, Descr* d) {
  int id = ++g_events;
  *event = reinterpret_cast<void*>(static_cast<intptr_t>(id));
  int parent = static_cast<int>(reinterpret_cast<intptr_t>(d->parent));
  std::string what;
  if (d->type == np::kP2p) {
    what = " p2p func=" + Text(d->p2p.func) + " peer=" + std::to_string(d->p2p.peer) +
           " count=" + std::to_string(d->p2p.count) + " datatype=" + Text(d->p2p.datatype);
    if constexpr (requires { d->p2p.channels; }) what += " channels=" + std::to_string(d->p2p.channels);
  } else if (d->type == np::kColl) {
    what = " coll func=" + Text(d->coll.func) + " seq=" + std::to_string(d->coll.seq) +
           " count=" + std::to_string(d->coll.count) + " algo=" + Text(d->coll.algo);
  } else if (d->type == np::kGroup) {
    what = " group";
  } else if constexpr (requires { d->kernel_ch; }) {
    if (d->type == np::kKernelCh) {
      what = " kernel_ch channel=" + std::to_string(d->kernel_ch.channel);
      if constexpr (requires { d->kernel_ch.timer; }) what += " start=" + std::to_string(d->kernel_ch.timer);
    }
  }
  Record("start v%d id=%d parent=%d type=%" PRIu64 " rank=%d%s", kVersion, id, parent, static_cast<uint64_t>(d->type),
         d->rank, what.c_str());
  return ncclSuccess;
}
template <int kVersion>
ncclResult_t Stop(void* event) {
  Record("stop v%d id=%d", kVersion, static_cast<int>(reinterpret_cast<intptr_t>(event)));
  return ncclSuccess;
}
template <int kVersion, typename Args>
ncclResult_t State(void* event, np::State state, Args* args) {
  std::string what;
  if constexpr (requires { args->kernel_ch.timer; })
    if (state == np::kKernelChStop && args != nullptr) what = " stop=" + std::to_string(args->kernel_ch.timer);
  Record("state v%d id=%d %d%s", kVersion, static_cast<int>(reinterpret_cast<intptr_t>(event)), static_cast<int>(state),
         what.c_str());
  return ncclSuccess;
}
template <int kVersion>
ncclResult_t Finalize(void*) {
  Record("finalize v%d", kVersion);
  return ncclSuccess;
}

}  // namespace

#define P2PSIM_RECORDING(N, Plugin, Descr, Args, init) \
  extern "C" __attribute__((visibility("default"))) const np::Plugin ncclProfiler_v##N = { \
      "recording-v" #N, init, Start<N, Descr>, Stop<N>, State<N, Args>, Finalize<N>};

#ifdef RECORDING_V1
P2PSIM_RECORDING(1, PluginV1, np::v1::Descr, np::v1::StateArgs, InitV1<1>)
#endif
#ifdef RECORDING_V2
P2PSIM_RECORDING(2, PluginV2, np::v2::Descr, np::v1::StateArgs, InitV1<2>)
#endif
#ifdef RECORDING_V3
P2PSIM_RECORDING(3, PluginV3, np::v3::Descr, np::v1::StateArgs, InitV1<3>)
#endif
#ifdef RECORDING_V4
P2PSIM_RECORDING(4, PluginV4, np::v4::Descr, np::StateArgs, InitV4)
#endif
#ifdef RECORDING_V5
P2PSIM_RECORDING(5, PluginV5, np::v5::Descr, np::StateArgs, InitV5<5>)
#endif
#ifdef RECORDING_V6
P2PSIM_RECORDING(6, PluginV6, np::v6::Descr, np::StateArgs, InitV5<6>)
#endif
#ifdef RECORDING_V7
P2PSIM_RECORDING(7, PluginV7, np::v7::Descr, np::StateArgs, InitV5<7>)
#endif
