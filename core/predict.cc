#include "core/predict.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/fields.h"
#include "core/vocabulary.h"
#include "p2ptrace/vocabulary.h"

namespace p2ptrace {
namespace {

// Below /dev/shm of this size NCCL's SHM buffers for a few peers and channels do not fit (Docker's
// default is 64 MiB; NVIDIA's container guides ask for 1 GiB).
constexpr uint64_t kMinShmBytes = 512ull << 20;

// How bad a class is for a GPU pair (DESIGN.md §5 order), to tell a fallback.
int Rank(int transport) {
  switch (transport) {
    case P2PTRACE_TRANSPORT_NVLINK: return 1;
    case P2PTRACE_TRANSPORT_PCIE_P2P: return 2;
    case P2PTRACE_TRANSPORT_P2P: return 2;
    case P2PTRACE_TRANSPORT_P2P_INDIRECT: return 3;
    case P2PTRACE_TRANSPORT_SHM: return 4;
    case P2PTRACE_TRANSPORT_HOST_STAGED: return 5;
    case P2PTRACE_TRANSPORT_NET_GDR: return 6;
    case P2PTRACE_TRANSPORT_NET_IB: return 7;
    case P2PTRACE_TRANSPORT_NET_SOCKET: return 8;
    default: return 0;
  }
}

struct Rules {
  NcclVersion version;
  CpuVendor vendor = CpuVendor::kUnknown;
  bool intel_old = false;
  int gpu_count = 0;
};

struct Level {
  NcclLevel level = NcclLevel::kSYS;
  enum { kDisable, kEnv, kDefault } source = kDefault;
  std::string why;
};

const std::string* Env(const NodeFacts& f, const std::string& name) {
  auto it = f.env.find(name);
  return it == f.env.end() ? nullptr : &it->second;
}

std::string VendorText(const Rules& r) {
  if (r.vendor == CpuVendor::kIntel && r.intel_old) return "Intel Broadwell or older";
  if (r.vendor == CpuVendor::kUnknown) return "a CPU of unknown vendor";
  return std::string(r.vendor == CpuVendor::kIntel ? "Intel" : r.vendor == CpuVendor::kAmd ? "AMD"
                     : r.vendor == CpuVendor::kArm ? "ARM" : "Zhaoxin");
}

// NCCL's default P2P level by release (src/graph/paths.cc of each release tag).
Level DefaultLevel(const Rules& r) {
  Level l;
  const NcclVersion& v = r.version;
  std::string on = "NCCL " + VersionText(v) + "'s default on " + VendorText(r);
  bool intel = r.vendor == CpuVendor::kIntel, arm = r.vendor == CpuVendor::kArm;
  if (v < NcclVersion{2, 7, 0}) {
    l.level = (intel && r.intel_old) || arm ? NcclLevel::kPXB : NcclLevel::kSYS;
  } else if (v < NcclVersion{2, 9, 6}) {
    l.level = intel ? (r.intel_old ? NcclLevel::kPXB : NcclLevel::kPHB) : arm ? NcclLevel::kPXB : NcclLevel::kSYS;
  } else if (v < NcclVersion{2, 23, 4}) {
    l.level = intel || arm || r.vendor == CpuVendor::kZhaoxin ? NcclLevel::kPXB : NcclLevel::kSYS;
  } else {
    bool amd_small = r.vendor == CpuVendor::kAmd && r.gpu_count <= 2;
    l.level = amd_small ? NcclLevel::kSYS : NcclLevel::kPXB;
    if (r.vendor == CpuVendor::kAmd) on += " with " + std::to_string(r.gpu_count) + " GPUs";
  }
  l.why = std::string(NcclLevelName(l.level)) + " (" + on + ")";
  return l;
}

Level P2pLevel(const NodeFacts& f, const Rules& r) {
  if (const std::string* d = Env(f, "NCCL_P2P_DISABLE"); d && ToInt(*d, 0) == 1)
    return {NcclLevel::kLOC, Level::kDisable, "LOC (NCCL_P2P_DISABLE=" + *d + ")"};
  if (const std::string* s = Env(f, "NCCL_P2P_LEVEL"))
    if (auto l = ParseNcclLevel(*s)) return {*l, Level::kEnv, std::string(NcclLevelName(*l)) + " (NCCL_P2P_LEVEL=" + *s + ")"};
  Level l = DefaultLevel(r);
  // The version was assumed: say so where the level is named, and why when told.
  if (!f.nccl_version && !f.nccl_version_note.empty() && !l.why.empty() && l.why.back() == ')')
    l.why.insert(l.why.size() - 1, "; " + f.nccl_version_note);
  return l;
}

std::string Gpu(int i) { return "GPU" + std::to_string(i); }

bool IsConsumer(const GpuFacts* g) {
  if (g == nullptr) return false;
  if (g->consumer) return *g->consumer;
  return !g->name.empty() && IsConsumerGpu(g->name);
}

// The worst known NVML status of the pair (non-OK beats OK beats unknown).
P2pStatus WorstStatus(const PairFacts& p) {
  for (P2pStatus s : {p.nvml_read, p.nvml_write})
    if (s != P2pStatus::kUnknown && s != P2pStatus::kOk) return s;
  if (p.nvml_read == P2pStatus::kOk || p.nvml_write == P2pStatus::kOk) return P2pStatus::kOk;
  return P2pStatus::kUnknown;
}

class PairPredictor {
 public:
  PairPredictor(const NodeFacts& f, const Rules& r, int a, int b) : f_(f), r_(r) {
    out_.a = a;
    out_.b = b;
    if (const PairFacts* p = f.Pair(a, b)) pf_ = *p;
    pf_.a = a;
    pf_.b = b;
    out_.link = pf_.link;
    path_ = ParsePathType(pf_.link);
    // NVLink (direct or through NVSwitches) carries NCCL's and CUDA's P2P whatever the PCIe path
    // between the GPUs (another socket, SYS) and whatever the P2P level says of that path.
    nv_ = path_ == PathType::kNVLink || (pf_.nvlinks_active && *pf_.nvlinks_active > 0);
    if (nv_ && path_ != PathType::kNVLink) {
      out_.link = pf_.link = "NV" + std::to_string(std::max(pf_.nvlinks_present.value_or(0), *pf_.nvlinks_active));
      path_ = PathType::kNVLink;
    }
    ga_ = f.Gpu(a);
    gb_ = f.Gpu(b);
  }

