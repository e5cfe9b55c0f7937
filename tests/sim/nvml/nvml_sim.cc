// The simulated NVML (libnvidia-ml.so.1): the subset p2ptrace and NCCL ask about, answered from
// the topology file (DESIGN.md §9). NVML sees every GPU of the host, whatever CUDA_VISIBLE_DEVICES
// says, indexed in the file's order. Types and values from NVML_API_VERSION 13 (nvml.h of the driver).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "tests/sim/common/gpu_users.h"
#include "tests/sim/common/sim_links.h"
#include "tests/sim/common/sim_topology.h"

#define NVML_API extern "C" __attribute__((visibility("default")))

extern "C" {
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef union {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
  unsigned short usVal;
} nvmlValue_t;
typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  int nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;
}
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvml.h's nvmlFieldValue_t");

namespace {

enum : int {
  NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_UNKNOWN = 999
};
enum { kCapsRead = 0, kCapsWrite = 1, kCapsNvlink = 2, kCapsAtomics = 3, kCapsPci = 4 };
using p2psim::kMaxNvLinks;
using p2psim::LinkCounter;

struct Dev { int host_gpu; };

struct NvmlState {
  bool loaded = false;
  std::string error;
  p2psim::Topology topo;
  const p2ptrace::Host* host = nullptr;
  std::vector<Dev> devs;  // NVML index order
  int init_count = 0;
};

std::mutex g_mu;
NvmlState* g_nvml = nullptr;

NvmlState& N() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto* st = new NvmlState();
    const char* path = std::getenv("P2PSIM_TOPOLOGY");
    if (path == nullptr || *path == '\0') st->error = "P2PSIM_TOPOLOGY is not set; it must name the simulated node's topology file";
    else if (p2psim::LoadTopology(path, &st->topo, &st->error)) st->host = p2psim::SelectHost(st->topo, &st->error);
    st->loaded = st->host != nullptr;
    if (st->loaded) {
      std::vector<int> idx;
      for (const auto& g : st->host->gpus) idx.push_back(g.index);
      std::sort(idx.begin(), idx.end());
      for (int i : idx) st->devs.push_back({i});
    }
    g_nvml = st;
  });
  return *g_nvml;
}

const p2ptrace::Gpu* GpuOf(nvmlDevice_t d) {
  NvmlState& st = N();
  auto* p = reinterpret_cast<Dev*>(d);
  if (st.devs.empty() || p < st.devs.data() || p >= st.devs.data() + st.devs.size()) return nullptr;
  return st.host->FindGpu(p->host_gpu);
}

#define NVML_ENTER()                                               \
  NvmlState& st = N();                                             \
  {                                                                \
    std::lock_guard<std::mutex> lock(g_mu);                        \
    if (st.init_count == 0) return NVML_ERROR_UNINITIALIZED;       \
  }                                                                \
  (void)st

#define NVML_DEVICE(var, handle)                      \
  const p2ptrace::Gpu* var = GpuOf(handle);           \
  if (var == nullptr) return NVML_ERROR_INVALID_ARGUMENT

nvmlReturn_t Init() {
  NvmlState& st = N();
  if (!st.loaded) {
    std::fprintf(stderr, "p2psim: %s; NVML initialisation fails with NVML_ERROR_DRIVER_NOT_LOADED\n", st.error.c_str());
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  ++st.init_count;
  return NVML_SUCCESS;
}

struct Bus { unsigned domain = 0, bus = 0, device = 0, function = 0; };
Bus ParseBus(const std::string& s) {
  Bus b;
  std::sscanf(s.c_str(), "%x:%x:%x.%x", &b.domain, &b.bus, &b.device, &b.function);
  return b;
}

void FillPci(const p2ptrace::Gpu& g, nvmlPciInfo_t* pci) {
  Bus b = ParseBus(g.bus_id);
  std::memset(pci, 0, sizeof *pci);
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", b.domain, b.bus, b.device);
  std::snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", b.domain, b.bus, b.device);
  pci->domain = b.domain;
  pci->bus = b.bus;
  pci->device = b.device;
  pci->pciDeviceId = 0x233010de;  // vendor 10de in the low half, as NVML packs it
  pci->pciSubSystemId = 0x16c110de;
}

std::vector<p2psim::Lane> Lanes(const p2ptrace::Host& h, int gpu) { return p2psim::Lanes(h, gpu); }

}  // namespace

