// The exported CUDA runtime wrappers, made from the function lists (cuda_functions.h,
// cuda_graph_functions.h) in the file whose hooks they call, so that a hook can be inlined into its
// wrapper: each function once per runtime version node, bound with .symver to that node
// (cudaMemcpyPeer@libcudart.so.12, cudaMemcpyPeer@@libcudart.so.13, …). A caller linked against
// cudart 12 thus reaches the wrapper that calls cudart 12, and never the other runtime loaded in
// the same process (a process may load cudart 12 and 13 side by side, each with its own state).
// Unversioned references bind to the @@libcudart.so.13 one, which falls back to whatever cudart is
// loaded. Each is bind.h's one wrapper shape; its first call also resolves the node's runtime table.
#pragma once

#include "shim/base/bind.h"
#include "shim/base/cuda_runtime.h"

namespace p2ptrace::shim {

// What a hook is given for the runtime of its wrapper's node: resolved only where the hook uses
// it, so the copy fast path never loads it.
struct NodeRuntime {
  Node node;
  operator const CudaRuntime&() const { return Runtime(node); }
};

}  // namespace p2ptrace::shim

// Fn: the real function's type; hook: the hooks:: function (both the name's, but where one name
// has two signatures across runtime versions).
#define P2PTRACE_WRAP_AS(node, suffix, version, name, hook, Fn, params, args)                                   \
  static constinit p2ptrace::shim::RealFunction p2pw_real_##name##_##suffix{#name,                             \
                                                                            p2ptrace::shim::LibraryOf(node)};   \
  P2PTRACE_WRAPPER(cudaError_t, p2pw_##name##_##suffix, p2pw_real_##name##_##suffix, Fn,                        \
                   cudaErrorSharedObjectSymbolNotFound, p2ptrace::shim::Runtime(node),                          \
                   p2ptrace::shim::hooks::hook(p2ptrace::shim::NodeRuntime{node}, p2p_real, P2PTRACE_UNPAREN args), \
                   params, args)                                                                                \
  __asm__(".symver p2pw_" #name "_" #suffix ", " #name version);
#define P2PTRACE_WRAP(node, suffix, version, name, params, args) \
  P2PTRACE_WRAP_AS(node, suffix, version, name, name, decltype(&::name), params, args)

#define P2PTRACE_WRAP_11(name, params, args) \
  P2PTRACE_WRAP(p2ptrace::shim::Node::kCudart11, 11, "@libcudart.so.11.0", name, params, args)
#define P2PTRACE_WRAP_12(name, params, args) \
  P2PTRACE_WRAP(p2ptrace::shim::Node::kCudart12, 12, "@libcudart.so.12", name, params, args)
#define P2PTRACE_WRAP_13(name, params, args) \
  P2PTRACE_WRAP(p2ptrace::shim::Node::kCudart13, 13, "@@libcudart.so.13", name, params, args)
