// Text from callers (region names, handles, labels, error messages that
// quote them, a cluster member's hello) on its way into a log line.
//
// A log line is one record: a caller's newline must not end it and start a
// forged one, and a caller's quote must not end a quoted field early. So a
// line's text is passed through log_line() (control characters escaped) and
// each quoted field through log_field() (quotes and backslashes too).
// Escapes are C-style: \n, \r, \t, \\, \", and \xNN for other bytes below
// 0x20 and 0x7f. Bytes from 0x80 up pass as they are (UTF-8 text stays readable).
#pragma once

#include <string>
#include <string_view>

namespace sgemm {

namespace log_text_detail {
inline void escape_into(std::string& out, std::string_view in, bool quotes) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char ch : in) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (quotes && (c == '"' || c == '\\')) {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
}
}  // namespace log_text_detail

// The text of one whole log line: control characters escaped.
inline std::string log_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  log_text_detail::escape_into(out, text, /*quotes=*/false);
  return out;
}

// One field's text, to go between double quotes: quotes and backslashes escaped too.
inline std::string log_field(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  log_text_detail::escape_into(out, text, /*quotes=*/true);
  return out;
}

}  // namespace sgemm
