#include "verify/names.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>

namespace flashcheck {

namespace {
char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

std::string to_lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = lower(c);
  return r;
}

// How far a name may be from a known one and still be taken for a typo of it. One- and two-letter
// names (q, k, v, o) admit only a change of case: any other letter is another name, not a slip.
// Up to five letters one slip (`scael`, `lsee`); beyond, two (`emptyrowlse`, `lse-bse`).
size_t allowed_distance(size_t known_length) { return known_length <= 2 ? 0 : known_length <= 5 ? 1 : 2; }

// A printable, bounded rendering of a metadata value for the report.
std::string printable(std::string_view v) {
  std::string r = "\"";
  for (size_t i = 0; i < v.size() && i < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(v[i]);
    if (c == '"' || c == '\\') r += '\\', r += static_cast<char>(c);
    else if (c >= 0x20 && c < 0x7f) r += static_cast<char>(c);
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      r += buf;
    }
  }
  if (v.size() > 60) r += "...";
  return r + "\"";
}

// A name printed in a message: control characters or quotes in a hostile name must not forge
// report lines.
std::string shown(std::string_view name) {
  std::string q = printable(name);
  return "'" + q.substr(1, q.size() - 2) + "'";
}

// A known name appearing in `name` as a whole word (bounded by the ends or by non-alphanumerics):
// `softmax_scale` and `is_causal` are not typos, but a report should still point at what was meant.
std::string word_hint(std::string_view name, const std::vector<std::string>& known) {
  const std::string n = to_lower(name);
  for (const auto& k : known) {
    for (size_t pos = n.find(k); pos != std::string::npos; pos = n.find(k, pos + 1)) {
      const bool left = pos == 0 || !alnum(n[pos - 1]);
      const bool right = pos + k.size() == n.size() || !alnum(n[pos + k.size()]);
      if (left && right) return k;
    }
  }
  return {};
}
}  // namespace

size_t name_distance(std::string_view a, std::string_view b) {
  // Three rows of the optimal-string-alignment table: row i needs rows i-1 (edits) and i-2
  // (a transposition of a[i-2..i-1] with b[j-2..j-1], the `casual`/`causal` slip).
  const size_t m = b.size();
  std::vector<size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= m; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::optional<std::string> near_miss(std::string_view name, const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), name) != known.end()) return std::nullopt;
  std::optional<std::string> best;
  size_t best_d = SIZE_MAX;
  for (const auto& k : known) {
    // Names far longer or shorter than `k` cannot be within its distance; skip the table for them
    // (a hostile file may carry megabyte-long names).
    const size_t gap = name.size() > k.size() ? name.size() - k.size() : k.size() - name.size();
    if (gap > allowed_distance(k.size())) continue;
    const size_t d = name_distance(name, k);
    if (d <= allowed_distance(k.size()) && d < best_d) {
      best = k;
      best_d = d;
    }
  }
  return best;
}

const KnownNames& check_file_names() {
  static const KnownNames names{{"causal", "scale", "lse_base", "empty_row_lse", "layout", "window", "window_convention",
                                  "softcap", "alibi", "alibi_lse"},
                                 {"q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table",
                                  "cache_seqlens", "alibi_slopes", "sinks", "q_descale", "k_descale", "v_descale", "do", "dq", "dk", "dv",
                                  "dsinks"}};
  return names;
}

std::string NameFinding::describe() const {
  const std::string what = where == Where::metadata ? "metadata key " : "tensor ";
  return what + shown(name) + (where == Where::metadata ? " = " + printable(value) : std::string()) + " ignored" +
         (suggestion.empty() ? std::string() : " (flashcheck reads '" + suggestion + "')");
}

std::string NameAudit::refusal() const {
  std::string r;
  for (const auto& m : near_misses) {
    if (!r.empty()) r += "; ";
    r += (m.where == NameFinding::Where::metadata ? "metadata key " : "tensor ") + shown(m.name) +
         " is not one flashcheck reads; did you mean '" + m.suggestion + "'?";
  }
  return r;
}

std::vector<std::string> NameAudit::ignored_lines() const {
  std::vector<std::string> lines;
  for (const auto& i : ignored) lines.push_back(i.describe());
  return lines;
}

NameAudit audit_names(const SafetensorsFile& f, const KnownNames& known) {
  NameAudit a;
  auto classify = [&](NameFinding::Where where, const std::string& name, const std::string& value,
                      const std::vector<std::string>& names) {
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      a.known.push_back(name);
    } else if (auto s = near_miss(name, names)) {
      a.near_misses.push_back({where, name, *s, value});
    } else {
      a.ignored.push_back({where, name, word_hint(name, names), value});
    }
  };
  for (const auto& [k, v] : f.metadata) classify(NameFinding::Where::metadata, k, v, known.metadata);
  for (const auto& [name, t] : f.tensors) classify(NameFinding::Where::tensor, name, {}, known.tensors);
  return a;
}

}  // namespace flashcheck
