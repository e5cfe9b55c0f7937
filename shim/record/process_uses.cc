#include "shim/record/process_uses.h"

#include <atomic>
#include <cstdint>

#include "shim/record/trace_writer.h"

namespace p2ptrace::shim {
namespace {

// The trace generation (file) each node was last described in; 0 never.
std::atomic<uint64_t> g_noted[static_cast<int>(Node::kCount)];
std::atomic<int> g_nccl_version{0};

}  // namespace

std::atomic<bool> detail::g_nccl_called{false};

bool NodeAnswered(Node node) {
  return g_noted[static_cast<int>(node)].load(std::memory_order_relaxed) ==
         detail::g_generation.load(std::memory_order_relaxed);
}

bool MarkNodeAnswered(Node node) {
  uint64_t gen = detail::g_generation.load(std::memory_order_relaxed);
  return g_noted[static_cast<int>(node)].exchange(gen) != gen;
}

void ForgetNodeAnswered(Node node) { g_noted[static_cast<int>(node)].store(0, std::memory_order_relaxed); }

const CudaRuntime* AnsweredRuntime(bool or_driver) {
  for (Node n : {Node::kCudart13, Node::kCudart12, Node::kCudart11, Node::kDriver}) {
    if (n == Node::kDriver && !or_driver) break;
    if (g_runtimes[static_cast<int>(n)].load(std::memory_order_acquire) != nullptr && NodeAnswered(n))
      return &Runtime(n);
  }
  return nullptr;
}

int LoadedNcclVersion() { return g_nccl_version.load(std::memory_order_relaxed); }
void NoteNcclCalled(int version) {
  if (version > 0) g_nccl_version.store(version, std::memory_order_relaxed);
  detail::g_nccl_called.store(true, std::memory_order_release);
}

}  // namespace p2ptrace::shim
