// The simulated NCCL's files under $P2PSIM_NCCL_DIR (default /dev/shm), and removing those a dead
// job left behind. Shared by libnccl.so.2 (each communicator's init sweeps) and `p2psim launch`
// (sweeps when its ranks have exited), so a rank killed with SIGKILL/SIGABRT leaves nothing for long.
//
//   p2psim-nccl-<token>/           one communicator: rank.<r>, sync, coll.*, p2p.*, split*, and one
//                                  pid.<pid> marker per process that joined it
//   p2psim-nccl-shm-<host>-<dev>   /dev/shm accounting of one simulated host: {pid, bytes} records
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

namespace p2psim {

inline const char kNcclSegmentPrefix[] = "p2psim-nccl-";
inline const char kNcclShmAccountPrefix[] = "p2psim-nccl-shm-";
inline const char kNcclPidMarker[] = "pid.";

inline std::string NcclSegmentRoot() {
  const char* d = std::getenv("P2PSIM_NCCL_DIR");
  return d != nullptr && *d != '\0' ? d : "/dev/shm";
}

inline bool ProcessAlive(long pid) { return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }

// One record of the accounting file (layout shared with nccl_sim.cc).
struct NcclShmRecord {
  int32_t pid;
  int32_t pad;
  int64_t bytes;
};

inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

// Removes a communicator directory and everything in it (it holds only plain files): the pid
// markers last, so that a remover killed half-way leaves either markers of dead processes or an
// empty directory, both stale.
inline void RemoveNcclCommDir(const std::string& dir) {
  std::vector<std::string> names = ListDir(dir);
  std::stable_partition(names.begin(), names.end(),
                        [](const std::string& n) { return n.rfind(kNcclPidMarker, 0) != 0; });
  for (const std::string& n : names) unlink((dir + "/" + n).c_str());
  rmdir(dir.c_str());
}

// A communicator directory is stale when every process that joined it is gone, when it is empty (a
// live one never is: it is made with its creator's marker inside, see nccl_sim.cc), or, holding
// files but no marker, when it is older than `grace_s`.
inline bool NcclCommDirStale(const std::string& dir, double grace_s) {
  bool any = false, empty = true;
  for (const std::string& n : ListDir(dir)) {
    empty = false;
    if (n.rfind(kNcclPidMarker, 0) != 0) continue;
    any = true;
    if (ProcessAlive(std::atol(n.c_str() + sizeof kNcclPidMarker - 1))) return false;
  }
  if (any || empty) return true;
  struct stat sb {};
  return stat(dir.c_str(), &sb) == 0 && std::difftime(std::time(nullptr), sb.st_mtime) > grace_s;
}

// Under the file's lock: unlinks an accounting file whose every charge belongs to a dead process
// or is zero. Writers re-open a file that was unlinked while they waited for the lock (st_nlink 0).
inline void RemoveIdleShmAccount(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  flock(fd, LOCK_EX);
  struct stat sb {};
  bool idle = fstat(fd, &sb) == 0 && sb.st_nlink > 0;
  NcclShmRecord r{};
  for (off_t off = 0; idle && pread(fd, &r, sizeof r, off) == sizeof r; off += sizeof r)
    if (r.bytes > 0 && ProcessAlive(r.pid)) idle = false;
  if (idle) unlink(path.c_str());
  flock(fd, LOCK_UN);
  close(fd);
}

// Removes what dead jobs left in `root`. Live jobs' files are untouched.
inline void SweepStaleNcclSegments(const std::string& root, double grace_s = 300) {
  for (const std::string& n : ListDir(root)) {
    if (n.rfind(kNcclSegmentPrefix, 0) != 0) continue;
    std::string path = root + "/" + n;
    struct stat sb {};
    if (lstat(path.c_str(), &sb) != 0) continue;
    if (n.rfind(kNcclShmAccountPrefix, 0) == 0 && S_ISREG(sb.st_mode)) RemoveIdleShmAccount(path);
    else if (S_ISDIR(sb.st_mode) && NcclCommDirStale(path, grace_s)) RemoveNcclCommDir(path);
  }
}

}  // namespace p2psim
