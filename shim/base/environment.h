// Changing the process's environment from inside someone else's program. glibc's setenv before 2.41
// may realloc (and so free) the `environ` array that another thread's getenv is walking, and its
// unsetenv shifts entries under it: a program thread reading its environment while NCCL's thread
// runs the shim's change (the log tap's fopen, the profiler's init) could crash or miss a variable.
// These make a new array with the change and publish it with one pointer store; the old array and
// every string stay valid for the process's life (a few hundred bytes, a few times per process).
#pragma once

namespace p2ptrace::shim {

// As setenv(name, value, 1) / unsetenv(name), without freeing what a concurrent getenv may read.
// Serialised among themselves; a program's own setenv at the same moment races as it would with any
// other thread's. False when memory ran out (nothing changed).
bool SetEnvironment(const char* name, const char* value);
bool UnsetEnvironment(const char* name);

}  // namespace p2ptrace::shim
