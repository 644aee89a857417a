#include "fuzz/generators.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "fuzz/residues.h"
#include "reference/mask.h"

namespace flashcheck {

namespace {

using residues::kResidues;

// (residue of Sq, residue of Skv), both in kResidues, with Skv − Sq's residue (their difference)
// in kResidues too: all three quantities land on a boundary at once. The 30 entries are the six
// permutations σ of {−2..2} whose σ(a) − a is also a permutation, five pairs each, so each of
// Sq, Skv and Skv − Sq takes each residue in exactly 1/5 of draws.
constexpr std::pair<int64_t, int64_t> kResiduePairs[] = {
    {-2, -2}, {-2, -2}, {-2, -1}, {-2, -1}, {-2, 0}, {-2, 0}, {-1, -2}, {-1, -2}, {-1, -1}, {-1, 0},
    {-1, 1},  {-1, 1},  {0, -2},  {0, -2},  {0, -1}, {0, 1},  {0, 2},   {0, 2},   {1, -1},  {1, -1},
    {1, 0},   {1, 1},   {1, 2},   {1, 2},   {2, 0},  {2, 0},  {2, 1},   {2, 1},   {2, 2},   {2, 2}};


// The declared pairs a space can draw: both dims listed (when a list is given), Dv <= Dqk, and
// Dv = Dqk where the space allows nothing else. Empty when the space declares no pairs.
std::vector<std::pair<int64_t, int64_t>> drawable_pairs(const ProblemSpace& s) {
  auto listed = [&](int64_t d) {
    if (s.head_dims.empty()) return d >= 1 && d <= s.max_head_dim;
    return std::find(s.head_dims.begin(), s.head_dims.end(), d) != s.head_dims.end();
  };
  std::vector<std::pair<int64_t, int64_t>> out;
  for (auto [qk, v] : s.head_dim_pairs)
    if (listed(qk) && listed(v) && v <= qk && (s.allow_dv_ne_dqk || v == qk)) out.emplace_back(qk, v);
  return out;
}

void check_space(const ProblemSpace& s) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("ProblemSpace." + what); };
  if (s.head_dims.empty() && s.max_head_dim < 1) bad("max_head_dim must be >= 1 when no head dims are listed");
  if (s.layouts.empty()) bad("layouts lists no layout (bhsd is the plain one)");
  if (s.max_varlen_batch < 1) bad("max_varlen_batch must be >= 1");
  for (int64_t ps : s.page_sizes)
    if (ps < 1) bad("page_sizes holds " + std::to_string(ps) + "; page sizes are >= 1");
  for (Alibi a : s.alibi)
    if (a == Alibi::none) bad("alibi lists 'none'; list the forms drawn (symmetric, signed), or none at all");
  if (s.alibi_per_batch && s.alibi.empty()) bad("alibi_per_batch without any ALiBi form");
  for (DType d : s.out_dtypes)
    if (d != DType::bf16 && d != DType::f16) bad("out_dtypes holds " + std::string(to_string(d)) + "; fp8 outputs are bf16 or f16");
  if (s.seq_multiple < 1) bad("seq_multiple must be >= 1");
  if (s.seq_multiple > s.max_seq)
    bad("seq_multiple " + std::to_string(s.seq_multiple) + " exceeds max_seq " + std::to_string(s.max_seq) + ": no length can be drawn");
  if (!s.head_dim_pairs.empty() && drawable_pairs(s).empty())
    bad("head_dim_pairs holds no pair (Dqk, Dv) with both dims in head_dims, Dv <= Dqk" +
        std::string(s.allow_dv_ne_dqk ? "" : " and Dv = Dqk (allow_dv_ne_dqk is false)"));
}

void check_tiles(const ProblemSpace& s) {
  check_space(s);
  for (size_t i = 0; i < s.tiles.size(); ++i) {
    const TileShape& t = s.tiles[i];
    if (t.head_dim < 1 || t.block_q < 1 || t.block_kv < 1)
      throw std::invalid_argument("ProblemSpace.tiles[" + std::to_string(i) + "]: head_dim, block_q and block_kv must be >= 1, got {" +
                                  std::to_string(t.head_dim) + ", " + std::to_string(t.block_q) + ", " +
                                  std::to_string(t.block_kv) + "}");
    for (size_t j = 0; j < i; ++j)
      if (s.tiles[j].head_dim == t.head_dim)
        throw std::invalid_argument("ProblemSpace.tiles declares head_dim " + std::to_string(t.head_dim) + " twice");
  }
}

