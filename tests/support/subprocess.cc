#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace p2ptrace::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const Env& env) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) std::abort();
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    for (const auto& [key, value] : env) {
      if (value) setenv(key.c_str(), value->c_str(), 1);
      else unsetenv(key.c_str());
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  fds_[0] = out[0];
  fds_[1] = err[0];
}

// False once both streams are closed (or nothing arrives for 30 s).
bool ChildProcess::ReadOnce() {
  std::vector<pollfd> p;
  for (int fd : fds_)
    if (fd >= 0) p.push_back({fd, POLLIN, 0});
  if (p.empty()) return false;
  int n = poll(p.data(), p.size(), 30000);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) return false;
  for (const pollfd& q : p) {
    if (q.revents == 0) continue;
    int i = q.fd == fds_[0] ? 0 : 1;
    char buf[65536];
    ssize_t got = read(q.fd, buf, sizeof buf);
    if (got > 0) {
      text_[i].append(buf, static_cast<size_t>(got));
    } else {
      close(fds_[i]);
      fds_[i] = -1;
    }
  }
  return true;
}

void ChildProcess::ReadUntil(const std::function<bool(const std::string&)>& done) {
  while (!done(text_[0]) && ReadOnce()) {
  }
}

RunResult ChildProcess::Finish() {
  while (ReadOnce()) {
  }
  RunResult r;
  int status = 0;
  struct rusage usage {};
  while (wait4(pid_, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  r.max_rss_kb = usage.ru_maxrss;
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  else r.exit_code = WEXITSTATUS(status);
  r.out = text_[0];
  r.err = text_[1];
  return r;
}

std::string TempDir() {
  static std::string dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "p2ptrace-test-XXXXXX").string();
    std::string d = mkdtemp(tmpl.data()) ? tmpl : std::string("/tmp");
    static std::string cleanup = d;
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(cleanup, ec); });
    return d;
  }();
  return dir;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace p2ptrace::testing