  // A CUDA peer copy: direct when the driver allows peer access (MIG never does), else staged
  // through host memory by the driver.
  PairPrediction RunCudaCopies() {
    out_.level = "not used by CUDA copies";
    bool mig = false;
    for (const GpuFacts* g : {ga_, gb_})
      if (g && g->mig && *g->mig) {
        Add("mig-enabled", "decided", {Gpu(g->index) + " has MIG mode on"});
        mig = true;
      }
    bool direct = !mig && PeerChecks();
    out_.transport = direct ? out_.best : static_cast<int>(P2PTRACE_TRANSPORT_HOST_STAGED);
    if (direct) Risks();
    out_.fallback = Rank(out_.transport) > Rank(out_.best);
    out_.impact = ImpactText(out_.transport, out_.best, out_.link, 0);
    return out_;
  }

  PairPrediction Run() {
    out_.best = nv_ ? P2PTRACE_TRANSPORT_NVLINK : path_ ? P2PTRACE_TRANSPORT_PCIE_P2P : P2PTRACE_TRANSPORT_P2P;
    if (f_.cuda_copies) return RunCudaCopies();
    bool same_node = SameNode();
    if (other_node_)
      out_.best = f_.rdma_nics && *f_.rdma_nics ? P2PTRACE_TRANSPORT_NET_GDR : P2PTRACE_TRANSPORT_NET_SOCKET;
    bool p2p = same_node && P2pAllowed();
    if (p2p) {
      out_.transport = out_.best;
      Risks();
    } else if (!unknown_.empty()) {
      out_.transport = P2PTRACE_TRANSPORT_UNKNOWN;
    } else {
      NotP2p(same_node);
    }
    if (path_ && !nv_) Add("no-nvlink", "context", {"the matrix shows " + pf_.link + " between " + Gpu(out_.a) + " and " + Gpu(out_.b)});
    out_.fallback = Rank(out_.transport) > Rank(out_.best);
    bool explained = std::any_of(out_.causes.begin(), out_.causes.end(),
                                 [](const CauseHit& c) { return c.role == "decided"; });
    if ((out_.fallback && !explained) || out_.transport == P2PTRACE_TRANSPORT_UNKNOWN) {
      std::vector<std::string> ev = unknown_;
      std::string checked = "checked:";
      for (const std::string& s : f_.sources) checked += " " + s + ";";
      checked += " the P2P level " + out_.level;
      ev.push_back(checked);
      Add("unknown", "decided", ev);
    }
    int gen = 0;
    for (const GpuFacts* g : {ga_, gb_})
      if (g && g->pcie.gen > 0) gen = gen == 0 ? g->pcie.gen : std::min(gen, g->pcie.gen);
    out_.impact = ImpactText(out_.transport, out_.best, out_.link, gen);
    return out_;
  }

