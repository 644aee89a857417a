// Problem + the forward's KernelArgs + BackwardArgs -> BwdParams for the built-in backward kernels,
// every assumption their passes make about the buffers checked here (one place for both kernels).
#pragma once
#include <climits>
#include <stdexcept>
#include <string>

#include "gpu/common/bwd_params.h"
#include "gpu/common/var_params_host.h"
#include "gpu/kernel.h"

namespace flashcheck::kernels {

// `k` names the kernel in messages. Throws std::invalid_argument for a problem or view the passes do
// not take (plain problems, bf16/f16, Dv = Dqk, whole GQA groups, the forward's LSE present).
inline BwdParams bwd_params_of(const Problem& p, const KernelArgs& a, const BackwardArgs& g, const std::string& k) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16) throw std::invalid_argument(k + ": bf16 or f16 only");
  if (!p.plain()) throw std::invalid_argument(k + ": plain problems only (no window, softcap, ALiBi, sinks, varlen, paged)");
  if (p.head_dim_v != p.head_dim_qk) throw std::invalid_argument(k + ": Dv = Dqk only");
  if (p.head_dim_qk != 64 && p.head_dim_qk != 128)
    throw std::invalid_argument(k + ": head dim " + std::to_string(p.head_dim_qk) + " not compiled (64, 128)");
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) throw std::invalid_argument(k + ": Hq must be a multiple of Hkv");
  if (p.seq_q > INT_MAX / 2 || p.seq_kv > INT_MAX / 2 || p.batch > INT_MAX) throw std::invalid_argument(k + ": lengths past 2^30");
  if (!a.lse.data) throw std::invalid_argument(k + ": the forward's LSE is needed (P is recomputed from it)");
  BwdParams b{};
  b.q = a.q.data, b.k = a.k.data, b.v = a.v.data, b.o = a.o.data, b.dout = g.dout.data;
  b.dq = g.dq.data, b.dk = g.dk.data, b.dv = g.dv.data;
  b.lse = static_cast<const float*>(a.lse.data);
  b.sq_ = row_strides(a.q, "q", true, false, k);
  b.sk_ = row_strides(a.k, "k", true, false, k);
  b.sv_ = row_strides(a.v, "v", true, false, k);
  b.so_ = row_strides(a.o, "o", true, false, k);
  b.sdo_ = row_strides(g.dout, "dout", true, false, k);
  b.sdq_ = row_strides(g.dq, "dq", true, false, k);
  b.sdk_ = row_strides(g.dk, "dk", true, false, k);
  b.sdv_ = row_strides(g.dv, "dv", true, false, k);
  b.slse_ = row_strides(a.lse, "lse", false, false, k);
  b.batch = static_cast<int>(p.batch), b.heads_q = static_cast<int>(p.heads_q), b.heads_kv = static_cast<int>(p.heads_kv);
  b.seq_q = static_cast<int>(p.seq_q), b.seq_kv = static_cast<int>(p.seq_kv);
  b.causal = p.causal == Causal::none ? 0 : p.causal == Causal::top_left ? 1 : 2;
  b.scale = static_cast<float>(p.softmax_scale());
  return b;
}

}  // namespace flashcheck::kernels
