// mma_f16 as a variant: what it declares and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/launch_variant.h"
#include "gpu/mma_f16/tile_size.h"
#include "gpu/variants.h"

namespace flashcheck {

std::shared_ptr<Variant> make_mma_f16_variant() {
  Capabilities c;
  c.dtypes = {DType::bf16, DType::f16};
  c.head_dims = {64, 128, 256};
  c.dv_ne_dqk = false;
  c.memory = Memory::device;
  c.tile_q = kernels::MmaF16Traits<128>::kBlockM;
  c.tile_kv = kernels::MmaF16Traits<128>::kBlockN;
  c.max_seq = int64_t{1} << 30;
  return std::make_shared<LaunchVariant>("mma_f16", c, [](const Problem& p, const void* q, const void* k, const void* v,
                                                          void* o, float* lse, void* stream) {
    kernels::launch_mma_f16(kernels::make_params(p, q, k, v, o, lse), p.dtype == DType::bf16, stream);
  });
}

}  // namespace flashcheck
