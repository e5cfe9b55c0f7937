#include "probe/nvml.h"

#include <dlfcn.h>

#include <type_traits>

namespace p2ptrace::probe {

const NvmlApi* LoadNvml() {
  static const NvmlApi* api = []() -> const NvmlApi* {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    auto* n = new NvmlApi;  // never freed, as the library is never closed
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    };
    sym(n->Init, "nvmlInit_v2");
    sym(n->Shutdown, "nvmlShutdown");
    sym(n->GetCount, "nvmlDeviceGetCount_v2");
    sym(n->GetHandle, "nvmlDeviceGetHandleByIndex_v2");
    sym(n->GetName, "nvmlDeviceGetName");
    sym(n->GetUuid, "nvmlDeviceGetUUID");
    sym(n->GetPci, "nvmlDeviceGetPciInfo_v3");
    sym(n->GetP2P, "nvmlDeviceGetP2PStatus");
    sym(n->GetAncestor, "nvmlDeviceGetTopologyCommonAncestor");
    sym(n->GetLinkState, "nvmlDeviceGetNvLinkState");
    sym(n->GetLinkRemote, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    sym(n->GetMig, "nvmlDeviceGetMigMode");
    sym(n->GetVirt, "nvmlDeviceGetVirtualizationMode");
    sym(n->CurGen, "nvmlDeviceGetCurrPcieLinkGeneration");
    sym(n->MaxGen, "nvmlDeviceGetMaxPcieLinkGeneration");
    sym(n->CurWidth, "nvmlDeviceGetCurrPcieLinkWidth");
    sym(n->MaxWidth, "nvmlDeviceGetMaxPcieLinkWidth");
    sym(n->NvLinkErrorCounter, "nvmlDeviceGetNvLinkErrorCounter");
    sym(n->NvLinkVersion, "nvmlDeviceGetNvLinkVersion");
    sym(n->FieldValues, "nvmlDeviceGetFieldValues");
    sym(n->PcieReplay, "nvmlDeviceGetPcieReplayCounter");
    sym(n->DriverVersion, "nvmlSystemGetDriverVersion");
    sym(n->GetHandleByPciBusId, "nvmlDeviceGetHandleByPciBusId_v2");
    sym(n->GetComputeProcesses, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (n->GetComputeProcesses == nullptr) sym(n->GetComputeProcesses, "nvmlDeviceGetComputeRunningProcesses_v2");
    return n;
  }();
  return api;
}

}  // namespace p2ptrace::probe