// A length X = k·M + r in [1, max_seq], or nothing if that range holds none. k is the smallest
// possible a third of the time (1, 2, one tile, a tile − 1 or − 2), the next one a third (a tile + 1,
// two tiles − 1, ...) and uniform over the rest, so long sequences stay as likely as before.
std::optional<int64_t> at_residue(int64_t m, int64_t r, int64_t max_seq) {
  int64_t kmin = 0;
  while (kmin * m + r < 1) ++kmin;
  const int64_t kmax = (max_seq - r) >= 0 ? (max_seq - r) / m : -1;
  if (kmax < kmin) return std::nullopt;
  int64_t k = kmin;
  switch (*rc::gen::inRange(0, 3)) {
    case 0: k = kmin; break;
    case 1: k = std::min(kmin + 1, kmax); break;
    default: k = *rc::gen::inRange<int64_t>(kmin, kmax + 1); break;
  }
  return k * m + r;
}

// The draw of earlier releases: tails and uniform lengths, Skv = Sq half the time.
std::pair<int64_t, int64_t> legacy_lengths(int64_t max_seq) {
  const int64_t sq = *gen_seq_len(max_seq);
  const int64_t skv = *rc::gen::oneOf(rc::gen::just(sq), gen_seq_len(max_seq));
  return {sq, skv};
}

std::pair<int64_t, int64_t> boundary_lengths(int64_t max_seq, const TileShape& t) {
  // 10%: lengths as before, so mid-tile residues and the old tails (15, 17, 31, 33, primes) stay.
  if (*rc::gen::inRange(0, 10) == 0) return legacy_lengths(max_seq);
  // The modulus: lcm(BM, BN) makes a residue one for both tiles at once (with BN | BM it is BM);
  // BM or BN alone also reaches lengths such as BN + 1 that are mid-tile for the other.
  const int64_t l = std::lcm(t.block_q, t.block_kv);
  std::vector<int64_t> moduli{t.block_q, t.block_kv};
  if (l - 2 <= max_seq) moduli.insert(moduli.end(), {l, l, l});
  const int64_t m = *rc::gen::elementOf(moduli);
  const auto [a, b] = *rc::gen::elementOf(std::vector<std::pair<int64_t, int64_t>>(std::begin(kResiduePairs), std::end(kResiduePairs)));
  const std::optional<int64_t> sq = at_residue(m, a, max_seq), skv = at_residue(m, b, max_seq);
  std::pair<int64_t, int64_t> out{sq ? *sq : *gen_seq_len(max_seq), skv ? *skv : *gen_seq_len(max_seq)};
  // Decode (Sq = 1 against a long cache), a single key (Skv = 1: under bottom-right causal every
  // row but the last sees nothing) and one tile ± 1 of either kind replace one length in 1/12 of
  // draws each. With BN | BM the draws above already reach a tile ± 1 often; with tiles such as
  // 128 × 80 they would not.
  const auto near_tile = [&] {
    return *rc::gen::elementOf(std::vector<int64_t>{t.block_q, t.block_kv}) + *rc::gen::inRange<int64_t>(-1, 2);
  };
  switch (*rc::gen::inRange(0, 12)) {
    case 0: out.first = 1; break;
    case 1: out.second = 1; break;
    case 2: out.first = std::clamp<int64_t>(near_tile(), 1, max_seq); break;
    case 3: out.second = std::clamp<int64_t>(near_tile(), 1, max_seq); break;
    default: break;
  }
  return out;
}

// Value classes, drawn with the problem's scale: `large` needs scale >= 1 to push scores past
// where an un-shifted or finite-filled exp breaks (issue #14: a fault hit twice in 300 cases).
struct Values {
  Dist dist;
  std::optional<double> scale;  // set: replaces the problem's
};

