// rowwise_f32 as a variant: what it declares and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/launch_variant.h"
#include "gpu/rowwise_f32/traits.h"
#include "gpu/variants.h"

namespace flashcheck {

std::shared_ptr<Variant> make_rowwise_f32_variant() {
  Capabilities c;
  c.dtypes = {DType::f32};
  c.head_dims = {8, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256};
  c.memory = Memory::device;
  c.tile_q = kernels::RowwiseTraits::kBlockQ;
  c.tile_kv = kernels::RowwiseTraits::kBlockKV;
  c.max_seq = int64_t{1} << 30;
  return std::make_shared<LaunchVariant>("rowwise_f32", c, [](const Problem& p, const void* q, const void* k, const void* v,
                                                              void* o, float* lse, void* stream) {
    kernels::launch_rowwise_f32(kernels::make_params(p, q, k, v, o, lse), stream);
  });
}

}  // namespace flashcheck
