#include "shim/interpose/cuda_runtime.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>

#include "shim/record/trace_dir.h"

namespace p2ptrace::shim {

std::atomic<const CudaRuntime*> g_runtimes[static_cast<int>(Node::kCount)];

const CudaRuntime& ResolveRuntime(Node node) {
  KeepErrno keep;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  int i = static_cast<int>(node);
  if (const CudaRuntime* known = g_runtimes[i].load(std::memory_order_acquire)) return *known;
  // Never freed: a retired table may still be read by a timing in flight (it checks `retired`).
  auto* r = new CudaRuntime{};
  r->node = node;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(ResolveReal(name, node));
    return fn != nullptr;
  };
  r->complete = get(r->GetDevice, "cudaGetDevice") & get(r->SetDevice, "cudaSetDevice") &
                get(r->GetDeviceCount, "cudaGetDeviceCount") & get(r->DeviceGetPCIBusId, "cudaDeviceGetPCIBusId") &
                get(r->PointerGetAttributes, "cudaPointerGetAttributes") &
                get(r->EventCreateWithFlags, "cudaEventCreateWithFlags") & get(r->EventRecord, "cudaEventRecord") &
                get(r->EventQuery, "cudaEventQuery") & get(r->EventElapsedTime, "cudaEventElapsedTime") &
                get(r->EventDestroy, "cudaEventDestroy") & get(r->RuntimeGetVersion, "cudaRuntimeGetVersion") &
                get(r->DriverGetVersion, "cudaDriverGetVersion");
  r->StreamGetCaptureInfo = ResolveReal("cudaStreamGetCaptureInfo", node);
  Dl_info info{};
  if (r->GetDevice != nullptr && dladdr(reinterpret_cast<void*>(r->GetDevice), &info) != 0) {
    r->base = info.dli_fbase;
  }
  g_runtimes[i].store(r, std::memory_order_release);
  return *r;
}

}  // namespace p2ptrace::shim
