// Which of NCCL's log lines a user's own NCCL_DEBUG level shows. The log tap has NCCL write at INFO
// into a file; from that file this filter gives back exactly the text NCCL would have printed to
// stdout at the user's level (DESIGN.md §4, policy case 2). Pure: no I/O.
#pragma once

#include <string>
#include <string_view>

namespace p2ptrace::shim {

// The user's NCCL_DEBUG. kInfo stands for INFO, ABORT and TRACE: at those levels NCCL already writes
// every line the tap needs, so the tap keeps the level and the filter passes everything through.
enum class NcclUserLevel { kVersion, kWarn, kInfo };

// NCCL's own reading of NCCL_DEBUG (case-insensitive VERSION, WARN, INFO, ABORT, TRACE); false for
// anything else, which the tap leaves alone.
bool ParseNcclUserLevel(const char* value, NcclUserLevel* out);

class NcclOutputFilter {
 public:
  explicit NcclOutputFilter(NcclUserLevel level) : level_(level) {}
  // Appends to *out what the user would have seen of the complete lines in `bytes` (any split).
  void Feed(std::string_view bytes, std::string* out);
  // The input ended: a last line without '\n' and blank lines still held go through the same rules.
  void Finish(std::string* out);

 private:
  void Line(std::string_view line, std::string* out);  // one line, with its '\n' when it had one

  NcclUserLevel level_;
  std::string partial_;  // bytes of a line whose '\n' has not arrived
  std::string blanks_;   // blank lines held until the next line says whose they are: a WARN starts
                         // with one (NCCL prints "\n<prefix> NCCL WARN …"), else they end the message before
  bool shown_ = true;    // the current message is shown; its continuation lines follow it
};

}  // namespace p2ptrace::shim
