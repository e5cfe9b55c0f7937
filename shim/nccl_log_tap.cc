// The log tap's policy, per what the user set (DESIGN.md §4):
//   nothing                 NCCL_DEBUG=INFO, NCCL_DEBUG_FILE=<dir>/nccl.<host>.%p.log; nothing shown.
//   NCCL_DEBUG=L, no file   the same file; the level raised to INFO only for VERSION and WARN (INFO,
//                           ABORT and TRACE already print every line the tap needs); NCCL_DEBUG_SUBSYS
//                           untouched, so every INFO line in the file is one the user's mask shows.
//                           What level L shows goes to stdout as NCCL writes it (NcclOutputFilter).
//   NCCL_DEBUG_FILE         nothing; the viewer reads their file.
//   an NCCL_DEBUG NCCL does not know: nothing.
// Ordering: NCCL writes the tap file through the shim's stdio stream, whose every write is forwarded
// at once, on NCCL's thread, through the program's own FILE* stdout (so its buffering applies, as to
// NCCL's own fwrite): each line reaches stdout exactly when it would have bare. At exit() a last
// partial line follows before stdio flushes.
// The host is written into the name (not %h) so this process can find the file NCCL opens; %p stays
// for NCCL, so a forked child writes its own file. Children inherit the tap through the environment
// and a marker; a child whose settings someone changed in between gets the user's settings back.
// Nothing of this happens before the process's first NCCL call, and only once its trace directory
// passed the checks of trace_dir.h (an untraced process's NCCL prints exactly what it would have).
// NCCL opens the tap file with fopen: OpenNcclTapFile (through the shim's fopen) creates it 0600 in
// the checked directory and puts NCCL's descriptor far above the program's, which a program that
// closes and reopens descriptors could otherwise be handed (NCCL's lines then in the program's file).
// The connections NCCL states are read from the file by the shim's thread (nccl_watchdog.h), never on
// an NCCL call's path, and at exit. No descriptor of the reader's own outlives a look: files are
// reopened by name when they grew.
#include "shim/nccl_log_tap.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <string>

#include "core/nccl_log.h"
#include "shim/base/environment.h"
#include "shim/nccl_output_filter.h"
#include "shim/record/trace_dir.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

constexpr const char* kTapFile = "P2PTRACE_NCCL_TAP_FILE";  // the NCCL_DEBUG_FILE the tap set
constexpr const char* kForward = "P2PTRACE_NCCL_FORWARD";   // the user's NCCL_DEBUG, when forwarding

// Policy case 2: NCCL writes the tap file through a stdio stream of the shim's (fopencookie, made
// in OpenNcclTapFile), so each of its writes lands in the file and, filtered to the user's level, on
// the program's stdout at that moment, on NCCL's thread: where and when NCCL bare would have written
// it (into the same FILE* stdout, so its buffering applies). No thread, no look at the file, nothing
// on an NCCL call's path.
struct Forwarder {
  std::mutex mu;
  NcclOutputFilter filter{NcclUserLevel::kInfo};
  bool exiting = false;  // exit drained it, or the tap was withdrawn: nothing more to forward
  bool withdrawn = false;
};
std::atomic<Forwarder*> g_forwarder{nullptr};  // set once; never freed (it outlives exit's destructors)
bool g_tap_in_force = false;  // this process's NCCL reads the tap's settings (set at its first NCCL call)

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
bool Has(const char* name) { return std::getenv(name) != nullptr; }

// The tap file's pattern (core/nccl_log.h), named after the host this process's trace file is
// named after (the sysroot's host name in the simulated node, else gethostname), so that a
// process's log and trace carry the same host. The directory is literal: NCCL would expand a '%'
// in it, fail to open the file and print the tap's lines on the program's stdout.
std::string TapDirPattern(const Config& config) { return NcclDebugFileLiteral(config.dir); }
std::string TapPattern(const Config& config) {
  return TapDirPattern(config) + "/" + NcclTapFilePattern(TraceWriter::Host(config));
}

// NCCL's expansion of NCCL_DEBUG_FILE for this process (core/nccl_log.h), with the host its trace
// names (the simulated node's in tests).
std::string ExpandDebugFile(const std::string& pattern) {
  return ExpandNcclDebugFile(pattern, TraceWriter::Host(TraceWriter::config()), getpid());
}

