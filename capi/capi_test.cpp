// The C API, called as a C caller would (through libflashcheck.so), against the C++ it wraps: the
// same judge's text, the same campaign cases as `flashcheck run`, failures shrunk, errors named.
#include "capi/flashcheck.h"

#include <gtest/gtest.h>

#include <set>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "reference/replica.h"
#include "runner/campaign.h"
#include "runner/registry.h"
#include "testing/test_seed.h"
#include "verify/judge.h"

namespace flashcheck {
namespace {

fc_attention c_problem(const Problem& p) {
  fc_attention a{};
  a.batch = p.batch;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.seq_q = p.seq_q;
  a.seq_kv = p.seq_kv;
  a.head_dim_qk = p.head_dim_qk;
  a.head_dim_v = p.head_dim_v;
  a.dtype = p.dtype == DType::f32 ? FC_F32 : p.dtype == DType::f16 ? FC_F16 : FC_BF16;
  a.causal = p.causal == Causal::none ? FC_MASK_NONE : p.causal == Causal::top_left ? FC_MASK_TOP_LEFT : FC_MASK_BOTTOM_RIGHT;
  a.scale = p.scale.value_or(NAN);
  return a;
}

Problem cpp_problem(const fc_attention& a) {
  char buf[256];
  fc_attention_to_string(&a, buf, sizeof buf);
  return parse_problem(buf);
}

std::vector<uint8_t> encoded(DType d, const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() * static_cast<size_t>(dtype_bytes(d)));
  encode(d, x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

struct Output {
  Problem p{2, 4, 2, 150, 97, 64, 64, Causal::bottom_right, {}, DType::bf16};
  Inputs in;
  ReplicaResult good;
  std::vector<uint8_t> q, k, v, o;
  explicit Output(uint64_t salt) {
    in = make_inputs(p, flashcheck::testing::seed_for(salt));
    good = replica_attention(p, in, ReplicaConfig{});
    q = encoded(p.dtype, in.q);
    k = encoded(p.dtype, in.k);
    v = encoded(p.dtype, in.v);
    o = encoded(p.dtype, good.o);
  }
};

TEST(CApi, VersionMatchesTheHeader) { EXPECT_EQ(fc_api_version(), FLASHCHECK_API_VERSION); }

TEST(CApi, CheckIsTheJudgesVerdictAndText) {
  Output t(501);
  const fc_attention a = c_problem(t.p);
  fc_report* r = nullptr;
  ASSERT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), t.o.data(), t.good.lse.data(), nullptr, &r), FC_OK)
      << fc_last_error();
  EXPECT_EQ(fc_report_pass(r), 1) << fc_report_text(r);
  // The very judge `flashcheck check` calls, on the same numbers.
  std::vector<float> o32(t.good.o.size());
  decode(t.p.dtype, t.o.data(), t.p.o_elems(), o32.data());
  const Report direct = judge(t.p, t.in, KernelOutput{o32, t.good.lse, std::nullopt}, Declared{});
  EXPECT_EQ(std::string(fc_report_text(r)), to_text(direct));
  EXPECT_EQ(nlohmann::json::parse(fc_report_json(r)), to_json(direct));
  fc_report_free(r);

  // One element of the last row of head 3 far off: it fails, and the worst element says where.
  std::vector<float> bad = t.good.o;
  const size_t e = static_cast<size_t>(((0 * 4 + 3) * 150 + 149) * 64 + 10);
  bad[e] += 4.0f;
  const auto bad_o = encoded(t.p.dtype, bad);
  fc_check_options opt;
  fc_check_options_init(&opt);
  opt.tile_q = 64;
  ASSERT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), bad_o.data(), nullptr, &opt, &r), FC_OK);
  EXPECT_EQ(fc_report_pass(r), 0);
  ASSERT_GE(fc_report_failed_count(r), 1);
  EXPECT_EQ(fc_report_failed_name(r, fc_report_failed_count(r)), nullptr);
  fc_location w;
  ASSERT_EQ(fc_report_worst(r, &w), 1);
  EXPECT_EQ(w.h, 3);
  EXPECT_EQ(w.row, 149);
  EXPECT_EQ(w.col, 10);
  EXPECT_EQ(w.q_tile, 149 / 64);
  EXPECT_EQ(fc_report_set_repro(r, "my repro line"), FC_OK);
  EXPECT_NE(std::string(fc_report_text(r)).find("reproduce: my repro line"), std::string::npos);
  EXPECT_NE(std::string(fc_report_html(r)).find("No error maps"), std::string::npos);
  fc_report_free(r);
  opt.error_maps = 1;
  ASSERT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), bad_o.data(), nullptr, &opt, &r), FC_OK);
  EXPECT_NE(std::string(fc_report_html(r)).find("id=\"tiles\""), std::string::npos);
  fc_report_free(r);
}

