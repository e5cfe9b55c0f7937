#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace p2ptrace {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a file";
}

}  // namespace

Expected<InputFile> InputFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return Error{path + ": " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return Error{path + ": " + std::strerror(e)};
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return Error{path + ": not a regular file (" + KindOf(st.st_mode) + ")"};
  }
  // A regular file: reads are ordinary again (O_NONBLOCK only mattered for opening).
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return InputFile(fd, static_cast<uint64_t>(st.st_size), path);
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) close(fd_);
}

Expected<size_t> InputFile::ReadAt(uint64_t offset, void* buf, size_t n) const {
  if (offset >= size_) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd_, static_cast<char*>(buf) + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Error{path_ + ": read failed: " + std::strerror(errno)};
    if (r == 0) break;  // shrunk since it was opened: what is there
    got += static_cast<size_t>(r);
  }
  return got;
}

Expected<uint64_t> ReadInPieces(const std::string& path, uint64_t max_bytes,
                                const std::function<void(std::string_view)>& feed) {
  Expected<InputFile> file = InputFile::Open(path);
  if (!file.ok()) return file.error();
  std::vector<char> buf(1 << 16);
  uint64_t end = std::min(file->size(), max_bytes);
  for (uint64_t at = 0; at < end;) {
    Expected<size_t> got = file->ReadAt(at, buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), end - at)));
    if (!got.ok()) return got.error();
    if (*got == 0) break;
    feed(std::string_view(buf.data(), *got));
    at += *got;
  }
  return file->size();
}

}  // namespace p2ptrace
