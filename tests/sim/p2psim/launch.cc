#include "tests/sim/p2psim/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>

#include "tests/sim/common/nccl_segments.h"
#include "tests/sim/p2psim/sysroot.h"

#ifndef P2PSIM_DEFAULT_LIB_DIR
#error "CMake defines P2PSIM_DEFAULT_LIB_DIR: the directory of the simulated libraries"
#endif

extern char** environ;

namespace p2psim {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMasterPort = "29500";  // torchrun's default
constexpr size_t kMaxLine = 1 << 16;          // a longer unterminated line is passed on in pieces

bool ParseHosts(const std::string& text, std::vector<HostRanks>* out, std::string* error) {
  std::set<std::string> seen;
  for (size_t start = 0;;) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      *error = "--hosts: \"" + item + "\" is not HOST:N";
      return false;
    }
    HostRanks hr{item.substr(0, colon), 0};
    const char* end = item.data() + item.size();
    auto [p, ec] = std::from_chars(item.data() + colon + 1, end, hr.ranks);
    if (ec != std::errc() || p != end || colon + 1 == item.size()) {
      *error = "--hosts: \"" + item + "\": the rank count must be a number";
      return false;
    }
    if (hr.ranks < 1) {
      *error = "--hosts: \"" + item + "\": a host needs at least 1 rank";
      return false;
    }
    if (!seen.insert(hr.host).second) {
      *error = "--hosts: host \"" + hr.host + "\" is listed twice";
      return false;
    }
    out->push_back(hr);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

// The only thing the signal handler does: note the signal where poll() sees it.
int g_signal_pipe = -1;

void OnSignal(int sig, siginfo_t* info, void*) {
  int saved = errno;
  // A terminal's ^C comes from the kernel and has already reached the ranks, which share our
  // process group; mark it so it is not delivered twice.
  bool from_terminal = info != nullptr && info->si_code == SI_KERNEL;
  unsigned char byte = static_cast<unsigned char>(sig | (from_terminal ? 0x80 : 0));
  [[maybe_unused]] ssize_t n = write(g_signal_pipe, &byte, 1);
  errno = saved;
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone; nothing better to do with the text
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// One of a rank's output pipes, passed on line by line behind the rank's prefix.
struct OutputPipe {
  int fd = -1;  // read end, non-blocking; -1 once closed
  int to = STDOUT_FILENO;
  std::string prefix;
  std::string pending;  // the start of a line not ended yet

  // Reads once. At end of file, flushes a last unterminated line and closes. Returns true when
  // more may be readable right away.
  bool ReadOnce() {
    char buf[1 << 16];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) {
      Close();
      return false;
    }
    pending.append(buf, static_cast<size_t>(n));
    Emit(false);
    return true;
  }

  void Close() {
    Emit(true);
    close(fd);
    fd = -1;
  }

  void Emit(bool at_end) {
    std::string out;
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      out += prefix + pending.substr(start, nl + 1 - start);
    pending.erase(0, start);
    if ((at_end && !pending.empty()) || pending.size() > kMaxLine) {
      out += prefix + pending + "\n";
      pending.clear();
    }
    WriteAll(to, out);
  }
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  OutputPipe out, err;
};

// Worst child status: the first death by signal wins, else the highest exit code.
struct ExitTally {
  int first_signal = 0, max_code = 0;
  void Add(int status) {
    if (WIFSIGNALED(status) && first_signal == 0) first_signal = WTERMSIG(status);
    if (WIFEXITED(status)) max_code = std::max(max_code, WEXITSTATUS(status));
  }
  int Status() const { return first_signal != 0 ? 128 + first_signal : max_code; }
};

// The parent's environment with `set` applied.
std::vector<std::string> ChildEnvironment(const std::map<std::string, std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (!set.count(std::string(kv.substr(0, kv.find('='))))) env.emplace_back(kv);
  }
  for (const auto& [key, value] : set) env.push_back(key + "=" + value);
  return env;
}

// LD_PRELOAD for the ranks: what is preloaded already (a tracer such as p2ptrace's shim stays
// first), then the simulated libraries. Programs that find CUDA and NCCL through DT_RPATH (PyTorch's
// pip wheels point into the nvidia-* packages) ignore LD_LIBRARY_PATH; a preloaded library of the
// same soname is found first. CUDA 12 and 13 runtimes can both be preloaded: each program binds
// its versioned symbols to its own, and both share the simulated driver's state.
std::string SimPreload(const std::string& lib_dir, const char* existing) {
  std::string out = existing != nullptr ? existing : "";
  for (const char* lib : {"libcuda.so.1", "libcudart.so.13", "libcudart.so.12", "libnccl.so.2", "libnvidia-ml.so.1"}) {
    std::string path = lib_dir + "/" + lib;
    if (access(path.c_str(), R_OK) != 0) continue;
    out += (out.empty() ? "" : ":") + path;
  }
  return out;
}

