// rowwise_f32's configuration, shared by the kernel (C++17) and its variant declaration.
#pragma once

namespace flashcheck::kernels {

struct RowwiseTraits {
  static constexpr int kBlockQ = 64;   // rows per block = threads per block
  static constexpr int kBlockKV = 32;  // keys per shared-memory tile
  static constexpr int kMaxHeadDim = 256;
  static_assert(kBlockQ % 32 == 0, "whole warps");
};

}  // namespace flashcheck::kernels
