#include "tools/report/report.h"

#include <optional>

#include "core/topology.h"
#include "fmt/format.h"
#include "tools/report/nccl_bw.h"

namespace p2ptrace::cli {

std::string GpuName(const GpuRef& g) {
  return g.gpu >= 0 ? fmt::format("GPU{}", g.gpu) : fmt::format("GPU({})", g.bus_id.empty() ? "?" : g.bus_id);
}

std::string PairName(const PairEntry& e) {
  return e.src.host == e.dst.host ? fmt::format("{} {} -> {}", e.src.host, GpuName(e.src), GpuName(e.dst))
                                  : fmt::format("{} {} -> {} {}", e.src.host, GpuName(e.src), e.dst.host, GpuName(e.dst));
}

// Bytes and timed bytes are nccl-tests' sizes already (AddNcclOps): algbw = S / t.
double NcclOpSummary::AlgBw() const { return nranks == 1 ? -1 : MeasuredGbps(timed_bytes, timed_ns); }

std::string NcclOpSummary::RateNote() const {
  if (nranks == 1) return "one rank: nothing crossed a link";
  return WithheldRateNote(timed_bytes, timed_ns);
}

double NcclOpSummary::BusBw() const {
  double alg = AlgBw();
  return alg < 0 ? -1 : alg * NcclBusFactor(api, nranks);
}

uint64_t PairEntry::DriverCalls() const {
  uint64_t n = 0;
  for (const auto& [api, calls] : apis)
    if (api.rfind("cu", 0) == 0 && api.rfind("cuda", 0) != 0) n += calls.first;
  return n;
}

bool PairEntry::NetSide::CrossesRails() const {
  std::optional<PathType> used = ParsePathType(nic_path), nearest = ParsePathType(nearest_path);
  return proxy_rank < 0 && used && nearest && *used > *nearest;
}

std::string PairEntry::NetSidesText() const {
  std::string out;
  for (const NetSide& s : net) {
    std::string nic = !s.nic.empty() ? s.nic : fmt::format("NET/{}/{}", s.network, s.nic_index);
    out += fmt::format("{}{} {}{}{}, {}", out.empty() ? "" : "; ", s.host, nic, s.nic_path.empty() ? "" : " (" + s.nic_path + ")",
                       s.proxy_rank >= 0 ? fmt::format(" through rank {}'s GPU (PXN)", s.proxy_rank) : "",
                       s.network == "Socket" ? "TCP sockets" : s.gdr ? "GPUDirect RDMA" : "no GPUDirect RDMA");
    if (s.CrossesRails())
      out += fmt::format(" (its GPU's nearest NIC is {}, {}: crosses rails)", s.nearest_nic, s.nearest_path);
  }
  return out;
}

std::string PairEntry::RateBasis() const {
  if (timed_calls == 0) return coll.timed_calls ? "collectives, NCCL kernel timers" : "";
  if (kernel_timed_calls == timed_calls) return "NCCL kernel timers";
  if (group_timed_calls == 0) return "own events";
  return group_timed_calls == timed_calls ? "group" : "own events and group";
}

}  // namespace p2ptrace::cli
