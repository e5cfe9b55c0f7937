// Helper for the IPC test: the parent exports device memory with cudaIpcGetMemHandle, starts a
// child (this program again) with the handle in hex, the child opens it, checks the parent's bytes
// and writes its own, and the parent checks it sees them. Prints one line per fact; exit 0 = all ok.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kBytes = 1 << 16;

int Fail(const char* what, cudaError_t e) {
  std::printf("FAIL %s: %d (%s)\n", what, e, cudaGetErrorName(e));
  return 1;
}

std::string Hex(const cudaIpcMemHandle_t& h) {
  std::string out;
  const auto* b = reinterpret_cast<const unsigned char*>(&h);
  char buf[3];
  for (size_t i = 0; i < sizeof h; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", b[i]);
    out += buf;
  }
  return out;
}

cudaIpcMemHandle_t Unhex(const char* s) {
  cudaIpcMemHandle_t h{};
  auto* b = reinterpret_cast<unsigned char*>(&h);
  for (size_t i = 0; i < sizeof h && s[2 * i] && s[2 * i + 1]; ++i) {
    char two[3] = {s[2 * i], s[2 * i + 1], 0};
    b[i] = static_cast<unsigned char>(std::strtoul(two, nullptr, 16));
  }
  return h;
}

int Child(int device, const char* hex) {
  if (cudaError_t e = cudaSetDevice(device); e) return Fail("child cudaSetDevice", e);
  void* p = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&p, Unhex(hex), cudaIpcMemLazyEnablePeerAccess); e)
    return Fail("cudaIpcOpenMemHandle", e);
  std::vector<unsigned char> seen(kBytes);
  if (cudaError_t e = cudaMemcpy(seen.data(), p, kBytes, cudaMemcpyDefault); e) return Fail("child read", e);
  for (size_t i = 0; i < kBytes; ++i)
    if (seen[i] != static_cast<unsigned char>(i * 7)) { std::printf("FAIL child saw wrong byte %zu\n", i); return 1; }
  std::printf("child read the parent's bytes\n");
  cudaPointerAttributes a{};
  cudaPointerGetAttributes(&a, p);
  std::printf("child pointer type %d device %d\n", static_cast<int>(a.type), a.device);
  if (cudaError_t e = cudaMemset(p, 0xab, kBytes); e) return Fail("child write", e);
  if (cudaError_t e = cudaIpcCloseMemHandle(p); e) return Fail("cudaIpcCloseMemHandle", e);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return Child(std::atoi(argv[2]), argv[3]);
  int child_device = argc > 1 ? std::atoi(argv[1]) : 1;
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, kBytes); e) return Fail("cudaMalloc", e);
  std::vector<unsigned char> bytes(kBytes);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  if (cudaError_t e = cudaMemcpy(p, bytes.data(), kBytes, cudaMemcpyHostToDevice); e) return Fail("fill", e);
  cudaIpcMemHandle_t h;
  if (cudaError_t e = cudaIpcGetMemHandle(&h, p); e) return Fail("cudaIpcGetMemHandle", e);
  void* self = nullptr;
  std::printf("open in the same process: %d\n", cudaIpcOpenMemHandle(&self, h, cudaIpcMemLazyEnablePeerAccess));
  std::string hex = Hex(h), dev = std::to_string(child_device);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", argv[0], "--child", dev.c_str(), hex.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { std::printf("FAIL child status %d\n", status); return 1; }
  if (cudaError_t e = cudaMemcpy(bytes.data(), p, kBytes, cudaMemcpyDeviceToHost); e) return Fail("read back", e);
  for (size_t i = 0; i < kBytes; ++i)
    if (bytes[i] != 0xab) { std::printf("FAIL parent does not see the child's byte %zu\n", i); return 1; }
  std::printf("parent sees the child's bytes\n");
  return cudaFree(p) == cudaSuccess ? 0 : 1;
}
