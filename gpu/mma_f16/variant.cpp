// mma_f16 as a variant: what it declares and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/mma_f16/tile_size.h"
#include "gpu/registry.h"
#include "gpu/variants.h"

namespace flashcheck {

namespace {
class MmaF16 final : public Variant {
 public:
  MmaF16() {
    caps_.dtypes = {DType::bf16, DType::f16};
    caps_.head_dims = {64, 128, 256};
    caps_.dv_ne_dqk = false;
    caps_.memory = Memory::device;
    caps_.tile_q = kernels::MmaF16Traits<128>::kBlockM;
    caps_.tile_kv = kernels::MmaF16Traits<128>::kBlockN;
    caps_.max_seq = int64_t{1} << 30;
  }
  std::string name() const override { return "mma_f16"; }
  const Capabilities& caps() const override { return caps_; }
  void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
               void* stream) const override {
    kernels::launch_mma_f16(kernels::make_params(p, q, k, v, o, lse), p.dtype == DType::bf16, stream);
  }

 private:
  Capabilities caps_;
};
}  // namespace

std::shared_ptr<Variant> make_mma_f16_variant() { return std::make_shared<MmaF16>(); }

}  // namespace flashcheck
