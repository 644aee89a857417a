// The verdict: every criterion a kernel's output is judged by, each named, with the metrics and the
// worst element, as text and as JSON.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reference/naive.h"
#include "verify/tolerance.h"

namespace flashcheck {

// What an empty row's LSE must be. O must be exactly 0 either way. FlashAttention-2 writes +inf
// (so its backward pass gives zero gradients); flashcheck's own convention is -inf (log of 0).
enum class EmptyRowLse { neg_inf, pos_inf };

struct KernelResult {
  // Rows are those of the oracle result it is compared with: [B, Hq, oracle.num_rows, Dv], values
  // representable in the problem's dtype. lse, when the kernel has one, is in natural log (a base-2
  // LSE is converted by the caller, from the kernel's declaration, never guessed).
  std::vector<float> o;
  std::optional<std::vector<float>> lse;
};

struct CheckOptions {
  Tolerance tol;
  int64_t tile_q = 128, tile_kv = 128;  // for naming the tile of the worst element
  EmptyRowLse empty_lse = EmptyRowLse::neg_inf;
};

struct Criterion {
  std::string name;
  bool pass = true;
  double value = 0, limit = 0;
  std::string detail;
};

struct Location {
  int64_t b = 0, h = 0, row = 0, col = 0;
  int64_t q_tile = 0, kv_tile = 0;  // row / tile_q, and the KV tile holding the row's last visible key
  double kernel = 0, oracle = 0;
};

struct Report {
  Problem problem;
  int64_t rows_checked = 0;  // per (batch, head)
  bool sampled = false;
  std::vector<Criterion> criteria;
  // Metrics.
  double cosine = 1, rel_l2 = 0, max_abs = 0, baseline_max_abs = 0;
  uint64_t ulp_max = 0;
  double ulp_mean = 0;
  int64_t ulp_over_n = 0, elements = 0, nan_mismatches = 0, unwritten = 0, empty_row_violations = 0;
  std::optional<double> lse_max_abs, lse_max_rel;
  std::optional<Location> worst;
  std::string repro;  // one command that reproduces the case

  bool pass() const;
  std::vector<std::string> failed() const;
};

// Everything a kernel is compared with, for one problem and one set of rows.
struct Reference {
  OracleResult oracle;            // fp64 truth
  std::vector<float> baseline;    // same-dtype eager baseline (verify/baseline.h)
  // Per checked row: scale·‖q_i‖·max_j‖k_j‖ over visible keys, a Cauchy–Schwarz bound on the row's
  // largest |score|. LSE carries the absolute rounding error of the scores (m·scale + log ℓ), so its
  // tolerance grows with this, not with |LSE| (which can be near 0 while the scores are huge).
  std::vector<double> score_bound;
  // f32 only (and only when every row is checked): a second baseline, the blocked replica with
  // fp32 P (64×64 tiles, exp2): what a typical correct fp32 FlashAttention computes. The eager fp32
  // baseline is nearly exact, sometimes exact by luck (a 64× ratio was seen), so for f32 the
  // baseline error is the larger of the two.
  std::vector<float> flash_baseline;
};
Reference make_reference(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});

Report verify_output(const Problem& p, const Reference& ref, const KernelResult& kernel, const CheckOptions& opt);

std::string to_text(const Report& r);
nlohmann::json to_json(const Report& r);

// A kernel's base-2 LSE in natural log (ln x = log2 x · ln 2); poisoned entries stay poison so they
// still read as unwritten.
void lse_base2_to_natural(std::vector<float>& lse);

// Rows of a full [B, Hq, Sq, X] tensor restricted to the oracle's rows (identity if all rows).
std::vector<float> select_rows(const Problem& p, const std::vector<float>& full, int64_t width,
                               const OracleResult& oracle);
// Rows to check when the whole problem is too large for the oracle: the first and last `edge` rows
// and evenly spaced ones between, `count` in all (ascending, unique). All rows when Sq ≤ count.
std::vector<int64_t> sample_rows(int64_t seq_q, int64_t count, int64_t edge = 64);

}  // namespace flashcheck
