// decode_paged_f16 on the GPU against the CPU fp64 oracle (verify/judge.h, every row): random
// decode problems (Sq 1..16, GQA groups 1..8, B up to 16, pages of 16/64/256 and odd sizes, in
// order, shuffled and shared, empty caches, cache lengths on page, tile and split boundaries,
// packed queries and dense caches), one split forced, more splits than tiles, NaN/Inf inputs; and
// bitwise determinism over 20 runs. The buffers are staged here as the harness stages them
// (reference/storage.h): unused pages and slots NaN, outputs poisoned, so a read of an unused slot
// or a row left unwritten fails the judge. Without a GPU, or without CUDA: SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gpu/decode_paged_f16/launch.h"
#include "gpu/decode_paged_f16/tile_size.h"
#include "gpu/kernel.h"
#include "reference/dtype.h"
#include "reference/inputs.h"
#include "reference/storage.h"
#include "testing/test_seed.h"
#include "verify/judge.h"
#include "verify/metrics.h"

#if FLASHCHECK_HAVE_CUDA
#include <cuda_runtime.h>

#include "gpu/common/cuda_check.h"
#endif

namespace flashcheck {
namespace {

#if FLASHCHECK_HAVE_CUDA
std::optional<std::string> no_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return std::string("no CUDA device");
  }
  int major = 0;
  FC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < 8) return std::string("decode_paged_f16 needs sm_80 or newer");
  return std::nullopt;
}

struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const void* host, size_t bytes) {
    if (bytes == 0) return;
    FC_CUDA_CHECK(cudaMalloc(&p, bytes));
    FC_CUDA_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
};

// One problem's buffers on the device, in its storage layout, ready to launch again and again.
class Staged {
 public:
  Staged(const Problem& p, const Inputs& in) : p_(p), st_(p, in, p.layout == Layout::thd ? 3 : 0) {
    for (Tensor t : {Tensor::q, Tensor::k, Tensor::v}) {
      const std::vector<float>& logical = t == Tensor::q ? in.q : t == Tensor::k ? in.k : in.v;
      std::vector<float> storage(static_cast<size_t>(st_.elems(t)), std::numeric_limits<float>::quiet_NaN());
      st_.scatter(t, logical.data(), storage.data());
      std::vector<uint16_t> bits(storage.size());
      encode(p.dtype, storage.data(), static_cast<int64_t>(storage.size()), bits.data());
      in_[static_cast<int>(t)] = std::make_unique<DeviceBuffer>(bits.data(), bits.size() * 2);
    }
    o_ = std::make_unique<DeviceBuffer>(nullptr, 0);
    FC_CUDA_CHECK(cudaMalloc(&o_->p, static_cast<size_t>(st_.elems(Tensor::o)) * 2));
    lse_ = std::make_unique<DeviceBuffer>(nullptr, 0);
    FC_CUDA_CHECK(cudaMalloc(&lse_->p, static_cast<size_t>(st_.elems(Tensor::lse)) * 4));
    auto ints = [](const auto& v) { return std::vector<int32_t>(v.begin(), v.end()); };
    auto side = [&](const std::vector<int32_t>& v) { return std::make_unique<DeviceBuffer>(v.data(), v.size() * 4); };
    if (p.layout == Layout::thd) {
      cu_q_ = side(ints(st_.cu_q()));
      if (!p.paged()) cu_kv_ = side(ints(st_.cu_kv()));
    }
    if (!p.seqused_kv.empty()) used_ = side(ints(p.seqused_kv));
    if (p.paged()) {
      table_ = side(in.block_table);
      cache_ = side(ints(p.seqlens_kv));
    }
    auto ref = [&](Tensor t, void* data) {
      const RowStrides& s = st_.strides(t);
      return TensorRef{data, s.outer, s.seq, s.head, st_.elems(t)};
    };
    a_.q = ref(Tensor::q, in_[0]->p);
    a_.k = ref(Tensor::k, in_[1]->p);
    a_.v = ref(Tensor::v, in_[2]->p);
    a_.o = ref(Tensor::o, o_->p);
    a_.lse = ref(Tensor::lse, lse_->p);
    a_.cu_seqlens_q = cu_q_ ? static_cast<const int32_t*>(cu_q_->p) : nullptr;
    a_.cu_seqlens_kv = cu_kv_ ? static_cast<const int32_t*>(cu_kv_->p) : nullptr;
    a_.seqused_kv = used_ ? static_cast<const int32_t*>(used_->p) : nullptr;
    a_.block_table = table_ ? static_cast<const int32_t*>(table_->p) : nullptr;
    a_.cache_seqlens = cache_ ? static_cast<const int32_t*>(cache_->p) : nullptr;
    a_.num_pages = in.num_pages;
    a_.max_pages_per_seq = in.max_pages(p.batch);
  }

