// A built-in kernel's backward pass (issue 23 item 6: mma_f16's FlashAttention-2 backward) against
// the fp64 backward oracle: the kernel's own forward writes O and LSE, a fresh dO is drawn, the
// gradients come back through poisoned buffers and are judged by verify_backward (each gradient
// apart); kernels that declare a deterministic backward repeat it and must give the same bits.
// Shapes cover every causal alignment, GQA, Sq ≠ Skv, lengths off the tiles, rows that see no key
// and keys no row sees. Without a GPU, or without a kernel with a backward, every test is SKIPPED.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/kernel.h"
#include "reference/dtype.h"
#include "reference/inputs.h"
#include "runner/contiguous_args.h"
#include "runner/device.h"
#include "testing/test_seed.h"
#include "verify/backward_criteria.h"
#include "verify/backward_expected.h"
#include "verify/backward_report.h"

namespace flashcheck {
namespace {

// One device buffer of a dtype's bits, freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : p(device::alloc(n == 0 ? 16 : n)), bytes(n) {}
  ~DeviceBuffer() { device::free(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

std::vector<uint8_t> poison(size_t bytes) { return std::vector<uint8_t>(bytes, 0xff); }  // NaN in bf16/f16/f32

std::vector<float> download(DType t, const DeviceBuffer& b, int64_t n) {
  std::vector<uint8_t> raw(static_cast<size_t>(n) * static_cast<size_t>(dtype_bytes(t)));
  device::to_host(raw.data(), b.p, raw.size());
  std::vector<float> out(static_cast<size_t>(n));
  decode(t, raw.data(), n, out.data());
  return out;
}

class KernelBackward : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (auto why = device::unavailable()) GTEST_SKIP() << *why;
    for (const KernelDef& d : registered_kernels())
      if (d.name == GetParam()) def_ = &d;
    if (!def_) GTEST_SKIP() << GetParam() << " is not in this build";
    if (!def_->backward) GTEST_SKIP() << GetParam() << " has no backward pass";
    if (device::compute_capability() < def_->caps.min_sm) GTEST_SKIP() << GetParam() << " needs sm_" << def_->caps.min_sm;
  }

  // Runs forward then backward on `p` (inputs and dO from `seed`), returns the verdict's text on
  // failure; `deterministic` is asked of the backward, and with `repeats` > 1 it runs again and
  // must give the same bits.
  ::testing::AssertionResult check(const Problem& p, uint64_t seed, bool deterministic, int repeats = 1) {
    const Inputs in = make_inputs(p, seed, Dist::normal);
    const DType t = p.dtype;
    const size_t eb = static_cast<size_t>(dtype_bytes(t));
    auto upload = [&](const std::vector<float>& x) {
      auto b = std::make_unique<DeviceBuffer>(x.size() * eb);
      std::vector<uint8_t> raw(x.size() * eb);
      encode(t, x.data(), static_cast<int64_t>(x.size()), raw.data());
      device::to_device(b->p, raw.data(), raw.size());
      return b;
    };
    auto q = upload(in.q), k = upload(in.k), v = upload(in.v);
    const std::vector<float> dout = make_d_out(p, seed);  // N(0,1) in o's dtype, as run --backward draws it
    auto d_out = upload(dout);
    DeviceBuffer o(static_cast<size_t>(p.o_elems()) * eb), lse(static_cast<size_t>(p.batch * p.heads_q * p.seq_q) * 4);
    DeviceBuffer dq(static_cast<size_t>(p.q_elems()) * eb), dk(static_cast<size_t>(p.k_elems()) * eb),
        dv(static_cast<size_t>(p.v_elems()) * eb);
    const KernelArgs a = contiguous_kernel_args(p, q->p, k->p, v->p, o.p, lse.p, device::stream());
    def_->launch2(p, a);
    BackwardArgs g = contiguous_backward_args(p, d_out->p, dq.p, dk.p, dv.p);
    g.deterministic = deterministic;
    std::vector<std::vector<float>> first;
    for (int r = 0; r < repeats; ++r) {
      for (DeviceBuffer* b : {&dq, &dk, &dv}) device::to_device(b->p, poison(b->bytes).data(), b->bytes);
      def_->backward(p, a, g);
      device::synchronize();
      std::vector<std::vector<float>> got{download(t, dq, p.q_elems()), download(t, dk, p.k_elems()), download(t, dv, p.v_elems())};
      if (r == 0) {
        first = got;
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(got[i].data(), first[i].data(), got[i].size() * sizeof(float)) != 0)
          return ::testing::AssertionFailure() << "d" << "qkv"[i] << " differs between two runs of a deterministic backward\n  "
                                               << to_string(p);
    }
    const BackwardExpected e = make_backward_expected(p, in, dout);
    const BackwardReport rep = verify_backward(p, e, KernelGradients{first[0], first[1], first[2], std::nullopt});
    if (!rep.pass())
      return ::testing::AssertionFailure() << to_text(rep) << "\n  " << to_string(p) << " seed " << seed
                                           << (deterministic ? " (deterministic)" : " (fast)");
    return ::testing::AssertionSuccess();
  }
  const KernelDef* def_ = nullptr;
};

Problem plain(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv, int64_t d, Causal c, DType t) {
  Problem p;
  p.batch = b, p.heads_q = hq, p.heads_kv = hkv, p.seq_q = sq, p.seq_kv = skv, p.head_dim_qk = p.head_dim_v = d;
  p.causal = c, p.dtype = t;
  return p;
}

std::vector<int64_t> dims_of(const KernelDef& d) {
  return d.backward_caps.head_dims.empty() ? d.caps.head_dims : d.backward_caps.head_dims;
}
std::vector<DType> dtypes_of(const KernelDef& d) {
  return d.backward_caps.dtypes.empty() ? d.caps.dtypes : d.backward_caps.dtypes;
}

// Every causal alignment, on lengths on and off the 64-row tiles, Sq < Skv and Sq > Skv (rows that
// see no key under bottom-right, keys no row sees under top-left), GQA groups of 1, 2 and 4; with
// determinism not asked for and, for a kernel that declares it, asked for (a kernel may take
// another path for each).
TEST_P(KernelBackward, MatchesTheOracleOnEveryAlignment) {
  uint64_t salt = 0;
  for (bool det : {false, true}) {
    if (det && !def_->backward_caps.deterministic) continue;
    for (DType t : dtypes_of(*def_))
      for (int64_t d : dims_of(*def_))
        for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
          for (auto [sq, skv] : {std::pair<int64_t, int64_t>{64, 64}, {100, 37}, {37, 150}, {1, 129}, {129, 1}, {200, 200}}) {
            const Problem p = plain(2, 4, (salt % 3 == 0) ? 4 : (salt % 3 == 1) ? 2 : 1, sq, skv, d, c, t);
            EXPECT_TRUE(check(p, testing::seed_for(++salt), det));
          }
  }
}

// GQA over a long group walk and several q tiles per KV tile, every dtype and dim.
TEST_P(KernelBackward, SumsEachKvHeadOverItsGroup) {
  uint64_t salt = 100;
  for (DType t : dtypes_of(*def_))
    for (int64_t d : dims_of(*def_))
      for (bool det : {false, true})
        if (!det || def_->backward_caps.deterministic)
          EXPECT_TRUE(check(plain(1, 8, 2, 300, 260, d, Causal::bottom_right, t), testing::seed_for(++salt), det));
}

// A kernel that declares a deterministic backward gives the same bits three times.
TEST_P(KernelBackward, DeterministicWhenDeclared) {
  if (!def_->backward_caps.deterministic) GTEST_SKIP() << GetParam() << " declares no deterministic backward";
  uint64_t salt = 200;
  for (int64_t d : dims_of(*def_))
    EXPECT_TRUE(check(plain(2, 4, 2, 333, 517, d, Causal::none, dtypes_of(*def_).front()), testing::seed_for(++salt), true, 3));
}

// A bad view is refused with the tensor named, not read: dq's rows misaligned.
TEST_P(KernelBackward, RefusesAMisalignedGradient) {
  const Problem p = plain(1, 1, 1, 64, 64, dims_of(*def_).front(), Causal::none, dtypes_of(*def_).front());
  DeviceBuffer buf(1 << 20);
  const KernelArgs a = contiguous_kernel_args(p, buf.p, buf.p, buf.p, buf.p, buf.p, device::stream());
  BackwardArgs g;
  g.dout = g.dk = g.dv = a.q;
  g.dq = TensorRef{static_cast<char*>(buf.p) + 2, 64 * p.head_dim_qk, p.head_dim_qk, 64 * p.head_dim_qk, 0};
  try {
    def_->backward(p, a, g);
    ADD_FAILURE() << "a misaligned dq was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dq"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelBackward, ::testing::Values("mma_f16"));

}  // namespace
}  // namespace flashcheck