TEST(CApi, Base2LseIsConvertedOnlyWhenDeclared) {
  Output t(502);
  const fc_attention a = c_problem(t.p);
  std::vector<float> lse2 = t.good.lse;
  for (float& x : lse2)
    if (std::isfinite(x)) x = static_cast<float>(x / std::log(2.0));
  fc_check_options opt;
  fc_check_options_init(&opt);
  fc_report* r = nullptr;
  ASSERT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), t.o.data(), lse2.data(), &opt, &r), FC_OK);
  EXPECT_EQ(fc_report_pass(r), 0);
  EXPECT_STREQ(fc_report_failed_name(r, 0), "lse");
  fc_report_free(r);
  opt.lse_base = FC_LSE_LOG_2;
  ASSERT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), t.o.data(), lse2.data(), &opt, &r), FC_OK);
  EXPECT_EQ(fc_report_pass(r), 1) << fc_report_text(r);
  fc_report_free(r);
}

TEST(CApi, BadInputIsNamed) {
  Output t(503);
  fc_attention a = c_problem(t.p);
  fc_report* r = nullptr;
  a.dtype = 7;
  EXPECT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), t.o.data(), nullptr, nullptr, &r), FC_ERR_INVALID);
  EXPECT_NE(std::string(fc_last_error()).find("dtype 7"), std::string::npos) << fc_last_error();
  a = c_problem(t.p);
  a.heads_q = 3;  // not a multiple of heads_kv = 2
  EXPECT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), t.o.data(), nullptr, nullptr, &r), FC_ERR_INVALID);
  EXPECT_NE(std::string(fc_last_error()).find("heads"), std::string::npos) << fc_last_error();
  a = c_problem(t.p);
  EXPECT_EQ(fc_check(&a, t.q.data(), nullptr, t.v.data(), t.o.data(), nullptr, nullptr, &r), FC_ERR_INVALID);
  EXPECT_STREQ(fc_last_error(), "k is NULL");
  // NaN in k: refused unless asked for, naming the tensor and the index.
  std::vector<float> k = t.in.k;
  k[static_cast<size_t>(((1 * 2 + 1) * 97 + 5) * 64 + 7)] = NAN;
  const auto k_bits = encoded(t.p.dtype, k);
  EXPECT_EQ(fc_check(&a, t.q.data(), k_bits.data(), t.v.data(), t.o.data(), nullptr, nullptr, &r), FC_ERR_CANNOT_TEST);
  EXPECT_NE(std::string(fc_last_error()).find("input 'k' holds NaN at [1,1,5,7]"), std::string::npos) << fc_last_error();
  fc_check_options opt;
  fc_check_options_init(&opt);
  opt.struct_size = 8;
  EXPECT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), t.o.data(), nullptr, &opt, &r), FC_ERR_INVALID);
  EXPECT_NE(std::string(fc_last_error()).find("struct_size"), std::string::npos);
  EXPECT_EQ(r, nullptr);
}

