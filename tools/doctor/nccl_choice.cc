#include "tools/doctor/nccl_choice.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/input_file.h"
#include "core/nccl_log.h"
#include "fmt/format.h"
#include "tools/doctor/cuda_loader.h"

namespace p2ptrace::cli {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point Deadline(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

struct NcclId {
  char bytes[128];  // NCCL_UNIQUE_ID_BYTES
};

// NCCL's functions the worker calls (ncclResult_t as int; ncclInt8 = 0, ncclSum = 0).
struct NcclLib {
  int (*GetUniqueId)(NcclId*) = nullptr;
  int (*CommInitRank)(void**, int, NcclId, int) = nullptr;
  int (*Send)(const void*, size_t, int, int, void*, void*) = nullptr;
  int (*Recv)(void*, size_t, int, int, void*, void*) = nullptr;
  int (*AllReduce)(const void*, void*, size_t, int, int, void*, void*) = nullptr;
  int (*GroupStart)() = nullptr;
  int (*GroupEnd)() = nullptr;
  int (*CommDestroy)(void*) = nullptr;
  const char* (*ErrorString)(int) = nullptr;
};

// The worker's exit statuses besides 0: its failure, and NCCL not installed.
constexpr int kWorkerFailed = 3, kNoNccl = 4;

// The worker's own failure: one line on its stderr, which the parent shows.
int Fail(int rank, const std::string& what, int status = kWorkerFailed) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return status;
}

std::string LastLine(const std::string& file) {
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

int RunNcclRank(int rank, int nranks, int device, const std::string& dir, double limit_seconds) {
  Clock::time_point deadline = Deadline(limit_seconds);
  std::string why;
  void* cudart = OpenCudaRuntime(&why);
  if (cudart == nullptr) return Fail(rank, why);
  int (*SetDevice)(int) = nullptr;
  int (*Malloc)(void**, size_t) = nullptr;
  int (*StreamCreate)(void**, unsigned) = nullptr;
  int (*StreamQuery)(void*) = nullptr;
  if (!BindCuda(cudart, "cudaSetDevice", &SetDevice) || !BindCuda(cudart, "cudaMalloc", &Malloc) ||
      !BindCuda(cudart, "cudaStreamCreateWithFlags", &StreamCreate) || !BindCuda(cudart, "cudaStreamQuery", &StreamQuery))
    return Fail(rank, "the CUDA runtime lacks a function the NCCL check needs");
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Fail(rank, "no NCCL (libnccl.so.2) found: install NCCL, or put it on LD_LIBRARY_PATH", kNoNccl);
  NcclLib n;
  if (!BindCuda(lib, "ncclGetUniqueId", &n.GetUniqueId) || !BindCuda(lib, "ncclCommInitRank", &n.CommInitRank) ||
      !BindCuda(lib, "ncclSend", &n.Send) || !BindCuda(lib, "ncclRecv", &n.Recv) ||
      !BindCuda(lib, "ncclAllReduce", &n.AllReduce) || !BindCuda(lib, "ncclGroupStart", &n.GroupStart) ||
      !BindCuda(lib, "ncclGroupEnd", &n.GroupEnd) || !BindCuda(lib, "ncclCommDestroy", &n.CommDestroy))
    return Fail(rank, "libnccl.so.2 lacks ncclSend/ncclRecv (NCCL older than 2.7)");
  BindCuda(lib, "ncclGetErrorString", &n.ErrorString);
  auto nccl = [&](const char* call, int r) {
    return fmt::format("{}: {} ({})", call, r, n.ErrorString ? n.ErrorString(r) : "");
  };
  if (int r = SetDevice(device); r != 0) return Fail(rank, fmt::format("cudaSetDevice({}): {}", device, r));
  constexpr size_t kBytes = 256 << 10;  // enough for NCCL to connect; small enough to be quick
  void *send = nullptr, *recv = nullptr, *stream = nullptr;
  if (Malloc(&send, kBytes) != 0 || Malloc(&recv, kBytes * nranks) != 0 || StreamCreate(&stream, 1) != 0)
    return Fail(rank, "cudaMalloc/cudaStreamCreateWithFlags failed");
  // The unique id: rank 0 makes it and puts it in `dir` whole (a rename); the others wait for it.
  NcclId id{};
  std::string id_file = dir + "/id";
  if (rank == 0) {
    if (int r = n.GetUniqueId(&id); r != 0) return Fail(rank, nccl("ncclGetUniqueId", r));
    std::string tmp = id_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.bytes, sizeof id.bytes);
    if (rename(tmp.c_str(), id_file.c_str()) != 0) return Fail(rank, "cannot write the NCCL id into " + dir);
  } else {
    for (;;) {
      std::ifstream in(id_file, std::ios::binary);
      if (in && in.read(id.bytes, sizeof id.bytes)) break;
      if (Clock::now() > deadline) return Fail(rank, "rank 0 never published the NCCL id");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void* comm = nullptr;
  if (int r = n.CommInitRank(&comm, nranks, id, rank); r != 0) return Fail(rank, nccl("ncclCommInitRank", r));
  // A send to and a receive from every peer (NCCL connects each pair it is asked to), then an
  // allreduce (its rings and trees).
  if (int r = n.GroupStart(); r != 0) return Fail(rank, nccl("ncclGroupStart", r));
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer == rank) continue;
    if (int r = n.Send(send, kBytes, 0, peer, comm, stream); r != 0) return Fail(rank, nccl("ncclSend", r));
    if (int r = n.Recv(static_cast<char*>(recv) + peer * kBytes, kBytes, 0, peer, comm, stream); r != 0)
      return Fail(rank, nccl("ncclRecv", r));
  }
  if (int r = n.GroupEnd(); r != 0) return Fail(rank, nccl("ncclGroupEnd", r));
  if (int r = n.AllReduce(send, send, kBytes, 0, 0, comm, stream); r != 0) return Fail(rank, nccl("ncclAllReduce", r));
  for (int r; (r = StreamQuery(stream)) != 0;) {
    if (r != 600 /* cudaErrorNotReady */) return Fail(rank, fmt::format("cudaStreamQuery: {}", r));
    if (Clock::now() > deadline) return Fail(rank, "its sends, receives and allreduce never finished");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  n.CommDestroy(comm);
  return 0;
}

NcclChoice RunNcclChoice(const std::vector<TestGpu>& gpus, double limit_seconds) {
  NcclChoice out;
  char self[4096] = {};
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    out.error = "cannot find this program (/proc/self/exe) to start the NCCL ranks";
    return out;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/p2ptrace-nccl.XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    out.error = "cannot make a directory for the NCCL ranks under " + pattern.substr(0, pattern.rfind('/'));
    return out;
  }
  std::string dir = pattern;
  int nranks = static_cast<int>(gpus.size());
  // The node's environment, NCCL_* settings included, less NCCL's log settings (each rank gets its own).
  std::vector<std::string> inherited;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "NCCL_DEBUG=", 11) != 0 && std::strncmp(*e, "NCCL_DEBUG_SUBSYS=", 18) != 0 &&
        std::strncmp(*e, "NCCL_DEBUG_FILE=", 16) != 0)
      inherited.emplace_back(*e);
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    // Everything the child needs is made before fork: this process has threads (the CUDA runtime's,
    // NVML's probe), so the child only opens, duplicates and execs.
    std::string rank = std::to_string(r);
    std::vector<std::string> args = {"p2ptrace", "_nccl-rank", rank, std::to_string(nranks),
                                     std::to_string(gpus[r].ordinal), dir, fmt::format("{}", limit_seconds)};
    // NCCL's own lines, every connection, into a file per rank.
    std::vector<std::string> env = {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,ENV", "NCCL_DEBUG_FILE=" + dir + "/nccl." + rank + ".log"};
    env.insert(env.end(), inherited.begin(), inherited.end());
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    for (std::string& e : env) envp.push_back(e.data());
    argv.push_back(nullptr), envp.push_back(nullptr);
    std::string err = dir + "/rank." + rank + ".err";
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
      execve(self, argv.data(), envp.data());
      _exit(127);
    }
    if (pid > 0) pids.push_back(pid);
  }
  // Each rank's end, or the limit for all of them (a rank that never connects is killed).
  Clock::time_point deadline = Deadline(limit_seconds + 2);
  std::vector<int> status(pids.size(), -1);
  size_t left = pids.size();
  while (left > 0 && Clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i)
      if (status[i] == -1) {
        int st = 0;
        if (waitpid(pids[i], &st, WNOHANG) == pids[i]) status[i] = st, --left;
      }
    if (left) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> stuck, failed;
  for (size_t i = 0; i < pids.size(); ++i) {
    if (status[i] == -1) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
      stuck.push_back(fmt::format("GPU{}", gpus[i].index));
    } else if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0) {
      out.not_installed |= WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == kNoNccl;
      std::string last = LastLine(dir + "/rank." + std::to_string(i) + ".err");
      failed.push_back(fmt::format("GPU{}: {}", gpus[i].index, last.empty() ? "exited with an error" : last));
    }
  }
  if (pids.size() < gpus.size()) out.error = "could not start a process per GPU (fork failed)";
  else if (!failed.empty()) out.error = fmt::format("{}", fmt::join(failed, "; "));
  else if (!stuck.empty())
    out.error = fmt::format("NCCL did not connect every pair within {} s ({} still running, killed)", limit_seconds,
                            fmt::join(stuck, ", "));
  // NCCL's lines, whatever happened: the connections made before a failure still tell.
  NcclLogParser parser;
  for (int r = 0; r < nranks; ++r)
    ReadInPieces(dir + "/nccl." + std::to_string(r) + ".log", 64u << 20, [&](std::string_view piece) { parser.Feed(piece); });
  parser.Finish();
  const NcclLog& log = parser.log();
  out.version = log.nccl_version;
  for (const Connection& c : log.connections) {
    if (c.src_rank < 0 || c.dst_rank < 0 || c.src_rank >= nranks || c.dst_rank >= nranks) continue;
    NcclPairChoice& p = out.pairs[{gpus[c.src_rank].index, gpus[c.dst_rank].index}];
    p.src = gpus[c.src_rank].index, p.dst = gpus[c.dst_rank].index;
    p.classes.insert(c.transport_class);
    p.transports.insert(c.transport);
  }
  for (const NcclNote& w : log.warnings) out.warnings.push_back(w.text);
  std::set<std::string> seen;
  for (const EnvSetting& e : log.env)
    if (seen.insert(e.name).second) out.env.push_back(e.name + "=" + e.value);
  if (out.error.empty() && log.connections.empty()) out.error = "NCCL printed no connection line (its log: NCCL_DEBUG=INFO)";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return out;
}

}  // namespace p2ptrace::cli
