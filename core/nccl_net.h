// NCCL's network lines, read apart (docs/research/nccl-net-lines.md has every release's formats with
// their source lines): a NET connection's transport text ("NET/IB/0(8)/GDRDMA/Shared": the network,
// the NIC, the PXN relay, GPUDirect RDMA, shared buffers), the devices a network says it uses, the
// GPUDirect RDMA decisions NCCL prints, and the lines that say why NCCL fell back to sockets.
// Pure functions over one message (the text after NCCL's `host:pid:tid [dev] NCCL INFO ` prefix).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace p2ptrace {

// `NET/<network>/<nic>[(<proxy rank>)][/GDRDMA[(PCI)]][/Shared]`.
struct NetPath {
  std::string network;   // "IB", "Socket", "IBext_v8", "AWS Libfabric", … as printed
  int nic = -1;          // the device index as that network numbers its devices
  int proxy_rank = -1;   // PXN: the rank whose NIC carries the send (NCCL ≥ 2.12); -1 none
  bool gdr = false;      // GPUDirect RDMA: the NIC reads or writes GPU memory itself
  bool gdr_over_pci = false;  // "(PCI)": GDR forced over PCIe on a C2C system (NCCL ≥ 2.27)
  bool shared = false;   // "/Shared": the connection's buffers are shared (p2p operations)
  bool operator==(const NetPath&) const = default;
};
// nullopt when `transport` is no NET connection.
std::optional<NetPath> ParseNetPath(std::string_view transport);

// One device of a `NET/<network> : Using [0]mlx5_0:1/IB [1]… ; OOB …` line, or an interface of a
// `NET/Socket : Using [0]eth0:10.0.0.1<0>` line.
struct NetDevice {
  std::string network;  // "IB", "Socket", …
  int index = -1;
  std::string name;     // "mlx5_0"; "" for a socket interface
  int port = -1;
  std::string link;     // "IB", "RoCE"; "" for a socket interface
  std::vector<std::string> flags;  // further tags ("SHARP")
  std::string interface, address;  // a socket's: "eth0", "10.0.0.1<0>"
  bool operator==(const NetDevice&) const = default;
};
// The devices of a `NET/… : Using` line; nullopt for any other message.
std::optional<std::vector<NetDevice>> ParseNetDevices(std::string_view message);

// A GPUDirect RDMA decision NCCL printed: per GPU and NIC with the distance rule (`GPU Direct RDMA
// Disabled for GPU 1a000 / HCA 0 (distance 7 > 4)`, `Enabled … (distance 3 <= 4), read 1`), or per
// NIC (`NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)`, 2.13+ without a reason).
struct GdrDecision {
  bool enabled = false;
  std::string gpu;      // as printed (busId hex, a rank or `dev[nvml]`); "" for a per-NIC line
  int hca = -1;         // the NIC's index; -1 when printed as a node id the line does not decode
  std::string hca_name; // "mlx5_0" on per-NIC lines
  int distance = -1, level = -1;  // the path type NCCL compared with NCCL_NET_GDR_LEVEL; -1 not printed
  int read = -1;        // "read 1": GDR for sends too (NCCL_NET_GDR_READ); -1 not printed
  bool no_module = false;  // "(no module)": no peer-memory module (≤ 2.12)
  bool operator==(const GdrDecision&) const = default;
};
std::optional<GdrDecision> ParseGdrDecision(std::string_view message);

// `DMA-BUF is available on GPU device 0` (2.13+, INIT): the GPU's side of DMA-BUF registration works.
bool IsDmaBufAvailable(std::string_view message);

// Lines that say the RDMA network is unusable, so NCCL's NET connections take TCP sockets:
// "net-no-ib-device" (`NET/IB : No device found.`), "net-no-verbs" (`Failed to open libibverbs.so`);
// "" for any other message.
std::string_view NetFailureKind(std::string_view message);

// `Connected all rings, use ring PXN 1 GDR 0` (2.24+): whether the rank's rings relay through
// another GPU's NIC, and whether every ring connection has GDR. nullopt for any other message.
struct RingNetUse {
  bool pxn = false, gdr = false;
};
std::optional<RingNetUse> ParseRingNetUse(std::string_view message);

// Whether NCCL_IB_HCA's value lets NCCL use port `port` of RDMA device `device`, as NCCL reads it: a
// comma-separated list of `name[:port]`, each a prefix of the device's name (exact with a leading
// `=`), a missing port matching any; a leading `^` excludes what the list matches. An empty list
// matches every device (so an unset value selects all, and `^` alone none).
bool IbHcaSelects(std::string_view spec, std::string_view device, int port = 1);

}  // namespace p2ptrace
