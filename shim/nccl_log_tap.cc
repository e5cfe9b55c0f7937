// The log tap's policy, per what the user set (DESIGN.md §4):
//   nothing                 NCCL_DEBUG=INFO, NCCL_DEBUG_FILE=<dir>/nccl.<host>.%p.log; nothing shown.
//   NCCL_DEBUG=L, no file   the same file; the level raised to INFO only for VERSION and WARN (INFO,
//                           ABORT and TRACE already print every line the tap needs); NCCL_DEBUG_SUBSYS
//                           untouched, so every INFO line in the file is one the user's mask shows.
//                           A thread forwards to stdout what level L shows (NcclOutputFilter).
//   NCCL_DEBUG_FILE         nothing; the viewer reads their file.
//   an NCCL_DEBUG NCCL does not know: nothing.
// Ordering: NCCL's lines reach stdout in NCCL's order, through the program's own FILE* stdout (so
// its buffering applies, as to NCCL's own fwrite). The thread looks every 20 ms, so a line follows
// within milliseconds; PumpNcclLog() at a wrapped NCCL call's return puts the lines printed during
// the call before the program's next output; at exit() everything left is forwarded before stdio
// flushes. A process killed by a signal keeps its unforwarded lines in the tap file only.
// The host is written into the name (not %h) so this process can find the file NCCL opens; %p stays
// for NCCL, so a forked child writes its own file. Children inherit the tap through the environment
// and a marker; a child whose settings someone changed in between gets the user's settings back.
// Nothing of this happens before the process's first NCCL call, and only once its trace directory
// passed the checks of trace_dir.h (an untraced process's NCCL prints exactly what it would have).
// NCCL opens the tap file with fopen: OpenNcclTapFile (through the shim's fopen) creates it 0600 in
// the checked directory and puts NCCL's descriptor far above the program's, which a program that
// closes and reopens descriptors could otherwise be handed (NCCL's lines then in the program's file).
// No descriptor of the tap's own outlives a call: files are reopened by name when they grew.
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
#include <set>
#include <string>

#include "core/nccl_log.h"
#include "shim/nccl_output_filter.h"
#include "shim/record/trace_dir.h"
#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

constexpr const char* kTapFile = "P2PTRACE_NCCL_TAP_FILE";  // the NCCL_DEBUG_FILE the tap set
constexpr const char* kForward = "P2PTRACE_NCCL_FORWARD";   // the user's NCCL_DEBUG, when forwarding

