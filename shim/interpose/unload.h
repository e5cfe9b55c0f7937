// A library unloaded under the shim (a program that dlopens a library linked to cudart, uses it and
// dlcloses it, perhaps several times): what the shim holds of a CUDA runtime or of NCCL — its real
// functions, the runtime's table, timing events in flight — must be retired before it could be used
// again, or the shim would call into unmapped code. The shim's dlclose (libc_hooks.cc) runs the
// real one under UnloadMutex() (bind.h), then retires whatever went away with it.
#pragma once

namespace p2ptrace::shim {

// dlclose(handle) through `real_dlclose`, then the retirement of every library that is no longer
// loaded. Returns what the real dlclose returned, errno as it left it.
int CloseLibrary(void* handle, int (*real_dlclose)(void*));

}  // namespace p2ptrace::shim
