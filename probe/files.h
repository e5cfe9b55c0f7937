// Files under the probes' sysroot (P2PTRACE_SYSROOT, "" for /): bounded reads that never block
// and never follow a hostile sysroot out of itself. Every probe reads through this one reader.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

namespace p2ptrace::probe {

// At most this much of any file: sysfs and procfs files are small, and a hostile sysroot must not
// make the probe read a disk image.
constexpr size_t kMaxFile = 256 * 1024;

struct Files {
  std::string root;  // sysroot without a trailing slash
  std::string Path(const std::string& p) const { return root + p; }

  // The file's bytes, or nullopt when it cannot be opened/read. Non-blocking: a FIFO planted in a
  // sysroot must not stall the probe.
  std::optional<std::string> Read(const std::string& p, size_t max = kMaxFile) const {
    int fd = open(Path(p).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return std::nullopt;
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode)) {
      close(fd);
      return std::nullopt;
    }
    std::string out;
    char buf[8192];
    while (out.size() < max) {
      ssize_t n = read(fd, buf, std::min(sizeof buf, max - out.size()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return out;
  }
  std::string Line(const std::string& p) const {
    std::string s = Read(p, 4096).value_or("");
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    return s;
  }
  bool Exists(const std::string& p) const {
    struct stat st;
    return lstat(Path(p).c_str(), &st) == 0;
  }
  std::vector<std::string> List(const std::string& p) const {
    std::vector<std::string> out;
    DIR* d = opendir(Path(p).c_str());
    if (d == nullptr) return out;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      out.emplace_back(e->d_name);
      if (out.size() > 4096) break;
    }
    closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }
  // The symlink's target resolved inside the sysroot, relative to it ("/sys/devices/…"); "" fails.
  std::string Resolve(const std::string& p) const {
    char buf[PATH_MAX];
    if (realpath(Path(p).c_str(), buf) == nullptr) return "";
    std::string r = buf;
    std::string base = root;
    if (!base.empty()) {
      char rb[PATH_MAX];
      if (realpath(root.c_str(), rb) == nullptr) return "";
      base = rb;
      if (r.compare(0, base.size(), base) != 0) return "";
    }
    return r.substr(base.size());
  }
};

}  // namespace p2ptrace::probe
