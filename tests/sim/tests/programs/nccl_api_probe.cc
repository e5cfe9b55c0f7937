// nccl_api_probe: calls the NCCL API beyond collectives (ncclMemAlloc/Free, buffer registration,
// windows and, found with dlsym because the toolkit's 2.28.9 header lacks them, the 2.29+ calls)
// with good and bad arguments, and prints one `name=value` line per answer for sim_nccl_test.
// Linked against the real libnccl.so.2 and libcudart; one process, two GPUs (ncclCommInitAll).
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

void Say(const char* name, long long value) { std::printf("%s=%lld\n", name, value); }

template <typename Fn>
Fn Find(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

int main() {
  int version = 0;
  Say("version_rc", ncclGetVersion(&version));
  Say("version", version);

  // ncclMemAlloc: a null pointer or zero size go to cudaMalloc's answer.
  Say("memalloc_null", ncclMemAlloc(nullptr, 16));
  void* zero = reinterpret_cast<void*>(1);
  Say("memalloc_zero", ncclMemAlloc(&zero, 0));
  Say("memalloc_zero_null", zero == nullptr);
  cudaSetDevice(0);
  void* buf = nullptr;
  Say("memalloc", ncclMemAlloc(&buf, 1000));
  std::vector<unsigned char> in(1000), out(1000, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7);
  Say("memcpy_to", cudaMemcpy(buf, in.data(), in.size(), cudaMemcpyHostToDevice));
  Say("memcpy_from", cudaMemcpy(out.data(), buf, out.size(), cudaMemcpyDeviceToHost));
  Say("memcpy_same", in == out);
  cudaPointerAttributes attr{};
  cudaPointerGetAttributes(&attr, buf);
  Say("memalloc_is_device", attr.type == cudaMemoryTypeDevice && attr.device == 0);
  Say("memfree_null", ncclMemFree(nullptr));
  int on_stack = 0;
  Say("memfree_host", ncclMemFree(&on_stack));

  ncclComm_t comms[2] = {};
  int devs[2] = {0, 1};
  Say("initall", ncclCommInitAll(comms, 2, devs));
  ncclComm_t comm = comms[0];

  // Registration: reference counted per page range; an unknown handle is ncclInvalidUsage.
  void *h1 = nullptr, *h2 = nullptr, *h3 = reinterpret_cast<void*>(1);
  Say("register", ncclCommRegister(comm, buf, 1000, &h1));
  Say("register_handle", h1 != nullptr);
  Say("register_inside", ncclCommRegister(comm, static_cast<char*>(buf) + 100, 100, &h2));
  Say("register_same_handle", h1 == h2);
  Say("register_null_comm", ncclCommRegister(nullptr, buf, 1000, &h2));
  void* host = nullptr;
  cudaMallocHost(&host, 4096);
  Say("register_host", ncclCommRegister(comm, host, 4096, &h3));
  Say("register_host_null_handle", h3 == nullptr);
  Say("register_unknown", ncclCommRegister(comm, &on_stack, sizeof on_stack, &h2));
  Say("deregister1", ncclCommDeregister(comm, h1));
  Say("deregister2", ncclCommDeregister(comm, h1));
  Say("deregister3", ncclCommDeregister(comm, h1));
  Say("deregister_null", ncclCommDeregister(comm, nullptr));

  // Windows: all GPUs of the communicator reach each other over NVLink here, so windows exist.
  ncclWindow_t win = nullptr;
  Say("window", ncclCommWindowRegister(comm, buf, 1000, &win, NCCL_WIN_COLL_SYMMETRIC));
  Say("window_handle", win != nullptr);
  ncclWindow_t bad = nullptr;
  Say("window_null_buffer", ncclCommWindowRegister(comm, nullptr, 1000, &bad, 0));
  Say("window_null_out", ncclCommWindowRegister(comm, buf, 1000, nullptr, 0));
  auto win_ptr = Find<ncclResult_t (*)(ncclComm_t, ncclWindow_t, void**)>("ncclWinGetUserPtr");
  void* user = nullptr;
  Say("win_user_ptr", win_ptr != nullptr ? win_ptr(comm, win, &user) : -1);
  Say("win_user_ptr_same", user == buf);
  Say("window_deregister", ncclCommWindowDeregister(comm, win));
  Say("window_deregister_again", ncclCommWindowDeregister(comm, win));

  // 2.29+: a communicator's new id, suspend/resume and memory statistics.
  auto comm_id = Find<ncclResult_t (*)(ncclComm_t, ncclUniqueId*)>("ncclCommGetUniqueId");
  auto suspend = Find<ncclResult_t (*)(ncclComm_t, int)>("ncclCommSuspend");
  auto resume = Find<ncclResult_t (*)(ncclComm_t)>("ncclCommResume");
  auto stats = Find<ncclResult_t (*)(ncclComm_t, int, uint64_t*)>("ncclCommMemStats");
  if (comm_id == nullptr || suspend == nullptr || resume == nullptr || stats == nullptr) {
    std::printf("missing 2.29+ functions\n");
    return 1;
  }
  ncclUniqueId id{};
  Say("comm_unique_id", comm_id(comm, &id));
  Say("comm_unique_id_null", comm_id(comm, nullptr));
  Say("comm_unique_id_null_comm", comm_id(nullptr, &id));
  uint64_t value = 99;
  Say("suspend", suspend(comm, 1 /* NCCL_SUSPEND_MEM */));
  Say("stats_suspended_rc", stats(comm, 1, &value));
  Say("stats_suspended", static_cast<long long>(value));
  Say("resume", resume(comm));
  stats(comm, 1, &value);
  Say("stats_resumed", static_cast<long long>(value));
  Say("stats_bad_stat", stats(comm, 7, &value));
  Say("stats_null_value", stats(comm, 3, nullptr));
  Say("suspend_null_comm", suspend(nullptr, 1));

  // PreMulSum (FSDP divides gradients with it) and FP8 reductions, computed from the host's data.
  {
    void* d[2] = {};
    const float x0[4] = {1, 2, 3, 4}, x1[4] = {10, 20, 30, 40};
    for (int r = 0; r < 2; ++r) {
      cudaSetDevice(r);
      cudaMalloc(&d[r], 16);
      cudaMemcpy(d[r], r ? x1 : x0, 16, cudaMemcpyHostToDevice);
    }
    ncclRedOp_t ops[2] = {};
    float half = 0.5f;
    Say("premul_create", ncclRedOpCreatePreMulSum(&ops[0], &half, ncclFloat32, ncclScalarHostImmediate, comms[0]));
    ncclRedOpCreatePreMulSum(&ops[1], &half, ncclFloat32, ncclScalarHostImmediate, comms[1]);
    half = 7;  // host-immediate: read at creation, not now
    Say("premul_null_op", ncclRedOpCreatePreMulSum(nullptr, &half, ncclFloat32, ncclScalarHostImmediate, comms[0]));
    ncclGroupStart();
    for (int r = 0; r < 2; ++r) ncclAllReduce(d[r], d[r], 4, ncclFloat32, ops[r], comms[r], nullptr);
    Say("premul_group", ncclGroupEnd());
    float got[4] = {};
    cudaSetDevice(1);
    cudaDeviceSynchronize();
    cudaMemcpy(got, d[1], 16, cudaMemcpyDeviceToHost);
    Say("premul_sum", got[0] == 5.5f && got[3] == 22.0f);  // (1 + 10) / 2, (4 + 40) / 2
    Say("premul_wrong_type", ncclAllReduce(d[0], d[0], 2, ncclFloat64, ops[0], comms[0], nullptr));
    Say("premul_destroy", ncclRedOpDestroy(ops[0], comms[0]));
    Say("premul_destroy_again", ncclRedOpDestroy(ops[0], comms[0]));
    Say("premul_destroy_builtin", ncclRedOpDestroy(ncclSum, comms[0]));
    ncclRedOpDestroy(ops[1], comms[1]);
    // E4M3: 1.5 (0x3c) + 2.25 (0x41) = 3.75 (0x47); 448 + 448 saturates to 448 (0x7e).
    // E5M2: 1.5 (0x3e) + 2.0 (0x40) = 3.5 (0x43).
    const unsigned char in8[2][3] = {{0x3c, 0x7e, 0x3e}, {0x41, 0x7e, 0x40}};
    for (int r = 0; r < 2; ++r) {
      cudaSetDevice(r);
      cudaMemcpy(d[r], in8[r], 3, cudaMemcpyHostToDevice);
    }
    ncclGroupStart();
    for (int r = 0; r < 2; ++r) ncclAllReduce(d[r], d[r], 2, ncclFloat8e4m3, ncclSum, comms[r], nullptr);
    for (int r = 0; r < 2; ++r)
      ncclAllReduce(static_cast<char*>(d[r]) + 2, static_cast<char*>(d[r]) + 2, 1, ncclFloat8e5m2, ncclSum, comms[r], nullptr);
    Say("fp8_group", ncclGroupEnd());
    unsigned char out8[3] = {};
    cudaSetDevice(0);
    cudaDeviceSynchronize();
    cudaMemcpy(out8, d[0], 3, cudaMemcpyDeviceToHost);
    Say("fp8_e4m3_sum", out8[0] == 0x47 && out8[1] == 0x7e);
    Say("fp8_e5m2_sum", out8[2] == 0x43);
    for (int r = 0; r < 2; ++r) cudaFree(d[r]);
  }

  for (ncclComm_t c : comms) ncclCommDestroy(c);
  cudaFreeHost(host);
  Say("memfree", ncclMemFree(buf));
  return 0;
}