// Whether an unlocked check's path says the file did not change size since it was read.
bool Unchanged(const std::atomic<const std::string*>& path, off_t size) {
  const std::string* p = path.load(std::memory_order_acquire);
  struct stat st;  // not zeroed: stat fills it
  return p != nullptr && stat(p->c_str(), &st) == 0 && st.st_size == size;
}

// The user's share of what NCCL just wrote, to stdout (`finish`: at exit, a last partial line too).
void Forward(std::string_view bytes, bool finish) {
  Forwarder* f = g_forwarder.load(std::memory_order_acquire);
  if (f == nullptr) return;
  KeepErrno keep;
  std::lock_guard<std::mutex> lock(f->mu);
  if (f->exiting) return;
  std::string out;
  f->filter.Feed(bytes, &out);
  if (finish) {
    f->filter.Finish(&out);
    f->exiting = true;
  }
  if (!out.empty()) std::fwrite(out.data(), 1, out.size(), stdout);
}

void DrainAtExit() { Forward({}, true); }

// fork: the child goes on with the parent's stream (NCCL's FILE* came along), as NCCL's stdout would.
Forwarder* g_forwarder_locked = nullptr;  // what BeforeFork locked (the tap may start meanwhile)
void BeforeFork() {
  if ((g_forwarder_locked = g_forwarder.load(std::memory_order_acquire))) g_forwarder_locked->mu.lock();
}
void AfterFork() {
  if (Forwarder* f = g_forwarder_locked) f->mu.unlock();
}

void StartForwarding(NcclUserLevel level) {
  auto* f = new Forwarder();
  f->filter = NcclOutputFilter(level);
  g_forwarder.store(f, std::memory_order_release);
}

// What the tap in force set and what it replaced, kept in the shim (the environment gives it back to
// the program once NCCL has read it): published whole, never freed (read by any thread's fopen).
struct TapSettings {
  std::string file;         // the NCCL_DEBUG_FILE it set (the pattern)
  bool user_debug = false;  // the user had NCCL_DEBUG set …
  std::string debug;        // … to this
  std::string set_debug;    // the NCCL_DEBUG the tap put there
};
std::atomic<const TapSettings*> g_settings{nullptr};
std::atomic<bool> g_env_returned{false};  // the program's environment is its own again

// The tap's own variables out of the environment (they only hand the tap to children).
void UnsetMarkers() {
  UnsetEnvironment(kTapFile);
  UnsetEnvironment(kForward);
  UnsetEnvironment("P2PTRACE_NCCL_TAP");
}

// The user's NCCL settings back, exactly: NCCL_DEBUG verbatim (kForward holds it when they set one;
// otherwise they had none), no NCCL_DEBUG_FILE, no markers.
void RestoreUserSettings() {
  if (Has(kForward)) SetEnvironment("NCCL_DEBUG", Getenv(kForward).c_str());
  else UnsetEnvironment("NCCL_DEBUG");
  UnsetEnvironment("NCCL_DEBUG_FILE");
  UnsetMarkers();
}

// NCCL has read its debug settings (it is opening the tap's file, at the end of its debug init, and
// reads them again only from ncclResetDebugInit): the program's environment becomes exactly what
// it was before the tap, so the program and the children it starts from now on see the user's
// settings. A variable someone changed since the tap set it is left as they made it.
void ReturnEnvironment() {
  const TapSettings* t = g_settings.load(std::memory_order_acquire);
  if (t == nullptr || g_env_returned.exchange(true)) return;
  if (Getenv("NCCL_DEBUG_FILE") == t->file) UnsetEnvironment("NCCL_DEBUG_FILE");
  if (Has("NCCL_DEBUG") && Getenv("NCCL_DEBUG") == t->set_debug) {
    if (t->user_debug) SetEnvironment("NCCL_DEBUG", t->debug.c_str());
    else UnsetEnvironment("NCCL_DEBUG");
  }
  UnsetMarkers();
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
    auto* t = new TapSettings{Getenv(kTapFile), Has(kForward), forward, ours};
    g_settings.store(t, std::memory_order_release);
    if (forwarding) StartForwarding(level);
    return true;
  }
  if (file_ours) UnsetEnvironment("NCCL_DEBUG_FILE");
  if (debug_ours) {
    if (forwarding) SetEnvironment("NCCL_DEBUG", forward.c_str());
    else UnsetEnvironment("NCCL_DEBUG");
  }
  UnsetMarkers();
  return false;
}


