#include "reference/replica_backward.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/mask.h"
#include "reference/replica_numerics.h"
#include "reference/score_mod.h"
#include "reference/sequences.h"

namespace flashcheck {

namespace {
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMapF = Eigen::Map<const MatF>;
using MapF = Eigen::Map<MatF>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLog2eF = static_cast<float>(kLog2e);
constexpr double kParallelWork = 1 << 22;  // (query, key) pairs × (Dqk + Dv) from which tasks run in parallel

// The forward replica's per-head constants (replica_numerics.h: P is recomputed exactly as the
// forward computed it), plus what the accumulated dQ and dK are multiplied by at the end: the
// (signed) softmax scale, with an fp8 problem's descale of the other operand (dQ = scale·Σ dS·k,
// k = k_raw·descale_k). v_descale: dP = dO·V_raw times it.
struct HeadNumerics : replica_detail::HeadNumerics {
  float dq_mul = 1, dk_mul = 1;
};

HeadNumerics head_numerics(const Problem& p, const Inputs& in, const BackwardReplicaConfig& cfg, int64_t b, int64_t h) {
  HeadNumerics n;
  static_cast<replica_detail::HeadNumerics&>(n) = replica_detail::head_numerics(p, in, cfg.use_exp2, cfg.alibi_lse, b, h);
  const float scale = static_cast<float>(p.softmax_scale());
  float dq = 1, dk = 1;
  if (is_fp8(p.dtype)) {
    const int64_t hk = p.kv_head(h);
    dq = static_cast<float>(descale_of(p, in.descale_q, b, hk));
    dk = static_cast<float>(descale_of(p, in.descale_k, b, hk));
  }
  n.dq_mul = scale * dk;
  n.dk_mul = scale * dq;
  return n;
}

void check_size(const char* name, size_t have, int64_t need) {
  if (static_cast<int64_t>(have) != need)
    throw std::invalid_argument(std::string("replica_attention_backward: ") + name + " has " + std::to_string(have) +
                                " values; the problem needs " + std::to_string(need));
}

class BackwardReplica {
 public:
  BackwardReplica(const Problem& p, const Inputs& in, std::span<const float> o, std::span<const float> lse,
                  std::span<const float> d_out, const BackwardReplicaConfig& cfg)
      : p_(p), in_(in), o_(o), lse_(lse), dout_(d_out), cfg_(cfg), seqs_(p), dqk_(p.head_dim_qk), dv_(p.head_dim_v),
        cdt_(gradient_dtype(p)) {}

  ReplicaGradients run() {
    row_deltas();
    dq_acc_.assign(static_cast<size_t>(p_.q_elems()), 0.0f);
    r_.dk.assign(static_cast<size_t>(p_.k_elems()), 0.0f);
    r_.dv.assign(static_cast<size_t>(p_.v_elems()), 0.0f);
    r_.p_colsum.assign(static_cast<size_t>(seqs_.total_kv() * p_.heads_kv), 0.0f);
    // One task per (sequence, KV head): it owns its keys' dK and dV and its query heads' dQ rows,
    // so no two tasks write one element and the sums run in the order stated in the header.
    const int64_t units = p_.batch * p_.heads_kv;
    // Small problems run on one thread: a parallel region's start and barrier cost more than their
    // work, and far more on a loaded machine where a waiting thread spins against the others (the
    // oracle's rule, reference/naive_backward.cpp). Results do not depend on it: tasks own what they write.
    double work = 0;
    for (int64_t b = 0; b < p_.batch; ++b) work += static_cast<double>(seqs_.sq(b)) * static_cast<double>(seqs_.skv(b));
    work *= static_cast<double>(p_.heads_q * (dqk_ + dv_));
#pragma omp parallel for schedule(dynamic, 1) if (work >= kParallelWork && units > 1)
    for (int64_t u = 0; u < units; ++u) kv_head(u / p_.heads_kv, u % p_.heads_kv);
    r_.dq.resize(dq_acc_.size());
    for (int64_t b = 0; b < p_.batch; ++b)
      for (int64_t h = 0; h < p_.heads_q; ++h) {
        const float mul = cfg_.fault == BackwardFault::dq_unscaled ? 1.0f : head_numerics(p_, in_, cfg_, b, h).dq_mul;
        const size_t at = static_cast<size_t>(seqs_.q_row(b, h, 0)), n = static_cast<size_t>(seqs_.sq(b) * dqk_);
        for (size_t e = at; e < at + n; ++e) r_.dq[e] = out(dq_acc_[e] * mul);
      }
    sink_grads();
    return std::move(r_);
  }

 private:
  // D_i = Σ_c dO_ic · O_ic in fp32, from the O the forward wrote (already in the output dtype):
  // the preprocessing kernel of FlashAttention 2's backward.
  void row_deltas() {
    delta_.assign(static_cast<size_t>(p_.lse_elems()), 0.0f);
    for (size_t r = 0; r < delta_.size(); ++r) {
      float d = 0;
      for (int64_t c = 0; c < dv_; ++c) d += dout_[r * static_cast<size_t>(dv_) + static_cast<size_t>(c)] * o_[r * static_cast<size_t>(dv_) + static_cast<size_t>(c)];
      delta_[r] = d;
    }
  }