NVML_API nvmlReturn_t nvmlInit_v2(void) { return Init(); }
NVML_API nvmlReturn_t nvmlInit(void) { return Init(); }
NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int) { return Init(); }

NVML_API nvmlReturn_t nvmlShutdown(void) {
  NvmlState& st = N();
  std::lock_guard<std::mutex> lock(g_mu);
  if (st.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --st.init_count;
  return NVML_SUCCESS;
}

NVML_API const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  NVML_ENTER();
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const char* v = "580.95.05";
  if (length < std::strlen(v) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::strcpy(version, v);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  NVML_ENTER();
  if (v == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *v = 13000;
  return NVML_SUCCESS;
}
NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) { return nvmlSystemGetCudaDriverVersion(v); }

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  NVML_ENTER();
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(st.devs.size());
  return NVML_SUCCESS;
}
NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* dev) {
  NVML_ENTER();
  if (dev == nullptr || index >= st.devs.size()) return NVML_ERROR_INVALID_ARGUMENT;
  *dev = reinterpret_cast<nvmlDevice_t>(&st.devs[index]);
  return NVML_SUCCESS;
}
NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t* d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* dev) {
  NVML_ENTER();
  if (bus_id == nullptr || dev == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Bus want;
  if (std::sscanf(bus_id, "%x:%x:%x", &want.domain, &want.bus, &want.device) != 3) {
    want.domain = 0;
    if (std::sscanf(bus_id, "%x:%x", &want.bus, &want.device) != 2) return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (auto& d : st.devs) {
    Bus b = ParseBus(st.host->FindGpu(d.host_gpu)->bus_id);
    if (b.domain == want.domain && b.bus == want.bus && b.device == want.device) {
      *dev = reinterpret_cast<nvmlDevice_t>(&d);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* b, nvmlDevice_t* d) { return nvmlDeviceGetHandleByPciBusId_v2(b, d); }

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int* index) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = static_cast<unsigned>(reinterpret_cast<Dev*>(dev) - st.devs.data());
  return NVML_SUCCESS;
}
NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t dev, unsigned int* minor) { return nvmlDeviceGetIndex(dev, minor); }

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char* name, unsigned int length) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (name == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < g->name.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::strcpy(name, g->name.c_str());
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char* uuid, unsigned int length) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned h = 2166136261u;
  for (char c : st.host->name + "/" + g->bus_id) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%08x-%04x-%04x-%04x-%012x", h, g->index, 0x5157, 0x1d, h ^ 0xabcdef);
  if (length < std::strlen(buf) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::strcpy(uuid, buf);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  FillPci(*g, pci);
  return NVML_SUCCESS;
}
NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t* p) { return nvmlDeviceGetPciInfo_v3(d, p); }
NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t* p) { return nvmlDeviceGetPciInfo_v3(d, p); }

NVML_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t dev, unsigned int* node) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (node == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<std::string> chain = p2ptrace::PcieAncestors(*st.host, g->parent);
  auto it = std::find(st.host->cpus.begin(), st.host->cpus.end(), chain.empty() ? "" : chain.back());
  *node = static_cast<unsigned>(it == st.host->cpus.end() ? 0 : it - st.host->cpus.begin());
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t d1, nvmlDevice_t d2, int caps, int* status) {
  NVML_ENTER();
  NVML_DEVICE(a, d1);
  NVML_DEVICE(b, d2);
  if (status == nullptr || caps < kCapsRead || caps > kCapsPci) return NVML_ERROR_INVALID_ARGUMENT;
  if (a == b) { *status = static_cast<int>(p2psim::P2PStatus::kNotSupported); return NVML_SUCCESS; }
  p2psim::P2PStatus s = p2psim::PeerStatus(st.topo, *st.host, a->index, b->index);
  if (caps == kCapsNvlink && s == p2psim::P2PStatus::kOk) {
    p2ptrace::GpuPath path = p2ptrace::ClassifyGpuPath(*st.host, a->index, b->index);
    if (path.type != p2ptrace::PathType::kNVLink || path.active_links == 0) s = p2psim::P2PStatus::kNotSupported;
  }
  *status = static_cast<int>(s);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t d1, nvmlDevice_t d2, int* level) {
  NVML_ENTER();
  NVML_DEVICE(a, d1);
  NVML_DEVICE(b, d2);
  if (level == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (a == b) { *level = 0; return NVML_SUCCESS; }  // NVML_TOPOLOGY_INTERNAL
  switch (p2ptrace::ClassifyGpuPath(*st.host, a->index, b->index).pcie) {
    case p2ptrace::PathType::kPIX: *level = 10; break;   // SINGLE
    case p2ptrace::PathType::kPXB: *level = 20; break;   // MULTIPLE
    case p2ptrace::PathType::kPHB: *level = 30; break;   // HOSTBRIDGE
    case p2ptrace::PathType::kNODE: *level = 40; break;  // NODE
    default: *level = 50; break;                          // SYSTEM
  }
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link, int* active) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (active == nullptr || link >= kMaxNvLinks) return NVML_ERROR_INVALID_ARGUMENT;
  auto lanes = Lanes(*st.host, g->index);
  if (link >= lanes.size()) return NVML_ERROR_NOT_SUPPORTED;
  *active = lanes[link].active ? 1 : 0;
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t dev, unsigned int link, nvmlPciInfo_t* pci) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (pci == nullptr || link >= kMaxNvLinks) return NVML_ERROR_INVALID_ARGUMENT;
  auto lanes = Lanes(*st.host, g->index);
  if (link >= lanes.size()) return NVML_ERROR_NOT_SUPPORTED;
  FillPci(*st.host->FindGpu(lanes[link].peer), pci);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int* current, unsigned int* pending) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = g->mig ? 1 : 0;
  return NVML_SUCCESS;
}

