#include "shim/interpose/unload.h"

#include <mutex>

#include "shim/base/bind.h"
#include "shim/base/cuda_runtime.h"
#include "shim/base/fd.h"
#include "shim/record/copy_timer.h"
#include "shim/record/process_uses.h"

namespace p2ptrace::shim {
namespace {

// Each library gone: its real functions forgotten (found again at their next use); for a CUDA node
// also its runtime table, its timing events, and its description in the trace (made again).
void RetireUnloaded() {
  for (int i = 0; i < static_cast<int>(Library::kCount); ++i) {
    auto lib = static_cast<Library>(i);
    if (!LibraryUnloaded(lib)) continue;
    ForgetLibrary(lib);
    if (i >= static_cast<int>(Node::kCount)) continue;
    auto node = static_cast<Node>(i);
    RetireRuntime(node);
    CopyTimer::ForgetRuntime(node);
    ForgetNodeAnswered(node);
  }
}

}  // namespace

int CloseLibrary(void* handle, int (*real_dlclose)(void*)) {
  std::lock_guard<std::recursive_mutex> lock(UnloadMutex());
  int r = real_dlclose(handle);
  KeepErrno keep;
  if (r == 0) RetireUnloaded();
  return r;
}

}  // namespace p2ptrace::shim