bool Spawn(Rank* rank, const std::vector<std::string>& command, const std::vector<std::string>& env,
           bool restore_sigpipe, std::string* error) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    close(out[0]), close(out[1]);
    return false;
  }
  std::vector<char*> argv, envp;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    if (restore_sigpipe) signal(SIGPIPE, SIG_DFL);
    execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    // What a shell says, with its exit codes, so a mistyped command reads the same.
    bool missing = e == ENOENT && std::strchr(argv[0], '/') == nullptr;
    dprintf(STDERR_FILENO, "p2psim: %s: %s\n", argv[0], missing ? "command not found" : std::strerror(e));
    _exit(e == ENOENT ? 127 : 126);
  }
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    close(out[0]), close(err[0]);
    return false;
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  rank->pid = pid;
  rank->running = true;
  rank->out.fd = out[0];
  rank->err.fd = err[0];
  return true;
}

void ReapExited(std::vector<Rank>& ranks, ExitTally* tally) {
  for (Rank& r : ranks) {
    int status = 0;
    if (r.running && waitpid(r.pid, &status, WNOHANG) == r.pid) {
      r.running = false;
      tally->Add(status);
    }
  }
}

void Forward(std::vector<Rank>& ranks, int sig) {
  for (Rank& r : ranks)
    if (r.running) kill(r.pid, sig);
}

void HandleSignals(int fd, std::vector<Rank>& ranks) {
  unsigned char buf[64];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) {
    for (ssize_t i = 0; i < n; ++i) {
      int sig = buf[i] & 0x7f;
      bool from_terminal = (buf[i] & 0x80) != 0;
      if (sig != SIGCHLD && !from_terminal) Forward(ranks, sig);  // SIGCHLD: the loop reaps
    }
  }
}

// Catches SIGINT/SIGTERM (to forward) and SIGCHLD (to wake poll). A signal ignored when we started
// stays ignored, as shells expect of a background job. Returns whether SIGPIPE was default before
// we ignored it (so the ranks get it back).
bool InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_sigaction = OnSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (sig == SIGCHLD || old.sa_handler != SIG_IGN) sigaction(sig, &sa, nullptr);
  }
  // A closed stdout must not kill us before the ranks are reaped.
  return signal(SIGPIPE, SIG_IGN) != SIG_IGN;
}

std::string MakeRunDir(const std::string& requested, std::string* error) {
  std::error_code ec;
  if (!requested.empty()) {
    fs::create_directories(requested, ec);
    fs::path abs = ec ? fs::path() : fs::absolute(requested, ec);
    if (ec) *error = requested + ": " + ec.message();
    return ec ? "" : abs.lexically_normal().string();
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/p2psim-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    *error = dir + ": " + std::strerror(errno);
    return "";
  }
  fs::path abs = fs::absolute(dir, ec);
  return ec ? dir : abs.lexically_normal().string();
}

}  // namespace

bool ParseLaunchArgs(const std::vector<std::string>& args, LaunchOptions* out, std::string* error) {
  LaunchOptions o;
  std::string hosts;
  bool separator = false;
  for (size_t i = 0; i < args.size() && !separator; ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      o.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      separator = true;
      continue;
    }
    bool matched = false;
    for (auto [name, slot] : {std::pair{"--topology", &o.topology}, {"--hosts", &hosts}, {"--dir", &o.dir}}) {
      std::string flag = name;
      if (a == flag) {
        if (i + 1 >= args.size() || args[i + 1] == "--") {
          *error = flag + " needs a value";
          return false;
        }
        *slot = args[++i];
        matched = true;
      } else if (a.rfind(flag + "=", 0) == 0) {
        *slot = a.substr(flag.size() + 1);
        matched = true;
      }
    }
    if (!matched) {
      *error = a.rfind("-", 0) == 0 ? "unknown option \"" + a + "\""
                                    : "missing -- before the command \"" + a + "\"";
      return false;
    }
  }
  if (o.topology.empty()) {
    *error = "missing --topology";
    return false;
  }
  if (hosts.empty()) {
    *error = "missing --hosts";
    return false;
  }
  if (!ParseHosts(hosts, &o.hosts, error)) return false;
  if (!separator) {
    *error = "missing -- before the command";
    return false;
  }
  if (o.command.empty()) {
    *error = "missing the command after --";
    return false;
  }
  *out = std::move(o);
  return true;
}

