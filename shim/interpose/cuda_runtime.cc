#include "shim/interpose/cuda_runtime.h"

#include <mutex>
#include <type_traits>

namespace p2ptrace::shim {

std::atomic<const CudaRuntime*> g_runtimes[static_cast<int>(Node::kCount)];

const CudaRuntime& ResolveRuntime(Node node) {
  static CudaRuntime runtimes[static_cast<int>(Node::kCount)];
  static std::once_flag once[static_cast<int>(Node::kCount)];
  int i = static_cast<int>(node);
  std::call_once(once[i], [&] {
    CudaRuntime& r = runtimes[i];
    r.node = node;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(ResolveReal(name, node));
      return fn != nullptr;
    };
    r.complete = get(r.GetDevice, "cudaGetDevice") & get(r.SetDevice, "cudaSetDevice") &
                 get(r.GetDeviceCount, "cudaGetDeviceCount") & get(r.DeviceGetPCIBusId, "cudaDeviceGetPCIBusId") &
                 get(r.PointerGetAttributes, "cudaPointerGetAttributes") &
                 get(r.EventCreateWithFlags, "cudaEventCreateWithFlags") & get(r.EventRecord, "cudaEventRecord") &
                 get(r.EventQuery, "cudaEventQuery") & get(r.EventElapsedTime, "cudaEventElapsedTime") &
                 get(r.EventDestroy, "cudaEventDestroy") & get(r.RuntimeGetVersion, "cudaRuntimeGetVersion") &
                 get(r.DriverGetVersion, "cudaDriverGetVersion");
    g_runtimes[i].store(&r, std::memory_order_release);
  });
  return runtimes[i];
}

}  // namespace p2ptrace::shim
