// The log tap's policy, per what the user set (DESIGN.md §4):
//   nothing                 NCCL_DEBUG=INFO, NCCL_DEBUG_FILE=<dir>/nccl.<host>.%p.log; nothing shown.
//   NCCL_DEBUG=L, no file   the same file; the level raised to INFO only for VERSION and WARN (INFO,
//                           ABORT and TRACE already print every line the tap needs); NCCL_DEBUG_SUBSYS
//                           untouched, so every INFO line in the file is one the user's mask shows.
//                           A thread forwards to stdout what level L shows (NcclOutputFilter).
//   NCCL_DEBUG_FILE         nothing; the viewer reads their file.
//   an NCCL_DEBUG NCCL does not know: nothing.
// Ordering: NCCL's lines reach stdout in NCCL's order, through the program's own FILE* stdout (so
// its buffering applies, as to NCCL's own fwrite). The thread wakes on inotify, so a line follows
// within milliseconds; PumpNcclLog() at a wrapped NCCL call's return puts the lines printed during
// the call before the program's next output; at exit() everything left is forwarded before stdio
// flushes. A process killed by a signal keeps its unforwarded lines in the tap file only.
// The host is written into the name (not %h) so this process can find the file NCCL opens; %p stays
// for NCCL, so a forked child writes its own file. Children inherit the tap through the environment
// and a marker; a child whose settings someone changed in between gets the user's settings back.
#include "shim/nccl_log_tap.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "core/nccl_log.h"
#include "shim/nccl_output_filter.h"
#include "shim/preflight.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

constexpr const char* kTapFile = "P2PTRACE_NCCL_TAP_FILE";  // the NCCL_DEBUG_FILE the tap set
constexpr const char* kForward = "P2PTRACE_NCCL_FORWARD";   // the user's NCCL_DEBUG, when forwarding

struct Forwarder {
  std::mutex mu;
  std::string pattern, dir;
  std::string path;  // the pattern expanded for this process (again after a fork)
  NcclUserLevel level = NcclUserLevel::kInfo;
  NcclOutputFilter filter{NcclUserLevel::kInfo};
  int fd = -1;
  off_t offset = 0;
  // Copies of fd and offset for PumpNcclLog's check without the lock: when the file has not grown,
  // a call costs one fstat and no lock.
  std::atomic<int> seen_fd{-1};
  std::atomic<off_t> seen_offset{0};
  bool thread_running = false;
  bool exiting = false;    // exit drained it, or the tap was withdrawn: nothing more to forward
  bool withdrawn = false;
};
std::atomic<Forwarder*> g_forwarder{nullptr};  // set once; never freed (it outlives exit's destructors)
bool g_tap_in_force = false;  // this process's NCCL reads the tap's settings (set before main)

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
bool Has(const char* name) { return std::getenv(name) != nullptr; }

// NCCL's %h: the host name up to its first dot. '%' doubled, as NCCL reads "%%" as '%'.
std::string TapPattern(const std::string& dir) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
  std::string name;
  for (const char* c = host; *c && *c != '.'; ++c) name += *c == '%' ? std::string("%%") : std::string(1, *c);
  return dir + "/nccl." + name + ".%p.log";
}

std::string Expand(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') out += std::to_string(getpid()), ++i;
    else if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == '%') out += '%', ++i;
    else out += pattern[i];
  }
  return out;
}

void StartThread(Forwarder* f);

// Reads what NCCL appended and writes the user's share of it; `mu` held.
void PumpLocked(Forwarder* f, bool finish) {
  if (f->fd < 0) {
    if (f->path.empty()) f->path = Expand(f->pattern);
    f->fd = open(f->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) return;  // NCCL has not logged yet
  }
  struct stat st {};
  if (fstat(f->fd, &st) != 0) return;
  if (st.st_size < f->offset) f->offset = 0;  // NCCL reopened it ("w" truncates): a new log
  std::string out;
  char buf[1 << 14];
  while (f->offset < st.st_size) {
    ssize_t n = pread(f->fd, buf, sizeof buf, f->offset);
    if (n <= 0) break;
    f->offset += n;
    f->filter.Feed(std::string_view(buf, static_cast<size_t>(n)), &out);
  }
  if (finish) f->filter.Finish(&out);
  if (!out.empty()) std::fwrite(out.data(), 1, out.size(), stdout);
  f->seen_offset.store(f->offset, std::memory_order_release);
  f->seen_fd.store(f->fd, std::memory_order_release);
}

