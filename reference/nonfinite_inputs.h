// Dist::nonfinite: one NaN or Inf planted in q, k or v (issue #21 item 7). A kernel must propagate
// it exactly as the oracle does (a NaN a row sees makes that row NaN; a key a row does not see
// never reaches it), and one that squashes NaN to a number hides bad data.
//
// Where the value goes is chosen so that every correct FlashAttention-style kernel agrees with the
// oracle, whatever its tiles, masking by select and running-max guards: conventions the oracle
// fixes but kernels may reasonably differ on (a row whose every score is −inf, 0·Inf when a weight
// underflows in f16) are never reached.
//   q: NaN at (b, h, i, d), or ±Inf signed so that some visible key scores +Inf: row i is NaN.
//   k: NaN at (b, hk, j, d): every row of the group that sees key j is NaN; or ±Inf, with the sign
//      of q[.., d] of every such row set so that each scores +Inf against j: those rows are NaN.
//   v: NaN or ±Inf at (b, hk, j, c), only at a key every row of sequence b sees (and no row there
//      sees nothing), so no masked weight multiplies it; Inf only where no score of the sequence
//      lies more than kInfSpread below its row's max, a sink's logit included, and without ALiBi
//      (no weight, in f16 or after a rescale, underflows to 0, where 0·Inf would be NaN): column
//      c is ±Inf in every row.
// Softcap turns ±Inf scores finite, paged caches share keys between sequences, fp8 has no Inf
// (e4m3): there only NaN is planted, and a paged problem gets its NaN in q.
#pragma once
#include <cstdint>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

inline constexpr double kInfSpread = 10;  // e^-10 ≈ 4.5e-5: far above f16's smallest weight, 2^-24

// Plants one NaN or Inf into the logical q, k or v of `in` (drawn for p), from `seed`.
void plant_nonfinite(const Problem& p, uint64_t seed, Inputs& in);

}  // namespace flashcheck
