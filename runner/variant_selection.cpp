#include "runner/variant_selection.h"

#include <algorithm>
#include <stdexcept>

namespace flashcheck {

std::string_view to_string(VariantName v) {
  switch (v) {
    case VariantName::window: return "window";
    case VariantName::softcap: return "softcap";
    case VariantName::alibi: return "alibi";
    case VariantName::sinks: return "sinks";
    case VariantName::varlen: return "varlen";
    case VariantName::paged: return "paged";
    case VariantName::seqused: return "seqused";
    case VariantName::bshd: return "bshd";
    case VariantName::fp8: return "fp8";
  }
  return "?";
}

VariantName parse_variant_name(std::string_view s) {
  for (VariantName v : kAllVariantNames)
    if (to_string(v) == s) return v;
  std::string known;
  for (VariantName v : kAllVariantNames) known += (known.empty() ? "" : ", ") + std::string(to_string(v));
  throw std::invalid_argument("unknown variant '" + std::string(s) + "' (known: " + known + ", or all, none)");
}

std::set<VariantName> parse_variant_list(std::string_view s) {
  std::set<VariantName> out;
  if (s == "none") return out;
  if (s == "all") return {std::begin(kAllVariantNames), std::end(kAllVariantNames)};
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string_view word = s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (word.empty()) throw std::invalid_argument("empty variant name in '" + std::string(s) + "'");
    out.insert(parse_variant_name(word));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

bool has_variant(const Problem& p, VariantName v) {
  switch (v) {
    case VariantName::window: return !p.window.none();
    case VariantName::softcap: return p.softcap > 0;
    case VariantName::alibi: return p.alibi != Alibi::none;
    case VariantName::sinks: return p.sinks;
    case VariantName::varlen: return p.layout == Layout::thd;
    case VariantName::paged: return p.paged();
    case VariantName::seqused: return !p.seqused_kv.empty();
    case VariantName::bshd: return p.layout == Layout::bshd;
    case VariantName::fp8: return is_fp8(p.dtype);
  }
  return false;
}

std::string variants_text(const Problem& p) {
  std::string s;
  for (VariantName v : kAllVariantNames)
    if (has_variant(p, v)) s += (s.empty() ? "" : "+") + std::string(to_string(v));
  return s.empty() ? "plain" : s;
}

bool declares_variant(const Capabilities& caps, VariantName v) {
  auto has_layout = [&](Layout l) { return std::find(caps.layouts.begin(), caps.layouts.end(), l) != caps.layouts.end(); };
  switch (v) {
    case VariantName::window: return caps.windows;
    case VariantName::softcap: return caps.softcap;
    case VariantName::alibi: return !caps.alibi.empty();
    case VariantName::sinks: return caps.sinks;
    case VariantName::varlen: return has_layout(Layout::thd);
    case VariantName::paged: return caps.paged;
    case VariantName::seqused: return caps.seqused;
    case VariantName::bshd: return has_layout(Layout::bshd);
    case VariantName::fp8:
      for (DType d : caps.dtypes)
        if (is_fp8(d)) return true;
      return false;
  }
  return false;
}

std::optional<std::string> VariantSelection::refusal(const Capabilities& caps) const {
  std::string missing;
  for (VariantName v : required)
    if (!declares_variant(caps, v)) missing += (missing.empty() ? "" : ", ") + std::string(to_string(v));
  if (missing.empty()) return std::nullopt;
  return "does not declare the required variant" + std::string(missing.find(',') == std::string::npos ? " " : "s ") + missing;
}

}  // namespace flashcheck
