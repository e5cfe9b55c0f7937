// The exported wrappers: every function of cuda_functions.h, once per runtime version node, bound
// with .symver to that node (cudaMemcpyPeer@libcudart.so.12, cudaMemcpyPeer@@libcudart.so.13, …).
// A caller linked against cudart 12 thus reaches the wrapper that calls cudart 12, and never the
// other runtime loaded in the same process (notes/interposer.md E4). Unversioned references bind to
// the @@libcudart.so.13 one, which falls back to whatever cudart is loaded.
#include <atomic>

#include "shim/interpose/cuda_hooks.h"
#include "shim/interpose/resolve.h"

using p2ptrace::shim::CachedReal;
using p2ptrace::shim::Node;
using p2ptrace::shim::Runtime;

#define P2PTRACE_WRAP(node, suffix, version, name, params, args)                                        \
  extern "C" __attribute__((visibility("default"))) cudaError_t p2pw_##name##_##suffix params {          \
    static std::atomic<void*> real_slot;                                                                 \
    auto real = reinterpret_cast<decltype(&::name)>(CachedReal(&real_slot, #name, node));                \
    if (__builtin_expect(real == nullptr, 0)) return cudaErrorSharedObjectSymbolNotFound;                \
    return p2ptrace::shim::hooks::name(Runtime(node), real, P2PTRACE_UNPAREN args);                      \
  }                                                                                                      \
  __asm__(".symver p2pw_" #name "_" #suffix ", " #name version);

#define P2PTRACE_WRAP_11(name, params, args) P2PTRACE_WRAP(Node::kCudart11, 11, "@libcudart.so.11.0", name, params, args)
#define P2PTRACE_WRAP_12(name, params, args) P2PTRACE_WRAP(Node::kCudart12, 12, "@libcudart.so.12", name, params, args)
#define P2PTRACE_WRAP_13(name, params, args) P2PTRACE_WRAP(Node::kCudart13, 13, "@@libcudart.so.13", name, params, args)

P2PTRACE_CUDA_FUNCTIONS(P2PTRACE_WRAP_11)
P2PTRACE_CUDA_FUNCTIONS(P2PTRACE_WRAP_12)
P2PTRACE_CUDA_FUNCTIONS(P2PTRACE_WRAP_13)
