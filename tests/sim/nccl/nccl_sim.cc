// The simulated NCCL: a drop-in libnccl.so.2 for the simulated node (DESIGN.md §9). It exports the
// union of 2.28.9's and the newest release's functions (2.32.6) and says it is 2.28.9 unless
// P2PSIM_NCCL_VERSION names another release.
//
// Ranks are processes (or threads, or devices of one process) that meet in a rendezvous directory
// named by the unique id. Collectives are computed on the CPU: every rank writes its contribution
// to a file in that directory, a futex barrier in a shared segment separates "posted" from "read",
// and each rank computes its own result — device memory on the sim is host memory, so results can
// be checked. ncclSend/ncclRecv pass one file per message. The transport of each (channel, peer)
// follows NCCL 2.28's rules and is printed in its exact log format; the simulated clock of the
// caller's stream advances by the bytes over the slowest link used.
//
// Every exported function is defined with NCCL_API, as NCCL does under PROFAPI: a WEAK `ncclX` and
// a strong alias `pncclX`. The build reads the NCCL_API lines of this file to leave these names out
// of the generated "not simulated" stubs (tests/sim/symbols/stubs.cmake).
#include <nccl.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/sim/common/nccl_segments.h"
#include "tests/sim/common/sim_links.h"
#include "tests/sim/common/sim_topology.h"
#include "tests/sim/nccl/profiler_loader.h"

