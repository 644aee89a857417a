// rowwise_f32's declaration: what it can do, the tiles it uses, and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/kernel.h"
#include "gpu/rowwise_f32/tile_size.h"

namespace flashcheck {
namespace {

KernelDef rowwise_f32() {
  Capabilities c;
  c.dtypes = {DType::f32};
  c.head_dims = {8, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256};
  c.memory = Memory::device;
  c.max_tensor_elements = kNoElementLimit;  // offsets in size_t; `run --big` passes (PERF.md, session 4)
  c.min_sm = 80;
  c.tiles = {{0, kernels::RowwiseTraits::kBlockQ, kernels::RowwiseTraits::kBlockKV}};
  c.numerics = {.use_exp2 = false, .round_p = false};  // plain expf, P kept in fp32
  c.max_seq = int64_t{1} << 30;
  return {"rowwise_f32", c, [](const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
            kernels::launch_rowwise_f32(kernels::make_params(p, q, k, v, o, lse), stream);
          }};
}

}  // namespace
FLASHCHECK_REGISTER_KERNEL(rowwise_f32, rowwise_f32());
}  // namespace flashcheck
