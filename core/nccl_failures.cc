// NCCL's failure lines → causes. Each pattern is a fixed part of one of NCCL's WARN format strings
// (quoted beside it, with the file that prints it in 2.28.9 unless said otherwise) or a CUDA runtime
// error string that NCCL's `Cuda failure '%s'` quotes. First match wins: the specific before the
// general.
#include "core/nccl_failures.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace p2ptrace {
namespace {

bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// strerror texts that say a filesystem (here /dev/shm) is full.
bool SaysFull(std::string_view m) {
  return Contains(m, "No space left on device") || Contains(m, "(28)") || Contains(m, "Cannot allocate memory") ||
         Contains(m, "Bus error");
}

struct Pattern {
  std::string_view part;  // a fixed part of the format string
  bool prefix;            // the message starts with it (else: contains it)
  NcclFailureClass what;
};

// The CUDA runtime's error strings (cudaGetErrorString) that NCCL quotes in `Cuda failure '%s'`
// (include/checks.h) and `failed to peer with device %d(=%lx): %d %s` (transport/p2p.cc).
constexpr Pattern kCudaErrors[] = {
    {"peer mapping resources exhausted", false,
     {"peer-mapping-exhausted",
      "CUDA ran out of peer mappings (cudaErrorTooManyPeers, 711): a GPU can map only a few peers over PCIe "
      "(typically 8)"}},
    {"out of memory", false, {"gpu-out-of-memory", "a GPU ran out of memory while NCCL allocated its buffers"}},
    {"no CUDA-capable device is detected", false,
     {"no-gpu-visible", "CUDA sees no GPU in this process (CUDA_VISIBLE_DEVICES, the container's GPU list)"}},
    {"invalid device ordinal", false,
     {"no-gpu-visible", "the process asked CUDA for a GPU it does not see (its device number is beyond the visible GPUs)"}},
    {"CUDA driver version is insufficient", false,
     {"cuda-driver-too-old", "the installed driver is older than the CUDA runtime NCCL uses"}},
    {"peer access is not supported between these two devices", false,
     {"cuda-peer-enable-failed", "CUDA refused peer access between the two GPUs (cudaErrorPeerAccessUnsupported, 217)"}},
};

constexpr Pattern kWarnings[] = {
    // misc/shmutils.cc: "Error: failed to extend %s to %ld bytes, error: %s (%d)" — ftruncate/
    // fallocate of /dev/shm/nccl-XXXXXX; "Error while %s shared memory segment %s (size %ld), error: %s (%d)"
    // follows it; "Error: failed to create shared memory file %s, error %s (%d)"; "Error: Could not
    // map %s size %zu, error: %s (%d)". The full-/dev/shm cases are told apart by strerror below.
    {"Error: failed to extend ", true,
     {"shm-failed", "NCCL could not size its shared-memory segment in /dev/shm"}},
    {"Error while ", true, {"shm-failed", "NCCL could not create or attach a shared-memory segment in /dev/shm"}},
    {"Error: failed to create shared memory file ", true,
     {"shm-failed", "NCCL could not create its shared-memory file in /dev/shm"}},
    {"Error: Could not map ", true, {"shm-failed", "NCCL could not map its shared-memory segment"}},
    // graph/paths.cc: the NVML check of an NVLink pair (fatal).
    {"P2P is disabled between NVLINK connected GPUs", true,
     {"nvml-p2p-status",
      "the driver (NVML) reports P2P disabled between two NVLink-connected GPUs; NCCL stops rather than fall back"}},
    // init.cc: "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx" (≤ 2.29);
    // 2.30+: "Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 …".
    {"Duplicate GPU detected", true, {"duplicate-gpu", "two ranks of one communicator are on the same GPU"}},
    {"Multiple Ranks are using the same GPU", true,
     {"duplicate-gpu", "two ranks of one communicator are on the same GPU (NCCL_MULTI_RANK_GPU_ENABLE is not set)"}},
    // init.cc: "Mismatched NCCL version detected : rank %d version %d rank %d version %d".
    {"Mismatched NCCL version detected", true, {"rank-mismatch", "the ranks run different NCCL versions"}},
    // bootstrap.cc: "Bootstrap Root : mismatch in info from procs, …"; "Message truncated : received %d
    // bytes instead of %d"; net_socket.cc: "NET/Socket : peer %s message truncated : receiving …".
    {"Bootstrap Root : mismatch in info from procs", true,
     {"rank-mismatch", "the ranks disagree about the communicator (nranks or the root they were given)"}},
    {"Message truncated", true,
     {"rank-mismatch", "a rank received less than it expected: the ranks called different operations or sizes, or a peer exited"}},
    {"message truncated", false,
     {"rank-mismatch", "a rank received less than it expected: the ranks called different operations or sizes, or a peer exited"}},
    // misc/socket.cc: "socketProgress: Connection closed by remote peer %s".
    {"Connection closed by remote peer", false,
     {"peer-process-failed", "another rank closed its connection: it exited or failed first (its own log holds the cause)"}},
    // bootstrap.cc: "Bootstrap : no socket interface found"; net_socket.cc: "NET/Socket : no interface
    // found", "NET/Socket : No usable listening interface found"; net_ib.cc: "NET/IB : No IP interface
    // found."; misc/socket.cc: "no device found matching %s%s, verify NCCL_OOB_NET_IFNAME".
    {"no socket interface found", false,
     {"socket-interface-not-found", "NCCL found no network interface to bootstrap the communicator over"}},
    {"NET/Socket : no interface found", true,
     {"socket-interface-not-found", "NCCL's socket transport found no usable network interface"}},
    {"No usable listening interface found", false,
     {"socket-interface-not-found", "NCCL found no network interface to listen on"}},
    {"NET/IB : No IP interface found", true,
     {"socket-interface-not-found", "NCCL found no IP interface for its IB transport's connection setup"}},
    {"no device found matching", true,
     {"socket-interface-not-found", "no network interface matches the name the job asked for"}},
    {"no device found after excluding", true,
     {"socket-interface-not-found", "no network interface is left after the job's exclusions"}},
    // misc/socket.cc (src/os/linux.cc from 2.30.7): "%s: connect to %s failed : %s", "%s: connect to
    // %s returned %s, exceeded error retry count after %d attempts", "socketPollConnect to %s failed
    // with error %s", "socketTryAccept: exceeded error retry count after %d attempts, %s"; address
    // parsing of NCCL_COMM_ID and the like: "Net : No valid <IPv4_or_hostname>:<port> pair found",
    // "Net : error encountered when getting address info : %s".
    {"Net : No valid ", true, {"bootstrap-connect-failed", "an address NCCL was given (NCCL_COMM_ID, …) is not host:port"}},
    {"Net : error encountered when getting address info", true,
     {"bootstrap-connect-failed", "a host name NCCL was given does not resolve"}},
    {": connect to ", false,
     {"bootstrap-connect-failed", "a rank could not open a TCP connection to another rank (refused, unreachable or timed out)"}},
    {"socketPollConnect to ", true,
     {"bootstrap-connect-failed", "a rank could not open a TCP connection to another rank (refused, unreachable or timed out)"}},
    {"exceeded error retry count", false,
     {"bootstrap-connect-failed", "a TCP connection between ranks kept failing until NCCL gave up"}},
    // transport/net_ib.cc: "NET/IB: Got completion from peer %s with status=%s(%d) opcode=…"; async
    // fatal events; "NET/IB : Unable to open device %s"; "Call to ibv_modify_qp failed with %d %s, %s".
    {"Got completion from peer", false,
     {"ib-error", "an InfiniBand/RoCE transfer to a peer failed (the status says why: retry counter exceeded, flushed, …)"}},
    {"async fatal event", false, {"ib-error", "the InfiniBand/RoCE device reported a fatal error"}},
    {"NET/IB : Unable to open device", true, {"ib-error", "NCCL could not open an InfiniBand/RoCE device"}},
    {"Call to ibv_modify_qp failed", true,
     {"ib-error", "a queue pair could not be connected (for RoCE: often the GID index or the subnet)"}},
    // misc/ibvwrap.cc: "Call to ibv_reg_mr failed with error %s" (ENOMEM: the memlock limit).
    {"Call to ibv_reg_mr", true,
     {"ib-memlock", "registering memory with the NIC failed (with `Cannot allocate memory`: the locked-memory limit)"}},
    // transport.cc: "Rank %d has no transport for %s peer %d on channel %d/%d".
    {" has no transport for ", false, {"no-transport", "no transport can connect these two ranks"}},
    // misc/cudawrap.cc: "CUDA Driver version found is %d. Minimum requirement is %d".
    {"CUDA Driver version found is", true,
     {"cuda-driver-too-old", "the installed driver is older than NCCL needs"}},
    // init.cc: "Invalid device %d (totalnDev=%d)", "Failed to create CUDA context on device %d".
    {"Invalid device ", true, {"no-gpu-visible", "the process named a GPU it does not see"}},
    {"Failed to create CUDA context on device", true,
     {"no-gpu-visible", "CUDA could not start on the GPU (busy in exclusive mode, lost, or not visible)"}},
    // misc/nvmlwrap.cc: "Failed to open libnvidia-ml.so.1".
    {"Failed to open libnvidia-ml.so", true,
     {"nvml-unavailable", "NCCL could not load NVML, the driver's management library"}},
    // include/alloc.h: "Failed to CUDA calloc %ld bytes", "Failed to CUDA malloc %ld bytes", "Failed to
    // CUDA host alloc %ld bytes".
    {"Failed to CUDA ", true, {"gpu-out-of-memory", "NCCL could not allocate GPU (or pinned host) memory"}},
    // init.cc and others: "Invalid rank requested : %d/%d", "Invalid config … attribute value",
    // "improper usage of ncclCommInitRank", "Attempt to use communicator before the previous
    // operation returned ncclSuccess", "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER".
    {"Invalid rank requested", true, {"nccl-invalid-usage", "a rank number is not below nranks"}},
    {"Invalid config ", true, {"nccl-invalid-usage", "a communicator config attribute has an invalid value"}},
    {"improper usage of ncclCommInitRank", true, {"nccl-invalid-usage", "ncclCommInitRank was called with invalid arguments"}},
    {"Attempt to use communicator before the previous operation returned ncclSuccess", true,
     {"nccl-invalid-usage", "the program used a communicator after one of its operations failed"}},
    {"ncclConfig_t argument not initialized", true, {"nccl-invalid-usage", "a config was not initialized with NCCL_CONFIG_INITIALIZER"}},
    {"Invalid NCCL_COMM_ID", true, {"bootstrap-connect-failed", "NCCL_COMM_ID is not an address:port"}},
    // Last: the generic system-call failure, include/checks.h "Call to " name " failed: %s".
    {"Call to ", true, {"nccl-system-error", "a system call NCCL made failed (the call and errno are in the line)"}},
};

}  // namespace