#define NCCL_API(ret, func, ...)                                                                        \
  extern "C" __attribute__((visibility("default"))) __attribute__((alias(#func))) ret p##func(__VA_ARGS__); \
  extern "C" __attribute__((visibility("default"))) __attribute__((weak)) ret func(__VA_ARGS__)

namespace {

using p2ptrace::Host;
using p2ptrace::PathType;

// ---------------------------------------------------------------------------------------------
// Logging, in NCCL 2.28's format (src/debug.cc)

enum Level { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kAbort = 4, kTrace = 5 };
enum Subsys : unsigned long {
  kInit = 0x1, kColl = 0x2, kP2p = 0x4, kShm = 0x8, kNet = 0x10, kGraph = 0x20, kTuning = 0x40,
  kEnv = 0x80, kAlloc = 0x100, kCall = 0x200, kProxy = 0x400, kNvls = 0x800, kBootstrap = 0x1000,
  kReg = 0x2000, kProfile = 0x4000, kRas = 0x8000, kDestroy = 0x10000, kAll = ~0ul
};

struct Logger {
  int level = kNone;
  unsigned long mask = kInit | kBootstrap | kEnv;
  FILE* out = stdout;
  std::string host;
};

std::mutex g_log_mu;
Logger* g_log = nullptr;

int ParseLevel(const char* s) {
  if (s == nullptr) return kNone;
  static const std::pair<const char*, int> kNames[] = {
      {"VERSION", kVersion}, {"WARN", kWarn}, {"INFO", kInfo}, {"ABORT", kAbort}, {"TRACE", kTrace}};
  for (auto& [name, level] : kNames)
    if (strcasecmp(s, name) == 0) return level;
  return kNone;
}

unsigned long ParseSubsys(const char* s) {
  if (s == nullptr) return kInit | kBootstrap | kEnv;
  static const std::pair<const char*, unsigned long> kNames[] = {
      {"INIT", kInit}, {"COLL", kColl}, {"P2P", kP2p}, {"SHM", kShm}, {"NET", kNet}, {"GRAPH", kGraph},
      {"TUNING", kTuning}, {"ENV", kEnv}, {"ALLOC", kAlloc}, {"CALL", kCall}, {"PROXY", kProxy},
      {"NVLS", kNvls}, {"BOOTSTRAP", kBootstrap}, {"REG", kReg}, {"PROFILE", kProfile}, {"RAS", kRas}, {"DESTROY", kDestroy},
      {"ALL", kAll}};
  bool invert = *s == '^';
  if (invert) ++s;
  unsigned long mask = 0;
  std::string list(s);
  for (size_t start = 0; start <= list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    for (auto& [name, bit] : kNames)
      if (strcasecmp(item.c_str(), name) == 0) mask |= bit;
    start = end + 1;
  }
  return invert ? ~mask : mask;
}

// NCCL_DEBUG_FILE: %h → host name, %p → pid, %% → %, anything else copied through.
std::string ExpandDebugFile(const char* pattern, const std::string& host) {
  std::string out;
  for (const char* p = pattern; *p != '\0'; ++p) {
    if (*p == '%' && p[1] == 'h') { out += host; ++p; }
    else if (*p == '%' && p[1] == 'p') { out += std::to_string(getpid()); ++p; }
    else if (*p == '%' && p[1] == '%') { out += '%'; ++p; }
    else out += *p;
  }
  return out;
}

std::string SimLogHostName();

Logger& Log() {
  // Like ncclDebugInit: read once, at the first message, under the log mutex. Lines are written
  // without it (the FILE's own lock orders them, as NCCL's fwrite does): a line logged from a signal
  // handler that interrupted this thread's own logging goes through, as it does in NCCL.
  if (Logger* l = __atomic_load_n(&g_log, __ATOMIC_ACQUIRE)) return *l;
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (g_log == nullptr) {
    auto* l = new Logger();
    l->level = ParseLevel(std::getenv("NCCL_DEBUG"));
    l->mask = ParseSubsys(std::getenv("NCCL_DEBUG_SUBSYS"));
    l->host = SimLogHostName();
    const char* file = std::getenv("NCCL_DEBUG_FILE");
    if (l->level > kVersion && file != nullptr) {
      if (FILE* f = std::fopen(ExpandDebugFile(file, l->host).c_str(), "w")) {
        setlinebuf(f);
        l->out = f;
      }
    }
    __atomic_store_n(&g_log, l, __ATOMIC_RELEASE);
  }
  return *g_log;
}

int CurrentCudaDev();

int Tid() {
  static thread_local int tid = static_cast<int>(syscall(SYS_gettid));
  return tid;
}

// One line from a buffer on the stack (no allocation: a signal handler may log), ended with '\n'.
void Emit(Logger& l, char* msg, size_t size, int n) {
  size_t len = n < 0 ? 0 : std::min(static_cast<size_t>(n), size - 2);
  msg[len++] = '\n';
  std::fwrite(msg, 1, len, l.out);
  if (l.out == stdout) std::fflush(stdout);
}

__attribute__((format(printf, 2, 3))) void Info(unsigned long flags, const char* fmt, ...) {
  Logger& l = Log();
  if (l.level < kInfo || (flags & l.mask) == 0) return;
  char msg[1024];
  int n = std::snprintf(msg, sizeof msg, "%s:%d:%d [%d] NCCL INFO ", l.host.c_str(), getpid(), Tid(), CurrentCudaDev());
  va_list ap;
  va_start(ap, fmt);
  n += std::vsnprintf(msg + n, sizeof msg - n, fmt, ap);
  va_end(ap);
  Emit(l, msg, sizeof msg, n);
}

// WARN: a leading empty line and (2.26+ default) a timestamp, then file:line.
#define WARN(...) Warn(__FILE__, __LINE__, __VA_ARGS__)
__attribute__((format(printf, 3, 4))) void Warn(const char* file, int line, const char* fmt, ...) {
  Logger& l = Log();
  if (l.level < kWarn) return;
  char stamp[64];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "[%F %T] ", &tm);
  const char* base = std::strrchr(file, '/') ? std::strrchr(file, '/') + 1 : file;
  char msg[1024];
  int n = std::snprintf(msg, sizeof msg, "\n%s%s:%d:%d [%d] %s:%d NCCL WARN ", stamp, l.host.c_str(), getpid(), Tid(),
                        CurrentCudaDev(), base, line);
  va_list ap;
  va_start(ap, fmt);
  n += std::vsnprintf(msg + n, sizeof msg - n, fmt, ap);
  va_end(ap);
  Emit(l, msg, sizeof msg, n);
}

// NCCL's ncclDebugLog, as profiler plugins get it (v4+ init): INFO and WARN lines of the sim's log.
void DebugLog(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level == kWarn) Warn(file, line, "%s", msg);
  else if (level == kInfo) Info(flags, "%s", msg);
}

// The release the sim says it is (ncclGetVersion, the version line): P2PSIM_NCCL_VERSION as a code
// (23206) or dotted (2.32.6); 2.28.9, the toolkit's, by default. The exports do not change with it.
int VersionCode() {
  const char* v = std::getenv("P2PSIM_NCCL_VERSION");
  if (v == nullptr || *v == '\0') return NCCL_VERSION(2, 28, 9);
  int major = 0, minor = 0, patch = 0;
  if (std::sscanf(v, "%d.%d.%d", &major, &minor, &patch) == 3) return NCCL_VERSION(major, minor, patch);
  return std::atoi(v);
}

// The version line. From 2.22, once per process at its first communicator or unique id: bare at
// VERSION/WARN, an INFO line above. Before, in rank 0's init only (`rank`; -1 elsewhere), at any
// level from VERSION: puts to stdout and a flush, and an INFO line too when the log is a file.
void ShowVersion(int rank) {
  int code = VersionCode();
  char text[64];
  // Codes before 2.9 are X*1000 + Y*100 + Z (nccl.h's NCCL_VERSION).
  int base = code < NCCL_VERSION(2, 9, 0) ? 1000 : 10000;
  std::snprintf(text, sizeof text, "NCCL version %d.%d.%d+cuda13.0", code / base, code % base / 100, code % 100);
  if (code < NCCL_VERSION(2, 22, 0)) {
    static std::atomic<bool> shown{false};
    if (rank != 0 || shown.exchange(true)) return;
    if (Log().level < kVersion) return;
    bool to_file = Log().out != stdout;
    std::puts(text);
    std::fflush(stdout);
    if (to_file) Info(kAll, "%s", text);
    return;
  }
  static std::once_flag once;
  std::call_once(once, [&] {
    int level = Log().level;
    if (level == kVersion || level == kWarn) {
      char line[80];
      Emit(Log(), line, sizeof line, std::snprintf(line, sizeof line, "%s", text));
    }
    if (level >= kInfo) Info(kAll, "%s", text);
  });
}

// What the profiler plugin host needs of the sim (profiler_loader.h).
void InfoV(unsigned long flags, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  Info(flags, "%s", msg);
}
void WarnV(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  WARN("%s", msg);
}
p2psim::profiler::Host ProfilerHost() { return {VersionCode(), InfoV, WarnV, DebugLog, kInit, kEnv, kDestroy}; }

// NCCL's integer parameters: read once, echoed as "<NAME> set by environment to <v>." (NCCL_ENV).
long long Param(const char* name, long long fallback) {
  static std::mutex mu;
  static std::map<std::string, long long> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  long long v = fallback;
  if (const char* s = std::getenv(name); s != nullptr && *s != '\0') {
    char* end = nullptr;
    long long parsed = std::strtoll(s, &end, 0);
    if (end != s) {
      v = parsed;
      Info(kEnv, "%s set by environment to %lld.", name, v);
    }
  }
  cache[name] = v;
  return v;
}

// ---------------------------------------------------------------------------------------------
// The CUDA runtime, found at run time: whichever libcudart the program loaded, globally or with
// RTLD_LOCAL (a program that dlopens its runtime, as doctor's NCCL check does), else one loaded
// here. The real libnccl links its own static runtime, so it works whatever the program did; the
// simulated state lives in the simulated driver, so any runtime copy sees the same devices.
void* CudaRuntime() {
  static void* lib = [] {
    for (int flags : {RTLD_NOLOAD | RTLD_LAZY, RTLD_NOW | RTLD_LOCAL})
      for (const char* name : {"libcudart.so.13", "libcudart.so.12"})
        if (void* h = dlopen(name, flags)) return h;
    return static_cast<void*>(nullptr);
  }();
  return lib;
}

template <typename Fn>
Fn Cuda(const char* name) {
  if (void* f = dlsym(RTLD_DEFAULT, name)) return reinterpret_cast<Fn>(f);
  void* lib = CudaRuntime();
  return lib ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

int CurrentCudaDev() {
  static auto fn = Cuda<int (*)(int*)>("cudaGetDevice");
  int dev = 0;
  if (fn != nullptr && fn(&dev) != 0) dev = 0;
  return dev;
}

bool CudaSetDevice(int dev) {
  static auto fn = Cuda<int (*)(int)>("cudaSetDevice");
  return fn != nullptr && fn(dev) == 0;
}

std::string CudaBusId(int dev) {
  static auto fn = Cuda<int (*)(char*, int, int)>("cudaDeviceGetPCIBusId");
  char buf[32] = {};
  if (fn == nullptr || fn(buf, sizeof buf, dev) != 0) return "";
  std::string s(buf);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int CudaDevOfBus(const std::string& bus) {
  static auto fn = Cuda<int (*)(int*, const char*)>("cudaDeviceGetByPCIBusId");
  int dev = -1;
  if (fn == nullptr || fn(&dev, bus.c_str()) != 0) return -1;
  return dev;
}

int CudaCompCap(int dev) {
  static auto fn = Cuda<int (*)(int*, int, int)>("cudaDeviceGetAttribute");
  int major = 0, minor = 0;
  if (fn == nullptr) return 0;
  fn(&major, 75 /* cudaDevAttrComputeCapabilityMajor */, dev);
  fn(&minor, 76 /* cudaDevAttrComputeCapabilityMinor */, dev);
  return major * 10 + minor;
}

// The fake cudart's hook; absent under a real runtime, where NCCL's time is not simulated.
void AdvanceStream(cudaStream_t stream, double seconds) {
  static auto fn = Cuda<int (*)(cudaStream_t, double)>("p2psim_stream_advance");
  if (fn != nullptr) fn(stream, seconds);
}

// NCCL's busId: the hex digits of "0000:1a:00.0" as one number (printed %lx → 1a000).
int64_t BusIdToInt64(const std::string& s) {
  int64_t id = 0;
  for (char c : s)
    if (std::isxdigit(static_cast<unsigned char>(c))) id = (id << 4) | std::stoi(std::string(1, c), nullptr, 16);
  return id;
}

// ---------------------------------------------------------------------------------------------
// The simulated node this process is on

struct Node {
  bool ok = false;
  std::string error;
  p2psim::Topology topo;
  const Host* host = nullptr;
};

Node& TheNode() {
  static Node* node = [] {
    auto* n = new Node();
    const char* path = std::getenv("P2PSIM_TOPOLOGY");
    if (path == nullptr || *path == '\0') {
      n->error = "P2PSIM_TOPOLOGY is not set";
    } else if (p2psim::LoadTopology(path, &n->topo, &n->error)) {
      n->host = p2psim::SelectHost(n->topo, &n->error);
      n->ok = n->host != nullptr;
    }
    return n;
  }();
  return *node;
}

// The whole host name, as NCCL's host hash reads it (getHostName(…, '\0') in utils.cc).
std::string SimHostName() {
  Node& n = TheNode();
  if (n.ok) return n.host->name;
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// The name NCCL's log prints and NCCL_DEBUG_FILE's %h expands to: up to the first dot
// (getHostName(…, '.') in debug.cc): "gpu01" on gpu01.cluster.local.
std::string SimLogHostName() {
  std::string h = SimHostName();
  return h.substr(0, h.find('.'));
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// NCCL's hostHash: host name + boot_id, or NCCL_HOSTID.
uint64_t HostHash() {
  if (const char* id = std::getenv("NCCL_HOSTID"); id != nullptr && *id != '\0') {
    static std::once_flag once;
    std::call_once(once, [id] { Info(kEnv, "NCCL_HOSTID set by environment to %s", id); });
    return Fnv1a(id);
  }
  Node& n = TheNode();
  return Fnv1a(SimHostName() + (n.ok ? n.host->boot_id : ""));
}

// stat("/dev/shm").st_dev in NCCL; the topology's shm_device here, or P2PSIM_SHM_DEVICE (a container).
long ShmDevice() {
  if (const char* s = std::getenv("P2PSIM_SHM_DEVICE"); s != nullptr && *s != '\0') return std::atol(s);
  Node& n = TheNode();
  return n.ok ? n.host->shm_device : 0;
}

// ---------------------------------------------------------------------------------------------
// Rendezvous: the unique id names a directory; peers meet there

constexpr char kIdMagic[8] = "p2psimN";
struct IdLayout {
  char magic[8];
  char token[40];
};
static_assert(sizeof(IdLayout) <= sizeof(ncclUniqueId));

std::string RootDir() {
  const char* d = std::getenv("P2PSIM_NCCL_DIR");
  return d != nullptr && *d != '\0' ? d : "/dev/shm";
}

std::string RandomToken() {
  unsigned char bytes[16] = {};
  FILE* f = std::fopen("/dev/urandom", "rb");
  if (f == nullptr || std::fread(bytes, 1, sizeof bytes, f) != sizeof bytes) {
    uint64_t t = std::chrono::steady_clock::now().time_since_epoch().count() ^ (uint64_t(getpid()) << 32);
    std::memcpy(bytes, &t, sizeof t);
  }
  if (f != nullptr) std::fclose(f);
  std::string token;
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    token += hex;
  }
  return token;
}

bool WriteWhole(int fd, const void* data, size_t bytes) {
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

// Writes a file so readers never see it half-written (write to a temporary name, then rename).
bool PublishFile(const std::string& path, const void* data, size_t bytes) {
  std::string tmp = path + ".tmp" + std::to_string(getpid()) + "." + std::to_string(Tid());
  int fd = open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = WriteWhole(fd, data, bytes);
  close(fd);
  return ok && rename(tmp.c_str(), path.c_str()) == 0;
}

// A read-only mapping of a published file.
struct Mapped {
  const char* data = nullptr;
  size_t size = 0;
  Mapped() = default;
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped() { if (data != nullptr && size > 0) munmap(const_cast<char*>(data), size); }
  bool Open(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat sb {};
    fstat(fd, &sb);
    size = static_cast<size_t>(sb.st_size);
    if (size > 0) {
      void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      data = p == MAP_FAILED ? nullptr : static_cast<const char*>(p);
    }
    close(fd);
    return size == 0 || data != nullptr;
  }
};

double TimeoutSeconds() {
  const char* s = std::getenv("P2PSIM_NCCL_TIMEOUT");
  return s != nullptr && *s != '\0' ? std::atof(s) : 60.0;
}

using Clock = std::chrono::steady_clock;
Clock::time_point Deadline() {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(TimeoutSeconds()));
}

// Waits (futex, shared across processes) while *word == seen; false at the deadline.
bool FutexWaitChange(std::atomic<uint32_t>* word, uint32_t seen, Clock::time_point deadline) {
  while (word->load(std::memory_order_acquire) == seen) {
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return false;
    auto slice = std::min<Clock::duration>(left, std::chrono::milliseconds(100));
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  return true;
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// The shared segment of one communicator: a barrier, a destroy count and, per ordered rank pair,
// the number of point-to-point messages posted.
struct SyncHeader {
  std::atomic<uint32_t> count, generation, destroyed, aborted;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct SyncSegment {
  SyncHeader* header = nullptr;
  std::atomic<uint32_t>* posted = nullptr;  // [src * nranks + dst]
  size_t bytes = 0;

  bool Open(const std::string& path, int nranks) {
    bytes = sizeof(SyncHeader) + sizeof(std::atomic<uint32_t>) * size_t(nranks) * size_t(nranks);
    int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    // Every rank sets the same size; a file that already has it keeps its contents.
    bool ok = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    void* p = ok ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return false;
    header = static_cast<SyncHeader*>(p);
    posted = reinterpret_cast<std::atomic<uint32_t>*>(header + 1);
    return true;
  }
  void Close() {
    if (header != nullptr) munmap(header, bytes);
    header = nullptr;
  }
  // A split barrier so one thread can arrive for several communicators (ncclCommInitAll, groups)
  // before waiting on any of them.
  uint32_t Arrive(int nranks) {
    uint32_t gen = header->generation.load(std::memory_order_acquire);
    if (header->count.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(nranks)) {
      header->count.store(0, std::memory_order_relaxed);
      header->generation.fetch_add(1, std::memory_order_acq_rel);
      FutexWakeAll(&header->generation);
    }
    return gen;
  }
  // False at the deadline, or as soon as a rank has failed an operation (no point waiting for it).
  bool Wait(uint32_t gen, Clock::time_point deadline) {
    while (header->aborted.load(std::memory_order_acquire) == 0) {
      auto slice = std::min(deadline, Clock::now() + std::chrono::milliseconds(50));
      if (FutexWaitChange(&header->generation, gen, slice)) return header->aborted.load(std::memory_order_acquire) == 0;
      if (Clock::now() >= deadline) return false;
    }
    return false;
  }
  // A rank failed: release everyone waiting on this communicator.
  void Abort() {
    header->aborted.store(1, std::memory_order_release);
    header->generation.fetch_add(1, std::memory_order_acq_rel);
    FutexWakeAll(&header->generation);
  }
};

// What every rank publishes about itself at init (rank.<r> in the directory).
struct RankInfo {
  int rank = 0, pid = 0, cuda_dev = 0, nvml_dev = -1, comp_cap = 0;
  long shm_dev = 0;
  uint64_t host_hash = 0;
  int64_t bus_id = 0;
  char host[64] = {};
  char bus[32] = {};
};

// ---------------------------------------------------------------------------------------------
// Transports (NCCL 2.28: p2p.cc, shm.cc, net.cc, graph/paths.cc)

// NCCL's path types, with the values ncclTopoCheckP2p compares.
enum NcclPath { kLOC = 0, kNVL = 1, kPIX = 4, kPXB = 5, kPHB = 8, kSYS = 9 };

const char* PathName(int p) {
  switch (p) {
    case kLOC: return "LOC";
    case kNVL: return "NVL";
    case kPIX: return "PIX";
    case kPXB: return "PXB";
    case kPHB: return "PHB";
    default: return "SYS";
  }
}

NcclPath ToNcclPath(PathType t) {
  switch (t) {
    case PathType::kNVLink: return kNVL;
    case PathType::kPIX: return kPIX;
    case PathType::kPXB: return kPXB;
    case PathType::kPHB:
    case PathType::kNODE: return kPHB;
    default: return kSYS;
  }
}

// The user's P2P level (NCCL_P2P_DISABLE / NCCL_P2P_LEVEL), -1 when unset; echoed once.
int UserP2pLevel() {
  static int level = [] {
    if (const char* d = std::getenv("NCCL_P2P_DISABLE"); d != nullptr && *d != '\0') {
      int disable = std::atoi(d);
      Info(kAll, "%s set by environment to %d", "NCCL_P2P_DISABLE", disable);
      if (disable) return int(kLOC);
    }
    const char* s = std::getenv("NCCL_P2P_LEVEL");
    if (s == nullptr || *s == '\0') return -1;
    static const int kOldToNew[] = {kLOC, kPIX, kPXB, kPHB, kSYS, kSYS};
    int l = -1;
    if (std::isdigit(static_cast<unsigned char>(*s))) {
      int n = std::atoi(s);
      l = kOldToNew[std::clamp(n, 0, 5)];
    } else {
      static const std::pair<const char*, int> kNames[] = {{"LOC", kLOC}, {"NVL", kNVL}, {"PIX", kPIX},
                                                          {"PXB", kPXB}, {"PHB", kPHB}, {"SYS", kSYS}};
      for (auto& [name, v] : kNames)
        if (strcasecmp(s, name) == 0) l = v;
    }
    if (l >= 0) Info(kAll, "%s set by environment to %s", "NCCL_P2P_LEVEL", PathName(l));
    return l;
  }();
  return level;
}

struct Transport {
  enum Kind { kP2p, kShm, kNet } kind = kNet;
  std::string text;   // what follows "via", for connIndex 0 (NET adds /Shared on connIndex 1)
  double gbps = 0;
};

struct Comm;
Transport SelectTransport(Comm& comm, const RankInfo& a, const RankInfo& b);

// ---------------------------------------------------------------------------------------------
// Communicators

struct Comm {
  std::string dir, api = "ncclCommInitRank";
  uint64_t comm_hash = 0;
  int rank = 0, nranks = 0, nchannels = 2;
  RankInfo me;
  std::vector<RankInfo> ranks;
  SyncSegment sync;
  uint32_t init_gen = 0;
  bool ready = false, ring_connected = false;
  std::set<int> p2p_send_connected, p2p_recv_connected;
  std::set<std::pair<int, int>> refusals_reported;
  std::vector<uint32_t> send_seq, recv_seq;
  uint32_t split_seq = 0;
  // ncclCommGetAsyncError's answer: ncclInProgress while a nonblocking communicator's work runs on
  // its job's thread (stored last by that thread: what it did is visible to whoever reads this).
  std::atomic<ncclResult_t> async_error{ncclSuccess};
  bool nonblocking = false;                 // ncclConfig_t blocking = 0 (or NCCL_COMM_BLOCKING=0)
  std::shared_ptr<struct AsyncJob> job;     // the last work started for it (AsyncJob below)
  long long shm_charged = 0;
  p2psim::profiler::CommProfiler profiler;  // the profiler plugin's share of this communicator
  uint64_t coll_seq[8] = {};                // its collectives' sequence numbers, per ncclFunc_t
  // ncclCommSplit's extra fields for the Init lines.
  Comm* parent = nullptr;
  int color = 0, key = 0, split_count = 0;
  // ncclCommRegister's cache (page ranges, reference counted) and ncclCommWindowRegister's windows.
  struct Registration { uintptr_t begin, end; int refs; };
  std::vector<std::unique_ptr<Registration>> registrations;
  struct Window { void* ptr; size_t size; int flags; };
  std::vector<std::unique_ptr<Window>> windows;
  bool suspended = false;
  // ncclRedOpCreatePreMulSum's operators (destroyed ones stay, not live: their numbers are not reused).
  struct PreMul {
    bool live = true;
    ncclDataType_t type;
    ncclScalarResidence_t residence;
    const void* scalar;             // ncclScalarDevice: read when the collective runs
    std::vector<char> immediate;    // ncclScalarHostImmediate: read at creation
  };
  std::vector<PreMul> premul;
};

std::mutex g_comms_mu;
std::set<Comm*> g_comms;
thread_local std::string t_last_error;

bool Valid(Comm* c) {
  std::lock_guard<std::mutex> lock(g_comms_mu);
  return c != nullptr && g_comms.count(c) != 0;
}

void SetError(Comm* c, ncclResult_t r, const std::string& why) {
  t_last_error = why;
  if (c != nullptr && r != ncclSuccess) c->async_error.store(r, std::memory_order_release);
}

// A nonblocking communicator's init or group launch, run on a thread of its own as NCCL's
// ncclAsyncJob runs it: the call returns ncclInProgress at once. A communicator's next work, and its
// destruction, wait for the last (NCCL serialises them the same way).
struct AsyncJob {
  std::thread thread;
  std::once_flag joined;
  void Join() {
    std::call_once(joined, [this] {
      if (thread.joinable()) thread.join();
    });
  }
};

void JoinJob(Comm* c) {
  if (c->job != nullptr && c->job->thread.get_id() != std::this_thread::get_id()) c->job->Join();
}


const Host* HostOf(const RankInfo& r) {
  Node& n = TheNode();
  return n.ok ? n.topo.FindHost(r.host) : nullptr;
}

// GPUs of this host in the communicator (NCCL raises the default level to SYS on AMD with ≤ 2).
int LocalGpuCount(const Comm& c) {
  std::set<int> gpus;
  for (const RankInfo& r : c.ranks)
    if (r.host_hash == c.me.host_hash) gpus.insert(r.nvml_dev);
  return static_cast<int>(gpus.size());
}

// ncclTopoCheckP2p + p2pCanConnect: may a → b use P2P? Prints NCCL's refusal lines once per pair.
bool P2pAllowed(Comm& c, const RankInfo& a, const RankInfo& b, const Host& host, bool* read) {
  Node& node = TheNode();
  auto path = p2ptrace::ClassifyGpuPath(host, a.nvml_dev, b.nvml_dev);
  int type = a.nvml_dev == b.nvml_dev ? kLOC : ToNcclPath(path.type);
  int level = UserP2pLevel();
  if (level < 0) level = host.cpu_vendor == "amd" && LocalGpuCount(c) <= 2 ? kSYS : kPXB;
  if (type > level) return false;
  bool report = c.refusals_reported.insert({a.rank, b.rank}).second;
  auto status = p2psim::PeerStatus(node.topo, host, a.nvml_dev, b.nvml_dev);
  if (type != kLOC && status != p2psim::P2PStatus::kOk && Param("NCCL_IGNORE_DISABLED_P2P", 0) == 0) {
    if (type == kNVL && report)
      WARN("P2P is disabled between NVLINK connected GPUs %d and %d. This should not be the case given their "
           "connectivity, and is probably due to a hardware issue. If you still want to proceed, you can set "
           "NCCL_IGNORE_DISABLED_P2P=1.", a.nvml_dev, b.nvml_dev);
    else if (type < kSYS && report)
      Info(kInit, "P2P is disabled between connected GPUs %d and %d. You can repress this message with "
                  "NCCL_IGNORE_DISABLED_P2P=1.", a.nvml_dev, b.nvml_dev);
    if (type < kSYS) return false;
  }
  if (type != kLOC && !p2psim::PeerCapable(node.topo, host, a.nvml_dev, b.nvml_dev)) {
    int dev_a = CudaDevOfBus(a.bus), dev_b = CudaDevOfBus(b.bus);
    if (dev_a >= 0 && dev_b >= 0) {
      if (report)
        Info(kInit | kP2p, "Could not enable P2P between dev %d(=%lx) and dev %d(=%lx)", dev_a, long(a.bus_id), dev_b,
             long(b.bus_id));
      return false;
    }
  }
  // "Enable P2P Read for Ampere/NVLink only", unless NCCL_P2P_READ_ENABLE says otherwise.
  *read = type == kNVL && a.comp_cap == 80 && b.comp_cap == 80;
  if (long long r = Param("NCCL_P2P_READ_ENABLE", -2); r != -2) *read = r != 0;
  return true;
}

// GPUDirect RDMA's means on a host: nvidia_peermem loaded and, before 2.23, registered with the RDMA
// core (NCCL looked only at /sys/kernel/mm/memory_peers/nv_mem/version then); or from 2.13 DMA-BUF
// where the host's kernel and driver give it, unless NCCL_DMABUF_ENABLE=0.
bool HostGdr(const Host* h) {
  if (h == nullptr) return false;
  bool peermem = h->gdr && (h->peermem_registered || VersionCode() >= NCCL_VERSION(2, 23, 0));
  bool dmabuf = h->dmabuf && VersionCode() >= NCCL_VERSION(2, 13, 0) && Param("NCCL_DMABUF_ENABLE", 1) != 0;
  return peermem || dmabuf;
}

// NCCL_IB_HCA as net_ib.cc applies it (utils.cc parseStringList/matchIfList): `^` excludes, `=`
// matches names exactly (else as prefixes), `name:port` one port; an empty list matches all.
bool IbHcaAllows(const std::string& name, int port) {
  const char* env = std::getenv("NCCL_IB_HCA");
  std::string spec = env ? env : "";
  bool search_not = !spec.empty() && spec[0] == '^';
  if (search_not) spec.erase(0, 1);
  bool search_exact = !spec.empty() && spec[0] == '=';
  if (search_exact) spec.erase(0, 1);
  int entries = 0;
  bool match = false;
  std::stringstream list(spec);
  for (std::string item; std::getline(list, item, ',');) {
    if (item.empty()) continue;
    ++entries;
    size_t colon = item.find(':');
    std::string prefix = item.substr(0, colon);
    int want = colon == std::string::npos ? -1 : std::atoi(item.c_str() + colon + 1);
    bool name_ok = search_exact ? name == prefix : name.compare(0, prefix.size(), prefix) == 0;
    if (name_ok && (want == -1 || want == port)) match = true;
  }
  if (entries == 0) match = true;
  return match != search_not;
}

// The NICs NCCL's IB transport can use: InfiniBand or RoCE with an active port that NCCL_IB_HCA
// selects, libibverbs there to open them, and NCCL_IB_DISABLE unset.
std::vector<const p2ptrace::Nic*> IbNics(const Host* h) {
  std::vector<const p2ptrace::Nic*> nics;
  if (h == nullptr || !h->libibverbs || Param("NCCL_IB_DISABLE", 0) != 0) return nics;
  for (const p2ptrace::Nic& n : h->nics)
    if ((n.kind == "ib" || n.kind == "roce") && n.state == "ACTIVE" && IbHcaAllows(n.name, 1)) nics.push_back(&n);
  return nics;
}

// The IB NIC NCCL pairs a GPU with: the nearest by PCIe, the first of equals (index into IbNics).
struct NicChoice {
  int index = -1;
  NcclPath path = kSYS;
};
NicChoice NicFor(const Host* h, int gpu) {
  NicChoice best;
  const p2ptrace::Gpu* g = h ? h->FindGpu(gpu) : nullptr;
  std::vector<const p2ptrace::Nic*> nics = IbNics(h);
  for (size_t i = 0; g && i < nics.size(); ++i) {
    NcclPath path = ToNcclPath(p2ptrace::ClassifyPciePath(*h, g->parent, nics[i]->parent));
    if (best.index < 0 || path < best.path) best = {static_cast<int>(i), path};
  }
  return best;
}

// NCCL_NET_GDR_LEVEL, -1 when unset; echoed once.
int UserGdrLevel() {
  static int level = [] {
    const char* s = std::getenv("NCCL_NET_GDR_LEVEL");
    if (s == nullptr || *s == '\0') return -1;
    int l = -1;
    static const int kOldToNew[] = {kLOC, kPIX, kPXB, kPHB, kSYS, kSYS};
    if (std::isdigit(static_cast<unsigned char>(*s))) {
      l = kOldToNew[std::clamp(std::atoi(s), 0, 5)];
    } else {
      static const std::pair<const char*, int> kNames[] = {{"LOC", kLOC}, {"PIX", kPIX}, {"PXB", kPXB},
                                                          {"PHB", kPHB}, {"SYS", kSYS}};
      for (auto& [name, v] : kNames)
        if (strcasecmp(s, name) == 0) l = v;
    }
    if (l >= 0) Info(kAll, "%s set by environment to %s", "NCCL_NET_GDR_LEVEL", PathName(l));
    return l;
  }();
  return level;
}

// A path type as this release numbers it in its GPU Direct RDMA lines (the enum moved over the
// releases: docs/research/nccl-net-lines.md, "Distance").
int PrintedPath(int p, int v) {
  // Columns: 2.4-2.5, 2.6-2.11, 2.12-2.25 (PXN inserted), 2.26 (C2C), 2.27+ (P2C).
  int era = v < NCCL_VERSION(2, 6, 0) ? 0 : v < NCCL_VERSION(2, 12, 0) ? 1 : v < NCCL_VERSION(2, 26, 0) ? 2
          : v < NCCL_VERSION(2, 27, 0) ? 3 : 4;
  static const int kPix[] = {0, 3, 3, 4, 4}, kPxb[] = {1, 4, 4, 5, 5}, kPhb[] = {2, 5, 6, 7, 8}, kSys[] = {4, 6, 7, 8, 9};
  switch (p) {
    case kLOC: return 0;
    case kPIX: return kPix[era];
    case kPXB: return kPxb[era];
    case kPHB: return kPhb[era];
    default: return kSys[era];
  }
}

// How a rank reaches the network: its nearest NIC, or from 2.12 (unless NCCL_PXN_DISABLE=1), when
// that is farther than PXB, the NIC of a rank of its communicator on its host whose GPU is NVLinked
// to it and within PXB of that NIC (PXN: the proxy rank carries its sends; graph/paths.cc).
struct NetRoute {
  NicChoice nic;
  int proxy_rank = -1;
};
NetRoute RouteFor(const Comm& c, const Host* h, const RankInfo& me) {
  NetRoute r{NicFor(h, me.nvml_dev)};
  if (h == nullptr || VersionCode() < NCCL_VERSION(2, 12, 0) || Param("NCCL_PXN_DISABLE", 0) == 1 || r.nic.index < 0 ||
      r.nic.path <= kPXB)
    return r;
  for (const RankInfo& peer : c.ranks) {
    if (peer.rank == me.rank || HostOf(peer) != h || peer.nvml_dev == me.nvml_dev) continue;
    const p2ptrace::NvLink* link = h->FindNvLink(me.nvml_dev, peer.nvml_dev);
    NicChoice near = NicFor(h, peer.nvml_dev);
    if (link != nullptr && link->links > 0 && near.index >= 0 && near.path <= kPXB) return {near, peer.rank};
  }
  return r;
}

// GPUDirect RDMA for one rank: the host's means, and the distance to its NIC (the PXN relay's, when
// it goes through one) within NCCL_NET_GDR_LEVEL (2.6+: within the level, default PXB; before:
// closer than it, default PHB). A refusal is printed once per GPU where the release prints it at
// INFO (to 2.28; 2.29 words it otherwise, 2.30 at TRACE).
bool GpuGdr(const Comm& c, const Host* h, const RankInfo& me) {
  if (!HostGdr(h)) return false;
  NicChoice nic = RouteFor(c, h, me).nic;
  if (nic.index < 0) return false;
  const int v = VersionCode();
  bool old = v < NCCL_VERSION(2, 6, 0);
  int level = UserGdrLevel() >= 0 ? UserGdrLevel() : old ? kPHB : kPXB;
  bool ok = old ? nic.path < level : nic.path <= level;
  static std::once_flag once;
  if (!ok && v < NCCL_VERSION(2, 29, 0) && me.pid == getpid())  // a process prints its own GPU's, not its peer's
    std::call_once(once, [&] {
      int d = PrintedPath(nic.path, v), l = PrintedPath(level, v);
      if (old)
        Info(kNet, "NET/IB : GPU Direct RDMA Disabled for GPU %d[%d] / HCA %d (distance %d >= %d)", me.cuda_dev,
             me.nvml_dev, nic.index, d, l);
      else if (v < NCCL_VERSION(2, 21, 0))
        Info(kNet, "GPU Direct RDMA Disabled for GPU %lx / HCA %d (distance %d > %d)", long(me.bus_id), nic.index, d, l);
      else if (v < NCCL_VERSION(2, 24, 0))
        Info(kNet, "GPU Direct RDMA Disabled for GPU %lx / HCA %lx (distance %d > %d)", long(me.bus_id), long(nic.index), d, l);
      else
        Info(kNet, "GPU Direct RDMA Disabled for GPU %d / HCA %lx (distance %d > %d)", me.rank, long(nic.index), d, l);
    });
  return ok;
}

// ncclNetInit's lines, once per process, as the release prints them (docs/research/nccl-net-lines.md):
// libibverbs missing (WARN before 2.11), no device, or the IB devices with each one's GPUDirect RDMA
// (NET subsystem only: hidden by the default NCCL_DEBUG_SUBSYS); then sockets where IB is unusable.
void ShowNetDevices() {
  static std::once_flag once;
  std::call_once(once, [] {
    const Host* h = TheNode().host;
    if (h == nullptr) return;
    const int v = VersionCode();
    std::string oob = "eth0:10.0.0." + std::to_string(1 + (Fnv1a(h->name) % 250)) + "<0>";
    if (Param("NCCL_IB_DISABLE", 0) == 0) {
      if (!h->libibverbs) {
        if (v < NCCL_VERSION(2, 11, 0)) WARN("Failed to open libibverbs.so[.1]");
        else Info(kInit, "Failed to open libibverbs.so[.1]");
      } else if (std::vector<const p2ptrace::Nic*> nics = IbNics(h); nics.empty()) {
        Info(kInit | kNet, "NET/IB : No device found.");
      } else {
        std::string list;
        for (size_t i = 0; i < nics.size(); ++i)
          list += " [" + std::to_string(i) + "]" + nics[i]->name + ":1/" + (nics[i]->kind == "ib" ? "IB" : "RoCE");
        Info(kInit | kNet, "NET/IB : Using%s ; OOB %s", list.c_str(), oob.c_str());
        for (size_t i = 0; i < nics.size(); ++i) {
          const char* name = nics[i]->name.c_str();
          int hca = static_cast<int>(i);
          if (v < NCCL_VERSION(2, 13, 0)) {
            if (!HostGdr(h)) Info(kNet, "NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)", hca, name);
          } else {
            Info(kNet, "NET/IB : GPU Direct RDMA %s for HCA %d '%s'", HostGdr(h) ? "Enabled" : "Disabled", hca, name);
          }
        }
        return;
      }
    }
    Info(kInit | kNet, "NET/Socket : Using [0]%s", oob.c_str());
  });
}

Transport NetTransport(const Comm& c, const RankInfo& a, const RankInfo& b) {
  Node& n = TheNode();
  const Host* ha = HostOf(a);
  const Host* hb = HostOf(b);
  Transport t;
  t.kind = Transport::kNet;
  bool ib = !IbNics(ha).empty() && !IbNics(hb).empty();
  bool gdr = ib && GpuGdr(c, ha, a) && GpuGdr(c, hb, b);  // both sides', for the rate; each side prints its own (NetText)
  t.text = ib ? "NET/IB/" : "NET/Socket/0";
  t.gbps = !n.ok ? 1 : ib ? (gdr ? n.topo.bandwidth.net_gdr : n.topo.bandwidth.net_ib) : n.topo.bandwidth.net_socket;
  return t;
}

// selectTransport: P2P, then SHM, then NET — the first that can connect.
Transport SelectTransport(Comm& c, const RankInfo& a, const RankInfo& b) {
  Node& n = TheNode();
  const Host* host = HostOf(a);
  bool same_host = a.host_hash == b.host_hash && host != nullptr && HostOf(b) == host;
  if (!same_host || a.shm_dev != b.shm_dev) return NetTransport(c, a, b);
  Transport t;
  bool read = false;
  if (P2pAllowed(c, a, b, *host, &read)) {
    t.kind = Transport::kP2p;
    bool same_process = a.pid == b.pid;
    // Before 2.19 another process's buffers came through CUDA IPC handles, not cuMem.
    t.text = std::string(same_process                                ? "P2P/direct pointer"
                         : VersionCode() >= NCCL_VERSION(2, 19, 0) ? "P2P/CUMEM"
                                                                     : "P2P/IPC") +
             (read ? "/read" : "");
    t.gbps = a.nvml_dev == b.nvml_dev ? p2psim::kDeviceLocalGbps
                                      : p2psim::DirectBandwidth(n.topo, *host, a.nvml_dev, b.nvml_dev);
    return t;
  }
  if (Param("NCCL_SHM_DISABLE", 0) == 0) {
    t.kind = Transport::kShm;
    // 2.30.7 dropped SHM's copy-engine mode and with it the second field; before 2.13 SHM had no
    // modes and said so in words.
    t.text = VersionCode() >= NCCL_VERSION(2, 30, 7)   ? "SHM/direct"
             : VersionCode() >= NCCL_VERSION(2, 13, 0) ? "SHM/direct/direct"
                                                       : "direct shared memory";
    t.gbps = n.topo.bandwidth.shm;
    return t;
  }
  return NetTransport(c, a, b);
}

// ---------------------------------------------------------------------------------------------
// /dev/shm of a simulated host: each SHM connection takes NCCL_BUFFSIZE + 1 MiB of dev_shm_mb,
// counted per live process in a file shared by all processes of that host and /dev/shm device.

using ShmRecord = p2psim::NcclShmRecord;

std::string ShmAccountPath(const RankInfo& me) {
  return RootDir() + "/" + p2psim::kNcclShmAccountPrefix + me.host + "-" + std::to_string(me.shm_dev);
}

// Adds `delta` bytes to this process's charge; false (nothing charged) when the host would run out.
bool ChargeShm(const RankInfo& me, long long delta, long long limit) {
  int fd = -1;
  for (int attempt = 0; attempt < 100; ++attempt) {
    fd = open(ShmAccountPath(me).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return true;  // cannot account: do not invent a failure
    flock(fd, LOCK_EX);
    struct stat sb {};
    if (fstat(fd, &sb) != 0 || sb.st_nlink > 0) break;
    close(fd);  // removed as idle while we waited for the lock: use the new one
    fd = -1;
  }
  if (fd < 0) return true;
  std::vector<ShmRecord> recs;
  ShmRecord r{};
  while (pread(fd, &r, sizeof r, off_t(recs.size() * sizeof r)) == sizeof r) recs.push_back(r);
  long long used = 0;
  int mine = -1;
  for (size_t i = 0; i < recs.size(); ++i) {
    if (recs[i].pid == getpid()) mine = int(i);
    else if (recs[i].pid != 0 && (kill(recs[i].pid, 0) == 0 || errno != ESRCH)) used += recs[i].bytes;
  }
  long long my_bytes = mine >= 0 ? recs[mine].bytes : 0;
  bool ok = delta <= 0 || used + my_bytes + delta <= limit;
  if (ok) {
    ShmRecord updated{getpid(), 0, std::max(0ll, my_bytes + delta)};
    size_t slot = mine >= 0 ? size_t(mine) : recs.size();
    for (size_t i = 0; mine < 0 && i < recs.size(); ++i)
      if (recs[i].pid == 0 || (kill(recs[i].pid, 0) != 0 && errno == ESRCH)) { slot = i; break; }
    pwrite(fd, &updated, sizeof updated, off_t(slot * sizeof updated));
  }
  flock(fd, LOCK_UN);
  close(fd);
  return ok;
}

ncclResult_t AllocShmSegment(Comm& c) {
  const Host* host = HostOf(c.me);
  long long size = Param("NCCL_BUFFSIZE", 4ll << 20) + (1ll << 20);
  long long limit = host != nullptr ? host->dev_shm_mb * (1ll << 20) : LLONG_MAX;
  if (ChargeShm(c.me, size, limit)) {
    c.shm_charged += size;
    return ncclSuccess;
  }
  std::string name = "/dev/shm/nccl-" + RandomToken().substr(0, 6);
  WARN("Error: failed to extend %s to %ld bytes, error: %s (%d)", name.c_str(), long(size), strerror(ENOSPC), ENOSPC);
  WARN("Error while %s shared memory segment %s (size %ld), error: %s (%d)", "creating", name.c_str(),
       long(size - 4096), strerror(ENOSPC), ENOSPC);
  return ncclSystemError;
}

// ---------------------------------------------------------------------------------------------
// Connections and their log lines

// A connection line's head as this release prints it: "Channel 00/1 : 0[3] -> 1[4]". Before 2.18
// an end is its bus id in hex (`0[1a000]`), later its NVML index; the connection index came to
// NET lines in 2.12 and to P2P lines in 2.14 (SHM lines never print it).
std::string ConnectionHead(int channel, int conn_index, Transport::Kind kind, const RankInfo& from, const RankInfo& to) {
  int v = VersionCode();
  bool indexed = kind == Transport::kNet ? v >= NCCL_VERSION(2, 12, 0) : kind == Transport::kP2p && v >= NCCL_VERSION(2, 14, 0);
  char head[128];
  int n = indexed ? std::snprintf(head, sizeof head, "Channel %02d/%d : ", channel, conn_index)
                  : std::snprintf(head, sizeof head, "Channel %02d : ", channel);
  if (v >= NCCL_VERSION(2, 18, 0))
    std::snprintf(head + n, sizeof head - n, "%d[%d] -> %d[%d]", from.rank, from.nvml_dev, to.rank, to.nvml_dev);
  else
    std::snprintf(head + n, sizeof head - n, "%d[%lx] -> %d[%lx]", from.rank, long(from.bus_id), to.rank, long(to.bus_id));
  return head;
}

// A NET connection as the printing rank's side has it: GPUDirect RDMA is each side's own (its GPU,
// its NIC, its peer-memory module), so the sender's and the receiver's lines may differ.
// A PXN send names its proxy rank: `NET/IB/0(4)/GDRDMA`; a receive never does.
std::string NetText(const Comm& c, const Transport& t, const RankInfo& me, bool send) {
  if (t.text.rfind("NET/IB/", 0) != 0) return t.text;
  const Host* h = HostOf(me);
  NetRoute route = RouteFor(c, h, me);
  return "NET/IB/" + std::to_string(std::max(0, route.nic.index)) +
         (send && route.proxy_rank >= 0 ? "(" + std::to_string(route.proxy_rank) + ")" : "") +
         (GpuGdr(c, h, me) ? "/GDRDMA" : "");
}

// One direction of one (channel, connIndex) connection, printed as NCCL prints it.
ncclResult_t ConnectSend(Comm& c, int channel, int conn_index, const RankInfo& peer) {
  Transport t = SelectTransport(c, c.me, peer);
  std::string head = ConnectionHead(channel, conn_index, t.kind, c.me, peer);
  switch (t.kind) {
    case Transport::kP2p:
      Info(kInit | kP2p, "%s via %s", head.c_str(), t.text.c_str());
      return ncclSuccess;
    case Transport::kShm:
      if (ncclResult_t r = AllocShmSegment(c); r != ncclSuccess) return r;
      Info(kInit | kShm, "%s via %s", head.c_str(), t.text.c_str());
      return ncclSuccess;
    case Transport::kNet:
      Info(kInit | kNet, "%s [send] via %s%s", head.c_str(), NetText(c, t, c.me, true).c_str(), conn_index == 1 ? "/Shared" : "");
      return ncclSuccess;
  }
  return ncclSuccess;
}

// The receive side prints only for NET (P2P and SHM receive setups are silent in release builds).
void ConnectRecv(Comm& c, int channel, int conn_index, const RankInfo& peer) {
  Transport t = SelectTransport(c, peer, c.me);
  if (t.kind == Transport::kNet)
    Info(kInit | kNet, "%s [receive] via %s%s", ConnectionHead(channel, conn_index, t.kind, peer, c.me).c_str(),
         NetText(c, t, c.me, false).c_str(), conn_index == 1 ? "/Shared" : "");
}

bool RingUsesGdr(Comm& c) {
  return GpuGdr(c, HostOf(c.me), c.me);
}

ncclResult_t ConnectRing(Comm& c) {
  if (c.ring_connected || c.nranks == 1) {
    c.ring_connected = true;
    return ncclSuccess;
  }
  const RankInfo& next = c.ranks[(c.rank + 1) % c.nranks];
  const RankInfo& prev = c.ranks[(c.rank + c.nranks - 1) % c.nranks];
  for (int ch = 0; ch < c.nchannels; ++ch) {
    ConnectRecv(c, ch, 0, prev);
    if (ncclResult_t r = ConnectSend(c, ch, 0, next); r != ncclSuccess) return r;
  }
  c.ring_connected = true;
  bool net = SelectTransport(c, c.me, next).kind == Transport::kNet;
  Info(kInit, "Connected all rings, use ring PXN %d GDR %d", net && RouteFor(c, HostOf(c.me), c.me).proxy_rank >= 0 ? 1 : 0,
       RingUsesGdr(c) ? 1 : 0);
  return ncclSuccess;
}

ncclResult_t ConnectP2p(Comm& c, int peer, bool send) {
  if (peer == c.rank) return ncclSuccess;  // NCCL copies to itself without a connection
  std::set<int>& done = send ? c.p2p_send_connected : c.p2p_recv_connected;
  if (!done.insert(peer).second) return ncclSuccess;
  for (int ch = 0; ch < c.nchannels; ++ch) {
    if (send) {
      if (ncclResult_t r = ConnectSend(c, ch, 1, c.ranks[peer]); r != ncclSuccess) return r;
    } else {
      ConnectRecv(c, ch, 1, c.ranks[peer]);
    }
  }
  return ncclSuccess;
}

// The slowest link of the ring: what a ring collective's bus bandwidth is limited by.
double RingGbps(Comm& c) {
  double gbps = 1e9;
  for (int r = 0; r < c.nranks; ++r)
    gbps = std::min(gbps, SelectTransport(c, c.ranks[r], c.ranks[(r + 1) % c.nranks]).gbps);
  return c.nranks > 1 ? gbps : p2psim::kDeviceLocalGbps;
}

// ---------------------------------------------------------------------------------------------
// Init

// Who joined: a pid marker per process; the sweep removes the directory once all of them are gone.
void Mark(const std::string& dir) {
  std::string marker = dir + "/" + p2psim::kNcclPidMarker + std::to_string(getpid());
  if (int fd = open(marker.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600); fd >= 0) close(fd);
}

// The communicator's directory, joined. Its first rank makes it under a name of its own with its
// marker inside, then renames it into place: a live directory is never empty, so a sweep may take
// an empty one (a rank killed half-way through making or removing it) for dead.
void JoinCommDir(const std::string& dir) {
  std::string mine = dir.substr(0, dir.rfind('/') + 1) + p2psim::kNcclSegmentPrefix + "new." +
                     std::to_string(getpid()) + "." + dir.substr(dir.rfind('/') + 1);
  if (mkdir(mine.c_str(), 0700) == 0) {
    Mark(mine);
    if (rename(mine.c_str(), dir.c_str()) == 0) return;
    p2psim::RemoveNcclCommDir(mine);  // another rank was first: join its directory
  }
  mkdir(dir.c_str(), 0700);
  Mark(dir);
}

std::string RankFile(const Comm& c, int r) { return c.dir + "/rank." + std::to_string(r); }

void LogInitLine(const Comm& c, const char* what) {
  // Older releases: no API name (before 2.23), no nvmlDev and no Init START (before 2.18), no
  // commId (before 2.16).
  int v = VersionCode();
  if (v < NCCL_VERSION(2, 16, 0)) {
    if (std::strcmp(what, "Init START") != 0)
      Info(kInit, "comm %p rank %d nranks %d cudaDev %d busId %lx - %s", static_cast<const void*>(&c), c.rank, c.nranks,
           c.me.cuda_dev, long(c.me.bus_id), what);
    return;
  }
  if (v < NCCL_VERSION(2, 23, 0)) {
    if (v < NCCL_VERSION(2, 18, 0) && std::strcmp(what, "Init START") == 0) return;
    char dev[32] = "";
    if (v >= NCCL_VERSION(2, 18, 0)) std::snprintf(dev, sizeof dev, " nvmlDev %d", c.me.nvml_dev);
    Info(kInit, "comm %p rank %d nranks %d cudaDev %d%s busId %lx commId 0x%llx - %s", static_cast<const void*>(&c), c.rank,
         c.nranks, c.me.cuda_dev, dev, long(c.me.bus_id), static_cast<unsigned long long>(c.comm_hash), what);
    return;
  }
  if (c.parent != nullptr)
    Info(kInit, std::strcmp(what, "Init START") == 0
                    ? "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p splitCount %d color %d key %d- %s"
                    : "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p splitCount %d color %d key %d - %s",
         c.api.c_str(), static_cast<const void*>(&c), c.rank, c.nranks, c.me.cuda_dev, c.me.nvml_dev,
         long(c.me.bus_id), static_cast<const void*>(c.parent), c.split_count, c.color, c.key, what);
  else
    Info(kInit, "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - %s", c.api.c_str(),
         static_cast<const void*>(&c), c.rank, c.nranks, c.me.cuda_dev, c.me.nvml_dev, long(c.me.bus_id),
         static_cast<unsigned long long>(c.comm_hash), what);
}

// What killed jobs left in the rendezvous root, removed once per process (at its first init).
void SweepOnce() {
  static std::once_flag once;
  std::call_once(once, [] { p2psim::SweepStaleNcclSegments(RootDir(), TimeoutSeconds() + 60); });
}

// First half of init: who am I; publish it and arrive at the barrier (no waiting, so one thread
// can start several ranks in a group).
ncclResult_t InitBegin(Comm& c, const std::string& token, int nranks, int rank) {
  Node& node = TheNode();
  if (!node.ok) {
    WARN("p2psim: %s", node.error.c_str());
    return ncclSystemError;
  }
  ShowVersion(rank);
  ShowNetDevices();
  c.dir = RootDir() + "/p2psim-nccl-" + token;
  c.comm_hash = Fnv1a(token);
  c.nranks = nranks;
  c.rank = rank;
  c.me.rank = rank;
  c.me.pid = getpid();
  c.me.cuda_dev = CurrentCudaDev();
  std::string bus = CudaBusId(c.me.cuda_dev);
  if (bus.empty()) {
    WARN("Cuda failure 'cudaDeviceGetPCIBusId' for device %d", c.me.cuda_dev);
    return ncclUnhandledCudaError;
  }
  std::snprintf(c.me.bus, sizeof c.me.bus, "%s", bus.c_str());
  c.me.bus_id = BusIdToInt64(bus);
  for (const auto& g : node.host->gpus)
    if (strcasecmp(g.bus_id.c_str(), bus.c_str()) == 0) c.me.nvml_dev = g.index;
  c.me.comp_cap = CudaCompCap(c.me.cuda_dev);
  if (node.host->dmabuf && VersionCode() >= NCCL_VERSION(2, 13, 0) && Param("NCCL_DMABUF_ENABLE", 1) != 0)
    Info(kInit, "DMA-BUF is available on GPU device %d", c.me.cuda_dev);
  c.me.host_hash = HostHash();
  c.me.shm_dev = ShmDevice();
  std::snprintf(c.me.host, sizeof c.me.host, "%s", node.host->name.c_str());
  long long nch = std::clamp<long long>(2, Param("NCCL_MIN_NCHANNELS", 1), Param("NCCL_MAX_NCHANNELS", 32));
  c.nchannels = static_cast<int>(std::clamp<long long>(nch, 1, 32));
  SweepOnce();
  JoinCommDir(c.dir);
  if (!c.sync.Open(c.dir + "/sync", nranks) || !PublishFile(RankFile(c, rank), &c.me, sizeof c.me)) {
    WARN("p2psim: cannot use the rendezvous directory %s: %s", c.dir.c_str(), strerror(errno));
    return ncclSystemError;
  }
  c.send_seq.assign(nranks, 0);
  c.recv_seq.assign(nranks, 0);
  LogInitLine(c, "Init START");
  c.init_gen = c.sync.Arrive(nranks);
  return ncclSuccess;
}

// Second half: wait for every rank, read them, print the layout, connect now when asked to.
ncclResult_t InitFinish(Comm& c) {
  auto t0 = Clock::now();
  if (!c.sync.Wait(c.init_gen, Deadline())) {
    WARN("p2psim: timed out after %.0f s waiting for %d ranks in %s", TimeoutSeconds(), c.nranks, c.dir.c_str());
    return ncclSystemError;
  }
  c.ranks.resize(c.nranks);
  for (int r = 0; r < c.nranks; ++r) {
    Mapped m;
    if (!m.Open(RankFile(c, r)) || m.size != sizeof(RankInfo)) {
      WARN("p2psim: rank %d's information is missing in %s", r, c.dir.c_str());
      return ncclSystemError;
    }
    std::memcpy(&c.ranks[r], m.data, sizeof(RankInfo));
  }
  // init.cc (2.28, 2.29): two ranks of one host on one GPU. (2.30 on refuses it with another text
  // unless NCCL_MULTI_RANK_GPU_ENABLE=1; not simulated: those releases let it pass here.)
  if (VersionCode() < NCCL_VERSION(2, 30, 0))
    for (const RankInfo& r : c.ranks)
      if (r.rank != c.rank && r.host_hash == c.me.host_hash && r.bus_id == c.me.bus_id) {
        WARN("Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx", c.rank, r.rank, long(c.me.bus_id));
        return ncclInvalidUsage;
      }
  if (c.rank == 0) {
    for (int ch = 0; ch < c.nchannels; ++ch) {
      std::string line;
      int width = static_cast<int>(std::to_string(std::max(0, c.nranks - 1)).size());
      for (int r = 0; r < c.nranks; ++r) line += " " + std::string(width - std::to_string(r).size(), ' ') + std::to_string(r);
      Info(kInit, "Channel %02d/%02d :%s", ch, c.nchannels, line.c_str());
    }
  }
  std::set<uint64_t> nodes;
  int local_ranks = 0, local_rank = 0;
  for (const RankInfo& r : c.ranks) {
    nodes.insert(r.host_hash);
    if (r.host_hash == c.me.host_hash) {
      if (r.rank < c.rank) ++local_rank;
      ++local_ranks;
    }
  }
  Info(kInit, "%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p channels per peer",
       c.nchannels, 0, 0, c.nchannels, 1);
  Info(kInit, "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d", static_cast<void*>(&c), c.rank,
       c.nranks, int(nodes.size()), local_ranks, local_rank, 0);
  double connect_s = 0;
  // Rings at init: before 2.22 always (lazy connect came with NCCL_RUNTIME_CONNECT), since then
  // when NCCL_RUNTIME_CONNECT=0.
  if (VersionCode() < NCCL_VERSION(2, 22, 0) || Param("NCCL_RUNTIME_CONNECT", 1) == 0) {
    auto tc = Clock::now();
    if (ncclResult_t r = ConnectRing(c); r != ncclSuccess) return r;
    connect_s = std::chrono::duration<double>(Clock::now() - tc).count();
  }
  // The profiler plugin, once per communicator before its transports connect (2.27+'s place).
  c.profiler = p2psim::profiler::InitComm(ProfilerHost(), c.comm_hash, nullptr, int(nodes.size()), c.nranks, c.rank);
  c.ready = true;
  LogInitLine(c, "Init COMPLETE");
  double total = std::chrono::duration<double>(Clock::now() - t0).count();
  if (VersionCode() >= NCCL_VERSION(2, 22, 0))  // the line came with 2.22
    Info(kInit, "Init timings - %s: rank %d nranks %d total %.2f (kernels %.2f, alloc %.2f, bootstrap %.2f, allgathers "
                "%.2f, topo %.2f, graphs %.2f, connections %.2f, rest %.2f)",
         c.api.c_str(), c.rank, c.nranks, total, 0.0, 0.0, total - connect_s, 0.0, 0.0, 0.0, connect_s, 0.0);
  return ncclSuccess;
}

// ---------------------------------------------------------------------------------------------
// Data types and reductions

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) { bits = sign; }
    else {
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int exp = int((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13), rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return uint16_t(half);
}

float Bf16ToFloat(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// FP8 as CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2 (OCP formats): E4M3 has no infinity (0x7f is NaN,
// 448 the largest), E5M2 is binary16's top byte. Conversions round to nearest even and saturate to
// the largest finite value, as NCCL's reductions do (__NV_SATFINITE).
float E4m3ToFloat(uint8_t b) {
  int exp = (b >> 3) & 0xf, mant = b & 7;
  float v = exp == 0xf && mant == 7 ? std::nanf("")
            : exp == 0            ? std::ldexp(float(mant) / 8, -6)
                                  : std::ldexp(1 + float(mant) / 8, exp - 7);
  return (b & 0x80) ? -v : v;
}

uint8_t FloatToE4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448) return sign | 0x7e;
  int e = 0;
  std::frexp(a, &e);      // a = m * 2^e, m in [0.5, 1)
  int biased = e - 1 + 7;  // as 1.f * 2^(e-1)
  if (biased <= 0) {      // subnormal: steps of 2^-9
    int q = int(std::nearbyint(a * 512));
    return uint8_t(sign | (q >= 8 ? 0x08 : q));
  }
  int q = int(std::nearbyint((std::ldexp(a, 1 - e) - 1) * 8));
  if (q == 8) q = 0, ++biased;
  if (biased > 15 || (biased == 15 && q == 7)) return sign | 0x7e;
  return uint8_t(sign | (biased << 3) | q);
}

float E5m2ToFloat(uint8_t b) { return HalfToFloat(uint16_t(b) << 8); }

uint8_t FloatToE5m2(float f) {
  uint16_t h = FloatToHalf(f);
  if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) return uint8_t((h >> 8) | 0x02);  // NaN
  if ((h & 0x7fff) >= 0x7b80) return uint8_t(((h >> 8) & 0x80) | 0x7b);      // saturate to 57344
  return uint8_t((h + 0x7f + ((h >> 8) & 1)) >> 8);
}

// The element loops are most of a simulated job's time under ThreadSanitizer, and they touch only
// this call's own buffer and the peers' mapped files (other processes: nothing it could see).
#define P2PSIM_ELEMENT_LOOP __attribute__((no_sanitize("thread")))

template <typename T>
P2PSIM_ELEMENT_LOOP T Combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return T(a * b);
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return T(a + b);  // sum, avg (divided at the end)
  }
}

// acc[i] = acc[i] op x[i] for `count` elements of type T (stored as S, converted through T).
template <typename S, typename T, T (*Load)(S), S (*Store)(T)>
P2PSIM_ELEMENT_LOOP void AccumulateAs(void* acc, const void* x, size_t count, ncclRedOp_t op) {
  auto* a = static_cast<S*>(acc);
  auto* b = static_cast<const S*>(x);
  for (size_t i = 0; i < count; ++i) a[i] = Store(Combine<T>(Load(a[i]), Load(b[i]), op));
}

template <typename S, typename T, T (*Load)(S), S (*Store)(T)>
P2PSIM_ELEMENT_LOOP void DivideAs(void* acc, size_t count, int n) {
  auto* a = static_cast<S*>(acc);
  for (size_t i = 0; i < count; ++i) a[i] = Store(T(Load(a[i]) / T(n)));
}

template <typename T> P2PSIM_ELEMENT_LOOP T Same(T v) { return v; }

#define P2PSIM_FOR_TYPES(X)                                                             \
  X(ncclInt8, int8_t, int8_t, Same<int8_t>, Same<int8_t>)                               \
  X(ncclUint8, uint8_t, uint8_t, Same<uint8_t>, Same<uint8_t>)                          \
  X(ncclInt32, int32_t, int32_t, Same<int32_t>, Same<int32_t>)                          \
  X(ncclUint32, uint32_t, uint32_t, Same<uint32_t>, Same<uint32_t>)                     \
  X(ncclInt64, int64_t, int64_t, Same<int64_t>, Same<int64_t>)                          \
  X(ncclUint64, uint64_t, uint64_t, Same<uint64_t>, Same<uint64_t>)                     \
  X(ncclFloat16, uint16_t, float, HalfToFloat, FloatToHalf)                             \
  X(ncclFloat32, float, float, Same<float>, Same<float>)                                \
  X(ncclFloat64, double, double, Same<double>, Same<double>)                            \
  X(ncclBfloat16, uint16_t, float, Bf16ToFloat, FloatToBf16)                           \
  X(ncclFloat8e4m3, uint8_t, float, E4m3ToFloat, FloatToE4m3)                           \
  X(ncclFloat8e5m2, uint8_t, float, E5m2ToFloat, FloatToE5m2)

void Accumulate(void* acc, const void* x, size_t count, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
#define X(E, S, T, L, W) case E: AccumulateAs<S, T, L, W>(acc, x, count, op); break;
    P2PSIM_FOR_TYPES(X)
#undef X
    default: break;
  }
}

void Divide(void* acc, size_t count, ncclDataType_t type, int n) {
  switch (type) {
#define X(E, S, T, L, W) case E: DivideAs<S, T, L, W>(acc, count, n); break;
    P2PSIM_FOR_TYPES(X)
#undef X
    default: break;
  }
}

template <typename S, typename T, T (*Load)(S), S (*Store)(T)>
void ScaleAs(void* buf, size_t count, const void* scalar) {
  S raw;
  std::memcpy(&raw, scalar, sizeof raw);
  T k = Load(raw);
  auto* a = static_cast<S*>(buf);
  for (size_t i = 0; i < count; ++i) a[i] = Store(T(Load(a[i]) * k));
}

// buf[i] *= scalar (one element of `type`): a PreMulSum operator's local step.
void Scale(void* buf, size_t count, ncclDataType_t type, const void* scalar) {
  switch (type) {
#define X(E, S, T, L, W) case E: ScaleAs<S, T, L, W>(buf, count, scalar); break;
    P2PSIM_FOR_TYPES(X)
#undef X
    default: break;
  }
}

bool Reducible(ncclDataType_t t, ncclRedOp_t op) {
  return t >= ncclInt8 && t < ncclNumTypes && op >= ncclSum && op <= ncclAvg;
}

// ncclRedOpCreatePreMulSum's operators: ncclNumOps + their index in the communicator's list.
const Comm::PreMul* PreMulOf(const Comm& c, ncclRedOp_t op) {
  size_t i = size_t(op) - size_t(ncclNumOps);
  if (op < ncclNumOps || i >= c.premul.size() || !c.premul[i].live) return nullptr;
  return &c.premul[i];
}

// ---------------------------------------------------------------------------------------------
// Operations and groups

enum class OpKind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter, kSend, kRecv };

struct Op {
  OpKind kind;
  Comm* comm;
  const void* send;
  void* recv;
  size_t count;  // NCCL's count argument (per rank for AllGather/ReduceScatter/AlltoAll/Gather/Scatter)
  ncclDataType_t type;
  ncclRedOp_t red;
  int root_or_peer;
  cudaStream_t stream;
  int slot = 0;  // index among this group's collectives on the same communicator
  int profiler_mask = 0;  // the activation mask when it was called (NCCL copies it into the task then)
};

bool IsP2p(const Op& op) { return op.kind == OpKind::kSend || op.kind == OpKind::kRecv; }

thread_local int t_group_depth = 0;
thread_local std::vector<Op> t_ops;
thread_local std::vector<Comm*> t_pending_inits;

std::string CollFile(const Comm& c, int rank, int slot) {
  return c.dir + "/coll." + std::to_string(rank) + "." + std::to_string(slot);
}
std::string P2pFile(const Comm& c, int src, int dst, uint32_t seq) {
  return c.dir + "/p2p." + std::to_string(src) + "." + std::to_string(dst) + "." + std::to_string(seq);
}

// What this rank contributes to a collective (its bytes, published for the others).
std::pair<const void*, size_t> Contribution(const Op& op) {
  size_t sz = TypeSize(op.type), n = size_t(op.comm->nranks);
  switch (op.kind) {
    case OpKind::kBroadcast: return {op.comm->rank == op.root_or_peer ? op.send : nullptr, op.comm->rank == op.root_or_peer ? op.count * sz : 0};
    case OpKind::kScatter:  // only the root's n blocks
      return {op.comm->rank == op.root_or_peer ? op.send : nullptr, op.comm->rank == op.root_or_peer ? op.count * n * sz : 0};
    case OpKind::kReduceScatter:
    case OpKind::kAlltoAll: return {op.send, op.count * n * sz};
    default: return {op.send, op.count * sz};
  }
}

ncclResult_t Post(Op& op) {
  Comm& c = *op.comm;
  if (op.kind == OpKind::kRecv) return ncclSuccess;
  if (op.kind == OpKind::kSend) {
    uint32_t seq = c.send_seq[op.root_or_peer]++;
    if (!PublishFile(P2pFile(c, c.rank, op.root_or_peer, seq), op.send, op.count * TypeSize(op.type))) return ncclSystemError;
    auto& word = c.sync.posted[size_t(c.rank) * c.nranks + op.root_or_peer];
    word.fetch_add(1, std::memory_order_acq_rel);
    FutexWakeAll(&word);
    return ncclSuccess;
  }
  auto [data, bytes] = Contribution(op);
  if (const Comm::PreMul* pm = op.red >= ncclNumOps ? PreMulOf(c, op.red) : nullptr) {
    // Pre-multiplied locally, then summed like any contribution (device memory is host memory, so
    // a device-resident scalar is read now, as the collective runs).
    std::vector<char> scaled(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    Scale(scaled.data(), bytes / TypeSize(op.type), op.type,
          pm->residence == ncclScalarHostImmediate ? pm->immediate.data() : pm->scalar);
    return PublishFile(CollFile(c, c.rank, op.slot), scaled.data(), bytes) ? ncclSuccess : ncclSystemError;
  }
  return PublishFile(CollFile(c, c.rank, op.slot), data, bytes) ? ncclSuccess : ncclSystemError;
}

ncclResult_t Receive(Op& op) {
  Comm& c = *op.comm;
  int peer = op.root_or_peer;
  uint32_t seq = c.recv_seq[peer]++;
  auto& word = c.sync.posted[size_t(peer) * c.nranks + c.rank];
  auto deadline = Deadline();
  for (uint32_t seen = word.load(std::memory_order_acquire); seen <= seq; seen = word.load(std::memory_order_acquire)) {
    if (!FutexWaitChange(&word, seen, deadline)) {
      WARN("p2psim: timed out after %.0f s waiting for rank %d's ncclSend to rank %d", TimeoutSeconds(), peer, c.rank);
      return ncclSystemError;
    }
  }
  std::string path = P2pFile(c, peer, c.rank, seq);
  Mapped m;
  if (!m.Open(path)) return ncclSystemError;
  size_t want = op.count * TypeSize(op.type);
  if (m.size != want) {
    WARN("p2psim: rank %d received %zu bytes from rank %d but posted a receive of %zu bytes", c.rank, m.size, peer, want);
    unlink(path.c_str());
    return ncclInvalidUsage;
  }
  if (want > 0) std::memcpy(op.recv, m.data, want);
  unlink(path.c_str());
  return ncclSuccess;
}

// Reduces the `block`-th block (of `count` elements) of every rank's contribution into out.
ncclResult_t ReduceBlocks(Op& op, size_t block, void* out) {
  Comm& c = *op.comm;
  size_t bytes = op.count * TypeSize(op.type);
  std::vector<char> acc(bytes);
  for (int r = 0; r < c.nranks; ++r) {
    Mapped m;
    if (!m.Open(CollFile(c, r, op.slot)) || m.size < (block + 1) * bytes) return ncclSystemError;
    if (r == 0) std::memcpy(acc.data(), m.data + block * bytes, bytes);
    else Accumulate(acc.data(), m.data + block * bytes, op.count, op.type, op.red);
  }
  if (op.red == ncclAvg) Divide(acc.data(), op.count, op.type, c.nranks);
  if (bytes > 0) std::memcpy(out, acc.data(), bytes);
  return ncclSuccess;
}

// Copies rank r's contribution's `block`-th block of `bytes` to out.
ncclResult_t CopyBlock(const Op& op, int r, size_t block, size_t bytes, void* out) {
  Mapped m;
  if (!m.Open(CollFile(*op.comm, r, op.slot)) || m.size < (block + 1) * bytes) return ncclSystemError;
  if (bytes > 0) std::memcpy(out, m.data + block * bytes, bytes);
  return ncclSuccess;
}

ncclResult_t Complete(Op& op) {
  Comm& c = *op.comm;
  size_t bytes = op.count * TypeSize(op.type);
  switch (op.kind) {
    case OpKind::kSend: return ncclSuccess;
    case OpKind::kRecv: return Receive(op);
    case OpKind::kAllReduce: return ReduceBlocks(op, 0, op.recv);
    case OpKind::kReduce: return c.rank == op.root_or_peer ? ReduceBlocks(op, 0, op.recv) : ncclSuccess;
    case OpKind::kReduceScatter: return ReduceBlocks(op, size_t(c.rank), op.recv);
    case OpKind::kBroadcast: return CopyBlock(op, op.root_or_peer, 0, bytes, op.recv);
    case OpKind::kAllGather:
      for (int r = 0; r < c.nranks; ++r)
        if (ncclResult_t res = CopyBlock(op, r, 0, bytes, static_cast<char*>(op.recv) + r * bytes); res != ncclSuccess) return res;
      return ncclSuccess;
    case OpKind::kAlltoAll:
      for (int r = 0; r < c.nranks; ++r)
        if (ncclResult_t res = CopyBlock(op, r, size_t(c.rank), bytes, static_cast<char*>(op.recv) + r * bytes); res != ncclSuccess) return res;
      return ncclSuccess;
    case OpKind::kGather:  // rank r's block at recv + r × count, on the root only
      if (c.rank != op.root_or_peer) return ncclSuccess;
      for (int r = 0; r < c.nranks; ++r)
        if (ncclResult_t res = CopyBlock(op, r, 0, bytes, static_cast<char*>(op.recv) + r * bytes); res != ncclSuccess) return res;
      return ncclSuccess;
    case OpKind::kScatter: return CopyBlock(op, op.root_or_peer, size_t(c.rank), bytes, op.recv);
  }
  return ncclSuccess;
}

// The (peer, send?) pairs an operation moves data over. NCCL (2.28+, enqueue.cc) runs alltoall,
// gather and scatter as grouped sends and receives: alltoall one of each per peer, gather a send
// to the root and the root's receive from everyone, scatter the reverse. Peers in NCCL's p2p
// schedule order: +i sends and -i receives for i = 1…n-1.
std::vector<std::pair<int, bool>> P2pPeers(const Op& op) {
  const Comm& c = *op.comm;
  int n = c.nranks, root = op.root_or_peer;
  std::vector<std::pair<int, bool>> out;
  switch (op.kind) {
    case OpKind::kSend: return {{root, true}};
    case OpKind::kRecv: return {{root, false}};
    case OpKind::kAlltoAll:
      for (int i = 1; i < n; ++i) out.push_back({(c.rank + n - i) % n, false}), out.push_back({(c.rank + i) % n, true});
      return out;
    case OpKind::kGather:
      if (c.rank != root) return {{root, true}};
      for (int i = 1; i < n; ++i) out.push_back({(c.rank + n - i) % n, false});
      return out;
    case OpKind::kScatter:
      if (c.rank != root) return {{root, false}};
      for (int i = 1; i < n; ++i) out.push_back({(c.rank + i) % n, true});
      return out;
    default: return out;
  }
}

bool UsesP2pConnections(const Op& op) {
  return IsP2p(op) || op.kind == OpKind::kAlltoAll || op.kind == OpKind::kGather || op.kind == OpKind::kScatter;
}

constexpr double kLaunchSeconds = 5e-6;  // an operation's fixed cost, like a kernel launch on the fake cudart

// Simulated duration: nccl-tests' bus bytes over the slowest link the operation uses.
double OpSeconds(Op& op) {
  Comm& c = *op.comm;
  double n = c.nranks, bytes = double(op.count * TypeSize(op.type));
  double bus = bytes, gbps;
  if (UsesP2pConnections(op)) {
    // Send/recv: its pair. Alltoall, gather, scatter: the slowest pair of the whole operation, so
    // that, like a ring collective, it takes every rank the same time.
    gbps = 1e9;
    int root = op.root_or_peer;
    auto pair = [&](int a, int b) {
      if (a != b) gbps = std::min(gbps, SelectTransport(c, c.ranks[a], c.ranks[b]).gbps);
    };
    if (op.kind == OpKind::kSend) pair(c.rank, root);
    if (op.kind == OpKind::kRecv) pair(root, c.rank);
    for (int a = 0; a < c.nranks; ++a) {
      if (op.kind == OpKind::kGather) pair(a, root);
      if (op.kind == OpKind::kScatter) pair(root, a);
      for (int b = 0; op.kind == OpKind::kAlltoAll && b < c.nranks; ++b) pair(a, b);
    }
    if (gbps >= 1e9) gbps = p2psim::kDeviceLocalGbps;
    switch (op.kind) {
      case OpKind::kAlltoAll:
      case OpKind::kGather:
      case OpKind::kScatter: bus = bytes * n * (n - 1) / n; break;
      default: break;
    }
  } else {
    gbps = RingGbps(c);
    switch (op.kind) {
      case OpKind::kAllReduce: bus = bytes * 2 * (n - 1) / n; break;
      case OpKind::kAllGather:
      case OpKind::kReduceScatter: bus = bytes * n * (n - 1) / n; break;
      default: break;
    }
  }
  return kLaunchSeconds + bus / (gbps * 1e9);
}

// Lazy connect: the ring at a communicator's first ring collective, a p2p pair (connIndex 1) at
// the first operation that sends or receives over it.
ncclResult_t ConnectFor(Op& op) {
  Comm& c = *op.comm;
  if (!UsesP2pConnections(op)) return ConnectRing(c);
  for (auto [peer, send] : P2pPeers(op))
    if (ncclResult_t r = ConnectP2p(c, peer, send); r != ncclSuccess) return r;
  return ncclSuccess;
}

// What this rank sends in the batch, charged to the links it crosses (sim_links.h): a ring
// collective's bytes to the next rank (allreduce 2(n-1)/n × size, allgather and reducescatter
// (n-1) × count, broadcast and reduce the size unless the ring ends there), a send's to its peer,
// alltoall, gather and scatter per peer they send to. Receivers charge nothing, so a pair's bytes
// count once. P2P crosses the pair's NVLinks or PCIe, SHM both GPUs' PCIe links, NET the sender's.
void ChargeLinks(const std::vector<Op>& ops) {
  Node& n = TheNode();
  if (!n.ok || n.topo.link_faults.empty()) return;
  for (const Op& op : ops) {
    Comm& c = *op.comm;
    const Host* host = HostOf(c.me);
    if (host == nullptr || c.nranks < 2) continue;
    double bytes = double(op.count * TypeSize(op.type)), nr = c.nranks;
    int next = (c.rank + 1) % c.nranks, root = op.root_or_peer;
    std::vector<std::pair<int, double>> sends;  // (peer rank, bytes)
    switch (op.kind) {
      case OpKind::kAllReduce: sends = {{next, bytes * 2 * (nr - 1) / nr}}; break;
      case OpKind::kAllGather:
      case OpKind::kReduceScatter: sends = {{next, bytes * (nr - 1)}}; break;
      case OpKind::kBroadcast: if (next != root) sends = {{next, bytes}}; break;
      case OpKind::kReduce: if (c.rank != root) sends = {{next, bytes}}; break;
      case OpKind::kRecv: break;
      default:
        for (auto [peer, send] : P2pPeers(op))
          if (send) sends.push_back({peer, bytes});
    }
    for (auto [peer, b] : sends) {
      const RankInfo& to = c.ranks[size_t(peer)];
      auto moved = static_cast<uint64_t>(b);
      switch (SelectTransport(c, c.me, to).kind) {
        case Transport::kP2p: p2psim::ChargeTransfer(n.topo, *host, c.me.nvml_dev, to.nvml_dev, true, moved); break;
        case Transport::kShm: p2psim::ChargeTransfer(n.topo, *host, c.me.nvml_dev, to.nvml_dev, false, moved); break;
        case Transport::kNet: p2psim::ChargeTransfer(n.topo, *host, c.me.nvml_dev, -1, false, moved); break;
      }
    }
  }
}

// One kernel per stream and group: collectives run one after another, the sends and receives of a
// group run concurrently (the slowest one counts).
void AdvanceClocks(std::vector<Op>& ops) {
  std::map<cudaStream_t, std::pair<double, double>> per_stream;  // (collectives, p2p)
  for (Op& op : ops) {
    auto& [coll, p2p] = per_stream[op.stream];
    if (IsP2p(op)) p2p = std::max(p2p, OpSeconds(op));
    else coll += OpSeconds(op);
  }
  for (auto& [stream, t] : per_stream) AdvanceStream(stream, t.first + t.second);
}

// Every collective communicator of the batch passes one barrier round.
ncclResult_t BarrierRound(const std::vector<Comm*>& comms) {
  std::vector<uint32_t> gens;
  for (Comm* c : comms) gens.push_back(c->sync.Arrive(c->nranks));
  auto deadline = Deadline();
  for (size_t i = 0; i < comms.size(); ++i) {
    if (!comms[i]->sync.Wait(gens[i], deadline)) {
      if (comms[i]->sync.header->aborted.load() != 0) {
        WARN("p2psim: another rank of comm %p failed; rank %d gives up", static_cast<void*>(comms[i]), comms[i]->rank);
        return ncclRemoteError;
      }
      WARN("p2psim: timed out after %.0f s waiting for the other ranks of comm %p (rank %d of %d)", TimeoutSeconds(),
           static_cast<void*>(comms[i]), comms[i]->rank, comms[i]->nranks);
      return ncclSystemError;
    }
  }
  return ncclSuccess;
}

ncclResult_t Fail(std::vector<Op>& ops, ncclResult_t r) {
  for (Op& op : ops) {
    SetError(op.comm, r, "p2psim: operation failed");
    if (op.comm->sync.header != nullptr) op.comm->sync.Abort();
  }
  return r;
}

ncclResult_t CudaFailure(int err);  // below

// The profiler plugin's events for a batch that ran, per communicator (profiler_loader.h). Alltoall,
// gather and scatter are told as NCCL runs them: a Send or Recv per peer (P2pPeers), each on one
// channel and taking its own pair's time.
// The batch's launch as each communicator's plugin is told of it (before the kernels run).
std::vector<p2psim::profiler::LaunchedBatch> LaunchEvents(std::vector<Op>& ops) {
  namespace pf = p2psim::profiler;
  std::map<Comm*, std::vector<pf::OpEvent>> per_comm;
  for (Op& op : ops) {
    Comm& c = *op.comm;
    // An operation called under an empty mask starts no event (NCCL does no plugin work for it).
    if (!c.profiler.active || op.profiler_mask == 0) continue;
    if (UsesP2pConnections(op) && !IsP2p(op)) {
      const double bytes = double(op.count * TypeSize(op.type));
      for (auto [peer, send] : P2pPeers(op)) {
        int src = send ? c.rank : peer, dst = send ? peer : c.rank;
        double seconds = kLaunchSeconds + bytes / (SelectTransport(c, c.ranks[src], c.ranks[dst]).gbps * 1e9);
        per_comm[&c].push_back(pf::OpEvent{true, send ? pf::kSend : pf::kRecv, send ? op.send : op.recv, op.recv,
                                           op.count, op.type, peer, 0, peer % c.nchannels, 1, seconds,
                                           op.profiler_mask});
      }
      continue;
    }
    int func;
    switch (op.kind) {
      case OpKind::kAllReduce: func = pf::kAllReduce; break;
      case OpKind::kBroadcast: func = pf::kBroadcast; break;
      case OpKind::kReduce: func = pf::kReduce; break;
      case OpKind::kAllGather: func = pf::kAllGather; break;
      case OpKind::kReduceScatter: func = pf::kReduceScatter; break;
      case OpKind::kSend: func = pf::kSend; break;
      case OpKind::kRecv: func = pf::kRecv; break;
      default: continue;
    }
    bool p2p = IsP2p(op);
    pf::OpEvent e{p2p, func, op.send, op.recv, op.count, op.type, op.root_or_peer, p2p ? 0 : c.coll_seq[func]++,
                  p2p ? op.root_or_peer % c.nchannels : 0, p2p ? 1 : c.nchannels, OpSeconds(op), op.profiler_mask};
    if (p2p && op.kind == OpKind::kRecv) e.send_buff = op.recv;  // a receive's one buffer
    per_comm[&c].push_back(e);
  }
  std::vector<pf::LaunchedBatch> launched;
  for (auto& [c, events] : per_comm) launched.push_back(pf::LaunchBatch(c->profiler, c->rank, std::move(events)));
  return launched;
}

// P2PSIM_FAULT (DESIGN.md §9), for the stopped-job tests. "stop@R:N": the process holding rank R of
// a communicator stops itself (SIGSTOP) as its N-th operation batch begins, before it posts
// anything, so the other ranks wait in that operation; "die@R:N": it posts its contribution to its
// N-th batch and is then killed (SIGKILL), mid-collective; "hang@S-D": every operation that moves data
// from rank S to rank D (a send/recv of that pair, a ring collective with that hop) returns, and its
// stream's work never completes, as a kernel waiting on writes an ACS redirect lost; "late@R:MS": the
// process holding rank R sleeps MS milliseconds of wall-clock time after each of its batches, once
// every rank has met, so it calls each next operation late (a rank whose compute, input or host is
// slow every step). The sleep is after the call, never before: a tracer stamps the call on entry.
struct Fault {
  enum Kind { kNone, kStop, kDie, kHang, kLate } kind = kNone;
  int rank = -1, peer = -1;
  long batch = 0;  // stop/die: the batch; late: the milliseconds
};
const Fault& TheFault() {
  static const Fault f = [] {
    Fault out;
    const char* v = std::getenv("P2PSIM_FAULT");
    char kind[8] = {};
    int rank = -1, peer = -1;
    long batch = 0;
    if (v != nullptr && std::sscanf(v, "hang@%d-%d", &rank, &peer) == 2 && rank >= 0 && peer >= 0 && rank != peer) {
      out.kind = Fault::kHang;
      out.rank = rank;
      out.peer = peer;
    } else if (v != nullptr && std::sscanf(v, "%7[a-z]@%d:%ld", kind, &rank, &batch) == 3 && rank >= 0 && batch > 0 &&
               (std::strcmp(kind, "stop") == 0 || std::strcmp(kind, "die") == 0 || std::strcmp(kind, "late") == 0)) {
      out.kind = std::strcmp(kind, "stop") == 0 ? Fault::kStop : std::strcmp(kind, "die") == 0 ? Fault::kDie : Fault::kLate;
      out.rank = rank;
      out.batch = batch;
    } else if (v != nullptr && *v != '\0') {
      std::fprintf(stderr, "p2psim: P2PSIM_FAULT=%s is not stop@RANK:N, die@RANK:N, late@RANK:MS or hang@SRC-DST; no fault\n", v);
    }
    return out;
  }();
  return f;
}
// This batch's stop or death, if it is this process's: counted per process, for the batches of the rank.
Fault::Kind FaultNow(const std::vector<Op>& ops) {
  const Fault& f = TheFault();
  if ((f.kind != Fault::kStop && f.kind != Fault::kDie) || ops.empty() || ops.front().comm->rank != f.rank)
    return Fault::kNone;
  static std::atomic<long> batches{0};
  return batches.fetch_add(1) + 1 == f.batch ? f.kind : Fault::kNone;
}
// late@R:MS: rank R's process sleeps after every batch it is in (sends and receives included).
void LateAfter(const std::vector<Op>& ops) {
  const Fault& f = TheFault();
  if (f.kind != Fault::kLate) return;
  for (const Op& op : ops)
    if (op.comm->rank == f.rank) {
      std::this_thread::sleep_for(std::chrono::milliseconds(f.batch));
      return;
    }
}
// Whether `op` moves data over the hung pair (hang@S-D): its work then never completes.
bool OverHungPair(const Op& op) {
  const Fault& f = TheFault();
  const Comm& c = *op.comm;
  if (f.kind != Fault::kHang || f.rank >= c.nranks || f.peer >= c.nranks) return false;
  if (op.kind == OpKind::kSend) return c.rank == f.rank && op.root_or_peer == f.peer;
  if (op.kind == OpKind::kRecv) return c.rank == f.peer && op.root_or_peer == f.rank;
  if (UsesP2pConnections(op)) return true;  // alltoall, gather, scatter: every pair may be in it
  return f.peer == (f.rank + 1) % c.nranks;  // a ring collective: the ring 0 -> 1 -> … stalls at that hop
}

// Post, meet, complete, meet, advance clocks: what a batch's kernels do.
ncclResult_t Run(std::vector<Op>& ops) {
  Fault::Kind fault = FaultNow(ops);
  if (fault == Fault::kStop) raise(SIGSTOP);
  std::vector<Comm*> coll_comms;
  for (const Op& op : ops)
    if (!IsP2p(op) && std::find(coll_comms.begin(), coll_comms.end(), op.comm) == coll_comms.end())
      coll_comms.push_back(op.comm);
  std::vector<p2psim::profiler::LaunchedBatch> launched = LaunchEvents(ops);
  for (Op& op : ops)
    if (ncclResult_t r = Post(op); r != ncclSuccess) return Fail(ops, r);
  if (fault == Fault::kDie) kill(getpid(), SIGKILL);
  if (ncclResult_t r = BarrierRound(coll_comms); r != ncclSuccess) return Fail(ops, r);
  for (Op& op : ops)
    if (ncclResult_t r = Complete(op); r != ncclSuccess) return Fail(ops, r);
  ChargeLinks(ops);  // before the ranks meet: a downtrain one of them fires times every rank's operation
  if (ncclResult_t r = BarrierRound(coll_comms); r != ncclSuccess) return Fail(ops, r);
  AdvanceClocks(ops);
  static auto hang = Cuda<int (*)(cudaStream_t)>("p2psim_stream_hang");  // absent under a real runtime
  bool hung = false;
  for (Op& op : ops)
    if (hang != nullptr && OverHungPair(op)) hung = true, hang(op.stream);
  if (!hung)  // a kernel that never ends stops no channel
    for (const p2psim::profiler::LaunchedBatch& b : launched) p2psim::profiler::KernelsRan(b);
  LateAfter(ops);
  return ncclSuccess;
}

// A batch issued on a capturing stream: its kernels run at each launch of the graph, on the launch's
// stream (as NCCL's captured kernels do), with the data the buffers hold then.
struct CapturedOps {
  std::vector<Op> ops;
};
void ReplayCaptured(void* ctx, cudaStream_t stream) {
  std::vector<Op> ops = static_cast<CapturedOps*>(ctx)->ops;
  for (Op& op : ops) {
    if (!Valid(op.comm)) {
      WARN("p2psim: a CUDA graph replays an operation of a destroyed communicator: skipped");
      return;
    }
    op.stream = stream;
  }
  Run(ops);  // a failure is the communicator's error (ncclCommGetAsyncError), as a kernel's would be
}

// ncclGroupEnd (or a call outside a group): connect, then run now, or at each launch when captured.
ncclResult_t Execute(std::vector<Op> ops) {
  std::map<Comm*, int> slots;
  for (Op& op : ops)
    if (!IsP2p(op)) op.slot = slots[op.comm]++;
  for (Op& op : ops)
    if (ncclResult_t r = ConnectFor(op); r != ncclSuccess) return Fail(ops, r);
  using CaptureFn = int (*)(cudaStream_t, void (*)(void*, cudaStream_t), void*, void (*)(void*));
  static auto capture = Cuda<CaptureFn>("p2psim_capture_replay");  // absent under a real runtime
  if (capture != nullptr && !ops.empty()) {
    auto* captured = new CapturedOps{ops};
    int r = capture(ops.front().stream, ReplayCaptured, captured, [](void* c) { delete static_cast<CapturedOps*>(c); });
    if (r == 1) return ncclSuccess;
    if (r != 0) return CudaFailure(r);  // the capture was invalidated: its kernel launch fails
    delete captured;
  }
  return Run(ops);
}

ncclResult_t FinishInits(const std::vector<Comm*>& inits) {
  ncclResult_t result = ncclSuccess;
  for (Comm* c : inits)
    if (ncclResult_t r = InitFinish(*c); r != ncclSuccess) {
      SetError(c, r, "p2psim: communicator init failed");
      result = r;
    }
  return result;
}

ncclResult_t FinishPendingInits() {
  std::vector<Comm*> pending;
  pending.swap(t_pending_inits);
  return FinishInits(pending);
}

// Starts `work` for `comms` on a job's thread (AsyncJob), on the caller's device: each communicator
// says ncclInProgress until it ends, then the work's result (or the error the work gave it). A
// communicator already in error gives that error, and nothing starts.
ncclResult_t StartAsync(const std::vector<Comm*>& comms, std::function<ncclResult_t()> work) {
  for (Comm* c : comms) JoinJob(c);
  for (Comm* c : comms)
    if (ncclResult_t e = c->async_error.load(std::memory_order_acquire); e != ncclSuccess) return e;
  for (Comm* c : comms) c->async_error.store(ncclInProgress, std::memory_order_release);
  auto job = std::make_shared<AsyncJob>();
  job->thread = std::thread([comms, work = std::move(work), dev = CurrentCudaDev()] {
    CudaSetDevice(dev);
    ncclResult_t r = work();
    for (Comm* c : comms) {
      ncclResult_t running = ncclInProgress;
      c->async_error.compare_exchange_strong(running, r, std::memory_order_acq_rel);
    }
  });
  for (Comm* c : comms) c->job = job;
  return ncclInProgress;
}

// The communicators of a group's inits and operations when one of them is nonblocking (NCCL then
// launches the whole group asynchronously); none otherwise.
std::vector<Comm*> NonblockingGroup(const std::vector<Comm*>& inits, const std::vector<Op>& ops) {
  std::vector<Comm*> comms = inits;
  for (const Op& op : ops)
    if (std::find(comms.begin(), comms.end(), op.comm) == comms.end()) comms.push_back(op.comm);
  bool any = std::any_of(comms.begin(), comms.end(), [](const Comm* c) { return c->nonblocking; });
  return any ? comms : std::vector<Comm*>{};
}

ncclResult_t Enqueue(Op op) {
  if (!Valid(op.comm)) return ncclInvalidArgument;
  // NCCL 2.27.3+ copies the plugin's process-wide mask into the task at the call (taskAppend; from
  // 2.28 through the call's GroupApi start): what the plugin sets later is the next call's.
  op.profiler_mask = p2psim::profiler::ActivationMask();
  if (!op.comm->ready && t_group_depth == 0) return ncclInvalidUsage;
  if (TypeSize(op.type) == 0) {
    WARN("Invalid datatype %d", int(op.type));
    return ncclInvalidArgument;
  }
  bool reduces = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduce || op.kind == OpKind::kReduceScatter;
  if (reduces && op.red >= ncclNumOps) {
    const Comm::PreMul* pm = PreMulOf(*op.comm, op.red);
    if (pm == nullptr || pm->type != op.type) {
      WARN("Invalid reduction operation %d", int(op.red));
      return ncclInvalidArgument;
    }
  } else if (reduces && !Reducible(op.type, op.red)) {
    WARN("Invalid reduction operation %d", int(op.red));
    return ncclInvalidArgument;
  }
  if (op.root_or_peer < 0 || op.root_or_peer >= op.comm->nranks) {
    WARN("%s : invalid root/peer %d (nranks %d)", IsP2p(op) ? "ncclSend/ncclRecv" : "collective", op.root_or_peer,
         op.comm->nranks);
    return ncclInvalidArgument;
  }
  if (t_group_depth > 0) {
    t_ops.push_back(op);
    return ncclSuccess;
  }
  if (op.comm->nonblocking) return StartAsync({op.comm}, [op] { return Execute({op}); });
  return Execute({op});
}

Op MakeOp(OpKind kind, Comm* comm, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t red,
          int root_or_peer, cudaStream_t stream) {
  return Op{kind, comm, send, recv, count, type, red, root_or_peer, stream, 0};
}

// Starts a communicator's init; completes it now, or at ncclGroupEnd inside a group.
ncclResult_t InitRank(ncclComm_t* out, int nranks, const std::string& token, int rank, const char* api,
                      bool nonblocking = false) {
  if (out == nullptr) return ncclInvalidArgument;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("Invalid rank requested : %d/%d", rank, nranks);
    return ncclInvalidArgument;
  }
  auto* c = new Comm();
  c->api = api;
  c->nonblocking = nonblocking;
  if (ncclResult_t r = InitBegin(*c, token, nranks, rank); r != ncclSuccess) {
    delete c;
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(g_comms_mu);
    g_comms.insert(c);
  }
  *out = reinterpret_cast<ncclComm_t>(c);
  if (t_group_depth > 0) {
    t_pending_inits.push_back(c);
    return ncclSuccess;
  }
  if (nonblocking) return StartAsync({c}, [c] { return FinishInits({c}); });
  ncclResult_t r = InitFinish(*c);
  if (r != ncclSuccess) SetError(c, r, "p2psim: communicator init failed");
  return r;
}

std::string TokenOf(const ncclUniqueId& id) {
  IdLayout l;
  std::memcpy(&l, &id, sizeof l);
  if (std::memcmp(l.magic, kIdMagic, sizeof kIdMagic) != 0) return "";
  l.token[sizeof l.token - 1] = '\0';
  return l.token;
}

Comm* C(ncclComm_t comm) { return reinterpret_cast<Comm*>(comm); }

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

ncclResult_t Release(ncclComm_t comm, const char* what) {
  Comm* c = C(comm);
  if (!Valid(c)) return ncclInvalidArgument;
  JoinJob(c);
  {
    std::lock_guard<std::mutex> lock(g_comms_mu);
    g_comms.erase(c);
  }
  for (auto& reg : c->registrations)  // registrations never deregistered (regCleanup)
    Info(kInit, "Cleanup buffer %p pages %lx", reinterpret_cast<void*>(reg->begin),
         static_cast<unsigned long>((reg->end - reg->begin) / PageSize()));
  if (c->shm_charged > 0) {
    ChargeShm(c->me, -c->shm_charged, LLONG_MAX);
    p2psim::RemoveIdleShmAccount(ShmAccountPath(c->me));  // the host's last charge gone: no file left
  }
  p2psim::profiler::FinalizeComm(ProfilerHost(), &c->profiler);
  Info(kInit, "comm %p rank %d nranks %d cudaDev %d busId %lx - %s COMPLETE", static_cast<void*>(c), c->rank, c->nranks,
       c->me.cuda_dev, long(c->me.bus_id), what);
  // The last rank out removes the rendezvous directory (a job that dies first leaves it to the next
  // init's or p2psim launch's sweep).
  if (c->sync.header != nullptr && c->sync.header->destroyed.fetch_add(1) + 1 == uint32_t(c->nranks))
    p2psim::RemoveNcclCommDir(c->dir);
  c->sync.Close();
  delete c;
  return ncclSuccess;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The API

NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = VersionCode();
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* out) {
  if (out == nullptr) return ncclInvalidArgument;
  ShowVersion(-1);
  IdLayout l{};
  std::memcpy(l.magic, kIdMagic, sizeof kIdMagic);
  std::string token = RandomToken();
  std::snprintf(l.token, sizeof l.token, "%s", token.c_str());
  std::memset(out, 0, sizeof *out);
  std::memcpy(out, &l, sizeof l);
  return ncclSuccess;
}

NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  (void)comm;
  return t_last_error.c_str();
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  std::string token = TokenOf(commId);
  if (token.empty()) {
    WARN("p2psim: the unique id was not made by ncclGetUniqueId");
    return ncclInvalidArgument;
  }
  return InitRank(comm, nranks, token, rank, "ncclCommInitRank");
}

// config->blocking, else NCCL_COMM_BLOCKING, else blocking (NCCL's order); CGA, netName… do not
// change what the sim does.
bool Nonblocking(const ncclConfig_t* config) {
  if (config != nullptr && config->blocking != NCCL_CONFIG_UNDEF_INT) return config->blocking == 0;
  const char* env = std::getenv("NCCL_COMM_BLOCKING");
  return env != nullptr && std::atoi(env) == 0;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t* config) {
  std::string token = TokenOf(commId);
  if (token.empty()) return ncclInvalidArgument;
  return InitRank(comm, nranks, token, rank, "ncclCommInitRankConfig", Nonblocking(config));
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
         ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr) return ncclInvalidArgument;
  std::string token = TokenOf(commIds[0]);
  if (token.empty()) return ncclInvalidArgument;
  return InitRank(newcomm, nranks, token, myrank, "ncclCommInitRankScalable", Nonblocking(config));
}

namespace {
ncclResult_t FinishPendingSplits();  // below, with ncclCommSplit
bool SplitsPending();

ncclResult_t GroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t GroupEnd() {
  if (t_group_depth == 0) {
    WARN("ncclGroupEnd: not in a group call.");
    return ncclInvalidUsage;
  }
  if (--t_group_depth > 0) return ncclSuccess;
  // A nonblocking communicator's group is launched on a job's thread (splits, made in steps with
  // every rank, stay on the caller's).
  if (std::vector<Comm*> comms = NonblockingGroup(t_pending_inits, t_ops); !comms.empty() && !SplitsPending()) {
    std::vector<Comm*> inits;
    std::vector<Op> ops;
    inits.swap(t_pending_inits);
    ops.swap(t_ops);
    return StartAsync(comms, [inits, ops] {
      ncclResult_t r = FinishInits(inits);
      return r != ncclSuccess || ops.empty() ? r : Execute(ops);
    });
  }
  ncclResult_t r = FinishPendingSplits();
  if (ncclResult_t i = FinishPendingInits(); r == ncclSuccess) r = i;
  std::vector<Op> ops;
  ops.swap(t_ops);
  if (r != ncclSuccess) return r;
  return ops.empty() ? ncclSuccess : Execute(std::move(ops));
}
}  // namespace

NCCL_API(ncclResult_t, ncclGroupStart) { return GroupStart(); }
NCCL_API(ncclResult_t, ncclGroupEnd) { return GroupEnd(); }

// One process, many devices. Calls ncclGetUniqueId through the PLT, as the real library does.
NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) return ncclInvalidArgument;
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return r;
  int saved = CurrentCudaDev();
  GroupStart();  // internal, not through the PLT (the real library has no such self-call)
  ncclResult_t result = ncclSuccess;
  for (int i = 0; i < ndev && result == ncclSuccess; ++i) {
    CudaSetDevice(devlist != nullptr ? devlist[i] : i);
    result = InitRank(&comms[i], ndev, TokenOf(id), i, "ncclCommInitAll");
  }
  ncclResult_t end = GroupEnd();
  CudaSetDevice(saved);
  return result != ncclSuccess ? result : end;
}

