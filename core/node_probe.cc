#include "core/node_probe.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "core/causes.h"
#include "core/nccl_net.h"
#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace {

const ProbedGpu* NodeProbe::Gpu(int index) const {
  for (const ProbedGpu& g : gpus)
    if (g.index == index) return &g;
  return nullptr;
}

const ProbedPair* NodeProbe::Pair(int a, int b) const {
  for (const ProbedPair& p : pairs)
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return &p;
  return nullptr;
}

std::string PathBetween(const PciPlace& a, const PciPlace& b) {
  if (a.root.empty() || b.root.empty()) return "";
  if (a.root == b.root) {
    for (size_t i = 0; i < a.bridges.size(); ++i)
      for (size_t j = 0; j < b.bridges.size(); ++j)
        if (a.bridges[i] == b.bridges[j]) return i == 0 && j == 0 ? "PIX" : "PXB";
    return "PHB";
  }
  if (a.numa_node >= 0 && a.numa_node == b.numa_node) return "NODE";
  return "SYS";
}

DmaBuf DmaBufSupport(const NodeProbe& probe) {
  DmaBuf d;
  int major = 0, minor = 0;
  bool read = std::sscanf(probe.kernel_release.c_str(), "%d.%d", &major, &minor) == 2;
  std::string kernel = "Linux " + probe.kernel_release.substr(0, probe.kernel_release.find('-'));
  if (read && (major < 5 || (major == 5 && minor < 12))) return {false, kernel + " is older than 5.12"};
  if (probe.open_kernel_module && !*probe.open_kernel_module)
    return {false, "the NVIDIA driver is the proprietary kernel module (/proc/driver/nvidia/version), not the open one"};
  if (!read || !probe.open_kernel_module) {
    d.why = !read ? "the kernel's release was not read" : "the NVIDIA driver's flavour was not read";
    return d;
  }
  return {true, kernel + " and the open GPU kernel modules"};
}

std::vector<const NodeProbe::Nic*> NcclNics(const NodeProbe& probe) {
  auto hca = probe.env.find("NCCL_IB_HCA");
  std::vector<const NodeProbe::Nic*> out;
  for (const NodeProbe::Nic& n : probe.nics)
    if (hca == probe.env.end() || IbHcaSelects(hca->second, n.name)) out.push_back(&n);
  return out;
}

std::vector<GpuNic> NearestNics(const NodeProbe& probe, bool nccl_selected) {
  std::vector<const NodeProbe::Nic*> nics;
  if (nccl_selected) nics = NcclNics(probe);
  else
    for (const NodeProbe::Nic& n : probe.nics) nics.push_back(&n);
  bool any_active = std::any_of(nics.begin(), nics.end(), [](const NodeProbe::Nic* n) { return n->state == "ACTIVE"; });
  std::vector<GpuNic> out;
  for (const ProbedGpu& g : probe.gpus) {
    if (g.hostname && *g.hostname != probe.hostname) continue;  // another host's GPU, told by its rank
    GpuNic best{.gpu = g.index};
    std::optional<PathType> best_type;
    for (const NodeProbe::Nic* nic : nics) {
      const NodeProbe::Nic& n = *nic;
      size_t i = static_cast<size_t>(nic - probe.nics.data());
      if (any_active && n.state != "ACTIVE") continue;
      std::string path = PathBetween(g.Place(), n.pci);
      std::optional<PathType> type = ParsePathType(path);
      if (!type || (best_type && *type >= *best_type)) continue;
      best = {g.index, static_cast<int>(i), path};
      best_type = type;
    }
    out.push_back(best);
  }
  return out;
}

std::string AcsCommand(const std::vector<std::string>& bridges) {
  if (bridges.empty()) return "sudo lspci -vvv | grep -B5 -A10 'Access Control Services'";
  std::string cmd;
  for (const std::string& b : bridges)
    cmd += (cmd.empty() ? "" : "; ") + std::string("sudo lspci -vvv -s ") + b + " | grep -A3 'Access Control Services'";
  return cmd;
}

