#include "shim/record/trace_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/printable.h"
#include "core/scheduler.h"
#include "shim/base/environment.h"
#include "shim/record/trace_dir.h"

extern char** environ;

namespace p2ptrace::shim {

namespace detail {
constinit uint64_t g_no_chunk = 0;
constinit thread_local ThreadChunk t_chunk __attribute__((tls_model("initial-exec")));
std::atomic<uint64_t> g_generation{1};
std::atomic<int> g_state{0};
std::atomic<uint32_t> g_seq{1};
std::atomic<uint32_t> g_dlsym_capture{0};
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
// The trace file, to reopen (by name, in the checked directory) when a chunk's blocks are reserved:
// no descriptor is kept (trace_dir.h), and the file found must be the one mapped.
std::string g_file_name;
dev_t g_file_dev = 0;
ino_t g_file_ino = 0;
std::atomic<bool> g_no_chunks{false};  // a reservation failed: no more chunks are claimed

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
  // Who started the process (job id, rank, node, pod): what the viewer's rows carry (core/scheduler.h).
  for (const char* n : SchedulerVariables()) {
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

// on_exit rather than atexit: the status is what tells a rank that gave up (exit(1) after an
// exception) from one that finished.
void AtExit(int status, void*) { TraceWriter::MarkExited(status); }

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
  g_no_chunks.store(false, std::memory_order_relaxed);  // the parent's full disk, perhaps; the child's file is new
  detail::g_generation.fetch_add(1);
  if (detail::g_state.load() == 1) detail::g_state.store(0);
}

}  // namespace

void Warn(const std::string& message) {
  // Paths and values from the environment or the node, escaped: nothing can act on the terminal.
  std::string line = "p2ptrace: warning: " + Printable(message, false) + "\n";
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

namespace {

// Makes sure [offset, offset + len) of the trace has its blocks on disk before its pages are
// touched: a write fault on a hole of a shared mapping whose filesystem is full is a SIGBUS that
// would kill the job. fallocate where the filesystem has it, else zeros written (the same blocks).
bool ReserveBlocks(int fd, uint64_t offset, uint64_t len) {
  if (fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(len)) == 0) return true;
  if (errno != EOPNOTSUPP && errno != ENOSYS) return false;
  static const char kZeros[16384] = {};
  for (uint64_t done = 0; done < len;) {
    ssize_t n = pwrite(fd, kZeros, std::min<uint64_t>(sizeof kZeros, len - done), static_cast<off_t>(offset + done));
    if (n <= 0) return false;
    done += static_cast<uint64_t>(n);
  }
  return true;
}

// The same for a chunk, through the file reopened by name (see g_file_name).
bool ReserveChunk(uint64_t offset, uint64_t len) {
  ScopedFd dir = OpenTraceDir(TheConfig().dir);
  ScopedFd fd = dir.ok() ? OpenOwnFile(dir.get(), g_file_name.c_str(), O_RDWR) : ScopedFd();
  struct stat st {};
  if (!fd.ok() || fstat(fd.get(), &st) != 0 || st.st_dev != g_file_dev || st.st_ino != g_file_ino) {
    errno = ENOENT;  // not the file mapped (gone, or replaced)
    return false;
  }
  bool ok = ReserveBlocks(fd.get(), offset, len);
  int error = errno;
  fd = ScopedFd();
  errno = error;  // the reservation's, not close's
  return ok;
}

}  // namespace

rlim_t FileSizeLimit() {
  struct rlimit l {};
  return getrlimit(RLIMIT_FSIZE, &l) == 0 ? l.rlim_cur : RLIM_INFINITY;
}

namespace {

void Untraced(const std::string& why) {
  Warn(why + "; this process runs untraced");
  detail::g_state.store(2);
}

}  // namespace

std::string TraceWriter::Host(const Config& c) {
  std::string host = ReadSmallFile(c.sysroot + "/proc/sys/kernel/hostname");
  if (host.empty()) {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    host = buf;
  }
  return host;
}

bool TraceWriter::Open() {
  KeepErrno keep;  // what the program's own call left in errno is what it sees
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (detail::g_state.load() != 0) return detail::g_state.load() == 1;
  const Config& c = TheConfig();
  // The process's first CUDA or NCCL call: only now is anything created or changed (a shell or
  // launcher of the job that never calls either leaves no trace). Processes started by this one
  // trace into the same directory (torchrun's ranks, for one).
  if (std::getenv("P2PTRACE_DIR") == nullptr) SetEnvironment("P2PTRACE_DIR", c.dir.c_str());
  uint64_t size = std::max<uint64_t>(c.max_bytes, kChunksOffset + kChunkSize);
  // A file size limit (ulimit -f) is never crossed: the kernel would answer with SIGXFSZ, which
  // kills the job. The trace is made smaller instead, or not at all.
  if (rlim_t limit = FileSizeLimit(); limit != RLIM_INFINITY && size > limit) {
    size = limit / kChunkSize * kChunkSize;
    if (size < kChunksOffset + kChunkSize) {
      Untraced("the file size limit (ulimit -f, " + std::to_string(limit) + " bytes) leaves no room for a trace");
      return false;
    }
  }
  if (std::string why = PrepareTraceDir(c.dir); !why.empty()) {
    Untraced("trace directory " + c.dir + ": " + why);
    return false;
  }
  std::string host = Host(c);
  // The launcher's rank, local rank and world size (SLURM, torchrun, Open MPI/PMIx, Kubernetes):
  // core/scheduler.h, the same reading the viewer applies to the recorded environment.
  const SchedulerIds ids = ReadSchedulerIds([](const char* name) -> const char* { return std::getenv(name); });
  int rank = ids.rank;
  int pid = getpid();
  std::string base = host + ".r" + (rank >= 0 ? std::to_string(rank) : std::string("x")) + ".p" + std::to_string(pid);
  for (char& ch : base)  // a file name, whatever the host is called
    if (ch == '/' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '_';
  ScopedFd dir = OpenTraceDir(c.dir);
  ScopedFd fd;
  std::string name;
  for (int attempt = 0; dir.ok() && attempt < 100 && !fd.ok(); ++attempt) {
    name = base + (attempt ? "." + std::to_string(attempt) : "") + ".p2ptrace";
    fd = CreateTraceFile(dir.get(), name.c_str(), O_RDWR);
    if (!fd.ok() && errno != EEXIST) break;
  }
  struct stat st {};
  if (!fd.ok() || ftruncate(fd.get(), static_cast<off_t>(size)) != 0 || fstat(fd.get(), &st) != 0) {
    Untraced("cannot write a trace in " + c.dir + ": " + std::strerror(errno));
    if (fd.ok()) unlinkat(dir.get(), name.c_str(), 0);
    return false;
  }
  // The header, environment and counters are written in place from now on: their blocks first.
  if (!ReserveBlocks(fd.get(), 0, kChunksOffset)) {
    Untraced("no space for a trace in " + c.dir + ": " + std::strerror(errno));
    unlinkat(dir.get(), name.c_str(), 0);
    return false;
  }
  std::string path = c.dir + "/" + name;
  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) {
    Untraced("cannot map the trace " + path + ": " + std::strerror(errno));
    unlinkat(dir.get(), name.c_str(), 0);
    return false;
  }
  g_file_name = name;
  g_file_dev = st.st_dev;
  g_file_ino = st.st_ino;
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
  h->local_rank = ids.local_rank;
  h->world_size = ids.world_size;
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
  header_ = h;
  RecordEnvironment();
  counters_ = reinterpret_cast<p2ptrace_pair_counters*>(g_map + kCountersOffset);
  static bool once = [] {
    InstallSignalHandlers();
    on_exit(AtExit, nullptr);
    return true;
  }();
  (void)once;
  detail::g_generation.fetch_add(1);
  detail::g_state.store(1);  // seq_cst: see below
  // Functions libp2ptrace_audit.so handed out before this file opened (audit_bound.cc): read after the
  // store above (both seq_cst, as the notice's are), so that a notice racing the open is never lost.
  __atomic_fetch_or(&h->capture_flags, detail::g_dlsym_capture.load(), __ATOMIC_RELAXED);
  return true;
}

void TraceWriter::RecordEnvironment() {
  if (header_ == nullptr) return;
  // The allow-listed environment, never the whole of it; zeros after the last string.
  char* env = reinterpret_cast<char*>(g_map + kEnvOffset);
  size_t used = 0;
  for (char** e = environ; e && *e; ++e) {
    size_t len = std::strlen(*e);
    if (!Allowed(*e) || used + len + 2 > kEnvSize) continue;
    std::memcpy(env + used, *e, len + 1);
    used += len + 1;
  }
  std::memset(env + used, 0, kEnvSize - used);
}

bool TraceWriter::ClaimChunk() {
  p2ptrace_file_header* h = header_;
  if (h == nullptr || detail::g_state.load(std::memory_order_acquire) != 1) return false;
  KeepErrno keep;
  uint64_t n_chunks = (h->file_size - h->chunks_offset) / h->chunk_size;
  uint64_t index = g_no_chunks.load(std::memory_order_relaxed) ? n_chunks
                                                              : __atomic_fetch_add(&h->chunks_claimed, 1, __ATOMIC_RELAXED);
  if (index >= n_chunks) {
    if (!g_no_chunks.load(std::memory_order_relaxed))
      __atomic_store_n(&h->chunks_claimed, n_chunks, __ATOMIC_RELAXED);  // keep the count meaningful
    __atomic_fetch_add(&h->dropped_records, 1, __ATOMIC_RELAXED);
    return false;
  }
  uint64_t offset = h->chunks_offset + index * h->chunk_size;
  // The chunk's blocks before its first byte is written (a full disk must cost records, never
  // the job). Once that fails, no more chunks: the records from then on are counted as dropped.
  if (!ReserveChunk(offset, h->chunk_size)) {
    g_no_chunks.store(true, std::memory_order_relaxed);
    if (errno == ENOSPC || errno == EDQUOT || errno == EFBIG)  // else the file went away: drops, no claim
      __atomic_fetch_or(&h->capture_flags, static_cast<uint32_t>(P2PTRACE_CAPTURE_NO_SPACE), __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->dropped_records, 1, __ATOMIC_RELAXED);
    return false;
  }
  unsigned char* base = g_map + offset;
  // Fault the chunk's pages in with one call rather than one page fault per 4 KiB of records on
  // the hot path. Best effort (Linux 5.14+): the blocks are already reserved.
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

void TraceWriter::MarkExited(int status) {
  if (p2ptrace_file_header* h = header_; h && detail::g_state.load() == 1) {
    h->exit_status = status;
    h->exit_status_known = 1;
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
