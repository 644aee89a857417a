// The element pass on the device gives the host's summary bit for bit (verify/element_pass_device.h):
// the same chunk totals, max|r|, distinct-pair sketches, and so the same report. Runs on the GPU
// (element_pass_device_test, skipped without one) and on reference/'s host emulation of CUDA
// (element_pass_emulated_test), which executes the very same kernel code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>

#include "reference/gpu_oracle.h"
#include "reference/inputs.h"
#include "reference/mask.h"
#include "testing/test_seed.h"
#include "reference/naive.h"
#include "verify/check_file.h"
#include "verify/check_file_format.h"
#include "verify/criteria.h"
#include "verify/element_pass_device.h"
#include "verify/metrics.h"
#include "verify/tolerance.h"

namespace flashcheck {
namespace {

#ifdef FLASHCHECK_GPU_ORACLE_EMULATED
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

#define SKIP_WITHOUT_DEVICE()                                                                 \
  do {                                                                                        \
    if (!kEmulated) {                                                                         \
      if (auto why = gpu_oracle_unavailable()) GTEST_SKIP() << "no GPU oracle here: " << *why; \
    }                                                                                         \
  } while (0)

// Which outputs a synthetic case holds.
enum class Flavor {
  rounded,   // a correct kernel: the oracle plus fp32-sized noise, rounded to the dtype
  faulty,    // and poison, NaN, Inf of the wrong sign, non-zero empty rows, an overflowed baseline
  few_values,  // the oracle takes 40 values: few distinct pairs among many significant elements
};
const char* name(Flavor f) { return f == Flavor::rounded ? "rounded" : f == Flavor::faulty ? "faulty" : "few_values"; }

struct Case {
  Problem p;
  Expected ref;                // host arrays
  std::vector<float> kernel;   // [rows][dv]
  std::string what;
};

Problem problem(DType dt, int64_t b, int64_t hq, int64_t sq, int64_t skv, int64_t dv, Causal causal) {
  Problem p;
  p.batch = b, p.heads_q = hq, p.heads_kv = hq, p.seq_q = sq, p.seq_kv = skv, p.head_dim_qk = dv, p.head_dim_v = dv;
  p.dtype = dt;
  p.causal = causal;
  return p;
}

// Arrays drawn directly (no attention computed): the pass judges whatever it is given, and drawing
// them lets every path be planted on purpose. Rows that see no key hold oracle 0, as the oracle's.
Case draw(uint64_t seed, const Problem& p, Flavor f, bool flash) {
  Case c;
  c.p = p;
  std::ostringstream what;
  what << "seed " << seed << " " << name(f) << (flash ? " +flash" : "") << " " << to_string(p);
  c.what = what.str();
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n01(0, 1);
  std::uniform_real_distribution<double> u01(0, 1);
  const DType od = p.o_dtype();
  c.ref.oracle.rows = RowSet::all(p);
  const int64_t dv = p.head_dim_v, per_head = p.seq_q, all_rows = p.batch * p.heads_q * per_head;
  const size_t n = static_cast<size_t>(all_rows * dv);
  c.ref.oracle.o = uninit_big_vector<double>(n);
  c.ref.oracle.lse.assign(static_cast<size_t>(all_rows), 0.0);
  c.ref.baseline.resize(n);
  if (flash) c.ref.flash_baseline.resize(n);
  c.kernel.resize(n);
  std::vector<double> values(40);
  for (double& v : values) v = n01(g);
  const double spacing = unit_roundoff(od);
  for (int64_t r = 0; r < all_rows; ++r) {
    const bool empty = visible_range(p, 0, r % per_head).empty();
    for (int64_t col = 0; col < dv; ++col) {
      const size_t e = static_cast<size_t>(r * dv + col);
      double o = empty ? 0.0 : f == Flavor::few_values ? values[g() % values.size()] : n01(g) * (1 + 3 * u01(g));
      if (!empty && u01(g) < 0.05) o *= 1e-3;  // near-zero elements: compared, not significant
      c.ref.oracle.o[e] = o;
      auto noisy = [&](double scale) { return round_to(od, static_cast<float>(o + scale * spacing * n01(g) * std::fabs(o))); };
      c.kernel[e] = f == Flavor::few_values ? round_to(od, static_cast<float>(o)) : noisy(0.6);
      c.ref.baseline[e] = f == Flavor::few_values ? round_to(od, static_cast<float>(o)) : noisy(0.5);
      if (flash) c.ref.flash_baseline[e] = noisy(0.7);
      if (empty) c.kernel[e] = c.ref.baseline[e] = 0.0f;
    }
  }
  if (f == Flavor::faulty) {
    auto at = [&] { return static_cast<size_t>(g() % n); };
    for (int i = 0; i < 20; ++i) c.kernel[at()] = poison_value(od);
    for (int i = 0; i < 20; ++i) c.kernel[at()] = NAN;
    for (int i = 0; i < 5; ++i) {  // the oracle's own non-finite values, matched and mismatched
      const size_t e = at();
      c.ref.oracle.o[e] = INFINITY;
      c.kernel[e] = i % 2 ? INFINITY : -INFINITY;
    }
    for (int i = 0; i < 10; ++i) c.kernel[at()] = 7.5f;  // large errors: the worst element moves
    for (int i = 0; i < 3; ++i) {  // an overflowed baseline where elements are compared: rows that see keys
      size_t e = at();
      while (visible_range(p, 0, static_cast<int64_t>(e) / dv % per_head).empty() || !std::isfinite(c.ref.oracle.o[e])) e = at();
      c.ref.baseline[e] = INFINITY;
    }
    for (int64_t r = 0; r < all_rows; ++r)  // some rows that see no key written non-zero
      if (visible_range(p, 0, r % per_head).empty() && g() % 4 == 0) c.kernel[static_cast<size_t>(r * dv)] = 0.25f;
  }
  return c;
}

// The same Expected with its O and baselines uploaded, as make_expected leaves them resident.
Expected resident_copy(const Expected& host) {
  Expected d;
  d.oracle.rows = host.oracle.rows;
  d.oracle.lse = host.oracle.lse;
  d.score_bound = host.score_bound;
  d.flash_baseline = host.flash_baseline;
  auto r = std::make_shared<ResidentExpected>();
  r->oracle_o = DeviceArray(host.oracle.o.size() * sizeof(double));
  r->oracle_o.upload(host.oracle.o.data(), host.oracle.o.size() * sizeof(double));
  r->baseline = DeviceArray(host.baseline.size() * sizeof(float));
  r->baseline.upload(host.baseline.data(), host.baseline.size() * sizeof(float));
  if (!host.flash_baseline.empty()) {
    r->flash_baseline = DeviceArray(host.flash_baseline.size() * sizeof(float));
    r->flash_baseline.upload(host.flash_baseline.data(), host.flash_baseline.size() * sizeof(float));
  }
  d.resident = std::move(r);
  return d;
}

uint64_t bits_of(double x) { return f64_bits(x); }

void expect_same_sketch(DistinctPairs& h, DistinctPairs& d, const char* which, const std::string& what) {
  EXPECT_EQ(h.exact(), d.exact()) << which << ": " << what;
  EXPECT_EQ(bits_of(h.distinct()), bits_of(d.distinct())) << which << ": " << h.distinct() << " vs " << d.distinct() << ", " << what;
  const auto& a = h.pairs();
  const auto& b = d.pairs();
  ASSERT_EQ(a.size(), b.size()) << which << ": " << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].hash, b[i].hash) << which << " pair " << i << ": " << what;
    ASSERT_EQ(bits_of(a[i].oracle), bits_of(b[i].oracle)) << which << " pair " << i << ": " << what;
    ASSERT_EQ(f32_bits(a[i].kernel), f32_bits(b[i].kernel)) << which << " pair " << i << ": " << what;
  }
}

