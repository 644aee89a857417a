// mma_f16's backward launch (backward_launch.h): Problem + the forward's KernelArgs + BackwardArgs
// -> BwdParams, every assumption of the kernels about the buffers checked here.
#include "gpu/mma_f16/backward_launch.h"

#include <climits>
#include <stdexcept>
#include <string>

#include "gpu/common/var_params_host.h"
#include "gpu/mma_f16/bwd_params.h"

namespace flashcheck {

BackwardCaps mma_f16_backward_caps() {
  BackwardCaps c;
  c.dtypes = {DType::bf16, DType::f16};
  c.head_dims = {64, 128};
  c.deterministic = true;
  c.variants = false;
  return c;
}

void launch_mma_f16_backward_problem(const Problem& p, const KernelArgs& a, const BackwardArgs& g) {
  const std::string k = "mma_f16 backward";
  if (p.dtype != DType::bf16 && p.dtype != DType::f16) throw std::invalid_argument(k + ": bf16 or f16 only");
  if (!p.plain()) throw std::invalid_argument(k + ": plain problems only (no window, softcap, ALiBi, sinks, varlen, paged)");
  if (p.head_dim_v != p.head_dim_qk) throw std::invalid_argument(k + ": Dv = Dqk only");
  if (p.head_dim_qk != 64 && p.head_dim_qk != 128)
    throw std::invalid_argument(k + ": head dim " + std::to_string(p.head_dim_qk) + " not compiled (64, 128)");
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) throw std::invalid_argument(k + ": Hq must be a multiple of Hkv");
  if (p.seq_q > INT_MAX / 2 || p.seq_kv > INT_MAX / 2 || p.batch > INT_MAX) throw std::invalid_argument(k + ": lengths past 2^30");
  if (!a.lse.data) throw std::invalid_argument(k + ": the forward's LSE is needed (P is recomputed from it)");
  kernels::BwdParams b{};
  b.q = a.q.data, b.k = a.k.data, b.v = a.v.data, b.o = a.o.data, b.dout = g.dout.data;
  b.dq = g.dq.data, b.dk = g.dk.data, b.dv = g.dv.data;
  b.lse = static_cast<const float*>(a.lse.data);
  b.sq_ = kernels::row_strides(a.q, "q", true, false, k);
  b.sk_ = kernels::row_strides(a.k, "k", true, false, k);
  b.sv_ = kernels::row_strides(a.v, "v", true, false, k);
  b.so_ = kernels::row_strides(a.o, "o", true, false, k);
  b.sdo_ = kernels::row_strides(g.dout, "dout", true, false, k);
  b.sdq_ = kernels::row_strides(g.dq, "dq", true, false, k);
  b.sdk_ = kernels::row_strides(g.dk, "dk", true, false, k);
  b.sdv_ = kernels::row_strides(g.dv, "dv", true, false, k);
  b.slse_ = kernels::row_strides(a.lse, "lse", false, false, k);
  b.batch = static_cast<int>(p.batch), b.heads_q = static_cast<int>(p.heads_q), b.heads_kv = static_cast<int>(p.heads_kv);
  b.seq_q = static_cast<int>(p.seq_q), b.seq_kv = static_cast<int>(p.seq_kv);
  b.causal = p.causal == Causal::none ? 0 : p.causal == Causal::top_left ? 1 : 2;
  b.scale = static_cast<float>(p.softmax_scale());
  const bool bf16 = p.dtype == DType::bf16;
  if (p.head_dim_qk == 64) kernels::launch_mma_f16_backward<64>(b, bf16, g.deterministic, a.stream);
  else kernels::launch_mma_f16_backward<128>(b, bf16, g.deterministic, a.stream);
}

}  // namespace flashcheck