namespace {

// Grace Blackwell (GB200, GB300) before driver R595: a PCIe NIC reaching GPU memory through DMA-BUF
// (EFA, or any NIC without nvidia_peermem) needs NVreg_GrdmaPciTopoCheckOverride=1, else the driver
// refuses the mapping ("dma-buf attach failed: topology not supported for mapping type FORCE_PCIE")
// and NCCL falls back to sockets (NVIDIA AICR's GB200 NET preflight). From R595 the knob is gone and
// the driver applies a PCIe topology rule of its own, which the probe cannot check: nothing is said.
void GraceBlackwellCheck(const NodeProbe& probe, bool peermem, bool dmabuf_used, NodeFacts* f) {
  if (peermem || !dmabuf_used || probe.regkeys.grdma_topo_check_override.value_or(0) == 1) return;
  const ProbedGpu* grace = nullptr;
  for (const ProbedGpu& g : probe.gpus)
    if (!grace && (g.name.find("GB200") != std::string::npos || g.name.find("GB300") != std::string::npos)) grace = &g;
  int driver = std::atoi(probe.driver_version.c_str());
  if (grace == nullptr || driver >= 595) return;
  f->net_blocker = "grdma-topo-check";
  f->net_blocker_evidence =
      "GPU" + std::to_string(grace->index) + " is an " + grace->name + " on driver " +
      (probe.driver_version.empty() ? std::string("(version not read; assumed before R595)") : probe.driver_version) +
      "; GPUDirect RDMA would come through DMA-BUF (no nvidia_peermem); /proc/driver/nvidia/params " +
      (probe.regkeys.grdma_topo_check_override ? "has GrdmaPciTopoCheckOverride: " + std::to_string(*probe.regkeys.grdma_topo_check_override)
                                               : std::string("does not set GrdmaPciTopoCheckOverride"));
}

// Whether NCCL's NIC can reach this node's GPU memory, as NCCL decides it: a peer-memory client
// (nvidia_peermem registered with the RDMA core; from 2.23 the loaded module alone), or from 2.13
// DMA-BUF unless NCCL_DMABUF_ENABLE=0. Unset where the node has no RDMA NIC.
void GdrFacts(const NodeProbe& probe, NodeFacts* f) {
  if (!probe.rdma_nics || !*probe.rdma_nics) return;
  NcclVersion v = probe.nccl_version.value_or(kNewestNcclRules);
  bool peermem = probe.peermem_registered || (probe.peermem_loaded && v >= NcclVersion{2, 23, 0});
  DmaBuf dmabuf = DmaBufSupport(probe);
  auto off = probe.env.find("NCCL_DMABUF_ENABLE");
  bool dmabuf_off = off != probe.env.end() && off->second == "0";
  bool dmabuf_used = v >= NcclVersion{2, 13, 0} && dmabuf.possible.value_or(false) && !dmabuf_off;
  f->gdr = peermem || dmabuf_used;
  GraceBlackwellCheck(probe, peermem, dmabuf_used, f);
  if (*f->gdr) return;
  std::string why_not_dmabuf = v < NcclVersion{2, 13, 0} ? "NCCL " + VersionText(v) + " predates DMA-BUF (2.13)"
                               : dmabuf_off                ? "NCCL_DMABUF_ENABLE=0"
                               : dmabuf.possible           ? dmabuf.why
                                                           : "DMA-BUF not established: " + dmabuf.why;
  if (probe.peermem_loaded) {  // loaded, never registered: NCCL before 2.23 looks only at the registration
    f->gdr_cause = "peermem-not-registered";
    f->gdr_evidence = "nvidia_peermem is loaded (/sys/module/nvidia_peermem) but not registered with the RDMA core "
                      "(no /sys/kernel/mm/memory_peers/nv_mem); no DMA-BUF: " + why_not_dmabuf;
  } else {
    f->gdr_cause = "gdr-no-module";
    f->gdr_evidence = "nvidia_peermem is not loaded (/sys/module/nvidia_peermem, /sys/kernel/mm/memory_peers); no DMA-BUF: " +
                      why_not_dmabuf;
  }
}

}  // namespace

