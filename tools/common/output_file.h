// Files the CLI writes whole (export --prometheus, --rows; doctor --prometheus): never half-written.
#pragma once

#include <string>

namespace p2ptrace::cli {

// Why FILE cannot be written ("" when it can, as far as can be told before writing): its directory
// missing, not a directory, or not writable; FILE itself a directory. Checked before the work starts.
std::string OutputFileProblem(const std::string& file);
// Writes `text` to FILE atomically: a temporary file in FILE's directory (".<name>.tmp.XXXXXX", which
// node_exporter's textfile collector ignores: it reads *.prom only), flushed to disk, mode 0644 less
// the umask, then renamed over FILE. On failure nothing is left behind (FILE keeps what it held) and
// the returned text says why; "" on success.
std::string WriteFileAtomically(const std::string& file, const std::string& text);
// FILE "-": `text` on stdout (a pipe, promtool, jq); else WriteFileAtomically. "" on success.
std::string WriteOutput(const std::string& file, const std::string& text);

}  // namespace p2ptrace::cli
