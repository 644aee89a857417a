// decode_paged_f16 at head dim 64: its split and combine kernels, bf16 and f16, paged and dense keys.
#include "gpu/decode_paged_f16/launch_at.cuh"

namespace flashcheck::kernels {
template void launch_decode_at<64>(const DecodeParams&, bool, bool, int64_t, const DecodePlanOverride&, void*);
}  // namespace flashcheck::kernels
