// warp_f32x4 as a variant: what it declares and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/launch_variant.h"
#include "gpu/variants.h"
#include "gpu/warp_f32x4/tile_size.h"

namespace flashcheck {

std::shared_ptr<Variant> make_warp_f32x4_variant() {
  Capabilities c;
  c.dtypes = {DType::f32};
  // float4 access needs head dims that are multiples of 4; others are declared unsupported.
  c.head_dims = {16, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256};
  c.memory = Memory::device;
  c.tile_q = kernels::WarpF32x4Traits<64>::kBlockQ;  // the D=64 tiles; larger head dims use fewer rows
  c.tile_kv = kernels::WarpF32x4Traits<64>::kBlockKV;
  c.max_seq = int64_t{1} << 30;
  return std::make_shared<LaunchVariant>("warp_f32x4", c, [](const Problem& p, const void* q, const void* k, const void* v,
                                                             void* o, float* lse, void* stream) {
    kernels::launch_warp_f32x4(kernels::make_params(p, q, k, v, o, lse), stream);
  });
}

}  // namespace flashcheck
