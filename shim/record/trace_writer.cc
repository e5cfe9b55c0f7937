#include "shim/record/trace_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

extern char** environ;

namespace p2ptrace::shim {

namespace detail {
constinit uint64_t g_no_chunk = 0;
constinit thread_local ThreadChunk t_chunk __attribute__((tls_model("initial-exec")));
std::atomic<uint64_t> g_generation{1};
std::atomic<int> g_state{0};
std::atomic<uint32_t> g_seq{1};
}  // namespace detail

p2ptrace_file_header* TraceWriter::header_ = nullptr;
p2ptrace_pair_counters* TraceWriter::counters_ = nullptr;

namespace {

constexpr uint64_t kEnvOffset = 4096, kEnvSize = 12288;
constexpr uint64_t kCountersOffset = kEnvOffset + kEnvSize;
constexpr uint64_t kCountersSize =
    uint64_t{P2PTRACE_MAX_DEVICES} * P2PTRACE_MAX_DEVICES * 2 * sizeof(p2ptrace_pair_counters);
constexpr uint64_t kChunkSize = 64 * 1024;
constexpr uint64_t kChunksOffset = (kCountersOffset + kCountersSize + kChunkSize - 1) / kChunkSize * kChunkSize;
static_assert(sizeof(p2ptrace_file_header) <= kEnvOffset);

// Heap-allocated on first use: the constructor that fills it may run before this file's static
// initialisers (their order across translation units is unspecified).
Config& TheConfig() {
  static Config* config = new Config();
  return *config;
}
std::mutex g_open_mu;
unsigned char* g_map = nullptr;
size_t g_map_size = 0;
bool g_forked_child = false;

std::string ReadSmallFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return "";
  char buf[256];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void CopyField(char* dst, size_t cap, const std::string& src) {
  std::snprintf(dst, cap, "%s", src.c_str());
}

int EnvInt(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v && *v) {
      char* end = nullptr;
      long x = std::strtol(v, &end, 10);
      if (*end == '\0' && x >= 0 && x < (1 << 30)) return static_cast<int>(x);
    }
  return -1;
}

bool Allowed(const char* kv) {
  static const char* kPrefixes[] = {"NCCL_", "CUDA_", "TORCH_NCCL_", "P2PTRACE_", "P2PSIM_", "OMPI_COMM_WORLD_",
                                    "SLURM_", "PMI_", "PMIX_RANK"};
  static const char* kNames[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                                 "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "PYTORCH_CUDA_ALLOC_CONF",
                                 "VLLM_SKIP_P2P_CHECK", "LD_PRELOAD"};
  for (const char* p : kPrefixes)
    if (std::strncmp(kv, p, std::strlen(p)) == 0) return true;
  for (const char* n : kNames) {
    size_t len = std::strlen(n);
    if (std::strncmp(kv, n, len) == 0 && kv[len] == '=') return true;
  }
  return false;
}

// Fatal signals: note them in the header, then hand the signal to whoever had it before.
constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[32];

void OnFatalSignal(int sig, siginfo_t* info, void*) {
  if (p2ptrace_file_header* h = TraceWriter::header()) {
    __atomic_store_n(&h->fatal_signal, sig, __ATOMIC_RELAXED);
    __atomic_store_n(&h->state, static_cast<uint32_t>(P2PTRACE_STATE_FATAL_SIGNAL), __ATOMIC_RELEASE);
  }
  sigaction(sig, &g_previous[sig], nullptr);
  // A fault re-executes and meets the previous handler; a signal sent by someone must be re-sent.
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

void InstallSignalHandlers() {
  for (int sig : kFatalSignals) {
    struct sigaction sa {};
    sa.sa_sigaction = OnFatalSignal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, &g_previous[sig]);
  }
}

void AtExit() { TraceWriter::MarkExited(); }

void ForkPrepare() { g_open_mu.lock(); }
void ForkParent() { g_open_mu.unlock(); }
// The child must never write into the parent's file: drop the mapping; its own opens at its first event.
void ForkChild() {
  g_open_mu.unlock();
  if (g_map != nullptr) munmap(g_map, g_map_size);
  g_map = nullptr;
  TraceWriter::ForgetMapping();
  detail::t_chunk = detail::ThreadChunk{};  // the only thread the child has: its next record claims a chunk of the child's file
  g_forked_child = true;
  detail::g_generation.fetch_add(1);
  if (detail::g_state.load() == 1) detail::g_state.store(0);
}

}  // namespace