// ---- transport records ----------------------------------------------------------------------------
// NCCL's log file (the tap's, or the user's own NCCL_DEBUG_FILE) read as it grows: whole lines go to
// core's NcclLogParser, and each new connection of this process becomes a P2PTRACE_RECORD_NCCL_CONN
// record. Read by the shim's thread (one stat a look when the file did not grow) and at exit.
struct LogReader {
  std::mutex mu;
  std::string pattern;  // NCCL_DEBUG_FILE before NCCL's %h/%p expansion
  std::string path;     // expanded for this process ("" until the first open attempt)
  bool own = false;     // the tap's file (the shim's own: no symlink), not the user's
  bool found = false;   // the file was there at the last look
  off_t offset = 0;     // bytes of the user's file read
  std::string pending;  // the start of a line whose end NCCL has not written yet
  NcclLogParser* parser = nullptr;  // replaced in a fork child (its own file, its own lines)
  size_t connections_seen = 0;      // parser's connections already looked at
  std::set<std::string> emitted;    // keys of the connections recorded
  bool stale = false;   // a fork child that has not started over yet
  // For the unlocked check: the path (never freed, replaced after a fork) and the size read last.
  std::atomic<const std::string*> seen_path{nullptr};
  std::atomic<off_t> seen_size{-1};
};
std::atomic<LogReader*> g_reader{nullptr};  // set once before main; never freed

template <size_t N>
bool CopyField(char (&field)[N], const std::string& text) {
  size_t n = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), n);
  return n == text.size();
}

// Told every connection recorded (StartNcclLogTap's caller chooses).
std::atomic<ConnectionObserver> g_observe{nullptr};

