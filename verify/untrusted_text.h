// Text flashcheck did not write — a kernel's error message and printed output, file paths, plugin
// names, metadata strings, a caller's callback message — made safe for the three places it ends up:
// a terminal, a JSON document and a command line. Such text may hold bytes that are not UTF-8 (or a
// character cut in two by a fixed-size buffer), terminal escape sequences (colours, cursor moves,
// clearing the screen, a window title) and newlines or carriage returns that would make it pass for
// flashcheck's own lines, e.g. a fake `reproduce:` line.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace flashcheck {

struct Report;

// The same text as valid UTF-8: every byte of an invalid, overlong or cut sequence becomes U+FFFD.
std::string valid_utf8(std::string_view s);

// One field inside one of flashcheck's own lines (a path, an error message, a name): valid UTF-8 in
// which nothing can end the line, move the cursor or start an escape sequence. Control characters
// are shown, not acted on: newline as \n, carriage return as \r, ESC as \x1b, other C0 controls and
// DEL as \xNN, C1 controls and the bidirectional-override characters (which reorder what a
// terminal shows) as \uNNNN. Tabs stay.
std::string printable_line(std::string_view s);

// Lines of someone else's output shown as they are (a kernel's prints): escape sequences (CSI, OSC
// and the other control strings, two-byte escapes) are removed whole, other control characters
// except \n and \t are dropped — carriage return included, since it would overwrite the start of a
// line — and invalid UTF-8 becomes U+FFFD. Works chunk by chunk: a sequence cut at a chunk's end
// is finished by the next chunk. A newline always ends an escape sequence, so an unterminated one
// can hide at most the rest of its line.
class TerminalFilter {
 public:
  void feed(std::string_view chunk, std::string& out);
  void finish(std::string& out);  // an incomplete UTF-8 sequence left at the very end becomes U+FFFD

 private:
  void code_point(char32_t c, std::string& out);
  enum class State { text, escape, csi, control_string, control_string_escape };
  State state_ = State::text;
  std::string pending_;  // the first bytes of a UTF-8 sequence cut at the end of a chunk
};
std::string printable_block(std::string_view s);

// A word for a shell command line: unchanged when it holds only characters no shell treats
// specially, else in single quotes (a quote inside written as '\''), so a reproduce line with a
// path holding spaces or `;` still runs what it says.
std::string shell_word(std::string_view s);

// The report as the text renderings show it: every field that can carry outside text (criteria
// details, notes, the reproduce command) through printable_line.
Report printable_report(Report r);

// Every JSON document flashcheck writes goes through here: a string that is not valid UTF-8
// (a kernel's error text, a path) is written with U+FFFD for its bad bytes instead of throwing
// (nlohmann's default, type_error.316, which lost the whole report).
template <class Json>
std::string json_text(const Json& j, int indent = 2) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace flashcheck