  // Every KV tile of KV head hk of sequence b, ascending; in each, the group's query heads
  // ascending and their query tiles that see the KV tile, ascending.
  void kv_head(int64_t b, int64_t hk) {
    const int64_t sq = seqs_.sq(b), skv = seqs_.skv(b), bq = cfg_.block_q, bc = cfg_.block_kv;
    const float* kp = in_.k.data() + seqs_.k_row(b, hk, 0);
    const float* vp = in_.v.data() + seqs_.v_row(b, hk, 0);
    const int64_t h0 = hk * p_.group(), h1 = h0 + p_.group();
    std::vector<HeadNumerics> hn;
    for (int64_t h = h0; h < h1; ++h) hn.push_back(head_numerics(p_, in_, cfg_, b, h));
    const bool negative_scale = p_.softmax_scale() < 0;
    MatF S, dP, P, dS, dK, dV;
    for (int64_t k0 = 0; k0 < skv; k0 += bc) {
      const int64_t nk = std::min(bc, skv - k0);
      CMapF K(kp + k0 * dqk_, nk, dqk_), V(vp + k0 * dv_, nk, dv_);
      dK = MatF::Zero(nk, dqk_);
      dV = MatF::Zero(nk, dv_);
      for (int64_t h = h0; h < h1; ++h) {
        const HeadNumerics& n = hn[static_cast<size_t>(h - h0)];
        // The fault: the last KV head's dK sees only the first head of its group.
        const bool into_dk = !(cfg_.fault == BackwardFault::dk_not_summed && hk == p_.heads_kv - 1 && h != h0);
        for (int64_t r0 = 0; r0 < sq; r0 += bq) {
          const int64_t nq = std::min(bq, sq - r0);
          // Rows' visible keys are intervals whose ends never decrease with the row: the tile
          // meets the KV tile iff its first row's range starts before the KV tile ends and its last
          // row's range ends after the KV tile starts. Tiles that do not meet are never loaded.
          const KeyRange first = visible_range(p_, b, r0), last = visible_range(p_, b, r0 + nq - 1);
          if (!(first.lo < k0 + nk && last.hi > k0)) continue;
          CMapF Q(in_.q.data() + seqs_.q_row(b, h, r0), nq, dqk_);
          CMapF dO(dout_.data() + seqs_.o_row(b, h, r0), nq, dv_);
          S.noalias() = Q * K.transpose();  // raw scores, fp32 accumulation
          if (negative_scale) S = -S;
          dP.noalias() = dO * V.transpose();
          P.resize(nq, nk);
          dS.resize(nq, nk);
          float* colsum = r_.p_colsum.data() + seqs_.k_row(b, hk, k0) / dqk_;
          for (int64_t i = 0; i < nq; ++i)
            tile_row(b, h, r0 + i, k0, n, S.row(i).data(), dP.row(i).data(), P.row(i).data(), dS.row(i).data(), nk, colsum);
          dV.noalias() += P.transpose() * dO;
          if (into_dk) dK.noalias() += dS.transpose() * Q;
          if (cfg_.fault == BackwardFault::dq_row_one_key_short && b == 0 && h == p_.heads_q - 1) {
            // The fault: row Sq/2's last visible key, if in this tile, adds nothing to its dQ (dS
            // after dK took it).
            const int64_t row = sq / 2, last = visible_range(p_, b, row).hi - 1;
            if (row >= r0 && row < r0 + nq && last >= k0 && last < k0 + nk) dS(row - r0, last - k0) = 0.0f;
          }
          MapF(dq_acc_.data() + seqs_.q_row(b, h, r0), nq, dqk_).noalias() += dS * K;
        }
      }
      // dK = scale · Σ dSᵀ Q (fp8: times the q descale); the scale is the one of the group's heads.
      const float dk_mul = hn.front().dk_mul;
      float* dk = r_.dk.data() + seqs_.k_row(b, hk, k0);
      float* dv = r_.dv.data() + seqs_.v_row(b, hk, k0);
      for (int64_t e = 0; e < nk * dqk_; ++e) dk[e] = out(dK.data()[e] * dk_mul);
      for (int64_t e = 0; e < nk * dv_; ++e) dv[e] = out(dV.data()[e]);
    }
  }

  // A gradient element as written: rounded to the gradient dtype (unless a test turned that off).
  float out(float x) const { return cfg_.round_gradients ? round_to(cdt_, x) : x; }

