// The behaviour of each intercepted function, declared from the one list (cuda_functions.h):
// hooks::name(runtime, real function, the call's arguments) → the real function's result.
#pragma once

#include "shim/interpose/cuda_functions.h"
#include "shim/interpose/cuda_runtime.h"

#define P2PTRACE_UNPAREN(...) __VA_ARGS__

namespace p2ptrace::shim {

template <typename F>
using Real = F;

// True once this runtime answered one of the application's calls successfully: from then on the
// shim's own calls to it cannot fail and leave an error behind.
bool RuntimeAnswered(const CudaRuntime& rt);

namespace hooks {
#define P2PTRACE_DECLARE_HOOK(name, params, args) \
  cudaError_t name(const CudaRuntime& rt, Real<decltype(&::name)> real, P2PTRACE_UNPAREN params);
P2PTRACE_CUDA_FUNCTIONS(P2PTRACE_DECLARE_HOOK)
#undef P2PTRACE_DECLARE_HOOK
}  // namespace hooks

}  // namespace p2ptrace::shim