// ncclCommSplit in two halves, like init, so that one thread can split several communicators in
// one group (nccl-tests' and PyTorch's single-process multi-GPU splits): SplitBegin publishes this
// rank's (color, key) and arrives at the parent's barrier; SplitFinish waits, reads everyone's,
// meets again and starts the child's init (finished with the group's other inits).
namespace {
struct PendingSplit {
  Comm* parent;
  Comm* child;  // null for NCCL_SPLIT_NOCOLOR
  int color, key;
  uint32_t seq, gen;
  std::string base;
};
thread_local std::vector<PendingSplit> t_pending_splits;
bool SplitsPending() { return !t_pending_splits.empty(); }

ncclResult_t SplitBegin(Comm* c, int color, int key, PendingSplit* s) {
  s->parent = c;
  s->color = color;
  s->key = key;
  s->seq = c->split_seq++;
  s->base = c->dir + "/split" + std::to_string(s->seq) + ".";
  int mine[2] = {color, key};
  if (!PublishFile(s->base + std::to_string(c->rank), mine, sizeof mine)) return ncclSystemError;
  s->gen = c->sync.Arrive(c->nranks);
  return ncclSuccess;
}

ncclResult_t WaitParent(Comm* c, uint32_t gen) {
  if (c->sync.Wait(gen, Deadline())) return ncclSuccess;
  WARN("p2psim: ncclCommSplit of comm %p (rank %d of %d): the other ranks did not arrive", static_cast<void*>(c), c->rank,
       c->nranks);
  return ncclSystemError;
}

// Every rank's (color, key) read; the child's rank among its color, ordered by (key, parent rank).
ncclResult_t SplitMembers(PendingSplit& s, int* nmembers, int* rank) {
  Comm* c = s.parent;
  std::vector<std::pair<int, int>> members;  // (key, parent rank) of my color
  for (int r = 0; r < c->nranks; ++r) {
    Mapped m;
    int theirs[2];
    if (!m.Open(s.base + std::to_string(r)) || m.size != sizeof theirs) return ncclSystemError;
    std::memcpy(theirs, m.data, sizeof theirs);
    if (s.color != NCCL_SPLIT_NOCOLOR && theirs[0] == s.color) members.push_back({theirs[1], r});
  }
  std::sort(members.begin(), members.end());
  *nmembers = int(members.size());
  *rank = int(std::find_if(members.begin(), members.end(), [&](auto& m) { return m.second == c->rank; }) - members.begin());
  return ncclSuccess;
}

ncclResult_t SplitChildBegin(PendingSplit& s, int nmembers, int rank) {
  Comm* c = s.parent;
  std::string token = c->dir.substr(c->dir.rfind("p2psim-nccl-") + 12) + "-s" + std::to_string(s.seq) + "c" + std::to_string(s.color);
  Comm* child = s.child;
  child->api = "ncclCommSplit";
  child->parent = c;
  child->color = s.color;
  child->key = s.key;
  child->split_count = int(s.seq);
  int saved = CurrentCudaDev();
  CudaSetDevice(c->me.cuda_dev);  // the child lives on the parent's device, whichever is current now
  ncclResult_t r = InitBegin(*child, token, nmembers, rank);
  CudaSetDevice(saved);
  return r;
}

// At ncclGroupEnd: the group's splits, each phase for all of them before the next.
ncclResult_t FinishPendingSplits() {
  std::vector<PendingSplit> splits;
  splits.swap(t_pending_splits);
  std::vector<std::pair<int, int>> shape(splits.size());
  std::vector<uint32_t> gens(splits.size());
  ncclResult_t result = ncclSuccess;
  for (size_t i = 0; i < splits.size() && result == ncclSuccess; ++i) result = WaitParent(splits[i].parent, splits[i].gen);
  for (size_t i = 0; i < splits.size() && result == ncclSuccess; ++i) {
    result = SplitMembers(splits[i], &shape[i].first, &shape[i].second);
    gens[i] = splits[i].parent->sync.Arrive(splits[i].parent->nranks);
  }
  for (size_t i = 0; i < splits.size() && result == ncclSuccess; ++i) result = WaitParent(splits[i].parent, gens[i]);
  for (size_t i = 0; i < splits.size(); ++i) {
    unlink((splits[i].base + std::to_string(splits[i].parent->rank)).c_str());
    if (splits[i].child == nullptr) continue;
    if (result == ncclSuccess) result = SplitChildBegin(splits[i], shape[i].first, shape[i].second);
    if (result == ncclSuccess) t_pending_inits.push_back(splits[i].child);
    else SetError(splits[i].child, result, "p2psim: ncclCommSplit failed");
  }
  return result;
}
}  // namespace

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  (void)config;
  Comm* c = C(comm);
  if (!Valid(c) || newcomm == nullptr) return ncclInvalidArgument;
  PendingSplit s{};
  if (ncclResult_t r = SplitBegin(c, color, key, &s); r != ncclSuccess) return r;
  // As NCCL does, the new communicator's handle is returned at once; inside a group it is ready
  // after ncclGroupEnd.
  if (color != NCCL_SPLIT_NOCOLOR) {
    s.child = new Comm();
    std::lock_guard<std::mutex> lock(g_comms_mu);
    g_comms.insert(s.child);
  }
  *newcomm = reinterpret_cast<ncclComm_t>(s.child);
  t_pending_splits.push_back(s);
  if (t_group_depth > 0) return ncclSuccess;
  ncclResult_t r = FinishPendingSplits();
  if (r != ncclSuccess) return r;
  return FinishPendingInits();
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  return Valid(C(comm)) ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  return Release(comm, "Destroy");
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  return Release(comm, "Abort");
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  if (!Valid(C(comm)) || count == nullptr) return ncclInvalidArgument;
  *count = C(comm)->nranks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  if (!Valid(C(comm)) || device == nullptr) return ncclInvalidArgument;
  *device = C(comm)->me.cuda_dev;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  if (!Valid(C(comm)) || rank == nullptr) return ncclInvalidArgument;
  *rank = C(comm)->rank;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (!Valid(C(comm)) || asyncError == nullptr) return ncclInvalidArgument;
  *asyncError = C(comm)->async_error.load(std::memory_order_acquire);
  return ncclSuccess;
}

