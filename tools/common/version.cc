#include "tools/common/version.h"

namespace p2ptrace::cli {

const char* VersionText() { return P2PTRACE_VERSION_TEXT; }

}  // namespace p2ptrace::cli
