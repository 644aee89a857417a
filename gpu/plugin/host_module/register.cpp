// The host module's declaration: a space and tile table unlike the plugin defaults (head dims 8..256,
// 128x128 tiles), with problem-model-2 variants and a left-exclusive window, so a test can tell that
// the declared space reached the campaign and that the window reaches the kernel in its convention.
// Its backward (host_backward.cpp) declares a narrower space (head dims 16 and 32, plain problems,
// deterministic), which a module built with FC_MODULE_BACKWARD declares instead of the forward's.
#include "gpu/kernel.h"

namespace flashcheck::host_module {
void launch2(const Problem& p, const KernelArgs& a);
void backward(const Problem& p, const KernelArgs& fwd, const BackwardArgs& g);
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
  c.windows = c.softcap = c.seqused = c.paged = true;
  c.layouts = {Layout::bhsd, Layout::bshd, Layout::thd};
  c.page_sizes = {1, 3, 16, 64};
  c.window_convention = WindowConvention::left_exclusive;
  KernelDef d{"host_attention", c};
  d.launch2 = host_module::launch2;
  d.backward = host_module::backward;
  d.backward_caps = {.dtypes = {}, .head_dims = {16, 32}, .deterministic = true, .variants = false};
  return d;
}

}  // namespace
FLASHCHECK_REGISTER_KERNEL(host_attention, host_attention());
}  // namespace flashcheck