void DrainAtExit() {
  Forwarder* f = g_forwarder.load(std::memory_order_acquire);
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(f->mu);
  if (f->withdrawn) return;
  f->exiting = true;
  PumpLocked(f, true);
}

void* ThreadMain(void* arg) {
  auto* f = static_cast<Forwarder*>(arg);
  // inotify on the directory: NCCL's writes to the file wake the thread (and so do other ranks'
  // writes to theirs, which cost one fstat). Without inotify, a poll every 50 ms.
  int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (in >= 0 && inotify_add_watch(in, f->dir.c_str(), IN_MODIFY | IN_CREATE) < 0) {
    close(in);
    in = -1;
  }
  char events[4096];
  while (true) {
    pollfd p{in, POLLIN, 0};
    if (in >= 0) poll(&p, 1, 1000);
    else usleep(50 * 1000);
    while (in >= 0 && read(in, events, sizeof events) > 0) {
    }
    std::lock_guard<std::mutex> lock(f->mu);
    if (f->exiting || !f->thread_running) break;  // exit has drained, or a fork made this a stale copy
    PumpLocked(f, false);
  }
  if (in >= 0) close(in);
  return nullptr;
}

// All signals blocked in the thread, so that none meant for the program runs its handler here.
// The caller holds f->mu.
void StartThread(Forwarder* f) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  f->thread_running = pthread_create(&t, nullptr, ThreadMain, f) == 0;
  if (f->thread_running) {
    pthread_setname_np(t, "p2ptrace-nccl");
    pthread_detach(t);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// fork: the child has no thread and its own file (NCCL expands %p), so it starts over; its thread
// starts at its first PumpNcclLog() (a wrapped NCCL call), and exit() drains it as ever.
void BeforeFork() {
  if (Forwarder* f = g_forwarder.load(std::memory_order_acquire)) f->mu.lock();
}
void AfterForkParent() {
  if (Forwarder* f = g_forwarder.load(std::memory_order_acquire)) f->mu.unlock();
}
void AfterForkChild() {
  Forwarder* f = g_forwarder.load(std::memory_order_acquire);
  if (f == nullptr) return;
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  f->offset = 0;
  f->seen_fd.store(-1, std::memory_order_relaxed);
  f->path.clear();  // this child's own file (NCCL's %p)
  f->filter = NcclOutputFilter(f->level);
  f->thread_running = false;
  f->mu.unlock();
}

void StartForwarding(const std::string& pattern, const std::string& dir, NcclUserLevel level) {
  auto* f = new Forwarder();
  f->pattern = pattern;
  f->dir = dir;
  f->level = level;
  f->filter = NcclOutputFilter(level);
  g_forwarder.store(f, std::memory_order_release);
  std::atexit(DrainAtExit);  // registered before main: runs after the program's own exit work
  pthread_atfork(BeforeFork, AfterForkParent, AfterForkChild);
  // The thread starts at the first wrapped NCCL call (PumpNcclLog): a process of the job that never
  // uses NCCL (a launcher, a shell) gets no thread, and forks as single-threaded as it was.
}

// A traced parent's tap, inherited through the environment. True when it is still in force; when
// someone changed NCCL_DEBUG or NCCL_DEBUG_FILE in between, their values win and ours go.
bool Inherited() {
  if (!Has(kTapFile)) return false;
  std::string forward = Getenv(kForward);
  NcclUserLevel level;
  bool forwarding = ParseNcclUserLevel(forward.c_str(), &level) && Has(kForward);
  std::string ours = forwarding && level == NcclUserLevel::kInfo ? forward : "INFO";
  bool file_ours = Getenv("NCCL_DEBUG_FILE") == Getenv(kTapFile) && Has("NCCL_DEBUG_FILE");
  bool debug_ours = Getenv("NCCL_DEBUG") == ours && Has("NCCL_DEBUG");
  if (file_ours && debug_ours) {
    g_tap_in_force = true;
    std::string pattern = Getenv(kTapFile);
    if (forwarding) StartForwarding(pattern, pattern.substr(0, pattern.rfind('/')), level);
    return true;
  }
  if (file_ours) unsetenv("NCCL_DEBUG_FILE");
  if (debug_ours) {
    if (forwarding) setenv("NCCL_DEBUG", forward.c_str(), 1);
    else unsetenv("NCCL_DEBUG");
  }
  unsetenv(kTapFile);
  unsetenv(kForward);
  unsetenv("P2PTRACE_NCCL_TAP");
  return false;
}


// ---- transport records ----------------------------------------------------------------------------
// NCCL's log file (the tap's, or the user's own NCCL_DEBUG_FILE) read as it grows: whole lines go to
// core's NcclLogParser, and each new connection of this process becomes a P2PTRACE_RECORD_NCCL_CONN
// record. Read after a wrapped NCCL call only when the file grew (otherwise one fstat), and at exit;
// so a connection NCCL logged during a call is in the trace before the call returns to the program.
struct LogReader {
  std::mutex mu;
  std::string pattern;  // NCCL_DEBUG_FILE before NCCL's %h/%p expansion
  std::string path;     // expanded for this process ("" until the first open attempt)
  int fd = -1;
  off_t offset = 0;     // bytes fed to the parser: whole lines only
  NcclLogParser* parser = nullptr;  // replaced in a fork child (its own file, its own lines)
  size_t connections_seen = 0;      // parser's connections already looked at
  std::set<std::string> emitted;    // keys of the connections recorded
  uint64_t open_calls = 0, next_open = 0;  // calls seen and the next one to try open() (backoff)
  bool stale = false;   // a fork child that has not started over yet
  // For the unlocked check: the fd and the file size at the last read.
  std::atomic<int> seen_fd{-1};
  std::atomic<off_t> seen_size{-1};
};
std::atomic<LogReader*> g_reader{nullptr};  // set once before main; never freed

// NCCL's expansion of NCCL_DEBUG_FILE: %h the host name up to its first dot, %p the pid, %% a '%'.
std::string ExpandDebugFile(const std::string& pattern) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  if (char* dot = std::strchr(host, '.')) *dot = '\0';
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] == '%' && next == 'p') out += std::to_string(getpid()), ++i;
    else if (pattern[i] == '%' && next == 'h') out += host, ++i;
    else if (pattern[i] == '%' && next == '%') out += '%', ++i;
    else out += pattern[i];
  }
  return out;
}

