// A file the CLI reads from a directory it does not trust (a trace, an NCCL log, a file named on the
// command line): only a regular file is read, never past the size it had when opened, and never
// through a mapping. A FIFO, a device or a socket could block forever or never end (/dev/zero); a
// mapped file faults (SIGBUS) on a hole of a full filesystem or when it shrinks under the reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace p2ptrace {

class InputFile {
 public:
  // Opened non-blocking (opening a FIFO does not wait for a writer) and without becoming a
  // controlling terminal; anything but a regular file is refused with a message naming its kind. A
  // symlink is followed, but what it names must be a regular file too.
  static Expected<InputFile> Open(const std::string& path);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  const std::string& path() const { return path_; }
  // The size at open: reads stop there even if the file grows (a log still being written, a /proc
  // file that reports 0 and never ends).
  uint64_t size() const { return size_; }
  // Up to `n` bytes at `offset`, fewer only at size(); an error names the file.
  Expected<size_t> ReadAt(uint64_t offset, void* buf, size_t n) const;

 private:
  InputFile(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

// Reads the file in pieces of at most 64 KiB, handing each to `feed`, up to `max_bytes` of it;
// returns the file's size (more than max_bytes: only its head was read).
Expected<uint64_t> ReadInPieces(const std::string& path, uint64_t max_bytes,
                                const std::function<void(std::string_view)>& feed);

}  // namespace p2ptrace
