// Helper: a few NCCL calls against whatever libnccl.so.2 is loaded (here: the real one, with no
// GPU), printing every result, so runs with and without the shim can be compared line by line.
// Also the NCCL debug settings the program sees in its own environment, after NCCL's first log
// line (ncclGetUniqueId logs) and at the end: the shim's log tap must leave them as they were.
#include <nccl.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

static void PrintEnvironment(const char* when) {
  std::string line = std::string("environment ") + when + ":";
  for (const char* name : {"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"}) {
    const char* v = std::getenv(name);
    // A file by its name only: the runs compared keep theirs in different directories.
    if (v != nullptr && std::strcmp(name, "NCCL_DEBUG_FILE") == 0 && std::strrchr(v, '/')) v = std::strrchr(v, '/') + 1;
    line += std::string(" ") + name + (v ? std::string("=") + v : std::string(" unset"));
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)  // the shim's own markers, if any
    if (std::strncmp(*e, "P2PTRACE_NCCL", 13) == 0) line += std::string(" ") + *e;
  std::printf("%s\n", line.c_str());
}

// The process's threads: the shim starts none before a communicator, so a program that
// only asks NCCL its version or an id forks, unshares and execs as it would bare.
static int Threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

int main() {
  int version = 0;
  ncclResult_t r = ncclGetVersion(&version);
  std::printf("ncclGetVersion %d %d\n", r, version);
  std::printf("threads after ncclGetVersion: %d\n", Threads());
  ncclUniqueId id{};
  r = ncclGetUniqueId(&id);
  std::printf("ncclGetUniqueId %d\n", r);
  std::printf("threads after ncclGetUniqueId: %d\n", Threads());
  PrintEnvironment("after ncclGetUniqueId");
  ncclComm_t comm = nullptr;
  r = ncclCommInitRank(&comm, 1, id, 0);
  std::printf("ncclCommInitRank %d %s | %s\n", r, ncclGetErrorString(r), ncclGetLastError(nullptr));
  // ncclBcast calls ncclBroadcast through the PLT inside libnccl: one call, one record.
  r = ncclBcast(nullptr, 16, ncclFloat32, 0, nullptr, nullptr);
  std::printf("ncclBcast %d\n", r);
  r = ncclGroupStart();
  std::printf("ncclGroupStart %d\n", r);
  r = ncclGroupEnd();
  std::printf("ncclGroupEnd %d\n", r);
  PrintEnvironment("at the end");
  return 0;
}