void expect_same_summary(ElementSummary& h, ElementSummary& d, const std::string& what) {
  EXPECT_EQ(bits_of(h.max_ref), bits_of(d.max_ref)) << what;
  const ElementTotals &a = h.totals, &b = d.totals;
#define SAME_F(x) EXPECT_EQ(bits_of(a.x), bits_of(b.x)) << #x << ": " << a.x << " vs " << b.x << ", " << what
#define SAME_I(x) EXPECT_EQ(a.x, b.x) << #x << ": " << what
  SAME_F(xy); SAME_F(xx); SAME_F(yy); SAME_F(eager_xy); SAME_F(eager_xx); SAME_F(eager_yy);
  SAME_F(flash_xy); SAME_F(flash_xx); SAME_F(flash_yy); SAME_F(diff2); SAME_F(ref2); SAME_F(eager_diff2);
  SAME_F(flash_diff2); SAME_F(ulp_sum); SAME_F(max_abs); SAME_F(baseline_max_abs); SAME_F(worst_err);
  SAME_F(worst_o); SAME_F(nan_o); SAME_F(outside_o);
  SAME_I(ulp_max); SAME_I(ulp_count); SAME_I(significant); SAME_I(ulp_over_n); SAME_I(compared); SAME_I(unwritten);
  SAME_I(nan_mismatches); SAME_I(empty_row_violations); SAME_I(outside_contenders); SAME_I(worst_e); SAME_I(first_nan_e);
  SAME_I(first_outside_e);
  EXPECT_EQ(f32_bits(a.worst_k), f32_bits(b.worst_k)) << what;
  EXPECT_EQ(f32_bits(a.nan_k), f32_bits(b.nan_k)) << what;
#undef SAME_F
#undef SAME_I
  expect_same_sketch(h.evidence, d.evidence, "kernel pairs", what);
  expect_same_sketch(h.eager_evidence, d.eager_evidence, "eager baseline pairs", what);
  expect_same_sketch(h.flash_evidence, d.flash_evidence, "flash baseline pairs", what);
}