TEST(CApi, ProblemLinesAndInputsRoundTrip) {
  fc_attention a{};
  ASSERT_EQ(fc_attention_parse("b=2 hq=4 hkv=2 sq=9 skv=11 dqk=32 dv=16 causal=top_left dtype=f16 scale=0.5", &a), FC_OK);
  EXPECT_EQ(a.heads_kv, 2);
  EXPECT_EQ(a.causal, FC_MASK_TOP_LEFT);
  EXPECT_EQ(a.scale, 0.5);
  char small[8];
  const size_t n = fc_attention_to_string(&a, small, sizeof small);
  EXPECT_GT(n, sizeof small);
  EXPECT_EQ(std::strlen(small), sizeof small - 1);
  EXPECT_EQ(fc_attention_parse("b=1 sq=banana", &a), FC_ERR_INVALID);
  EXPECT_NE(std::string(fc_last_error()).find("banana"), std::string::npos);

  ASSERT_EQ(fc_attention_parse("b=1 hq=2 hkv=1 sq=5 skv=7 dqk=16 dv=16 dtype=bf16", &a), FC_OK);
  const Problem p = cpp_problem(a);
  const uint64_t seed = flashcheck::testing::seed_for(504);
  std::vector<uint16_t> q(static_cast<size_t>(p.q_elems())), k(static_cast<size_t>(p.k_elems())), v(static_cast<size_t>(p.v_elems()));
  ASSERT_EQ(fc_make_inputs(&a, FC_DIST_OUTLIER_KEYS, seed, q.data(), k.data(), v.data()), FC_OK);
  const Inputs in = make_inputs(p, seed, Dist::outlier_keys);
  EXPECT_EQ(encoded(p.dtype, in.k), std::vector<uint8_t>(reinterpret_cast<uint8_t*>(k.data()),
                                                          reinterpret_cast<uint8_t*>(k.data() + k.size())));
  EXPECT_STREQ(fc_dist_name(FC_DIST_EQUAL_SCORES), "equal_scores");
  EXPECT_STREQ(fc_dist_name(FC_DIST_NONFINITE), "nonfinite");  // API 4
  EXPECT_EQ(fc_dist_name(FC_DIST_NONFINITE + 1), nullptr);
}

// A callback kernel: the blocked replica, optionally broken, recording every problem it is given.
struct Kernel {
  std::vector<Problem> seen;
  bool drop_last_key = false;  // a classic tail bug: the last key never enters the softmax
  int fail_with = 0;           // return this instead of computing
  const char* error_text = "the kernel says no";  // with this message
  int64_t decline_odd_skv = 0; // decline problems whose seq_kv is odd (a shape the kernel refuses)
  static int32_t run(void* user, const fc_attention* a, const void* q, const void* k, const void* v, void* o, float* lse) {
    auto* self = static_cast<Kernel*>(user);
    const Problem p = cpp_problem(*a);
    EXPECT_EQ(a->scale, p.softmax_scale()) << "a callback gets the scale resolved";
    self->seen.push_back(p);
    if (self->decline_odd_skv && p.seq_kv % 2 == 1) {
      fc_set_callback_error("odd key counts");
      return FC_CALLBACK_DECLINE;
    }
    if (self->fail_with) {
      fc_set_callback_error(self->error_text);
      return self->fail_with;
    }
    auto widen = [&](const void* src, int64_t n) {
      std::vector<float> x(static_cast<size_t>(n));
      decode(p.dtype, src, n, x.data());
      return x;
    };
    Inputs in{widen(q, p.q_elems()), widen(k, p.k_elems()), widen(v, p.v_elems())};
    Problem used = p;
    if (self->drop_last_key && p.seq_kv > 1) {
      // Drop key Skv-1 from every KV head: compute on Skv-1 keys (bottom-right masks shift with it,
      // which is part of this bug's damage).
      used.seq_kv = p.seq_kv - 1;
      auto cut = [&](std::vector<float>& x, int64_t d) {
        std::vector<float> y;
        for (int64_t bh = 0; bh < p.batch * p.heads_kv; ++bh)
          y.insert(y.end(), x.begin() + bh * p.seq_kv * d, x.begin() + (bh * p.seq_kv + used.seq_kv) * d);
        x = y;
      };
      cut(in.k, p.head_dim_qk);
      cut(in.v, p.head_dim_v);
    }
    ReplicaConfig cfg;
    cfg.finite_neg_inf = false;  // the -2^30 fill loses rows whose scores all lie below it (replica_test)
    const ReplicaResult r = replica_attention(used, in, cfg);
    encode(p.dtype, r.o.data(), p.o_elems(), o);
    if (lse) std::memcpy(lse, r.lse.data(), r.lse.size() * sizeof(float));
    return 0;
  }
};

