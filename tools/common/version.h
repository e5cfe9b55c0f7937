// The version the CLI says it is (`--version`, the fleet rows' p2ptrace_version): the build's, once.
#pragma once

namespace p2ptrace::cli {

const char* VersionText();

}  // namespace p2ptrace::cli