// A sum whose every input is first multiplied by `scalar` (one element of `datatype`), for that
// communicator and type only (FSDP divides gradients this way).
NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  Comm* c = C(comm);
  if (!Valid(c)) return ncclInvalidArgument;
  if (op == nullptr || scalar == nullptr) {
    WARN("ncclRedOpCreatePreMulSum : %s argument is NULL", op == nullptr ? "op" : "scalar");
    return ncclInvalidArgument;
  }
  if (TypeSize(datatype) == 0 || !Reducible(datatype, ncclSum)) {
    WARN("Invalid datatype %d", int(datatype));
    return ncclInvalidArgument;
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    WARN("ncclRedOpCreatePreMulSum : invalid residence %d", int(residence));
    return ncclInvalidArgument;
  }
  Comm::PreMul pm;
  pm.type = datatype;
  pm.residence = residence;
  pm.scalar = scalar;
  if (residence == ncclScalarHostImmediate)
    pm.immediate.assign(static_cast<const char*>(scalar), static_cast<const char*>(scalar) + TypeSize(datatype));
  c->premul.push_back(std::move(pm));
  *op = ncclRedOp_t(int(ncclNumOps) + int(c->premul.size()) - 1);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  Comm* c = C(comm);
  if (!Valid(c)) return ncclInvalidArgument;
  if (op < ncclNumOps) {
    WARN("ncclRedOpDestroy : operator is a NCCL builtin.");
    return ncclInvalidArgument;
  }
  if (PreMulOf(*c, op) == nullptr) {
    WARN("ncclRedOpDestroy :  operator is garbage.");
    return ncclInvalidArgument;
  }
  c->premul[size_t(op) - size_t(ncclNumOps)].live = false;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kAllReduce, C(comm), sendbuff, recvbuff, count, datatype, op, 0, stream));
}

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kBroadcast, C(comm), sendbuff, recvbuff, count, datatype, ncclSum, root, stream));
}

