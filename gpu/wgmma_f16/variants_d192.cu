// wgmma_f16's problem-model-2 instantiations at head dims (192, 128) (launch_variant.cuh): one
// translation unit per pair, so the variant kernels build in parallel.
#include "gpu/wgmma_f16/launch_variant.cuh"

namespace flashcheck::kernels {

template <>
void launch_wgmma_f16_variant<192, 128>(const VarParams& p, TmaRows q, TmaRows kv, bool bf16, VariantKind kind, int grid_x,
                                   void* stream) {
  launch_variants_at<192, 128>(p, q, kv, bf16, kind, grid_x, stream);
}

}  // namespace flashcheck::kernels
