// Changing the process's environment from inside someone else's program. glibc's setenv before 2.41
// may realloc (and so free) the `environ` array that another thread's getenv is walking, and its
// unsetenv shifts entries under it: a program thread reading its environment while NCCL's thread
// runs the shim's change (the log tap's fopen, the profiler's init) could crash or miss a variable.
// The shim publishes an array of its own (one pointer store), with room to spare, and then changes
// it in place where no variable has to move: a value replaced in its slot, a variable added after
// the last, the last one taken off. So a job that re-creates its communicators for days (the
// profiler's variable set and taken back each time, last in, first out) allocates nothing more; any
// other change publishes a new array. No array or string is ever freed (a getenv may be reading it).
#pragma once

namespace p2ptrace::shim {

// As setenv(name, value, 1) / unsetenv(name), without freeing what a concurrent getenv may read.
// Serialised among themselves; a program's own setenv at the same moment races as it would with any
// other thread's. False when memory ran out (nothing changed).
bool SetEnvironment(const char* name, const char* value);
bool UnsetEnvironment(const char* name);

}  // namespace p2ptrace::shim
