// What the NCCL programs of the tests and examples/nccl_ring share: stop at the first NCCL call that
// fails, saying which (prefixed with the program's name, as a rank's output is read), the launcher's
// numbers, and the unique id rank 0 hands to the others through a file. Header-only: the example
// builds from it alone.
#pragma once

#include <errno.h>  // program_invocation_short_name
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

// Exits 2 with the program, the call and NCCL's words for its result when it is not ncclSuccess.
#define P2PTRACE_NCCL_CHECK(call)                                                                              \
  do {                                                                                                         \
    ncclResult_t r_ = (call);                                                                                  \
    if (r_ != ncclSuccess) {                                                                                   \
      std::fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, #call, ncclGetErrorString(r_)); \
      std::exit(2);                                                                                            \
    }                                                                                                          \
  } while (0)

namespace p2ptrace::test {

// A launcher's number (RANK, WORLD_SIZE, LOCAL_RANK): `fallback` when unset or empty.
inline int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// Rank 0 makes the id and publishes it at `path` atomically (write, then rename); the others
// (processes and threads alike) wait up to `wait_s` for it. Exits 2 when that fails.
inline ncclUniqueId ShareNcclId(int rank, const std::string& path, int wait_s) {
  ncclUniqueId id;
  if (rank == 0) {
    P2PTRACE_NCCL_CHECK(ncclGetUniqueId(&id));
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof id);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "%s: cannot write %s\n", program_invocation_short_name, path.c_str());
      std::exit(2);
    }
    return id;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(reinterpret_cast<char*>(&id), sizeof id)) return id;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "%s: no unique id appeared in %s\n", program_invocation_short_name, path.c_str());
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace p2ptrace::test