 private:
  void Add(std::string id, std::string role, std::vector<std::string> evidence) {
    for (CauseHit& c : out_.causes)
      if (c.id == id) {
        c.evidence.insert(c.evidence.end(), evidence.begin(), evidence.end());
        return;
      }
    out_.causes.push_back({std::move(id), std::move(role), std::move(evidence)});
  }

  // NCCL's host hash (hostname + boot_id, or NCCL_HOSTID) and /dev/shm device must match for P2P and SHM.
  bool SameNode() {
    if (!ga_ || !gb_) return true;
    // Another machine altogether (hostname and boot id both differ): the network is the best path.
    if (ga_->hostname && gb_->hostname && *ga_->hostname != *gb_->hostname && ga_->boot_id && gb_->boot_id &&
        *ga_->boot_id != *gb_->boot_id && Env(f_, "NCCL_HOSTID") == nullptr) {
      other_node_ = true;
      return false;
    }
    bool same = true;
    if (Env(f_, "NCCL_HOSTID") == nullptr) {
      if (ga_->hostname && gb_->hostname && *ga_->hostname != *gb_->hostname) {
        Add("container-separate-host", "decided",
            {Gpu(out_.a) + "'s rank sees hostname '" + *ga_->hostname + "', " + Gpu(out_.b) + "'s '" + *gb_->hostname + "'"});
        same = false;
      }
      if (ga_->boot_id && gb_->boot_id && *ga_->boot_id != *gb_->boot_id) {
        Add("container-separate-host", "decided",
            {"boot_id differs: " + *ga_->boot_id + " vs " + *gb_->boot_id});
        same = false;
      }
    }
    if (ga_->shm_dev && gb_->shm_dev && *ga_->shm_dev != *gb_->shm_dev) {
      Add("container-separate-shm", same ? "decided" : "contributes",
          {"/dev/shm is device " + std::to_string(*ga_->shm_dev) + " for " + Gpu(out_.a) + "'s rank and " +
           std::to_string(*gb_->shm_dev) + " for " + Gpu(out_.b) + "'s"});
      same = false;
    }
    return same;
  }

  bool P2pAllowed() {
    for (const GpuFacts* g : {ga_, gb_})
      if (g && g->mig && *g->mig) {
        Add("mig-enabled", "decided", {Gpu(g->index) + " has MIG mode on"});
        return false;
      }
    Level l = P2pLevel(f_, r_);
    out_.level = l.why;
    if (l.level == NcclLevel::kLOC) {
      if (l.source == Level::kDisable) {
        Add("env-p2p-disabled", "decided", {"NCCL_P2P_DISABLE=" + *Env(f_, "NCCL_P2P_DISABLE")});
        if (const std::string* lv = Env(f_, "NCCL_P2P_LEVEL"))
          out_.causes.back().evidence.push_back("NCCL_P2P_LEVEL=" + *lv + " is ignored: NCCL reads NCCL_P2P_DISABLE first");
      } else {
        Add("env-p2p-level", "decided", {"NCCL_P2P_LEVEL=" + *Env(f_, "NCCL_P2P_LEVEL") + " (LOC: no P2P at all)"});
      }
      return false;
    }
    if (!path_) {
      if (l.level == NcclLevel::kSYS) return PeerChecks();  // every path is within SYS
      unknown_.push_back("the matrix has no cell for " + Gpu(out_.a) + "-" + Gpu(out_.b) +
                         " (cut off), and the P2P level " + l.why + " decides by the path");
      return false;
    }
    NcclLevel need = LevelOfPath(*path_);
    if (need > l.level) {
      std::string ev = "path " + pf_.link + (*path_ == PathType::kNODE ? " (NCCL: PHB)" : "") +
                       " is beyond the P2P level " + l.why;
      Add(l.source == Level::kEnv ? "env-p2p-level" : "topology-beyond-p2p-level", "decided", {ev});
      return false;
    }
    return PeerChecks();
  }