TEST(CApi, FuzzDrawsTheCasesFlashcheckRunDraws) {
  fc_fuzz_options opt;
  fc_fuzz_options_init(&opt);
  opt.cases = 12;
  opt.seed = flashcheck::testing::seed_for(505);
  opt.max_seq = 64;
  Kernel kern;
  fc_campaign* c = nullptr;
  ASSERT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_OK) << fc_last_error();
  fc_campaign_summary s;
  fc_campaign_get_summary(c, &s);
  EXPECT_EQ(s.cases, 12);
  EXPECT_EQ(s.passed, 12) << fc_campaign_log(c);
  EXPECT_EQ(fc_campaign_failure_count(c), 0);
  fc_campaign_free(c);
  // `flashcheck run --kernel replica --seed S --max-seq 64 --variants none` draws from the replica's
  // plain capabilities, which are the defaults the options start from: case for case, the same
  // problems (its variants, fp8 among them, left out as API 2 callbacks get none).
  CampaignOptions copt;
  copt.seed = opt.seed;
  copt.max_seq = 64;
  copt.variants.allowed = std::set<VariantName>{};
  const ProblemSpace space = space_for(Registry::builtin().find("replica")->caps(), copt);
  ASSERT_EQ(kern.seen.size(), 12u);
  for (int64_t i = 0; i < 12; ++i) {
    const Case want = campaign_case(space, opt.seed, i);
    Problem resolved = want.problem;  // the callback saw the scale resolved
    resolved.scale = resolved.softmax_scale();
    EXPECT_EQ(kern.seen[static_cast<size_t>(i)], resolved) << "case " << i;
    fc_case got;
    ASSERT_EQ(fc_draw_case(&opt, i, &got), FC_OK);
    EXPECT_EQ(cpp_problem(got.problem), want.problem);
    EXPECT_EQ(got.input_seed, want.seed);
    EXPECT_STREQ(fc_dist_name(got.dist), std::string(to_string(want.dist)).c_str());
  }
}

TEST(CApi, FuzzShrinksAFailureToASmallCase) {
  fc_fuzz_options opt;
  fc_fuzz_options_init(&opt);
  opt.name = "drops_last_key";
  opt.cases = 20;
  opt.seed = flashcheck::testing::seed_for(506);
  opt.max_seq = 128;
  opt.dtypes = 1u << FC_F32;
  opt.max_failures = 1;
  Kernel kern;
  kern.drop_last_key = true;
  fc_campaign* c = nullptr;
  ASSERT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_OK) << fc_last_error();
  fc_campaign_summary s;
  fc_campaign_get_summary(c, &s);
  EXPECT_GT(s.failed, 0);
  ASSERT_EQ(fc_campaign_failure_count(c), 1);
  fc_case fc;
  fc_report* r = nullptr;
  ASSERT_EQ(fc_campaign_failure(c, 0, &fc, &r), FC_OK);
  EXPECT_EQ(fc_report_pass(r), 0);
  // Greedy shrinking takes batch and heads to 1 and the sequences down to where the bug still shows.
  EXPECT_EQ(fc.problem.batch, 1);
  EXPECT_EQ(fc.problem.heads_kv, 1);
  EXPECT_LE(fc.problem.seq_q, 4);
  EXPECT_LE(fc.problem.seq_kv, 4);
  EXPECT_EQ(fc.dist, FC_DIST_NORMAL);
  EXPECT_NE(std::string(fc_report_text(r)).find("fc_make_inputs"), std::string::npos);
  const auto j = nlohmann::json::parse(fc_campaign_json(c));
  EXPECT_EQ(j["name"], "drops_last_key");
  EXPECT_EQ(j["failures"].size(), 1u);
  EXPECT_EQ(j["failures"][0]["report"]["pass"], false);
  EXPECT_EQ(fc_campaign_failure(c, 1, &fc, &r), FC_ERR_INVALID);
  fc_campaign_free(c);
}

