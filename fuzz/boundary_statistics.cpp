// The generators' own statistics (fuzz/generators.h, boundary_statistics): how many of a set of
// cases fall in each tile-boundary, value and variant class.
#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "fuzz/generators.h"
#include "fuzz/residues.h"
#include "reference/mask.h"

namespace flashcheck {

using residues::kResidues;
using residues::mod;

namespace {

// Row 0 of sequence 0 has an edge of its window on a key-tile boundary or one off it.
bool window_edge_at_tile(const Problem& p, int64_t bn) {
  const int64_t d = alignment_offset(p, p.sq(0), p.skv(0));
  auto at = [&](int64_t e) {
    const int64_t r = mod(e, bn);
    return r == 0 || r == 1 || r == mod(-1, bn);
  };
  const int64_t right = p.causal != Causal::none ? (p.window.right < 0 ? 0 : std::min<int64_t>(p.window.right, 0)) : p.window.right;
  return (p.window.left >= 0 && at(d - p.window.left)) || (right >= 0 && at(d + right));
}

// Some row of some sequence sees no key; some used key of some sequence is seen by no row.
bool has_empty_row(const Problem& p) {
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.sq(b); ++i)
      if (visible_range(p, b, i).empty()) return true;
  return false;
}
bool has_unseen_key(const Problem& p) {
  for (int64_t b = 0; b < p.batch; ++b) {
    // Both ends of the visible range never decrease with the row: the union is one interval
    // when consecutive ranges overlap, and any gap or end left out is an unseen key.
    int64_t covered = 0;
    for (int64_t i = 0; i < p.sq(b); ++i) {
      const KeyRange r = visible_range(p, b, i);
      if (r.empty()) continue;
      if (r.lo > covered) return true;
      covered = std::max(covered, r.hi);
    }
    if (covered < p.skv(b)) return true;
  }
  return false;
}

// The variant classes of a space (boundary_statistics): each with its population and its test.
struct VariantClass {
  std::string name;
  std::function<bool(const Case&)> of, hit;
};

void add_variant_classes(const ProblemSpace& s, const std::vector<Case>& cases, std::vector<ClassCount>& out) {
  std::vector<VariantClass> classes;
  const auto any = [](const Case&) { return true; };
  auto add = [&](std::string name, std::function<bool(const Case&)> of, std::function<bool(const Case&)> hit) {
    classes.push_back({std::move(name), std::move(of), std::move(hit)});
  };
  if (s.head_dims.empty()) add("Dqk%8!=0", any, [](const Case& c) { return c.problem.head_dim_qk % 8 != 0; });
  if (s.nonfinite) add("nonfinite inputs", any, [](const Case& c) { return c.dist == Dist::nonfinite; });
  if (s.windows) {
    const auto windowed = [](const Case& c) { return !c.problem.window.none(); };
    add("window", any, windowed);
    add("window left=0", windowed, [](const Case& c) { return c.problem.window.left == 0; });
    add("window right=0", windowed, [](const Case& c) { return c.problem.window.right == 0; });
    add("window edge at tile±1", windowed,
        [&s](const Case& c) { return window_edge_at_tile(c.problem, tile_for(s, c.problem.head_dim_qk).block_kv); });
    add("window Sq>Skv", windowed, [](const Case& c) { return c.problem.sq(0) > c.problem.skv(0); });
    add("window empty row", windowed, [](const Case& c) { return has_empty_row(c.problem); });
    add("window unseen key", windowed, [](const Case& c) { return has_unseen_key(c.problem); });
  }
  if (s.softcap) {
    add("softcap<=5", any, [](const Case& c) { return c.problem.softcap > 0 && c.problem.softcap <= 5; });
    add("softcap>=30", any, [](const Case& c) { return c.problem.softcap >= 30; });
  }
  for (Alibi a : s.alibi)
    add("alibi " + std::string(to_string(a)), any, [a](const Case& c) { return c.problem.alibi == a; });
  if (s.alibi_per_batch) add("alibi slopes=batch", any, [](const Case& c) { return c.problem.alibi_per_batch; });
  if (s.sinks) add("sinks", any, [](const Case& c) { return c.problem.sinks; });
  if (s.layouts.size() > 1)
    for (Layout l : s.layouts) add("layout " + std::string(to_string(l)), any, [l](const Case& c) { return c.problem.layout == l; });
  if (std::find(s.layouts.begin(), s.layouts.end(), Layout::thd) != s.layouts.end()) {
    const auto varlen = [](const Case& c) { return c.problem.varlen(); };
    add("varlen empty sequence", varlen, [](const Case& c) {
      const Problem& p = c.problem;
      for (int64_t b = 0; b < p.batch; ++b)
        if (p.sq(b) == 0 || p.skv_stored(b) == 0) return true;
      return false;
    });
    add("varlen one-token sequence", varlen, [](const Case& c) {
      const Problem& p = c.problem;
      for (int64_t b = 0; b < p.batch; ++b)
        if (p.sq(b) == 1 || p.skv_stored(b) == 1) return true;
      return false;
    });
    add("varlen max_seqlen_q=1", varlen, [](const Case& c) { return c.problem.seq_q == 1; });
  }
  if (s.seqused) add("seqused<stored", any, [](const Case& c) { return !c.problem.seqused_kv.empty(); });
  if (s.paged) {
    const auto paged = [](const Case& c) { return c.problem.paged(); };
    add("paged", any, paged);
    add("paged last page partial", paged, [](const Case& c) {
      const Problem& p = c.problem;
      for (int64_t b = 0; b < p.batch; ++b)
        if (p.skv(b) % p.page_size != 0) return true;
      return false;
    });
    add("paged shuffled", paged, [](const Case& c) { return c.problem.page_order == PageOrder::shuffled; });
    add("paged shared", paged, [](const Case& c) { return c.problem.page_order == PageOrder::shared && c.problem.batch > 1; });
  }
  for (DType d : s.dtypes) {
    if (!is_fp8(d)) continue;
    const auto of_d = [d](const Case& c) { return c.problem.dtype == d; };
    const std::string dn(to_string(d));
    if (s.out_dtypes.size() > 1)
      for (DType o : s.out_dtypes)
        add(dn + " odtype=" + std::string(to_string(o)), of_d, [d, o](const Case& c) { return c.problem.dtype == d && c.problem.o_dtype() == o; });
    if (s.descales.size() > 1)
      for (Descale x : s.descales)
        add(dn + " descale=" + std::string(to_string(x)), of_d, [d, x](const Case& c) { return c.problem.dtype == d && c.problem.descale == x; });
  }
  for (const VariantClass& v : classes) {
    ClassCount cc{v.name, 0, 0};
    for (const Case& c : cases)
      if (v.of(c)) {
        ++cc.of;
        cc.hits += v.hit(c);
      }
    out.push_back(cc);
  }
}

}  // namespace

