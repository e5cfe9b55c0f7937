// nccl_ring: one process per rank, as torchrun or `p2psim launch` starts them (RANK, WORLD_SIZE,
// LOCAL_RANK). Rank 0 creates the NCCL unique id and shares it through a file in a directory that
// must be fresh for each job (argv[1], else $NCCL_RING_DIR); the others poll for it. Then
// allreduce, broadcast, allgather, reducescatter and a send/recv ring, each checked against the
// values the host computes, with one line per operation: size, time (cudaEvents), and algbw/busbw
// as nccl-tests computes them. Exits nonzero on a wrong result or a failed call.
//   nccl_ring [ID_DIR] [COUNT]     COUNT floats per rank (default 1048576)
// Runs unchanged with the real NCCL on a GPU node and with the simulated one (tests/sim).
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

#define CUDA_OK(call)                                                                                   \
  do {                                                                                                  \
    cudaError_t e_ = (call);                                                                            \
    if (e_ != cudaSuccess) {                                                                            \
      std::fprintf(stderr, "nccl_ring: %s failed: %s\n", #call, cudaGetErrorString(e_));               \
      std::exit(2);                                                                                     \
    }                                                                                                   \
  } while (0)

#define NCCL_OK(call)                                                                                   \
  do {                                                                                                  \
    ncclResult_t r_ = (call);                                                                           \
    if (r_ != ncclSuccess) {                                                                            \
      std::fprintf(stderr, "nccl_ring: %s failed: %s\n", #call, ncclGetErrorString(r_));               \
      std::exit(2);                                                                                     \
    }                                                                                                   \
  } while (0)

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// Rank 0 publishes the id atomically (write, then rename); the others wait for it.
ncclUniqueId ShareId(int rank, const std::string& dir) {
  ncclUniqueId id;
  std::string path = dir + "/nccl_ring.id";
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof id);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "nccl_ring: cannot write %s\n", path.c_str());
      std::exit(2);
    }
    return id;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(reinterpret_cast<char*>(&id), sizeof id)) return id;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "nccl_ring: no unique id appeared in %s\n", path.c_str());
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

struct Job {
  int rank = 0, nranks = 1;
  size_t count = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

// Runs `op` between two events on the job's stream; returns the elapsed seconds.
double Timed(Job& job, const std::function<void()>& op) {
  CUDA_OK(cudaEventRecord(job.start, job.stream));
  op();
  CUDA_OK(cudaEventRecord(job.stop, job.stream));
  CUDA_OK(cudaStreamSynchronize(job.stream));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, job.start, job.stop));
  return ms / 1e3;
}

// nccl-tests' reporting: algbw = bytes / time, busbw = algbw × the operation's factor.
void Report(const Job& job, const char* name, size_t bytes, double seconds, double factor) {
  double algbw = seconds > 0 ? double(bytes) / seconds / 1e9 : 0;
  std::printf("%-14s size %10zu B  time %10.2f us  algbw %8.2f GB/s  busbw %8.2f GB/s\n", name, bytes, seconds * 1e6,
              algbw, algbw * factor);
  (void)job;
}

float* DeviceBuffer(size_t n) {
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, n * sizeof(float)));
  return static_cast<float*>(p);
}

void Upload(float* d, const std::vector<float>& h) {
  CUDA_OK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}

std::vector<float> Download(const float* d, size_t n) {
  std::vector<float> h(n);
  CUDA_OK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

// Compares and says where the first difference is; true when equal.
bool Check(const Job& job, const char* name, const std::vector<float>& got, const std::function<float(size_t)>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      std::fprintf(stderr, "nccl_ring: rank %d: %s: element %zu is %g, expected %g\n", job.rank, name, i, double(got[i]),
                   double(want(i)));
      return false;
    }
  }
  return true;
}

bool AllReduce(Job& job) {
  size_t n = job.count;
  int N = job.nranks;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float(job.rank + 1 + int(i % 7));
  float *send = DeviceBuffer(n), *recv = DeviceBuffer(n);
  Upload(send, h);
  double s = Timed(job, [&] { NCCL_OK(ncclAllReduce(send, recv, n, ncclFloat32, ncclSum, job.comm, job.stream)); });
  Report(job, "allreduce", n * sizeof(float), s, 2.0 * (N - 1) / N);
  bool ok = Check(job, "allreduce", Download(recv, n), [&](size_t i) { return float(N * (N + 1) / 2 + N * int(i % 7)); });
  CUDA_OK(cudaFree(send));
  CUDA_OK(cudaFree(recv));
  return ok;
}