void check_case(const Case& c, bool gathered = false) {
  const Expected dev = resident_copy(c.ref);
  const uint64_t ulp_n = tolerance_for(c.p.dtype).ulp_n;
  ElementSummary h = host_element_pass(c.p, c.ref, c.kernel, ulp_n);
  std::optional<ElementSummary> on_device = device_element_pass(c.p, dev, c.kernel, ulp_n);
  ASSERT_TRUE(on_device.has_value()) << c.what;
  ElementSummary& d = *on_device;
  // Not vacuous: the case holds what it was drawn to hold.
  EXPECT_GT(h.totals.compared, 0) << c.what;
  EXPECT_GT(h.totals.significant, 0) << c.what;
  if (gathered) {
    EXPECT_GT(h.totals.significant, 4 * static_cast<int64_t>(DistinctPairs::kCapacity)) << c.what;
  }
  expect_same_summary(h, d, c.what);
  const CheckOptions opt{tolerance_for(c.p.dtype)};
  const Report rh = verify_output(c.p, c.ref, c.kernel, std::nullopt, opt);
  const Report rd = verify_output(c.p, dev, c.kernel, std::nullopt, opt);
  EXPECT_EQ(to_json(rh).dump(), to_json(rd).dump()) << c.what;
}

TEST(DevicePass, GivesTheHostsSummaryBitForBit) {
  SKIP_WITHOUT_DEVICE();
  const uint64_t seed = testing::seed_for(2601);
  // 2·8·288 rows of 64: 294,912 elements, past 4·16,384 significant ones (checked below), so the
  // sketches are gathered below a threshold (widened for few_values, whose distinct pairs are
  // few); bottom-right with Sq > Skv leaves 64 rows per head without a key.
  const Problem big = problem(DType::bf16, 2, 8, 288, 224, 64, Causal::bottom_right);
  const Problem small = problem(DType::f16, 1, 2, 40, 24, 32, Causal::bottom_right);
  const Problem f32 = problem(DType::f32, 1, 3, 130, 130, 64, Causal::top_left);
  uint64_t s = seed;
  for (Flavor f : {Flavor::rounded, Flavor::faulty, Flavor::few_values}) {
    check_case(draw(s++, big, f, false), true);
    check_case(draw(s++, small, f, false));
    check_case(draw(s++, f32, f, true));
  }
}

TEST(DevicePass, FaultsAreCountedNotJustMirrored) {
  // The comparison above would pass for two passes that both counted nothing: the device's own
  // counts of planted faults are checked against what was planted.
  SKIP_WITHOUT_DEVICE();
  const uint64_t seed = testing::seed_for(2602);
  const Case c = draw(seed, problem(DType::bf16, 1, 2, 96, 64, 32, Causal::bottom_right), Flavor::faulty, false);
  const Expected dev = resident_copy(c.ref);
  const std::optional<ElementSummary> on_device = device_element_pass(c.p, dev, c.kernel, tolerance_for(c.p.dtype).ulp_n);
  ASSERT_TRUE(on_device.has_value()) << c.what;
  const ElementSummary& d = *on_device;
  int64_t poison = 0, nonzero_empty = 0;
  for (size_t e = 0; e < c.kernel.size(); ++e) {
    poison += is_poison(c.p.o_dtype(), c.kernel[e]);
    const int64_t r = static_cast<int64_t>(e) / c.p.head_dim_v;
    nonzero_empty += visible_range(c.p, 0, r % c.p.seq_q).empty() && c.kernel[e] != 0.0f && !is_poison(DType::bf16, c.kernel[e]);
  }
  EXPECT_EQ(d.totals.unwritten, poison) << c.what;
  EXPECT_GT(poison, 0) << c.what;
  EXPECT_GE(d.totals.nan_mismatches, 1) << c.what;
  EXPECT_EQ(d.totals.empty_row_violations, nonzero_empty) << c.what;
  EXPECT_GE(d.totals.first_nan_e, 0) << c.what;
  EXPECT_TRUE(std::isinf(d.totals.baseline_max_abs)) << c.what;
}

