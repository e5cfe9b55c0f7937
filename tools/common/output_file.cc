#include "tools/common/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "core/printable.h"
#include "fmt/format.h"

namespace p2ptrace::cli {

namespace {

std::string DirOf(const std::string& file) {
  size_t slash = file.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : file.substr(0, slash);
}

std::string BaseOf(const std::string& file) {
  size_t slash = file.rfind('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

}  // namespace

std::string OutputFileProblem(const std::string& file) {
  std::string shown = Printable(file, false);
  if (file.empty() || BaseOf(file).empty()) return fmt::format("{}: not a file name", shown);
  std::string dir = DirOf(file);
  struct stat st{};
  if (stat(dir.c_str(), &st) != 0)
    return fmt::format("{}: cannot write: directory {}: {}", shown, Printable(dir, false), std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return fmt::format("{}: cannot write: {} is not a directory", shown, Printable(dir, false));
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    return fmt::format("{}: cannot write: directory {}: {}", shown, Printable(dir, false), std::strerror(errno));
  if (stat(file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return fmt::format("{}: cannot write: is a directory", shown);
  return "";
}

std::string WriteFileAtomically(const std::string& file, const std::string& text) {
  if (std::string why = OutputFileProblem(file); !why.empty()) return why;
  std::string shown = Printable(file, false);
  std::string dir = DirOf(file);
  std::string tmp = (dir == "/" ? "/" : dir + "/") + "." + BaseOf(file) + ".tmp.XXXXXX";
  int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return fmt::format("{}: cannot write: {}", shown, std::strerror(errno));
  auto fail = [&](const char* what) {
    std::string why = fmt::format("{}: {}: {}", shown, what, std::strerror(errno));
    close(fd);
    unlink(tmp.c_str());
    return why;
  };
  // mkstemp's 0600 would keep a node_exporter running as another user out.
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0644 & ~mask) != 0) return fail("cannot set the mode");
  for (size_t done = 0; done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return fail("write failed");
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) return fail("write failed");
  if (close(fd) != 0) {
    std::string why = fmt::format("{}: write failed: {}", shown, std::strerror(errno));
    unlink(tmp.c_str());
    return why;
  }
  if (rename(tmp.c_str(), file.c_str()) != 0) {
    std::string why = fmt::format("{}: cannot write: {}", shown, std::strerror(errno));
    unlink(tmp.c_str());
    return why;
  }
  return "";
}

std::string WriteOutput(const std::string& file, const std::string& text) {
  if (file != "-") return WriteFileAtomically(file, text);
  std::cout << text << std::flush;
  return std::cout ? "" : "cannot write to stdout";
}

}  // namespace p2ptrace::cli