  // NVML (NCCL >= 2.12) and CUDA's peer check, then what stands behind a refusal.
  bool PeerChecks() {
    bool refused = false;
    P2pStatus st = WorstStatus(pf_);
    bool ignore = Env(f_, "NCCL_IGNORE_DISABLED_P2P") && ToInt(*Env(f_, "NCCL_IGNORE_DISABLED_P2P"), 0) != 0;
    if (st != P2pStatus::kUnknown && st != P2pStatus::kOk && !ignore) {
      std::string ev = "NVML P2P status " + std::string(P2pStatusCode(st)) + " (" + std::string(P2pStatusMeaning(st)) +
                       ") between " + Gpu(out_.a) + " and " + Gpu(out_.b);
      if (r_.version < NcclVersion{2, 12, 0} && !f_.cuda_copies)
        ev += "; NCCL " + VersionText(r_.version) + " does not ask NVML, but CUDA's peer check follows the same driver status";
      if (nv_ && r_.version >= NcclVersion{2, 12, 0} && !f_.cuda_copies) {
        out_.init_error = true;
        ev += "; NCCL stops with `P2P is disabled between NVLINK connected GPUs` (NCCL_IGNORE_DISABLED_P2P=1 goes on)";
      }
      Add("nvml-p2p-status", "decided", {ev});
      refused = true;
    }
    if (pf_.cuda_can_access && !*pf_.cuda_can_access) {
      Add("cuda-no-peer-access", refused ? "contributes" : "decided",
          // The node's GPU names, not call arguments: the process's CUDA ordinals may differ.
          {"cudaDeviceCanAccessPeer says 0 between " + Gpu(out_.a) + " and " + Gpu(out_.b)});
      refused = true;
    }
    bool consumer = !nv_ && (IsConsumer(ga_) || IsConsumer(gb_));
    bool status_known = st != P2pStatus::kUnknown || pf_.cuda_can_access.has_value();
    if (consumer) {
      std::string who = IsConsumer(ga_) ? Gpu(out_.a) : Gpu(out_.b);
      const GpuFacts* g = IsConsumer(ga_) ? ga_ : gb_;
      std::string ev = who + (g && !g->name.empty() ? " is a " + g->name : " is a GeForce/TITAN board");
      if (!status_known) {
        ev += " (assumed: the stock driver reports GNS; a patched driver may allow P2P)";
        Add("consumer-gpu", "decided", {ev});
        refused = true;
      } else if (refused) {
        Add("consumer-gpu", "contributes", {ev});
      }
    }
    if (f_.virtualization && *f_.virtualization != Virtualization::kNone) {
      std::string ev = *f_.virtualization == Virtualization::kVgpu ? "the GPUs are vGPUs" : "the GPUs are passed through to a VM";
      if (refused) Add("virtualized", "contributes", {ev});
      else if (st == P2pStatus::kUnknown && !nv_)
        Add("virtualized", "risk", {ev + "; VMs usually report P2P as NS/CNS: check `nvidia-smi topo -p2p r`"});
    }
    if (refused && !nv_) {
      if (f_.iommu == IommuMode::kTranslating) Add("iommu-enabled", "contributes", {"the kernel's IOMMU translates DMA"});
      if (pf_.acs_redirect && *pf_.acs_redirect) Add("acs-redirect", "contributes", {"ACS redirects requests on a bridge between them"});
    }
    return !refused;
  }

  // The pair uses P2P: what may still make it hang or crawl.
  void Risks() {
    if (!nv_) {
      if (pf_.acs_redirect && *pf_.acs_redirect)
        Add("acs-redirect", "risk", {"a PCIe bridge between " + Gpu(out_.a) + " and " + Gpu(out_.b) + " has ACS redirect on"});
      else if (!pf_.acs_redirect && pf_.split_iommu_groups && *pf_.split_iommu_groups)
        Add("acs-suspected", "risk", {"the GPUs sit in different IOMMU groups; ACS control is not readable without root"});
      if (f_.iommu == IommuMode::kTranslating)
        Add("iommu-enabled", "risk", {"the kernel's IOMMU translates DMA (intel_iommu/amd_iommu on without iommu=pt)"});
      for (const GpuFacts* g : {ga_, gb_})
        if (g && g->pcie.max_gen > 0 && (g->pcie.gen < g->pcie.max_gen || g->pcie.width < g->pcie.max_width))
          Add("pcie-downtrained", "risk",
              {Gpu(g->index) + " runs PCIe Gen" + std::to_string(g->pcie.gen) + " x" + std::to_string(g->pcie.width) +
               " of Gen" + std::to_string(g->pcie.max_gen) + " x" + std::to_string(g->pcie.max_width)});
    } else {
      int present = pf_.nvlinks_present.value_or(0);
      if (pf_.nvlinks_active && present > 0 && *pf_.nvlinks_active < present)
        Add("nvlink-down", "risk",
            {std::to_string(*pf_.nvlinks_active) + " of " + std::to_string(present) + " NVLinks active"});
    }
    if (pf_.measured_gbps) {
      Bandwidth want = ExpectedBandwidth(out_.transport, out_.link, 0);
      if (want.low > 0 && *pf_.measured_gbps < 0.5 * want.low)
        Add("p2p-degraded", "risk",
            {"measured " + std::to_string(static_cast<int>(*pf_.measured_gbps)) + " GB/s where " + want.basis +
             " should carry about " + std::to_string(static_cast<int>(want.low))});
    }
  }

