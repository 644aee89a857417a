// rowwise_f32 as a variant: what it declares and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/registry.h"
#include "gpu/rowwise_f32/traits.h"
#include "gpu/variants.h"

namespace flashcheck {

namespace {
class RowwiseF32 final : public Variant {
 public:
  RowwiseF32() {
    caps_.dtypes = {DType::f32};
    caps_.head_dims = {8, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256};
    caps_.memory = Memory::device;
    caps_.tile_q = kernels::RowwiseTraits::kBlockQ;
    caps_.tile_kv = kernels::RowwiseTraits::kBlockKV;
    caps_.max_seq = int64_t{1} << 30;
  }
  std::string name() const override { return "rowwise_f32"; }
  const Capabilities& caps() const override { return caps_; }
  void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
               void* stream) const override {
    kernels::launch_rowwise_f32(kernels::make_params(p, q, k, v, o, lse), stream);
  }

 private:
  Capabilities caps_;
};
}  // namespace

std::shared_ptr<Variant> make_rowwise_f32_variant() { return std::make_shared<RowwiseF32>(); }

}  // namespace flashcheck