std::optional<NcclFailureClass> ClassifyNcclWarning(std::string_view m) {
  // include/checks.h "Cuda failure '%s'" (2.x; "Cuda failure %d '%s'" in some releases) and
  // transport/p2p.cc "failed to peer with device %d(=%lx): %d %s": the CUDA error decides.
  const bool cuda = m.starts_with("Cuda failure") || m.starts_with("failed to peer with device");
  if (cuda) {
    for (const Pattern& p : kCudaErrors)
      if (Contains(m, p.part)) return p.what;
    if (m.starts_with("failed to peer with device"))
      return NcclFailureClass{"cuda-peer-enable-failed", "enabling peer access between two GPUs failed"};
    return NcclFailureClass{"cuda-error", "a CUDA call inside NCCL failed (the quoted CUDA error says which)"};
  }
  for (const Pattern& p : kWarnings) {
    if (p.prefix ? !m.starts_with(p.part) : !Contains(m, p.part)) continue;
    if (p.what.cause == "shm-failed" && SaysFull(m))
      return NcclFailureClass{"shm-too-small", "/dev/shm is full: NCCL could not size its shared-memory segment there"};
    if (p.what.cause == "nccl-system-error" && Contains(m, "No space left on device"))
      return NcclFailureClass{"shm-too-small", "a file NCCL writes (in /dev/shm) hit a full filesystem"};
    return p.what;
  }
  return std::nullopt;
}