template <size_t N>
bool CopyField(char (&field)[N], const std::string& text) {
  size_t n = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), n);
  return n == text.size();
}

void EmitConnection(const NcclLog& log, const Connection& c) {
  const RankIdentity* rank = log.FindRank(c.logger.host, c.logger.pid, c.comm);
  TraceWriter::Emit<p2ptrace_nccl_conn_record>(
      P2PTRACE_RECORD_NCCL_CONN, TraceWriter::NextSeq(), [&](p2ptrace_nccl_conn_record& r) {
        CopyField(r.comm, c.comm);
        if (rank != nullptr) CopyField(r.comm_id, rank->comm_id);
        CopyField(r.keyword, c.keyword);
        r.channel = c.channel;
        r.conn_index = c.conn_index;
        r.src_rank = c.src_rank;
        r.dst_rank = c.dst_rank;
        r.direction = c.direction == "send"      ? P2PTRACE_NCCL_CONN_SEND
                      : c.direction == "receive" ? P2PTRACE_NCCL_CONN_RECEIVE
                                                 : P2PTRACE_NCCL_CONN_UNTAGGED;
        r.transport_class = static_cast<uint8_t>(c.transport_class);
        r.line = static_cast<uint32_t>(c.line);
        CopyField(r.src_dev, c.src_dev);
        CopyField(r.dst_dev, c.dst_dev);
        if (!CopyField(r.transport, c.transport)) r.flags |= P2PTRACE_NCCL_CONN_CUT;
      });
  PreflightObserveNccl(c);  // a path worse than the job start predicted: say so now
}

