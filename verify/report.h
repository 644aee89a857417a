// The report of one judged output: every criterion named with its value and limit, the metrics,
// the worst element and one reproducing command; as text for people and JSON for scripts.
#pragma once
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reference/problem.h"
#include "verify/map_flag.h"

namespace flashcheck {

struct Criterion {
  // Which way the limit goes: most values may be at most their limit, cosine at least, a signed
  // mean (rounding_bias) at most in magnitude.
  enum class Bound : uint8_t { at_most, at_least, magnitude_at_most };
  // Whether the limit decides the verdict. reported_only: measured and shown, but not held to the
  // limit (a dtype without the rule, too little independent evidence, an overflowed baseline).
  // not_computed: there was nothing to measure (every element unwritten or NaN): no value at all.
  enum class Role : uint8_t { judged, reported_only, not_computed };
  std::string name;
  bool pass = true;
  double value = 0, limit = 0;
  std::string detail;
  Bound bound = Bound::at_most;
  Role role = Role::judged;
};

// How a criterion is shown, the same way in text, JSON, HTML and the campaign summary: these are
// the only place its status word and its comparison with the limit are made.
enum class CriterionStatus {
  ok,                         // judged, within its limit
  fail,                       // failed the verdict
  reported_only,              // not judged, within the limit it reports
  over_limit_reported_only,   // not judged, past the limit it reports
  over_limit,                 // judged and passing yet past its limit: a malformed criterion, never "ok"
  not_computed,               // nothing was measured
};
CriterionStatus status_of(const Criterion& c);
// "ok", "FAIL", "reported only", "over limit (reported only)", "over limit", "n/a".
const char* status_text(CriterionStatus s);
// The value lies on the allowed side of the limit (NaN never does).
bool within_limit(const Criterion& c);
// Value and limit with the relation that actually holds between them, reading naturally:
// "0.99991 ≥ 0.9999", "0.002 ≤ 0.018", "0.5 > 0.3", "|-0.381| > 0.3"; not computed:
// "n/a (limit ≥ 0.9999)". `precision` significant digits.
std::string comparison_text(const Criterion& c, int precision = 6);
// "≤ 0.018", "≥ 0.9999", "|x| ≤ 0.3": the limit with its direction.
std::string limit_text(const Criterion& c, int precision = 6);
// The share of its limit a criterion used, 1 at the edge: value/limit (|value|/limit), and
// (1 − value)/(1 − limit) for cosine-like "at least" limits below 1; a count held to 0 uses 0
// when it is 0 and +inf otherwise, a NaN value +inf. NaN when not computed.
double limit_used(const Criterion& c);

struct Location {
  int64_t b = 0, h = 0, row = 0, col = 0;
  int64_t q_tile = 0, kv_tile = 0;  // row / tile_q, and the KV tile holding the row's last visible key
  double kernel = 0, oracle = 0;
};

// Where the error lies, element by element, for the HTML page (verify/report_html.h). Filled only
// when asked (JudgeOptions::error_maps): the default path computes and prints nothing more.
// Ratios are |o − r| / unit, where unit is baseline_relative's limit, so an element at ratio > 1
// alone fails that criterion; LSE ratios divide by the row's own LSE tolerance.

struct FlaggedElement {
  int64_t b = 0, h = 0, row = 0, col = 0;  // col = -1: the row's LSE
  MapFlag flag = MapFlag::ok;
};

struct ErrorMaps {
  double unit = 0;  // absolute error of ratio 1 (baseline_relative's limit; its atol part if that is not finite)
  int64_t tile_q = 0, tile_kv = 0, q_tiles = 0, kv_tiles = 0;
  // [q_tiles × kv_tiles]: the largest ratio over elements (every b, h) whose row lies in q-tile i and
  // whose row's last visible key lies in kv-tile j; NaN where no checked row falls. tile_flagged
  // counts the unwritten, NaN-mismatched and non-zero empty-row elements of each cell.
  std::vector<float> tile_ratio;
  std::vector<int64_t> tile_flagged;
  // The head shown element by element: the worst element's (the first head otherwise).
  int64_t head_b = 0, head_h = 0;
  std::vector<int64_t> rows;        // the checked rows, ascending
  std::vector<float> head_ratio;    // [rows × Dv]; NaN where head_flag is not ok
  std::vector<MapFlag> head_flag;   // [rows × Dv]
  // Per checked row: that head's LSE ratio and flag, and the largest LSE ratio over every (b, h).
  // Empty when the kernel wrote no LSE.
  std::vector<float> lse_ratio, lse_ratio_max;
  std::vector<MapFlag> lse_flag;
  // The first kMaxFlagged flagged elements (every b, h, O and LSE), and how many there are in all.
  static constexpr size_t kMaxFlagged = 1000;
  std::vector<FlaggedElement> flagged;
  int64_t flagged_total = 0;
};

// One sequence of a batch whose sequences differ (varlen, seqused_k): which sequence failed.
struct SequenceVerdict {
  int64_t b = 0, sq = 0, skv = 0;  // its index, queries and keys used
  int64_t compared = 0;            // its O elements the value metrics measured
  // Its O elements and LSE rows unwritten, NaN/Inf where the oracle has none, non-zero though empty,
  // or outside their contenders' values.
  int64_t flagged = 0;
  int64_t lse_over = 0;            // its LSE rows past their own limits
  double max_abs = 0;              // largest |o - r| over its compared elements
  double max_abs_limit = 0;        // baseline_relative's limit (the whole output's)
  bool pass = true;
};

struct Report {
  Problem problem;
  int64_t rows_checked = 0;  // per (batch, head); for a varlen batch per head, over every sequence
  bool sampled = false;
  std::vector<Criterion> criteria;
  // Metrics.
  double cosine = 1, rel_l2 = 0, max_abs = 0, baseline_max_abs = 0;
  uint64_t ulp_max = 0;
  double ulp_mean = 0;
  double rounding_bias = 0;  // mean signed error in output ULPs over distinct pairs of significant elements
  // Distinct (kernel, oracle) pairs among the significant elements: the evidence the rounding
  // criteria rest on (estimated past DistinctPairs::kCapacity, 16,384).
  double distinct_pairs = 0;
  // Elements the value metrics (cosine, rel_l2, baseline, ULP) were computed over: finite in both,
  // written, in rows that see a key. 0 means those metrics describe nothing.
  int64_t compared = 0;
  int64_t ulp_over_n = 0, elements = 0, nan_mismatches = 0, unwritten = 0, empty_row_violations = 0;
  std::optional<double> lse_max_abs, lse_max_rel;
  std::optional<Location> worst;   // b is the sequence of a varlen batch
  std::vector<SequenceVerdict> sequences;  // varlen and seqused_k problems only
  std::string repro;  // one command that reproduces the case
  // What the judge could not look at or did not read, said rather than passed over in silence:
  // e.g. "lse: not checked (the file has no 'lse' tensor)", "metadata key 'format' ignored".
  std::vector<std::string> notes;
  std::optional<ErrorMaps> maps;  // only when asked for (JudgeOptions::error_maps)
  // Wall seconds per phase (read, widen, oracle, baseline, criteria, ...), in the order they ran:
  // where a production-size check spends its time. In the JSON only when filled.
  std::vector<std::pair<std::string, double>> timings;