  void NotP2p(bool same_node) {
    const std::string* shm_off = Env(f_, "NCCL_SHM_DISABLE");
    bool shm_disabled = shm_off && ToInt(*shm_off, 0) == 1;
    if (same_node && !shm_disabled) {
      out_.transport = P2PTRACE_TRANSPORT_SHM;
      for (const GpuFacts* g : {ga_, gb_})
        if (g && g->shm_bytes && *g->shm_bytes < kMinShmBytes) {
          Add("shm-too-small", "risk",
              {"/dev/shm of " + Gpu(g->index) + "'s rank is " + std::to_string(*g->shm_bytes >> 20) + " MiB"});
          break;
        }
      return;
    }
    if (shm_disabled) Add("env-shm-disabled", same_node ? "decided" : "context", {"NCCL_SHM_DISABLE=" + *shm_off});
    // The network: sockets unless an RDMA HCA is usable; GPUDirect RDMA when loaded and allowed.
    const std::string* ib_off = Env(f_, "NCCL_IB_DISABLE");
    if (ib_off && ToInt(*ib_off, 0) == 1) {
      out_.transport = P2PTRACE_TRANSPORT_NET_SOCKET;
      Add("env-ib-disabled", other_node_ ? "decided" : "contributes", {"NCCL_IB_DISABLE=" + *ib_off});
      return;
    }
    if (!f_.rdma_nics || !*f_.rdma_nics) {
      out_.transport = P2PTRACE_TRANSPORT_NET_SOCKET;
      return;
    }
    if (!f_.net_blocker.empty()) {
      out_.transport = P2PTRACE_TRANSPORT_NET_SOCKET;
      Add(f_.net_blocker, other_node_ ? "decided" : "contributes", {f_.net_blocker_evidence});
      return;
    }
    if (f_.rdma_usable && !*f_.rdma_usable) {  // NICs there, no port up: NCCL finds no device
      out_.transport = P2PTRACE_TRANSPORT_NET_SOCKET;
      Add("net-no-rdma-device", other_node_ ? "decided" : "contributes", {f_.rdma_evidence});
      return;
    }
    const std::string* gdr_level = Env(f_, "NCCL_NET_GDR_LEVEL");
    if (gdr_level && ParseNcclLevel(*gdr_level) == NcclLevel::kLOC) {
      out_.transport = P2PTRACE_TRANSPORT_NET_IB;
      Add("env-gdr-disabled", other_node_ ? "decided" : "contributes", {"NCCL_NET_GDR_LEVEL=" + *gdr_level});
      return;
    }
    if (f_.gdr && !*f_.gdr) {
      out_.transport = P2PTRACE_TRANSPORT_NET_IB;
      Add(f_.gdr_cause.empty() ? "no-gdr" : f_.gdr_cause, other_node_ ? "decided" : "contributes",
          {f_.gdr_evidence.empty() ? "no nvidia_peermem/dmabuf GPUDirect RDMA on this node" : f_.gdr_evidence});
      return;
    }
    if (std::string far = GdrTooFar(gdr_level); !far.empty()) {
      out_.transport = P2PTRACE_TRANSPORT_NET_IB;
      Add("gdr-distance", other_node_ ? "decided" : "contributes", {far});
      return;
    }
    out_.transport = f_.gdr ? P2PTRACE_TRANSPORT_NET_GDR : P2PTRACE_TRANSPORT_NET_IB;
  }