Values boundary_values(bool allow_custom_scale, DType dtype) {
  // Percent: large at scale >= 1, outlier keys and constant rows 20 each; N(0,1) 20 keeps the
  // rounding-sensitive criteria fed; the rest 20 as before.
  const int pick = *rc::gen::inRange(0, 100);
  if (is_fp8(dtype)) {
    // fp8 saturates (e4m3 at 448): large values and constant rows, whose scores and weights sit at
    // their extremes, are where a kernel's scaling before the fp8 cast of P or of the output
    // breaks. 30 / 30, outlier keys 20, N(0,1) and the rest 10 each. (No plain space lists an fp8
    // dtype: the draws of plain spaces are unchanged.)
    if (pick < 30) {
      if (!allow_custom_scale) return {Dist::large, std::nullopt};
      return {Dist::large, *rc::gen::elementOf(std::vector<double>{1.0, 2.0})};
    }
    if (pick < 60) return {Dist::constant_rows, std::nullopt};
    if (pick < 80) return {Dist::outlier_keys, std::nullopt};
    if (pick < 90) return {Dist::normal, std::nullopt};
    return {*rc::gen::elementOf(std::vector<Dist>{Dist::uniform, Dist::equal_scores}), std::nullopt};
  }
  if (pick < 20) {
    if (!allow_custom_scale) return {Dist::large, std::nullopt};
    return {Dist::large, *rc::gen::elementOf(std::vector<double>{1.0, 2.0})};
  }
  if (pick < 40) return {Dist::outlier_keys, std::nullopt};
  if (pick < 60) return {Dist::constant_rows, std::nullopt};
  if (pick < 80) return {Dist::normal, std::nullopt};
  return {*rc::gen::elementOf(std::vector<Dist>{Dist::uniform, Dist::equal_scores, Dist::large}), std::nullopt};
}


// ---- Head dims when a kernel declares none (issue #21 item 7) ----

// The grid kernels usually compile, and values off it: non-multiples of 8 (vector widths, MMA
// k-steps and 16-byte loads all assume them), 1, and one past a power of two.
constexpr int64_t kGridHeadDims[] = {16, 32, 40, 64, 80, 96, 128, 192, 256};
constexpr int64_t kOffGridHeadDims[] = {1, 2, 3, 4, 5, 7, 9, 12, 15, 17, 20, 33, 36, 50, 63, 65, 100, 127, 129, 130, 200, 255};

// A head dim in [1, at_most]: the grid half the time, an off-grid value a quarter, uniform a quarter.
int64_t any_head_dim(int64_t at_most) {
  std::vector<int64_t> grid, off;
  for (int64_t d : kGridHeadDims)
    if (d <= at_most) grid.push_back(d);
  for (int64_t d : kOffGridHeadDims)
    if (d <= at_most) off.push_back(d);
  const int pick = *rc::gen::inRange(0, 4);
  if (pick < 2 && !grid.empty()) return *rc::gen::elementOf(grid);
  if (pick == 2 && !off.empty()) return *rc::gen::elementOf(off);
  return *rc::gen::inRange<int64_t>(1, at_most + 1);
}

int64_t draw_head_dim(const ProblemSpace& s) {
  if (!s.head_dim_pairs.empty()) {
    std::vector<int64_t> dqk;
    for (auto [qk, v] : drawable_pairs(s))
      if (std::find(dqk.begin(), dqk.end(), qk) == dqk.end()) dqk.push_back(qk);
    return *rc::gen::elementOf(dqk);
  }
  return s.head_dims.empty() ? any_head_dim(s.max_head_dim) : *rc::gen::elementOf(s.head_dims);
}

// Dv for a drawn Dqk: one of Dqk's declared pairs; else Dqk, or a quarter of the time (where the
// space allows it) a smaller one.
int64_t draw_head_dim_v(const ProblemSpace& s, int64_t dqk) {
  if (!s.head_dim_pairs.empty()) {
    std::vector<int64_t> dv;
    for (auto [qk, v] : drawable_pairs(s))
      if (qk == dqk) dv.push_back(v);
    return dv.size() == 1 ? dv.front() : *rc::gen::elementOf(dv);
  }
  if (!s.allow_dv_ne_dqk || *rc::gen::inRange(0, 4) != 0) return dqk;
  if (s.head_dims.empty()) return any_head_dim(dqk);
  std::vector<int64_t> smaller;
  for (int64_t d : s.head_dims)
    if (d <= dqk) smaller.push_back(d);
  return *rc::gen::elementOf(smaller);
}

// ---- A kernel's declared limits on the lengths ----

