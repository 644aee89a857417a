// The element-by-element maps behind the HTML page: a second pass over the output, run only when
// asked, so the verdict's own loop stays as it was. `unit` is the absolute error of ratio 1.
#include "verify/criteria_detail.h"

namespace flashcheck::criteria_detail {

ErrorMaps error_maps(const Problem& p, const Expected& ref, std::span<const float> kernel_o,
                     const std::optional<std::vector<float>>& kernel_lse, const CheckOptions& opt, const Report& r,
                     double unit) {
  const OracleResult& oracle = ref.oracle;
  const FlatRows flat(p, oracle.rows);
  const int64_t dv = p.head_dim_v, all_rows = flat.total();
  ErrorMaps m;
  m.unit = unit;
  // The grid is per sequence's own rows and keys (a kernel tiles each sequence of a varlen batch
  // from its start), so its extent is the longest sequence's.
  int64_t max_sq = 0, max_skv = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    max_sq = std::max(max_sq, p.sq(b));
    max_skv = std::max(max_skv, p.skv(b));
  }
  // A grid past ~1M cells (tiny declared tiles on long sequences) says no more than a coarser one
  // and would bloat the page: tiles double until it fits.
  m.tile_q = std::max<int64_t>(opt.tile_q, 1);
  m.tile_kv = std::max<int64_t>(opt.tile_kv, 1);
  auto ceil_div = [](int64_t a, int64_t b) { return std::max<int64_t>((a + b - 1) / b, 1); };
  while (ceil_div(max_sq, m.tile_q) * ceil_div(max_skv, m.tile_kv) > (int64_t{1} << 20)) {
    if (ceil_div(max_sq, m.tile_q) >= ceil_div(max_skv, m.tile_kv)) m.tile_q *= 2;
    else m.tile_kv *= 2;
  }
  m.q_tiles = ceil_div(max_sq, m.tile_q);
  m.kv_tiles = ceil_div(max_skv, m.tile_kv);
  m.tile_ratio.assign(static_cast<size_t>(m.q_tiles * m.kv_tiles), NAN);
  m.tile_flagged.assign(m.tile_ratio.size(), 0);
  if (r.worst) {
    m.head_b = r.worst->b;
    m.head_h = r.worst->h;
  }
  if (m.head_b >= oracle.rows.batch() || oracle.rows.count(m.head_b) == 0)  // a sequence without rows has no head to show
    for (int64_t b = 0; b < oracle.rows.batch(); ++b)
      if (oracle.rows.count(b) > 0) {
        m.head_b = b;
        m.head_h = 0;
        break;
      }
  const int64_t head_n = m.head_b < oracle.rows.batch() ? oracle.rows.count(m.head_b) : 0;
  for (int64_t ri = 0; ri < head_n; ++ri) m.rows.push_back(oracle.rows.row(m.head_b, ri));
  m.head_ratio.assign(static_cast<size_t>(head_n * dv), NAN);
  m.head_flag.assign(m.head_ratio.size(), MapFlag::ok);
  // Every sequence of a dense problem has the head's rows, so the LSE column's maximum runs over
  // every (b, h); a varlen sequence has rows of its own, and the maximum over the head's sequence.
  const bool same_rows = !p.varlen();
  const UnresolvedLookup unresolved(ref, all_rows);
  auto flag_element = [&](const FlatRows::Place& pl, int64_t col, MapFlag f) {
    ++m.flagged_total;
    if (m.flagged.size() < ErrorMaps::kMaxFlagged) m.flagged.push_back({pl.b, pl.h, pl.row, col, f});
  };
  if (kernel_lse) {
    m.lse_ratio.assign(static_cast<size_t>(head_n), NAN);
    m.lse_ratio_max.assign(static_cast<size_t>(head_n), NAN);
    m.lse_flag.assign(static_cast<size_t>(head_n), MapFlag::ok);
  }
  for (int64_t g = 0; g < all_rows; ++g) {
    const FlatRows::Place pl = flat.at(g);
    const bool empty = pl.keys.empty();
    // The cell of a checked row: its q-tile and the KV tile of its last visible key (0 if it sees none).
    const size_t t = static_cast<size_t>((pl.row / m.tile_q) * m.kv_tiles + std::max<int64_t>(pl.keys.hi - 1, 0) / m.tile_kv);
    const bool in_head = pl.b == m.head_b && pl.h == m.head_h;
    const Expected::UnresolvedRow* u = unresolved(g);
    for (int64_t c = 0; c < dv; ++c) {
      const size_t e = static_cast<size_t>(g * dv + c);
      MapFlag f = classify_o(p.o_dtype(), kernel_o[e], oracle.o[e], empty);
      if (f == MapFlag::ok && u) f = classify_unresolved(p, kernel_o[e], *u, c);
      float ratio = NAN;
      if (f == MapFlag::ok) {
        ratio = static_cast<float>(std::fabs(static_cast<double>(kernel_o[e]) - oracle.o[e]) / unit);
        if (!(m.tile_ratio[t] >= ratio)) m.tile_ratio[t] = ratio;  // NaN (no row yet) is replaced
      } else if (is_flagged(f)) {
        ++m.tile_flagged[t];
        flag_element(pl, c, f);
      }
      if (in_head) {
        m.head_ratio[static_cast<size_t>(pl.ri * dv + c)] = ratio;
        m.head_flag[static_cast<size_t>(pl.ri * dv + c)] = f;
      }
    }
    if (!kernel_lse) continue;
    const size_t i = static_cast<size_t>(g);
    const float k = (*kernel_lse)[i];
    const double o = oracle.lse[i];
    const MapFlag f = classify_lse(k, o, empty, opt.empty_lse);
    float ratio = NAN;
    if (f == MapFlag::ok) {
      ratio = static_cast<float>(std::fabs(k - o) / lse_limit(opt.tol, o, ref.score_bound[i], ref.score_error));
      if ((same_rows || pl.b == m.head_b) && pl.ri < head_n) {
        float& mx = m.lse_ratio_max[static_cast<size_t>(pl.ri)];
        if (!(mx >= ratio)) mx = ratio;
      }
    } else if (is_flagged(f)) {
      flag_element(pl, -1, f);
    }
    if (in_head) {
      m.lse_ratio[static_cast<size_t>(pl.ri)] = ratio;
      m.lse_flag[static_cast<size_t>(pl.ri)] = f;
    }
  }
  return m;
}


}  // namespace flashcheck::criteria_detail
