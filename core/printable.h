// How bytes read from files (host names, paths, recorded environment values, NCCL log lines, call
// site frames) are written out. Any byte sequence may arrive; what leaves is valid UTF-8, and on a
// terminal or a web page nothing that could act as a control. One rule for every output (DESIGN §7):
// a byte that is not part of well-formed UTF-8 becomes the four characters \xHH (as Python's
// "backslashreplace"); for display, so does every byte of a control character.
#pragma once

#include <string>
#include <string_view>

namespace p2ptrace {

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF), the
// rule JSON writers such as nlohmann's enforce.
bool IsUtf8(std::string_view bytes);

// For JSON: well-formed UTF-8 passes unchanged; every other byte as \xHH.
std::string ValidUtf8(std::string_view bytes);

// For a terminal and HTML text: as ValidUtf8, and every control character too (C0, DEL, and C1
// U+0080-U+009F, each of its bytes as \xHH), so that nothing read from a file can move the cursor,
// recolour or retitle a terminal. Line feeds are kept when `keep_newlines` (a whole rendered
// text), escaped otherwise (one value that must stay on its line).
std::string Printable(std::string_view bytes, bool keep_newlines = true);

}  // namespace p2ptrace