// In-place broadcast; calls ncclBroadcast through the PLT, as the real library does.
NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kReduce, C(comm), sendbuff, recvbuff, count, datatype, op, root, stream));
}

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kAllGather, C(comm), sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream));
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kReduceScatter, C(comm), sendbuff, recvbuff, recvcount, datatype, op, 0, stream));
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kAlltoAll, C(comm), sendbuff, recvbuff, count, datatype, ncclSum, 0, stream));
}

NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kGather, C(comm), sendbuff, recvbuff, count, datatype, ncclSum, root, stream));
}

NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kScatter, C(comm), sendbuff, recvbuff, count, datatype, ncclSum, root, stream));
}

NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kSend, C(comm), sendbuff, nullptr, count, datatype, ncclSum, peer, stream));
}

NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  return Enqueue(MakeOp(OpKind::kRecv, C(comm), nullptr, recvbuff, count, datatype, ncclSum, peer, stream));
}

// ---------------------------------------------------------------------------------------------
// Memory, registration and windows (allocator.cc, register/register.cc, dev_runtime.cc)

namespace {

// NCCL's argcheck.cc.
ncclResult_t CommCheck(Comm* c, const char* op, const char* name) {
  if (c == nullptr) {
    WARN("%s : %s argument is NULL", op, name);
    return ncclInvalidArgument;
  }
  if (!Valid(c)) {
    WARN("Error: corrupted comm object detected");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t PtrCheck(const void* p, const char* op, const char* name) {
  if (p != nullptr) return ncclSuccess;
  WARN("%s : %s argument is NULL", op, name);
  return ncclInvalidArgument;
}

// CUDACHECK / CUCHECK: a failed CUDA call is a WARN and ncclUnhandledCudaError.
ncclResult_t CudaFailure(int err) {
  static auto str = Cuda<const char* (*)(int)>("cudaGetErrorString");
  WARN("Cuda failure %d '%s'", err, str != nullptr ? str(err) : "unknown error");
  return ncclUnhandledCudaError;
}

// cuMemGetAllocationGranularity(RECOMMENDED) of the GPUs the sim models: ncclMemAlloc rounds up to it.
constexpr size_t kMemGranularity = 2u << 20;

// What the fake cudart says a pointer is: device memory (and its device), host memory or unknown.
enum class PtrKind { kUnknown, kHost, kDevice };
PtrKind KindOf(const void* p, int* device) {
  static auto fn = Cuda<int (*)(cudaPointerAttributes*, const void*)>("cudaPointerGetAttributes");
  cudaPointerAttributes a{};
  if (fn == nullptr || fn(&a, p) != 0) return PtrKind::kUnknown;
  if (device != nullptr) *device = a.device;
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) return PtrKind::kDevice;
  return a.type == cudaMemoryTypeHost ? PtrKind::kHost : PtrKind::kUnknown;
}

// NCCL 2.28's symmetricSupport: one node whose ranks all reach each other over P2P (and NCCL_WIN_ENABLE).
bool SymmetricSupport(Comm& c) {
  if (Param("NCCL_WIN_ENABLE", 1) == 0) return false;
  for (const RankInfo& a : c.ranks)
    for (const RankInfo& b : c.ranks)
      if (a.rank != b.rank && SelectTransport(c, a, b).kind != Transport::kP2p) return false;
  return true;
}

Comm::Window* FindWindow(Comm& c, ncclWindow_t win) {
  for (auto& w : c.windows)
    if (reinterpret_cast<ncclWindow_t>(w.get()) == win) return w.get();
  return nullptr;
}

bool MemManagerDisabled() { return Param("NCCL_MEM_MANAGER_DISABLE", 0) != 0; }

}  // namespace

// Device memory of the current device through the fake cudart, sized as cuMem would (the granule),
// so copies and collectives use it like any device memory. A null pointer or zero size takes
// NCCL's cudaMalloc fallback and its answer.
NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  static auto alloc = Cuda<int (*)(void**, size_t)>("cudaMalloc");
  if (alloc == nullptr) return CudaFailure(35 /* cudaErrorInsufficientDriver */);
  if (ptr == nullptr || size == 0) {
    if (int e = alloc(ptr, size); e != 0) return CudaFailure(e);
    return ncclSuccess;
  }
  int dev = CurrentCudaDev();
  size_t rounded = (size + kMemGranularity - 1) / kMemGranularity * kMemGranularity;
  if (int e = alloc(ptr, rounded); e != 0) return CudaFailure(e);
  // cuMemSetAccess for every device that can reach this one; NCCL names the others.
  static auto count = Cuda<int (*)(int*)>("cudaGetDeviceCount");
  static auto can = Cuda<int (*)(int*, int, int)>("cudaDeviceCanAccessPeer");
  int ndev = 0;
  if (count != nullptr) count(&ndev);
  for (int i = 0; i < ndev; ++i) {
    int p2p = 0;
    if (i != dev && can != nullptr && can(&p2p, i, dev) == 0 && p2p) continue;
    if (i != dev) Info(kAlloc, "P2P not supported between GPU%d and GPU%d", dev, i);
  }
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  static auto release = Cuda<int (*)(void*)>("cudaFree");
  if (release == nullptr) return CudaFailure(35);
  int saved = CurrentCudaDev(), dev = saved;
  if (ptr != nullptr && KindOf(ptr, &dev) != PtrKind::kDevice)  // cuPointerGetAttribute fails
    return CudaFailure(1 /* cudaErrorInvalidValue */);
  CudaSetDevice(dev);
  int e = release(ptr);
  CudaSetDevice(saved);
  return e != 0 ? CudaFailure(e) : ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  long long local_register = Param("NCCL_LOCAL_REGISTER", 1);
  if (handle == nullptr) return PtrCheck(handle, "ncclCommRegister", "handle");  // NCCL would crash
  if (local_register == 0) {
    *handle = nullptr;
    Info(kReg, "Skipping registration for buffer %p size %zi (LocalRegister=%lld, P2pUsesMemcpy=%d)", buff,
         static_cast<ssize_t>(size), local_register, 0);
    return ncclSuccess;
  }
  Comm* c = C(comm);
  if (ncclResult_t r = CommCheck(c, "ncclCommRegister", "comm"); r != ncclSuccess) return r;
  switch (KindOf(buff, nullptr)) {
    case PtrKind::kUnknown: return CudaFailure(1);  // cuMemGetAddressRange: not device memory
    case PtrKind::kHost:
      Info(kReg, "Skipping registration for buffer %p size %zi since it contains segments backed by CPU memory", buff,
           static_cast<ssize_t>(size));
      *handle = nullptr;
      return ncclSuccess;
    case PtrKind::kDevice: break;
  }
  Info(kReg, "register comm %p buffer %p size %zi", static_cast<void*>(c), buff, static_cast<ssize_t>(size));
  uintptr_t page = PageSize();
  uintptr_t begin = reinterpret_cast<uintptr_t>(buff) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(buff) + size + page - 1) & ~(page - 1);
  for (auto& reg : c->registrations) {
    if (reg->begin <= begin && reg->end >= end) {  // inside a registered range: share it
      ++reg->refs;
      *handle = reg.get();
      return ncclSuccess;
    }
  }
  c->registrations.push_back(std::make_unique<Comm::Registration>(Comm::Registration{begin, end, 1}));
  *handle = c->registrations.back().get();
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  Comm* c = C(comm);
  if (ncclResult_t r = CommCheck(c, "ncclCommRegister", "comm"); r != ncclSuccess) return r;
  if (handle == nullptr) return ncclSuccess;
  auto it = std::find_if(c->registrations.begin(), c->registrations.end(),
                         [&](auto& reg) { return reg.get() == handle; });
  if (it == c->registrations.end()) {
    WARN("Deregister: Could not find handle");
    return ncclInvalidUsage;
  }
  if (--(*it)->refs == 0) c->registrations.erase(it);
  return ncclSuccess;
}

