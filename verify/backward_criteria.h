// The gradient criteria (issue 23, item 3): a backward kernel's dQ, dK, dV (and the sinks'
// gradient) against the fp64 oracle's, each gradient judged on its own, every criterion named with
// its value and limit through verify/report.h's Criterion, so a report never says "ok" past a limit.
//
// Per gradient:
//  - unwritten: elements still holding the gradient dtype's poison (verify/metrics.h);
//  - nan_inf_positions: finite exactly where the oracle is, infinities of one sign (NaN may stand
//    for the oracle's ±Inf): the forward's rule (verify/criteria.cpp);
//  - empty_rows (dQ): rows that see no key have dQ exactly 0; unseen_keys (dK, dV): keys no query
//    row sees have exactly 0 (the sinks' gradient has neither);
//  - cosine and rel_l2 over the compared elements (written, finite in both, not held to 0 above,
//    not in rows fp32 cannot resolve), each limit the looser of the fixed one and the same-dtype
//    baseline's own figure at 2× its error (rel_l2 2×, cosine spread_cosine); reported only where
//    the gradient cancels to noise and for the sinks' gradient (one cancelling scalar per head:
//    backward_criteria.cpp);
//  - baseline_relative, the public suites' rule: max|g − r| ≤ k·max|baseline − r| + atol·max|r|,
//    the baseline being the same-dtype FlashAttention-2 backward replica (verify/backward_expected.h);
//  - ulp: the share of significant elements (|r| ≥ max|r|/16), each distinct (kernel, oracle) pair
//    once, more than ulp_n ULP of the gradient dtype from the rounded oracle; judged where cosine
//    is, with ≥ kMinDistinctPairsUlp pairs and finite baselines, the limit never below 2× the
//    baselines' own share;
//  - rows_baseline_relative, the same rule row by row (dQ's query rows, dK's and dV's keys) in L2,
//    with the atol relative to the row's own size: one row a few percent off, which the tensor-wide
//    limit (set by the worst baseline error anywhere) hides (not for the sinks' gradient).
// Gradients are in the logical layouts of Inputs::q, k, v (reference/sequences.h); a kernel's dK/dV
// from a paged cache gather to it exactly where no two sequences share a page.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/problem.h"
#include "verify/backward_expected.h"
#include "verify/backward_tolerance.h"
#include "verify/report.h"

namespace flashcheck {

struct KernelGradients {
  std::vector<float> dq, dk, dv;              // logical layouts; values in gradient_dtype(p)
  std::optional<std::vector<float>> dsinks;   // [Hq] fp32, when the kernel computes it
  // Elements of dq, dk, dv outside every row (THD pad tokens, a paged cache's unread slots) that no
  // longer hold their poison: a write "outside", which the ABI forbids (a real caller keeps other
  // data there). Unset when the storage has no such elements or nobody counted them.
  std::optional<int64_t> padding_written;
};

struct BackwardOptions {
  std::optional<BackwardTolerance> tol;  // default: backward_tolerance_for(p.dtype)
  bool error_maps = false;               // fill GradientVerdict::map (for the HTML page)
  int64_t tile_q = 128, tile_kv = 128;   // the kernel's tiles, to name the worst element's (GradientLocation)
};

// Where a gradient's worst element lies: for dQ (b, query head, query row, col); for dK and dV
// (b, KV head, key, col); for the sinks' gradient (0, query head, 0, 0). b is the sequence.
// Its tiles, for a kernel of (tile_q, tile_kv) tiles: a dQ row lies in one q-tile and takes terms
// from the KV tiles of the keys it sees (the forward's page names the last); a dK/dV key lies in
// one KV tile and takes terms from the q-tiles of the rows that see it. -1: none (the sinks', a row
// that sees no key, a key no row sees).
struct GradientLocation {
  int64_t b = 0, h = 0, row = 0, col = 0;
  double kernel = 0, oracle = 0;
  int64_t q_tile_lo = -1, q_tile_hi = -1, kv_tile_lo = -1, kv_tile_hi = -1;
};

// One head of a gradient element by element, for the HTML page (verify/backward_report_html.h),
// as the forward's ErrorMaps' worst head: ratios are |g − r| / unit, unit the baseline_relative
// limit, so an element past 1 fails that criterion by itself.
struct GradientMap {
  double unit = 0;
  int64_t b = 0, h = 0;         // the worst element's sequence and head (query head for dQ, KV head for dK/dV)
  int64_t cols = 0;
  std::vector<int64_t> rows;    // query rows (dQ) or keys (dK, dV) shown, ascending: every one up to kMaxRows
  std::vector<float> ratio;     // [rows × cols]; NaN where flag is not ok
  std::vector<MapFlag> flag;    // unwritten, nan_mismatch, empty_row_nonzero (a row or key held to 0 that is not),
                                // nonfinite_match, empty_row_ok (held to 0 and 0), unresolved_ok, or ok
  static constexpr int64_t kMaxRows = 2048;  // beyond: evenly spaced rows, and the worst element's
};

struct GradientVerdict {
  std::string name;  // "dq", "dk", "dv", "dsinks"
  std::vector<Criterion> criteria;
  int64_t elements = 0, compared = 0, unwritten = 0, nan_mismatches = 0, zero_violations = 0;
  int64_t unresolved = 0;  // finite elements left out of the value criteria (BackwardExpected::unresolved_*)
  double cosine = 1, rel_l2 = 0, max_abs = 0, baseline_max_abs = 0, max_ref = 0;
  double atol_ref = 0;  // what the baseline rule's atol multiplies: max|r| (the sinks': at least their terms' size)
  double row_k_needed = 0;  // the smallest row_k under which every row passes rows_baseline_relative (calibration)
  // The ulp criterion's figures whatever its role (calibration): the share of distinct significant
  // pairs past ulp_n ULP, the worse baseline's own share, and how many distinct pairs there were.
  double ulp_share = 0, ulp_baseline_share = 0, ulp_distinct = 0;
  std::optional<GradientLocation> worst;  // a NaN/Inf mismatch first, then a non-zero held to 0, then the largest error
  std::optional<GradientMap> map;         // BackwardOptions::error_maps; not for the sinks' gradient (one scalar per head)
  bool pass() const;
};

struct BackwardReport {
  Problem problem;
  std::vector<GradientVerdict> gradients;  // dq, dk, dv, then dsinks when the problem has sinks
  // Criteria of the backward call as a whole, judged by its caller rather than verify_backward (a
  // campaign's: kernel_error or kernel_crashed when no gradient came back, out_of_bounds past its
  // buffers, determinism over repeated calls). Named without a gradient in failed().
  std::vector<Criterion> checks;
  std::vector<std::string> notes;
  std::string repro;
  bool pass() const;
  // "dk: baseline_relative", one per failed criterion, gradients in order, then the failed checks
  // by name ("determinism").
  std::vector<std::string> failed() const;
};

// Throws std::invalid_argument naming the gradient whose size does not match the problem.
BackwardReport verify_backward(const Problem& p, const BackwardExpected& expected, const KernelGradients& kernel,
                               const BackwardOptions& opt = {});

}  // namespace flashcheck
