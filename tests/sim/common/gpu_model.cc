#include "tests/sim/common/gpu_model.h"

namespace p2psim {
namespace {

constexpr size_t MiB = 1ull << 20;

// Public figures (deviceQuery output and data sheets), most specific names first.
constexpr GpuModel kModels[] = {
    // key                  cc     SMs  memory            L2           clock  memclk  bus   thr/SM blk/SM smem/SM  optin  NVLink
    {"GH200",               9, 0, 132, 97871 * MiB,  50 * MiB, 1980000, 2619000, 6144, 2048, 32, 233472, 232448, true},
    {"H200",                9, 0, 132, 143771 * MiB, 50 * MiB, 1980000, 3201000, 6144, 2048, 32, 233472, 232448, true},
    {"H100 PCIe",           9, 0, 114, 81090 * MiB,  50 * MiB, 1755000, 1593000, 5120, 2048, 32, 233472, 232448, true},
    {"H100",                9, 0, 132, 81090 * MiB,  50 * MiB, 1980000, 2619000, 5120, 2048, 32, 233472, 232448, true},
    {"H20",                 9, 0, 78,  97871 * MiB,  60 * MiB, 1980000, 2619000, 6144, 2048, 32, 233472, 232448, true},
    {"GB200",              10, 0, 152, 189471 * MiB, 126 * MiB, 1965000, 3996000, 8192, 2048, 32, 233472, 232448, true},
    {"B200",               10, 0, 148, 182623 * MiB, 126 * MiB, 1965000, 3996000, 8192, 2048, 32, 233472, 232448, true},
    {"A100-SXM4-40GB",      8, 0, 108, 40536 * MiB,  40 * MiB, 1410000, 1215000, 5120, 2048, 32, 167936, 166912, true},
    {"A100",                8, 0, 108, 81050 * MiB,  40 * MiB, 1410000, 1593000, 5120, 2048, 32, 167936, 166912, true},
    {"A30",                 8, 0, 56,  24062 * MiB,  24 * MiB, 1440000, 1215000, 3072, 2048, 32, 167936, 166912, true},
    {"A40",                 8, 6, 84,  45634 * MiB,   6 * MiB, 1740000, 7251000, 384, 1536, 16, 102400, 101376, true},
    {"A10",                 8, 6, 72,  22716 * MiB,   6 * MiB, 1695000, 6251000, 384, 1536, 16, 102400, 101376, false},
    {"L40S",                8, 9, 142, 45589 * MiB,  96 * MiB, 2520000, 9001000, 384, 1536, 24, 102400, 101376, false},
    {"L40",                 8, 9, 142, 45589 * MiB,  96 * MiB, 2490000, 9001000, 384, 1536, 24, 102400, 101376, false},
    {"L4",                  8, 9, 58,  22478 * MiB,  48 * MiB, 2040000, 6251000, 192, 1536, 24, 102400, 101376, false},
    {"RTX 6000 Ada",        8, 9, 142, 48539 * MiB,  96 * MiB, 2505000, 10001000, 384, 1536, 24, 102400, 101376, false},
    {"RTX 4090",            8, 9, 128, 24217 * MiB,  72 * MiB, 2520000, 10501000, 384, 1536, 24, 102400, 101376, false},
    {"RTX 3090",            8, 6, 82,  24260 * MiB,   6 * MiB, 1695000, 9751000, 384, 1536, 16, 102400, 101376, false},
    {"RTX 5090",           12, 0, 170, 32607 * MiB,  96 * MiB, 2407000, 14001000, 512, 1536, 32, 102400, 101376, false},
    {"V100",                7, 0, 80,  32501 * MiB,   6 * MiB, 1530000, 877000, 4096, 2048, 32, 98304, 98304, true},
    {"T4",                  7, 5, 40,  14931 * MiB,   4 * MiB, 1590000, 5001000, 256, 1024, 16, 65536, 65536, false},
};

}  // namespace

const GpuModel& ModelOf(const std::string& name) {
  for (const GpuModel& m : kModels)
    if (name.find(m.key) != std::string::npos) return m;
  return kModels[3];  // H100 SXM, the topology file's default GPU
}

int DeviceAttribute(const GpuModel& m, int attr, unsigned domain, unsigned bus, unsigned device) {
  const bool hopper_or_later = m.major >= 9;
  switch (attr) {
    case 1: return 1024;                               // MaxThreadsPerBlock
    case 2: case 3: return 1024;                       // MaxBlockDimX/Y
    case 4: return 64;                                 // MaxBlockDimZ
    case 5: return 2147483647;                         // MaxGridDimX
    case 6: case 7: return 65535;                      // MaxGridDimY/Z
    case 8: return 49152;                              // MaxSharedMemoryPerBlock
    case 9: return 65536;                              // TotalConstantMemory
    case 10: return 32;                                // WarpSize
    case 11: return 2147483647;                        // MaxPitch
    case 12: return 65536;                             // MaxRegistersPerBlock
    case 13: return m.clock_khz;                       // ClockRate
    case 14: return 512;                               // TextureAlignment
    case 15: return 1;                                 // GpuOverlap
    case 16: return m.sms;                             // MultiProcessorCount
    case 17: return 0;                                 // KernelExecTimeout (no display)
    case 18: return 0;                                 // Integrated
    case 19: return 1;                                 // CanMapHostMemory
    case 20: return 0;                                 // ComputeMode: default
    case 30: return 512;                               // SurfaceAlignment
    case 31: return 1;                                 // ConcurrentKernels
    case 32: return m.nvlink_capable ? 1 : 0;          // EccEnabled
    case 33: return static_cast<int>(bus);             // PciBusId
    case 34: return static_cast<int>(device);          // PciDeviceId
    case 35: return 0;                                 // TccDriver
    case 36: return m.memory_clock_khz;                // MemoryClockRate
    case 37: return m.memory_bus_bits;                 // GlobalMemoryBusWidth
    case 38: return m.l2_bytes;                        // L2CacheSize
    case 39: return m.max_threads_per_sm;              // MaxThreadsPerMultiProcessor
    case 40: return m.nvlink_capable ? 3 : 2;          // AsyncEngineCount
    case 41: return 1;                                 // UnifiedAddressing
    case 50: return static_cast<int>(domain);          // PciDomainId
    case 51: return 32;                                // TexturePitchAlignment
    case 75: return m.major;                           // ComputeCapabilityMajor
    case 76: return m.minor;                           // ComputeCapabilityMinor
    case 78: return 1;                                 // StreamPrioritiesSupported
    case 79: case 80: return 1;                        // Global/LocalL1CacheSupported
    case 81: return m.smem_per_sm;                     // MaxSharedMemoryPerMultiprocessor
    case 82: return 65536;                             // MaxRegistersPerMultiprocessor
    case 83: return 1;                                 // ManagedMemory
    case 84: return 0;                                 // IsMultiGpuBoard
    case 85: return 0;                                 // MultiGpuBoardGroupID
    case 86: return 0;                                 // HostNativeAtomicSupported (x86 host)
    case 87: return m.nvlink_capable ? 2 : 64;         // SingleToDoublePrecisionPerfRatio
    case 88: return 0;                                 // PageableMemoryAccess (no HMM)
    case 89: return 1;                                 // ConcurrentManagedAccess
    case 90: return 1;                                 // ComputePreemptionSupported
    case 91: return 1;                                 // CanUseHostPointerForRegisteredMem
    case 95: return 1;                                 // CooperativeLaunch
    case 97: return m.smem_per_block_optin;            // MaxSharedMemoryPerBlockOptin
    case 98: return 0;                                 // CanFlushRemoteWrites
    case 99: return 1;                                 // HostRegisterSupported
    case 100: case 101: return 0;                      // PageableMemoryAccessUsesHostPageTables, DirectManagedMemAccessFromHost
    case 106: return m.max_blocks_per_sm;              // MaxBlocksPerMultiprocessor
    case 108: return m.l2_bytes / 4 * 3;               // MaxPersistingL2CacheSize
    case 109: return 134213632;                        // MaxAccessPolicyWindowSize
    case 111: return 1024;                             // ReservedSharedMemoryPerBlock
    case 112: return 1;                                // SparseCudaArraySupported
    case 113: return 1;                                // HostRegisterReadOnlySupported
    case 114: return 1;                                // TimelineSemaphoreInteropSupported
    case 115: return 1;                                // MemoryPoolsSupported
    case 116: return 0;                                // GPUDirectRDMASupported (no NIC driver modelled)
    case 119: return 9;                                // MemoryPoolSupportedHandleTypes: fd | none
    case 120: return hopper_or_later ? 1 : 0;          // ClusterLaunch
    case 121: return 1;                                // DeferredMappingCudaArraySupported
    case 125: return 1;                                // IpcEventSupport
    case 126: return hopper_or_later ? 4 : 1;          // MemSyncDomainCount
    default: return 0;                                 // not modelled: read as absent
  }
}

}  // namespace p2psim