// Compute processes: those that activated the GPU's primary context and still run (gpu_users.h).
// Their memory is not known across processes: NVML_VALUE_NOT_AVAILABLE, as NVML says where it cannot see.
template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t dev, unsigned int* count, Info* infos) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (count == nullptr || (infos == nullptr && *count != 0)) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<unsigned> pids = p2psim::GpuUsers(st.host->name, g->index);
  if (*count < pids.size()) {
    *count = static_cast<unsigned>(pids.size());
    return pids.empty() ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *count = static_cast<unsigned>(pids.size());
  for (size_t i = 0; i < pids.size(); ++i) {
    std::memset(&infos[i], 0xff, sizeof infos[i]);  // instance ids: none (no MIG)
    infos[i].pid = pids[i];
    infos[i].usedGpuMemory = ~0ull;
  }
  return NVML_SUCCESS;
}
struct ProcessInfoV1 { unsigned int pid; unsigned long long usedGpuMemory; };
struct ProcessInfoV2 { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; };

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int* count, ProcessInfoV1* infos) {
  return RunningProcesses(dev, count, infos);
}
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int* count, ProcessInfoV2* infos) {
  return RunningProcesses(dev, count, infos);
}
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int* count, ProcessInfoV2* infos) {
  return RunningProcesses(dev, count, infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t dev, int* mode) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = static_cast<int>(st.host->virtualization);  // NONE 0, PASSTHROUGH 1, VGPU 2
  return NVML_SUCCESS;
}

#define NVML_PCIE(fn, field)                                        \
  NVML_API nvmlReturn_t fn(nvmlDevice_t dev, unsigned int* value) { \
    NVML_ENTER();                                                   \
    NVML_DEVICE(g, dev);                                            \
    if (value == nullptr) return NVML_ERROR_INVALID_ARGUMENT;       \
    *value = static_cast<unsigned>(p2psim::CurrentPcie(st.topo, *st.host, g->index).field); \
    return NVML_SUCCESS;                                            \
  }
NVML_PCIE(nvmlDeviceGetCurrPcieLinkGeneration, gen)
NVML_PCIE(nvmlDeviceGetMaxPcieLinkGeneration, max_gen)
NVML_PCIE(nvmlDeviceGetCurrPcieLinkWidth, width)
NVML_PCIE(nvmlDeviceGetMaxPcieLinkWidth, max_width)

// ---------------------------------------------------------------------------------------------
// Link health (sim_links.h): NVLink generation and speed, error counters, PCIe replays.

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t dev, unsigned int link, unsigned int* version) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (version == nullptr || link >= kMaxNvLinks) return NVML_ERROR_INVALID_ARGUMENT;
  if (link >= Lanes(*st.host, g->index).size()) return NVML_ERROR_NOT_SUPPORTED;
  *version = p2psim::NvmlNvLinkVersion(st.topo.LinksOf(*st.host, g->index).nvlink_version);
  return NVML_SUCCESS;
}

