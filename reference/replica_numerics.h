// The per-(sequence, query head) constants of FlashAttention's score numerics in fp32, shared by
// the forward replica (replica.cpp) and the backward one (replica_backward.cpp): the backward
// recomputes P from the forward's LSE, so both must take each score to the exponent by exactly the
// same multiplications, and one definition keeps them so.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/conventions.h"
#include "reference/inputs.h"
#include "reference/problem.h"
#include "reference/score_mod.h"

namespace flashcheck::replica_detail {

// What every tile of one (sequence, query head) multiplies and adds, in fp32 as the kernels hold
// them. Scores stay in "raw" units until the exponent: the Q·Kᵀ dot product (taken with the scale's
// sign), or with a softcap its tanh; `sc` turns a raw score into the exponent's units (log2 units
// with exp2), `unit` into natural units.
struct HeadNumerics {
  float sc = 1;       // raw → exponent
  float unit = 1;     // raw → natural (scores, ALiBi)
  float cap_mul = 0;  // softcap: dot product → tanh argument; 0 without a cap
  AlibiBias<float> bias;  // in raw units
  bool key_offset = false;  // FlashAttention 2's causal ALiBi: slope·j instead of the bias
  float v_descale = 1;
  float sink = -std::numeric_limits<float>::infinity();  // the sink logit in the exponent's units; -inf: none
};

inline HeadNumerics head_numerics(const Problem& p, const Inputs& in, bool use_exp2, AlibiLse alibi_lse, int64_t b, int64_t h) {
  HeadNumerics n;
  const float abs_scale = static_cast<float>(std::fabs(p.softmax_scale()));
  // fp8: Q·Kᵀ runs on the raw fp8 values (exact products, fp32 sums) and the descales are folded
  // into the scale, as FlashAttention 3 does (softmax_scale_log2 *= q_descale·k_descale); the v
  // descale joins the final 1/ℓ. The q descale is that of the query head's KV head (FA3's layout).
  float qk_descale = 1;
  if (is_fp8(p.dtype)) {
    const int64_t hk = p.kv_head(h);
    qk_descale = static_cast<float>(descale_of(p, in.descale_q, b, hk)) * static_cast<float>(descale_of(p, in.descale_k, b, hk));
    n.v_descale = static_cast<float>(descale_of(p, in.descale_v, b, hk));
  }
  if (p.softcap > 0) {
    // FlashAttention 2/3's softcap: tanh(s · (scale/c)) in fp32 on the dot product (with fp8, the
    // descales folded in before the tanh), and the exponent's scale becomes c alone (c·log2 e for
    // exp2): c·tanh(scale·s/c) is the capped score, in raw units of 1/c.
    const float c = static_cast<float>(p.softcap);
    n.cap_mul = (abs_scale / c) * qk_descale;
    n.sc = use_exp2 ? static_cast<float>(static_cast<double>(c) * kLog2e) : c;
    n.unit = c;
  } else {
    n.sc = abs_scale * (use_exp2 ? static_cast<float>(kLog2e) : 1.0f) * qk_descale;
    n.unit = abs_scale * qk_descale;
  }
  if (p.alibi != Alibi::none) {
    // FlashAttention 2 divides the slope by the softmax scale once (raw units) and adds
    // slope·distance to the raw scores after masking (a masked score stays -inf).
    n.bias = alibi_for<float>(p, in.alibi_slopes.data(), b, h);
    n.bias.slope = n.bias.slope / n.unit;
    n.key_offset = alibi_lse == AlibiLse::key_offset && p.causal != Causal::none;
  }
  if (p.sinks) n.sink = in.sinks[static_cast<size_t>(h)] * (use_exp2 ? static_cast<float>(kLog2e) : 1.0f);
  return n;
}

}  // namespace flashcheck::replica_detail
