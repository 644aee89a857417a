// The per-head-dim launchers of decode_paged_f16 (defined in decode_dD.cu through launch_at.cuh),
// declared for launch.cpp. C++17 and free of the problem model, so the .cu files include it too.
#pragma once
#include <cstdint>

#include "gpu/decode_paged_f16/params.h"

namespace flashcheck::kernels {

// A test's override of the split planning (0: planned from the cache length and the SM count), so
// that one split, a split per tile and counts past the tiles are exercised on small problems.
struct DecodePlanOverride {
  int64_t num_splits = 0;
};

// Runs the split kernel and the combine for p (every field but num_splits, chunks and the
// workspace filled in) on `stream`; max_keys is the longest sequence's cache, for the planning.
template <int D>
void launch_decode_at(const DecodeParams& p, bool bf16, bool paged, int64_t max_keys, const DecodePlanOverride& force,
                      void* stream);
extern template void launch_decode_at<64>(const DecodeParams&, bool, bool, int64_t, const DecodePlanOverride&, void*);
extern template void launch_decode_at<128>(const DecodeParams&, bool, bool, int64_t, const DecodePlanOverride&, void*);
extern template void launch_decode_at<256>(const DecodeParams&, bool, bool, int64_t, const DecodePlanOverride&, void*);

}  // namespace flashcheck::kernels