  // One row of a tile: P from the saved LSE and dS over keys k0 .. k0 + nk − 1, each rounded to the
  // compute dtype as the GEMMs take them; exact zeros where the mask hides the key.
  void tile_row(int64_t b, int64_t h, int64_t row, int64_t k0, const HeadNumerics& n, const float* s, const float* dp,
                float* pr, float* dsr, int64_t nk, float* colsum) const {
    const KeyRange vis = visible_range(p_, b, row);
    const size_t at = static_cast<size_t>(seqs_.lse_at(b, h, row));
    if (vis.empty()) {  // sees no key: its LSE is a convention, and it contributes nothing
      std::fill_n(pr, nk, 0.0f);
      std::fill_n(dsr, nk, 0.0f);
      return;
    }
    // The exponent's shift: LSE in the exponent's units (log2 units with exp2).
    const float lse = cfg_.use_exp2 ? lse_[at] * kLog2eF : lse_[at];
    const float d = delta_[at];
    const bool keep_cap = cfg_.fault != BackwardFault::softcap_derivative_dropped;
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t key = k0 + j;
      if (!vis.contains(key)) {
        pr[j] = dsr[j] = 0.0f;
        continue;
      }
      float x = s[j], dcap = 1;
      if (n.cap_mul > 0) {
        x = std::tanh(x * n.cap_mul);
        dcap = 1.0f - x * x;  // d/ds c·tanh(s/c), from the tanh the forward computed (FlashAttention 2's dtanh)
      }
      if (n.bias.active()) x += n.key_offset ? n.bias.slope * static_cast<float>(key) : n.bias(row, key);
      const float pij = cfg_.use_exp2 ? std::exp2(x * n.sc - lse) : std::exp(x * n.sc - lse);
      float ds = pij * (dp[j] * n.v_descale - d);
      if (n.cap_mul > 0 && keep_cap) ds *= dcap;
      colsum[j] += pij;
      pr[j] = cfg_.round_p ? round_to(cdt_, pij) : pij;
      dsr[j] = cfg_.round_ds ? round_to(cdt_, ds) : ds;
    }
  }

  // dsink_h = −Σ_(b, i) P_sink,i · D_i, P_sink = exp(sink − LSE), in fp32 over the rows that see a
  // key, in the oracle's order (sequence, then row).
  void sink_grads() {
    if (!p_.sinks) return;
    r_.dsinks.assign(static_cast<size_t>(p_.heads_q), 0.0f);
    for (int64_t h = 0; h < p_.heads_q; ++h) {
      float acc = 0;
      for (int64_t b = 0; b < p_.batch; ++b) {
        const HeadNumerics n = head_numerics(p_, in_, cfg_, b, h);
        if (n.sink == -kInf) continue;
        for (int64_t i = 0; i < seqs_.sq(b); ++i) {
          if (visible_range(p_, b, i).empty()) continue;
          const size_t at = static_cast<size_t>(seqs_.lse_at(b, h, i));
          const float lse = cfg_.use_exp2 ? lse_[at] * kLog2eF : lse_[at];
          const float ps = cfg_.use_exp2 ? std::exp2(n.sink - lse) : std::exp(n.sink - lse);
          acc -= ps * delta_[at];
        }
      }
      r_.dsinks[static_cast<size_t>(h)] = acc;
    }
  }

  const Problem& p_;
  const Inputs& in_;
  std::span<const float> o_, lse_, dout_;
  const BackwardReplicaConfig& cfg_;
  const Sequences seqs_;
  const int64_t dqk_, dv_;
  const DType cdt_;  // the compute dtype P and dS are rounded to, and the gradients' dtype
  std::vector<float> delta_, dq_acc_;
  ReplicaGradients r_;
};

}  // namespace

std::vector<ReplicaPipeline> backward_baseline_configs() {
  // Baseline 1: forward and backward with (128, 128) tiles and exp2. Baseline 2: a forward with
  // (64, 64) tiles and exp2, then a backward with (16, 16) tiles and exp. Its backward recomputes P
  // in other units than its forward's LSE was formed in, and sums its scores in another order, as
  // a kernel's backward MMAs are laid out unlike its forward's; its forward's tiles move where P is
  // rounded (fp8: P's fp8 rounding, which O, D and the sinks' gradient carry).
  std::vector<ReplicaPipeline> c(2);
  c[0].forward.block_q = c[0].forward.block_kv = 128;
  c[0].backward.block_q = c[0].backward.block_kv = 128;
  c[0].backward.use_exp2 = true;
  c[1].forward.block_q = c[1].forward.block_kv = 64;
  c[1].backward.block_q = c[1].backward.block_kv = 16;
  c[1].backward.use_exp2 = false;
  return c;
}

DType gradient_dtype(const Problem& p) { return is_fp8(p.dtype) ? p.o_dtype() : p.dtype; }

ReplicaGradients replica_attention_backward(const Problem& p, const Inputs& in, std::span<const float> o,
                                            std::span<const float> lse, std::span<const float> d_out,
                                            const BackwardReplicaConfig& cfg) {
  validate(p);
  validate_side_inputs(p, in);
  if (cfg.block_q <= 0 || cfg.block_kv <= 0) throw std::invalid_argument("replica_attention_backward: tile sizes must be positive");
  check_size("q", in.q.size(), p.q_elems());
  check_size("k", in.k.size(), p.k_elems());
  check_size("v", in.v.size(), p.v_elems());
  check_size("o", o.size(), p.o_elems());
  check_size("lse", lse.size(), p.lse_elems());
  check_size("dO", d_out.size(), p.o_elems());
  return BackwardReplica(p, in, o, lse, d_out, cfg).run();
}

}  // namespace flashcheck
