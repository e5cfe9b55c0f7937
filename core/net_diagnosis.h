// Why NCCL's network connections took the host path, from its own lines: per host, the NET
// connections over TCP sockets, those without GPUDirect RDMA (every byte bounced through host memory
// by NCCL's proxy), and those without it for sends only, each group with one named cause of the
// catalog (core/causes.h) and the lines that show it. Where the log does not say why (release NCCL
// prints the GPU-NIC distance rule only at TRACE from 2.30, and its GPUDirect RDMA lines only in the
// NET subsystem), the cause says so and where to look. Pure: no I/O.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/nccl_failures.h"
#include "core/nccl_log.h"

namespace p2ptrace {

// What a degraded NET connection lacks.
enum class NetShortfall {
  kSockets,     // TCP sockets instead of InfiniBand/RoCE
  kNoGdr,       // an RDMA NIC, but no GPUDirect RDMA: data staged in host memory
  kNoGdrSends,  // GPUDirect RDMA for receives only (GDR read off): sends staged in host memory
};
std::string_view NetShortfallText(NetShortfall s);  // "TCP sockets", "no GPUDirect RDMA", …

struct NetFinding {
  std::string host;        // as the log prints it ("" for lines without NCCL's prefix)
  int pid = -1;            // the process of its first line
  NetShortfall shortfall = NetShortfall::kNoGdr;
  std::string cause;       // catalog id
  bool settled = false;    // the log names the cause; false: it does not (`cause` is an *-unexplained id)
  std::vector<std::string> evidence;  // "file:line: text", the deciding lines first
  std::vector<std::pair<int, int>> pairs;  // (src rank, dst rank) of the connections it holds for
  size_t lines = 0;        // the connection lines it holds for
};

// Where to look when the log does not name the cause ("the log of node1 does not say why: run
// `p2ptrace doctor` on node1"); "" for a settled finding.
std::string WhereToLook(const NetFinding& finding);

// Every degraded NET connection of the logs, grouped by the host that printed it and what it lacks;
// hosts in the order their first such line appears.
std::vector<NetFinding> DiagnoseNet(const std::vector<NamedNcclLog>& logs);

}  // namespace p2ptrace
