// DeviceInputs (reference/gpu_oracle.h): the oracle's and the baseline's calls given q, k and v on
// the device, gathered there piece by piece, return the host-packed calls' results bit for bit —
// every variant, sampled rows, many pieces, NaN, Inf and signalling NaNs among the inputs — and the
// input passes over them (the first NaN/Inf, row norms) give the host loops' answers. Built into
// gpu_oracle_test (a device; skipped without one) and gpu_oracle_emulated_test (every CI machine).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

#include "reference/dtype.h"
#include "reference/gpu_oracle.h"
#include "reference/gpu_oracle/detail.h"
#include "reference/gpu_oracle_test_util.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

using namespace gpu_oracle_test;

// Dense with leading empty rows (bottom-right, Sq > Skv) and GQA; every variant at once over a
// varlen, paged, shuffled cache with an empty and a one-token sequence; a head dim past 128 with
// Dv ≠ Dqk under top-left causal and signed ALiBi.
const char* const kDevice[] = {
    "b=2 hq=6 hkv=3 sq=700 skv=333 d=96 dv=80 causal=bottom_right dtype=bf16",
    "b=4 hq=8 hkv=2 sq=900,0,1,500 skv=1000,5,0,777 d=128 dv=96 causal=bottom_right dtype=f16 window=200,7 softcap=7 "
    "alibi=symmetric slopes=batch sinks=1 page=64 pages=shuffled",
    "b=3 hq=4 hkv=4 sq=513 skv=640 d=200 dv=136 causal=top_left dtype=bf16 alibi=signed",
};
const char* const kEmulatedShapes[] = {
    "b=2 hq=4 hkv=2 sq=200 skv=150 d=40 dv=40 causal=bottom_right dtype=bf16",
    "b=4 hq=4 hkv=2 sq=150,0,1,90 skv=170,5,0,130 d=32 dv=24 causal=bottom_right dtype=f16 window=40,3 softcap=7 "
    "alibi=symmetric slopes=batch sinks=1 page=16 pages=shuffled",
};

// A 16-bit pattern as the fp32 Inputs hold it (exactly).
float widened(DType d, uint16_t h) { return d == DType::bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h); }

// The 16-bit patterns of fp32 values the dtype holds.
std::vector<uint16_t> narrow16(DType d, const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = d == DType::bf16 ? f32_to_bf16_bits(x[i]) : f32_to_f16_bits(x[i]);
  return out;
}

// A problem's inputs as a file holds them (16-bit patterns) and as Inputs holds them (fp32).
struct Raw {
  std::vector<uint16_t> q, k, v;
};

// A signalling NaN in q, an Inf in k and a quiet NaN in v, at drawn places, in both forms: host
// packing quiets the first (narrow(widen(x))), and the device's gather must do the same.
std::string plant_nonfinite(const Problem& p, Inputs& in, Raw& raw, std::mt19937_64& g) {
  const uint16_t snan = p.dtype == DType::bf16 ? 0x7f81 : 0x7d01, inf = p.dtype == DType::bf16 ? 0xff80 : 0xfc00;
  const uint16_t qnan = p.dtype == DType::bf16 ? 0x7fc0 : 0x7e00;
  auto at = [&](std::vector<float>& x) { return std::uniform_int_distribution<size_t>(0, x.size() - 1)(g); };
  const size_t iq = at(in.q), ik = at(in.k), iv = at(in.v);
  in.q[iq] = widened(p.dtype, snan), raw.q[iq] = snan;
  in.k[ik] = widened(p.dtype, inf), raw.k[ik] = inf;
  in.v[iv] = widened(p.dtype, qnan), raw.v[iv] = qnan;
  return " with a signalling NaN at q[" + std::to_string(iq) + "], -Inf at k[" + std::to_string(ik) + "], NaN at v[" +
         std::to_string(iv) + "]";
}

Inputs side_only(const Inputs& in) {
  Inputs s = in;
  s.q.clear(), s.k.clear(), s.v.clear();  // a call that read these instead of the device's would throw
  return s;
}

void expect_same_bits(const void* a, const void* b, size_t bytes, const char* what) {
  EXPECT_EQ(std::memcmp(a, b, bytes), 0) << what << " differs between device-gathered and host-packed inputs";
}

