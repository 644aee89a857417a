#include "fuzz/generators.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace flashcheck {

namespace {

// Residues aimed at, as offsets from a multiple of the modulus M: 0, 1, 2, M−2, M−1. A tile's first
// row or key, the two after it and the two before the next tile are where predicates, diagonals
// and "is this tile fully masked" tests go wrong.
constexpr int64_t kResidues[] = {0, 1, 2, -2, -1};

// (residue of Sq, residue of Skv), both in kResidues, with Skv − Sq's residue (their difference)
// in kResidues too: all three quantities land on a boundary at once. The 30 entries are the six
// permutations σ of {−2..2} whose σ(a) − a is also a permutation, five pairs each, so each of
// Sq, Skv and Skv − Sq takes each residue in exactly 1/5 of draws.
constexpr std::pair<int64_t, int64_t> kResiduePairs[] = {
    {-2, -2}, {-2, -2}, {-2, -1}, {-2, -1}, {-2, 0}, {-2, 0}, {-1, -2}, {-1, -2}, {-1, -1}, {-1, 0},
    {-1, 1},  {-1, 1},  {0, -2},  {0, -2},  {0, -1}, {0, 1},  {0, 2},   {0, 2},   {1, -1},  {1, -1},
    {1, 0},   {1, 1},   {1, 2},   {1, 2},   {2, 0},  {2, 0},  {2, 1},   {2, 1},   {2, 2},   {2, 2}};

int64_t mod(int64_t x, int64_t m) { return ((x % m) + m) % m; }

void check_tiles(const ProblemSpace& s) {
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

Values boundary_values(bool allow_custom_scale) {
  // Percent: large at scale >= 1, outlier keys and constant rows 20 each; N(0,1) 20 keeps the
  // rounding-sensitive criteria fed; the rest 20 as before.
  const int pick = *rc::gen::inRange(0, 100);
  if (pick < 20) {
    if (!allow_custom_scale) return {Dist::large, std::nullopt};
    return {Dist::large, *rc::gen::elementOf(std::vector<double>{1.0, 2.0})};
  }
  if (pick < 40) return {Dist::outlier_keys, std::nullopt};
  if (pick < 60) return {Dist::constant_rows, std::nullopt};
  if (pick < 80) return {Dist::normal, std::nullopt};
  return {*rc::gen::elementOf(std::vector<Dist>{Dist::uniform, Dist::equal_scores, Dist::large}), std::nullopt};
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
      p.head_dim_qk = *rc::gen::elementOf(s.head_dims);
      std::tie(p.seq_q, p.seq_kv) = boundary_lengths(s.max_seq, tile_for(s, p.head_dim_qk));
    } else {
      std::tie(p.seq_q, p.seq_kv) = legacy_lengths(s.max_seq);
      p.head_dim_qk = *rc::gen::elementOf(s.head_dims);
    }
    p.head_dim_v = p.head_dim_qk;
    if (s.allow_dv_ne_dqk && *rc::gen::inRange(0, 4) == 0) {
      std::vector<int64_t> smaller;
      for (int64_t d : s.head_dims)
        if (d <= p.head_dim_qk) smaller.push_back(d);
      p.head_dim_v = *rc::gen::elementOf(smaller);
    }
    p.heads_kv = *rc::gen::inRange<int64_t>(1, s.max_heads_kv + 1);
    p.heads_q = p.heads_kv * *rc::gen::inRange<int64_t>(1, s.max_group + 1);
    p.batch = *rc::gen::inRange<int64_t>(1, s.max_batch + 1);
    if (s.allow_custom_scale && *rc::gen::inRange(0, 8) == 0)
      p.scale = *rc::gen::elementOf(std::vector<double>{1.0, 0.5, 0.0625, 2.0});
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
    const Values v = boundary_values(s.allow_custom_scale);
    c.dist = v.dist;
    if (v.scale) c.problem.scale = v.scale;
    c.seed = *rc::gen::arbitrary<uint64_t>();
    return c;
  });
}

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
    const int64_t values[] = {p.seq_q, p.seq_kv, p.seq_kv - p.seq_q};
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
    if (p.seq_q == 1) bump("Sq=1");
    if (p.seq_kv == 1) bump("Skv=1");
    if (near_tile(p.seq_q)) bump("Sq=tile±1");
    if (near_tile(p.seq_kv)) bump("Skv=tile±1");
    const std::string dn(to_string(p.dtype));
    if (c.dist == Dist::large && p.softmax_scale() >= 1.0) bump(dn + " large scale>=1");
    if (c.dist == Dist::outlier_keys) bump(dn + " outlier_keys");
    if (c.dist == Dist::constant_rows) bump(dn + " constant_rows");
  }
  return out;
}

void showValue(const Problem& p, std::ostream& os) { os << to_string(p); }
void showValue(Dist d, std::ostream& os) { os << to_string(d); }
void showValue(const Case& c, std::ostream& os) {
  os << "--problem \"" << to_string(c.problem) << "\" --dist " << to_string(c.dist) << " --input-seed " << c.seed;
}

}  // namespace flashcheck