bool Broadcast(Job& job) {
  size_t n = job.count;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = job.rank == 0 ? float(100 + i % 13) : -1.0f;
  float* buf = DeviceBuffer(n);
  Upload(buf, h);
  double s = Timed(job, [&] { NCCL_OK(ncclBroadcast(buf, buf, n, ncclFloat32, 0, job.comm, job.stream)); });
  Report(job, "broadcast", n * sizeof(float), s, 1.0);
  bool ok = Check(job, "broadcast", Download(buf, n), [](size_t i) { return float(100 + i % 13); });
  CUDA_OK(cudaFree(buf));
  return ok;
}

bool AllGather(Job& job) {
  size_t n = job.count;
  int N = job.nranks;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float(job.rank * 1000 + int(i % 11));
  float *send = DeviceBuffer(n), *recv = DeviceBuffer(n * N);
  Upload(send, h);
  double s = Timed(job, [&] { NCCL_OK(ncclAllGather(send, recv, n, ncclFloat32, job.comm, job.stream)); });
  Report(job, "allgather", n * N * sizeof(float), s, double(N - 1) / N);
  bool ok = Check(job, "allgather", Download(recv, n * N), [&](size_t j) { return float(int(j / n) * 1000 + int(j % n % 11)); });
  CUDA_OK(cudaFree(send));
  CUDA_OK(cudaFree(recv));
  return ok;
}

bool ReduceScatter(Job& job) {
  size_t n = job.count;
  int N = job.nranks;
  std::vector<float> h(n * N);
  for (size_t j = 0; j < n * N; ++j) h[j] = float(job.rank + int(j % 5));
  float *send = DeviceBuffer(n * N), *recv = DeviceBuffer(n);
  Upload(send, h);
  double s = Timed(job, [&] { NCCL_OK(ncclReduceScatter(send, recv, n, ncclFloat32, ncclSum, job.comm, job.stream)); });
  Report(job, "reducescatter", n * N * sizeof(float), s, double(N - 1) / N);
  bool ok = Check(job, "reducescatter", Download(recv, n), [&](size_t i) {
    size_t j = size_t(job.rank) * n + i;
    return float(N * (N - 1) / 2 + N * int(j % 5));
  });
  CUDA_OK(cudaFree(send));
  CUDA_OK(cudaFree(recv));
  return ok;
}

// Every rank sends to the next and receives from the previous one, in one group.
bool SendRecvRing(Job& job) {
  size_t n = job.count;
  int N = job.nranks, next = (job.rank + 1) % N, prev = (job.rank + N - 1) % N;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float(job.rank * 7 + int(i % 3));
  float *send = DeviceBuffer(n), *recv = DeviceBuffer(n);
  Upload(send, h);
  double s = Timed(job, [&] {
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(send, n, ncclFloat32, next, job.comm, job.stream));
    NCCL_OK(ncclRecv(recv, n, ncclFloat32, prev, job.comm, job.stream));
    NCCL_OK(ncclGroupEnd());
  });
  Report(job, "sendrecv", n * sizeof(float), s, 1.0);
  bool ok = Check(job, "sendrecv", Download(recv, n), [&](size_t i) { return float(prev * 7 + int(i % 3)); });
  CUDA_OK(cudaFree(send));
  CUDA_OK(cudaFree(recv));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Job job;
  job.rank = EnvInt("RANK", 0);
  job.nranks = EnvInt("WORLD_SIZE", 1);
  int local_rank = EnvInt("LOCAL_RANK", 0);
  const char* dir_env = std::getenv("NCCL_RING_DIR");
  std::string dir = argc > 1 ? argv[1] : dir_env != nullptr ? dir_env : ".";
  job.count = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : (1u << 20);

  CUDA_OK(cudaSetDevice(local_rank));
  ncclUniqueId id = ShareId(job.rank, dir);
  NCCL_OK(ncclCommInitRank(&job.comm, job.nranks, id, job.rank));
  CUDA_OK(cudaStreamCreate(&job.stream));
  CUDA_OK(cudaEventCreate(&job.start));
  CUDA_OK(cudaEventCreate(&job.stop));
  std::printf("rank %d of %d on device %d: %zu floats per rank\n", job.rank, job.nranks, local_rank, job.count);
  std::fflush(stdout);

  bool ok = AllReduce(job);
  ok = Broadcast(job) && ok;
  ok = AllGather(job) && ok;
  ok = ReduceScatter(job) && ok;
  ok = SendRecvRing(job) && ok;

  NCCL_OK(ncclCommDestroy(job.comm));
  CUDA_OK(cudaEventDestroy(job.start));
  CUDA_OK(cudaEventDestroy(job.stop));
  CUDA_OK(cudaStreamDestroy(job.stream));
  std::printf("%s\n", ok ? "all results correct" : "WRONG RESULTS");
  return ok ? 0 : 1;
}