void compare_calls(const Problem& p, const Inputs& in, const DeviceInputs& dev, const RowSet& rows) {
  const Inputs side = side_only(in);
  const OracleResult host = naive_attention_gpu(p, in, rows);
  const OracleResult gathered = naive_attention_gpu(p, side, rows, &dev);
  ASSERT_EQ(gathered.o.size(), host.o.size());
  expect_same_bits(gathered.o.data(), host.o.data(), host.o.size() * 8, "the oracle's O");
  expect_same_bits(gathered.lse.data(), host.lse.data(), host.lse.size() * 8, "the oracle's LSE");
  const std::vector<float> base = dtype_baseline_gpu(p, in, rows);
  const std::vector<float> base_dev = dtype_baseline_gpu(p, side, rows, &dev);
  ASSERT_EQ(base_dev.size(), base.size());
  expect_same_bits(base_dev.data(), base.data(), base.size() * 4, "the baseline's O");
  const ResidentOracle ro = naive_attention_gpu_resident(p, side, rows, &dev);
  std::vector<double> o(host.o.size());
  ro.o.download(o.data(), o.size() * 8);
  expect_same_bits(o.data(), host.o.data(), o.size() * 8, "the resident oracle's O");
  expect_same_bits(ro.host.lse.data(), host.lse.data(), host.lse.size() * 8, "the resident oracle's LSE");
  const DeviceArray rb = dtype_baseline_gpu_resident(p, side, rows, &dev);
  std::vector<float> b(base.size());
  rb.download(b.data(), b.size() * 4);
  expect_same_bits(b.data(), base.data(), b.size() * 4, "the resident baseline's O");
}

TEST(GpuOracleDeviceInputs, GiveBitwiseTheHostPackedResults) {
  REQUIRE_GPU();
  std::mt19937_64 g(flashcheck::testing::seed_for(1131));
  int n = 0, split = 0;
  for (const char* shape : kEmulated ? std::span<const char* const>(kEmulatedShapes) : std::span<const char* const>(kDevice)) {
    const Problem p = parse_problem(shape);
    const uint64_t input_seed = g();
    Inputs in = make_inputs(p, input_seed, Dist::normal);
    std::string what = std::string("--problem \"") + shape + "\" --input-seed " + std::to_string(input_seed);
    Raw raw{narrow16(p.dtype, in.q), narrow16(p.dtype, in.k), narrow16(p.dtype, in.v)};
    if (++n % 2 == 0) what += plant_nonfinite(p, in, raw, g);
    SCOPED_TRACE(what);
    const DeviceInputs dev = upload_device_inputs(p.dtype, raw.q, raw.k, raw.v);  // as a file's bytes go
    std::vector<int64_t> some;
    for (int64_t i = 0; i < p.seq_q; ++i)
      if (i == 0 || i == p.seq_q - 1 || g() % 5 == 0) some.push_back(i);
    for (const RowSet& rows : {RowSet::all(p), RowSet::same(p, some)}) {
      gpu_oracle_detail::set_memory_budget(0);
      compare_calls(p, in, dev, rows);
      // Many pieces: each gathers its own rows, a (sequence, KV head)'s keys again where it spans
      // two. (The device's pieces hold the row lists too, so the two calls may split differently.)
      (void)naive_attention_gpu(p, side_only(in), rows, &dev);
      gpu_oracle_detail::set_memory_budget(gpu_oracle_detail::last_timing().device_bytes / 3);
      try {
        (void)naive_attention_gpu(p, side_only(in), rows, &dev);
        if (gpu_oracle_detail::last_timing().pieces > 1) ++split;
        compare_calls(p, in, dev, rows);
      } catch (const OracleDoesNotFit&) {  // a tile of these rows needs more than a third
      }
      gpu_oracle_detail::set_memory_budget(0);
    }
  }
  EXPECT_GE(split, 2) << "too few comparisons over several pieces";
}

TEST(GpuOracleDeviceInputs, FirstNonfiniteAndRowNormsAreTheHostLoops) {
  REQUIRE_GPU();
  std::mt19937_64 g(flashcheck::testing::seed_for(1132));
  for (DType d : {DType::bf16, DType::f16}) {
    const int64_t rows = kEmulated ? 97 : 5000, width = kEmulated ? 40 : 136;
    std::vector<uint16_t> x(static_cast<size_t>(rows * width));
    for (auto& h : x) {  // finite patterns of every exponent the dtype has
      do h = static_cast<uint16_t>(g());
      while (!std::isfinite(widened(d, h)));
    }
    const std::vector<uint16_t> none(1, 0);
    DeviceInputs dev = upload_device_inputs(d, x, none, none);
    const int64_t n = rows * width;
    EXPECT_EQ(first_nonfinite(dev.q, d, n), n) << to_string(d) << ": no NaN/Inf";
    // The host's norms, as verify/expected.cpp's score bounds compute them.
    const std::vector<double> norms = row_norms(dev.q, d, rows, width);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < width; ++c) s += static_cast<double>(widened(d, x[r * width + c])) * widened(d, x[r * width + c]);
      const double want = std::sqrt(s);
      ASSERT_EQ(std::memcmp(&norms[static_cast<size_t>(r)], &want, 8), 0) << to_string(d) << " row " << r << ": " << norms[r] << " vs " << want;
    }
    // The first of several non-finite elements, wherever they lie.
    const uint16_t bad[] = {d == DType::bf16 ? uint16_t{0x7f80} : uint16_t{0x7c00}, d == DType::bf16 ? uint16_t{0xffc1} : uint16_t{0xfe01},
                            d == DType::bf16 ? uint16_t{0x7f81} : uint16_t{0x7d01}};
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<uint16_t> y = x;
      int64_t first = n;
      for (int k = 0; k < 3; ++k) {
        const int64_t at = std::uniform_int_distribution<int64_t>(0, n - 1)(g);
        y[static_cast<size_t>(at)] = bad[k];
        first = std::min(first, at);
      }
      const DeviceInputs dy = upload_device_inputs(d, y, none, none);
      EXPECT_EQ(first_nonfinite(dy.q, d, n), first) << to_string(d) << " trial " << trial;
      EXPECT_EQ(first_nonfinite(dy.q, d, first), first) << "only the first `n` elements are read";
    }
  }
}

