// warp_f32x4 as a variant: what it declares and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/registry.h"
#include "gpu/warp_f32x4/tile_size.h"
#include "gpu/variants.h"

namespace flashcheck {

namespace {
class WarpF32x4 final : public Variant {
 public:
  WarpF32x4() {
    caps_.dtypes = {DType::f32};
    // float4 access needs head dims that are multiples of 4; others are declared unsupported.
    caps_.head_dims = {16, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256};
    caps_.memory = Memory::device;
    caps_.tile_q = kernels::WarpF32x4Traits<64>::kBlockQ;  // the D=64 tiles; larger head dims use fewer rows
    caps_.tile_kv = 32;
    caps_.max_seq = int64_t{1} << 30;
  }
  std::string name() const override { return "warp_f32x4"; }
  const Capabilities& caps() const override { return caps_; }
  void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
               void* stream) const override {
    kernels::launch_warp_f32x4(kernels::make_params(p, q, k, v, o, lse), stream);
  }

 private:
  Capabilities caps_;
};
}  // namespace

std::shared_ptr<Variant> make_warp_f32x4_variant() { return std::make_shared<WarpF32x4>(); }

}  // namespace flashcheck