std::vector<ClassCount> boundary_statistics(const ProblemSpace& s, const std::vector<Case>& cases) {
  std::vector<ClassCount> out;
  // Sequence classes, in a fixed order: quantity × tile × residue, then the special lengths.
  const char* quantities[] = {"Sq", "Skv", "(Skv-Sq)"};
  const char* tiles[] = {"BM", "BN"};
  const char* residues[] = {"0", "1", "2", "-2", "-1"};
  for (const char* q : quantities)
    for (const char* t : tiles)
      for (const char* r : residues)
        out.push_back({std::string(q) + "%" + t + "=" + (r[0] == '-' ? std::string(t) + r : std::string(r)), 0,
                       static_cast<int64_t>(cases.size())});
  for (const char* name : {"Sq=1", "Skv=1", "Sq=tile±1", "Skv=tile±1"})
    out.push_back({name, 0, static_cast<int64_t>(cases.size())});
  for (DType d : s.dtypes) {
    int64_t of = 0;
    for (const Case& c : cases) of += c.problem.dtype == d;
    std::string dn(to_string(d));
    if (s.allow_custom_scale) out.push_back({dn + " large scale>=1", 0, of});
    out.push_back({dn + " outlier_keys", 0, of});
    out.push_back({dn + " constant_rows", 0, of});
  }
  auto bump = [&](const std::string& name) {
    for (ClassCount& cc : out)
      if (cc.name == name) ++cc.hits;
  };
  for (const Case& c : cases) {
    const Problem& p = c.problem;
    const TileShape t = tile_for(s, p.head_dim_qk);
    // Sequence 0's lengths: the ones aimed at the tiles (the others of a listed batch are drawn apart).
    const int64_t sq0 = p.sq(0), skv0 = p.skv_stored(0);
    const int64_t values[] = {sq0, skv0, skv0 - sq0};
    for (int qi = 0; qi < 3; ++qi)
      for (int ti = 0; ti < 2; ++ti) {
        const int64_t m = ti == 0 ? t.block_q : t.block_kv;
        // With BM = BN (or a tile of 4 or fewer) one residue can name two classes: count it once each.
        for (int ri = 0; ri < 5; ++ri)
          if (mod(values[qi], m) == mod(kResidues[ri], m))
            ++out[static_cast<size_t>((qi * 2 + ti) * 5 + ri)].hits;
      }
    auto near_tile = [&](int64_t x) {
      for (int64_t m : {t.block_q, t.block_kv})
        if (x >= m - 1 && x <= m + 1) return true;
      return false;
    };
    if (sq0 == 1) bump("Sq=1");
    if (skv0 == 1) bump("Skv=1");
    if (near_tile(sq0)) bump("Sq=tile±1");
    if (near_tile(skv0)) bump("Skv=tile±1");
    const std::string dn(to_string(p.dtype));
    if (c.dist == Dist::large && p.softmax_scale() >= 1.0) bump(dn + " large scale>=1");
    if (c.dist == Dist::outlier_keys) bump(dn + " outlier_keys");
    if (c.dist == Dist::constant_rows) bump(dn + " constant_rows");
  }
  add_variant_classes(s, cases, out);
  return out;
}

}  // namespace flashcheck