TEST(DevicePass, TooManyCandidatesGoHomeAndAreJudgedTheSame) {
  // Few distinct pairs among many elements widen the gathering to every pair; past the cap the
  // pass gives up (nullopt) and verify_output judges the arrays brought home: the same report.
  SKIP_WITHOUT_DEVICE();
  const uint64_t seed = testing::seed_for(2604);
  const Case c = draw(seed, problem(DType::bf16, 2, 8, 288, 224, 64, Causal::bottom_right), Flavor::few_values, false);
  const Expected dev = resident_copy(c.ref);
  const uint64_t ulp_n = tolerance_for(c.p.dtype).ulp_n;
  set_max_candidates_for_tests(1000);
  const bool gave_up = !device_element_pass(c.p, dev, c.kernel, ulp_n).has_value();
  const CheckOptions opt{tolerance_for(c.p.dtype)};
  const Report rd = verify_output(c.p, dev, c.kernel, std::nullopt, opt);
  set_max_candidates_for_tests(int64_t{1} << 24);
  EXPECT_TRUE(gave_up) << c.what;
  EXPECT_EQ(to_json(verify_output(c.p, c.ref, c.kernel, std::nullopt, opt)).dump(), to_json(rd).dump()) << c.what;
  EXPECT_TRUE(device_element_pass(c.p, dev, c.kernel, ulp_n).has_value()) << c.what;
}

TEST(DevicePass, TakesOnlyBatchesWhoseSequencesAreAlike) {
  // The device asks sequence 0 which rows see no key: sequences of other lengths (varlen, seqused,
  // a paged cache's own lengths) and error maps stay on the host.
  Problem dense = problem(DType::bf16, 2, 2, 8, 16, 32, Causal::bottom_right);
  EXPECT_EQ(device_element_pass_unsupported(dense, false), nullptr);
  EXPECT_NE(device_element_pass_unsupported(dense, true), nullptr);
  Problem paged = dense;
  paged.page_size = 4;
  paged.seqlens_kv = {16, 4};
  EXPECT_NE(device_element_pass_unsupported(paged, false), nullptr);
  paged.seqlens_kv = {16, 16};
  EXPECT_EQ(device_element_pass_unsupported(paged, false), nullptr);
  Problem used = dense;
  used.seqused_kv = {16, 3};
  EXPECT_NE(device_element_pass_unsupported(used, false), nullptr);
  const std::vector<int64_t> rows = {0, 5};
  EXPECT_TRUE(same_rows_everywhere(RowSet::same(dense, rows)));
  EXPECT_FALSE(same_rows_everywhere(RowSet::per_sequence(dense, {{0, 5}, {1, 5}})));
}

TEST(DevicePass, JudgesAResidentExpectedAsTheHostJudgesItsCopy) {
  // End to end through make_expected: the GPU oracle's O left on the device against the same
  // oracle's O brought home, one real attention problem with a slightly wrong kernel.
  SKIP_WITHOUT_DEVICE();
  const uint64_t seed = testing::seed_for(2603);
  Problem p = problem(DType::bf16, 1, 2, 72, 80, 32, Causal::bottom_right);
  p.heads_kv = 1;
  const Inputs in = make_inputs(p, seed, Dist::normal);
  const RowSet rows = RowSet::all(p);
  const Expected home = make_expected(p, in, rows, OracleChoice::gpu, false);
  const Expected away = make_expected(p, in, rows, OracleChoice::gpu, true);
  ASSERT_TRUE(away.resident) << "seed " << seed;
  ASSERT_FALSE(home.resident);
  std::vector<float> kernel(home.oracle.o.size());
  std::mt19937_64 g(seed);
  for (size_t e = 0; e < kernel.size(); ++e)
    kernel[e] = round_to(DType::bf16, static_cast<float>(home.oracle.o[e] * (1 + 0x1p-9 * static_cast<double>(g() % 5))));
  const CheckOptions opt{tolerance_for(p.dtype)};
  const Report rh = verify_output(p, home, kernel, std::nullopt, opt);
  const Report rd = verify_output(p, away, kernel, std::nullopt, opt);
  EXPECT_EQ(to_json(rh).dump(), to_json(rd).dump()) << "seed " << seed;
  EXPECT_GT(rh.compared, 0);
}