// Feeds what NCCL appended (whole lines) and records the new connections; `mu` held.
void ReadLogLocked(LogReader* r, bool may_open, bool at_exit) {
  if (r->stale) {  // fork child: NCCL writes this process's lines to a file of its own (%p)
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
    r->offset = 0;
    r->path.clear();
    r->parser = new NcclLogParser();  // the parent's stays with the parent's lines (not freed: cheap, rare)
    r->connections_seen = 0;
    r->emitted.clear();
    r->open_calls = r->next_open = 0;
    r->stale = false;
  }
  if (r->fd < 0) {
    // Until NCCL opens its file (at its first log line), back off: 1, 2, 4, … calls between tries,
    // and from 64 on every 64th, so a program calling NCCL before it logs pays for few open()s.
    if (!may_open || (!at_exit && r->open_calls++ < r->next_open)) return;
    r->next_open = r->open_calls + std::min<uint64_t>(std::max<uint64_t>(r->next_open, 1), 64);
    if (r->path.empty()) r->path = ExpandDebugFile(r->pattern);
    r->fd = open(r->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) return;
  }
  struct stat st {};
  if (fstat(r->fd, &st) != 0) return;
  if (st.st_size < r->offset) {  // NCCL reopened it ("w" truncates): a new log
    r->offset = 0;
    r->parser = new NcclLogParser();
    r->connections_seen = 0;
  }
  // Whole lines only, so that Finish() below never ends a line NCCL is still writing; the rest of a
  // line is read again next time. At exit, everything: NCCL writes no more.
  std::string data;
  char buf[1 << 14];
  bool fed = false;
  off_t pos = r->offset;
  while (pos < st.st_size) {
    ssize_t n = pread(r->fd, buf, sizeof buf, pos);
    if (n <= 0) break;
    pos += n;
    data.append(buf, static_cast<size_t>(n));
    size_t end = data.rfind('\n');
    size_t take = at_exit && pos >= st.st_size ? data.size() : end == std::string::npos ? 0 : end + 1;
    if (take == 0 && data.size() >= NcclLogParser::kMaxLineBytes) take = data.size();  // capped by the parser anyway
    if (take == 0) continue;
    r->parser->Feed(std::string_view(data.data(), take));
    r->offset += static_cast<off_t>(take);
    data.erase(0, take);
    fed = true;
  }
  r->seen_size.store(st.st_size, std::memory_order_release);
  r->seen_fd.store(r->fd, std::memory_order_release);
  if (!fed && !at_exit) return;
  // Settles the communicator of lines NCCL printed after its init (lazy connect), as a whole-file
  // parse would; the parser keeps accepting input afterwards.
  r->parser->Finish();
  const NcclLog& log = r->parser->log();
  if (log.connections.size() == r->connections_seen || !TraceWriter::Ready()) return;
  int pid = getpid();
  for (size_t i = r->connections_seen; i < log.connections.size(); ++i) {
    const Connection& c = log.connections[i];
    if (c.logger.pid >= 0 && c.logger.pid != pid) continue;  // another process sharing the user's file
    std::string key = c.comm + '\t' + c.keyword + '\t' + std::to_string(c.channel) + '\t' +
                      std::to_string(c.conn_index) + '\t' + std::to_string(c.src_rank) + '\t' +
                      std::to_string(c.dst_rank) + '\t' + c.direction + '\t' + c.transport;
    if (r->emitted.insert(key).second) EmitConnection(log, c);
  }
  r->connections_seen = log.connections.size();
}

void ReadLogAtExit() {
  LogReader* r = g_reader.load(std::memory_order_acquire);
  if (r == nullptr) return;
  std::lock_guard<std::mutex> lock(r->mu);
  ReadLogLocked(r, true, true);
}

void ReaderBeforeFork() {
  if (LogReader* r = g_reader.load(std::memory_order_acquire)) r->mu.lock();
}
void ReaderAfterForkParent() {
  if (LogReader* r = g_reader.load(std::memory_order_acquire)) r->mu.unlock();
}
void ReaderAfterForkChild() {
  LogReader* r = g_reader.load(std::memory_order_acquire);
  if (r == nullptr) return;
  r->stale = true;  // started over at the child's next NCCL call (no allocation here)
  r->seen_fd.store(-1, std::memory_order_relaxed);
  r->mu.unlock();
}

void StartReading(const std::string& pattern) {
  auto* r = new LogReader();
  r->pattern = pattern;
  r->parser = new NcclLogParser();
  g_reader.store(r, std::memory_order_release);
  std::atexit(ReadLogAtExit);  // registered before main: after the program's own exit work
  pthread_atfork(ReaderBeforeFork, ReaderAfterForkParent, ReaderAfterForkChild);
}

