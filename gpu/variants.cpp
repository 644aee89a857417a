// The built-in variants: adding one is a folder under gpu/ plus one line here.
#include "gpu/variants.h"

namespace flashcheck {

Registry& Registry::builtin() {
  static Registry r = [] {
    Registry reg;
    reg.add(make_replica_variant());
#if FLASHCHECK_HAVE_CUDA
    reg.add(make_rowwise_f32_variant());
    reg.add(make_warp_f32x4_variant());
    reg.add(make_mma_f16_variant());
#endif
    return reg;
  }();
  return r;
}

}  // namespace flashcheck
