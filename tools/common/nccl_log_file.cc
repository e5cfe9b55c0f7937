#include "tools/common/nccl_log_file.h"

#include "core/input_file.h"
#include "fmt/format.h"

namespace p2ptrace::cli {

Expected<NcclLog> ReadNcclLogFile(const std::string& path, std::string* partial) {
  NcclLogParser parser;
  Expected<uint64_t> size = ReadInPieces(path, kMaxNcclLogBytes, [&](std::string_view piece) { parser.Feed(piece); });
  if (!size.ok()) return size.error();
  parser.Finish();
  if (*size > kMaxNcclLogBytes && partial)
    *partial = fmt::format("{}: only its first {} MiB of {} MiB read (an NCCL log is read up to {} MiB)", path,
                           kMaxNcclLogBytes >> 20, *size >> 20, kMaxNcclLogBytes >> 20);
  return parser.log();
}

}  // namespace p2ptrace::cli