  // NCCL_NET_GDR_LEVEL against the PCIe path between a GPU of the pair and its NIC (its PXN relay's,
  // where it has one): from 2.6 GDR needs the path within the level (default PXB); 2.4-2.5 needed
  // it closer than the level (default PHB), the same paths by default. "" when GDR is allowed or the
  // placement is not known.
  std::string GdrTooFar(const std::string* env_level) const {
    bool old = r_.version < NcclVersion{2, 6, 0};
    std::optional<NcclLevel> user = env_level ? ParseNcclLevel(*env_level) : std::nullopt;
    NcclLevel level = user ? *user : old ? NcclLevel::kPHB : NcclLevel::kPXB;
    auto within = [&](PathType t) { return old ? LevelOfPath(t) < level : LevelOfPath(t) <= level; };
    for (const GpuFacts* g : {ga_, gb_}) {
      if (!g || !g->nic_path) continue;
      const GpuFacts* relay = f_.Gpu(PxnRelay(f_, g->index, r_.version));
      PathType distance = relay ? *relay->nic_path : *g->nic_path;
      if (within(distance)) continue;
      bool nvlinks_known = std::find(f_.sources.begin(), f_.sources.end(), "NVML") != f_.sources.end();
      return Gpu(g->index) + " and " + g->nic + ", the RDMA NIC NCCL pairs it with, are " + std::string(PathTypeName(*g->nic_path)) +
             " apart, beyond NCCL_NET_GDR_LEVEL " + std::string(NcclLevelName(level)) +
             (user ? " (set by the environment)" : " (NCCL " + VersionText(r_.version) + "'s default)") +
             (relay ? "; through " + Gpu(relay->index) + " (PXN) it is " + std::string(PathTypeName(distance))
              : !nvlinks_known && r_.version >= NcclVersion{2, 12, 0}
                  ? "; NVLinks not known (NVML did not answer): an NVLink peer near a NIC would relay it (PXN) and keep GDR"
                  : "");
    }
    return "";
  }

  const NodeFacts& f_;
  const Rules& r_;
  PairFacts pf_;
  std::optional<PathType> path_;
  bool nv_ = false;
  bool other_node_ = false;  // the two GPUs are on different machines
  const GpuFacts* ga_ = nullptr;
  const GpuFacts* gb_ = nullptr;
  std::vector<std::string> unknown_;
  PairPrediction out_;
};

std::vector<int> CommunicatorGpus(const NodeFacts& f) {
  if (!f.communicator.empty()) return f.communicator;
  std::vector<int> all;
  for (const GpuFacts& g : f.gpus) all.push_back(g.index);
  return all;
}

Rules RulesFor(const NodeFacts& f, NcclVersion v, CpuVendor vendor, bool intel_old) {
  Rules r{v, vendor, intel_old, 0};
  // The AMD "<= 2 GPUs" rule of src/graph/paths.cc ncclTopoCheckP2p counts nodes of the
  // communicator's topology, which holds only the GPUs of its ranks on this host (topo.cc adds a
  // GPU only with a "rank" attribute), never the node's other GPUs:
  //  * 2.23.4 – 2.30.2: `system->nodes[GPU].count`, one node per rank (ranks sharing a GPU are
  //    refused: init.cc "Duplicate GPU detected").
  //  * 2.30.3 on (v2.30.3-1, v2.30.7-1, and the 2.31.0 of the `dev` branch, 86fa684d, unchanged):
  //    `system->nodes[DEV].count`, one node per physical GPU (or MLOPart partition); several ranks
  //    may share one (NCCL_MULTI_RANK_GPU_ENABLE=1) and count once.
  std::vector<int> gpus = CommunicatorGpus(f);
  if (v >= NcclVersion{2, 30, 3}) {
    std::sort(gpus.begin(), gpus.end());
    gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
  }
  r.gpu_count = static_cast<int>(gpus.size());
  return r;
}

}  // namespace

std::string VersionText(const NcclVersion& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch);
}


std::optional<NcclVersion> ParseNcclVersion(std::string_view text) {
  NcclVersion v;
  int* parts[] = {&v.major, &v.minor, &v.patch};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, *parts[i]);
    if (ec != std::errc() || *parts[i] < 0) {
      if (i == 2) break;  // "2.18": patch 0
      return std::nullopt;
    }
    p = next;
    if (i < 2) {
      if (p == end || *p != '.') {
        if (i == 1) break;
        return std::nullopt;
      }
      ++p;
    }
  }
  if (p != end && *p != '+' && *p != '-') return std::nullopt;
  if (v.major != 2) return std::nullopt;
  return v;
}

std::string_view CpuVendorName(CpuVendor v) {
  switch (v) {
    case CpuVendor::kIntel: return "intel";
    case CpuVendor::kAmd: return "amd";
    case CpuVendor::kArm: return "arm";
    case CpuVendor::kZhaoxin: return "zhaoxin";
    case CpuVendor::kUnknown: return "unknown";
  }
  return "unknown";
}

std::optional<CpuVendor> ParseCpuVendor(std::string_view text) {
  if (text == "intel" || text == "GenuineIntel") return CpuVendor::kIntel;
  if (text == "amd" || text == "AuthenticAMD") return CpuVendor::kAmd;
  if (text == "arm" || text == "aarch64" || text == "arm64") return CpuVendor::kArm;
  if (text == "zhaoxin") return CpuVendor::kZhaoxin;
  return std::nullopt;
}