bool MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void Warn(const std::string& message) {
  std::string line = "p2ptrace: warning: " + message + "\n";
  ssize_t ignored = write(2, line.data(), line.size());
  (void)ignored;
}

constinit SampleSpec detail::g_sample;

void TraceWriter::Configure(const Config& config) {
  TheConfig() = config;
  detail::g_sample = config.sample;
  if (config.disabled) detail::g_state.store(2);
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
}

const Config& TraceWriter::config() { return TheConfig(); }

bool TraceWriter::Open() {
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (detail::g_state.load() != 0) return detail::g_state.load() == 1;
  const Config& c = TheConfig();
  std::string host = ReadSmallFile(c.sysroot + "/proc/sys/kernel/hostname");
  if (host.empty()) {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    host = buf;
  }
  int rank = EnvInt({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"});
  int pid = getpid();
  std::string name = host + ".r" + (rank >= 0 ? std::to_string(rank) : std::string("x")) + ".p" + std::to_string(pid);
  int fd = -1;
  std::string path;
  if (!MakeDirs(c.dir)) {
    Warn("cannot create trace directory " + c.dir + ": " + std::strerror(errno) + "; this process runs untraced");
    detail::g_state.store(2);
    return false;
  }
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    path = c.dir + "/" + name + (attempt ? "." + std::to_string(attempt) : "") + ".p2ptrace";
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  uint64_t size = std::max<uint64_t>(c.max_bytes, kChunksOffset + kChunkSize);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    Warn("cannot write a trace in " + c.dir + ": " + std::strerror(errno) + "; this process runs untraced");
    if (fd >= 0) { close(fd); unlink(path.c_str()); }
    detail::g_state.store(2);
    return false;
  }
  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    Warn("cannot map the trace " + path + ": " + std::strerror(errno) + "; this process runs untraced");
    unlink(path.c_str());
    detail::g_state.store(2);
    return false;
  }
  g_map = static_cast<unsigned char*>(map);
  g_map_size = size;
  auto* h = reinterpret_cast<p2ptrace_file_header*>(g_map);
  std::memcpy(h->magic, P2PTRACE_MAGIC, 8);
  h->major = P2PTRACE_FORMAT_MAJOR;
  h->minor = P2PTRACE_FORMAT_MINOR;
  h->header_size = sizeof(p2ptrace_file_header);
  h->file_size = size;
  h->chunk_size = kChunkSize;
  h->max_devices = P2PTRACE_MAX_DEVICES;
  h->env_offset = kEnvOffset;
  h->env_size = kEnvSize;
  h->counters_offset = kCountersOffset;
  h->counters_size = kCountersSize;
  h->chunks_offset = kChunksOffset;
  h->state = P2PTRACE_STATE_RUNNING;
  h->capture_flags = g_forked_child ? P2PTRACE_CAPTURE_FORK_CHILD : 0;
  if (!c.sample.enabled) h->capture_flags |= P2PTRACE_CAPTURE_TIMING_OFF;
  h->pid = pid;
  h->ppid = getppid();
  h->rank = rank;
  h->local_rank = EnvInt({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"});
  h->world_size = EnvInt({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  h->local_world_size = EnvInt({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  h->start_realtime_ns = static_cast<uint64_t>(rt.tv_sec) * 1000000000ull + static_cast<uint64_t>(rt.tv_nsec);
  if (kCpuTicks) {
    // The counter's rate, measured over ~200 us once per file: what converts tick-stamped records
    // even if the process dies before writing any other anchor (see trace_format.h).
    TickAnchor start = ReadTickAnchor();
    h->start_ticks = start.ticks;
    h->start_monotonic_ns = start.ns;
    while (MonotonicNs() - start.ns < 200000) {
    }
    TickAnchor calib = ReadTickAnchor();
    h->calib_ticks = calib.ticks;
    h->calib_monotonic_ns = calib.ns;
  } else {
    h->start_monotonic_ns = MonotonicNs();
  }
  CopyField(h->host, sizeof h->host, host);
  CopyField(h->boot_id, sizeof h->boot_id, ReadSmallFile(c.sysroot + "/proc/sys/kernel/random/boot_id"));
  std::string dir_name = c.dir.substr(c.dir.find_last_of('/') + 1);
  CopyField(h->job_id, sizeof h->job_id, dir_name);
  char exe[512] = {};
  if (readlink("/proc/self/exe", exe, sizeof exe - 1) > 0) CopyField(h->exe, sizeof h->exe, exe);
  h->sample_first = c.sample.first;
  h->sample_every = c.sample.every;
  h->sample_min_bytes = c.sample.min_bytes;
  // The allow-listed environment, never the whole of it.
  char* env = reinterpret_cast<char*>(g_map + kEnvOffset);
  size_t used = 0;
  for (char** e = environ; e && *e; ++e) {
    size_t len = std::strlen(*e);
    if (!Allowed(*e) || used + len + 2 > kEnvSize) continue;
    std::memcpy(env + used, *e, len + 1);
    used += len + 1;
  }
  header_ = h;
  counters_ = reinterpret_cast<p2ptrace_pair_counters*>(g_map + kCountersOffset);
  static bool once = [] {
    InstallSignalHandlers();
    std::atexit(AtExit);
    return true;
  }();
  (void)once;
  detail::g_generation.fetch_add(1);
  detail::g_state.store(1, std::memory_order_release);
  return true;
}

bool TraceWriter::ClaimChunk() {
  p2ptrace_file_header* h = header_;
  if (h == nullptr || detail::g_state.load(std::memory_order_acquire) != 1) return false;
  uint64_t n_chunks = (h->file_size - h->chunks_offset) / h->chunk_size;
  uint64_t index = __atomic_fetch_add(&h->chunks_claimed, 1, __ATOMIC_RELAXED);
  if (index >= n_chunks) {
    __atomic_store_n(&h->chunks_claimed, n_chunks, __ATOMIC_RELAXED);  // keep the count meaningful
    __atomic_fetch_add(&h->dropped_records, 1, __ATOMIC_RELAXED);
    return false;
  }
  unsigned char* base = g_map + h->chunks_offset + index * h->chunk_size;
  // Fault the chunk's pages in with one call rather than one page fault per 4 KiB of records on
  // the hot path (each a block allocation on a disk file). Best effort: Linux 5.14+.
  constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
  madvise(base, h->chunk_size, kMadvPopulateWrite);
  auto* ch = reinterpret_cast<p2ptrace_chunk_header*>(base);
  ch->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  ch->used = 0;
  __atomic_store_n(&ch->magic, P2PTRACE_CHUNK_MAGIC, __ATOMIC_RELEASE);
  detail::ThreadChunk& c = detail::t_chunk;
  c.used = &ch->used;
  c.capacity = h->chunk_size - sizeof(p2ptrace_chunk_header);
  if (kCpuTicks) {  // an anchor for the tick-stamped records to come in this chunk
    TickAnchor a = ReadTickAnchor();
    EmitAt<p2ptrace_clock_record>(P2PTRACE_RECORD_CLOCK, 0, a.ns, [&](p2ptrace_clock_record& r) { r.ticks = a.ticks; });
  }
  return true;
}

void TraceWriter::ForgetMapping() {
  header_ = nullptr;
  counters_ = nullptr;
}

void TraceWriter::MarkExited() {
  if (p2ptrace_file_header* h = header_; h && detail::g_state.load() == 1) {
    if (kCpuTicks) {
      TickAnchor end = ReadTickAnchor();
      h->end_ticks = end.ticks;
      h->end_monotonic_ns = end.ns;
    } else {
      h->end_monotonic_ns = MonotonicNs();
    }
    // Exited, even after a fatal signal the program's own handler survived (fatal_signal stays).
    __atomic_store_n(&h->state, static_cast<uint32_t>(P2PTRACE_STATE_EXITED), __ATOMIC_RELEASE);
  }
}

}  // namespace p2ptrace::shim