NodeFacts FactsFromProbe(const NodeProbe& probe) {
  NodeFacts f;
  f.cpu_vendor = probe.cpu_vendor;
  f.env = probe.env;
  f.iommu = probe.iommu;
  f.virtualization = probe.virtualization;
  f.rdma_nics = probe.rdma_nics;
  // NCCL's devices: the NICs NCCL_IB_HCA selects; usable when one has an active port.
  std::vector<const NodeProbe::Nic*> selected = NcclNics(probe);
  std::string names;
  for (const NodeProbe::Nic& n : probe.nics) names += (names.empty() ? "" : ", ") + n.name;
  if (!probe.nics.empty() && selected.empty()) {
    f.rdma_usable = false;
    f.rdma_evidence = "NCCL_IB_HCA=" + probe.env.at("NCCL_IB_HCA") + " selects none of this node's RDMA NICs (" + names + ")";
  } else if (!selected.empty() && std::all_of(selected.begin(), selected.end(), [](const NodeProbe::Nic* n) { return !n->state.empty(); })) {
    f.rdma_usable = std::any_of(selected.begin(), selected.end(), [](const NodeProbe::Nic* n) { return n->state == "ACTIVE"; });
    f.rdma_evidence = "no active RDMA port:";
    for (const NodeProbe::Nic* n : selected) f.rdma_evidence += (n == selected.front() ? " " : ", ") + n->name + " port 1: " + n->state;
  }
  GdrFacts(probe, &f);
  f.communicator = probe.communicator;
  f.nccl_version = probe.nccl_version;
  f.nccl_version_note = probe.nccl_version_note;
  for (const ProbeStep& s : probe.steps)
    if (s.status == "ok") f.sources.push_back(s.name);
  for (const ProbedGpu& g : probe.gpus) {
    GpuFacts gf;
    gf.index = g.index;
    gf.name = g.name;
    gf.bus_id = g.bus_id;
    if (!g.name.empty()) gf.consumer = IsConsumerGpu(g.name);
    gf.mig = g.mig;
    gf.pcie = g.pcie;
    gf.hostname = g.hostname ? g.hostname : std::optional<std::string>(probe.hostname);
    gf.boot_id = g.boot_id ? g.boot_id : std::optional<std::string>(probe.boot_id);
    if (gf.hostname && gf.hostname->empty()) gf.hostname.reset();
    if (gf.boot_id && gf.boot_id->empty()) gf.boot_id.reset();
    gf.shm_dev = g.shm_dev ? g.shm_dev : probe.shm_dev;
    gf.shm_bytes = g.shm_bytes ? g.shm_bytes : probe.shm_bytes;
    f.gpus.push_back(std::move(gf));
  }
  for (const GpuNic& gn : NearestNics(probe))
    for (GpuFacts& gf : f.gpus)
      if (gf.index == gn.gpu && gn.nic >= 0) {
        gf.nic = probe.nics[gn.nic].name;
        gf.nic_path = ParsePathType(gn.path);
      }
  for (const ProbedPair& p : probe.pairs) {
    PairFacts pf;
    pf.a = p.a;
    pf.b = p.b;
    pf.link = p.link;
    pf.nvlinks_present = p.nvlinks_present;
    pf.nvlinks_active = p.nvlinks_active;
    pf.nvml_read = p.nvml_read;
    pf.nvml_write = p.nvml_write;
    pf.cuda_can_access = p.cuda_can_access;
    pf.acs_redirect = p.acs_redirect;
    pf.split_iommu_groups = p.split_iommu_groups;
    f.pairs.push_back(std::move(pf));
  }
  return f;
}

Prediction PredictNode(const NodeProbe& probe, bool cuda_copies) {
  NodeFacts facts = FactsFromProbe(probe);
  facts.cuda_copies = cuda_copies;
  Prediction pred = Predict(facts);
  for (PairPrediction& pp : pred.pairs) {
    const ProbedPair* pr = probe.Pair(pp.a, pp.b);
    const ProbedGpu* ga = probe.Gpu(pp.a);
    const ProbedGpu* gb = probe.Gpu(pp.b);
    for (CauseHit& c : pp.causes) {
      if (c.id == "nvml-p2p-status" && !probe.regkeys.evidence.empty()) {
        bool applies = probe.regkeys.p2p_disabled_all;
        for (const ProbedGpu* g : {ga, gb})
          if (g && std::find(probe.regkeys.p2p_disabled.begin(), probe.regkeys.p2p_disabled.end(), g->bus_id) !=
                       probe.regkeys.p2p_disabled.end())
            applies = true;
        if (applies) c.evidence.push_back("/proc/driver/nvidia/params " + probe.regkeys.evidence);
      } else if (c.id == "iommu-enabled") {
        std::string ev = "/proc/cmdline";
        ev += probe.cmdline.iommu_tokens.empty() ? " names no IOMMU mode" : ": " + probe.cmdline.iommu_tokens;
        for (const ProbedGpu* g : {ga, gb})
          if (g && !g->iommu_group_type.empty()) {
            ev += "; GPU" + std::to_string(g->index) + "'s IOMMU group " + std::to_string(g->iommu_group) + " has type " +
                  g->iommu_group_type;
            break;
          }
        c.evidence.push_back(ev);
      } else if (c.id == "acs-suspected" && pr) {
        std::vector<std::string> bridges;
        for (const ProbedGpu* g : {ga, gb})
          if (g)
            for (const std::string& b : g->bridges)
              if (std::find(bridges.begin(), bridges.end(), b) == bridges.end()) bridges.push_back(b);
        if (ga && gb)
          c.evidence.push_back("GPU" + std::to_string(ga->index) + " is in IOMMU group " + std::to_string(ga->iommu_group) +
                               ", GPU" + std::to_string(gb->index) + " in group " + std::to_string(gb->iommu_group) +
                               " although they share a PCIe switch");
        c.evidence.push_back("ACS control unknown (config space not readable); run: " + AcsCommand(bridges));
      } else if (c.id == "acs-redirect" && pr && !pr->acs_bridges.empty()) {
        std::string list;
        for (const std::string& b : pr->acs_bridges) list += (list.empty() ? "" : ", ") + b;
        c.evidence.push_back("ACSCtl ReqRedir+/CmpltRedir+ on bridge " + list + " (read from its config space)");
      } else if (c.id == "virtualized" && !probe.virtualization_evidence.empty()) {
        c.evidence.push_back(probe.virtualization_evidence);
      }
    }
  }
  return pred;
}

}  // namespace p2ptrace
