// Helper: a few NCCL calls against whatever libnccl.so.2 is loaded (here: the real one, with no
// GPU), printing every result, so runs with and without the shim can be compared line by line.
#include <nccl.h>

#include <cstdio>

int main() {
  int version = 0;
  ncclResult_t r = ncclGetVersion(&version);
  std::printf("ncclGetVersion %d %d\n", r, version);
  ncclUniqueId id{};
  r = ncclGetUniqueId(&id);
  std::printf("ncclGetUniqueId %d\n", r);
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
  return 0;
}