// x as a multiple of n: rounded up, or down where up passes max_seq (check_space keeps n <= max_seq);
// 0, an empty sequence, stays.
int64_t to_multiple(int64_t x, int64_t n, int64_t max_seq) {
  if (n <= 1 || x == 0) return x;
  const int64_t up = (x + n - 1) / n * n;
  return up <= max_seq ? up : max_seq / n * n;
}

// Every length of p within the space's limits (ProblemSpace::equal_lengths, seq_multiple): each
// rounded to the multiple, then each sequence's keys made its queries. Keys used below those stored
// (seqused) would make them differ, so equal lengths drop them; rounding may leave no sequence
// using fewer keys than it stores, and then seqused is dropped too.
void fit_lengths(Problem& p, const ProblemSpace& s) {
  if (!s.equal_lengths && s.seq_multiple <= 1) return;
  auto fit = [&](int64_t& x) { x = to_multiple(x, s.seq_multiple, s.max_seq); };
  fit(p.seq_q);
  fit(p.seq_kv);
  for (auto list : {&Problem::seqlens_q, &Problem::seqlens_kv, &Problem::seqused_kv})
    for (int64_t& x : p.*list) fit(x);
  if (s.equal_lengths) {
    p.seq_kv = p.seq_q;
    if (!p.seqlens_q.empty() && !p.seqlens_kv.empty()) p.seqlens_kv = p.seqlens_q;  // thd: keys = queries
    else for (int64_t& x : p.seqlens_kv) x = p.seq_q;                               // dense q, listed keys
    p.seqused_kv.clear();
  }
  bool short_one = false;
  for (int64_t b = 0; b < static_cast<int64_t>(p.seqused_kv.size()); ++b) short_one |= p.skv(b) < p.skv_stored(b);
  if (!short_one) p.seqused_kv.clear();
  normalize(p);
}

// ---- Variants (problem model 2) ----

// A variant is on in half the cases; the "off" side is the one RapidCheck shrinks to.
bool coin() { return *rc::gen::inRange(0, 2) == 1; }

// One listed sequence length in [0, max_seq] (from 1 when !allow_zero), aimed at modulus m: empty
// and one-token sequences (where a kernel's per-sequence loop bounds and fast paths go wrong), a
// multiple of m or one of its neighbours, or uniform.
int64_t listed_length(int64_t max_seq, int64_t m, bool allow_zero) {
  const int pick = *rc::gen::inRange(0, 10);
  if (pick == 0 && allow_zero) return 0;
  if (pick <= 1) return 1;
  if (pick <= 6) {
    const int64_t r = *rc::gen::elementOf(std::vector<int64_t>(std::begin(kResidues), std::end(kResidues)));
    if (const std::optional<int64_t> x = at_residue(m, r, max_seq)) return *x;
  }
  return *rc::gen::inRange<int64_t>(1, max_seq + 1);
}

// Page sizes when a kernel allows any: 1 (every key its own page), small primes that divide
// nothing, the usual 16..256, and the key tile (pages and tiles in step).
int64_t any_page_size(const TileShape& t) {
  return *rc::gen::elementOf(std::vector<int64_t>{1, 2, 3, 5, 7, 16, 16, 32, 64, 64, 128, 256, t.block_kv});
}

// seqused that uses every stored key changes nothing: then sequence 0 (never empty) uses one key
// less (one multiple less where lengths are multiples; none is left to drop when it stores one).
void keep_seqused_short(Problem& p, int64_t step = 1) {
  if (p.seqused_kv.empty()) return;
  for (int64_t b = 0; b < p.batch; ++b)
    if (p.skv(b) < p.skv_stored(b)) return;
  if (p.skv_stored(0) >= step) p.seqused_kv[0] = p.skv_stored(0) - step;
  else p.seqused_kv.clear();
}

