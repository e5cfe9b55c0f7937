// This node's side of NCCL's connections to other nodes, from its probe: each RDMA NIC with its
// port and PCI place, the means GPUDirect RDMA has here (peer memory, DMA-BUF), and per GPU the
// NIC NCCL pairs it with, the PCIe path between them, and the network path NCCL would take to a
// GPU on another node with its causes. What `doctor` prints and exports; pure.
#pragma once

#include <string>
#include <vector>

#include "core/node_probe.h"
#include "core/predict.h"

namespace p2ptrace {

struct GpuNetwork {
  int gpu = -1;
  std::string nic;            // the RDMA NIC NCCL pairs it with; "" none with a known place
  std::string path;           // nvidia-smi's label between them ("PIX", "SYS"); "" unknown
  int pxn_relay = -1;         // the NVLink peer NCCL relays it through (PxnRelay); -1 none
  PairPrediction to_other_node;  // this GPU to one on another node (b is kOtherNodeGpu)
};

struct NodeNetwork {
  std::vector<NodeProbe::Nic> nics;
  std::string peer_memory;  // one line: "nvidia_peermem loaded and registered", …
  DmaBuf dmabuf;
  std::vector<GpuNetwork> gpus;  // this host's GPUs, by index
};

NodeNetwork NetworkOf(const NodeProbe& probe);

}  // namespace p2ptrace