// nvmlNvLinkErrorCounter_t: DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2, DL_CRC_DATA 3, DL_ECC_DATA 4.
// NVLink 5 GPUs answer none of them (their counters are field values); ECC_DATA is not modelled.
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t dev, unsigned int link, int counter,
                                                      unsigned long long* value) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (value == nullptr || link >= kMaxNvLinks || counter < 0 || counter > 4) return NVML_ERROR_INVALID_ARGUMENT;
  if (link >= Lanes(*st.host, g->index).size() || counter == 4) return NVML_ERROR_NOT_SUPPORTED;
  auto c = static_cast<LinkCounter>(counter);  // the legacy four share NVML's numbering
  if (!p2psim::CounterServed(st.topo, *st.host, g->index, c)) return NVML_ERROR_NOT_SUPPORTED;
  *value = p2psim::CounterValue(st.topo, *st.host, g->index, static_cast<int>(link), c);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t dev, unsigned int* value) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (value == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!p2psim::CounterServed(st.topo, *st.host, g->index, LinkCounter::kPcieReplay)) return NVML_ERROR_NOT_SUPPORTED;
  *value = static_cast<unsigned>(p2psim::CounterValue(st.topo, *st.host, g->index, -1, LinkCounter::kPcieReplay));
  return NVML_SUCCESS;
}

namespace {
enum { kValueUnsignedInt = 1, kValueUnsignedLongLong = 3 };
enum : unsigned {
  kFiPcieReplay = 94, kFiNvLinkSpeed = 164, kFiRcvErrors = 208, kFiRecoveryFailed = 214,
  kFiRecoveryEvents = 215, kFiEffectiveErrors = 219, kFiSymbolErrors = 221
};

// One field of nvmlDeviceGetFieldValues: the entry's nvmlReturn says whether it is served.
int FieldValue(const NvmlState& st, const p2ptrace::Gpu& g, nvmlFieldValue_t* v) {
  LinkCounter c;
  switch (v->fieldId) {
    case kFiPcieReplay:
      if (!p2psim::CounterServed(st.topo, *st.host, g.index, LinkCounter::kPcieReplay)) return NVML_ERROR_NOT_SUPPORTED;
      v->valueType = kValueUnsignedLongLong;
      v->value.ullVal = p2psim::CounterValue(st.topo, *st.host, g.index, -1, LinkCounter::kPcieReplay);
      return NVML_SUCCESS;
    case kFiNvLinkSpeed: {
      if (v->scopeId >= unsigned(kMaxNvLinks)) return NVML_ERROR_INVALID_ARGUMENT;
      auto lanes = Lanes(*st.host, g.index);
      if (v->scopeId >= lanes.size()) return NVML_ERROR_NOT_SUPPORTED;
      v->valueType = kValueUnsignedInt;  // a link that is down runs at no speed
      v->value.uiVal = lanes[v->scopeId].active ? p2psim::NvLinkSpeedMbps(st.topo.LinksOf(*st.host, g.index).nvlink_version) : 0;
      return NVML_SUCCESS;
    }
    case kFiRcvErrors: c = LinkCounter::kRcvErrors; break;
    case kFiRecoveryFailed: c = LinkCounter::kRecoveryFailed; break;
    case kFiRecoveryEvents: c = LinkCounter::kRecoveryEvents; break;
    case kFiEffectiveErrors: c = LinkCounter::kEffectiveErrors; break;
    case kFiSymbolErrors: c = LinkCounter::kSymbolErrors; break;
    default: return NVML_ERROR_NOT_SUPPORTED;
  }
  if (!p2psim::CounterServed(st.topo, *st.host, g.index, c)) return NVML_ERROR_NOT_SUPPORTED;
  if (v->scopeId >= unsigned(kMaxNvLinks)) return NVML_ERROR_INVALID_ARGUMENT;
  if (v->scopeId >= Lanes(*st.host, g.index).size()) return NVML_ERROR_NOT_SUPPORTED;
  v->valueType = kValueUnsignedLongLong;
  v->value.ullVal = p2psim::CounterValue(st.topo, *st.host, g.index, static_cast<int>(v->scopeId), c);
  return NVML_SUCCESS;
}
}  // namespace

NVML_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t dev, int count, nvmlFieldValue_t* values) {
  NVML_ENTER();
  NVML_DEVICE(g, dev);
  if (count < 0 || (values == nullptr && count > 0)) return NVML_ERROR_INVALID_ARGUMENT;
  long long now = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  for (int i = 0; i < count; ++i) {
    nvmlFieldValue_t* v = &values[i];
    v->timestamp = now;
    v->latencyUsec = 0;
    v->value.ullVal = 0;
    v->nvmlReturn = FieldValue(st, *g, v);
  }
  return NVML_SUCCESS;
}
