// A library unloaded under the shim (a program that dlopens a library linked to cudart, uses it and
// dlcloses it, perhaps several times): what the shim holds of a CUDA runtime or of NCCL — cached
// function pointers, the runtime's table, timing events in flight — must be retired before it
// could be used again, or the shim would call into unmapped code. The shim's dlclose (libc_hooks.cc)
// runs the real one under UnloadMutex(), then retires whatever went away with it.
#pragma once

#include <mutex>

#include "shim/interpose/resolve.h"

namespace p2ptrace::shim {

// Held by the timing resolver while it calls into a runtime, and around the real dlclose: a runtime
// is never unloaded under a call of the shim's own. Recursive: a library's destructor may dlclose.
std::recursive_mutex& UnloadMutex();

// dlclose(handle) through `real_dlclose`, then the retirement of every runtime and NCCL that is no
// longer loaded. Returns what the real dlclose returned, errno as it left it.
int CloseLibrary(void* handle, int (*real_dlclose)(void*));

// Done by the wrappers' own files, under UnloadMutex(): every cached real function of a runtime
// node forgotten (cuda_hooks.cc; found again at the next call), and NCCL's when the library its
// functions came from is gone (nccl_wrappers.cc; `still_loaded(fn, base)` tells).
void ForgetRealFunctions(Node node);
void ForgetNcclIfUnloaded(bool (*still_loaded)(const void* fn, const void* base));

}  // namespace p2ptrace::shim
