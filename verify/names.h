// Near-miss names: a metadata key or tensor name that is almost one flashcheck reads (`casual`,
// `LSE`, `O`, `scael`) is a typo that would otherwise be guessed away (judged with the default
// `causal=none`, or the LSE silently left unchecked), so the caller refuses it with "did you mean".
// Names that are not close to any known one are real extras (`format: pt`, model names): accepted,
// and listed as ignored so a report says what it did not look at.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verify/safetensors.h"

namespace flashcheck {

// Optimal-string-alignment distance (insertions, deletions, substitutions and transpositions of
// adjacent characters, each 1), comparing ASCII letters case-insensitively.
size_t name_distance(std::string_view a, std::string_view b);

// The known name `name` is a near miss of, or nullopt when `name` is itself known (exactly) or is
// not close to any. Near: equal ignoring case, or within a distance that grows with the known
// name's length (0 up to 2 characters, 1 up to 5, 2 beyond), so that `q` never attracts `x` while
// `causal` attracts `casual` and `causl`. The closest known name wins (first on ties).
std::optional<std::string> near_miss(std::string_view name, const std::vector<std::string>& known);

// The names a reader understands, by where they appear in a file.
struct KnownNames {
  std::vector<std::string> metadata;  // __metadata__ keys
  std::vector<std::string> tensors;   // tensor names
};
// What `flashcheck check` reads (verify/check_file_format.h's contract): the metadata keys and
// tensor names of plain attention and of every variant.
const KnownNames& check_file_names();

struct NameFinding {
  enum class Where { metadata, tensor } where;
  std::string name;
  // Near miss: the known name meant. Ignored: a known name that appears in it as a whole word
  // (`softmax_scale` holds `scale`), said in the report as a hint, or empty.
  std::string suggestion;
  std::string value;  // metadata: its value (for the report); tensor: empty
  // "metadata key 'casual' is not one flashcheck reads; did you mean 'causal'?" or
  // "metadata key 'format' = \"pt\" ignored".
  std::string describe() const;
};

struct NameAudit {
  std::vector<std::string> known;        // names present in the file and read by the caller
  std::vector<NameFinding> near_misses;  // refuse the file (exit 125), naming each with its suggestion
  std::vector<NameFinding> ignored;      // accept, and list in the report
  bool refused() const { return !near_misses.empty(); }
  // One message naming every near miss, e.g. "metadata key 'casual' is not one flashcheck reads;
  // did you mean 'causal'?". Empty when nothing is refused.
  std::string refusal() const;
  // One line per ignored name, for the report.
  std::vector<std::string> ignored_lines() const;
};

// Classifies every metadata key and tensor name of `f` against `known`. Never throws for names.
NameAudit audit_names(const SafetensorsFile& f, const KnownNames& known = check_file_names());

}  // namespace flashcheck
