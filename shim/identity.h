// A rank's identity file (P2PTRACE_DIR/.p2ptrace-ranks/<pid>.id): what the job-start check of each
// process tells the others of the job (shim/preflight.cc), one "key value" line per field.
// Another process wrote it, so reading it is parsing untrusted input: a file with any field that is
// not what the shim itself writes is rejected whole (it could only make false warnings).
#pragma once

#include <string>
#include <string_view>

namespace p2ptrace::shim {

struct RankIdentity {
  std::string host, boot_id, bus;
  long shm_dev = -1, shm_mb = -1;
  int rank = -1, pid = 0, gpu = -1;  // gpu: the index its own node gives the GPU
};

std::string SerializeIdentity(const RankIdentity& id);

// False when `text` is not whole lines of known keys with values of their shape: host names of
// letters, digits, '.', '-', '_' (RFC 1123, no control byte can pass), hex bus ids, numbers in range,
// a pid. Unknown keys are ignored (a newer shim's).
bool ParseIdentity(std::string_view text, RankIdentity* id);

}  // namespace p2ptrace::shim
