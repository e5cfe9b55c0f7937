// The trace directory is shared ground (a /scratch/job, a pre-created p2ptrace-<job id>), so the
// shim trusts nothing in it: the directory must be this user's and writable by no one else; every
// file is reached through a freshly checked directory descriptor (*at calls, O_NOFOLLOW), created
// O_CREAT|O_EXCL 0600, and an existing one is opened only when it is a regular file of this user's,
// without blocking (a FIFO planted at a name can never hang the job).
// No descriptor is kept across calls: a program that closes every descriptor it did not open (as
// daemons do) must never find one of the shim's, nor the shim one of the program's.
#pragma once

#include <string>

#include "shim/base/fd.h"

namespace p2ptrace::shim {

// Creates `dir` when missing (parents as `mkdir -p` would, the directory itself 0700) and checks
// that it is safe to write in. "" when it is; otherwise why not, for a warning.
std::string PrepareTraceDir(const std::string& dir);

// `dir` opened for *at calls after the same checks (owner, not group/other writable): not ok()
// when it fails them or cannot be opened.
ScopedFd OpenTraceDir(const std::string& dir);
// A subdirectory of it (".p2ptrace-ranks"), created 0700 when missing, never through a symlink,
// with the same checks.
ScopedFd OpenTraceSubdir(int dirfd, const char* name);
// A new file: O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode 0600, plus `flags` (O_WRONLY, O_RDWR…).
ScopedFd CreateTraceFile(int dirfd, const char* name, int flags);
// An existing regular file owned by this user, opened without following a symlink and without
// blocking (O_NONBLOCK stays set: harmless on a regular file): not ok() otherwise.
ScopedFd OpenOwnFile(int dirfd, const char* name, int flags);
// The same for a path anywhere (e.g. the user's own NCCL_DEBUG_FILE): a regular file, opened
// without blocking; symlinks followed only when `follow` (the user named the file themselves).
ScopedFd OpenRegularFile(const std::string& path, int flags, bool follow);

}  // namespace p2ptrace::shim
