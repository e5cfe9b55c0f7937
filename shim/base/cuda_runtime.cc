#include "shim/base/cuda_runtime.h"

#include <cuda.h>

#include <mutex>
#include <type_traits>

#include "shim/base/fd.h"

namespace p2ptrace::shim {

std::atomic<const CudaRuntime*> g_runtimes[static_cast<int>(Node::kCount)];

namespace {

// The driver node's table: the runtime's questions asked of libcuda.so.1, in the runtime's terms.
// Only success matters to the shim (its own calls' errors never reach the application).
struct DriverCalls {
  CUresult (*CtxGetDevice)(CUdevice*);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGetPCIBusId)(char*, int, CUdevice);
  CUresult (*PointerGetAttributes)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);
  CUresult (*EventCreate)(CUevent*, unsigned int);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventQuery)(CUevent);
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*DeviceCanAccessPeer)(int*, CUdevice, CUdevice);
  CUresult (*DeviceGetP2PAttribute)(int*, CUdevice_P2PAttribute, CUdevice, CUdevice);
};
DriverCalls g_driver;  // written once, under ResolveRuntime's lock, before the table is published

cudaError_t Result(CUresult r) { return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown; }

cudaError_t DriverGetDevice(int* d) {
  CUdevice dev = -1;
  CUresult r = g_driver.CtxGetDevice(&dev);
  if (r == CUDA_SUCCESS) *d = dev;
  return Result(r);
}
// Switching would mean retaining another device's primary context (a side effect the program would
// see): a copy timed on another device than the current context's goes untimed.
cudaError_t DriverSetDevice(int) { return cudaErrorNotSupported; }
cudaError_t DriverGetDeviceCount(int* n) { return Result(g_driver.DeviceGetCount(n)); }
cudaError_t DriverPCIBusId(char* bus, int len, int d) { return Result(g_driver.DeviceGetPCIBusId(bus, len, d)); }
// cuPointerGetAttributes answers for any address (unknown ones get type 0), like cudart 11+.
cudaError_t DriverPointerAttributes(cudaPointerAttributes* a, const void* p) {
  CUpointer_attribute what[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  unsigned int type = 0;
  int device = -1;
  void* data[] = {&type, &device};
  CUresult r = g_driver.PointerGetAttributes(2, what, data, reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS) return Result(r);
  *a = cudaPointerAttributes{};
  a->type = type == CU_MEMORYTYPE_DEVICE ? cudaMemoryTypeDevice
            : type == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost
                                         : cudaMemoryTypeUnregistered;
  a->device = device;
  return cudaSuccess;
}
// cudaEvent_t and cudaStream_t are the driver's CUevent and CUstream; the flags' values are equal.
cudaError_t DriverEventCreate(cudaEvent_t* e, unsigned int flags) { return Result(g_driver.EventCreate(e, flags)); }
cudaError_t DriverEventRecord(cudaEvent_t e, cudaStream_t s) { return Result(g_driver.EventRecord(e, s)); }
cudaError_t DriverEventQuery(cudaEvent_t e) {
  CUresult r = g_driver.EventQuery(e);
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : Result(r);
}
cudaError_t DriverElapsed(float* ms, cudaEvent_t a, cudaEvent_t b) { return Result(g_driver.EventElapsedTime(ms, a, b)); }
cudaError_t DriverEventDestroy(cudaEvent_t e) { return Result(g_driver.EventDestroy(e)); }
cudaError_t NoRuntimeVersion(int*) { return cudaErrorNotSupported; }  // no runtime: the header keeps 0
cudaError_t DriverVersion(int* v) { return Result(g_driver.DriverGetVersion(v)); }
cudaError_t DriverCanAccessPeer(int* can, int a, int b) { return Result(g_driver.DeviceCanAccessPeer(can, a, b)); }
// cudaDeviceP2PAttr and CUdevice_P2PAttribute number the attributes alike.
cudaError_t DriverP2PAttribute(int* v, cudaDeviceP2PAttr attr, int a, int b) {
  return Result(g_driver.DeviceGetP2PAttribute(v, static_cast<CUdevice_P2PAttribute>(attr), a, b));
}

bool FillDriverTable(CudaRuntime* r) {
  auto get = [](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(ResolveReal(name, Node::kDriver));
    return fn != nullptr;
  };
  DriverCalls& d = g_driver;
  bool found = get(d.CtxGetDevice, "cuCtxGetDevice") & get(d.DeviceGetCount, "cuDeviceGetCount") &
               get(d.DeviceGetPCIBusId, "cuDeviceGetPCIBusId") & get(d.PointerGetAttributes, "cuPointerGetAttributes") &
               get(d.EventCreate, "cuEventCreate") & get(d.EventRecord, "cuEventRecord") &
               get(d.EventQuery, "cuEventQuery") & get(d.EventElapsedTime, "cuEventElapsedTime") &
               get(d.EventDestroy, "cuEventDestroy_v2") & get(d.DriverGetVersion, "cuDriverGetVersion");
  r->GetDevice = DriverGetDevice;
  r->SetDevice = DriverSetDevice;
  r->GetDeviceCount = DriverGetDeviceCount;
  r->DeviceGetPCIBusId = DriverPCIBusId;
  r->PointerGetAttributes = DriverPointerAttributes;
  r->EventCreateWithFlags = DriverEventCreate;
  r->EventRecord = DriverEventRecord;
  r->EventQuery = DriverEventQuery;
  r->EventElapsedTime = DriverElapsed;
  r->EventDestroy = DriverEventDestroy;
  r->RuntimeGetVersion = NoRuntimeVersion;
  r->DriverGetVersion = DriverVersion;
  if (get(d.DeviceCanAccessPeer, "cuDeviceCanAccessPeer")) r->CanAccessPeer = DriverCanAccessPeer;
  if (get(d.DeviceGetP2PAttribute, "cuDeviceGetP2PAttribute")) r->GetP2PAttribute = DriverP2PAttribute;
  // The 11.x-shaped form (stream, status, id) under the plain name in every driver since 10.1.
  r->StreamGetCaptureInfo = ResolveReal("cuStreamGetCaptureInfo", Node::kDriver);
  r->GraphNodeGetType =
      reinterpret_cast<decltype(r->GraphNodeGetType)>(ResolveReal("cuGraphNodeGetType", Node::kDriver));
  return found;
}

}  // namespace

