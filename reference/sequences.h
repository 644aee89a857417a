// Where each sequence's rows live in the logical layout every oracle, baseline and criterion reads
// (Inputs, OracleResult): per sequence b, [H, S_b, D] blocks one after another ("segmented
// BHSD"), holding the queries and the used keys only. For a dense problem the logical layout is
// exactly BHSD: offset (b·H + h)·S + i. Storage layouts (BSHD, THD, paged) are reference/storage.h.
#pragma once
#include <cstdint>
#include <vector>

#include "reference/problem.h"

namespace flashcheck {

class Sequences {
 public:
  explicit Sequences(const Problem& p) : hq_(p.heads_q), hkv_(p.heads_kv), dqk_(p.head_dim_qk), dv_(p.head_dim_v) {
    q0_.resize(static_cast<size_t>(p.batch) + 1);
    kv0_.resize(static_cast<size_t>(p.batch) + 1);
    for (int64_t b = 0; b < p.batch; ++b) {
      q0_[static_cast<size_t>(b) + 1] = q0_[static_cast<size_t>(b)] + p.sq(b);
      kv0_[static_cast<size_t>(b) + 1] = kv0_[static_cast<size_t>(b)] + p.skv(b);
    }
  }
  int64_t batch() const { return static_cast<int64_t>(q0_.size()) - 1; }
  int64_t sq(int64_t b) const { return q0_[static_cast<size_t>(b) + 1] - q0_[static_cast<size_t>(b)]; }
  int64_t skv(int64_t b) const { return kv0_[static_cast<size_t>(b) + 1] - kv0_[static_cast<size_t>(b)]; }
  // Queries (keys) of the sequences before b: cu_seqlens_q[b] (of the used keys).
  int64_t q0(int64_t b) const { return q0_[static_cast<size_t>(b)]; }
  int64_t kv0(int64_t b) const { return kv0_[static_cast<size_t>(b)]; }
  int64_t total_q() const { return q0_.back(); }
  int64_t total_kv() const { return kv0_.back(); }
  // Element offsets of row i of head h of sequence b.
  int64_t q_row(int64_t b, int64_t h, int64_t i) const { return (q0(b) * hq_ + h * sq(b) + i) * dqk_; }
  int64_t k_row(int64_t b, int64_t hk, int64_t j) const { return (kv0(b) * hkv_ + hk * skv(b) + j) * dqk_; }
  int64_t v_row(int64_t b, int64_t hk, int64_t j) const { return (kv0(b) * hkv_ + hk * skv(b) + j) * dv_; }
  int64_t o_row(int64_t b, int64_t h, int64_t i) const { return (q0(b) * hq_ + h * sq(b) + i) * dv_; }
  int64_t lse_at(int64_t b, int64_t h, int64_t i) const { return q0(b) * hq_ + h * sq(b) + i; }

 private:
  int64_t hq_, hkv_, dqk_, dv_;
  std::vector<int64_t> q0_, kv0_;
};

}  // namespace flashcheck
