// What the shim's CUDA hooks share with the rest of the shim. Each hook (cuda_hooks.cc) is
// hooks::name(runtime, real function, the call's arguments) → the real function's result.
#pragma once

#include "shim/interpose/cuda_functions.h"
#include "shim/interpose/cuda_graph_functions.h"
#include "shim/interpose/cuda_runtime.h"

#define P2PTRACE_UNPAREN(...) __VA_ARGS__

namespace p2ptrace::shim {

template <typename F>
using Real = F;

// True once this runtime answered one of the application's calls successfully: from then on the
// shim's own calls to it cannot fail and leave an error behind.
bool RuntimeAnswered(const CudaRuntime& rt);


}  // namespace p2ptrace::shim
