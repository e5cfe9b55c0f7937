#include "tools/cli/run.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <iterator>

#include "core/input_file.h"
#include "fmt/format.h"
#include "tools/cli/commands.h"
#include "tools/formats/json.h"
#include "tools/formats/text.h"
#include "tools/report/load.h"
#include "tools/report/traces.h"

namespace p2ptrace::cli {

std::string ShimPath(const std::string& self_exe) {
  if (const char* p = std::getenv("P2PTRACE_LIB"); p && *p) return p;
  std::filesystem::path exe(self_exe);
  return (exe.parent_path() / ".." / "lib" / "libp2ptrace.so").lexically_normal().string();
}


std::string AuditSetting(const std::string& shim, const char* user_audit, std::ostream& warn) {
  std::string user = user_audit ? user_audit : "";
  std::string audit = (std::filesystem::path(shim).parent_path() / "libp2ptrace_audit.so").string();
  if (access(audit.c_str(), R_OK) != 0) {
    warn << "p2ptrace run: no " << audit << " next to the shim: CUDA and NCCL calls made through dlsym "
         << "(Python ctypes, vLLM's NCCL wrapper) are not traced\n";
    return user;
  }
  // Already there (a nested `p2ptrace run`): glibc would load it twice.
  size_t start = 0;
  while (start <= user.size()) {
    size_t end = user.find(':', start);
    if (user.substr(start, end == std::string::npos ? std::string::npos : end - start) == audit) return user;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return user.empty() ? audit : audit + ":" + user;
}

namespace {

std::string FindInPath(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return cmd;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string full = (dir.empty() ? "." : dir) + "/" + cmd;
    if (access(full.c_str(), X_OK) == 0) return full;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return cmd;
}

}  // namespace

int Run(const RunOptions& o, const std::string& self_exe) {
  std::string shim = ShimPath(self_exe);
  if (access(shim.c_str(), R_OK) != 0) {
    std::cerr << "p2ptrace run: cannot find the shim at " << shim << " (set P2PTRACE_LIB)\n";
    return 2;
  }
  std::string dir = o.dir;
  if (dir.empty()) {
    char stamp[32];
    time_t now = time(nullptr);
    struct tm tm {};
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    dir = fmt::format("p2ptrace-{}", stamp);
  }
  dir = std::filesystem::absolute(dir).lexically_normal().string();
  std::error_code ec;
  bool created = !std::filesystem::exists(dir, ec);
  // The directory itself 0700, whatever the umask: the shim writes only where no one else can
  // (a group-writable one, from a umask of 002, would be refused).
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
  if (!ec && mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) ec = std::error_code(errno, std::generic_category());
  if (ec) {
    std::cerr << "p2ptrace run: cannot create " << dir << ": " << ec.message() << "\n";
    return 2;
  }
  const char* preload = std::getenv("LD_PRELOAD");
  std::string new_preload = shim + (preload && *preload ? std::string(":") + preload : "");
  // The audit module next to the shim lets the shim see calls made through dlsym (ctypes, vLLM):
  // LD_AUDIT, before the user's own auditors. Without it the job runs with the shim alone, said once.
  std::string new_audit = AuditSetting(shim, std::getenv("LD_AUDIT"), std::cerr);

  pid_t pid = fork();
  if (pid < 0) {
    std::cerr << "p2ptrace run: fork: " << std::strerror(errno) << "\n";
    return 2;
  }
  if (pid == 0) {
    setenv("LD_PRELOAD", new_preload.c_str(), 1);
    if (!new_audit.empty()) setenv("LD_AUDIT", new_audit.c_str(), 1);
    setenv("P2PTRACE_DIR", dir.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::cerr << "p2ptrace run: " << o.command[0] << ": " << std::strerror(errno) << "\n";
    _exit(errno == ENOENT ? 127 : 126);
  }
  // Like `time`: the terminal's ^C goes to the job; p2ptrace waits to report what it recorded.
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

  // The report folds one file at a time (memory bounded by pairs, not events).
  StreamOptions options;
  ProgressLine progress(std::cerr, isatty(2) != 0);
  options.progress = progress.Callback();
  absl::StatusOr<Report> rep = StreamReport(dir, options);
  progress.Clear();
  if (!rep.ok() || rep->processes.empty()) {
    std::string why = CarriesStaticCudart(FindInPath(o.command[0])).value_or(false)
                          ? fmt::format("{} carries a statically linked CUDA runtime (nvcc's default --cudart "
                                        "static), which LD_PRELOAD cannot intercept: rebuild it with "
                                        "`nvcc -cudart shared` or link CUDA::cudart",
                                        o.command[0])
                          : "no process made a CUDA call through a shared libcudart";
    std::cerr << "p2ptrace run: untraced: " << why << "; nothing was recorded\n";
    if (created) std::filesystem::remove(dir, ec);  // only if still empty
    return code;  // a wrapper never changes the job's status: what was not recorded is said above
  }
  if (o.json) {
    WriteJson(*rep, std::cout);
    std::cout << "\n";
  } else {
    std::cout << RenderText(*rep, isatty(1) && std::getenv("NO_COLOR") == nullptr);
  }
  return code;
}

namespace {

std::string SelfExe(const char* argv0) {
  char buf[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : argv0;
}

}  // namespace

int RunCommandLine(int argc, char** argv) {
  RunOptions o;
  int i = 2;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") { ++i; break; }
    if (a == "--help" || a == "-h") {
      std::cout << "usage: p2ptrace run [--dir D] [--json] -- CMD …\n\n"
                   "Runs CMD with LD_PRELOAD=libp2ptrace.so and P2PTRACE_DIR=D (default ./p2ptrace-<time>),\n"
                   "waits for it, then prints the report of what every process recorded. Exits with CMD's\n"
                   "status, always (128+N when a signal N ended it); when nothing could be traced (e.g. a static\n"
                   "cudart) it says so on stderr.\n";
      return 0;
    }
    if (a == "--json") o.json = true;
    else if (a == "--dir" && i + 1 < argc) o.dir = argv[++i];
    else if (a.rfind("--dir=", 0) == 0) o.dir = a.substr(6);
    else {
      std::cerr << "p2ptrace run: unexpected '" << a << "' (usage: p2ptrace run [--dir D] [--json] -- CMD …)\n";
      return 2;
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) {
    std::cerr << "p2ptrace run: no command (usage: p2ptrace run [--dir D] [--json] -- CMD …)\n";
    return 2;
  }
  return Run(o, SelfExe(argv[0]));
}

}  // namespace p2ptrace::cli