// Sequence structure: layout, variable-length lists (thd), a paged cache, seqused. Sequence 0 keeps
// the plain draw's (Sq, Skv), aimed at the tiles; the others are drawn here. Paged cache lengths
// are aimed at the page size (a last page partly filled, or exactly full, or one key over).
void draw_sequences(Problem& p, const ProblemSpace& s, const TileShape& t) {
  p.layout = s.layouts.size() > 1 ? *rc::gen::elementOf(s.layouts) : s.layouts.front();
  const bool thd = p.layout == Layout::thd;
  const bool paged = s.paged && coin();
  if (thd || paged) {
    if (paged) {
      p.page_size = s.page_sizes.empty() ? any_page_size(t) : *rc::gen::elementOf(s.page_sizes);
      p.page_order = *rc::gen::elementOf(std::vector<PageOrder>{PageOrder::identity, PageOrder::shuffled, PageOrder::shared});
    }
    p.batch = *rc::gen::inRange<int64_t>(1, s.max_varlen_batch + 1);
    // A decode batch: max_seqlen_q == 1 (one query or none per sequence), the fast path of many kernels.
    const bool decode = thd && *rc::gen::inRange(0, 6) == 0;
    p.seqlens_kv.assign(1, p.seq_kv);
    if (thd) p.seqlens_q.assign(1, decode ? 1 : p.seq_q);
    for (int64_t b = 1; b < p.batch; ++b) {
      p.seqlens_kv.push_back(listed_length(s.max_seq, paged ? p.page_size : t.block_kv, true));
      if (thd) p.seqlens_q.push_back(decode ? *rc::gen::inRange<int64_t>(0, 2) : listed_length(s.max_seq, t.block_q, true));
    }
  }
  if (s.seqused && !paged && coin()) {
    // Keys used below those stored: none, one, one short, a tile boundary, or any; at least one
    // sequence strictly short (keep_seqused_short).
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t stored = p.skv_stored(b);
      int64_t used = stored;
      switch (*rc::gen::inRange(0, 6)) {
        case 0: used = 0; break;
        case 1: used = std::min<int64_t>(1, stored); break;
        case 2: used = std::max<int64_t>(stored - 1, 0); break;
        case 3: used = std::min(stored, (stored / t.block_kv) * t.block_kv + *rc::gen::inRange<int64_t>(-1, 2)); break;
        case 4: used = *rc::gen::inRange<int64_t>(0, stored + 1); break;
        default: break;
      }
      p.seqused_kv.push_back(std::clamp<int64_t>(used, 0, stored));
    }
    keep_seqused_short(p);
  }
}

// One side of a window for row 0 of sequence 0, whose aligned key is d: unbounded, 0, 1..3, a
// bound that puts the row's edge key on a key-tile boundary or one off it, or any bound up to
// `reach`. `left`: the edge is the first visible key d − bound; else the last, d + bound.
int64_t window_bound(bool left, int64_t d, int64_t bn, int64_t reach) {
  const int pick = *rc::gen::inRange(0, 20);
  if (pick < 3) return -1;
  if (pick < 6) return 0;
  if (pick < 9) return *rc::gen::inRange<int64_t>(1, 4);
  if (pick < 16) {
    // Edge e = k·BN + r, r in {−1, 0, 1}. With BN | BM the rows that start a query tile put their
    // edge on the same residue; other rows sweep the rest.
    const int64_t r = *rc::gen::inRange<int64_t>(-1, 2);
    auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
    if (left) {  // bound = d − e ≥ 0: e ≤ d; the nearest few tiles below d
      const int64_t kmax = floor_div(d - r, bn);
      const int64_t e = (kmax - *rc::gen::inRange<int64_t>(0, 3)) * bn + r;
      return std::min(d - e, reach);
    }
    const int64_t kmin = -floor_div(-(d - r), bn);  // ceil((d − r) / BN): e ≥ d
    const int64_t e = (kmin + *rc::gen::inRange<int64_t>(0, 3)) * bn + r;
    return std::min(e - d, reach);
  }
  return *rc::gen::inRange<int64_t>(0, reach + 1);
}

void draw_window(Problem& p, const TileShape& t) {
  const int64_t sq = p.sq(0), skv = p.skv(0);
  const int64_t d = alignment_offset(p, sq, skv), reach = sq + skv;
  p.window.left = window_bound(true, d, t.block_kv, reach);
  p.window.right = window_bound(false, d, t.block_kv, reach);
  // A window that changes nothing (unbounded on the left, and on the right or under a causal mode)
  // is a plain problem: bound the left side instead.
  if (p.window.left == -1 && (p.window.right == -1 || p.causal != Causal::none)) {
    const int64_t r = *rc::gen::inRange<int64_t>(-1, 2);
    p.window.left = std::clamp<int64_t>(d - (d / t.block_kv) * t.block_kv - r, 0, reach);
  }
}

