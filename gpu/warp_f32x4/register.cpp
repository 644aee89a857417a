// warp_f32x4's declaration: what it can do, the tiles it uses, and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/kernel.h"
#include "gpu/warp_f32x4/tile_size.h"

namespace flashcheck {
namespace {

// Head dims are zero-padded to 64, 128 or 256 inside the kernel; the tiles follow the padded dim.
template <int DP>
TileShape tiles_at() {
  return {DP, kernels::WarpF32x4Traits<DP>::kBlockQ, kernels::WarpF32x4Traits<DP>::kBlockKV};
}

KernelDef warp_f32x4() {
  Capabilities c;
  c.dtypes = {DType::f32};
  // float4 access needs head dims that are multiples of 4; others are declared unsupported.
  c.head_dims = {16, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256};
  c.memory = Memory::device;
  c.max_tensor_elements = kNoElementLimit;  // offsets in size_t; `run --big` passes (PERF.md, session 4)
  c.min_sm = 80;
  c.tiles = {tiles_at<64>(), tiles_at<128>(), tiles_at<256>()};
  c.numerics = {.use_exp2 = true, .round_p = false};
  c.max_seq = int64_t{1} << 30;
  return {"warp_f32x4", c, [](const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
            kernels::launch_warp_f32x4(kernels::make_params(p, q, k, v, o, lse), stream);
          }};
}

}  // namespace
FLASHCHECK_REGISTER_KERNEL(warp_f32x4, warp_f32x4());
}  // namespace flashcheck