// A window for a communicator with symmetric support (one node, P2P between all its ranks); NULL
// without it, as NCCL returns.
NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags) {
  Comm* c = C(comm);
  if (ncclResult_t r = CommCheck(c, "ncclCommWindowRegister", "comm"); r != ncclSuccess) return r;
  if (ncclResult_t r = PtrCheck(win, "ncclCommWindowRegister", "win"); r != ncclSuccess) return r;
  *win = nullptr;
  if (buff == nullptr || size == 0) {
    WARN("%s: invalid pointer %p / size %zu", "ncclCommWindowRegister", buff, size);
    return ncclInvalidArgument;
  }
  if (!c->ready) return ncclInvalidUsage;
  if (!SymmetricSupport(*c)) return ncclSuccess;
  if (KindOf(buff, nullptr) != PtrKind::kDevice) return CudaFailure(1);  // cuMemGetAddressRange
  c->windows.push_back(std::make_unique<Comm::Window>(Comm::Window{buff, size, winFlags}));
  *win = reinterpret_cast<ncclWindow_t>(c->windows.back().get());
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  Comm* c = C(comm);
  if (ncclResult_t r = CommCheck(c, "ncclCommWindowDeregister", "comm"); r != ncclSuccess) return r;
  if (win == nullptr) return ncclSuccess;
  Comm::Window* w = FindWindow(*c, win);
  if (w == nullptr) {
    WARN("p2psim: ncclCommWindowDeregister: %p is not a window of comm %p", static_cast<void*>(win),
         static_cast<void*>(c));
    return ncclInvalidArgument;
  }
  c->windows.erase(std::find_if(c->windows.begin(), c->windows.end(), [&](auto& p) { return p.get() == w; }));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  Comm* c = C(comm);
  if (ncclResult_t r = CommCheck(c, "ncclWinGetUserPtr", "comm"); r != ncclSuccess) return r;
  if (ncclResult_t r = PtrCheck(outUserPtr, "ncclWinGetUserPtr", "outUserPtr"); r != ncclSuccess) return r;
  if (!SymmetricSupport(*c)) {
    Info(kInit, "Symmetric registration is not supported in this communicator.");
    *outUserPtr = nullptr;
    return ncclSuccess;
  }
  if (ncclResult_t r = PtrCheck(win, "ncclWinGetUserPtr", "win"); r != ncclSuccess) return r;
  Comm::Window* w = FindWindow(*c, win);
  if (w == nullptr) return ncclInvalidArgument;
  *outUserPtr = w->ptr;
  return ncclSuccess;
}

