// The plugin ABI's kernels as Variants (internal to the plugin loader, runner/plugin_loader.cpp):
// ABI 1's fc_kernel, given plain problems only, and ABI 2's fc_kernel2, given any problem inside its
// declared space, with the problem, the strides and the side tensors translated to the C structs.
// The loader has checked every field before one of these is made.
#pragma once
#include <memory>

#include "gpu/plugin/flashcheck_plugin.h"
#include "runner/registry.h"

namespace flashcheck {

// `lib` keeps the library loaded while any of its kernels lives.
std::shared_ptr<Variant> make_plugin_variant(std::shared_ptr<void> lib, const fc_kernel* k);
std::shared_ptr<Variant> make_plugin2_variant(std::shared_ptr<void> lib, const fc_kernel2* k);

// The problem as an ABI 2 kernel reads it, its window in the kernel's convention. `a` (null in
// supports(), asked before any buffer exists) gives the paged cache's size.
fc_problem2 to_fc2(const Problem& p, const KernelArgs* a, WindowConvention conv);

}  // namespace flashcheck