  // Poisons the outputs (flashcheck's pattern in o, NaN in lse), launches, and returns the raw
  // output bytes: o's 16-bit elements and lse's floats, in storage order.
  std::pair<std::vector<uint16_t>, std::vector<float>> run(const kernels::DecodePlanOverride& force) {
    const uint16_t poison = static_cast<uint16_t>(poison_bits(p_.dtype));
    std::vector<uint16_t> o(static_cast<size_t>(st_.elems(Tensor::o)), poison);
    std::vector<float> lse(static_cast<size_t>(st_.elems(Tensor::lse)), std::numeric_limits<float>::quiet_NaN());
    FC_CUDA_CHECK(cudaMemcpy(o_->p, o.data(), o.size() * 2, cudaMemcpyHostToDevice));
    FC_CUDA_CHECK(cudaMemcpy(lse_->p, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
    launch_decode_paged_f16(p_, a_, force);
    FC_CUDA_CHECK(cudaDeviceSynchronize());
    FC_CUDA_CHECK(cudaMemcpy(o.data(), o_->p, o.size() * 2, cudaMemcpyDeviceToHost));
    FC_CUDA_CHECK(cudaMemcpy(lse.data(), lse_->p, lse.size() * 4, cudaMemcpyDeviceToHost));
    return {std::move(o), std::move(lse)};
  }

  // The judge's verdict on one run's output (every row, the CPU oracle).
  Report judge_run(const Inputs& in, const kernels::DecodePlanOverride& force) {
    auto [o_bits, lse_raw] = run(force);
    std::vector<float> o_storage(o_bits.size());
    decode(p_.dtype, o_bits.data(), static_cast<int64_t>(o_bits.size()), o_storage.data());
    std::vector<float> o(static_cast<size_t>(p_.o_elems())), lse(static_cast<size_t>(p_.lse_elems()));
    st_.gather(Tensor::o, o_storage.data(), o.data());
    st_.gather(Tensor::lse, lse_raw.data(), lse.data());
    // Output elements outside every row (packed padding) must keep the poison.
    std::vector<char> covered(o_bits.size(), 0);
    st_.mark_covered(Tensor::o, covered);
    int64_t written = 0;
    const uint16_t poison = static_cast<uint16_t>(poison_bits(p_.dtype));
    for (size_t i = 0; i < o_bits.size(); ++i) written += !covered[i] && o_bits[i] != poison;
    KernelOutput out{o, std::span<const float>(lse), std::nullopt, written};
    Declared dec;
    const TileShape tile = p_.head_dim_qk == 64 ? TileShape{64, kernels::DecodeTraits<64>::kRows, kernels::DecodeTraits<64>::kBlockN}
                           : p_.head_dim_qk == 128 ? TileShape{128, kernels::DecodeTraits<128>::kRows, kernels::DecodeTraits<128>::kBlockN}
                                                   : TileShape{256, kernels::DecodeTraits<256>::kRows, kernels::DecodeTraits<256>::kBlockN};
    dec.tile_q = tile.block_q;
    dec.tile_kv = tile.block_kv;
    JudgeOptions opt;
    opt.max_rows = int64_t{1} << 20;
    opt.oracle = OracleChoice::cpu;
    return judge(p_, in, out, dec, opt);
  }

 private:
  Problem p_;
  Storage st_;
  std::unique_ptr<DeviceBuffer> in_[3], o_, lse_, cu_q_, cu_kv_, used_, table_, cache_;
  KernelArgs a_;
};
#define REQUIRE_GPU() \
  if (auto why = no_gpu()) GTEST_SKIP() << *why
#else
#define REQUIRE_GPU() GTEST_SKIP() << "built without CUDA"
#endif

// Random decode problem n: the classes the brief names cycle with n (so every run draws each of
// them: pages of 16, 64, 256 and odd sizes or a dense cache, B = 16, group 8, Sq = 16, packed
// queries, each causal mode, each page order, an empty cache, one split forced and many), and
// everything else is random: sizes, the other lengths (aimed at page, tile and split boundaries).
Problem random_decode(std::mt19937_64& rng, int n) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Problem p;
  p.batch = n % 8 == 0 ? 16 : pick(1, 15);
  p.heads_kv = pick(1, 2);
  p.heads_q = p.heads_kv * (n % 7 == 0 ? 8 : pick(1, 8));
  p.head_dim_qk = p.head_dim_v = std::vector<int64_t>{64, 128, 256}[static_cast<size_t>(pick(0, 2))];
  p.dtype = pick(0, 1) ? DType::bf16 : DType::f16;
  p.causal = n % 9 == 0 ? Causal::none : n % 9 == 1 ? Causal::top_left : Causal::bottom_right;
  const int64_t bn = p.head_dim_qk == 256 ? kernels::DecodeTraits<256>::kBlockN : kernels::DecodeTraits<128>::kBlockN;
  const int paging = n % 10;
  p.page_size = paging < 3 ? 16 : paging < 6 ? 64 : paging < 8 ? 256 : paging < 9 ? std::vector<int64_t>{1, 7, 48}[static_cast<size_t>(pick(0, 2))] : 0;
  const int64_t unit = p.page_size > 0 ? p.page_size : bn;
  auto length = [&](int64_t b) -> int64_t {
    if (b == 0 && n % 13 == 5) return 0;  // an empty cache
    switch (pick(0, 7)) {
      case 0: return 0;
      case 1: return pick(1, 3);
      case 2: return unit * pick(1, 8);                   // exactly whole pages
      case 3: return unit * pick(1, 8) + pick(-1, 1);     // one off a page boundary
      case 4: return bn * pick(1, 24);                    // on a tile (and split) boundary
      default: return pick(1, 1500);
    }
  };
  const bool packed = n % 6 == 1;
  if (packed) {
    p.layout = Layout::thd;
    for (int64_t b = 0; b < p.batch; ++b) p.seqlens_q.push_back(pick(0, 16));
  } else {
    p.layout = n % 4 == 3 ? Layout::bshd : Layout::bhsd;
    p.seq_q = n % 11 == 3 ? 16 : pick(1, 16);
  }
  if (p.page_size > 0) {
    p.page_order = std::vector<PageOrder>{PageOrder::identity, PageOrder::shuffled, PageOrder::shared}[static_cast<size_t>(n % 3)];
    for (int64_t b = 0; b < p.batch; ++b) p.seqlens_kv.push_back(std::max<int64_t>(length(b), 0));
  } else if (packed) {
    for (int64_t b = 0; b < p.batch; ++b) p.seqlens_kv.push_back(std::max<int64_t>(length(b), 0));
  } else {
    p.seq_kv = std::max<int64_t>(length(1), 1);
    if (pick(0, 1))
      for (int64_t b = 0; b < p.batch; ++b) p.seqused_kv.push_back(std::min(p.seq_kv, std::max<int64_t>(length(b), 0)));
  }
  normalize(p);
  validate(p);
  return p;
}

// The random test's cases: a problem and the split count to force (0: planned; 1: the combine of a
// single partial; 2..40: often more splits than tiles, so empty splits among full ones).
std::vector<std::pair<Problem, kernels::DecodePlanOverride>> random_cases(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<Problem, kernels::DecodePlanOverride>> out;
  for (int i = 0; i < n; ++i) {
    Problem p = random_decode(rng, i);
    const int64_t splits = i % 4 < 2 ? 0 : i % 4 == 2 ? 1 : std::uniform_int_distribution<int64_t>(2, 40)(rng);
    out.emplace_back(std::move(p), kernels::DecodePlanOverride{splits});
  }
  return out;
}
constexpr int kRandomCases = 120;

struct Tally {
  int run = 0, failed = 0;
};

void expect_passes(const Problem& p, uint64_t seed, Dist dist, const kernels::DecodePlanOverride& force, Tally& tally) {
#if FLASHCHECK_HAVE_CUDA
  const Inputs in = make_inputs(p, seed, dist);
  Staged s(p, in);
  const Report r = s.judge_run(in, force);
  ++tally.run;
  if (!r.pass()) ++tally.failed;
  EXPECT_TRUE(r.pass()) << "splits " << (force.num_splits ? std::to_string(force.num_splits) : std::string("planned"))
                        << ", dist " << to_string(dist) << ", input seed " << seed << "\n  " << to_string(p) << "\n"
                        << to_text(r);
#else
  (void)p, (void)seed, (void)dist, (void)force, (void)tally;
#endif
}

// The random draw itself, on any machine: valid problems (validate() runs in random_decode), and
// every class the brief names is drawn within the 120 cases the GPU test takes.
TEST(DecodePagedF16, RandomDrawCoversTheDecodeClasses) {
  int page16 = 0, page64 = 0, page256 = 0, odd_page = 0, dense = 0, shared = 0, shuffled = 0, empty = 0, packed = 0,
      group8 = 0, sq16 = 0, b16 = 0, partial_last = 0;
  int forced_one = 0, forced_many = 0;
  for (const auto& [p, force] : random_cases(flashcheck::testing::seed_for(2201), kRandomCases)) {
    forced_one += force.num_splits == 1;
    forced_many += force.num_splits > 1;
    page16 += p.page_size == 16;
    page64 += p.page_size == 64;
    page256 += p.page_size == 256;
    odd_page += p.page_size > 0 && p.page_size != 16 && p.page_size != 64 && p.page_size != 256;
    dense += p.page_size == 0;
    shared += p.paged() && p.page_order == PageOrder::shared;
    shuffled += p.paged() && p.page_order == PageOrder::shuffled;
    packed += p.layout == Layout::thd;
    group8 += p.group() == 8;
    sq16 += p.seq_q == 16;
    b16 += p.batch == 16;
    for (int64_t b = 0; b < p.batch; ++b) {
      empty += p.skv(b) == 0;
      partial_last += p.paged() && p.skv(b) % p.page_size != 0;
    }
  }
  std::printf("pages 16/64/256/odd/dense %d/%d/%d/%d/%d, shared %d, shuffled %d, empty caches %d, partial last pages %d, "
              "packed %d, group 8 %d, Sq 16 %d, B 16 %d, one split %d, 2-40 splits %d\n",
              page16, page64, page256, odd_page, dense, shared, shuffled, empty, partial_last, packed, group8, sq16, b16,
              forced_one, forced_many);
  for (int c : {page16, page64, page256, odd_page, dense, shared, shuffled, empty, partial_last, packed, group8, sq16, b16,
                forced_one, forced_many})
    EXPECT_GT(c, 0);
}

TEST(DecodePagedF16, RandomDecodeProblemsAgreeWithTheOracle) {
  REQUIRE_GPU();
  const uint64_t seed = flashcheck::testing::seed_for(2201);
  std::printf("problem seed %llu\n", static_cast<unsigned long long>(seed));
  Tally tally;
  int n = 0;
  for (const auto& [p, force] : random_cases(seed, kRandomCases)) {
    const Dist dist = n % 7 == 6 ? Dist::nonfinite : n % 7 == 5 ? Dist::large : Dist::normal;
    expect_passes(p, seed + static_cast<uint64_t>(n), dist, force, tally);
    ++n;
  }
  std::printf("%d random decode problems, %d failed\n", tally.run, tally.failed);
}

// Shapes by hand: every sequence empty, Sq > Skv under bottom-right (rows that see nothing), a
// cache of exactly one key, pages shared by every sequence, the last page holding one key, a
// long cache over many splits, and each head dim with group 8 and 16 queries (two query chunks).
TEST(DecodePagedF16, EdgeShapesAgreeWithTheOracle) {
  REQUIRE_GPU();
  const std::vector<std::string> lines{
      "b=3 hq=8 hkv=2 sq=4 skv=0,0,0 page=16 pages=shuffled causal=bottom_right",
      "b=2 hq=4 hkv=1 sq=16 skv=5,0 page=16 pages=identity causal=bottom_right",
      "b=2 hq=4 hkv=4 sq=1 skv=1,1 page=64 pages=shared causal=bottom_right",
      "b=4 hq=16 hkv=2 sq=3 skv=257,256,255,513 page=256 pages=shared causal=bottom_right",
      "b=1 hq=8 hkv=1 sq=1 skv=20000 page=64 pages=shuffled causal=bottom_right",
      "b=2 hq=16 hkv=2 sq=16 skv=700,129 page=16 pages=shuffled causal=bottom_right",
      "b=16 hq=32 hkv=8 sq=1 skv=1000,1,0,64,65,63,128,2000,17,300,16,15,900,512,511,513 page=64 pages=shared "
      "causal=bottom_right",
      "b=3 hq=4 hkv=2 sq=2,0,16 skv=100,50,0 page=16 pages=shuffled causal=bottom_right layout=thd",
      "b=2 hq=6 hkv=2 sq=9 skv=400 causal=bottom_right used=399,0",
      "b=2 hq=6 hkv=3 sq=5 skv=333 causal=top_left layout=bshd",
  };
  Tally tally;
  int n = 0;
  for (const std::string& line : lines)
    for (int64_t d : {64, 128, 256})
      for (DType dt : {DType::bf16, DType::f16}) {
        Problem p = parse_problem(line + " d=" + std::to_string(d));
        p.dtype = dt;
        for (int64_t splits : {int64_t{0}, int64_t{1}, int64_t{7}})
          expect_passes(p, flashcheck::testing::seed_for(2210 + n++), Dist::normal, {splits}, tally);
      }
  std::printf("%d edge cases, %d failed\n", tally.run, tally.failed);
}

// Bitwise determinism: the same inputs 20 times, O and LSE identical to the bit, with the splits
// planned (a long cache over many splits) and forced (many empty splits among full ones).
TEST(DecodePagedF16, TwentyRunsAreBitwiseIdentical) {
  REQUIRE_GPU();
#if FLASHCHECK_HAVE_CUDA
  const std::vector<std::pair<std::string, int64_t>> cases{
      {"b=1 hq=32 hkv=8 sq=1 skv=30000 d=128 page=64 pages=shuffled causal=bottom_right dtype=bf16", 0},
      {"b=5 hq=16 hkv=2 sq=4 skv=3000,1,0,700,64 d=256 page=16 pages=shared causal=bottom_right dtype=f16", 0},
      {"b=2 hq=8 hkv=1 sq=16 skv=2000,333 d=64 page=256 pages=shuffled causal=bottom_right dtype=bf16", 37},
  };
  int n = 0;
  for (const auto& [line, splits] : cases) {
    const Problem p = parse_problem(line);
    const uint64_t seed = flashcheck::testing::seed_for(2220 + n++);
    const Inputs in = make_inputs(p, seed);
    Staged s(p, in);
    const auto first = s.run({splits});
    int differ = 0;
    for (int r = 1; r < 20; ++r) {
      const auto again = s.run({splits});
      differ += std::memcmp(again.first.data(), first.first.data(), first.first.size() * 2) != 0 ||
                std::memcmp(again.second.data(), first.second.data(), first.second.size() * 4) != 0;
    }
    EXPECT_EQ(differ, 0) << differ << " of 19 repeats differ from the first run: " << line << " (input seed " << seed << ")";
    // And the output is right, not merely repeatable.
    Tally tally;
    expect_passes(p, seed, Dist::normal, {splits}, tally);
  }
#endif
}

}  // namespace
}  // namespace flashcheck