void EmitConnection(const NcclLog& log, const Connection& c) {
  // The communicator the grammar tied the line to (a lazy line names none), keyed as the report
  // keys it: commId, or a split's key derived from its parent's.
  const RankIdentity* rank = log.IdentityOf(c);
  TraceWriter::Emit<p2ptrace_nccl_conn_record>(
      P2PTRACE_RECORD_NCCL_CONN, TraceWriter::NextSeq(), [&](p2ptrace_nccl_conn_record& r) {
        CopyField(r.comm, !c.comm.empty() || rank == nullptr ? c.comm : rank->comm);
        if (rank != nullptr) CopyField(r.comm_id, !rank->comm_key.empty() ? rank->comm_key : rank->comm_id);
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
  if (ConnectionObserver observe = g_observe.load(std::memory_order_acquire)) observe(c, log);
}

// A fork child: NCCL writes this process's lines to a file of its own (%p); `mu` held.
void StartOver(LogReader* r) {
  if (!r->stale) return;
  r->found = false;
  r->offset = 0;
  r->path.clear();
  r->parser = new NcclLogParser();  // the parent's stays with the parent's lines (not freed: cheap, rare)
  r->connections_seen = 0;
  r->emitted.clear();
  r->pending.clear();
  r->stale = false;
}

// NCCL inits running in this process (NcclInitOnThisThread): while one runs, a connection line no
// init has claimed yet may still be claimed by its `Init COMPLETE` (NCCL before 2.18.3 prints no
// `Init START`, and its rings connect inside the init), so such lines wait.
std::atomic<int> g_inits{0};

// Records the connections the parser found since the last look, in order, up to the first one whose
// communicator an init still running may settle (all of them when `final`); `mu` held.
void EmitNewConnections(LogReader* r, bool final) {
  // Settles the communicator of lines NCCL printed after its init (lazy connect), as a whole-file
  // parse would; the parser keeps accepting input afterwards.
  const bool settle = final || g_inits.load(std::memory_order_acquire) == 0;
  if (settle) r->parser->Finish();
  const NcclLog& log = r->parser->log();
  if (log.connections.size() == r->connections_seen || !TraceWriter::Ready()) return;
  int pid = getpid();
  size_t i = r->connections_seen;
  for (; i < log.connections.size(); ++i) {
    const Connection& c = log.connections[i];
    if (!settle && c.attribution == Attribution::kNone) break;
    if (c.logger.pid >= 0 && c.logger.pid != pid) continue;  // another process sharing the user's file
    // A lazy line names no communicator: the one it was tied to tells two communicators' alike lines apart.
    const RankIdentity* id = log.IdentityOf(c);
    std::string comm = id != nullptr ? id->comm + '@' + std::to_string(id->FirstLine()) : c.comm;
    std::string key = comm + '\t' + c.keyword + '\t' + std::to_string(c.channel) + '\t' +
                      std::to_string(c.conn_index) + '\t' + std::to_string(c.src_rank) + '\t' +
                      std::to_string(c.dst_rank) + '\t' + c.direction + '\t' + c.transport;
    if (r->emitted.insert(key).second) EmitConnection(log, c);
  }
  r->connections_seen = i;
}

// Bytes NCCL wrote: whole lines go to the parser (so that Finish() never ends a line NCCL is still
// writing), the rest waits for its end; at exit, everything (NCCL writes no more). `mu` held.
void FeedLocked(LogReader* r, std::string_view bytes, bool at_exit) {
  r->pending.append(bytes);
  size_t end = r->pending.rfind('\n');
  size_t take = at_exit ? r->pending.size() : end == std::string::npos ? 0 : end + 1;
  if (take == 0 && r->pending.size() >= NcclLogParser::kMaxLineBytes) take = r->pending.size();  // capped by the parser anyway
  if (take > 0) {
    r->parser->Feed(std::string_view(r->pending.data(), take));
    r->pending.erase(0, take);
  }
  if (take > 0 || at_exit) EmitNewConnections(r, at_exit);
}

// What NCCL appended to the user's own NCCL_DEBUG_FILE (the tap's file is fed as NCCL writes it:
// TapWrite); `mu` held.
void ReadLogLocked(LogReader* r, bool at_exit) {
  StartOver(r);
  if (r->own) {
    if (at_exit) FeedLocked(r, {}, true);
    return;
  }
  if (r->path.empty()) r->path = ExpandDebugFile(r->pattern);
  // A regular file only (a FIFO there must not hang the job), opened anew each time (no descriptor
  // kept), reached through a symlink the user made if so.
  ScopedFd fd = OpenRegularFile(r->path, O_RDONLY, true);
  r->found = fd.ok();
  if (!fd.ok()) return;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return;
  if (st.st_size < r->offset) {  // NCCL reopened it ("w" truncates): a new log
    r->offset = 0;
    r->parser = new NcclLogParser();
    r->connections_seen = 0;
    r->pending.clear();
  }
  char buf[1 << 14];
  while (r->offset < st.st_size) {
    ssize_t n = pread(fd.get(), buf, sizeof buf, r->offset);
    if (n <= 0) break;
    r->offset += n;
    FeedLocked(r, std::string_view(buf, static_cast<size_t>(n)), false);
  }
  if (at_exit) FeedLocked(r, {}, true);
  r->seen_size.store(st.st_size, std::memory_order_release);
  if (r->seen_path.load(std::memory_order_relaxed) == nullptr)
    r->seen_path.store(new std::string(r->path), std::memory_order_release);
}

void ReadLogAtExit() {
  LogReader* r = g_reader.load(std::memory_order_acquire);
  if (r == nullptr) return;
  std::lock_guard<std::mutex> lock(r->mu);
  ReadLogLocked(r, true);
}

LogReader* g_reader_locked = nullptr;  // what ReaderBeforeFork locked
void ReaderBeforeFork() {
  if ((g_reader_locked = g_reader.load(std::memory_order_acquire))) g_reader_locked->mu.lock();
}
void ReaderAfterForkParent() {
  if (LogReader* r = g_reader_locked) r->mu.unlock();
}
void ReaderAfterForkChild() {
  LogReader* r = g_reader_locked;
  if (r == nullptr) return;
  r->stale = true;  // started over at the child's next NCCL call (no allocation here)
  r->seen_path.store(nullptr, std::memory_order_relaxed);
  r->mu.unlock();
}

void StartReading(const std::string& pattern, bool own) {
  auto* r = new LogReader();
  r->pattern = pattern;
  r->parser = new NcclLogParser();
  r->own = own;
  g_reader.store(r, std::memory_order_release);
}

void ReadLogSlow(LogReader* r) {
  KeepErrno keep;
  std::lock_guard<std::mutex> lock(r->mu);
  ReadLogLocked(r, false);
}

// NCCL's stream onto the tap file: every write goes to the file whole (a short write is retried),
// to the parser (its connections are in the trace before NCCL's call returns, with no look at the
// file) and to stdout where the user asked for NCCL's output. What happens to the file is the tap's
// business, never NCCL's: the stream reports every byte written and errno is left as it was.
struct TapStream {
  int fd;
};

// What NCCL wrote goes to the parser and to stdout under the reader's and the forwarder's locks. A
// signal handler that logs through NCCL while this thread holds one would wait for itself (NCCL's
// stream lock is recursive, so its write reaches the tap): its bytes wait in the thread's deferred
// buffer, taken in by the interrupted write when it is done. The buffer is made before any lock is
// held (no allocation in a handler) and freed with the thread.
struct Deferred {
  char bytes[8192];
  size_t used = 0;
};
constinit thread_local int t_in_tap __attribute__((tls_model("initial-exec"))) = 0;
constinit thread_local Deferred* t_deferred __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_key_t g_deferred_key;

void Consume(std::string_view bytes) {
  if (LogReader* r = g_reader.load(std::memory_order_acquire); r != nullptr && r->own) {
    std::lock_guard<std::mutex> lock(r->mu);
    StartOver(r);
    FeedLocked(r, bytes, false);
  }
  Forward(bytes, false);
}

ssize_t TapWrite(void* cookie, const char* buf, size_t n) {
  KeepErrno keep;
  const int fd = static_cast<TapStream*>(cookie)->fd;
  for (size_t done = 0; done < n;) {
    ssize_t w = write(fd, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  if (t_in_tap > 0) {  // a handler's write inside this thread's own: after it (what does not fit is only in the file)
    if (Deferred* d = t_deferred) {
      size_t take = std::min(n, sizeof d->bytes - d->used);
      std::memcpy(d->bytes + d->used, buf, take);
      d->used += take;
    }
    return static_cast<ssize_t>(n);
  }
  if (t_deferred == nullptr) {
    static bool keyed = pthread_key_create(&g_deferred_key, [](void* p) {
                          t_deferred = nullptr;
                          delete static_cast<Deferred*>(p);
                        }) == 0;
    if (keyed && (t_deferred = new (std::nothrow) Deferred) != nullptr) pthread_setspecific(g_deferred_key, t_deferred);
  }
  ++t_in_tap;
  Consume(std::string_view(buf, n));
  while (t_deferred != nullptr && t_deferred->used > 0) {  // a handler wrote meanwhile
    char bytes[sizeof t_deferred->bytes];
    size_t used;
    {
      sigset_t all, old;  // taken whole: a handler cannot append while it is copied
      sigfillset(&all);
      pthread_sigmask(SIG_BLOCK, &all, &old);
      used = t_deferred->used;
      std::memcpy(bytes, t_deferred->bytes, used);
      t_deferred->used = 0;
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    Consume(std::string_view(bytes, used));
  }
  --t_in_tap;
  return static_cast<ssize_t>(n);
}
int TapClose(void* cookie) {
  auto* t = static_cast<TapStream*>(cookie);
  int r = close(t->fd);
  delete t;
  return r;
}

// The tap's NCCL_DEBUG_FILE pattern (null when there is no tap): read by OpenNcclTapFile on any
// thread's fopen, so published whole and never freed.
std::atomic<const std::string*> g_tap_pattern{nullptr};

void AtExit() {
  DrainAtExit();    // the user's share of NCCL's output first, as it would have reached stdout
  ReadLogAtExit();  // then the connections
}
}  // namespace

void InstallNcclLogTapHooks() {
  // Registered before main, so that exit runs them after the program's own exit work; they do
  // nothing until a tap or reader starts (at the first NCCL call).
  std::atexit(AtExit);
  pthread_atfork(BeforeFork, AfterFork, AfterFork);
  pthread_atfork(ReaderBeforeFork, ReaderAfterForkParent, ReaderAfterForkChild);
}

FILE* OpenNcclTapFile(const char* path, const char* mode, FILE* (*real_fopen)(const char*, const char*)) {
  const std::string* pattern = g_tap_pattern.load(std::memory_order_acquire);
  if (pattern == nullptr || path == nullptr) return real_fopen(path, mode);
  // Any other file in one comparison; this process's tap file (a fork child's has its own pid).
  const Config& c = TraceWriter::config();
  if (std::strncmp(path, c.dir.c_str(), c.dir.size()) != 0 || path[c.dir.size()] != '/') return real_fopen(path, mode);
  KeepErrno keep;
  if (ExpandDebugFile(*pattern) != path) return real_fopen(path, mode);
  ReturnEnvironment();  // NCCL opens the tap file: it has read NCCL_DEBUG and NCCL_DEBUG_FILE
  std::string name = path + c.dir.size() + 1;
  // Created by the shim, 0600, in the checked directory (NCCL's fopen would follow a symlink and
  // use its own umask); NCCL's "w" truncates one it opens again.
  ScopedFd dir = OpenTraceDir(c.dir);
  ScopedFd fd = dir.ok() ? CreateTraceFile(dir.get(), name.c_str(), O_WRONLY) : ScopedFd();
  if (!fd.ok() && dir.ok() && errno == EEXIST && (fd = OpenOwnFile(dir.get(), name.c_str(), O_WRONLY)).ok() &&
      ftruncate(fd.get(), 0) != 0)
    fd = ScopedFd();
  // Never stdout, where NCCL writes when its fopen fails: the tap's INFO lines are not the user's.
  if (!fd.ok()) fd = ScopedFd(open("/dev/null", O_WRONLY | O_CLOEXEC));
  if (!fd.ok()) return real_fopen("/dev/null", mode);
  int high = MoveFdHigh(fd.Release());
  FILE* f = nullptr;
  if (auto* t = new (std::nothrow) TapStream{high}) {
    f = fopencookie(t, mode, cookie_io_functions_t{nullptr, TapWrite, nullptr, TapClose});
    if (f == nullptr) delete t;
  }
  if (f == nullptr) close(high);
  return f;
}

void StartNcclLogTap(const Config& config, ConnectionObserver observe) {
  g_observe.store(observe, std::memory_order_release);
  if (!config.nccl_log) return;
  // The tap is for a traced process only: when the trace directory is unusable (the warning said
  // so), NCCL keeps exactly the user's settings and prints exactly what it would have.
  // A traced parent's tap, inherited, stays only where this process traces into the same place.
  std::string inherited = Getenv(kTapFile);
  bool elsewhere = !inherited.empty() && inherited.substr(0, inherited.rfind('/')) != TapDirPattern(config);
  // Under a file size limit NCCL's lines could cross it, and the write past it is a SIGXFSZ that
  // kills the job (bare, NCCL writes nothing): no tap then (a user's own file is still read).
  bool limited = FileSizeLimit() != RLIM_INFINITY;
  bool traced = TraceWriter::Ready();
  if ((!traced || elsewhere || limited) && Has(kTapFile)) RestoreUserSettings();
  if (!traced) return;
  if (Inherited()) {
    std::string pattern = Getenv(kTapFile);
    StartReading(pattern, true);
    g_tap_pattern.store(new std::string(pattern), std::memory_order_release);
    return;
  }
  if (Has("NCCL_DEBUG_FILE")) {
    // The user's own file: NCCL opens it only when NCCL_DEBUG is set; read it as it grows.
    if (Has("NCCL_DEBUG")) StartReading(Getenv("NCCL_DEBUG_FILE"), false);
    return;
  }
  const char* debug = std::getenv("NCCL_DEBUG");
  NcclUserLevel level = NcclUserLevel::kInfo;
  if (limited || (debug != nullptr && !ParseNcclUserLevel(debug, &level))) return;  // NCCL's own business
  std::string pattern = TapPattern(config);
  g_tap_pattern.store(new std::string(pattern), std::memory_order_release);
  auto* t = new TapSettings{pattern, debug != nullptr, debug ? debug : "", debug && level == NcclUserLevel::kInfo ? debug : "INFO"};
  g_settings.store(t, std::memory_order_release);
  if (debug != nullptr) SetEnvironment(kForward, debug);
  if (debug == nullptr || level != NcclUserLevel::kInfo) SetEnvironment("NCCL_DEBUG", "INFO");
  SetEnvironment("NCCL_DEBUG_FILE", pattern.c_str());
  SetEnvironment(kTapFile, pattern.c_str());
  SetEnvironment("P2PTRACE_NCCL_TAP", "1");
  g_tap_in_force = true;
  StartReading(pattern, true);
  if (debug != nullptr) StartForwarding(level);
}

bool IsNcclLogTapSetting(const std::string& name, const std::string& value) {
  const TapSettings* t = g_settings.load(std::memory_order_acquire);
  if (!g_tap_in_force || t == nullptr) return false;
  if (name == "NCCL_DEBUG_FILE") return value == t->file;
  // INFO, set by the tap where the user set no level, or another one
  return name == "NCCL_DEBUG" && value == t->set_debug && (!t->user_debug || t->debug != value);
}

bool NcclInfoShownToUser() {
  const TapSettings* t = g_settings.load(std::memory_order_acquire);
  bool tapped = g_tap_in_force && t != nullptr;
  const char* now = std::getenv("NCCL_DEBUG");
  std::string debug = tapped ? t->debug : now ? now : "";
  if (tapped ? !t->user_debug : now == nullptr) return false;
  NcclUserLevel level;
  return !ParseNcclUserLevel(debug.c_str(), &level) || level == NcclUserLevel::kInfo;
}

std::atomic<bool> g_drop_version_line{false};
constinit thread_local int t_in_init __attribute__((tls_model("initial-exec"))) = 0;

void NoteNcclVersionForTap(int version_code) {
  const TapSettings* t = g_settings.load(std::memory_order_acquire);
  bool raised = g_tap_in_force && t != nullptr && !t->user_debug;  // bare: no NCCL_DEBUG, no version line
  g_drop_version_line.store(raised && version_code > 0 && version_code < 22200, std::memory_order_release);
}
NcclInitOnThisThread::NcclInitOnThisThread() {
  ++t_in_init;
  g_inits.fetch_add(1, std::memory_order_acq_rel);
}
NcclInitOnThisThread::~NcclInitOnThisThread() {
  --t_in_init;
  if (g_inits.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last init out: the lines that waited for one are settled now, not at the next line NCCL writes.
  LogReader* r = g_reader.load(std::memory_order_acquire);
  if (r == nullptr || !r->own) return;  // the user's own file: the shim's thread reads it
  KeepErrno keep;
  std::lock_guard<std::mutex> lock(r->mu);
  if (!r->stale) EmitNewConnections(r, false);
}
bool IsTapsNcclVersionLine(const char* line) {
  return t_in_init > 0 && g_drop_version_line.load(std::memory_order_acquire) && line != nullptr &&
         std::strncmp(line, "NCCL version ", 13) == 0;
}

// Checked against NCCL's git history (src/debug.cc, tags v2.12.12 … v2.14.3): only 2.13 tests
// `ncclDebugLevel > NCCL_LOG_VERSION` for the file before assigning the level it parsed.
bool NcclIgnoresDebugFile(int version_code) { return version_code >= 21300 && version_code < 21400; }

void WithdrawNcclLogTap() {
  if (!g_tap_in_force) return;
  g_tap_in_force = false;
  g_drop_version_line.store(false, std::memory_order_release);
  RestoreUserSettings();
  g_reader.store(nullptr, std::memory_order_release);  // no file to read (the object is never freed)
  if (Forwarder* f = g_forwarder.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(f->mu);
    f->withdrawn = f->exiting = true;  // exit drains nothing
  }
  g_tap_pattern.store(nullptr, std::memory_order_release);
  if (TraceWriter::Ready())
    __atomic_fetch_or(&TraceWriter::header()->capture_flags, P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN, __ATOMIC_RELAXED);
}

void ReadNcclLog() {
  LogReader* r = g_reader.load(std::memory_order_acquire);  // the tap's own file is fed as NCCL writes it
  if (r != nullptr && !r->own && !Unchanged(r->seen_path, r->seen_size.load(std::memory_order_acquire))) ReadLogSlow(r);
}

void NcclCommunicatorsGone() {
  LogReader* r = g_reader.load(std::memory_order_acquire);
  if (r == nullptr || g_inits.load(std::memory_order_acquire) != 0) return;
  KeepErrno keep;
  std::lock_guard<std::mutex> lock(r->mu);
  if (r->stale) return;  // a fork child's first NCCL call starts it over anyway
  if (!r->own) ReadLogLocked(r, false);  // what NCCL appended to the user's file so far
  EmitNewConnections(r, true);
  r->parser->Forget();
  r->connections_seen = 0;
  r->emitted.clear();
}

bool NcclLogToRead() {
  const LogReader* r = g_reader.load(std::memory_order_acquire);
  return r != nullptr && !r->own;
}

}  // namespace p2ptrace::shim