std::string_view NcclLevelName(NcclLevel l) {
  switch (l) {
    case NcclLevel::kLOC: return "LOC";
    case NcclLevel::kNVL: return "NVL";
    case NcclLevel::kPIX: return "PIX";
    case NcclLevel::kPXB: return "PXB";
    case NcclLevel::kPHB: return "PHB";
    case NcclLevel::kSYS: return "SYS";
  }
  return "SYS";
}

std::optional<NcclLevel> ParseNcclLevel(std::string_view value) {
  if (value == "LOC") return NcclLevel::kLOC;
  if (value == "NVL" || value == "NVB" || value == "C2C") return NcclLevel::kNVL;
  if (value == "PIX") return NcclLevel::kPIX;
  if (value == "PXB" || value == "PXN" || value == "P2C") return NcclLevel::kPXB;
  if (value == "PHB" || value == "NODE") return NcclLevel::kPHB;
  if (value == "SYS") return NcclLevel::kSYS;
  int n = ToInt(value, -1);
  if (n < 0) return std::nullopt;
  // Legacy integers (NCCL's env docs): 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS.
  static constexpr NcclLevel kLegacy[] = {NcclLevel::kLOC, NcclLevel::kPIX, NcclLevel::kPXB, NcclLevel::kPHB};
  return n < 4 ? kLegacy[n] : NcclLevel::kSYS;
}

NcclLevel LevelOfPath(PathType t) {
  switch (t) {
    case PathType::kNVLink: return NcclLevel::kNVL;
    case PathType::kPIX: return NcclLevel::kPIX;
    case PathType::kPXB: return NcclLevel::kPXB;
    case PathType::kPHB:
    case PathType::kNODE: return NcclLevel::kPHB;
    case PathType::kSYS: return NcclLevel::kSYS;
  }
  return NcclLevel::kSYS;
}

const GpuFacts* NodeFacts::Gpu(int index) const {
  for (const GpuFacts& g : gpus)
    if (g.index == index) return &g;
  return nullptr;
}

const PairPrediction* Prediction::Pair(int a, int b) const {
  for (const PairPrediction& p : pairs)
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return &p;
  return nullptr;
}

const PairFacts* NodeFacts::Pair(int a, int b) const {
  for (const PairFacts& p : pairs)
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return &p;
  return nullptr;
}

NodeFacts FactsFromTopo(const TopoMatrix& links, const TopoMatrix* p2p) {
  NodeFacts f;
  f.sources.push_back("nvidia-smi topo -m");
  for (int g : links.gpus) f.gpus.push_back(GpuFacts{.index = g});
  f.rdma_nics = !links.nics.empty();
  for (size_t i = 0; i < links.gpus.size(); ++i)
    for (size_t j = i + 1; j < links.gpus.size(); ++j) {
      PairFacts p;
      p.a = links.gpus[i];
      p.b = links.gpus[j];
      p.link = links.Cell(p.a, p.b);
      if (p2p != nullptr) {
        // Per direction when the mode is known; a status of unknown mode counts for both.
        P2pStatus ab = ParseP2pStatus(p2p->Cell(p.a, p.b)), ba = ParseP2pStatus(p2p->Cell(p.b, p.a));
        P2pStatus worst = ab != P2pStatus::kOk && ab != P2pStatus::kUnknown ? ab : ba;
        if (p2p->p2p_mode != "w") p.nvml_read = worst;
        if (p2p->p2p_mode != "r") p.nvml_write = worst;
      }
      f.pairs.push_back(std::move(p));
    }
  if (p2p != nullptr)
    f.sources.push_back("nvidia-smi topo -p2p " + (p2p->p2p_mode.empty() ? std::string("(mode not stated)") : p2p->p2p_mode));
  return f;
}

int PxnRelay(const NodeFacts& f, int gpu, NcclVersion version) {
  const GpuFacts* g = f.Gpu(gpu);
  const std::string* off = Env(f, "NCCL_PXN_DISABLE");
  if (g == nullptr || version < NcclVersion{2, 12, 0} || (off && ToInt(*off, 0) == 1) || !g->nic_path ||
      *g->nic_path <= PathType::kPXB)
    return -1;
  std::vector<int> comm = CommunicatorGpus(f);
  for (const GpuFacts& peer : f.gpus) {
    if (peer.index == gpu || !peer.nic_path || *peer.nic_path > PathType::kPXB || peer.hostname != g->hostname) continue;
    if (std::find(comm.begin(), comm.end(), peer.index) == comm.end()) continue;
    const PairFacts* link = f.Pair(gpu, peer.index);
    if (link && (ParsePathType(link->link) == PathType::kNVLink || link->nvlinks_active.value_or(0) > 0)) return peer.index;
  }
  return -1;
}