// Caps that bind (scores of N(0,1) inputs are a few units; `large` ones far more) and caps so
// large they barely move a score.
double draw_softcap() {
  const int pick = *rc::gen::inRange(0, 10);
  if (pick < 5) return *rc::gen::elementOf(std::vector<double>{0.5, 1.0, 2.0, 5.0});
  if (pick < 8) return *rc::gen::elementOf(std::vector<double>{10.0, 20.0, 30.0, 50.0});
  return *rc::gen::elementOf(std::vector<double>{1e3, 1e6});
}

// (Query, key) pairs sequence b's rows see: the work a kernel and the oracle do for it.
double visible_pairs(const Problem& p, int64_t b) {
  double n = 0;
  for (int64_t i = 0; i < p.sq(b); ++i) n += static_cast<double>(visible_range(p, b, i).count());
  return n;
}

double visible_work(const Problem& p) {
  return p.flops() / 2.0;  // Hq · visible pairs · (Dqk + Dv)
}

// Sequence b leaves every per-sequence list.
void drop_sequence(Problem& p, int64_t b) {
  for (auto* v : {&p.seqlens_q, &p.seqlens_kv, &p.seqused_kv})
    if (!v->empty()) v->erase(v->begin() + b);
  --p.batch;
  normalize(p);
}

// The variants the space allows, after the plain problem's draws (whose lengths become sequence
// 0's), then the work budget over the visible pairs: batch (the heaviest sequence but the aimed
// one, one at a time), then heads, never length.
void draw_variants(Problem& p, const ProblemSpace& s, const TileShape& t) {
  const bool windowed = s.windows && coin();
  // Sq > Skv with a window (a quarter of them): a right bound clipped to Skv goes wrong there.
  if (windowed && *rc::gen::inRange(0, 4) == 0) {
    if (p.seq_q < p.seq_kv) std::swap(p.seq_q, p.seq_kv);
    else if (p.seq_q == p.seq_kv && p.seq_kv > 1) --p.seq_kv;
    else if (p.seq_q == p.seq_kv && s.max_seq > 1) p.seq_q = 2;
  }
  draw_sequences(p, s, t);
  normalize(p);
  fit_lengths(p, s);
  if (windowed) draw_window(p, t);
  if (s.softcap && coin()) p.softcap = draw_softcap();
  if (!s.alibi.empty() && coin()) {
    p.alibi = s.alibi.size() > 1 ? *rc::gen::elementOf(s.alibi) : s.alibi.front();
    p.alibi_per_batch = s.alibi_per_batch && coin();
  }
  if (s.sinks && coin()) p.sinks = true;
  if (is_fp8(p.dtype)) {
    if (!s.out_dtypes.empty()) p.out_dtype = *rc::gen::elementOf(s.out_dtypes);
    if (!s.descales.empty()) p.descale = *rc::gen::elementOf(s.descales);
  }
  while (visible_work(p) > s.max_work && p.batch > 1) {
    if (p.seqlens_q.empty() && p.seqlens_kv.empty()) {  // dense: as the plain draw, one sequence
      p.batch = 1;
      if (p.seqused_kv.size() > 1) p.seqused_kv.erase(p.seqused_kv.begin() + 1, p.seqused_kv.end());
      break;
    }
    int64_t heaviest = 1;
    for (int64_t b = 2; b < p.batch; ++b)
      if (visible_pairs(p, b) > visible_pairs(p, heaviest)) heaviest = b;
    drop_sequence(p, heaviest);
  }
  if (visible_work(p) > s.max_work && p.heads_kv > 1) p.heads_q /= p.heads_kv, p.heads_kv = 1;
  if (visible_work(p) > s.max_work && p.heads_q > 1) p.heads_q = 1;
  keep_seqused_short(p, s.seq_multiple);  // the sequences dropped may have been the short ones
  normalize(p);
  validate(p);  // a generator bug surfaces here, naming the field, not in a kernel
}

}  // namespace

TileShape tile_for(const ProblemSpace& s, int64_t d) {
  for (const TileShape& t : s.tiles)
    if (t.head_dim == d) return t;
  TileShape g = kGenericTile;
  g.head_dim = d;
  return g;
}

