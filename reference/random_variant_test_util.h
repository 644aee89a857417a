// Test helper shared by the reference tests: a random problem with every variant of problem model 2
// in play, from a seeded engine — lengths near each other and zero now and then, windows that cut
// on either side, alignments both ways, fp8 with descales, paged caches in every page order.
#pragma once
#include <random>

#include "reference/problem.h"

namespace flashcheck {

inline Problem random_variant_problem(std::mt19937_64& g) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); };
  Problem p;
  p.batch = pick(1, 3);
  p.heads_kv = pick(1, 2);
  p.heads_q = p.heads_kv * pick(1, 3);
  p.head_dim_qk = 8 * pick(1, 4);
  p.head_dim_v = pick(0, 1) ? p.head_dim_qk : 8 * pick(1, 4);
  p.causal = static_cast<Causal>(pick(0, 2));
  p.dtype = static_cast<DType>(pick(0, 4));
  if (is_fp8(p.dtype)) {
    p.out_dtype = pick(0, 1) ? DType::bf16 : DType::f16;
    p.descale = static_cast<Descale>(pick(0, 2));
  }
  if (pick(0, 2)) p.window = {pick(-1, 12), pick(-1, 12)};
  if (pick(0, 2) == 0) p.softcap = std::uniform_real_distribution<double>(0.5, 30)(g);
  if (pick(0, 2) == 0) {
    p.alibi = pick(0, 1) ? Alibi::symmetric : Alibi::signed_;
    p.alibi_per_batch = pick(0, 1);
  }
  p.sinks = pick(0, 2) == 0;
  const int kind = static_cast<int>(pick(0, 3));  // dense, dense + used, varlen, paged
  p.seq_q = pick(1, 20);
  p.seq_kv = pick(1, 20);
  if (kind == 0) p.layout = pick(0, 1) ? Layout::bhsd : Layout::bshd;
  if (kind == 1) {
    p.layout = Layout::bshd;
    for (int64_t b = 0; b < p.batch; ++b) p.seqused_kv.push_back(pick(0, p.seq_kv));
  }
  if (kind >= 2) {
    for (int64_t b = 0; b < p.batch; ++b) p.seqlens_kv.push_back(pick(0, 20));
    if (kind == 3) {
      p.page_size = pick(1, 6);
      p.page_order = static_cast<PageOrder>(pick(0, 2));
    }
    if (kind == 2 || pick(0, 1)) {
      p.layout = Layout::thd;
      for (int64_t b = 0; b < p.batch; ++b) p.seqlens_q.push_back(pick(0, 20));
    } else {
      p.layout = Layout::bshd;
    }
    if (kind == 2 && pick(0, 1))
      for (int64_t b = 0; b < p.batch; ++b) p.seqused_kv.push_back(pick(0, p.seqlens_kv[static_cast<size_t>(b)]));
  }
  normalize(p);
  if (p.seq_q == 0 && p.seqlens_q.empty()) p.seq_q = 1;
  validate(p);
  return p;
}

// The same in dtype d: fp8 draws an output dtype and a descale granularity too (the backward's
// tests and calibration sweep every dtype over one variant draw).
inline Problem random_variant_problem_in(std::mt19937_64& g, DType d) {
  Problem p = random_variant_problem(g);
  p.dtype = d;
  p.out_dtype.reset();
  p.descale = Descale::none;
  if (is_fp8(d)) {
    p.out_dtype = g() % 2 ? DType::bf16 : DType::f16;
    p.descale = static_cast<Descale>(g() % 3);
  }
  validate(p);
  return p;
}

}  // namespace flashcheck