struct Forwarder {
  std::mutex mu;
  std::string pattern;
  std::string path;  // the pattern expanded for this process (again after a fork)
  NcclUserLevel level = NcclUserLevel::kInfo;
  NcclOutputFilter filter{NcclUserLevel::kInfo};
  off_t offset = 0;
  // For PumpNcclLog's check without the lock (one stat when the file has not grown): the path
  // (a string never freed, replaced after a fork) and the size read last.
  std::atomic<const std::string*> seen_path{nullptr};
  std::atomic<off_t> seen_offset{0};
  bool thread_running = false;
  bool exiting = false;    // exit drained it, or the tap was withdrawn: nothing more to forward
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
// process's log and trace carry the same host.
std::string TapPattern(const Config& config) {
  return config.dir + "/" + NcclTapFilePattern(TraceWriter::Host(config));
}

// NCCL's expansion of NCCL_DEBUG_FILE for this process (core/nccl_log.h), with the host its trace
// names (the simulated node's in tests).
std::string ExpandDebugFile(const std::string& pattern) {
  return ExpandNcclDebugFile(pattern, TraceWriter::Host(TraceWriter::config()), getpid());
}

void StartThread(Forwarder* f);

// Whether an unlocked check's path says the file did not change size since it was read.
bool Unchanged(const std::atomic<const std::string*>& path, off_t size) {
  const std::string* p = path.load(std::memory_order_acquire);
  struct stat st;  // not zeroed: stat fills it
  return p != nullptr && stat(p->c_str(), &st) == 0 && st.st_size == size;
}

// Reads what NCCL appended and writes the user's share of it; `mu` held.
void PumpLocked(Forwarder* f, bool finish) {
  if (f->path.empty()) f->path = ExpandDebugFile(f->pattern);
  // The tap file is the shim's own, in its checked directory: a regular file of this user's, never
  // through a symlink, never blocking.
  ScopedFd fd = OpenRegularFile(f->path, O_RDONLY, false);
  if (!fd.ok()) return;  // NCCL has not logged yet
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return;
  if (st.st_size < f->offset) f->offset = 0;  // NCCL reopened it ("w" truncates): a new log
  std::string out;
  char buf[1 << 14];
  while (f->offset < st.st_size) {
    ssize_t n = pread(fd.get(), buf, sizeof buf, f->offset);
    if (n <= 0) break;
    f->offset += n;
    f->filter.Feed(std::string_view(buf, static_cast<size_t>(n)), &out);
  }
  if (finish) f->filter.Finish(&out);
  if (!out.empty()) std::fwrite(out.data(), 1, out.size(), stdout);
  f->seen_offset.store(f->offset, std::memory_order_release);
  if (f->seen_path.load(std::memory_order_relaxed) == nullptr)
    f->seen_path.store(new std::string(f->path), std::memory_order_release);  // never freed: read unlocked
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
  // A look every 20 ms (one stat when nothing was written). No inotify: a descriptor held for the
  // thread's life is one a program that closes descriptors it did not open could pull away, and
  // whose number it could then be given for a file of its own.
  for (unsigned quiet = 0;; ++quiet) {
    usleep(20 * 1000);
    // Nothing new: no lock, but once a second a look whether exit or a withdrawal ended it.
    if (Unchanged(f->seen_path, f->seen_offset.load(std::memory_order_acquire)) && quiet % 50 != 0) continue;
    std::lock_guard<std::mutex> lock(f->mu);
    if (f->exiting || !f->thread_running) break;  // exit has drained, or a fork made this a stale copy
    PumpLocked(f, false);
  }
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
Forwarder* g_forwarder_locked = nullptr;  // what BeforeFork locked (the tap may start meanwhile)
void BeforeFork() {
  if ((g_forwarder_locked = g_forwarder.load(std::memory_order_acquire))) g_forwarder_locked->mu.lock();
}
void AfterForkParent() {
  if (Forwarder* f = g_forwarder_locked) f->mu.unlock();
}
void AfterForkChild() {
  Forwarder* f = g_forwarder_locked;
  if (f == nullptr) return;
  f->offset = 0;
  f->seen_path.store(nullptr, std::memory_order_relaxed);
  f->path.clear();  // this child's own file (NCCL's %p)
  f->filter = NcclOutputFilter(f->level);
  f->thread_running = false;
  f->mu.unlock();
}

void StartForwarding(const std::string& pattern, NcclUserLevel level) {
  auto* f = new Forwarder();
  f->pattern = pattern;
  f->level = level;
  f->filter = NcclOutputFilter(level);
  g_forwarder.store(f, std::memory_order_release);
  // The thread starts at the first wrapped NCCL call (PumpNcclLog): a process of the job that never
  // uses NCCL (a launcher, a shell) gets no thread, and forks as single-threaded as it was.
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

// The user's NCCL settings back, exactly: NCCL_DEBUG verbatim (kForward holds it when they set one;
// otherwise they had none), no NCCL_DEBUG_FILE, no markers.
void RestoreUserSettings() {
  if (Has(kForward)) setenv("NCCL_DEBUG", Getenv(kForward).c_str(), 1);
  else unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv(kTapFile);
  unsetenv(kForward);
  unsetenv("P2PTRACE_NCCL_TAP");
}

// NCCL has read its debug settings (it is opening the tap's file, at the end of its debug init, and
// reads them again only from ncclResetDebugInit): the program's environment becomes exactly what
// it was before the tap, so the program and the children it starts from now on see the user's
// settings. A variable someone changed since the tap set it is left as they made it.
void ReturnEnvironment() {
  const TapSettings* t = g_settings.load(std::memory_order_acquire);
  if (t == nullptr || g_env_returned.exchange(true)) return;
  if (Getenv("NCCL_DEBUG_FILE") == t->file) unsetenv("NCCL_DEBUG_FILE");
  if (Has("NCCL_DEBUG") && Getenv("NCCL_DEBUG") == t->set_debug) {
    if (t->user_debug) setenv("NCCL_DEBUG", t->debug.c_str(), 1);
    else unsetenv("NCCL_DEBUG");
  }
  unsetenv(kTapFile);
  unsetenv(kForward);
  unsetenv("P2PTRACE_NCCL_TAP");
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
    std::string pattern = Getenv(kTapFile);
    if (forwarding) StartForwarding(pattern, level);
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
  bool own = false;     // the tap's file (the shim's own: no symlink), not the user's
  bool found = false;   // the file was there at the last look
  off_t offset = 0;     // bytes fed to the parser: whole lines only
  NcclLogParser* parser = nullptr;  // replaced in a fork child (its own file, its own lines)
  size_t connections_seen = 0;      // parser's connections already looked at
  std::set<std::string> emitted;    // keys of the connections recorded
  uint64_t open_calls = 0, next_open = 0;  // calls seen and the next one to try open() (backoff)
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
  if (ConnectionObserver observe = g_observe.load(std::memory_order_acquire)) observe(c);
}

// Feeds what NCCL appended (whole lines) and records the new connections; `mu` held.
void ReadLogLocked(LogReader* r, bool may_open, bool at_exit) {
  if (r->stale) {  // fork child: NCCL writes this process's lines to a file of its own (%p)
    r->found = false;
    r->offset = 0;
    r->path.clear();
    r->parser = new NcclLogParser();  // the parent's stays with the parent's lines (not freed: cheap, rare)
    r->connections_seen = 0;
    r->emitted.clear();
    r->open_calls = r->next_open = 0;
    r->stale = false;
  }
  // Until NCCL opens its file (at its first log line), back off: 1, 2, 4, … calls between tries,
  // and from 64 on every 64th, so a program calling NCCL before it logs pays for few open()s.
  if (!r->found && (!may_open || (!at_exit && r->open_calls++ < r->next_open))) return;
  if (!r->found) r->next_open = r->open_calls + std::min<uint64_t>(std::max<uint64_t>(r->next_open, 1), 64);
  if (r->path.empty()) r->path = ExpandDebugFile(r->pattern);
  // A regular file only (a FIFO there must not hang the job), opened anew each time (no descriptor
  // kept); the user's own NCCL_DEBUG_FILE may be reached through a symlink they made, the tap's not.
  ScopedFd fd = OpenRegularFile(r->path, O_RDONLY, !r->own);
  r->found = fd.ok();
  if (!fd.ok()) return;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return;
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
    ssize_t n = pread(fd.get(), buf, sizeof buf, pos);
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
  if (r->seen_path.load(std::memory_order_relaxed) == nullptr)
    r->seen_path.store(new std::string(r->path), std::memory_order_release);
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
    // A lazy line names no communicator: the one it was tied to tells two communicators' alike lines apart.
    const RankIdentity* id = log.IdentityOf(c);
    std::string comm = id != nullptr ? id->comm + '@' + std::to_string(id->FirstLine()) : c.comm;
    std::string key = comm + '\t' + c.keyword + '\t' + std::to_string(c.channel) + '\t' +
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

void ReadLogSlow(LogReader* r, bool may_open) {
  KeepErrno keep;
  std::lock_guard<std::mutex> lock(r->mu);
  ReadLogLocked(r, may_open, false);
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
  pthread_atfork(BeforeFork, AfterForkParent, AfterForkChild);
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
  FILE* f = fdopen(high, mode);
  if (f == nullptr) close(high);
  return f;
}

void StartNcclLogTap(const Config& config, ConnectionObserver observe) {
  g_observe.store(observe, std::memory_order_release);
  std::string mode = Getenv("P2PTRACE_NCCL_LOG");
  if (mode == "off") return;
  if (!mode.empty() && mode != "auto") Warn("P2PTRACE_NCCL_LOG=" + mode + " is not auto or off; using auto");
  // The tap is for a traced process only: when the trace directory is unusable (the warning said
  // so), NCCL keeps exactly the user's settings and prints exactly what it would have.
  // A traced parent's tap, inherited, stays only where this process traces into the same place.
  std::string inherited = Getenv(kTapFile);
  bool elsewhere = !inherited.empty() && inherited.substr(0, inherited.rfind('/')) != config.dir;
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
  if (debug != nullptr) setenv(kForward, debug, 1);
  if (debug == nullptr || level != NcclUserLevel::kInfo) setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", pattern.c_str(), 1);
  setenv(kTapFile, pattern.c_str(), 1);
  setenv("P2PTRACE_NCCL_TAP", "1", 1);
  g_tap_in_force = true;
  StartReading(pattern, true);
  if (debug != nullptr) StartForwarding(pattern, level);
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

// Checked against NCCL's git history (src/debug.cc, tags v2.12.12 … v2.14.3): only 2.13 tests
// `ncclDebugLevel > NCCL_LOG_VERSION` for the file before assigning the level it parsed.
bool NcclIgnoresDebugFile(int version_code) { return version_code >= 21300 && version_code < 21400; }

void WithdrawNcclLogTap() {
  if (!g_tap_in_force) return;
  g_tap_in_force = false;
  RestoreUserSettings();
  g_reader.store(nullptr, std::memory_order_release);  // no file to read (the object is never freed)
  if (Forwarder* f = g_forwarder.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(f->mu);
    f->withdrawn = f->exiting = true;  // the thread stops at its next wake; exit drains nothing
  }
  g_tap_pattern.store(nullptr, std::memory_order_release);
  if (TraceWriter::Ready())
    __atomic_fetch_or(&TraceWriter::header()->capture_flags, P2PTRACE_CAPTURE_NCCL_TAP_WITHDRAWN, __ATOMIC_RELAXED);
}

void PumpNcclLog(bool read_log) {
  // The common case, nothing new: one stat, no lock.
  if (LogReader* r = read_log ? g_reader.load(std::memory_order_acquire) : nullptr)
    if (!Unchanged(r->seen_path, r->seen_size.load(std::memory_order_acquire))) ReadLogSlow(r, true);
  Forwarder* f = g_forwarder.load(std::memory_order_acquire);
  if (f == nullptr || Unchanged(f->seen_path, f->seen_offset.load(std::memory_order_acquire))) return;
  KeepErrno keep;
  std::lock_guard<std::mutex> lock(f->mu);
  if (f->exiting) return;
  if (!f->thread_running) StartThread(f);
  PumpLocked(f, false);
}

}  // namespace p2ptrace::shim