rc::Gen<int64_t> gen_seq_len(int64_t max_seq) {
  // Tails that break tiled kernels (1, one past a tile, primes) are drawn as often as uniform lengths.
  std::vector<int64_t> tails;
  for (int64_t t : {1, 2, 3, 15, 16, 17, 31, 33, 63, 64, 65, 97, 113, 127, 128, 129, 255, 257, 1023, 1025})
    if (t <= max_seq) tails.push_back(t);
  return rc::gen::oneOf(rc::gen::elementOf(tails), rc::gen::inRange<int64_t>(1, max_seq + 1));
}

rc::Gen<Problem> gen_problem(const ProblemSpace& s) {
  check_tiles(s);
  return rc::gen::exec([s] {
    Problem p;
    p.dtype = *rc::gen::elementOf(s.dtypes);
    p.causal = *rc::gen::elementOf(s.causals);
    if (s.boundary_aware) {
      // The head dim first: it picks the tile the lengths are aimed at.
      p.head_dim_qk = draw_head_dim(s);
      std::tie(p.seq_q, p.seq_kv) = boundary_lengths(s.max_seq, tile_for(s, p.head_dim_qk));
    } else {
      std::tie(p.seq_q, p.seq_kv) = legacy_lengths(s.max_seq);
      p.head_dim_qk = draw_head_dim(s);
    }
    p.head_dim_v = draw_head_dim_v(s, p.head_dim_qk);
    p.heads_kv = *rc::gen::inRange<int64_t>(1, s.max_heads_kv + 1);
    p.heads_q = p.heads_kv * *rc::gen::inRange<int64_t>(1, s.max_group + 1);
    p.batch = *rc::gen::inRange<int64_t>(1, s.max_batch + 1);
    if (s.allow_custom_scale && *rc::gen::inRange(0, 8) == 0)
      p.scale = *rc::gen::elementOf(std::vector<double>{1.0, 0.5, 0.0625, 2.0});
    if (s.variants()) {
      draw_variants(p, s, tile_for(s, p.head_dim_qk));
      return p;
    }
    fit_lengths(p, s);
    // Fit the work budget by giving up batch, then heads (GQA ratio kept when possible).
    auto work = [&] {
      return static_cast<double>(p.batch * p.heads_q) * static_cast<double>(p.seq_q) *
             static_cast<double>(p.seq_kv) * static_cast<double>(p.head_dim_qk + p.head_dim_v);
    };
    while (work() > s.max_work && p.batch > 1) p.batch = 1;
    while (work() > s.max_work && p.heads_kv > 1) p.heads_q /= p.heads_kv, p.heads_kv = 1;
    while (work() > s.max_work && p.heads_q > 1) p.heads_q = 1;
    return p;
  });
}

rc::Gen<Dist> gen_dist() {
  // N(0,1) half the time; the hostile distributions share the other half.
  return rc::gen::oneOf(rc::gen::just(Dist::normal),
                        rc::gen::elementOf(std::vector<Dist>(std::begin(kAllDists), std::end(kAllDists))));
}

rc::Gen<Case> gen_case(const ProblemSpace& s) {
  if (!s.boundary_aware)
    return rc::gen::build<Case>(rc::gen::set(&Case::problem, gen_problem(s)), rc::gen::set(&Case::dist, gen_dist()),
                                rc::gen::set(&Case::seed, rc::gen::arbitrary<uint64_t>()));
  const rc::Gen<Problem> problem = gen_problem(s);
  return rc::gen::exec([s, problem] {
    Case c;
    c.problem = *problem;
    const Values v = boundary_values(s.allow_custom_scale, c.problem.dtype);
    c.dist = v.dist;
    if (v.scale) c.problem.scale = v.scale;
    c.seed = *rc::gen::arbitrary<uint64_t>();
    if (s.nonfinite && !is_fp8(c.problem.dtype) && *rc::gen::inRange(0, 10) == 0) c.dist = Dist::nonfinite;
    return c;
  });
}

void showValue(const Problem& p, std::ostream& os) { os << to_string(p); }
void showValue(Dist d, std::ostream& os) { os << to_string(d); }
void showValue(const Case& c, std::ostream& os) {
  os << "--problem \"" << to_string(c.problem) << "\" --dist " << to_string(c.dist) << " --input-seed " << c.seed;
}

}  // namespace flashcheck