std::string_view NcclResultName(int code) {
  switch (code) {
    case 0: return "ncclSuccess";
    case 1: return "ncclUnhandledCudaError";
    case 2: return "ncclSystemError";
    case 3: return "ncclInternalError";
    case 4: return "ncclInvalidArgument";
    case 5: return "ncclInvalidUsage";
    case 6: return "ncclRemoteError";
    case 7: return "ncclInProgress";
    default: return "";
  }
}

std::optional<NcclFailureClass> ClassifyNcclResult(int code) {
  switch (code) {
    case 1: return NcclFailureClass{"cuda-error", "NCCL returned ncclUnhandledCudaError (1): a CUDA call failed"};
    case 2:
      return NcclFailureClass{"nccl-system-error",
                              "NCCL returned ncclSystemError (2): a system call failed (shared memory, sockets, files)"};
    case 3: return NcclFailureClass{"nccl-internal-error", "NCCL returned ncclInternalError (3)"};
    case 4: return NcclFailureClass{"nccl-invalid-usage", "NCCL returned ncclInvalidArgument (4): a call had an invalid argument"};
    case 5: return NcclFailureClass{"nccl-invalid-usage", "NCCL returned ncclInvalidUsage (5): the program called NCCL wrongly"};
    case 6:
      return NcclFailureClass{"peer-process-failed",
                              "NCCL returned ncclRemoteError (6): a peer process exited or the network failed"};
    default: return std::nullopt;
  }
}