TEST(CApi, CallbackErrorsFailCasesAndAbortStops) {
  fc_fuzz_options opt;
  fc_fuzz_options_init(&opt);
  opt.cases = 3;
  opt.max_seq = 32;
  opt.shrink = 0;
  Kernel kern;
  kern.fail_with = 7;
  fc_campaign* c = nullptr;
  ASSERT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_OK);
  fc_campaign_summary s;
  fc_campaign_get_summary(c, &s);
  EXPECT_EQ(s.failed, 3);
  fc_report* r = nullptr;
  ASSERT_EQ(fc_campaign_failure(c, 0, nullptr, &r), FC_OK);
  EXPECT_NE(std::string(fc_report_text(r)).find("returned 7: the kernel says no"), std::string::npos) << fc_report_text(r);
  fc_campaign_free(c);

  kern.fail_with = FC_CALLBACK_ABORT;
  kern.seen.clear();
  EXPECT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_ERR_ABORTED);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(kern.seen.size(), 1u);
  EXPECT_NE(std::string(fc_last_error()).find("the kernel says no"), std::string::npos) << fc_last_error();

  opt.dtypes = 0;
  EXPECT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_ERR_INVALID);
  EXPECT_NE(std::string(fc_last_error()).find("dtypes mask"), std::string::npos);
}

// Text from outside (a callback's message, a caller's command, a campaign name) that is not UTF-8
// or holds escape sequences and newlines: every rendering survives it (today's JSON threw
// type_error.316, which in a host process reached std::terminate), JSON replaces the bad bytes,
// and the text shows everything on flashcheck's own lines, escaped.
bool valid_utf8_text(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

void expect_printable(const std::string& text, const char* what) {
  EXPECT_TRUE(valid_utf8_text(text)) << what;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << what << ": an escape sequence reached the text:\n" << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << what;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    EXPECT_NE(line.rfind("reproduce: evil", 0), 0u) << what << ": a fake reproduce line:\n" << text;
}

constexpr const char* kHostile = "bad \xff\xfe bytes \x1b[2J\x1b]0;title\x07 red\r\nreproduce: evil --plugin x\ncut \xe2\x82";

TEST(CApi, HostileTextNeverCrossesTheBoundary) {
  Output t(505);
  const fc_attention a = c_problem(t.p);
  std::vector<float> bad = t.good.o;
  bad[static_cast<size_t>(flashcheck::testing::seed_for(505) % bad.size())] += 8.0f;
  const auto bad_o = encoded(t.p.dtype, bad);
  fc_report* r = nullptr;
  ASSERT_EQ(fc_check(&a, t.q.data(), t.k.data(), t.v.data(), bad_o.data(), nullptr, nullptr, &r), FC_OK);
  ASSERT_EQ(fc_report_set_repro(r, kHostile), FC_OK);
  std::string json, text, html;
  EXPECT_NO_THROW(json = fc_report_json(r));
  EXPECT_NO_THROW(text = fc_report_text(r));
  EXPECT_NO_THROW(html = fc_report_html(r));
  const auto j = nlohmann::json::parse(json);
  EXPECT_NE(j["repro"].get<std::string>().find("bad \xef\xbf\xbd\xef\xbf\xbd bytes"), std::string::npos) << json;
  expect_printable(text, "fc_report_text");
  EXPECT_NE(text.find("reproduce: bad"), std::string::npos) << text;
  EXPECT_TRUE(valid_utf8_text(html));
  fc_report_free(r);

  // A failing callback's message, under a campaign name that is not UTF-8 either.
  fc_fuzz_options opt;
  fc_fuzz_options_init(&opt);
  opt.cases = 2;
  opt.max_seq = 24;
  opt.shrink = 0;
  opt.name = "kernel\xff\x1b[31m";
  Kernel kern;
  kern.fail_with = 3;
  kern.error_text = kHostile;
  fc_campaign* c = nullptr;
  ASSERT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_OK) << fc_last_error();
  std::string cj;
  EXPECT_NO_THROW(cj = fc_campaign_json(c));
  const auto campaign = nlohmann::json::parse(cj);
  EXPECT_EQ(campaign["failed"], 2);
  const std::string detail = campaign["failures"][0]["report"]["criteria"][0]["detail"];
  EXPECT_NE(detail.find("reproduce: evil"), std::string::npos) << "the JSON keeps the message: " << detail;
  expect_printable(fc_campaign_log(c), "fc_campaign_log");
  ASSERT_EQ(fc_campaign_failure(c, 0, nullptr, &r), FC_OK);
  expect_printable(fc_report_text(r), "a campaign failure's text");
  fc_campaign_free(c);

  // And fc_last_error, which a caller prints, is one printable line.
  kern.fail_with = FC_CALLBACK_ABORT;
  EXPECT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_ERR_ABORTED);
  const std::string err = fc_last_error();
  expect_printable(err, "fc_last_error");
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  fc_attention parsed;
  EXPECT_EQ(fc_attention_parse("b=1 h=2 s=8 d=16 causal=\x1b[2J\nreproduce: evil", &parsed), FC_ERR_INVALID);
  expect_printable(fc_last_error(), "a parse error");
}

