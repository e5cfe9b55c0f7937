// Descriptors and errno, as every part of the shim handles them inside someone else's process.
#pragma once

namespace p2ptrace::shim {

// A descriptor closed when it goes out of scope; -1 holds nothing.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ScopedFd(ScopedFd&& o) noexcept : fd_(o.Release()) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Moves `fd` to a descriptor number far above what a program allocates (the lowest free one
// wins, so a program reopening after closing 3..N gets the low numbers back, never this one) and
// closes the original. -1 (and `fd` closed) when there is none free up there.
int MoveFdHigh(int fd);

// errno as it was at construction is put back at destruction: every shim path that may call the
// C library keeps the errno the program's own call left (a failed mkdir's EEXIST never leaks out).
class KeepErrno {
 public:
  KeepErrno();
  ~KeepErrno();
  KeepErrno(const KeepErrno&) = delete;
  KeepErrno& operator=(const KeepErrno&) = delete;

 private:
  int saved_;
};

}  // namespace p2ptrace::shim
