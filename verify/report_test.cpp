// Honest reports: a criterion's status and its comparison with the limit come from one place and
// read the same in text, JSON and HTML; "ok" only for a judged value within its limit, "over
// limit (reported only)" for an unjudged one past it, "n/a" where nothing could be measured.
#include "verify/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>

#include "reference/replica.h"
#include "testing/test_seed.h"
#include "verify/criteria.h"
#include "verify/expected.h"
#include "verify/metrics.h"
#include "verify/report_html.h"

namespace flashcheck {
namespace {

using Role = Criterion::Role;
using Bound = Criterion::Bound;

TEST(CriterionStatus, IsOkOnlyForAJudgedValueWithinItsLimit) {
  for (Role role : {Role::judged, Role::reported_only, Role::not_computed})
    for (Bound bound : {Bound::at_most, Bound::at_least, Bound::magnitude_at_most})
      for (double value : {0.2, 0.5, -0.2, -0.5, 0.99995, 0.9998, double(NAN)})
        for (bool pass : {true, false}) {
          const Criterion c{"x", pass, value, bound == Bound::at_least ? 0.9999 : 0.3, "", bound, role};
          const bool within = bound == Bound::at_least           ? value >= c.limit
                              : bound == Bound::magnitude_at_most ? std::fabs(value) <= c.limit
                                                                  : value <= c.limit;
          ASSERT_EQ(within_limit(c), within);
          const std::string st = status_text(status_of(c)), cmp = comparison_text(c);
          SCOPED_TRACE("role " + std::to_string(int(role)) + " bound " + std::to_string(int(bound)) + " value " +
                       std::to_string(value) + " pass " + std::to_string(pass) + ": " + st + " " + cmp);
          if (!pass) {
            EXPECT_EQ(st, "FAIL");
          } else if (role == Role::not_computed) {
            EXPECT_EQ(st, "n/a");
            EXPECT_EQ(cmp.rfind("n/a", 0), 0u);
          } else if (role == Role::reported_only) {
            EXPECT_EQ(st, within ? "reported only" : "over limit (reported only)");
          } else {
            EXPECT_EQ(st, within ? "ok" : "over limit");  // a malformed criterion is still never "ok"
          }
          if (role != Role::not_computed && !std::isnan(value)) {
            // The relation printed is the one that holds, in the limit's own direction.
            const bool says_within = cmp.find("\u2264") != std::string::npos || cmp.find("\u2265") != std::string::npos;
            EXPECT_EQ(says_within, within);
          }
        }
}

TEST(CriterionStatus, ComparisonsReadNaturally) {
  EXPECT_EQ(comparison_text({"cosine", true, 0.99991, 0.9999, "", Bound::at_least}), "0.99991 \u2265 0.9999");
  EXPECT_EQ(comparison_text({"rel_l2", true, 0.002, 0.018, ""}), "0.002 \u2264 0.018");
  EXPECT_EQ(comparison_text({"rounding_bias", false, -0.381, 0.3, "", Bound::magnitude_at_most}), "|-0.381| > 0.3");
  EXPECT_EQ(comparison_text({"cosine", true, 0.5, 0.9999, "", Bound::at_least, Role::not_computed}), "n/a (limit \u2265 0.9999)");
  // Few digits would print 1 for both, or for one: digits are added until the gap shows.
  EXPECT_EQ(comparison_text({"cosine", true, 0.99991, 0.9999, "", Bound::at_least}, 3), "0.99991 \u2265 0.9999");
  EXPECT_EQ(comparison_text({"cosine", true, 0.99995, 0.9999, "", Bound::at_least}, 3), "0.99995 \u2265 0.9999");
  EXPECT_EQ(comparison_text({"cosine", false, 0.99989, 0.9999, "", Bound::at_least}, 3), "0.99989 < 0.9999");
  EXPECT_EQ(comparison_text({"rel_l2", true, 0.00211, 0.018, ""}, 3), "0.00211 \u2264 0.018");
  EXPECT_EQ(comparison_text({"unwritten", true, 0, 0, ""}, 3), "0 \u2264 0");
}

// Judged outputs that show each status for real.
struct Judged {
  Problem p;
  Inputs in;
  Expected ref;
  Judged(Problem prob, Dist dist, uint64_t salt) : p(prob) {
    in = make_inputs(p, flashcheck::testing::seed_for(salt), dist);
    ref = make_expected(p, in);
  }
  Report judge(std::vector<float> o, std::optional<std::vector<float>> lse) const {
    CheckOptions opt;
    opt.tol = tolerance_for(p.dtype);
    return verify_output(p, ref, KernelResult{std::move(o), std::move(lse)}, opt);
  }
  std::vector<float> lse() const { return {ref.oracle.lse.begin(), ref.oracle.lse.end()}; }
};

const Criterion& find(const Report& r, const std::string& name) {
  for (const Criterion& c : r.criteria)
    if (c.name == name) return c;
  throw std::runtime_error("no criterion " + name);
}

// Each line of the text report for criterion `name`.
std::string text_line(const Report& r, const std::string& name) {
  std::istringstream lines(to_text(r));
  for (std::string line; std::getline(lines, line);)
    if (line.find(" " + name + ": ") != std::string::npos) return line;
  return "";
}

// The same status, in the same words, in the text, the JSON and the HTML of a report.
void expect_consistent(const Report& r) {
  const nlohmann::json j = to_json(r);
  const std::string page = to_html(r);
  ASSERT_EQ(j["criteria"].size(), r.criteria.size());
  for (size_t i = 0; i < r.criteria.size(); ++i) {
    const Criterion& c = r.criteria[i];
    const std::string st = status_text(status_of(c));
    EXPECT_EQ(text_line(r, c.name).rfind("  " + st + " ", 0), 0u) << text_line(r, c.name);
    EXPECT_NE(text_line(r, c.name).find(comparison_text(c)), std::string::npos);
    EXPECT_EQ(j["criteria"][i]["status"], st);
    EXPECT_EQ(j["criteria"][i]["text"], comparison_text(c));
    EXPECT_EQ(j["criteria"][i]["value"].is_null(), c.role == Role::not_computed);
    const std::string row = "<tr data-criterion=\"" + c.name + "\" data-status=\"" + st + "\"";
    EXPECT_NE(page.find(row), std::string::npos) << row;
    if (st != "ok") {
      EXPECT_EQ(text_line(r, c.name).find(" ok "), std::string::npos);
    }
  }
}

TEST(HonestReport, AnAllUnwrittenOutputIsNotComputedEverywhere) {
  Judged j(Problem{1, 2, 1, 40, 50, 32, 32, Causal::none, {}, DType::bf16}, Dist::normal, 501);
  const Report r = j.judge(std::vector<float>(j.ref.oracle.o.size(), poison_value(DType::bf16)), j.lse());
  EXPECT_FALSE(r.pass());
  for (const char* name : {"cosine", "rel_l2", "baseline_relative", "ulp", "rounding_bias"}) {
    EXPECT_EQ(find(r, name).role, Role::not_computed) << name;
    EXPECT_EQ(std::string(status_text(status_of(find(r, name)))), "n/a") << name;
  }
  expect_consistent(r);
  const nlohmann::json js = to_json(r);
  for (const char* m : {"cosine", "rel_l2", "max_abs", "ulp_mean", "rounding_bias"}) EXPECT_TRUE(js["metrics"][m].is_null()) << m;
  EXPECT_EQ(to_text(r).find("cos=1"), std::string::npos);
  EXPECT_EQ(to_html(r).find("cos=1"), std::string::npos);
}

TEST(HonestReport, AReportedOnlyValuePastItsLimitSaysSo) {
  // One query row of constant rows: 4 distinct values, so rounding_bias is reported only; rounded
  // the wrong way every time, it lies past its limit.
  Judged j(Problem{1, 4, 2, 1, 63, 256, 256, Causal::none, {}, DType::bf16}, Dist::constant_rows, 502);
  std::vector<float> o(j.ref.oracle.o.size());
  for (size_t e = 0; e < o.size(); ++e)
    o[e] = bf16_bits_to_f32(static_cast<uint16_t>(f32_to_bf16_bits(round_nearest_even(DType::bf16, j.ref.oracle.o[e])) + 1));
  const Report r = j.judge(o, j.lse());
  const Criterion& bias = find(r, "rounding_bias");
  EXPECT_EQ(std::string(status_text(status_of(bias))), "over limit (reported only)") << to_text(r);
  expect_consistent(r);
}

// LSE's limit differs per row; the report shows the row nearest its limit with that row's own
// limit, never a flat part the value lies past (`ok lse 16 / 1e-05` before).
TEST(HonestReport, LseShowsTheRowNearestItsOwnLimit) {
  Problem p{1, 2, 2, 50, 70, 64, 64, Causal::bottom_right, 1.0, DType::bf16};
  Judged j(p, Dist::large, 503);
  ReplicaConfig cfg;
  cfg.finite_neg_inf = false;
  const ReplicaResult good = replica_attention(p, j.in, cfg);
  const Report r = j.judge(good.o, good.lse);
  const Criterion& lse = find(r, "lse");
  EXPECT_TRUE(lse.pass) << to_text(r);
  EXPECT_GT(lse.value, tolerance_for(p.dtype).lse_atol) << "scores near 1e8: the LSE's error is far past the flat atol";
  EXPECT_LE(lse.value, lse.limit);
  EXPECT_EQ(std::string(status_text(status_of(lse))), "ok");
  expect_consistent(r);
}

}  // namespace
}  // namespace flashcheck
