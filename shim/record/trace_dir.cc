#include "shim/record/trace_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace p2ptrace::shim {
namespace {

// Why a directory is not safe to write in, or "".
std::string Unsafe(const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (st.st_uid != geteuid()) return "owned by uid " + std::to_string(st.st_uid) + ", not this user";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "writable by other users (chmod go-w it, or choose another P2PTRACE_DIR)";
  return "";
}

// mkdir -p, every missing component but the last with 0755, the last 0700.
bool MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), pos == dir.size() ? 0700 : 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

namespace {
// `dir` opened for *at calls when it passes Unsafe(); otherwise not ok() and, with `why`, the reason.
// The directory itself may be reached through a symlink the user made (P2PTRACE_DIR=/scratch/…):
// what matters is who owns the directory it leads to.
ScopedFd OpenCheckedDir(const std::string& dir, std::string* why) {
  ScopedFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  std::string reason = !fd.ok()                       ? std::string("cannot open it: ") + std::strerror(errno)
                       : fstat(fd.get(), &st) != 0    ? std::string("cannot stat it: ") + std::strerror(errno)
                                                      : Unsafe(st);
  if (reason.empty()) return fd;
  if (why != nullptr) *why = reason;
  return ScopedFd();
}
}  // namespace

std::string PrepareTraceDir(const std::string& dir) {
  if (!MakeDirs(dir)) return std::string("cannot create it: ") + std::strerror(errno);
  std::string why;
  ScopedFd fd = OpenCheckedDir(dir, &why);
  if (!fd.ok()) return why;
  if (faccessat(fd.get(), ".", W_OK | X_OK, AT_EACCESS) != 0) return std::string("cannot write in it: ") + std::strerror(errno);
  return "";
}

ScopedFd OpenTraceDir(const std::string& dir) { return OpenCheckedDir(dir, nullptr); }

ScopedFd OpenTraceSubdir(int dirfd, const char* name) {
  if (mkdirat(dirfd, name, 0700) != 0 && errno != EEXIST) return ScopedFd();
  ScopedFd fd(openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd.ok() || fstat(fd.get(), &st) != 0 || !Unsafe(st).empty()) return ScopedFd();
  return fd;
}

ScopedFd CreateTraceFile(int dirfd, const char* name, int flags) {
  return ScopedFd(openat(dirfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
}

namespace {
ScopedFd CheckRegularOwn(ScopedFd fd, bool own) {
  struct stat st {};
  if (!fd.ok() || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || (own && st.st_uid != geteuid()))
    return ScopedFd();
  return fd;
}
}  // namespace

ScopedFd OpenOwnFile(int dirfd, const char* name, int flags) {
  return CheckRegularOwn(ScopedFd(openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)), true);
}

ScopedFd OpenRegularFile(const std::string& path, int flags, bool follow) {
  int extra = O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW);
  return CheckRegularOwn(ScopedFd(open(path.c_str(), flags | extra)), false);
}

}  // namespace p2ptrace::shim
