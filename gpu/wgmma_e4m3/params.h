// wgmma_e4m3's launch parameters: the plain problem (FwdParams: q, k, o, lse, shape, causal, scale)
// plus fp8's descale factors. Plain data: kernels and the host launch include it.
#pragma once
#include "gpu/common/params.h"

namespace flashcheck::kernels {

struct E4m3Params {
  FwdParams base;  // base.v is the caller's V; the kernel reads the launch's Vᵀ copy (transpose_v.cuh)
  // Device pointers, null when the problem has no descale (1): one float (per tensor) or [B, Hkv]
  // (per batch and KV head, FlashAttention 3's shape; a query head takes its KV head's factor).
  const float* descale_q;
  const float* descale_k;
  const float* descale_v;
  int descale_per_head;
};

}  // namespace flashcheck::kernels
