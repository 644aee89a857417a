#include "verify/untrusted_text.h"

#include <cstdio>

#include "verify/report.h"

namespace flashcheck {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

struct Decoded {
  enum { ok, invalid, incomplete } status;
  char32_t cp;
  size_t len;  // bytes consumed (for invalid: the maximal valid prefix, at least 1)
};

// One UTF-8 sequence at s[0..]: overlong forms, surrogates and values past U+10FFFF are invalid
// (the second byte's allowed range depends on the first, as in Unicode's table 3-7).
Decoded decode(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return {Decoded::ok, b0, 1};
  size_t need;
  char32_t cp;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Decoded::invalid, kReplacement, 1};
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= s.size()) return {Decoded::incomplete, kReplacement, i};
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < lo || b > hi) return {Decoded::invalid, kReplacement, i};
    lo = 0x80, hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Decoded::ok, cp, need + 1};
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Characters that reorder how a terminal or editor shows the text around them ("Trojan Source"),
// and the Unicode line and paragraph separators.
bool reorders_or_breaks(char32_t c) {
  return (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069) || c == 0x2028 || c == 0x2029;
}

bool is_c1(char32_t c) { return c >= 0x80 && c <= 0x9F; }

// Calls f(code point) for each character of s; bad bytes arrive as U+FFFD.
template <class F>
void each_code_point(std::string_view s, F&& f) {
  while (!s.empty()) {
    const Decoded d = decode(s);
    f(d.cp);
    s.remove_prefix(d.len);
  }
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  each_code_point(s, [&](char32_t c) { append_utf8(c, out); });
  return out;
}

std::string printable_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  each_code_point(s, [&](char32_t c) {
    char buf[12];
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if ((c < 0x20 && c != '\t') || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (is_c1(c) || reorders_or_breaks(c)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      append_utf8(c, out);
    }
  });
  return out;
}

void TerminalFilter::code_point(char32_t c, std::string& out) {
  switch (state_) {
    case State::text: break;
    case State::escape:  // after ESC: '[' or a control string's introducer, else a two-byte escape
      if (c == '[') {
        state_ = State::csi;
        return;
      }
      if (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') {
        state_ = State::control_string;
        return;
      }
      if (c >= 0x20 && c <= 0x2F) return;  // intermediate bytes (e.g. ESC ( B)
      state_ = State::text;
      if (c >= 0x30 && c <= 0x7E) return;  // the final byte
      break;                               // not an escape after all: c is text
    case State::csi:                       // parameters and intermediates, then the final byte
      if (c >= 0x20 && c <= 0x3F) return;
      state_ = State::text;
      if (c >= 0x40 && c <= 0x7E) return;
      break;
    case State::control_string:  // OSC, DCS, SOS, PM, APC: up to BEL or ST (ESC \ or U+009C)
      if (c == 0x07 || c == 0x9C) {
        state_ = State::text;
        return;
      }
      if (c == 0x1B) {
        state_ = State::control_string_escape;
        return;
      }
      if (c != '\n') return;
      state_ = State::text;
      break;
    case State::control_string_escape:
      if (c == '\\') {
        state_ = State::text;
        return;
      }
      state_ = State::escape;  // the string ended; c continues a new escape
      code_point(c, out);
      return;
  }
  if (c == 0x1B) {
    state_ = State::escape;
  } else if (c == 0x9B) {
    state_ = State::csi;
  } else if (c == 0x90 || c == 0x98 || c == 0x9D || c == 0x9E || c == 0x9F) {
    state_ = State::control_string;
  } else if (c == '\n' || c == '\t') {
    out += static_cast<char>(c);
  } else if (c < 0x20 || c == 0x7F || is_c1(c) || reorders_or_breaks(c)) {
    // dropped: \r, backspace, bell, the other controls
  } else {
    append_utf8(c, out);
  }
}

void TerminalFilter::feed(std::string_view chunk, std::string& out) {
  std::string joined;
  if (!pending_.empty()) {
    joined = pending_;
    joined.append(chunk);
    chunk = joined;
    pending_.clear();
  }
  while (!chunk.empty()) {
    const Decoded d = decode(chunk);
    if (d.status == Decoded::incomplete) {  // may be completed by the next chunk
      pending_.assign(chunk);
      return;
    }
    code_point(d.cp, out);
    chunk.remove_prefix(d.len);
  }
}

void TerminalFilter::finish(std::string& out) {
  if (!pending_.empty()) code_point(kReplacement, out);
  pending_.clear();
  state_ = State::text;
}

std::string printable_block(std::string_view s) {
  TerminalFilter f;
  std::string out;
  f.feed(s, out);
  f.finish(out);
  return out;
}

std::string shell_word(std::string_view s) {
  auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  };
  bool all_plain = !s.empty();
  for (char c : s) all_plain = all_plain && plain(c);
  if (all_plain) return std::string(s);
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Report printable_report(Report r) {
  for (Criterion& c : r.criteria) c.detail = printable_line(c.detail);
  for (std::string& n : r.notes) n = printable_line(n);
  r.repro = printable_line(r.repro);
  return r;
}

}  // namespace flashcheck
