// The host module's declaration: a space and tile table unlike the plugin defaults (head dims 8..256,
// 128x128 tiles), so a test can tell that the declared space reached the campaign.
#include "gpu/kernel.h"

namespace flashcheck::host_module {
void launch(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse, void* stream);
}

namespace flashcheck {
namespace {

KernelDef host_attention() {
  Capabilities c;
  c.dtypes = {DType::f32};
  c.head_dims = {16, 32, 64};
  c.dv_ne_dqk = false;
  c.memory = Memory::host;
  c.tiles = {{16, 16, 24}, {64, 32, 40, -1}};
  c.max_seq = 4096;
  c.numerics = {.use_exp2 = false, .round_p = false};
  return {"host_attention", c, host_module::launch};
}

}  // namespace
FLASHCHECK_REGISTER_KERNEL(host_attention, host_attention());
}  // namespace flashcheck
