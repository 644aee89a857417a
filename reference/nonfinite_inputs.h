// Dist::nonfinite: one NaN or Inf planted in q, k or v (issue #21 item 7). A kernel must propagate
// it exactly as the oracle does (a NaN a row sees makes that row NaN; a key a row does not see
// never reaches it), and one that squashes NaN to a number hides bad data.
//
// Where the value goes is chosen so that every correct FlashAttention-style kernel agrees with the
// oracle, whatever its tiles, masking and running-max guards: conventions the oracle fixes but
// kernels may reasonably differ on (a row whose every score is −inf, 0·Inf when a weight
// underflows in f16, a masked NaN score under an additive −inf mask) are never reached.
//   q: NaN at (b, h, i, d), or ±Inf signed so that some visible key scores +Inf: row i is NaN.
//   k: NaN at (b, hk, j, d): every row of the group is NaN; or ±Inf, with the sign of q[.., d] of
//      every row set so that each scores +Inf against j: those rows are NaN.
//   v: NaN or ±Inf at (b, hk, j, c): column c of every row. Inf only where no score of the
//      sequence lies more than kInfSpread below its row's max, a sink's logit included, and
//      without ALiBi (no weight, in f16 or after a rescale, underflows to 0, where 0·Inf is NaN).
// k and v take a key j every row of sequence b sees (and no row there sees nothing): a kernel that
// masks by adding −inf (torch's math backend) turns a masked NaN score into NaN, and a masked
// weight of 0 times NaN or Inf is NaN; with no such key the value goes to q. Softcap turns ±Inf
// scores finite and fp8 (e4m3) has none: there only NaN is planted. Shared pages of a paged cache
// hold keys of several sequences: such a problem gets its value in q.
//
// For a backward pass (Planting::backward) masked pairs matter more: a GEMM over a tile multiplies
// every pair, so dK_j += dS_ij·q_i reaches a key j that row i does not see as 0·q_i, and dS_ij =
// P_ij·(dP_ij − D_i) is 0·NaN wherever D_i or dP_ij is not finite. Kernels differ there (FA2 and
// cuDNN compute the products, a kernel may zero hidden pairs first), while the oracle's gradient of
// a key a row does not see is exactly 0. So a backward case plants only where no masked pair meets
// the value: in q, at a row that sees every key of its sequence (row i then is NaN, and so is
// every dK and dV it feeds: every kernel agrees); in k or v only when every row sees every key.
// Without such a row nothing is planted (the case runs finite).
#pragma once
#include <cstdint>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

inline constexpr double kInfSpread = 10;  // e^-10 ≈ 4.5e-5: far above f16's smallest weight, 2^-24

enum class Planting { forward, backward };

// Plants one NaN or Inf into the logical q, k or v of `in` (drawn for p), from `seed`, where every
// correct kernel of `use` (a forward, or a forward and its backward) agrees with the oracle.
void plant_nonfinite(const Problem& p, uint64_t seed, Inputs& in, Planting use = Planting::forward);

}  // namespace flashcheck