// Inputs on the device (make_expected's InputsOnDevice: a check file's raw tensors) give the
// Expected the host's fp32 inputs give, bit for bit — oracle, baselines, score bounds, unresolved
// rows — and are widened on the host only for a step there: unresolved rows' contenders, the CPU
// flash baseline of a small problem, the CPU oracle.
void expect_same_expected(Expected a, Expected b, const std::string& what) {
  if (a.resident) bring_home(a);
  if (b.resident) bring_home(b);
  auto same = [&](const auto& x, const auto& y, const char* name) {
    ASSERT_EQ(x.size(), y.size()) << name << ", " << what;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])), 0) << name << " differs, " << what;
  };
  same(a.oracle.o, b.oracle.o, "oracle O");
  same(a.oracle.lse, b.oracle.lse, "oracle LSE");
  same(a.baseline, b.baseline, "baseline");
  same(a.flash_baseline, b.flash_baseline, "flash baseline");
  same(a.score_bound, b.score_bound, "score bounds");
  ASSERT_EQ(a.unresolved.size(), b.unresolved.size()) << what;
  for (size_t i = 0; i < a.unresolved.size(); ++i) {
    EXPECT_EQ(a.unresolved[i].index, b.unresolved[i].index) << what;
    EXPECT_EQ(a.unresolved[i].contenders, b.unresolved[i].contenders) << what;
    same(a.unresolved[i].lo, b.unresolved[i].lo, "an unresolved row's low values");
    same(a.unresolved[i].hi, b.unresolved[i].hi, "an unresolved row's high values");
  }
}

TEST(DevicePass, InputsOnTheDeviceGiveTheSameExpected) {
  SKIP_WITHOUT_DEVICE();
  const uint64_t seed = testing::seed_for(2604);
  struct Run {
    DType dt;
    Dist dist;
    OracleChoice oracle;
    bool keep;
    bool widens;  // whether a step on the host needs the fp32 inputs
  };
  // A small problem's flash baseline runs on the host (so it widens, once), as do large inputs'
  // unresolved rows and the CPU oracle; on a device, one past kGpuOracleWork (no flash baseline)
  // never widens.
  std::vector<Run> runs = {{DType::bf16, Dist::normal, OracleChoice::gpu, true, true},
                           {DType::bf16, Dist::large, OracleChoice::gpu, false, true},
                           {DType::bf16, Dist::outlier_keys, OracleChoice::cpu, false, true}};
  if (!kEmulated) runs.push_back({DType::bf16, Dist::normal, OracleChoice::automatic, true, false});
  for (const Run& run : runs) {
    Problem p = problem(run.dt, 2, 4, 90, 70, 40, Causal::bottom_right);
    if (!run.widens) p = problem(run.dt, 1, 16, 2048, 2048, 128, Causal::none);  // 1.7e10 multiply-adds
    p.heads_kv = 2;
    p.head_dim_qk = run.widens ? 48 : 128;
    Inputs in = make_inputs(p, seed, run.dist);
    if (run.dist == Dist::large)  // keys in equal pairs: huge scores whose max always ties (unresolved rows)
      for (size_t r = 1; r < in.k.size() / static_cast<size_t>(p.head_dim_qk); r += 2)
        std::copy_n(in.k.begin() + static_cast<std::ptrdiff_t>((r - 1) * p.head_dim_qk), p.head_dim_qk,
                    in.k.begin() + static_cast<std::ptrdiff_t>(r * p.head_dim_qk));
    const std::string what = "seed " + std::to_string(seed) + " " + std::string(to_string(run.dt)) + " " +
                             std::string(to_string(run.dist));
    const RowSet rows = RowSet::all(p);
    const Expected host = make_expected(p, in, rows, run.oracle, run.keep);
    const DeviceInputs dev = upload_device_inputs(p, in);
    Inputs lazy = in;
    lazy.q.clear(), lazy.k.clear(), lazy.v.clear();
    int widened = 0;
    const InputsOnDevice on_device{&dev, [&] {
                                     ++widened;
                                     lazy.q = in.q, lazy.k = in.k, lazy.v = in.v;
                                   }};
    const Expected away = make_expected(p, lazy, rows, run.oracle, run.keep, on_device);
    EXPECT_EQ(widened, run.widens ? 1 : 0) << what;
    if (run.dist == Dist::large) {
      EXPECT_FALSE(host.unresolved.empty()) << what << ": no unresolved rows to compare";
    }
    expect_same_expected(host, away, what);
  }
}

