// wgmma_f16's plain launch: contiguous BHSD, no variant (kernel.cuh has the kernel; problem
// model 2's launches are launch2.cpp and launch_variant.cuh).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/common/params.h"
#include "gpu/wgmma_f16/launch.h"
#include "gpu/wgmma_f16/launch_policy.cuh"
#include "gpu/wgmma_f16/policy.h"
#include "gpu/wgmma_f16/tile_size.h"
#include "gpu/wgmma_f16/tma.cuh"

namespace flashcheck::kernels {

namespace {

template <class T, bool kBf16, int kSched>
void launch_t(const FwdParams& p, cudaStream_t stream) {
  const CUtensorMap mq = tma::make_map_bhsd(p.q, kBf16, p.batch, p.heads_q, p.seq_q, T::kHeadDimQK, T::kBlockM);
  const CUtensorMap mk = tma::make_map_bhsd(p.k, kBf16, p.batch, p.heads_kv, p.seq_kv, T::kHeadDimQK, T::kBlockN);
  const CUtensorMap mv = tma::make_map_bhsd(p.v, kBf16, p.batch, p.heads_kv, p.seq_kv, T::kHeadDimV, T::kBlockN);
  const dim3 grid(static_cast<unsigned>((p.seq_q + T::kBlockM - 1) / T::kBlockM), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  launch_policy<T, kBf16, kSched, WgmmaPlainPolicy<T>>(mq, mk, mv, p, grid, stream);
}

template <class C>
void launch_config(const FwdParams& p, bool bf16, cudaStream_t s) {
  if (bf16)
    launch_t<typename C::Traits, true, C::kSchedule>(p, s);
  else
    launch_t<typename C::Traits, false, C::kSchedule>(p, s);
}

template <int Dqk, int Dv>
void launch_dims(const FwdParams& p, bool bf16, cudaStream_t s) {
  if (p.causal)
    launch_config<WgmmaF16Config<Dqk, Dv, true>>(p, bf16, s);
  else
    launch_config<WgmmaF16Config<Dqk, Dv, false>>(p, bf16, s);
}

}  // namespace


void launch_wgmma_f16(const FwdParams& p, bool bf16, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    throw std::invalid_argument("wgmma_f16: heads_q must be a multiple of heads_kv");
  if (p.batch == 0 || p.heads_q == 0 || p.seq_q == 0) return;  // nothing to write
  switch (p.head_dim_qk * 1000 + p.head_dim_v) {
    case 64064: return launch_dims<64, 64>(p, bf16, s);
    case 128128: return launch_dims<128, 128>(p, bf16, s);
    case 192128: return launch_dims<192, 128>(p, bf16, s);
    case 256256: return launch_dims<256, 256>(p, bf16, s);
    default:
      throw std::invalid_argument("wgmma_f16: head dims (" + std::to_string(p.head_dim_qk) + ", " +
                                  std::to_string(p.head_dim_v) + ") not compiled");
  }
}


}  // namespace flashcheck::kernels
