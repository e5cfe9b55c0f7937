#include "shim/interpose/unload.h"

#include <dlfcn.h>
#include <pthread.h>

#include <cerrno>

#include "shim/interpose/cuda_runtime.h"
#include "shim/record/copy_timer.h"
#include "shim/record/trace_dir.h"

namespace p2ptrace::shim {
namespace {

// Whether the library a resolved pointer came from is still loaded where it was.
bool StillLoaded(const void* fn, const void* base) {
  Dl_info info{};
  return fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fbase == base;
}

void RetireUnloaded() {
  for (int i = 0; i < static_cast<int>(Node::kCount); ++i) {
    const CudaRuntime* rt = g_runtimes[i].load(std::memory_order_acquire);
    if (rt == nullptr || StillLoaded(rt->anchor, rt->base)) continue;
    const_cast<CudaRuntime*>(rt)->retired.store(true, std::memory_order_release);
    g_runtimes[i].store(nullptr, std::memory_order_release);  // resolved again at the node's next call
    ForgetRealFunctions(static_cast<Node>(i));
    CopyTimer::ForgetRuntime(static_cast<Node>(i));
  }
  ForgetNcclIfUnloaded(StillLoaded);
}

void LockForFork() { UnloadMutex().lock(); }
void UnlockAfterFork() { UnloadMutex().unlock(); }

}  // namespace

std::recursive_mutex& UnloadMutex() {
  static auto* mu = [] {
    auto* m = new std::recursive_mutex();  // never destroyed: dlclose may run during exit
    pthread_atfork(LockForFork, UnlockAfterFork, UnlockAfterFork);
    return m;
  }();
  return *mu;
}

int CloseLibrary(void* handle, int (*real_dlclose)(void*)) {
  std::lock_guard<std::recursive_mutex> lock(UnloadMutex());
  int r = real_dlclose(handle);
  KeepErrno keep;
  if (r == 0) RetireUnloaded();
  return r;
}

}  // namespace p2ptrace::shim