void ReadLogSlow(LogReader* r, bool may_open) {
  std::lock_guard<std::mutex> lock(r->mu);
  ReadLogLocked(r, may_open, false);
}
}  // namespace

void StartNcclLogTap(const Config& config) {
  std::string mode = Getenv("P2PTRACE_NCCL_LOG");
  if (mode == "off") return;
  if (!mode.empty() && mode != "auto") Warn("P2PTRACE_NCCL_LOG=" + mode + " is not auto or off; using auto");
  if (Inherited()) {
    StartReading(Getenv(kTapFile));
    return;
  }
  if (Has("NCCL_DEBUG_FILE")) {
    // The user's own file: NCCL opens it only when NCCL_DEBUG is set; read it as it grows.
    if (Has("NCCL_DEBUG")) StartReading(Getenv("NCCL_DEBUG_FILE"));
    return;
  }
  const char* debug = std::getenv("NCCL_DEBUG");
  NcclUserLevel level = NcclUserLevel::kInfo;
  if (debug != nullptr && !ParseNcclUserLevel(debug, &level)) return;  // NCCL's own business
  // NCCL writes to stdout when it cannot open the file: the directory must exist first.
  if (!MakeDirs(config.dir)) return;
  std::string pattern = TapPattern(config.dir);
  if (debug != nullptr) setenv(kForward, debug, 1);
  if (debug == nullptr || level != NcclUserLevel::kInfo) setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", pattern.c_str(), 1);
  setenv(kTapFile, pattern.c_str(), 1);
  setenv("P2PTRACE_NCCL_TAP", "1", 1);
  g_tap_in_force = true;
  StartReading(pattern);
  if (debug != nullptr) StartForwarding(pattern, config.dir, level);
}

// Checked against NCCL's git history (src/debug.cc, tags v2.12.12 … v2.14.3): only 2.13 tests
// `ncclDebugLevel > NCCL_LOG_VERSION` for the file before assigning the level it parsed.
bool NcclIgnoresDebugFile(int version_code) { return version_code >= 21300 && version_code < 21400; }

void WithdrawNcclLogTap() {
  if (!g_tap_in_force) return;
  g_tap_in_force = false;
  std::string pattern = Getenv(kTapFile);
  // The user's NCCL_DEBUG, verbatim: kForward holds it when they set one; otherwise they had none.
  if (Has(kForward)) setenv("NCCL_DEBUG", Getenv(kForward).c_str(), 1);
  else unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv(kTapFile);
  unsetenv(kForward);
  unsetenv("P2PTRACE_NCCL_TAP");
  g_reader.store(nullptr, std::memory_order_release);  // no file to read (the object is never freed)
  if (Forwarder* f = g_forwarder.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(f->mu);
    f->withdrawn = f->exiting = true;  // the thread stops at its next wake; exit drains nothing
    f->seen_fd.store(-1, std::memory_order_release);
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
  }
  if (!pattern.empty()) unlink(Expand(pattern).c_str());  // none expected: this NCCL never opens it
  // Opened after the environment is the user's again, so the trace's copy of it is what NCCL reads.
  if (TraceWriter::Ready())
    __atomic_fetch_or(&TraceWriter::header()->capture_flags, P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN, __ATOMIC_RELAXED);
}

void PumpNcclLog(bool read_log) {
  if (LogReader* r = read_log ? g_reader.load(std::memory_order_acquire) : nullptr) {
    // The common case, nothing new: the size alone, no lock (`st` not zeroed: fstat fills it).
    struct stat st;
    int fd = r->seen_fd.load(std::memory_order_acquire);
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size != r->seen_size.load(std::memory_order_acquire))
      ReadLogSlow(r, true);
  }
  Forwarder* f = g_forwarder.load(std::memory_order_acquire);
  if (f == nullptr) return;
  // The common case, nothing new: the size alone, no lock. (A stale fd here only sends us to the
  // locked path, which checks again.)
  if (int fd = f->seen_fd.load(std::memory_order_acquire); fd >= 0) {
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size == f->seen_offset.load(std::memory_order_acquire)) return;
  }
  std::lock_guard<std::mutex> lock(f->mu);
  if (f->exiting) return;
  if (!f->thread_running) StartThread(f);
  PumpLocked(f, false);
}

}  // namespace p2ptrace::shim
