// mma_f16's problem-model-2 instantiations at head dim 64 (launch_variant.cuh): one translation
// unit per head dim, so the variant kernels build in parallel.
#include "gpu/mma_f16/launch_variant.cuh"

namespace flashcheck::kernels {

template <>
void launch_mma_f16_variant<64>(const VarParams& p, bool bf16, VariantKind kind, int grid_x, void* stream) {
  launch_variants_at<64>(p, bf16, kind, grid_x, stream);
}

}  // namespace flashcheck::kernels
