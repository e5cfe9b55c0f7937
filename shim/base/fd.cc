#include "shim/base/fd.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace p2ptrace::shim {

ScopedFd& ScopedFd::operator=(ScopedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.Release();
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

KeepErrno::KeepErrno() : saved_(errno) {}
KeepErrno::~KeepErrno() { errno = saved_; }

int MoveFdHigh(int fd) {
  struct rlimit lim {};
  rlim_t top = getrlimit(RLIMIT_NOFILE, &lim) == 0 ? lim.rlim_cur : 1024;
  // Near the soft limit, but not so high that the kernel grows the table to a huge size for it.
  long floor = static_cast<long>(std::min<rlim_t>(top, 4096)) - 64;
  int high = floor > 64 ? fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(floor)) : -1;
  close(fd);
  return high;
}

}  // namespace p2ptrace::shim