// ---------------------------------------------------------------------------------------------
// 2.29+ communicator calls that cost nothing to model: a new id, memory statistics, suspend/resume
// (no-ops apart from their checks and lines; the sim's buffers are host files).

NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId) {
  if (ncclResult_t r = CommCheck(C(comm), "ncclCommGetUniqueId", "comm"); r != ncclSuccess) return r;
  if (ncclResult_t r = PtrCheck(uniqueId, "ncclCommGetUniqueId", "uniqueId"); r != ncclSuccess) return r;
  return ncclGetUniqueId(uniqueId);
}

NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  Comm* c = C(comm);
  if (ncclResult_t r = CommCheck(c, "ncclCommSuspend", "comm"); r != ncclSuccess) return r;
  if ((flags & 0x01 /* NCCL_SUSPEND_MEM */) == 0) return ncclSuccess;
  if (MemManagerDisabled()) {
    WARN("MemManager: Suspend not supported, memory manager is disabled");
    return ncclInvalidUsage;
  }
  Info(kInit, "ncclCommSuspend: rank %d suspending memory", c->rank);
  c->suspended = true;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  Comm* c = C(comm);
  if (ncclResult_t r = CommCheck(c, "ncclCommResume", "comm"); r != ncclSuccess) return r;
  if (MemManagerDisabled()) {
    WARN("MemManager: Resume not supported, memory manager is disabled");
    return ncclInvalidUsage;
  }
  Info(kInit, "ncclCommResume: rank %d resuming all resources", c->rank);
  c->suspended = false;
  return ncclSuccess;
}

