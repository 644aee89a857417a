// The element pass's kernels (element_pass_kernels.h). Compiled with -fmad=false: a fused
// multiply-add in a sum would round once where the host rounds twice, and the totals would no
// longer be the host's bits.
#include "verify/element_pass_kernels.h"

#include <cuda_runtime.h>

#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/device_common.cuh"

namespace flashcheck::element_pass_gpu {

namespace {

constexpr int kThreads = 64;

__global__ void max_ref_kernel(const double* o, int64_t n, double* partial) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  double m = 0;
  for (int64_t e = t; e < n; e += kMaxRefThreads)
    if (finite_f64(o[e])) m = max_of(m, fabs(o[e]));
  partial[t] = m;
}

__global__ void chunks_kernel(PassArgs a, Mode mode, ElementTotals* parts, int64_t chunks) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= chunks) return;
  ElementTotals t;
  int64_t n[kSets] = {0, 0, 0};
  const int64_t row_end = (c + 1) * kElementChunkRows < a.all_rows ? (c + 1) * kElementChunkRows : a.all_rows;
  for (int64_t g = c * kElementChunkRows; g < row_end; ++g) {
    const bool empty = a.empty_row[g % a.rows_per_head] != 0;
    for (int64_t e = g * a.dv; e < (g + 1) * a.dv; ++e) {
      const float k = a.kernel_o[e];
      const double o = a.oracle_o[e];
      if (count_element(t, e, k, o, a.od, empty) != MapFlag::ok) continue;
      const float base = a.baseline[e];
      const float* flash = a.flash ? a.flash + e : nullptr;
      add_compared(t, e, k, o, base, flash, a.od, a.max_ref, a.ulp_n, [&](float kk, double oo) {
        if (mode == Mode::totals) return;
        const float value[kSets] = {kk, base, flash ? *flash : 0.0f};
        const bool member[kSets] = {true, finite_f32(base), flash && finite_f32(*flash)};
        for (int s = 0; s < kSets; ++s) {
          if (!member[s] || pair_hash(value[s], oo) > a.threshold[s]) continue;
          if (mode == Mode::write) a.out[s][a.offsets[s * chunks + c] + n[s]] = Candidate{oo, value[s], 0};
          ++n[s];
        }
      });
    }
  }
  if (mode == Mode::totals) parts[c] = t;
  if (mode == Mode::count)
    for (int s = 0; s < kSets; ++s) a.counts[s * chunks + c] = n[s];
}

}  // namespace

void launch_max_ref(const double* o, int64_t n, double* partial) {
  FCO_LAUNCH(max_ref_kernel, kMaxRefThreads / 256, 256, 0, nullptr, o, n, partial);
  FCO_CUDA(cudaGetLastError());
  FCO_CUDA(cudaDeviceSynchronize());
}

void launch_chunks(const PassArgs& a, Mode mode, ElementTotals* parts) {
  const int64_t chunks = (a.all_rows + kElementChunkRows - 1) / kElementChunkRows;
  if (chunks == 0) return;
  FCO_LAUNCH(chunks_kernel, static_cast<unsigned>((chunks + kThreads - 1) / kThreads), kThreads, 0, nullptr, a, mode,
             parts, chunks);
  FCO_CUDA(cudaGetLastError());
  FCO_CUDA(cudaDeviceSynchronize());
}

}  // namespace flashcheck::element_pass_gpu