// `check` end to end with the GPU oracle: a file's 16-bit inputs go to the device as read
// (check_file.cpp), and the report is the plain read's judged by the same oracle; a NaN among them
// is refused with the plain read's message, and checked like it when allowed.
TEST(DevicePass, ACheckFilesInputsOnTheDeviceGiveThePlainReadsReport) {
  SKIP_WITHOUT_DEVICE();
  const uint64_t seed = testing::seed_for(2605);
  std::mt19937_64 g(seed);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("fc_raw_" + std::to_string(seed));
  std::filesystem::create_directories(dir);
  for (int trial = 0; trial < 3; ++trial) {
    Problem p = problem(trial == 1 ? DType::f16 : DType::bf16, 2, 4, 72, 80, 32, Causal::bottom_right);
    p.heads_kv = 2;
    Inputs in = make_inputs(p, g(), Dist::normal);
    const std::string what = "seed " + std::to_string(seed) + " trial " + std::to_string(trial);
    const OracleResult truth = naive_attention(p, in);
    std::vector<float> o(truth.o.size());
    for (size_t e = 0; e < o.size(); ++e)
      o[e] = round_to(p.dtype, static_cast<float>(truth.o[e] * (1 + 0x1p-9 * static_cast<double>(g() % 3))));
    std::vector<float> lse(truth.lse.begin(), truth.lse.end());
    if (trial == 2) in.v[g() % in.v.size()] = NAN;  // refused, or propagated when allowed
    const SafetensorsFile f = make_check_file(p, in, o, &lse);
    const std::filesystem::path path = dir / ("case" + std::to_string(trial) + ".safetensors");
    write_safetensors(path, f);
    for (bool allow : {false, true}) {
      CheckFileOptions opt;
      opt.oracle = OracleChoice::gpu;
      opt.allow_nonfinite_inputs = allow;
      opt.timings = true;  // its phases say which way the inputs and o went
      SafetensorsFile plain_f = f;
      std::string want_refusal, got_refusal;
      std::optional<Report> want;
      try {
        const CheckFileCase c = read_check_case(plain_f, allow);
        KernelOutput out{c.o, std::nullopt, std::nullopt, c.padding_written};
        if (c.lse) out.lse = *c.lse;
        want = judge(c.problem, c.inputs, out, c.declared, JudgeOptions{opt.max_rows, false, OracleChoice::gpu, false});
      } catch (const CannotTest& e) {
        want_refusal = e.what();
      }
      std::optional<CheckFileVerdict> got;
      try {
        got = check_file(path, opt);
      } catch (const CannotTest& e) {
        got_refusal = e.what();
      }
      EXPECT_EQ(got_refusal, want_refusal) << what << (allow ? " allowed" : "");
      ASSERT_EQ(got.has_value(), want.has_value()) << what;
      if (!got) continue;
      Report r = got->forward;
      std::string phases;  // one per line, as --timings names them
      for (const auto& [n, sec] : r.timings) phases += "\n  " + n;
      EXPECT_NE(phases.find("inputs to the device"), std::string::npos)
          << what << ": the inputs did not go to the device as read; phases:" << phases;
      EXPECT_NE(phases.find("kernel O (placed beside the oracle)"), std::string::npos)
          << what << ": o was not placed beside the oracle; phases:" << phases;
      r.timings.clear();
      r.repro = want->repro, r.notes = want->notes;
      EXPECT_EQ(to_json(r).dump(), to_json(*want).dump()) << what << (allow ? " allowed" : "");
      EXPECT_GT(r.compared, 0) << what;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flashcheck