  bool pass() const;
  std::vector<std::string> failed() const;
};

// Fills a timings list (Report::timings) phase by phase: lap(name) records the seconds since the
// previous lap (or since construction).
class PhaseTimer {
 public:
  explicit PhaseTimer(std::vector<std::pair<std::string, double>>& out) : out_(out), t_(std::chrono::steady_clock::now()) {}
  void lap(std::string phase) {
    const auto now = std::chrono::steady_clock::now();
    out_.emplace_back(std::move(phase), std::chrono::duration<double>(now - t_).count());
    t_ = now;
  }

 private:
  std::vector<std::pair<std::string, double>>& out_;
  std::chrono::steady_clock::time_point t_;
};

std::string to_text(const Report& r);
nlohmann::json to_json(const Report& r);
// The inverse of to_json, for reports read back (`flashcheck merge` reads shards' JSON):
// to_json(report_from_json(j)) == j for any j that to_json wrote. The error maps are not in the
// JSON and stay empty. Throws std::runtime_error naming the field that is missing or malformed.
Report report_from_json(const nlohmann::json& j);
// One criterion as to_json writes it (name, pass, role, bound, value, limit, detail); throws
// std::runtime_error naming the field that is missing or malformed.
Criterion criterion_from_json(const nlohmann::json& c);

}  // namespace flashcheck
