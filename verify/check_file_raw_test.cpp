// read_check_case's keep_raw (verify/check_file_format.h): a dense BHSD file's 16-bit q, k, v (and
// o) kept as read for the device, widened on demand to exactly what a plain read gives, and their NaN/Inf
// refused with the very message a plain read gives — whether the first non-finite element is found
// here or on the device. Other files are read as without keep_raw.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "reference/dtype.h"
#include "reference/inputs.h"
#include "reference/naive.h"
#include "reference/naive_backward.h"
#include "reference/storage.h"
#include "testing/test_seed.h"
#include "verify/check_file_format.h"
#include "verify/report.h"

namespace flashcheck {
namespace {

SafetensorsFile file_for(const Problem& p, const Inputs& in) {
  const OracleResult r = naive_attention(p, in);
  const std::vector<float> o(r.o.begin(), r.o.end());
  std::vector<float> lse(r.lse.begin(), r.lse.end());
  return make_check_file(p, in, o, &lse);
}

// The refusal's message, or "" when the read is not refused.
template <typename F>
std::string refusal(F&& read) {
  try {
    read();
  } catch (const CannotTest& e) {
    return e.what();
  }
  return "";
}

TEST(CheckFileRaw, KeepsDenseSixteenBitInputsAndWidensThemExactly) {
  std::mt19937_64 g(testing::seed_for(811));
  for (const char* line : {"b=2 hq=4 hkv=2 sq=33 skv=47 d=24 dv=16 dtype=bf16 causal=bottom_right",
                           "b=1 hq=3 hkv=1 sq=20 skv=9 d=40 dtype=f16 window=4,2 softcap=5 sinks=1"}) {
    const Problem p = parse_problem(line);
    SCOPED_TRACE(line);
    const Inputs in = make_inputs(p, g(), Dist::outlier_keys);
    SafetensorsFile plain_f = file_for(p, in), raw_f = plain_f;
    const CheckFileCase plain = read_check_case(plain_f, false);
    CheckFileCase raw = read_check_case(raw_f, false, {}, true);
    ASSERT_TRUE(raw.raw.has_value());
    EXPECT_TRUE(raw.inputs.q.empty() && raw.inputs.k.empty() && raw.inputs.v.empty());
    EXPECT_EQ(raw.raw->q.numel(), p.q_elems());
    EXPECT_EQ(raw.problem, plain.problem);
    ASSERT_TRUE(raw.raw->o.has_value());
    EXPECT_TRUE(raw.o.empty());
    widen_raw_output(raw);
    EXPECT_EQ(raw.o, plain.o);
    EXPECT_FALSE(raw.raw->o.has_value());
    EXPECT_EQ(raw.inputs.sinks, plain.inputs.sinks);
    EXPECT_NO_THROW(refuse_nonfinite_raw(raw));
    widen_raw_inputs(raw);
    EXPECT_EQ(raw.inputs.q, plain.inputs.q);
    EXPECT_EQ(raw.inputs.k, plain.inputs.k);
    EXPECT_EQ(raw.inputs.v, plain.inputs.v);
    EXPECT_EQ(raw.inputs.q, in.q);
    EXPECT_TRUE(raw.raw->q.data.empty()) << "the raw bytes stay after widening";
    EXPECT_THROW(refuse_nonfinite_raw(raw), std::logic_error);
  }
}

TEST(CheckFileRaw, OtherFilesAreReadAsWithoutIt) {
  std::mt19937_64 g(testing::seed_for(812));
  for (const char* line : {"b=2 hq=2 hkv=2 sq=9 skv=12 d=16 dtype=bf16 layout=bshd",    // storage ≠ logical
                           "b=2 hq=2 hkv=2 sq=9 skv=30 used=30,11 d=16 dtype=f16",         // unused keys
                           "b=2 hq=2 hkv=1 sq=5,8 skv=9,3 d=16 dtype=bf16 layout=thd",     // varlen
                           "b=1 hq=2 hkv=2 sq=9 skv=12 d=16 dtype=f32",                     // not 16-bit
                           "b=1 hq=2 hkv=2 sq=9 skv=12 d=16 dtype=e4m3 odtype=bf16"}) {     // fp8
    const Problem p = parse_problem(line);
    SCOPED_TRACE(line);
    const Inputs in = make_inputs(p, g(), Dist::normal);
    SafetensorsFile f = file_for(p, in);
    const CheckFileCase c = read_check_case(f, false, {}, true);
    EXPECT_FALSE(c.raw.has_value());
    EXPECT_EQ(c.inputs.q, in.q);
    EXPECT_EQ(c.inputs.k, in.k);
  }
  {  // a file with gradients: the backward reads fp32 inputs here anyway
    const Problem p = parse_problem("b=1 hq=2 hkv=1 sq=9 skv=12 d=16 dtype=bf16");
    const Inputs in = make_inputs(p, g(), Dist::normal);
    std::vector<float> d_out = make_inputs(p, g(), Dist::normal).q;  // Dv = Dqk: q's shape is o's
    SafetensorsFile f = file_for(p, in);
    add_check_gradients(f, p, in, d_out, naive_attention_backward(p, in, d_out), {});
    const CheckFileCase c = read_check_case(f, false, {}, true);
    EXPECT_FALSE(c.raw.has_value());
    EXPECT_TRUE(c.gradients.has_value());
    EXPECT_EQ(c.inputs.v, in.v);
  }
}

TEST(CheckFileRaw, RefusesNonFiniteInputsWithThePlainReadsMessage) {
  std::mt19937_64 g(testing::seed_for(813));
  const Problem p = parse_problem("b=2 hq=4 hkv=2 sq=17 skv=23 d=16 dtype=bf16");
  const Inputs clean = make_inputs(p, g(), Dist::normal);
  const float bad[] = {NAN, INFINITY, -INFINITY};
  for (int trial = 0; trial < 12; ++trial) {
    Inputs in = clean;
    std::vector<float>* tensors[] = {&in.q, &in.k, &in.v};
    std::string what;
    for (int k = 0; k < 1 + trial % 3; ++k) {  // one to three non-finite values, anywhere
      std::vector<float>& x = *tensors[g() % 3];
      const size_t at = g() % x.size();
      x[at] = bad[g() % 3];
      what += " " + std::to_string(at);
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + " at" + what);
    SafetensorsFile plain_f = file_for(p, clean);
    // The inputs' tensors replaced by the planted ones (o stays the clean problem's: never read).
    const SafetensorsFile planted = make_check_file(p, in, plain_f.tensors.at("o").to_f32("o"), nullptr);
    for (const char* name : {"q", "k", "v"}) plain_f.tensors[name] = planted.tensors.at(name);
    SafetensorsFile raw_f = plain_f, allowed_f = plain_f;
    const std::string want = refusal([&] { (void)read_check_case(plain_f, false); });
    ASSERT_NE(want, "");
    const CheckFileCase raw = read_check_case(raw_f, false, {}, true);  // the refusal is left to the caller
    EXPECT_EQ(refusal([&] { refuse_nonfinite_raw(raw); }), want);
    // The first non-finite index from elsewhere (the device), as first_nonfinite gives it.
    auto first_of = [&](Tensor t, int64_t n) {
      const std::vector<float>& x = t == Tensor::q ? in.q : t == Tensor::k ? in.k : in.v;
      for (int64_t j = 0; j < n; ++j)
        if (!std::isfinite(x[static_cast<size_t>(j)])) return j;
      return n;
    };
    EXPECT_EQ(refusal([&] { refuse_nonfinite_raw(raw, first_of); }), want);
    const CheckFileCase allowed = read_check_case(allowed_f, true, {}, true);
    EXPECT_EQ(refusal([&] { refuse_nonfinite_raw(allowed); }), "") << "--allow-nonfinite-inputs";
  }
}

}  // namespace
}  // namespace flashcheck
