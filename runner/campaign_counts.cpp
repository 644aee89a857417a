// A campaign's numbers (runner/campaign.h): one case's verdict, the counts every summary is built
// from (the run's and a merge's alike), which failures are kept, how close a case came to its
// limits, and the progress line on stderr.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runner/campaign.h"

namespace flashcheck {

std::optional<Tightness> tightest_criterion(const Report& r) {
  std::optional<Tightness> best;
  for (const Criterion& c : r.criteria) {
    if (c.role != Criterion::Role::judged && c.pass) continue;  // held to nothing: says nothing about closeness
    if (!std::isfinite(c.limit)) continue;
    double ratio = limit_used(c);  // the report's own share of the limit
    if (std::isnan(ratio)) ratio = INFINITY;
    if (!c.pass) ratio = std::max(ratio, 1.0);
    // On a tie (an exact kernel: every ratio 0) a criterion with a measured limit says more than a
    // count held to 0: "rel_l2 0 ≤ 0.001 (0%)", not "unwritten 0 ≤ 0 (0%)".
    const bool says_more = best && ratio == best->ratio && best->limit == 0 && c.limit > 0;
    if (!best || ratio > best->ratio || says_more) best = Tightness{c.name, c.value, c.limit, ratio, -1, c.bound};
  }
  return best;
}

std::string to_text(const Tightness& t) {
  Criterion c;
  c.value = t.value;
  c.limit = t.limit;
  c.bound = t.bound;
  std::string s = t.criterion + " " + comparison_text(c, 3);
  if (std::isfinite(t.ratio)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " (%.0f%%)", 100 * t.ratio);
    s += buf;
  }
  return s;
}

Progress::Progress(bool enabled, double every_s)
    : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0), every_s_(every_s), last_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { finish(); }

void Progress::update(const std::string& line) {
  if (!enabled_) return;
  if (tty_) {
    std::fprintf(stderr, "\r%-100s", line.c_str());
    open_line_ = true;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_).count() < every_s_) return;
  last_ = now;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Progress::finish() {
  if (open_line_) std::fprintf(stderr, "\n");
  open_line_ = false;
}

CaseVerdict verdict_of(int64_t index, const Case& c, const CaseOutcome& o) {
  CaseVerdict v;
  v.index = index;
  v.point = coverage_point(c.problem);
  v.kind = o.skipped ? CaseVerdict::Kind::skipped : o.passed ? CaseVerdict::Kind::passed : CaseVerdict::Kind::failed;
  if (o.skipped) {
    v.skipped = *o.skipped;
    return v;
  }
  v.judged = o.judged();
  v.error = o.error.has_value();
  v.abnormal = o.abnormal;
  if (!o.passed) v.failed_by = o.failed();
  if (v.judged) {
    v.ulp_max = o.report.ulp_max;
    if (o.report.compared > 0) v.cosine = o.report.cosine;  // a cosine over no element is no evidence (it reads 1)
    v.tightest = tightest_criterion(o.report);
    if (v.tightest) v.tightest->case_index = index;
  }
  return v;
}

void count_case(VariantSummary& s, const CaseVerdict& v) {
  ++s.cases;
  s.verdicts.push_back(v);
  s.coverage.count(v.point, v.kind == CaseVerdict::Kind::skipped  ? Coverage::Outcome::skipped
                            : v.kind == CaseVerdict::Kind::passed ? Coverage::Outcome::passed
                                                                  : Coverage::Outcome::failed);
  if (v.kind == CaseVerdict::Kind::skipped) {
    ++s.skipped;
    ++s.skipped_by[v.skipped];
    return;
  }
  if (v.judged) {
    ++s.judged;
    s.worst_ulp = std::max(s.worst_ulp, v.ulp_max);
    // worst_cos starts at NaN-to-be (finish_counts): the first cosine seen replaces the initial 1.
    if (v.cosine) s.worst_cos = s.cosine_seen ? std::min(s.worst_cos, *v.cosine) : *v.cosine;
    s.cosine_seen |= v.cosine.has_value();
    if (v.tightest && (!s.tightest || v.tightest->ratio > s.tightest->ratio)) s.tightest = v.tightest;
  }
  s.errors += v.error;
  if (v.abnormal) {
    ++s.crashed;
    s.timed_out += v.abnormal->timed_out;
    if (!s.first_abnormal) s.first_abnormal = v.abnormal->detail;
  }
  if (v.kind == CaseVerdict::Kind::passed) {
    ++s.passed;
  } else {
    ++s.failed;
    for (const std::string& f : v.failed_by) ++s.failed_by[f];
  }
}

void finish_counts(VariantSummary& s) {
  if (!s.cosine_seen) s.worst_cos = std::nan("");
}

Keep keep_failure_rule(const CaseVerdict& v, int64_t kept, bool kept_hang, int64_t max_kept) {
  if (v.lost) return Keep::lost;
  if (v.abnormal && v.abnormal->timed_out && kept_hang) return Keep::hang_kept_already;
  return kept < max_kept ? Keep::yes : Keep::enough_kept;
}

}  // namespace flashcheck