const CudaRuntime& ResolveRuntime(Node node) {
  KeepErrno keep;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  int i = static_cast<int>(node);
  if (const CudaRuntime* known = g_runtimes[i].load(std::memory_order_acquire)) return *known;
  // Never freed: a retired table may still be read by a timing in flight (it checks `retired`).
  auto* r = new CudaRuntime{};
  r->node = node;
  if (node == Node::kDriver) {
    r->complete = FillDriverTable(r);
    g_runtimes[i].store(r, std::memory_order_release);
    return *r;
  }
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
  get(r->CanAccessPeer, "cudaDeviceCanAccessPeer");
  get(r->GetP2PAttribute, "cudaDeviceGetP2PAttribute");
  r->StreamGetCaptureInfo = ResolveReal("cudaStreamGetCaptureInfo", node);
  get(r->GraphNodeGetType, "cudaGraphNodeGetType");
  g_runtimes[i].store(r, std::memory_order_release);
  return *r;
}

void RetireRuntime(Node node) {
  std::atomic<const CudaRuntime*>& slot = g_runtimes[static_cast<int>(node)];
  const CudaRuntime* rt = slot.load(std::memory_order_acquire);
  if (rt == nullptr) return;
  const_cast<CudaRuntime*>(rt)->retired.store(true, std::memory_order_release);
  slot.store(nullptr, std::memory_order_release);
}

}  // namespace p2ptrace::shim