// ncclCommMemStat_t (2.29+): GpuMemSuspend 0, GpuMemSuspended 1, GpuMemPersist 2, GpuMemTotal 3. The
// suspendable memory is one NCCL_BUFFSIZE per connection made; nothing is persistent.
NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, int stat, uint64_t* value) {
  Comm* c = C(comm);
  if (ncclResult_t r = CommCheck(c, "ncclCommMemStats", "comm"); r != ncclSuccess) return r;
  if (value == nullptr) return ncclInvalidArgument;
  if (MemManagerDisabled()) {
    WARN("MemManager: MemStats not supported, memory manager is disabled");
    return ncclInvalidUsage;
  }
  size_t connections = c->p2p_send_connected.size() + c->p2p_recv_connected.size();
  connections = connections * size_t(c->nchannels) + (c->ring_connected && c->nranks > 1 ? 2 * size_t(c->nchannels) : 0);
  uint64_t scratch = c->suspended ? 0 : uint64_t(connections) * uint64_t(Param("NCCL_BUFFSIZE", 4ll << 20));
  switch (stat) {
    case 0: *value = scratch; return ncclSuccess;
    case 1: *value = c->suspended ? 1 : 0; return ncclSuccess;
    case 2: *value = 0; return ncclSuccess;
    case 3: *value = scratch; return ncclSuccess;
    default: return ncclInvalidArgument;
  }
}
