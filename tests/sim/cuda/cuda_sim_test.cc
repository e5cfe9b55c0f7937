// The simulated driver (libcuda.so.1) and its one state shared with the simulated runtime. The
// libraries are dlopen'ed from the sim lib dir, as torch opens libcuda.so.1; each suite runs in its
// own process (tests/sim/CMakeLists.txt sets the topology and the environment per suite).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

const std::string kLibDir = P2PSIM_LIB_DIR;

void* Open(const char* name) {
  void* h = dlopen((kLibDir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(h, nullptr) << dlerror();
  return h;
}

template <typename F>
F Sym(void* h, const char* name) {
  void* f = dlsym(h, name);
  EXPECT_NE(f, nullptr) << name;
  return reinterpret_cast<F>(f);
}

// The driver's functions under their exported names.
struct Driver {
  void* h = Open("libcuda.so.1");
#define FN(name, type) decltype(&::type) name = Sym<decltype(&::type)>(h, #name)
  FN(cuInit, cuInit);
  FN(cuDriverGetVersion, cuDriverGetVersion);
  FN(cuDeviceGet, cuDeviceGet);
  FN(cuDeviceGetCount, cuDeviceGetCount);
  FN(cuDeviceGetName, cuDeviceGetName);
  FN(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId);
  FN(cuDeviceGetByPCIBusId, cuDeviceGetByPCIBusId);
  FN(cuDeviceGetAttribute, cuDeviceGetAttribute);
  FN(cuDeviceTotalMem_v2, cuDeviceTotalMem_v2);
  FN(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer);
  FN(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
  FN(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2);
  FN(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState);
  FN(cuCtxGetCurrent, cuCtxGetCurrent);
  FN(cuCtxSetCurrent, cuCtxSetCurrent);
  FN(cuCtxGetDevice, cuCtxGetDevice);
  FN(cuCtxPushCurrent_v2, cuCtxPushCurrent_v2);
  FN(cuCtxPopCurrent_v2, cuCtxPopCurrent_v2);
  FN(cuCtxSynchronize, cuCtxSynchronize);
  FN(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess);
  FN(cuCtxDisablePeerAccess, cuCtxDisablePeerAccess);
  FN(cuMemAlloc_v2, cuMemAlloc_v2);
  FN(cuMemFree_v2, cuMemFree_v2);
  FN(cuMemGetInfo_v2, cuMemGetInfo_v2);
  FN(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2);
  FN(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2);
  FN(cuMemcpyPeer, cuMemcpyPeer);
  FN(cuMemcpyPeerAsync, cuMemcpyPeerAsync);
  FN(cuPointerGetAttribute, cuPointerGetAttribute);
  FN(cuStreamCreate, cuStreamCreate);
  FN(cuStreamSynchronize, cuStreamSynchronize);
  FN(cuStreamDestroy_v2, cuStreamDestroy_v2);
  FN(cuEventCreate, cuEventCreate);
  FN(cuEventRecord, cuEventRecord);
  FN(cuEventSynchronize, cuEventSynchronize);
  FN(cuEventElapsedTime, cuEventElapsedTime);
  FN(cuEventDestroy_v2, cuEventDestroy_v2);
  FN(cuGetErrorName, cuGetErrorName);
  FN(cuGetErrorString, cuGetErrorString);
  FN(cuGetProcAddress_v2, cuGetProcAddress_v2);
  FN(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2);
  FN(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2);
  FN(cuMemsetD8_v2, cuMemsetD8_v2);
  FN(cuMemsetD32Async, cuMemsetD32Async);
  FN(cuPointerGetAttributes, cuPointerGetAttributes);
  FN(cuMemGetAddressRange_v2, cuMemGetAddressRange_v2);
  // Virtual memory management.
  FN(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity);
  FN(cuMemCreate, cuMemCreate);
  FN(cuMemRelease, cuMemRelease);
  FN(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle);
  FN(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle);
  FN(cuMemAddressReserve, cuMemAddressReserve);
  FN(cuMemAddressFree, cuMemAddressFree);
  FN(cuMemMap, cuMemMap);
  FN(cuMemUnmap, cuMemUnmap);
  FN(cuMemSetAccess, cuMemSetAccess);
  FN(cuMemGetAccess, cuMemGetAccess);
  // Stream-ordered pools.
  FN(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool);
  FN(cuDeviceGetMemPool, cuDeviceGetMemPool);
  FN(cuDeviceSetMemPool, cuDeviceSetMemPool);
  FN(cuMemPoolCreate, cuMemPoolCreate);
  FN(cuMemPoolDestroy, cuMemPoolDestroy);
  FN(cuMemAllocAsync, cuMemAllocAsync);
  FN(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync);
  FN(cuMemFreeAsync, cuMemFreeAsync);
  FN(cuMemPoolSetAccess, cuMemPoolSetAccess);
  FN(cuMemPoolGetAccess, cuMemPoolGetAccess);
  FN(cuMemPoolGetAttribute, cuMemPoolGetAttribute);
#undef FN
  CUcontext Primary(int d) {
    CUcontext c = nullptr;
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&c, d), CUDA_SUCCESS);
    return c;
  }
};

struct Runtime {
  explicit Runtime(const char* lib = "libcudart.so.13") : h(Open(lib)) {}
  void* h;
#define FN(name) decltype(&::name) name = Sym<decltype(&::name)>(h, #name)
  FN(cudaGetDeviceCount);
  FN(cudaSetDevice);
  FN(cudaGetDevice);
  FN(cudaMalloc);
  FN(cudaFree);
  FN(cudaMemcpy);
  FN(cudaMemcpyPeer);
  FN(cudaDeviceEnablePeerAccess);
  FN(cudaDeviceGetPCIBusId);
  FN(cudaGetDriverEntryPointByVersion);
  FN(cudaInitDevice);
  FN(cudaDeviceReset);
  FN(cudaMemcpyAsync);
  FN(cudaMemsetAsync);
  FN(cudaPointerGetAttributes);
  FN(cudaStreamCreateWithFlags);
  FN(cudaStreamSynchronize);
  FN(cudaMallocAsync);
  FN(cudaFreeAsync);
  FN(cudaMallocFromPoolAsync);
  FN(cudaDeviceGetDefaultMemPool);
  FN(cudaDeviceGetMemPool);
  FN(cudaDeviceSetMemPool);
  FN(cudaMemPoolCreate);
  FN(cudaMemPoolDestroy);
  FN(cudaMemPoolSetAccess);
  FN(cudaMemPoolGetAccess);
  FN(cudaMemPoolGetAttribute);
#undef FN
};

bool Loaded(const char* soname) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}

// ---------------------------------------------------------------------------------------------
// A driver-only program: no runtime in the process.

