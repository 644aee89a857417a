// The built-in kernels' backward passes (issue 23 item 6: mma_f16's FlashAttention-2 backward,
// wgmma_f16's on warpgroup MMA) on fixed shapes, through the backward campaign's own case
// (runner/backward_campaign.h run_backward_case: the kernel's forward writes O and LSE, dO from the
// seed, the gradients staged poisoned between canaries, judged against the fp64 backward oracle
// each apart, a deterministic backward repeated and compared bit for bit). Shapes cover every
// causal alignment, GQA, Sq ≠ Skv, lengths off the tiles, rows that see no key and keys no row
// sees. Without a GPU, or without a kernel with a backward, every test is SKIPPED.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runner/backward_campaign.h"
#include "runner/contiguous_args.h"
#include "runner/device.h"
#include "runner/registry.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

class KernelBackward : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (auto why = device::unavailable()) GTEST_SKIP() << *why;
    v_ = Registry::builtin().find(GetParam());
    if (!v_) GTEST_SKIP() << GetParam() << " is not in this build";
    if (auto why = v_->unavailable()) GTEST_SKIP() << *why;
    if (!v_->backward_caps()) GTEST_SKIP() << GetParam() << " has no backward pass";
  }
  // Every row judged (max_rows past any length here); the failure's text names the case. The seed
  // is moved on to one that runs the mode asked for (seed_in_mode: the campaign's choice),
  // so each test covers both modes of a kernel that has two.
  ::testing::AssertionResult passes(const Problem& p, uint64_t seed, bool deterministic) const {
    if (v_->backward_caps()->deterministic) seed = seed_in_mode(seed, deterministic);
    const CaseOutcome o = run_backward_case(*v_, Case{p, Dist::normal, seed}, int64_t{1} << 20);
    if (o.skipped) return ::testing::AssertionFailure() << "skipped: " << *o.skipped << "\n  " << to_string(p);
    if (!o.passed) return ::testing::AssertionFailure() << to_text(o) << "\n  seed " << seed;
    return ::testing::AssertionSuccess();
  }
  std::vector<int64_t> dims() const {
    const auto& d = v_->backward_caps()->head_dims;
    return d.empty() ? v_->caps().head_dims : d;
  }
  std::vector<DType> dtypes() const {
    const auto& t = v_->backward_caps()->dtypes;
    return t.empty() ? v_->caps().dtypes : t;
  }
  std::shared_ptr<Variant> v_;
};

Problem plain(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv, int64_t d, Causal c, DType t) {
  Problem p;
  p.batch = b, p.heads_q = hq, p.heads_kv = hkv, p.seq_q = sq, p.seq_kv = skv, p.head_dim_qk = p.head_dim_v = d;
  p.causal = c, p.dtype = t;
  return p;
}

// Every causal alignment, on lengths on and off the 64-row and 128-key tiles, Sq < Skv and Sq > Skv (rows that
// see no key under bottom-right, keys no row sees under top-left), GQA groups of 1, 2 and 4.
TEST_P(KernelBackward, MatchesTheOracleOnEveryAlignment) {
  uint64_t salt = 0;
  for (DType t : dtypes())
    for (int64_t d : dims())
      for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
        for (auto [sq, skv] : {std::pair<int64_t, int64_t>{64, 64}, {100, 37}, {37, 150}, {1, 129}, {129, 1}, {200, 200}}) {
          const Problem p = plain(2, 4, (salt % 3 == 0) ? 4 : (salt % 3 == 1) ? 2 : 1, sq, skv, d, c, t);
          ++salt;
          EXPECT_TRUE(passes(p, testing::seed_for(salt), salt % 2 == 0));
        }
}

// GQA over a long group walk and several q tiles per KV tile; a long non-causal case with Sq ≠ Skv
// (in the deterministic mode the case itself repeats the backward and compares it bit for bit).
TEST_P(KernelBackward, SumsEachKvHeadOverItsGroup) {
  uint64_t salt = 100;
  for (DType t : dtypes())
    for (int64_t d : dims()) {
      for (bool det : {false, true}) {
        EXPECT_TRUE(passes(plain(1, 8, 2, 300, 260, d, Causal::bottom_right, t), testing::seed_for(++salt), det));
        EXPECT_TRUE(passes(plain(2, 4, 2, 333, 517, d, Causal::none, t), testing::seed_for(++salt), det));
      }
    }
}

// The backward called on a small plain problem's buffers after `edit` changes its arguments: it
// must refuse with std::invalid_argument naming `needle`, before reading anything.
void expect_refusal(const Variant& v, const Problem& p, const std::function<void(BackwardArgs&)>& edit,
                    const std::string& needle, const char* what) {
  void* buf = device::alloc(1 << 20);
  const KernelArgs a = contiguous_kernel_args(p, buf, buf, buf, buf, buf, device::stream());
  BackwardArgs g = contiguous_backward_args(p, buf, buf, buf, buf);
  edit(g);
  try {
    v.backward(p, a, g);
    ADD_FAILURE() << what << " was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  device::free(buf);
}

// A bad view is refused with the tensor named, not read: dq's rows misaligned.
TEST_P(KernelBackward, RefusesAMisalignedGradient) {
  const Problem p = plain(1, 1, 1, 64, 64, dims().front(), Causal::none, dtypes().front());
  expect_refusal(*v_, p, [](BackwardArgs& g) { g.dq.data = static_cast<char*>(g.dq.data) + 2; }, "dq", "a misaligned dq");
}

// A kernel without a deterministic mode refuses to be asked for one, naming it, rather than
// returning gradients that are not what the caller asked for.
TEST_P(KernelBackward, RefusesADeterministicModeItLacks) {
  if (v_->backward_caps()->deterministic) GTEST_SKIP() << GetParam() << " has a deterministic mode";
  const Problem p = plain(1, 1, 1, 64, 64, dims().front(), Causal::none, dtypes().front());
  expect_refusal(*v_, p, [](BackwardArgs& g) { g.deterministic = true; }, "deterministic", "a deterministic backward");
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelBackward, ::testing::Values("mma_f16", "wgmma_f16"));

}  // namespace
}  // namespace flashcheck
