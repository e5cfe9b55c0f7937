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
#undef FN
  CUcontext Primary(int d) {
    CUcontext c = nullptr;
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&c, d), CUDA_SUCCESS);
    return c;
  }
};

struct Runtime {
  void* h = Open("libcudart.so.13");
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
  auto create = Sym<decltype(&cuMemCreate)>(cu.h, "cuMemCreate");
  CUmemGenericAllocationHandle handle = 0;
  CUmemAllocationProp prop{};
  EXPECT_EQ(create(&handle, 2 << 20, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
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

// The runtime without a driver to open: cudaErrorInsufficientDriver, like the real one.
TEST(NoDriver, RuntimeReportsInsufficientDriver) {
  if (Loaded("libcuda.so.1") || dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr) GTEST_SKIP();
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
