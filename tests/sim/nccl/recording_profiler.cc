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

// Events: the type and, for the members per-pair timing reads, their values.
template <int kVersion, typename Descr>
ncclResult_t Start(void*, void** event, Descr* d) {
  static int events = 0;
  *event = &events;
  Record("start v%d type=%" PRIu64 " rank=%d", kVersion, static_cast<uint64_t>(d->type), d->rank);
  return ncclSuccess;
}
template <int kVersion>
ncclResult_t Stop(void*) {
  Record("stop v%d", kVersion);
  return ncclSuccess;
}
template <int kVersion, typename Args>
ncclResult_t State(void*, np::State state, Args*) {
  Record("state v%d %d", kVersion, static_cast<int>(state));
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
