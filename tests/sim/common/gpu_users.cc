#include "tests/sim/common/gpu_users.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

namespace p2psim {
namespace {

std::string Dir() {
  const char* d = std::getenv("P2PSIM_NCCL_DIR");
  return std::string(d != nullptr && *d != '\0' ? d : "/dev/shm") + "/p2psim-gpu-users";
}

// /proc/PID/stat's start time (field 22, after the parenthesised name); "" when the pid is gone.
std::string StartTime(unsigned pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i) {
  }
  return f;
}

std::string Prefix(const std::string& host, int host_gpu) { return host + "." + std::to_string(host_gpu) + "."; }

std::mutex g_mu;
std::vector<std::string>* g_mine = nullptr;  // this process's files, removed at exit
pid_t g_owner = 0;

// At exit, or when the library holding this copy is unloaded: a destructor, not atexit. An atexit
// handler of a library unloaded before exit would be called into unmapped code where a sanitizer's
// interceptor keeps it past the unload (TSan does). A program that unloads a simulated runtime while
// it still holds GPUs is listed no more; the state (in libcuda) does not note it again.
__attribute__((destructor)) void RemoveMine() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_mine == nullptr || g_owner != getpid()) return;  // a fork child's copy is not its own
  for (const std::string& f : *g_mine) unlink(f.c_str());
}

}  // namespace

void NoteGpuUser(const std::string& host, int host_gpu) {
  int saved = errno;  // called inside CUDA calls: the program's errno stays its own
  struct Restore {
    int e;
    ~Restore() { errno = e; }
  } restore{saved};
  std::string dir = Dir();
  mkdir(dir.c_str(), 0777);
  unsigned pid = static_cast<unsigned>(getpid());
  std::string file = dir + "/" + Prefix(host, host_gpu) + std::to_string(pid);
  std::string tmp = dir + "/.new." + std::to_string(pid);  // whole when it appears under its name
  std::ofstream(tmp) << StartTime(pid) << "\n";
  rename(tmp.c_str(), file.c_str());
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_mine == nullptr || g_owner != getpid()) {
    g_mine = new std::vector<std::string>;  // never freed: read by the destructor
    g_owner = getpid();
  }
  g_mine->push_back(file);
}

std::vector<unsigned> GpuUsers(const std::string& host, int host_gpu) {
  std::vector<unsigned> pids;
  std::string dir = Dir(), prefix = Prefix(host, host_gpu);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    unsigned pid = static_cast<unsigned>(std::strtoul(name.c_str() + prefix.size(), nullptr, 10));
    std::ifstream in(dir + "/" + name);
    std::string noted;
    in >> noted;
    if (pid != 0 && !noted.empty() && StartTime(pid) == noted) pids.push_back(pid);
    else unlink((dir + "/" + name).c_str());  // its process is gone
  }
  closedir(d);
  return pids;
}

}  // namespace p2psim
