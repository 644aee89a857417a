// How a campaign grows drawn cases for the device: `run --load` (hundreds of CTAs) and `run --big`
// (tensors past 2^31 elements). Growing must keep the tile-boundary residue the generator aimed at
// (issue #14), reach the size it promises (issue #11), and stay inside the kernel's declared space.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "runner/campaign.h"
#include "runner/registry.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

// Every built-in kernel's declared space (device kernels included: their capabilities are known
// without a GPU), so the property covers each kernel's own tile table.
std::vector<std::shared_ptr<const Variant>> kernels() {
  std::vector<std::shared_ptr<const Variant>> out;
  for (auto& v : Registry::builtin().all()) out.push_back(v);
  return out;
}

struct Drawn {
  std::string kernel;
  Case drawn;
  ProblemSpace space;
  CampaignOptions opt;
};

void showValue(const Drawn& d, std::ostream& os) {
  os << d.kernel << ": " << to_string(d.drawn.problem) << " (max_seq " << d.space.max_seq << ")";
}

rc::Gen<Drawn> gen_drawn(bool big) {
  return rc::gen::exec([big] {
    const auto all = kernels();
    const auto& v = all[*rc::gen::inRange<size_t>(0, all.size())];
    CampaignOptions opt;
    opt.max_seq = big ? 2048 : 4096;
    opt.max_work = big ? 1e13 : 1e10;
    opt.big = big;
    opt.load = !big;
    const ProblemSpace space = space_for(v->caps(), opt);
    RC_PRE(!space.dtypes.empty());
    const Case c = campaign_case(space, *rc::gen::arbitrary<uint64_t>(), *rc::gen::inRange<int64_t>(0, 100000));
    return Drawn{v->name(), c, space, opt};
  });
}

int64_t largest_tensor(const Problem& p) {
  return std::max({p.q_elems(), p.k_elems(), p.v_elems(), p.o_elems()});
}

RC_GTEST_PROP(CampaignGrowth, BigCasesPass2To31ElementsAndKeepTheirResidues, ()) {
  const Drawn d = *gen_drawn(true);
  const Case big = big_case(d.drawn, d.space, d.opt);
  const Problem &a = d.drawn.problem, &b = big.problem;
  RC_ASSERT(static_cast<double>(largest_tensor(b)) > d.opt.big_min_elems);
  RC_ASSERT(largest_tensor(b) > (int64_t{1} << 31));
  // Not far past it either: one batch more than needed at most.
  const Problem one_less = [&] { Problem q = b; q.batch -= 1; return q; }();
  RC_ASSERT(static_cast<double>(largest_tensor(one_less)) <= d.opt.big_min_elems);
  RC_ASSERT(b.seq_q <= std::max(a.seq_q, d.space.max_seq));
  RC_ASSERT(b.seq_kv <= std::max(a.seq_kv, d.space.max_seq));
  const TileShape t = tile_for(d.space, a.head_dim_qk);
  for (int64_t m : {t.block_q, t.block_kv}) {
    RC_ASSERT((b.seq_q - a.seq_q) % m == 0);
    RC_ASSERT((b.seq_kv - a.seq_kv) % m == 0);
  }
  RC_ASSERT(b.seq_kv - b.seq_q == a.seq_kv - a.seq_q);
  // Everything but the batch and the lengths is the drawn problem's.
  Problem same = b;
  same.batch = a.batch;
  same.seq_q = a.seq_q;
  same.seq_kv = a.seq_kv;
  RC_ASSERT(same == a);
}

RC_GTEST_PROP(CampaignGrowth, LoadCasesReachProductionLoadWithinTheirWork, ()) {
  const Drawn d = *gen_drawn(false);
  const Case grown = load_case(d.drawn, d.space, d.opt);
  const Problem &a = d.drawn.problem, &b = grown.problem;
  const double work = static_cast<double>(b.batch * b.heads_q) * static_cast<double>(b.seq_q) *
                      static_cast<double>(b.seq_kv) * static_cast<double>(b.head_dim_qk + b.head_dim_v);
  RC_ASSERT(work <= std::max(d.opt.max_work, static_cast<double>(a.heads_q) * static_cast<double>(a.seq_q) *
                                                 static_cast<double>(a.seq_kv) * static_cast<double>(a.head_dim_qk + a.head_dim_v)));
  RC_ASSERT(b.seq_kv - b.seq_q == a.seq_kv - a.seq_q);
  const TileShape t = tile_for(d.space, a.head_dim_qk);
  RC_ASSERT((b.seq_q - a.seq_q) % t.block_q == 0);
  RC_ASSERT((b.seq_q - a.seq_q) % t.block_kv == 0);
}

// The memory estimate refuses what cannot fit before anything is allocated: it grows with every
// tensor, and a big bf16 case needs tens of GB (the device machine has 128 GiB, CI 8).
TEST(CampaignGrowth, HostMemoryEstimateCoversTheTensors) {
  Problem p{1, 4, 2, 1000, 1500, 128, 64, Causal::none, {}, DType::bf16};
  const double bytes = host_bytes_for(p, 16);
  const double tensors = 4.0 * static_cast<double>(p.q_elems() + p.k_elems() + p.v_elems() + p.o_elems());
  EXPECT_GE(bytes, tensors) << "at least the fp32 copies of q, k, v and o";
  Problem twice = p;
  twice.batch = 2;
  EXPECT_GT(host_bytes_for(twice, 16), 1.9 * bytes);
  Problem big = p;
  big.batch = 5000;  // o: 5000·4·1000·64 ≈ 1.3e9 elements
  EXPECT_GT(host_bytes_for(big, 16), 1e10);
}

}  // namespace
}  // namespace flashcheck