std::vector<NcclFailure> DiagnoseNcclFailures(const std::vector<NamedNcclLog>& logs) {
  std::vector<NcclFailure> out;
  std::map<std::string, size_t> index;              // cause → out
  std::set<std::pair<std::string, int>> explained;  // processes (host, pid) a WARN line explained
  auto add = [&](const NcclFailureClass& what, const std::string& file, const std::string& text,
                 const NcclLogger& who, uint64_t line) {
    auto [it, fresh] = index.try_emplace(std::string(what.cause), out.size());
    if (fresh) {
      NcclFailure f;
      f.cause = what.cause;
      f.meaning = what.meaning;
      f.first_line = line;
      f.file = file;
      f.host = who.host;
      f.pid = who.pid;
      out.push_back(std::move(f));
    }
    NcclFailure& f = out[it->second];
    ++f.lines;
    if (f.evidence.size() < kMaxNcclFailureEvidence) {
      std::string where = who.host.empty() ? "" : " (" + who.host + (who.pid >= 0 ? " pid " + std::to_string(who.pid) : "") + ")";
      std::string at = file.empty() ? "line " + std::to_string(line) : file + ":" + std::to_string(line);
      f.evidence.push_back(at + where + ": " + text);
    }
  };
  for (const NamedNcclLog& l : logs) {
    if (l.log == nullptr) continue;
    for (const NcclNote& w : l.log->warnings)
      if (auto what = ClassifyNcclWarning(w.text)) {
        add(*what, l.name, "NCCL WARN " + w.text, w.logger, w.line);
        explained.insert({w.logger.host, w.logger.pid});
      }
  }
  for (const NamedNcclLog& l : logs) {
    if (l.log == nullptr) continue;
    for (const NcclResultLine& r : l.log->results) {
      const bool program_line = r.logger.host.empty() && r.logger.pid < 0;
      if (program_line ? !explained.empty() : explained.count({r.logger.host, r.logger.pid}) > 0) continue;
      if (auto what = ClassifyNcclResult(r.code)) add(*what, l.name, r.text, r.logger, r.line);
    }
  }
  return out;
}

std::vector<NcclFailure> DiagnoseNcclFailures(const NcclLog& log) { return DiagnoseNcclFailures({{"", &log}}); }

}  // namespace p2ptrace