TEST(GpuOracleDeviceInputs, RefusesWhatDoesNotMatch) {
  REQUIRE_GPU();
  const Problem p = parse_problem("b=1 hq=2 hkv=1 sq=70 skv=90 d=32 dv=16 dtype=bf16");
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(1133), Dist::normal);
  const DeviceInputs dev = upload_device_inputs(p, in);
  const Inputs side = side_only(in);
  Problem f16 = p;
  f16.dtype = DType::f16;
  EXPECT_THROW((void)naive_attention_gpu(f16, side, RowSet::all(f16), &dev), std::invalid_argument);
  Problem longer = p;
  longer.seq_kv = 91;
  EXPECT_THROW((void)dtype_baseline_gpu(longer, side, RowSet::all(longer), &dev), std::invalid_argument);
  Problem f32 = p;
  f32.dtype = DType::f32;
  EXPECT_THROW((void)upload_device_inputs(f32, make_inputs(f32, 1, Dist::normal)), std::invalid_argument);
  Inputs odd = in;
  odd.q[3] = 1.0f + 0x1p-20f;  // not a bf16 value
  EXPECT_THROW((void)upload_device_inputs(p, odd), std::invalid_argument);
  EXPECT_THROW((void)first_nonfinite(dev.q, DType::bf16, p.q_elems() + 1), std::invalid_argument);
  EXPECT_THROW((void)row_norms(dev.k, DType::bf16, p.seq_kv + 1, p.head_dim_qk), std::invalid_argument);
}

// Both uploads fill the bytes asked for and nothing around them: past one staged piece (32 MiB),
// ending mid-piece, at an offset, and past the size from which the host range is locked for the
// copy (64 MiB), between bytes a plain upload wrote. In the emulation the lock is also refused
// (FCO_EMU_REFUSE_HOST_REGISTER, as a driver with no room refuses it): the pageable way must give
// the same bytes.
TEST(DeviceArrayUpload, FillsExactlyTheBytesAskedFor) {
  REQUIRE_GPU();
  const uint64_t seed = flashcheck::testing::seed_for(0xbe51de);
  std::mt19937_64 g(seed);
  auto uploads = [&](size_t mib, bool beside, const std::string& how) {
    const size_t bytes = (mib << 20) + 4096 + g() % 4096, offset = 64 + g() % 64, total = bytes + offset + 128;
    const std::string what = "seed " + std::to_string(seed) + ", " + std::to_string(bytes) + " bytes" +
                             (beside ? " beside" : "") + how;
    std::vector<uint8_t> host(bytes), back(total), before(total);
    for (auto& b : host) b = static_cast<uint8_t>(g());
    for (auto& b : before) b = static_cast<uint8_t>(g());
    DeviceArray a(total);
    a.upload(before.data(), total);
    if (beside)
      a.upload_beside(host.data(), bytes, offset);
    else
      a.upload(host.data(), bytes, offset);
    a.download(back.data(), total);
    EXPECT_EQ(std::memcmp(back.data(), before.data(), offset), 0) << what << ": bytes before the offset changed";
    EXPECT_EQ(std::memcmp(back.data() + offset, host.data(), bytes), 0) << what;
    EXPECT_EQ(std::memcmp(back.data() + offset + bytes, before.data() + offset + bytes, total - offset - bytes), 0)
        << what << ": bytes past the upload changed";
    EXPECT_THROW(a.upload_beside(host.data(), total - offset + 1, offset), std::invalid_argument);
    EXPECT_THROW(a.upload(host.data(), total - offset + 1, offset), std::invalid_argument);
  };
  for (const size_t mib : {32, 64})
    for (const bool beside : {false, true}) uploads(mib, beside, "");
#ifdef FLASHCHECK_GPU_ORACLE_EMULATED
  setenv("FCO_EMU_REFUSE_HOST_REGISTER", "1", 1);
  for (const bool beside : {false, true}) uploads(64, beside, ", the lock refused");
  unsetenv("FCO_EMU_REFUSE_HOST_REGISTER");
#endif
}

}  // namespace
}  // namespace flashcheck
