// NVML (libnvidia-ml.so.1) for the probes and the shim: loaded once with dlopen, each function found
// once, never unloaded (unloading a driver library mid-process is riskier than keeping it).
// nvmlInit_v2 is the caller's to call: it can block on a wedged driver (the probe calls it on a
// helper thread with a deadline).
#pragma once

namespace p2ptrace::probe {

struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct NvmlProcessInfo {  // nvmlProcessInfo_t (v2 and v3)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};

struct NvmlFieldValue {  // nvmlFieldValue_t: 40 bytes
  unsigned int fieldId, scopeId;  // scopeId: the link, for per-link fields
  long long timestamp, latencyUsec;
  int valueType;   // nvmlValueType_t: 1 unsigned int, 3 unsigned long long, …
  int nvmlReturn;  // this field's own result
  union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
  } value;
};
static_assert(sizeof(NvmlFieldValue) == 40, "nvmlFieldValue_t is 40 bytes");

struct NvmlApi {
  int (*Init)() = nullptr;
  int (*Shutdown)() = nullptr;
  int (*GetCount)(unsigned*) = nullptr;
  int (*GetHandle)(unsigned, void**) = nullptr;
  int (*GetName)(void*, char*, unsigned) = nullptr;
  int (*GetUuid)(void*, char*, unsigned) = nullptr;
  int (*GetPci)(void*, NvmlPciInfo*) = nullptr;
  int (*GetP2P)(void*, void*, int, int*) = nullptr;
  int (*GetAncestor)(void*, void*, int*) = nullptr;
  int (*GetLinkState)(void*, unsigned, int*) = nullptr;
  int (*GetLinkRemote)(void*, unsigned, NvmlPciInfo*) = nullptr;
  int (*GetMig)(void*, unsigned*, unsigned*) = nullptr;
  int (*GetVirt)(void*, int*) = nullptr;
  int (*CurGen)(void*, unsigned*) = nullptr;
  int (*MaxGen)(void*, unsigned*) = nullptr;
  int (*CurWidth)(void*, unsigned*) = nullptr;
  int (*MaxWidth)(void*, unsigned*) = nullptr;
  // Link health: per-link error counters (counter: 0 replay, 1 recovery, 2 CRC flit, 3 CRC data),
  // the link's NVLink version, field values (NVLink 5's counters), the PCIe replay counter.
  int (*NvLinkErrorCounter)(void*, unsigned, int, unsigned long long*) = nullptr;
  int (*NvLinkVersion)(void*, unsigned, unsigned*) = nullptr;
  int (*FieldValues)(void*, int, NvmlFieldValue*) = nullptr;
  int (*PcieReplay)(void*, unsigned*) = nullptr;
  int (*DriverVersion)(char*, unsigned) = nullptr;
  int (*GetHandleByPciBusId)(const char*, void**) = nullptr;
  // nvmlDeviceGetComputeRunningProcesses_v3, else _v2 (the same record).
  int (*GetComputeProcesses)(void*, unsigned*, NvmlProcessInfo*) = nullptr;
};

// The table; null when libnvidia-ml.so.1 cannot be loaded. A function the library lacks is null.
const NvmlApi* LoadNvml();

}  // namespace p2ptrace::probe