TEST(DriverOnly, InitDevicesContextsAndPeerCopies) {
  Driver cu;
  int n = -1, v = 0;
  CUdevice dev = -1;
  EXPECT_EQ(cu.cuDriverGetVersion(&v), CUDA_SUCCESS);  // needs no cuInit
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cu.cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cu.cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cu.cuInit(1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuInit(0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 8);
  EXPECT_EQ(cu.cuDeviceGet(&dev, 8), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cu.cuDeviceGet(&dev, 3), CUDA_SUCCESS);
  EXPECT_EQ(dev, 3);

  char name[256] = {}, bus[32] = {};
  ASSERT_EQ(cu.cuDeviceGetName(name, sizeof name, 3), CUDA_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(cu.cuDeviceGetPCIBusId(bus, sizeof bus, 3), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:5D:00.0");
  ASSERT_EQ(cu.cuDeviceGetByPCIBusId(&dev, "0000:5d:00.0"), CUDA_SUCCESS);
  EXPECT_EQ(dev, 3);
  int major = 0, pci_bus = 0;
  EXPECT_EQ(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 3), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuDeviceGetAttribute(&pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 3), CUDA_SUCCESS);
  EXPECT_EQ(major, 9);
  EXPECT_EQ(pci_bus, 0x5d);
  size_t total = 0;
  EXPECT_EQ(cu.cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 81090ull << 20);  // an H100 80GB HBM3's totalGlobalMem (tests/sim/common/gpu_model)
  int warp = 0, sms = 0;
  EXPECT_EQ(cu.cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  EXPECT_EQ(warp, 32);
  EXPECT_EQ(sms, 132);
  int can = -1;
  EXPECT_EQ(cu.cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  EXPECT_EQ(cu.cuDeviceCanAccessPeer(&can, 0, 4), CUDA_SUCCESS);  // across CPUs
  EXPECT_EQ(can, 0);

  // No context yet: none current, none active; context-bound calls fail.
  CUcontext cur = reinterpret_cast<CUcontext>(1);
  ASSERT_EQ(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, nullptr);
  unsigned flags = 1;
  int active = 1;
  ASSERT_EQ(cu.cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  CUdeviceptr p0 = 0, p1 = 0;
  EXPECT_EQ(cu.cuMemAlloc_v2(&p0, 64), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cu.cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext popped = nullptr;
  EXPECT_EQ(cu.cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);

  CUcontext c0 = cu.Primary(0), c1 = cu.Primary(1), c4 = cu.Primary(4);
  ASSERT_EQ(cu.cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(cu.cuCtxSetCurrent(c1), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemAlloc_v2(&p1, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemAlloc_v2(&p1, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuCtxPushCurrent_v2(c0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  ASSERT_EQ(cu.cuMemAlloc_v2(&p0, 1 << 20), CUDA_SUCCESS);
  size_t free_bytes = 0;
  ASSERT_EQ(cu.cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total - free_bytes, 1u << 20);

  int ordinal = -1;
  unsigned type = 0;
  CUcontext owner = nullptr;
  ASSERT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p1 + 100), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  ASSERT_EQ(cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p1), CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  ASSERT_EQ(cu.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p0), CUDA_SUCCESS);
  EXPECT_EQ(owner, c0);
  int local = 0;
  EXPECT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     reinterpret_cast<CUdeviceptr>(&local)),
            CUDA_ERROR_INVALID_VALUE);

  // Peer access per direction; copies move the bytes.
  EXPECT_EQ(cu.cuCtxEnablePeerAccess(c4, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  EXPECT_EQ(cu.cuCtxEnablePeerAccess(c1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  ASSERT_EQ(cu.cuCtxEnablePeerAccess(c1, 0), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  std::vector<unsigned char> src(1 << 20), back(1 << 20, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  ASSERT_EQ(cu.cuMemcpyHtoD_v2(p0, src.data(), src.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemcpyPeer(p1, c1, p0, c0, src.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), p1, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, src);

  // Timed on a stream: events bracket an async peer copy.
  CUstream s = nullptr;
  CUevent e0 = nullptr, e1 = nullptr;
  ASSERT_EQ(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuEventCreate(&e0, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuEventCreate(&e1, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuEventRecord(e0, s), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemcpyPeerAsync(p1, c1, p0, c0, src.size(), s), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuEventRecord(e1, s), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuEventSynchronize(e1), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cu.cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
  EXPECT_GT(ms, 0.f);  // 1 MiB over 6 NVLinks: microseconds of simulated time
  EXPECT_LT(ms, 1.f);
  EXPECT_EQ(cu.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuEventDestroy_v2(e0), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuEventDestroy_v2(e1), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);

  ASSERT_EQ(cu.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, c0);
  ASSERT_EQ(cu.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cu.cuMemFree_v2(p1), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemFree_v2(p1), CUDA_ERROR_INVALID_VALUE);
  // The last reference to device 4's context: it goes.
  EXPECT_EQ(cu.cuDevicePrimaryCtxRelease_v2(4), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuDevicePrimaryCtxGetState(4, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(cu.cuDevicePrimaryCtxRelease_v2(4), CUDA_ERROR_INVALID_CONTEXT);

  EXPECT_FALSE(Loaded("libcudart.so.13"));
  EXPECT_FALSE(Loaded("libcudart.so.12"));
}

TEST(DriverOnly, ErrorNamesAndStrings) {
  Driver cu;
  const char* s = nullptr;
  ASSERT_EQ(cu.cuGetErrorName(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED");
  ASSERT_EQ(cu.cuGetErrorString(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "peer access is already enabled");
  ASSERT_EQ(cu.cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_NOT_INITIALIZED");
  ASSERT_EQ(cu.cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "invalid argument");
  ASSERT_EQ(cu.cuGetErrorName(CUDA_SUCCESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_SUCCESS");
  EXPECT_EQ(cu.cuGetErrorName(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
}

TEST(DriverOnly, GetProcAddressPicksTheVersionedName) {
  Driver cu;
  auto get = [&](const char* name, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
    void* fn = nullptr;
    CUresult r = cu.cuGetProcAddress_v2(name, &fn, version, flags, status);
    return r == CUDA_SUCCESS ? fn : nullptr;
  };
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  EXPECT_EQ(get("cuMemAlloc", 12000, 0, &status), dlsym(cu.h, "cuMemAlloc_v2"));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(get("cuMemAlloc", 3000, 0, &status), dlsym(cu.h, "cuMemAlloc"));
  EXPECT_EQ(get("cuDevicePrimaryCtxRelease", 12000, 0, &status), dlsym(cu.h, "cuDevicePrimaryCtxRelease_v2"));
  EXPECT_EQ(get("cuDeviceGetUuid", 12000, 0, &status), dlsym(cu.h, "cuDeviceGetUuid_v2"));
  EXPECT_EQ(get("cuCtxSynchronize", 12080, 0, &status), dlsym(cu.h, "cuCtxSynchronize"));
  EXPECT_EQ(get("cuCtxSynchronize", 13000, 0, &status), dlsym(cu.h, "cuCtxSynchronize_v2"));
  EXPECT_EQ(get("cuDeviceGet", 12000, 0, &status), dlsym(cu.h, "cuDeviceGet"));
  EXPECT_EQ(get("cuGetProcAddress", 12000, 0, &status), dlsym(cu.h, "cuGetProcAddress_v2"));
  // The per-thread default stream flavour where there is one.
  EXPECT_EQ(get("cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status),
            dlsym(cu.h, "cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(get("cuMemcpyAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status),
            dlsym(cu.h, "cuMemcpyAsync_ptsz"));
  EXPECT_EQ(get("cuDeviceGet", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status),
            dlsym(cu.h, "cuDeviceGet"));
  EXPECT_EQ(get("cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status), dlsym(cu.h, "cuMemcpyHtoD_v2"));
  // Every function on torch's driver lists (c10/cuda/driver_api.h), at the version torch asks for:
  // present (simulated or a "not simulated" stub), so torch's loader succeeds.
  struct { const char* name; int version; } torch[] = {
      {"cuDeviceGet", 12000}, {"cuDeviceGetAttribute", 12000}, {"cuMemGetAddressRange", 12000},
      {"cuMemAddressReserve", 12000}, {"cuMemRelease", 12000}, {"cuMemMap", 12000}, {"cuMemAddressFree", 12000},
      {"cuMemSetAccess", 12000}, {"cuMemUnmap", 12000}, {"cuMemCreate", 12000},
      {"cuMemGetAllocationGranularity", 12000}, {"cuMemExportToShareableHandle", 12000},
      {"cuMemImportFromShareableHandle", 12000}, {"cuMemRetainAllocationHandle", 12000},
      {"cuMemGetAllocationPropertiesFromHandle", 12000}, {"cuMemsetD32Async", 12000},
      {"cuStreamWriteValue32", 12000}, {"cuGetErrorString", 12000}, {"cuMulticastAddDevice", 12030},
      {"cuMulticastBindMem", 12030}, {"cuMulticastCreate", 12030}, {"cuMulticastUnbind", 12030},
      {"cuCtxFromGreenCtx", 12080}, {"cuCtxGetCurrent", 12080}, {"cuCtxPopCurrent", 12080},
      {"cuCtxPushCurrent", 12080}, {"cuCtxSetCurrent", 12080}, {"cuGreenCtxCreate", 12080},
      {"cuGreenCtxDestroy", 12080}, {"cuGreenCtxStreamCreate", 12080}, {"cuDevSmResourceSplitByCount", 12080},
      {"cuDeviceGetDevResource", 12080}, {"cuDevResourceGenerateDesc", 12080}, {"cuLogsRegisterCallback", 12090},
      {"cuLogsUnregisterCallback", 12090}};
  for (auto& t : torch) EXPECT_NE(get(t.name, t.version, 0, &status), nullptr) << t.name;
  // Older torch dlsym's these by name.
  for (const char* name : {"cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent",
                           "cuCtxSetCurrent", "cuPointerGetAttribute", "cuDeviceGetAttribute", "cuLaunchKernel",
                           "cuModuleLoadData", "cuModuleGetFunction", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                           "cuLinkCreate", "cuFuncSetAttribute", "cuTensorMapEncodeTiled"})
    EXPECT_NE(dlsym(cu.h, name), nullptr) << name;
  EXPECT_EQ(get("cuCtxFromGreenCtx", 12000, 0, &status), nullptr);  // newer than asked for
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // Unknown names and too old versions.
  void* fn = reinterpret_cast<void*>(1);
  EXPECT_EQ(cu.cuGetProcAddress_v2("cuNoSuchFunction", &fn, 12000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(cu.cuGetProcAddress_v2("cuGetProcAddress", &fn, 11000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(cu.cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 4, &status), CUDA_ERROR_INVALID_VALUE);
}

// A function on torch's list that the sim does not model: a clean 801.
TEST(DriverOnly, NotSimulatedIsNotSupported) {
  Driver cu;
  auto create = Sym<decltype(&cuMulticastCreate)>(cu.h, "cuMulticastCreate");
  CUmemGenericAllocationHandle handle = 0;
  CUmulticastObjectProp prop{};
  prop.numDevices = 2;
  prop.size = 2 << 20;
  EXPECT_EQ(create(&handle, &prop), CUDA_ERROR_NOT_SUPPORTED);
}

// ---------------------------------------------------------------------------------------------
// Driver and runtime in one process share one state.

TEST(Shared, MemoryContextsAndPeerAccess) {
  Runtime rt;  // first, so the runtime (not cuInit) initialises the driver
  Driver cu;
  int n = 0;
  ASSERT_EQ(rt.cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 8);

  // cudaMalloc'd memory is known to the driver, with its device.
  ASSERT_EQ(rt.cudaSetDevice(2), cudaSuccess);
  void* p2 = nullptr;
  ASSERT_EQ(rt.cudaMalloc(&p2, 4096), cudaSuccess);
  int ordinal = -1;
  ASSERT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(p2)),
            CUDA_SUCCESS);  // no cuInit: the runtime initialised the driver
  EXPECT_EQ(ordinal, 2);

  // The current device is the current context's device, both ways.
  ASSERT_EQ(rt.cudaSetDevice(3), cudaSuccess);
  CUdevice dev = -1;
  ASSERT_EQ(cu.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 3);
  unsigned flags = 0;
  int active = 0;
  ASSERT_EQ(cu.cuDevicePrimaryCtxGetState(3, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);  // cudaSetDevice brought up the primary context
  ASSERT_EQ(cu.cuDevicePrimaryCtxGetState(5, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  ASSERT_EQ(rt.cudaInitDevice(6, 0, 0), cudaSuccess);  // brings device 6's context up, not current
  ASSERT_EQ(cu.cuDevicePrimaryCtxGetState(6, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(cu.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 3);
  CUcontext c5 = cu.Primary(5), c3 = nullptr, cur = nullptr;
  ASSERT_EQ(cu.cuCtxGetCurrent(&c3), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuCtxSetCurrent(c5), CUDA_SUCCESS);
  int d = -1;
  ASSERT_EQ(rt.cudaGetDevice(&d), cudaSuccess);
  EXPECT_EQ(d, 5);
  ASSERT_EQ(cu.cuCtxSetCurrent(c3), CUDA_SUCCESS);
  ASSERT_EQ(rt.cudaGetDevice(&d), cudaSuccess);
  EXPECT_EQ(d, 3);
  ASSERT_EQ(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, c3);

  // Peer access enabled through the driver is the runtime's too; copies see the driver's memory.
  CUcontext c0 = cu.Primary(0), c1 = cu.Primary(1);
  ASSERT_EQ(cu.cuCtxSetCurrent(c0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuCtxEnablePeerAccess(c1, 0), CUDA_SUCCESS);
  EXPECT_EQ(rt.cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);  // current device 0
  ASSERT_EQ(rt.cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(rt.cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
  EXPECT_EQ(cu.cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);  // current context 1
  CUdeviceptr d0 = 0;
  ASSERT_EQ(cu.cuCtxSetCurrent(c0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemAlloc_v2(&d0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(rt.cudaSetDevice(1), cudaSuccess);
  void* d1 = nullptr;
  ASSERT_EQ(rt.cudaMalloc(&d1, 4096), cudaSuccess);
  std::vector<unsigned char> src(4096), back(4096, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(255 - i % 251);
  ASSERT_EQ(rt.cudaMemcpy(reinterpret_cast<void*>(d0), src.data(), src.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(rt.cudaMemcpyPeer(d1, 1, reinterpret_cast<void*>(d0), 0, src.size()), cudaSuccess);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), reinterpret_cast<CUdeviceptr>(d1), back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, src);
  EXPECT_EQ(cu.cuMemFree_v2(reinterpret_cast<CUdeviceptr>(d1)), CUDA_SUCCESS);  // freed through the other API
  EXPECT_EQ(rt.cudaFree(d1), cudaErrorInvalidValue);
  EXPECT_EQ(rt.cudaFree(reinterpret_cast<void*>(d0)), cudaSuccess);

  // cudaDeviceReset destroys the primary context the driver sees; the runtime's next use revives it.
  ASSERT_EQ(rt.cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(rt.cudaDeviceReset(), cudaSuccess);
  ASSERT_EQ(cu.cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(cu.cuMemAlloc_v2(&d0, 64), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(rt.cudaMalloc(&d1, 64), cudaSuccess);
  ASSERT_EQ(cu.cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(d1)),
            CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
}

TEST(Shared, DriverEntryPointsAreTheDriversFunctions) {
  Runtime rt;
  Driver cu;
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  ASSERT_EQ(rt.cudaGetDriverEntryPointByVersion("cuDeviceGet", &fn, 12000, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSuccess);
  EXPECT_EQ(fn, dlsym(cu.h, "cuDeviceGet"));
  CUdevice dev = -1;
  ASSERT_EQ(reinterpret_cast<decltype(&cuDeviceGet)>(fn)(&dev, 7), CUDA_SUCCESS);  // the runtime initialised it
  EXPECT_EQ(dev, 7);
  ASSERT_EQ(rt.cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(fn, dlsym(cu.h, "cuMemAlloc_v2"));
  EXPECT_EQ(rt.cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &status),
            cudaErrorSymbolNotFound);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
}

// The current context is per thread, whichever API set it.
TEST(Shared, ThreadsEachHaveTheirOwnCurrentDevice) {
  Runtime rt;
  Driver cu;
  std::vector<std::thread> threads;
  std::vector<int> seen(8, -1), rt_seen(8, -1);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      CUdevice dev = -1;
      int d = -1;
      if (i % 2 == 0) {
        rt.cudaSetDevice(i);
      } else {
        cu.cuCtxSetCurrent(cu.Primary(i));
      }
      void* p = nullptr;
      rt.cudaMalloc(&p, 64);
      int ordinal = -1;
      if (cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(p)) ==
              CUDA_SUCCESS &&
          cu.cuCtxGetDevice(&dev) == CUDA_SUCCESS && ordinal == dev)
        seen[i] = dev;
      if (rt.cudaGetDevice(&d) == cudaSuccess) rt_seen[i] = d;
      rt.cudaFree(p);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(seen[i], i);
    EXPECT_EQ(rt_seen[i], i);
  }
}

// A forked child keeps the state (the driver's fork handlers hold its lock across fork) and the
// forking thread's context.
TEST(Shared, ForkedChildKeepsTheState) {
  Runtime rt;
  Driver cu;
  ASSERT_EQ(rt.cudaSetDevice(4), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(rt.cudaMalloc(&p, 4096), cudaSuccess);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    CUdevice dev = -1;
    int ordinal = -1;
    CUdeviceptr q = 0;
    bool ok = cu.cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == 4 &&
              cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS &&
              ordinal == 4 && cu.cuMemAlloc_v2(&q, 64) == CUDA_SUCCESS && rt.cudaFree(reinterpret_cast<void*>(q)) == cudaSuccess;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// exit() destroys thread_local objects before atexit handlers run; CUDA called from one (torch's
// teardown does) must still find the thread's context.
Runtime* g_rt = nullptr;
Driver* g_cu = nullptr;
TEST(Shared, CallsFromAtexitHandlers) {
  Runtime rt;
  Driver cu;
  ASSERT_EQ(rt.cudaSetDevice(6), cudaSuccess);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    g_rt = &rt;
    g_cu = &cu;
    std::atexit([] {
      void* p = nullptr;
      CUdevice dev = -1;
      bool ok = g_rt->cudaMalloc(&p, 64) == cudaSuccess && g_cu->cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == 6 &&
                g_rt->cudaFree(p) == cudaSuccess;
      _exit(ok ? 0 : 1);
    });
    std::exit(3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// CUDA_VISIBLE_DEVICES=5,2: both APIs see the same two devices, renumbered.
TEST(Visible, RenumberedAlike) {
  Driver cu;
  Runtime rt;
  ASSERT_EQ(cu.cuInit(0), CUDA_SUCCESS);
  int n = 0;
  ASSERT_EQ(cu.cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 2);
  ASSERT_EQ(rt.cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 2);
  char bus[32] = {}, rt_bus[32] = {};
  ASSERT_EQ(cu.cuDeviceGetPCIBusId(bus, sizeof bus, 0), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:AB:00.0");  // GPU 5
  ASSERT_EQ(rt.cudaDeviceGetPCIBusId(rt_bus, sizeof rt_bus, 0), cudaSuccess);
  EXPECT_STREQ(rt_bus, bus);
  ASSERT_EQ(cu.cuDeviceGetPCIBusId(bus, sizeof bus, 1), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:3A:00.0");  // GPU 2
  CUdevice dev = -1;
  EXPECT_EQ(cu.cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  CUcontext c1 = cu.Primary(1);
  ASSERT_EQ(cu.cuCtxSetCurrent(c1), CUDA_SUCCESS);
  int d = -1;
  ASSERT_EQ(rt.cudaGetDevice(&d), cudaSuccess);
  EXPECT_EQ(d, 1);
}

// ---------------------------------------------------------------------------------------------
// Virtual memory management (driver only, as JAX/XLA and torch's expandable segments use it). The
// demo topology: GPUs 0-3 and 4-7 are NVLink cliques (6 links each pair), 0-3 cannot peer with 4-7.
// These tests use GPUs 2, 3 (and 4 as the incapable peer) so the peer access other suites enable
// (0 <-> 1) never changes their routes when everything runs in one process.

constexpr size_t kMiB = 1u << 20, kGran = 2 * kMiB;
constexpr double kNvlinkGbps = 6 * 20.5, kStagedGbps = 20;
double Ms(size_t bytes, double gbps) { return static_cast<double>(bytes) / (gbps * 1e9) * 1e3; }

CUmemAllocationProp DeviceProp(int dev, unsigned types = CU_MEM_HANDLE_TYPE_NONE) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(types);
  return p;
}
CUmemAccessDesc Access(int dev, CUmemAccess_flags flags) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = dev;
  d.flags = flags;
  return d;
}

// Reserved, created on `dev` and mapped as XLA does it; read-write for its own device unless told not to.
struct VmmBuffer {
  CUdeviceptr ptr = 0;
  CUmemGenericAllocationHandle handle = 0;
  size_t size = 0;
};
VmmBuffer MapNew(Driver& cu, int dev, size_t size, bool own_access = true) {
  VmmBuffer b;
  b.size = size;
  CUmemAllocationProp prop = DeviceProp(dev);
  EXPECT_EQ(cu.cuMemAddressReserve(&b.ptr, size, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemCreate(&b.handle, size, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemMap(b.ptr, size, 0, b.handle, 0), CUDA_SUCCESS);
  if (own_access) {
    CUmemAccessDesc d = Access(dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(cu.cuMemSetAccess(b.ptr, size, &d, 1), CUDA_SUCCESS);
  }
  return b;
}
void FreeBuffer(Driver& cu, const VmmBuffer& b) {  // XLA's order: unmap, release, free the range
  EXPECT_EQ(cu.cuMemUnmap(b.ptr, b.size), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemRelease(b.handle), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemAddressFree(b.ptr, b.size), CUDA_SUCCESS);
}

// The simulated time one operation takes on a fresh stream of the current context (events around
// it); the operation's own result in *result.
float Timed(Driver& cu, const std::function<CUresult(CUstream)>& op, CUresult* result) {
  CUstream s = nullptr;
  CUevent e0 = nullptr, e1 = nullptr;
  EXPECT_EQ(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuEventCreate(&e0, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuEventCreate(&e1, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuEventRecord(e0, s), CUDA_SUCCESS);
  *result = op(s);
  EXPECT_EQ(cu.cuEventRecord(e1, s), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuEventSynchronize(e1), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(cu.cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
  cu.cuEventDestroy_v2(e0);
  cu.cuEventDestroy_v2(e1);
  cu.cuStreamDestroy_v2(s);
  return ms;
}

size_t UsedOn(Driver& cu, CUcontext ctx) {
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cu.cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  EXPECT_EQ(cu.cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  return total - free_bytes;
}

// No context needed; granularity 2 MiB; what cuMemCreate refuses, and how.
TEST(Vmm, GranularityCreateAndProperties) {
  Driver cu;
  ASSERT_EQ(cu.cuInit(0), CUDA_SUCCESS);
  CUmemAllocationProp prop = DeviceProp(2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  prop.allocFlags.gpuDirectRDMACapable = 1;
  size_t g = 0;
  ASSERT_EQ(cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(g, kGran);
  g = 0;
  ASSERT_EQ(cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(g, kGran);
  EXPECT_EQ(cu.cuMemGetAllocationGranularity(&g, &prop, static_cast<CUmemAllocationGranularity_flags>(7)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemGetAllocationGranularity(&g, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);

  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cu.cuMemCreate(&h, kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);  // not a multiple of the granularity
  EXPECT_EQ(cu.cuMemCreate(&h, 3 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, &prop, 1), CUDA_ERROR_INVALID_VALUE);  // flags
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemCreate(&h, 1ull << 40, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);  // more than an H100 has
  CUmemAllocationProp bad = DeviceProp(8);
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
  bad = DeviceProp(-1);
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
  bad = DeviceProp(2);
  bad.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, &bad, 0), CUDA_ERROR_INVALID_VALUE);
  bad = DeviceProp(2);
  bad.location.type = CU_MEM_LOCATION_TYPE_INVALID;
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, &bad, 0), CUDA_ERROR_INVALID_VALUE);
  bad = DeviceProp(2, CU_MEM_HANDLE_TYPE_WIN32);
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, &bad, 0), CUDA_ERROR_INVALID_VALUE);
  // Fabric handles need an IMEX channel, which the simulated node lacks (as a box without one answers).
  bad = DeviceProp(2, CU_MEM_HANDLE_TYPE_FABRIC);
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, &bad, 0), CUDA_ERROR_NOT_PERMITTED);
  bad = DeviceProp(2, CU_MEM_HANDLE_TYPE_FABRIC | CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(cu.cuMemCreate(&h, kGran, &bad, 0), CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(cu.cuMemGetAllocationGranularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);

  // Physical memory counts against the device as soon as it is created, mapped or not.
  CUcontext c2 = cu.Primary(2);
  size_t before = UsedOn(cu, c2);
  h = 0;
  ASSERT_EQ(cu.cuMemCreate(&h, 2 * kGran, &prop, 0), CUDA_SUCCESS);
  EXPECT_NE(h, 0u);
  EXPECT_EQ(UsedOn(cu, c2), before + 2 * kGran);
  CUmemAllocationProp got{};
  ASSERT_EQ(cu.cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  EXPECT_EQ(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(got.location.id, 2);
  EXPECT_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(got.allocFlags.gpuDirectRDMACapable, 1);
  ASSERT_EQ(cu.cuMemRelease(h), CUDA_SUCCESS);  // unmapped: gone at once
  EXPECT_EQ(UsedOn(cu, c2), before);
  EXPECT_EQ(cu.cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // unknown now
  EXPECT_EQ(cu.cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemRelease(0), CUDA_ERROR_INVALID_VALUE);
}

TEST(Vmm, AddressReserveAndFree) {
  Driver cu;
  ASSERT_EQ(cu.cuInit(0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(cu.cuMemAddressReserve(&p, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemAddressReserve(&p, kGran, 3 * kMiB, 0, 0), CUDA_ERROR_INVALID_VALUE);  // not a power of two
  EXPECT_EQ(cu.cuMemAddressReserve(&p, kGran, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemAddressReserve(&p, 100, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemAddressReserve(&p, 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);  // whole granules only
  EXPECT_EQ(cu.cuMemAddressReserve(&p, kGran + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemAddressReserve(nullptr, kGran, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  // Whole 2 MiB granules, aligned as asked (at least to the granule).
  ASSERT_EQ(cu.cuMemAddressReserve(&p, 4 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(p % kGran, 0u);
  CUdeviceptr q = 0;
  ASSERT_EQ(cu.cuMemAddressReserve(&q, kGran, 64 * kMiB, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(q % (64 * kMiB), 0u);
  // Nothing the driver knows lives in a reservation: no pointer attributes until something is mapped.
  int ordinal = -1;
  EXPECT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), CUDA_ERROR_INVALID_VALUE);
  // cudaMalloc-style memory never lands in a reservation (the devices' arenas are elsewhere).
  CUcontext c2 = cu.Primary(2);
  ASSERT_EQ(cu.cuCtxSetCurrent(c2), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(cu.cuMemAlloc_v2(&d, kGran), CUDA_SUCCESS);
  EXPECT_TRUE(d + kGran <= p || d >= p + 4 * kMiB);
  EXPECT_EQ(cu.cuMemFree_v2(d), CUDA_SUCCESS);
  // Freeing needs the range as reserved.
  EXPECT_EQ(cu.cuMemAddressFree(p, kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemAddressFree(p + kGran, 2 * kMiB), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemAddressFree(p, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemAddressFree(p, 4 * kMiB), CUDA_ERROR_INVALID_VALUE);
  // A free, aligned hint is taken.
  CUdeviceptr again = 0;
  ASSERT_EQ(cu.cuMemAddressReserve(&again, 4 * kMiB, 0, p, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, p);
  EXPECT_EQ(cu.cuMemAddressFree(again, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemAddressFree(q, kGran), CUDA_SUCCESS);
}

// Create, reserve, map, grant, write on one device, copy to another's VMM memory, read back; the
// mapping is device memory of its handle's device to the rest of the driver.
TEST(Vmm, LifecycleDataAndPointerAttributes) {
  Driver cu;
  ASSERT_EQ(cu.cuInit(0), CUDA_SUCCESS);
  CUcontext c2 = cu.Primary(2), c3 = cu.Primary(3);
  ASSERT_EQ(cu.cuCtxSetCurrent(c2), CUDA_SUCCESS);
  CUmemAllocationProp prop = DeviceProp(2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cu.cuMemAddressReserve(&base, 3 * kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemCreate(&h, 2 * kGran, &prop, 0), CUDA_SUCCESS);
  // CUDA 13's codes: 1 for flags, an unknown handle, a range outside the reservation; 801 for what
  // it does not support (an offset, part of a handle, a misaligned address, mapping over a mapping).
  EXPECT_EQ(cu.cuMemMap(base + kMiB, 2 * kGran, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);  // misaligned
  EXPECT_EQ(cu.cuMemMap(base, 3 * kGran, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);         // beyond the handle
  EXPECT_EQ(cu.cuMemMap(base, kGran, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);             // part of the handle
  EXPECT_EQ(cu.cuMemMap(base, kGran, kGran, h, 0), CUDA_ERROR_NOT_SUPPORTED);         // offset (must be 0)
  EXPECT_EQ(cu.cuMemMap(base + 2 * kGran, 2 * kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // past the reservation
  EXPECT_EQ(cu.cuMemMap(base, 2 * kGran, 0, h + 1000, 0), CUDA_ERROR_INVALID_VALUE);  // unknown handle
  EXPECT_EQ(cu.cuMemMap(base, 2 * kGran, 0, h, 1), CUDA_ERROR_INVALID_VALUE);         // flags
  ASSERT_EQ(cu.cuMemMap(base, 2 * kGran, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemMap(base + kGran, 2 * kGran, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED); // already mapped

  // Mapped: device memory of GPU 2 (ordinal, type; no context, the reservation as its range, the
  // mapping as its mapping, as CUDA 13 answers), not legacy-IPC capable.
  int ordinal = -1;
  unsigned type = 0, ipc = 1, mapped = 0;
  CUcontext owner = nullptr;
  CUdeviceptr start = 0;
  size_t range = 0;
  unsigned long long types = 0;
  CUmemoryPool pool = reinterpret_cast<CUmemoryPool>(1);
  ASSERT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base + 12345), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 2);
  ASSERT_EQ(cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base), CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  owner = c2;
  ASSERT_EQ(cu.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, base), CUDA_SUCCESS);
  EXPECT_EQ(owner, nullptr);
  ASSERT_EQ(cu.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, base + kGran + 7), CUDA_SUCCESS);
  EXPECT_EQ(start, base);
  ASSERT_EQ(cu.cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, base), CUDA_SUCCESS);
  EXPECT_EQ(range, 3 * kGran);
  ASSERT_EQ(cu.cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, base + 1), CUDA_SUCCESS);
  EXPECT_EQ(range, 2 * kGran);
  ASSERT_EQ(cu.cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, base), CUDA_SUCCESS);
  EXPECT_EQ(ipc, 0u);
  ASSERT_EQ(cu.cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, base), CUDA_SUCCESS);
  EXPECT_EQ(mapped, 1u);
  ASSERT_EQ(cu.cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, base), CUDA_SUCCESS);
  EXPECT_EQ(types, static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  ASSERT_EQ(cu.cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, base), CUDA_SUCCESS);
  EXPECT_EQ(pool, nullptr);
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
  int ord2 = -1;
  unsigned type2 = 0;
  void* data[] = {&ord2, &type2};
  ASSERT_EQ(cu.cuPointerGetAttributes(2, attrs, data, base + 5), CUDA_SUCCESS);
  EXPECT_EQ(ord2, 2);
  EXPECT_EQ(type2, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  CUdeviceptr rbase = 0;
  size_t rsize = 0;
  ASSERT_EQ(cu.cuMemGetAddressRange_v2(&rbase, &rsize, base + kGran), CUDA_SUCCESS);
  EXPECT_EQ(rbase, base);
  EXPECT_EQ(rsize, 2 * kGran);
  EXPECT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base + 2 * kGran),
            CUDA_ERROR_INVALID_VALUE);  // the reservation's unmapped rest
  std::vector<unsigned char> host(64);
  EXPECT_EQ(cu.cuMemcpyDtoH_v2(host.data(), base + 2 * kGran, host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemcpyHtoD_v2(base + 2 * kGran, host.data(), host.size()), CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle again = 0;
  ASSERT_EQ(cu.cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(base + kGran + 99)), CUDA_SUCCESS);
  EXPECT_EQ(again, h);
  EXPECT_EQ(cu.cuMemRelease(again), CUDA_SUCCESS);  // the retained reference
  EXPECT_EQ(cu.cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(base + 2 * kGran)),
            CUDA_ERROR_INVALID_VALUE);

  // cuMemMap alone gives no device access: copies and memsets touching it fail.
  std::vector<unsigned char> src(kGran), back(kGran, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 13 + 5);
  unsigned long long flags = 99;
  CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, 2};
  ASSERT_EQ(cu.cuMemGetAccess(&flags, &loc, base), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE));
  EXPECT_EQ(cu.cuMemcpyHtoD_v2(base, src.data(), src.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemcpyDtoH_v2(back.data(), base, back.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemsetD8_v2(base, 1, 64), CUDA_ERROR_INVALID_VALUE);
  // Read-only for its own device: reads work, writes do not.
  CUmemAccessDesc ro = Access(2, CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_EQ(cu.cuMemSetAccess(base, 2 * kGran, &ro, 1), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemcpyDtoH_v2(back.data(), base, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemcpyHtoD_v2(base, src.data(), src.size()), CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc rw = Access(2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(cu.cuMemSetAccess(base, 2 * kGran, &rw, 1), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemGetAccess(&flags, &loc, base + kGran), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  ASSERT_EQ(cu.cuMemcpyHtoD_v2(base + kGran, src.data(), src.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemsetD8_v2(base, 0x5a, kGran), CUDA_SUCCESS);
  // 32-bit memsets write the pattern, on aligned addresses only.
  CUstream s2 = nullptr;
  ASSERT_EQ(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemsetD32Async(base + 4096, 0x11223344u, 4, s2), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemsetD32Async(base + 4098, 0, 4, s2), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuStreamSynchronize(s2), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuStreamDestroy_v2(s2), CUDA_SUCCESS);
  unsigned words[5] = {};
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(words, base + 4096, sizeof words), CUDA_SUCCESS);
  EXPECT_EQ(words[0], 0x11223344u);
  EXPECT_EQ(words[3], 0x11223344u);
  EXPECT_EQ(words[4], 0x5a5a5a5au);

  // To GPU 3's VMM memory (granted on its own device only) and back; the bytes arrive.
  VmmBuffer b3 = MapNew(cu, 3, kGran);
  ASSERT_EQ(cu.cuMemcpyPeer(b3.ptr, c3, base + kGran, c2, kGran), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), b3.ptr, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, src);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), base, 4096), CUDA_SUCCESS);
  EXPECT_EQ(back[0], 0x5a);
  EXPECT_EQ(back[4095], 0x5a);
  ASSERT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, b3.ptr), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 3);

  // A partial unmap is refused; the whole mapping goes; the range stays reserved (mappable again).
  EXPECT_EQ(cu.cuMemUnmap(base, kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemUnmap(base, 3 * kGran), CUDA_ERROR_INVALID_VALUE);  // runs into the unmapped rest
  EXPECT_EQ(cu.cuMemUnmap(base + 2 * kGran, kGran), CUDA_SUCCESS);      // nothing mapped there: a no-op
  EXPECT_EQ(cu.cuMemAddressFree(base, 3 * kGran), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(cu.cuMemUnmap(base, 2 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemMap(base + kGran, 2 * kGran, 0, h, 0), CUDA_SUCCESS);  // new mappings start without access
  ASSERT_EQ(cu.cuMemGetAccess(&flags, &loc, base + kGran), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE));
  ASSERT_EQ(cu.cuMemUnmap(base + kGran, 2 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemAddressFree(base, 3 * kGran), CUDA_SUCCESS);
  FreeBuffer(cu, b3);
}

// cuMemRelease while mapped: the memory (and its bytes) stay until the last mapping is unmapped, as
// CUDA's reference counting has it; until then the handle can still be queried and mapped (as CUDA
// 13 lets it).
TEST(Vmm, ReleaseWhileMappedKeepsTheMemoryUntilTheLastUnmap) {
  Driver cu;
  ASSERT_EQ(cu.cuInit(0), CUDA_SUCCESS);
  CUcontext c3 = cu.Primary(3);
  ASSERT_EQ(cu.cuCtxSetCurrent(c3), CUDA_SUCCESS);
  size_t before = UsedOn(cu, c3);
  CUmemAllocationProp prop = DeviceProp(3);
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(cu.cuMemCreate(&h, kGran, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemAddressReserve(&a, kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemAddressReserve(&b, kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemAddressReserve(&c, kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemMap(a, kGran, 0, h, 0), CUDA_SUCCESS);  // one handle, two mappings
  ASSERT_EQ(cu.cuMemMap(b, kGran, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc rw = Access(3, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(cu.cuMemSetAccess(a, kGran, &rw, 1), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemSetAccess(b, kGran, &rw, 1), CUDA_SUCCESS);
  std::vector<unsigned char> src(4096, 0xc3), back(4096, 0);
  ASSERT_EQ(cu.cuMemcpyHtoD_v2(a, src.data(), src.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), b, back.size()), CUDA_SUCCESS);  // the same memory
  EXPECT_EQ(back, src);
  EXPECT_EQ(UsedOn(cu, c3), before + kGran);

  ASSERT_EQ(cu.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(UsedOn(cu, c3), before + kGran);  // still mapped: still there
  CUmemAllocationProp got{};
  EXPECT_EQ(cu.cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  EXPECT_EQ(got.location.id, 3);
  EXPECT_EQ(cu.cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // no reference left to drop
  ASSERT_EQ(cu.cuMemUnmap(a, kGran), CUDA_SUCCESS);
  EXPECT_EQ(UsedOn(cu, c3), before + kGran);  // b still maps it
  std::fill(back.begin(), back.end(), 0);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), b, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, src);
  ASSERT_EQ(cu.cuMemMap(c, kGran, 0, h, 0), CUDA_SUCCESS);  // alive, so mappable
  ASSERT_EQ(cu.cuMemUnmap(b, kGran), CUDA_SUCCESS);
  EXPECT_EQ(UsedOn(cu, c3), before + kGran);
  EXPECT_EQ(cu.cuMemAddressFree(c, kGran), CUDA_ERROR_INVALID_VALUE);  // a mapping is left in it
  ASSERT_EQ(cu.cuMemUnmap(c, kGran), CUDA_SUCCESS);  // the last mapping: the memory goes
  EXPECT_EQ(UsedOn(cu, c3), before);
  EXPECT_EQ(cu.cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemMap(a, kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);

  // A reference retained through an address keeps it alive past the creator's release and its unmap.
  CUmemGenericAllocationHandle h2 = 0, r = 0;
  ASSERT_EQ(cu.cuMemCreate(&h2, kGran, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemMap(a, kGran, 0, h2, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemRetainAllocationHandle(&r, reinterpret_cast<void*>(a + 100)), CUDA_SUCCESS);
  EXPECT_EQ(r, h2);
  ASSERT_EQ(cu.cuMemRelease(h2), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemUnmap(a, kGran), CUDA_SUCCESS);
  EXPECT_EQ(UsedOn(cu, c3), before + kGran);
  ASSERT_EQ(cu.cuMemRelease(r), CUDA_SUCCESS);
  EXPECT_EQ(UsedOn(cu, c3), before);
  EXPECT_EQ(cu.cuMemRetainAllocationHandle(&r, reinterpret_cast<void*>(a)), CUDA_ERROR_INVALID_VALUE);
  for (CUdeviceptr p : {a, b, c}) EXPECT_EQ(cu.cuMemAddressFree(p, kGran), CUDA_SUCCESS);
}

TEST(Vmm, SetAccessRules) {
  Driver cu;
  ASSERT_EQ(cu.cuInit(0), CUDA_SUCCESS);
  // Two handles of GPU 2 side by side in one reservation, and a hole after them.
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  CUmemAllocationProp prop = DeviceProp(2);
  ASSERT_EQ(cu.cuMemAddressReserve(&base, 3 * kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemCreate(&h1, kGran, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemCreate(&h2, kGran, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemMap(base, kGran, 0, h1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemMap(base + kGran, kGran, 0, h2, 0), CUDA_SUCCESS);

  CUmemAccessDesc own = Access(2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), peer = Access(3, CU_MEM_ACCESS_FLAGS_PROT_READ);
  CUmemAccessDesc both[] = {own, peer};
  EXPECT_EQ(cu.cuMemSetAccess(base, 3 * kGran, both, 2), CUDA_ERROR_INVALID_VALUE);  // the hole
  EXPECT_EQ(cu.cuMemSetAccess(base, kMiB, both, 2), CUDA_ERROR_INVALID_VALUE);       // part of a mapping
  EXPECT_EQ(cu.cuMemSetAccess(base + kGran * 3, kGran, both, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemSetAccess(base, 2 * kGran, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  // GPU 4 is across the CPUs: not peer capable with 2. Nothing of a refused list applies.
  CUmemAccessDesc with_incapable[] = {own, Access(4, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
  EXPECT_EQ(cu.cuMemSetAccess(base, 2 * kGran, with_incapable, 2), CUDA_ERROR_INVALID_DEVICE);
  unsigned long long flags = 99;
  CUmemLocation loc2{CU_MEM_LOCATION_TYPE_DEVICE, 2}, loc3{CU_MEM_LOCATION_TYPE_DEVICE, 3},
      loc4{CU_MEM_LOCATION_TYPE_DEVICE, 4};
  ASSERT_EQ(cu.cuMemGetAccess(&flags, &loc2, base), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  CUmemAccessDesc none4 = Access(4, CU_MEM_ACCESS_FLAGS_PROT_NONE);  // "none" needs no capability
  EXPECT_EQ(cu.cuMemSetAccess(base, 2 * kGran, &none4, 1), CUDA_SUCCESS);
  CUmemAccessDesc bad = Access(9, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(cu.cuMemSetAccess(base, 2 * kGran, &bad, 1), CUDA_ERROR_INVALID_VALUE);  // CUDA 13: 1, not 101
  bad = Access(3, static_cast<CUmemAccess_flags>(2));
  EXPECT_EQ(cu.cuMemSetAccess(base, 2 * kGran, &bad, 1), CUDA_ERROR_INVALID_VALUE);
  bad = Access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  bad.location.type = CU_MEM_LOCATION_TYPE_HOST;  // device memory for the host: not supported
  EXPECT_EQ(cu.cuMemSetAccess(base, 2 * kGran, &bad, 1), CUDA_ERROR_NOT_SUPPORTED);
  // Both mappings in one call (torch sets access over a run of segments).
  ASSERT_EQ(cu.cuMemSetAccess(base, 2 * kGran, both, 2), CUDA_SUCCESS);
  for (CUdeviceptr p : {base, base + kGran + 1}) {
    ASSERT_EQ(cu.cuMemGetAccess(&flags, &loc2, p), CUDA_SUCCESS);
    EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
    ASSERT_EQ(cu.cuMemGetAccess(&flags, &loc3, p), CUDA_SUCCESS);
    EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READ));
    ASSERT_EQ(cu.cuMemGetAccess(&flags, &loc4, p), CUDA_SUCCESS);
    EXPECT_EQ(flags, 0u);
  }
  CUmemLocation nine{CU_MEM_LOCATION_TYPE_DEVICE, 9}, host{CU_MEM_LOCATION_TYPE_HOST, 0};
  EXPECT_EQ(cu.cuMemGetAccess(&flags, &nine, base), CUDA_ERROR_INVALID_DEVICE);
  flags = 99;
  EXPECT_EQ(cu.cuMemGetAccess(&flags, &host, base), CUDA_SUCCESS);  // the host: none
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(cu.cuMemGetAccess(&flags, &loc2, base + 2 * kGran), CUDA_ERROR_INVALID_VALUE);  // unmapped

  // A copy may run across the two mappings (one tensor over two segments), not into the hole.
  CUcontext c2 = cu.Primary(2);
  ASSERT_EQ(cu.cuCtxSetCurrent(c2), CUDA_SUCCESS);
  std::vector<unsigned char> src(2 * kMiB), back(2 * kMiB, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 31 + 7);
  ASSERT_EQ(cu.cuMemcpyHtoD_v2(base + kMiB, src.data(), src.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), base + kMiB, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, src);
  EXPECT_EQ(cu.cuMemcpyHtoD_v2(base + kGran + kMiB, src.data(), src.size()), CUDA_ERROR_INVALID_VALUE);
  // ... and needs access on every mapping it touches.
  CUmemAccessDesc ro = Access(2, CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_EQ(cu.cuMemSetAccess(base + kGran, kGran, &ro, 1), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemcpyHtoD_v2(base + kMiB, src.data(), src.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu.cuMemcpyHtoD_v2(base, src.data(), src.size()), CUDA_SUCCESS);  // the first mapping alone

  ASSERT_EQ(cu.cuMemUnmap(base, 2 * kGran), CUDA_SUCCESS);  // one call for both
  EXPECT_EQ(cu.cuMemRelease(h1), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemRelease(h2), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemAddressFree(base, 3 * kGran), CUDA_SUCCESS);
}

// The route of a GPU <-> GPU copy touching VMM memory: direct (NVLink) when the other device was
// granted access to the VMM range (either side's) or peer access is on between the contexts;
// host-staged otherwise; an error when no device of the copy may touch a side.
TEST(Vmm, CopiesGoDirectWhenThePeerWasGranted) {
  Driver cu;
  ASSERT_EQ(cu.cuInit(0), CUDA_SUCCESS);
  CUcontext c2 = cu.Primary(2), c3 = cu.Primary(3);
  ASSERT_EQ(cu.cuCtxSetCurrent(c2), CUDA_SUCCESS);
  cu.cuCtxDisablePeerAccess(c3);  // whatever an earlier test left
  VmmBuffer src = MapNew(cu, 2, kGran), dst = MapNew(cu, 3, kGran);
  const double direct = Ms(kGran, kNvlinkGbps), staged = Ms(kGran, kStagedGbps);
  CUresult r = CUDA_ERROR_UNKNOWN;
  auto peer = [&](CUstream s) { return cu.cuMemcpyPeerAsync(dst.ptr, c3, src.ptr, c2, kGran, s); };
  auto uva = [&](CUstream s) { return cu.cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, kGran, s); };

  EXPECT_NEAR(Timed(cu, peer, &r), staged, staged * 1e-3);  // each side only its own device's
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, uva, &r), staged, staged * 1e-3);
  EXPECT_EQ(r, CUDA_SUCCESS);

  // GPU 3 may read the source: direct.
  CUmemAccessDesc src_descs[] = {Access(2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                                 Access(3, CU_MEM_ACCESS_FLAGS_PROT_READ)};
  ASSERT_EQ(cu.cuMemSetAccess(src.ptr, kGran, src_descs, 2), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, peer, &r), direct, direct * 1e-3);
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, uva, &r), direct, direct * 1e-3);
  // Revoked: staged again.
  CUmemAccessDesc revoke = Access(3, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  ASSERT_EQ(cu.cuMemSetAccess(src.ptr, kGran, &revoke, 1), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, peer, &r), staged, staged * 1e-3);
  // GPU 2 may write the destination: direct. Read-only is not enough for a destination.
  CUmemAccessDesc dst_ro = Access(2, CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_EQ(cu.cuMemSetAccess(dst.ptr, kGran, &dst_ro, 1), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, peer, &r), staged, staged * 1e-3);
  CUmemAccessDesc dst_rw = Access(2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(cu.cuMemSetAccess(dst.ptr, kGran, &dst_rw, 1), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, peer, &r), direct, direct * 1e-3);
  // The reverse direction (3 -> 2) uses the same grants: GPU 2 may read GPU 3's range.
  auto back = [&](CUstream s) { return cu.cuMemcpyPeerAsync(src.ptr, c2, dst.ptr, c3, kGran, s); };
  EXPECT_NEAR(Timed(cu, back, &r), direct, direct * 1e-3);
  EXPECT_EQ(r, CUDA_SUCCESS);
  CUmemAccessDesc dst_none = Access(2, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  ASSERT_EQ(cu.cuMemSetAccess(dst.ptr, kGran, &dst_none, 1), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, peer, &r), staged, staged * 1e-3);
  // Context peer access also makes it direct (the sim's rule for copies; kernels would still need
  // the grant).
  ASSERT_EQ(cu.cuCtxEnablePeerAccess(c3, 0), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, peer, &r), direct, direct * 1e-3);
  ASSERT_EQ(cu.cuCtxDisablePeerAccess(c3), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, peer, &r), staged, staged * 1e-3);

  // A side no device of the copy may touch fails; the other device's grant alone is enough (direct).
  VmmBuffer bare = MapNew(cu, 3, kGran, /*own_access=*/false);
  auto into_bare = [&](CUstream s) { return cu.cuMemcpyPeerAsync(bare.ptr, c3, src.ptr, c2, kGran, s); };
  Timed(cu, into_bare, &r);
  EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc only2 = Access(2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(cu.cuMemSetAccess(bare.ptr, kGran, &only2, 1), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, into_bare, &r), direct, direct * 1e-3);
  EXPECT_EQ(r, CUDA_SUCCESS);
  auto to_host = [&](CUstream s) {
    static std::vector<unsigned char> host(kGran);
    return cu.cuMemcpyDtoDAsync_v2(reinterpret_cast<CUdeviceptr>(host.data()), bare.ptr, kGran, s);
  };
  Timed(cu, to_host, &r);  // to the host its own GPU 3 would have to read it
  EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE);

  // cudaMalloc'd memory on the other side: the VMM side's grant decides, as above.
  CUdeviceptr plain3 = 0;
  ASSERT_EQ(cu.cuCtxSetCurrent(c3), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemAlloc_v2(&plain3, kGran), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuCtxSetCurrent(c2), CUDA_SUCCESS);
  auto to_plain = [&](CUstream s) { return cu.cuMemcpyDtoDAsync_v2(plain3, src.ptr, kGran, s); };
  EXPECT_NEAR(Timed(cu, to_plain, &r), staged, staged * 1e-3);
  ASSERT_EQ(cu.cuMemSetAccess(src.ptr, kGran, src_descs, 2), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, to_plain, &r), direct, direct * 1e-3);
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemFree_v2(plain3), CUDA_SUCCESS);

  FreeBuffer(cu, src);
  FreeBuffer(cu, dst);
  FreeBuffer(cu, bare);
}

// ---------------------------------------------------------------------------------------------
// Stream-ordered pools through both APIs (one state: a pool made through one is the other's).
// GPUs 5 and 6 (an NVLink pair no other suite touches), 1 as the incapable peer of 5.

TEST(Pools, DefaultCurrentAndCreatedPoolsAcrossApis) {
  Runtime rt;
  Driver cu;
  ASSERT_EQ(rt.cudaSetDevice(5), cudaSuccess);
  cudaMemPool_t rt_default = nullptr, rt_current = nullptr;
  CUmemoryPool cu_default = nullptr, cu_current = nullptr;
  ASSERT_EQ(rt.cudaDeviceGetDefaultMemPool(&rt_default, 5), cudaSuccess);
  ASSERT_EQ(cu.cuDeviceGetDefaultMemPool(&cu_default, 5), CUDA_SUCCESS);
  EXPECT_NE(rt_default, nullptr);
  EXPECT_EQ(rt_default, cu_default);
  ASSERT_EQ(rt.cudaDeviceGetMemPool(&rt_current, 5), cudaSuccess);
  EXPECT_EQ(rt_current, rt_default);
  cudaMemPool_t other_default = nullptr;
  ASSERT_EQ(rt.cudaDeviceGetDefaultMemPool(&other_default, 6), cudaSuccess);
  EXPECT_NE(other_default, rt_default);
  EXPECT_EQ(rt.cudaDeviceGetDefaultMemPool(&rt_current, 8), cudaErrorInvalidDevice);
  EXPECT_EQ(cu.cuDeviceGetDefaultMemPool(&cu_current, 8), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(rt.cudaMemPoolDestroy(rt_default), cudaErrorInvalidValue);  // a device's own pool stays

  // A pool made through the driver is current for the runtime's cudaMallocAsync.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 5;
  CUmemoryPool made = nullptr;
  ASSERT_EQ(cu.cuMemPoolCreate(&made, &props), CUDA_SUCCESS);
  EXPECT_EQ(rt.cudaDeviceSetMemPool(6, made), cudaErrorInvalidValue);  // another device's pool
  ASSERT_EQ(rt.cudaDeviceSetMemPool(5, made), cudaSuccess);
  ASSERT_EQ(cu.cuDeviceGetMemPool(&cu_current, 5), CUDA_SUCCESS);
  EXPECT_EQ(cu_current, made);
  cudaStream_t s = nullptr;
  ASSERT_EQ(rt.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(rt.cudaMallocAsync(&p, 3 * kMiB, s), cudaSuccess);
  ASSERT_NE(p, nullptr);
  CUmemoryPool of = nullptr;
  int ordinal = -1;
  ASSERT_EQ(cu.cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, reinterpret_cast<CUdeviceptr>(p)),
            CUDA_SUCCESS);
  EXPECT_EQ(of, made);
  ASSERT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(p)),
            CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 5);
  cudaPointerAttributes attr{};
  ASSERT_EQ(rt.cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 5);
  unsigned long long used = 0, reserved = 0;
  ASSERT_EQ(cu.cuMemPoolGetAttribute(made, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
  ASSERT_EQ(rt.cudaMemPoolGetAttribute(made, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  EXPECT_EQ(used, 3 * kMiB);
  EXPECT_EQ(reserved, 32 * kMiB);  // whole 32 MiB chunks, as an H200 reserves them
  // Data through the pool memory, by cudaMemcpyDefault.
  std::vector<unsigned char> src(kMiB), back(kMiB, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i ^ (i >> 8));
  ASSERT_EQ(rt.cudaMemcpy(p, src.data(), src.size(), cudaMemcpyDefault), cudaSuccess);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), reinterpret_cast<CUdeviceptr>(p), back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, src);

  // Destroyed with an allocation outstanding: the device's current pool is its default again, the
  // pool takes no new allocations, the outstanding one lives until freed (through the driver).
  ASSERT_EQ(rt.cudaMemPoolDestroy(made), cudaSuccess);
  ASSERT_EQ(rt.cudaDeviceGetMemPool(&rt_current, 5), cudaSuccess);
  EXPECT_EQ(rt_current, rt_default);
  void* q = nullptr;
  EXPECT_EQ(rt.cudaMallocFromPoolAsync(&q, kMiB, made, s), cudaErrorInvalidValue);
  std::fill(back.begin(), back.end(), 0);
  ASSERT_EQ(cu.cuMemcpyDtoH_v2(back.data(), reinterpret_cast<CUdeviceptr>(p), back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, src);
  EXPECT_EQ(cu.cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(p), reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  EXPECT_EQ(rt.cudaFreeAsync(p, s), cudaErrorInvalidValue);  // already freed

  // A runtime-made pool through the driver and through the CUDA 12 runtime.
  cudaMemPoolProps rprops{};
  rprops.allocType = cudaMemAllocationTypePinned;
  rprops.location.type = cudaMemLocationTypeDevice;
  rprops.location.id = 6;
  cudaMemPool_t rpool = nullptr;
  ASSERT_EQ(rt.cudaMemPoolCreate(&rpool, &rprops), cudaSuccess);
  CUdeviceptr dp = 0;
  ASSERT_EQ(cu.cuMemAllocFromPoolAsync(&dp, kMiB, rpool, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 6);  // the pool's device, not the stream's
  EXPECT_EQ(rt.cudaFreeAsync(reinterpret_cast<void*>(dp), s), cudaSuccess);
  Runtime rt12("libcudart.so.12");
  void* p12 = nullptr;
  ASSERT_EQ(rt12.cudaMallocFromPoolAsync(&p12, kMiB, rpool, nullptr), cudaSuccess);
  ASSERT_EQ(cu.cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, reinterpret_cast<CUdeviceptr>(p12)),
            CUDA_SUCCESS);
  EXPECT_EQ(of, reinterpret_cast<CUmemoryPool>(rpool));
  EXPECT_EQ(rt12.cudaFreeAsync(p12, nullptr), cudaSuccess);
  EXPECT_EQ(cu.cuMemPoolDestroy(reinterpret_cast<CUmemoryPool>(rpool)), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemPoolDestroy(reinterpret_cast<CUmemoryPool>(rpool)), CUDA_ERROR_INVALID_VALUE);

  // Sizes and bad arguments.
  void* z = reinterpret_cast<void*>(1);
  EXPECT_EQ(rt.cudaMallocAsync(&z, 0, s), cudaSuccess);  // the runtime: null for 0 bytes
  EXPECT_EQ(z, nullptr);
  CUdeviceptr dz = 1;
  EXPECT_EQ(cu.cuMemAllocAsync(&dz, 0, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);  // the driver too
  EXPECT_EQ(dz, 0u);
  EXPECT_EQ(cu.cuMemAllocAsync(&dz, 64, reinterpret_cast<CUstream>(0x1234)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cu.cuMemAllocAsync(&dz, 64, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);  // the default pool now
  ASSERT_EQ(cu.cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, dz), CUDA_SUCCESS);
  EXPECT_EQ(of, reinterpret_cast<CUmemoryPool>(rt_default));
  EXPECT_EQ(rt.cudaFree(reinterpret_cast<void*>(dz)), cudaSuccess);  // cudaFree takes pool memory too
  cudaMemPoolProps badp = rprops;
  badp.location.id = 8;
  EXPECT_EQ(rt.cudaMemPoolCreate(&rpool, &badp), cudaErrorInvalidValue);  // CUDA 13: 1, not 101
  badp = rprops;
  badp.allocType = cudaMemAllocationTypeInvalid;
  EXPECT_EQ(rt.cudaMemPoolCreate(&rpool, &badp), cudaErrorInvalidValue);
  props.maxSize = 64 * kMiB;  // a capped pool: 40 MiB fit, 40 more do not (as on an H200)
  ASSERT_EQ(cu.cuMemPoolCreate(&made, &props), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cu.cuMemAllocFromPoolAsync(&a, 40 * kMiB, made, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemAllocFromPoolAsync(&b, 40 * kMiB, made, reinterpret_cast<CUstream>(s)), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cu.cuMemAllocFromPoolAsync(&b, 20 * kMiB, made, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemFreeAsync(a, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemFreeAsync(b, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  props.maxSize = 4 * kMiB;  // below one chunk: a chunk still fits
  ASSERT_EQ(cu.cuMemPoolCreate(&made, &props), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemAllocFromPoolAsync(&a, 8 * kMiB, made, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemFreeAsync(a, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemPoolDestroy(made), CUDA_SUCCESS);
  EXPECT_EQ(rt.cudaStreamSynchronize(s), cudaSuccess);
}

// Pool access: the pool's device always, others only as cudaMemPoolSetAccess says (peer capable
// pairs), whichever API asks; copies between pool memory and another GPU go direct when that GPU
// was granted access (or context peer access is on), host-staged otherwise.
TEST(Pools, SetAccessDecidesTheRoute) {
  Runtime rt;
  Driver cu;
  ASSERT_EQ(rt.cudaSetDevice(6), cudaSuccess);
  void* on6 = nullptr;
  ASSERT_EQ(rt.cudaMalloc(&on6, kGran), cudaSuccess);
  ASSERT_EQ(rt.cudaSetDevice(5), cudaSuccess);
  CUcontext c5 = cu.Primary(5), c6 = cu.Primary(6);
  cu.cuCtxDisablePeerAccess(c6);
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(rt.cudaDeviceGetDefaultMemPool(&pool, 5), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(rt.cudaMallocFromPoolAsync(&p, kGran, pool, nullptr), cudaSuccess);

  cudaMemLocation loc5{cudaMemLocationTypeDevice, 5}, loc6{cudaMemLocationTypeDevice, 6};
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtRead;
  ASSERT_EQ(rt.cudaMemPoolGetAccess(&flags, pool, &loc5), cudaSuccess);
  EXPECT_EQ(flags, cudaMemAccessFlagsProtReadWrite);
  ASSERT_EQ(rt.cudaMemPoolGetAccess(&flags, pool, &loc6), cudaSuccess);
  EXPECT_EQ(flags, cudaMemAccessFlagsProtNone);

  const double direct = Ms(kGran, kNvlinkGbps), staged = Ms(kGran, kStagedGbps);
  CUresult r = CUDA_ERROR_UNKNOWN;
  auto out = [&](CUstream s) {
    return cu.cuMemcpyDtoDAsync_v2(reinterpret_cast<CUdeviceptr>(on6), reinterpret_cast<CUdeviceptr>(p), kGran, s);
  };
  auto in = [&](CUstream s) {
    return cu.cuMemcpyPeerAsync(reinterpret_cast<CUdeviceptr>(p), c5, reinterpret_cast<CUdeviceptr>(on6), c6, kGran, s);
  };
  ASSERT_EQ(cu.cuCtxSetCurrent(c5), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, out, &r), staged, staged * 1e-3);
  EXPECT_EQ(r, CUDA_SUCCESS);

  // Errors (CUDA 13's codes): the pool's own device must keep read-write (read-only is not supported
  // for pools at all: 801; none: 101); GPU 1 cannot peer with 5 (other CPU): 101; a device that does
  // not exist: 101; the host: 801; a refused list changes nothing.
  cudaMemAccessDesc grant{{cudaMemLocationTypeDevice, 6}, cudaMemAccessFlagsProtReadWrite};
  cudaMemAccessDesc own_ro{{cudaMemLocationTypeDevice, 5}, cudaMemAccessFlagsProtRead};
  cudaMemAccessDesc incapable{{cudaMemLocationTypeDevice, 1}, cudaMemAccessFlagsProtReadWrite};
  cudaMemAccessDesc nodev{{cudaMemLocationTypeDevice, 12}, cudaMemAccessFlagsProtReadWrite};
  cudaMemAccessDesc hostloc{{cudaMemLocationTypeHost, 0}, cudaMemAccessFlagsProtReadWrite};
  cudaMemAccessDesc grant_then_own_ro[] = {grant, own_ro};
  EXPECT_EQ(rt.cudaMemPoolSetAccess(pool, grant_then_own_ro, 2), cudaErrorNotSupported);
  cudaMemAccessDesc own_none{{cudaMemLocationTypeDevice, 5}, cudaMemAccessFlagsProtNone};
  EXPECT_EQ(rt.cudaMemPoolSetAccess(pool, &own_none, 1), cudaErrorInvalidDevice);
  cudaMemAccessDesc peer_ro{{cudaMemLocationTypeDevice, 6}, cudaMemAccessFlagsProtRead};
  EXPECT_EQ(rt.cudaMemPoolSetAccess(pool, &peer_ro, 1), cudaErrorNotSupported);
  cudaMemAccessDesc grant_then_incapable[] = {grant, incapable};
  EXPECT_EQ(rt.cudaMemPoolSetAccess(pool, grant_then_incapable, 2), cudaErrorInvalidDevice);
  EXPECT_EQ(rt.cudaMemPoolSetAccess(pool, &nodev, 1), cudaErrorInvalidDevice);
  EXPECT_EQ(rt.cudaMemPoolSetAccess(pool, &hostloc, 1), cudaErrorNotSupported);
  cudaMemLocation host_loc{cudaMemLocationTypeHost, 0}, loc12{cudaMemLocationTypeDevice, 12};
  flags = cudaMemAccessFlagsProtReadWrite;
  EXPECT_EQ(rt.cudaMemPoolGetAccess(&flags, pool, &host_loc), cudaSuccess);
  EXPECT_EQ(flags, cudaMemAccessFlagsProtNone);
  EXPECT_EQ(rt.cudaMemPoolGetAccess(&flags, pool, &loc12), cudaErrorInvalidValue);
  EXPECT_EQ(rt.cudaMemPoolSetAccess(nullptr, &grant, 1), cudaErrorInvalidValue);
  EXPECT_EQ(rt.cudaMemPoolSetAccess(pool, nullptr, 1), cudaErrorInvalidValue);
  ASSERT_EQ(rt.cudaMemPoolGetAccess(&flags, pool, &loc6), cudaSuccess);
  EXPECT_EQ(flags, cudaMemAccessFlagsProtNone);
  EXPECT_NEAR(Timed(cu, out, &r), staged, staged * 1e-3);
  // The memset of a stream of GPU 6 needs GPU 6's access.
  cudaStream_t s6 = nullptr;
  ASSERT_EQ(rt.cudaSetDevice(6), cudaSuccess);
  ASSERT_EQ(rt.cudaStreamCreateWithFlags(&s6, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(rt.cudaMemsetAsync(p, 1, 64, s6), cudaErrorInvalidValue);

  // Granted through the runtime, seen by the driver; now direct both ways.
  ASSERT_EQ(rt.cudaMemPoolSetAccess(pool, &grant, 1), cudaSuccess);
  CUmemAccess_flags cflags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  CUmemLocation cloc6{CU_MEM_LOCATION_TYPE_DEVICE, 6};
  ASSERT_EQ(cu.cuMemPoolGetAccess(&cflags, reinterpret_cast<CUmemoryPool>(pool), &cloc6), CUDA_SUCCESS);
  EXPECT_EQ(cflags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(rt.cudaMemsetAsync(p, 1, 64, s6), cudaSuccess);
  ASSERT_EQ(cu.cuCtxSetCurrent(c5), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, out, &r), direct, direct * 1e-3);
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, in, &r), direct, direct * 1e-3);
  EXPECT_EQ(r, CUDA_SUCCESS);
  // Revoked through the driver: staged again; context peer access makes it direct.
  CUmemAccessDesc revoke = Access(6, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  ASSERT_EQ(cu.cuMemPoolSetAccess(reinterpret_cast<CUmemoryPool>(pool), &revoke, 1), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, out, &r), staged, staged * 1e-3);
  ASSERT_EQ(cu.cuCtxEnablePeerAccess(c6, 0), CUDA_SUCCESS);
  EXPECT_NEAR(Timed(cu, out, &r), direct, direct * 1e-3);
  ASSERT_EQ(cu.cuCtxDisablePeerAccess(c6), CUDA_SUCCESS);

  // The bytes move either way.
  std::vector<unsigned char> src(kGran), back(kGran, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 3 + 1);
  ASSERT_EQ(rt.cudaMemcpy(p, src.data(), src.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cu.cuMemcpyPeer(reinterpret_cast<CUdeviceptr>(on6), c6, reinterpret_cast<CUdeviceptr>(p), c5, kGran),
            CUDA_SUCCESS);
  ASSERT_EQ(rt.cudaMemcpy(back.data(), on6, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, src);
  EXPECT_EQ(rt.cudaFreeAsync(p, nullptr), cudaSuccess);
  EXPECT_EQ(rt.cudaFree(on6), cudaSuccess);
}

// VMM memory seen through the runtime: cudaPointerGetAttributes and cudaMemcpyDefault.
TEST(Pools, RuntimeSeesVmmMemoryAsDeviceMemory) {
  Runtime rt;
  Driver cu;
  ASSERT_EQ(rt.cudaSetDevice(6), cudaSuccess);
  VmmBuffer b = MapNew(cu, 6, kGran);
  cudaPointerAttributes attr{};
  ASSERT_EQ(rt.cudaPointerGetAttributes(&attr, reinterpret_cast<void*>(b.ptr + 100)), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 6);
  std::vector<unsigned char> src(4096, 0x77), back(4096, 0);
  ASSERT_EQ(rt.cudaMemcpy(reinterpret_cast<void*>(b.ptr), src.data(), src.size(), cudaMemcpyDefault), cudaSuccess);
  ASSERT_EQ(rt.cudaMemcpy(back.data(), reinterpret_cast<void*>(b.ptr), back.size(), cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back, src);
  EXPECT_EQ(rt.cudaFree(reinterpret_cast<void*>(b.ptr)), cudaErrorInvalidValue);  // not cudaMalloc's to free
  FreeBuffer(cu, b);
}

// The runtime without a driver to open: cudaErrorInsufficientDriver, like the real one.
TEST(NoDriver, RuntimeReportsInsufficientDriver) {
  if (Loaded("libcuda.so.1") || dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr)
    GTEST_SKIP() << "a libcuda.so.1 is already loaded";
  void* probe = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (probe != nullptr) {
    dlclose(probe);
    GTEST_SKIP() << "a libcuda.so.1 is on the library path";
  }
  Runtime rt;
  int n = -1;
  EXPECT_EQ(rt.cudaGetDeviceCount(&n), cudaErrorInsufficientDriver);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(rt.cudaSetDevice(0), cudaErrorInsufficientDriver);
}

}  // namespace
