// Strict option values: the whole text must be a number in range, or the command line is refused
// (exit 125) with the option's name and the accepted form. Left to itself CLI11 wraps "-1" into an
// unsigned seed, turns 99999999999999999999 into 2^63-1 and echoes a 300-digit value back.
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "verify/untrusted_text.h"

namespace flashcheck::cli {

// A value as a message may quote it: long ones cut, so a bad number never floods the terminal, and
// escaped, so a value holding escape sequences or newlines cannot act on it.
inline std::string quote_value(const std::string& s) {
  if (s.size() <= 40) return "'" + printable_line(s) + "'";
  return "'" + printable_line(s.substr(0, 24)) + "...' (" + std::to_string(s.size()) + " characters)";
}

// The largest count a row, tile or size option takes: far past any tensor, far from overflow.
inline constexpr uint64_t kMaxCount = uint64_t{1} << 40;

// Digits only (no sign, no spaces, no 0x/0b/0o prefix, no suffix), and at most `hi`.
inline bool parse_whole(const std::string& s, uint64_t hi, uint64_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out <= hi;
}

// A CLI11 check: a whole number in [lo, hi].
inline CLI::Validator whole_number(uint64_t lo, uint64_t hi) {
  const std::string form = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) + " in decimal digits";
  return CLI::Validator(
      [lo, hi, form](std::string& s) -> std::string {
        uint64_t v = 0;
        if (!parse_whole(s, hi, v) || v < lo) return "expects " + form + ", got " + quote_value(s);
        return {};
      },
      form, "WHOLE_NUMBER");
}

// A CLI11 check: a finite number in (0, hi].
inline CLI::Validator positive_number(double hi) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", hi);
  const std::string form = std::string("a number greater than 0 and at most ") + buf;
  return CLI::Validator(
      [hi, form](std::string& s) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v <= 0 || v > hi)
          return "expects " + form + ", got " + quote_value(s);
        return {};
      },
      form, "POSITIVE_NUMBER");
}

// i/N with 0 <= i < N, nothing else.
inline bool parse_shard_text(const std::string& s, int64_t& i, int64_t& n) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos) return false;
  uint64_t a = 0, b = 0;
  constexpr uint64_t kMax = uint64_t{1} << 40;
  if (!parse_whole(s.substr(0, slash), kMax, a) || !parse_whole(s.substr(slash + 1), kMax, b)) return false;
  if (b < 1 || a >= b) return false;
  i = static_cast<int64_t>(a);
  n = static_cast<int64_t>(b);
  return true;
}

inline CLI::Validator shard_spec() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        int64_t i, n;
        if (!parse_shard_text(s, i, n)) return "expects i/N, two whole numbers with 0 <= i < N (e.g. 0/4), got " + quote_value(s);
        return {};
      },
      "i/N", "SHARD");
}

// A path flashcheck prints inside its reproduce lines (`--plugin`): no control characters. A newline
// in it would start a line of its own in a campaign's log, where a fake `reproduce:` line would
// pass for flashcheck's; an escape would act on the terminal. (Bytes that are not UTF-8 are fine:
// reports show them as U+FFFD.)
inline CLI::Validator printable_path() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        for (size_t i = 0; i < s.size(); ++i) {
          const auto b = static_cast<unsigned char>(s[i]);
          const bool c1 = b == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F;
          if (b < 0x20 || b == 0x7F || c1)
            return "expects a path without control characters (newline, escape, ...), got " + quote_value(s) +
                   ": rename the file";
        }
        return {};
      },
      "PATH", "PRINTABLE_PATH");
}

}  // namespace flashcheck::cli