PairPrediction PredictToOtherNode(const NodeFacts& facts, int gpu) {
  NodeFacts f = facts;
  f.cuda_copies = false;
  for (GpuFacts& g : f.gpus)
    if (g.index == gpu) {
      g.hostname = g.hostname.value_or("this node");
      g.boot_id = g.boot_id.value_or("this boot");
    }
  f.gpus.push_back(GpuFacts{.index = kOtherNodeGpu, .hostname = "another node", .boot_id = "another boot"});
  if (!f.communicator.empty()) f.communicator.push_back(kOtherNodeGpu);
  NcclVersion version = f.nccl_version.value_or(kNewestNcclRules);
  return PairPredictor(f, RulesFor(f, version, f.cpu_vendor, f.intel_pre_skylake.value_or(false)), gpu, kOtherNodeGpu).Run();
}

Prediction Predict(const NodeFacts& facts) {
  Prediction out;
  NcclVersion version = facts.nccl_version.value_or(kNewestNcclRules);
  bool intel_old = facts.intel_pre_skylake.value_or(false);
  out.rules = version;
  if (facts.cuda_copies) {  // NCCL's version and the CPU do not matter to the driver's answer
    for (int a : CommunicatorGpus(facts))
      for (int b : CommunicatorGpus(facts))
        if (a < b) out.pairs.push_back(PairPredictor(facts, RulesFor(facts, version, facts.cpu_vendor, intel_old), a, b).Run());
    return out;
  }
  if (!facts.nccl_version)
    out.assumptions.push_back("NCCL version not given: the newest NCCL's rules (" + VersionText(version) + ")");
  if (facts.cpu_vendor == CpuVendor::kUnknown)
    out.assumptions.push_back("CPU vendor not given: NCCL's rules for a CPU it does not single out");
  bool old_era = version < NcclVersion{2, 9, 6};
  if (facts.cpu_vendor == CpuVendor::kIntel && old_era && !facts.intel_pre_skylake)
    out.assumptions.push_back("Intel CPU generation not given: Skylake or newer (NCCL " + VersionText(version) +
                              " lowers the level further on Broadwell and older)");
  Rules primary = RulesFor(facts, version, facts.cpu_vendor, intel_old);
  out.gpu_count = primary.gpu_count;

  // The assumptions that could change an answer, one at a time.
  struct Alt {
    std::string what;
    Rules rules;
  };
  std::vector<Alt> alts;
  if (facts.cpu_vendor == CpuVendor::kUnknown)
    for (CpuVendor v : {CpuVendor::kIntel, CpuVendor::kAmd, CpuVendor::kArm})
      alts.push_back({"CPU vendor " + std::string(CpuVendorName(v)), RulesFor(facts, version, v, false)});
  if (!facts.nccl_version)
    for (NcclVersion v : {NcclVersion{2, 21, 5}, NcclVersion{2, 8, 4}})
      alts.push_back({"NCCL " + VersionText(v), RulesFor(facts, v, facts.cpu_vendor, intel_old)});
  if ((facts.cpu_vendor == CpuVendor::kIntel || facts.cpu_vendor == CpuVendor::kUnknown) && !facts.intel_pre_skylake &&
      (old_era || !facts.nccl_version))
    alts.push_back({"an Intel Broadwell or older CPU with NCCL 2.8",
                    RulesFor(facts, old_era ? version : NcclVersion{2, 8, 4}, CpuVendor::kIntel, true)});

  std::vector<int> gpus;  // each GPU once: ranks sharing a GPU (NCCL 2.30.3+) are one pair's end
  for (int g : CommunicatorGpus(facts))
    if (std::find(gpus.begin(), gpus.end(), g) == gpus.end()) gpus.push_back(g);
  for (size_t i = 0; i < gpus.size(); ++i)
    for (size_t j = i + 1; j < gpus.size(); ++j) {
      PairPrediction p = PairPredictor(facts, primary, gpus[i], gpus[j]).Run();
      for (const Alt& alt : alts) {
        PairPrediction q = PairPredictor(facts, alt.rules, gpus[i], gpus[j]).Run();
        bool seen = std::any_of(p.alternatives.begin(), p.alternatives.end(),
                                [&](const Alternative& a) { return a.assumption == alt.what; });
        if (q.transport != p.transport && !seen) p.alternatives.push_back({alt.what, q.transport});
      }
      out.pairs.push_back(std::move(p));
    }
  return out;
}

}  // namespace p2ptrace
