// `run --variants LIST` and `run --require LIST`: which of the variants a kernel declares a campaign
// draws, and which every case must have. Names are those `list` shows.
#pragma once
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/kernel.h"
#include "reference/problem.h"

namespace flashcheck {

enum class VariantName { window, softcap, alibi, sinks, varlen, paged, seqused, bshd, fp8 };
inline constexpr VariantName kAllVariantNames[] = {VariantName::window, VariantName::softcap, VariantName::alibi,
                                                   VariantName::sinks,  VariantName::varlen,  VariantName::paged,
                                                   VariantName::seqused, VariantName::bshd,   VariantName::fp8};
std::string_view to_string(VariantName v);
// Throws std::invalid_argument naming the unknown word and the known ones.
VariantName parse_variant_name(std::string_view s);
// "window,softcap" (or "all", "none") → the set; throws std::invalid_argument as above.
std::set<VariantName> parse_variant_list(std::string_view s);

// Whether p has the variant (varlen: thd layout; bshd: that layout; fp8: an fp8 input dtype).
bool has_variant(const Problem& p, VariantName v);
// The variants p has, "+"-joined in the order of kAllVariantNames ("window+varlen"), or "plain".
std::string variants_text(const Problem& p);
// Whether a kernel declaring caps computes the variant at all.
bool declares_variant(const Capabilities& caps, VariantName v);

struct VariantSelection {
  std::optional<std::set<VariantName>> allowed;  // nullopt: every declared variant
  std::set<VariantName> required;                // every case has each of these
  bool allows(VariantName v) const { return !allowed || allowed->count(v) || required.count(v); }
  bool meets(const Problem& p) const {
    for (VariantName v : required)
      if (!has_variant(p, v)) return false;
    return true;
  }
  // Why a kernel cannot be run under this selection (a required variant it does not declare).
  std::optional<std::string> refusal(const Capabilities& caps) const;
};

}  // namespace flashcheck