int Launch(const Topology& topo, const LaunchOptions& options) {
  std::string error;
  std::string run_dir = MakeRunDir(options.dir, &error);
  if (run_dir.empty()) {
    std::fprintf(stderr, "p2psim: %s\n", error.c_str());
    return 1;
  }
  if (options.dir.empty()) std::fprintf(stderr, "p2psim: run directory %s\n", run_dir.c_str());

  std::error_code ec;
  std::string topology = fs::absolute(options.topology, ec).lexically_normal().string();
  const char* lib_env = std::getenv("P2PSIM_LIB_DIR");
  std::string lib_dir = lib_env != nullptr && *lib_env != '\0' ? lib_env : P2PSIM_DEFAULT_LIB_DIR;
  const char* old_ld = std::getenv("LD_LIBRARY_PATH");
  std::string ld_path = lib_dir + (old_ld != nullptr && *old_ld != '\0' ? ":" + std::string(old_ld) : "");
  std::string preload = SimPreload(lib_dir, std::getenv("LD_PRELOAD"));

  int world = 0;
  for (const HostRanks& hr : options.hosts) world += hr.ranks;
  std::vector<std::map<std::string, std::string>> rank_env;
  for (size_t h = 0; h < options.hosts.size(); ++h) {
    const HostRanks& hr = options.hosts[h];
    std::string sysroot = run_dir + "/sysroot/" + hr.host;
    if (!WriteSysroot(topo, *topo.FindHost(hr.host), sysroot, &error)) {
      std::fprintf(stderr, "p2psim: %s\n", error.c_str());
      return 1;
    }
    for (int local = 0; local < hr.ranks; ++local) {
      rank_env.push_back({{"RANK", std::to_string(rank_env.size())},
                          {"LOCAL_RANK", std::to_string(local)},
                          {"WORLD_SIZE", std::to_string(world)},
                          {"LOCAL_WORLD_SIZE", std::to_string(hr.ranks)},
                          {"GROUP_RANK", std::to_string(h)},
                          {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", kMasterPort},
                          {"P2PSIM_HOST", hr.host},
                          {"P2PSIM_TOPOLOGY", topology},
                          {"LD_LIBRARY_PATH", ld_path},
                          {"LD_PRELOAD", preload},
                          {"P2PTRACE_SYSROOT", sysroot}});
    }
  }

  int signal_pipe[2];
  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::fprintf(stderr, "p2psim: pipe: %s\n", std::strerror(errno));
    return 1;
  }
  g_signal_pipe = signal_pipe[1];
  bool restore_sigpipe = InstallSignalHandlers();

  std::vector<Rank> ranks(rank_env.size());
  bool spawn_failed = false;
  for (size_t r = 0; r < ranks.size() && !spawn_failed; ++r) {
    std::string prefix = "[rank " + std::to_string(r) + "] ";
    ranks[r].out.prefix = ranks[r].err.prefix = prefix;
    ranks[r].err.to = STDERR_FILENO;
    if (!Spawn(&ranks[r], options.command, ChildEnvironment(rank_env[r]), restore_sigpipe, &error)) {
      std::fprintf(stderr, "p2psim: rank %zu: %s\n", r, error.c_str());
      spawn_failed = true;
      Forward(ranks, SIGTERM);
    }
  }

  ExitTally tally;
  for (;;) {
    ReapExited(ranks, &tally);
    if (std::none_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.running; })) break;
    std::vector<pollfd> fds{{signal_pipe[0], POLLIN, 0}};
    std::vector<OutputPipe*> owners{nullptr};
    for (Rank& r : ranks)
      for (OutputPipe* p : {&r.out, &r.err})
        if (p->fd >= 0) fds.push_back({p->fd, POLLIN, 0}), owners.push_back(p);
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "p2psim: poll: %s; waiting for the ranks without their output\n", std::strerror(errno));
      for (Rank& r : ranks)
        if (int status = 0; r.running && waitpid(r.pid, &status, 0) == r.pid) r.running = false, tally.Add(status);
      break;
    }
    if (fds[0].revents != 0) HandleSignals(signal_pipe[0], ranks);
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) owners[i]->ReadOnce();
  }
  // Every rank has exited, so what they wrote is in the pipes; a leftover background process
  // holding a pipe open must not keep us waiting.
  for (Rank& r : ranks) {
    for (OutputPipe* p : {&r.out, &r.err}) {
      while (p->fd >= 0 && p->ReadOnce()) {
      }
      if (p->fd >= 0) p->Close();
    }
  }
  close(signal_pipe[0]);
  close(signal_pipe[1]);
  // A rank killed by a signal cannot clean up its NCCL rendezvous files; the job is over, so remove
  // whatever dead processes left (other jobs' live files stay).
  SweepStaleNcclSegments(NcclSegmentRoot(), 60);
  return spawn_failed ? std::max(tally.Status(), 1) : tally.Status();
}

}  // namespace p2psim
