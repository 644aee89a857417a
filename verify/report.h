// The report of one judged output: every criterion named with its value and limit, the metrics,
// the worst element and one reproducing command; as text for people and JSON for scripts.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reference/problem.h"

namespace flashcheck {

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
  double rounding_bias = 0;  // mean signed error in output ULPs over significant elements
  int64_t ulp_over_n = 0, elements = 0, nan_mismatches = 0, unwritten = 0, empty_row_violations = 0;
  std::optional<double> lse_max_abs, lse_max_rel;
  std::optional<Location> worst;
  std::string repro;  // one command that reproduces the case
  // What the judge could not look at or did not read, said rather than passed over in silence:
  // e.g. "lse: not checked (the file has no 'lse' tensor)", "metadata key 'format' ignored".
  std::vector<std::string> notes;

  bool pass() const;
  std::vector<std::string> failed() const;
};

std::string to_text(const Report& r);
nlohmann::json to_json(const Report& r);

}  // namespace flashcheck
