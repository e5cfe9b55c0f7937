#include "core/node_network.h"

namespace p2ptrace {

NodeNetwork NetworkOf(const NodeProbe& probe) {
  NodeNetwork n;
  n.nics = probe.nics;
  n.peer_memory = probe.peermem_loaded
                      ? (probe.peermem_registered ? "nvidia_peermem loaded and registered with the RDMA core"
                                                  : "nvidia_peermem loaded, not registered with the RDMA core (no "
                                                    "/sys/kernel/mm/memory_peers/nv_mem)")
                  : probe.peermem_registered ? "a peer-memory client registered as nv_mem"
                                             : "no peer-memory module (nvidia_peermem not loaded)";
  n.dmabuf = DmaBufSupport(probe);
  NodeFacts facts = FactsFromProbe(probe);
  for (const GpuNic& gn : NearestNics(probe)) {
    GpuNetwork g;
    g.gpu = gn.gpu;
    if (gn.nic >= 0) g.nic = probe.nics[gn.nic].name;
    g.path = gn.path;
    g.pxn_relay = PxnRelay(facts, gn.gpu, facts.nccl_version.value_or(kNewestNcclRules));
    g.to_other_node = PredictToOtherNode(facts, gn.gpu);
    n.gpus.push_back(std::move(g));
  }
  return n;
}

}  // namespace p2ptrace
