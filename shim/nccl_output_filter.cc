#include "shim/nccl_output_filter.h"

#include <strings.h>

#include "core/nccl_log.h"

namespace p2ptrace::shim {

bool ParseNcclUserLevel(const char* value, NcclUserLevel* out) {
  if (value == nullptr) return false;
  static const std::pair<const char*, NcclUserLevel> kLevels[] = {
      {"VERSION", NcclUserLevel::kVersion}, {"WARN", NcclUserLevel::kWarn}, {"INFO", NcclUserLevel::kInfo},
      {"ABORT", NcclUserLevel::kInfo},      {"TRACE", NcclUserLevel::kInfo}};
  for (const auto& [name, level] : kLevels)
    if (strcasecmp(value, name) == 0) {
      *out = level;
      return true;
    }
  return false;
}

void NcclOutputFilter::Feed(std::string_view bytes, std::string* out) {
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      return;
    }
    if (partial_.empty()) {
      Line(bytes.substr(0, nl + 1), out);
    } else {
      partial_.append(bytes.substr(0, nl + 1));
      std::string line = std::move(partial_);
      partial_.clear();
      Line(line, out);
    }
    bytes.remove_prefix(nl + 1);
  }
}

void NcclOutputFilter::Finish(std::string* out) {
  if (!partial_.empty()) {
    std::string line = std::move(partial_);
    partial_.clear();
    Line(line, out);
  }
  if (shown_) out->append(blanks_);
  blanks_.clear();
}

void NcclOutputFilter::Line(std::string_view line, std::string* out) {
  std::string_view text = line;
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  if (text.empty()) {
    blanks_.append(line);
    return;
  }
  NcclLine kind = ClassifyNcclLine(text);
  if (kind.level == NcclLineLevel::kWarn) {
    // The blank lines before a WARN are its own leading newline.
    shown_ = level_ != NcclUserLevel::kVersion;
    if (shown_) out->append(blanks_);
    blanks_.clear();
    if (shown_) out->append(line);
    return;
  }
  if (shown_) out->append(blanks_);  // they ended the message before
  blanks_.clear();
  if (kind.level == NcclLineLevel::kNone) {  // a continuation, or a bare VERSION-level line
    if (shown_) out->append(line);
    return;
  }
  constexpr std::string_view kVersion = "NCCL version ";
  if (kind.level == NcclLineLevel::kInfo && kind.message.substr(0, kVersion.size()) == kVersion) {
    // Before 2.22 NCCL printf()s the bare line to stdout itself whatever the file, and puts this INFO
    // copy only into a file. Since 2.22 this INFO line replaces the bare one, which VERSION and WARN
    // print without a prefix.
    int code = NcclVersionCode(kind.message);
    shown_ = code < 0 || code >= 22200;
    if (!shown_) return;
    if (level_ == NcclUserLevel::kInfo) {
      out->append(line);
    } else {
      out->append(kind.message);
      out->push_back('\n');
    }
    return;
  }
  shown_ = level_ == NcclUserLevel::kInfo;
  if (shown_) out->append(line);
}

}  // namespace p2ptrace::shim