// A kernel that declines some problems: those cases are skipped, not failed, and shrinking a failure
// among the others never moves to a problem it declines (which would "fail" for the wrong reason).
TEST(CApi, DeclinedCasesAreSkippedAndNeverShrunkTo) {
  fc_fuzz_options opt;
  fc_fuzz_options_init(&opt);
  opt.cases = 30;
  opt.seed = flashcheck::testing::seed_for(507);
  opt.max_seq = 64;
  opt.dtypes = 1u << FC_F32;
  opt.shrink = 0;
  Kernel kern;
  kern.decline_odd_skv = 1;
  fc_campaign* c = nullptr;
  ASSERT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_OK) << fc_last_error();
  fc_campaign_summary s;
  fc_campaign_get_summary(c, &s);
  EXPECT_EQ(s.cases, 30);
  EXPECT_GT(s.skipped, 0) << "no odd seq_kv drawn in 30 cases";
  EXPECT_EQ(s.failed, 0) << fc_campaign_log(c);
  EXPECT_EQ(s.passed + s.skipped, 30);
  fc_campaign_free(c);

  opt.shrink = 1;
  opt.max_failures = 1;
  kern.drop_last_key = true;
  ASSERT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_OK) << fc_last_error();
  fc_campaign_get_summary(c, &s);
  EXPECT_GT(s.failed, 0);
  EXPECT_GT(s.skipped, 0);
  EXPECT_EQ(s.passed + s.failed + s.skipped, 30);
  fc_case fc;
  fc_report* r = nullptr;
  ASSERT_EQ(fc_campaign_failure(c, 0, &fc, &r), FC_OK);
  EXPECT_EQ(fc.problem.seq_kv % 2, 0) << "shrunk onto a declined problem";
  EXPECT_LE(fc.problem.seq_kv, 4);
  EXPECT_EQ(std::string(fc_report_text(r)).find("declined"), std::string::npos) << fc_report_text(r);
  fc_campaign_free(c);

  // Every case declined: nothing was judged, which the summary must not dress up as a pass.
  kern.drop_last_key = false;
  kern.fail_with = 0;
  opt.max_seq = 1;  // seq_kv = 1 only: odd, declined
  ASSERT_EQ(fc_fuzz(&Kernel::run, &kern, &opt, &c), FC_OK) << fc_last_error();
  fc_campaign_get_summary(c, &s);
  EXPECT_EQ(s.skipped, 30);
  EXPECT_EQ(s.passed + s.failed, 0);
  EXPECT_TRUE(std::isnan(s.worst_cosine));
  fc_campaign_free(c);
}

}  // namespace
}  // namespace flashcheck
