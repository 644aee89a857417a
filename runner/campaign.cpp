#include "runner/campaign.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "runner/harness.h"
#include "verify/judge.h"

namespace flashcheck {

ProblemSpace space_for(const Capabilities& caps, const CampaignOptions& opt) {
  ProblemSpace s;
  s.max_seq = std::max<int64_t>(1, std::min(opt.max_seq, caps.max_seq));
  s.head_dims = caps.head_dims;
  s.dtypes.clear();
  for (DType d : caps.dtypes)
    if (opt.dtypes.empty() || std::find(opt.dtypes.begin(), opt.dtypes.end(), d) != opt.dtypes.end()) s.dtypes.push_back(d);
  s.causals = caps.causals;
  s.allow_dv_ne_dqk = caps.dv_ne_dqk;
  if (!caps.gqa) s.max_group = 1;
  s.max_work = opt.max_work;
  return s;
}

Case campaign_case(const ProblemSpace& space, uint64_t seed, int64_t index) {
  // SplitMix64 of (seed, index): case i is the same wherever and in whichever shard it runs.
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(index) + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return gen_case(space)(rc::Random(z), rc::kNominalSize).value();
}

std::string repro_command(const std::string& variant, const Case& c, const std::string& plugin) {
  std::ostringstream os;
  os << "flashcheck run --kernel " << variant;
  if (!plugin.empty()) os << " --plugin " << plugin;
  os << " --problem \"" << to_string(c.problem) << "\" --dist " << to_string(c.dist) << " --input-seed " << c.seed;
  return os.str();
}

CaseOutcome run_case(const Variant& v, const Case& c, int64_t max_rows, const std::string& plugin) {
  CaseOutcome out;
  out.c = c;
  if (auto why = v.unsupported(c.problem)) {
    out.skipped = *why;
    return out;
  }
  const Problem& p = c.problem;
  const Inputs in = make_inputs(p, c.seed, c.dist);
  HarnessResult h;
  try {
    h = run_variant(v, p, in);
  } catch (const std::exception& e) {
    out.error = e.what();
    out.report.problem = p;
    out.report.criteria.push_back({"kernel_error", false, 1, 0, e.what()});
    out.report.repro = repro_command(v.name(), c, plugin);
    return out;
  }
  out.report = judge(p, in, h.output(), v.declared(p), JudgeOptions{max_rows});
  out.report.repro = repro_command(v.name(), c, plugin);
  out.passed = out.report.pass();
  return out;
}

namespace {
std::vector<Problem> smaller(const Problem& p, const Capabilities& caps) {
  std::vector<Problem> out;
  auto push = [&](Problem q) {
    if (q != p) out.push_back(q);
  };
  Problem q = p;
  q.batch = 1;
  push(q);
  if (p.group() > 1) {
    q = p;
    q.heads_q = p.heads_kv;  // plain MHA
    push(q);
  }
  if (p.heads_kv > 1) {
    q = p;
    q.heads_q = p.group();
    q.heads_kv = 1;
    push(q);
  }
  for (auto m : {&Problem::seq_q, &Problem::seq_kv}) {
    for (int64_t len : {int64_t{1}, p.*m / 2, p.*m - 1}) {
      if (len < 1 || len >= p.*m) continue;
      q = p;
      q.*m = len;
      push(q);
    }
  }
  for (int64_t d : caps.head_dims) {
    if (d >= p.head_dim_qk) continue;
    q = p;
    q.head_dim_qk = d;
    q.head_dim_v = caps.dv_ne_dqk ? std::min(p.head_dim_v, d) : d;
    push(q);
  }
  if (p.head_dim_v != p.head_dim_qk) {
    q = p;
    q.head_dim_v = q.head_dim_qk;
    push(q);
  }
  return out;
}
}  // namespace

CaseOutcome shrink_failure(const Variant& v, CaseOutcome failing, int64_t max_rows, const std::string& plugin,
                           int max_steps) {
  int steps = 0;
  bool improved = true;
  while (improved && steps < max_steps) {
    improved = false;
    std::vector<Case> cands;
    for (const Problem& p : smaller(failing.c.problem, v.caps())) cands.push_back({p, failing.c.dist, failing.c.seed});
    if (failing.c.dist != Dist::normal) cands.push_back({failing.c.problem, Dist::normal, failing.c.seed});
    for (const Case& c : cands) {
      if (++steps > max_steps) break;
      if (v.unsupported(c.problem)) continue;
      CaseOutcome o = run_case(v, c, max_rows, plugin);
      if (!o.passed && !o.skipped) {
        failing = std::move(o);
        improved = true;
        break;
      }
    }
  }
  return failing;
}

VariantSummary run_campaign(const Variant& v, const CampaignOptions& opt, std::ostream& log) {
  VariantSummary s;
  s.name = v.name();
  if (auto why = v.unavailable()) {
    s.unavailable = *why;
    return s;
  }
  const ProblemSpace space = space_for(v.caps(), opt);
  if (space.dtypes.empty()) {
    s.unavailable = "declares none of the requested dtypes";
    return s;
  }
  const bool tty = opt.progress && isatty(STDERR_FILENO);
  for (int64_t i = 0; i < opt.cases; ++i) {
    if (i % opt.shard_count != opt.shard_index) continue;
    const Case c = campaign_case(space, opt.seed, i);
    CaseOutcome o = run_case(v, c, opt.max_rows, opt.plugin);
    ++s.cases;
    if (o.skipped) {
      ++s.skipped;
    } else {
      if (!o.error) {
        s.worst_ulp = std::max(s.worst_ulp, o.report.ulp_max);
        s.worst_cos = std::min(s.worst_cos, o.report.cosine);
      }
      if (o.passed) {
        ++s.passed;
      } else {
        ++s.failed;
        log << "\n" << s.name << " case " << i << " FAILED: " << to_string(c.problem) << " dist=" << to_string(c.dist) << "\n";
        if (static_cast<int64_t>(s.failures.size()) < opt.max_failures_kept) {
          CaseOutcome shrunk = opt.shrink ? shrink_failure(v, o, opt.max_rows, opt.plugin) : o;
          s.repro.push_back(repro_command(s.name, shrunk.c, opt.plugin));
          log << to_text(shrunk.report);
          log << "  reproduce (shrunk): " << s.repro.back() << "\n";
          s.failures.push_back(std::move(shrunk));
        }
        if (opt.fail_fast) break;
      }
    }
    if (tty)
      std::fprintf(stderr, "\r%-20s case %lld/%lld  pass %lld  fail %lld  skip %lld   ", s.name.c_str(),
                   static_cast<long long>(i + 1), static_cast<long long>(opt.cases), static_cast<long long>(s.passed),
                   static_cast<long long>(s.failed), static_cast<long long>(s.skipped));
  }
  if (tty) std::fprintf(stderr, "\n");
  return s;
}

}  // namespace flashcheck
