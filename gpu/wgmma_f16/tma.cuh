// Tensor Memory Accelerator: the host side builds one tensor map per input, the device side copies
// boxes of it into shared memory, completing on an mbarrier.
//
// Maps are 4-D (D, S, H, B), innermost first, so a box never crosses a (batch, head) boundary:
// rows past S inside a box are zero-filled by the hardware (and still counted in the mbarrier's
// transaction bytes), which is what makes sequence tails need no special copy code. Each box is 64
// elements (128 bytes) wide, the most a 128-byte swizzle allows, so a head dim D is D/64 boxes.
//
// The encoder lives in the driver (libcuda); it is fetched at run time through the runtime's
// cudaGetDriverEntryPointByVersion so that nothing here links against libcuda.
#pragma once
#include <cuda.h>  // CUtensorMap and its enums (types only; no driver symbol is linked)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu/common/cuda_check.h"

namespace flashcheck::kernels::tma {

// ---- device side -------------------------------------------------------------------------------

// Copies box {c0 (element along D), c1 (row), c2 (head), c3 (batch)} of `map` to `dst` (1024-byte
// aligned for the swizzle) and signals completion bytes on `bar`.
__device__ __forceinline__ void load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(c0), "r"(c1),
      "r"(c2), "r"(c3)
      : "memory");
}
// Pulls the (kernel-parameter) descriptor into the TMA unit's cache before the first copy.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- host side ---------------------------------------------------------------------------------

inline PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    FC_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status));
    if (status != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error("cuTensorMapEncodeTiled not found in the CUDA driver (needs a CUDA 12+ driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// Rows of `dim` elements of `type` (elem_bytes each) addressed (row, head, outer) by element
// strides, read in boxes of box_bytes (128, or 64 for rows that short) × box_rows, swizzled at
// that width: a [outer, heads, rows, dim] view of any layout
// (BHSD, BSHD; a packed THD tensor is outer = 1 with rows = its tokens). TMA asks the base and every
// stride for 16-byte multiples; the caller has checked them (a message naming the tensor beats the
// encoder's error code).
inline CUtensorMap make_map_typed(const void* base, CUtensorMapDataType type, int elem_bytes, int64_t outer,
                                  int64_t heads, int64_t rows, int dim, int64_t stride_row, int64_t stride_head,
                                  int64_t stride_outer, int box_rows, int box_bytes = 128) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) throw std::invalid_argument("tensor map: base not 16-byte aligned");
  if (box_bytes != 128 && box_bytes != 64) throw std::invalid_argument("tensor map: boxes of 128 or 64 bytes");
  CUtensorMap map;
  const cuuint64_t elem = static_cast<cuuint64_t>(elem_bytes);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(outer)};
  // A dimension of extent 1 is never stepped along: any valid stride will do (0 is not one).
  auto step = [&](int64_t stride, int64_t extent) {
    return extent <= 1 ? dims[0] * elem : static_cast<cuuint64_t>(stride) * elem;
  };
  const cuuint64_t strides[3] = {step(stride_row, rows), step(stride_head, heads), step(stride_outer, outer)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_bytes / elem_bytes), static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t estride[4] = {1, 1, 1, 1};
  const CUresult r = encoder()(&map, type, 4, const_cast<void*>(base), dims, strides, box, estride,
                               CU_TENSOR_MAP_INTERLEAVE_NONE,
                               box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // NONE: out-of-bounds elements read as zero
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) +
                             ") for a [" + std::to_string(outer) + "," + std::to_string(heads) + "," + std::to_string(rows) +
                             "," + std::to_string(dim) + "] view, strides (" + std::to_string(stride_outer) + "," +
                             std::to_string(stride_head) + "," + std::to_string(stride_row) + "), box " +
                             std::to_string(box[0]) + "x" + std::to_string(box_rows));
  return map;
}

// The same for 16-bit elements, read in boxes of 64 × box_rows.
inline CUtensorMap make_map_rows(const void* base, bool bf16, int64_t outer, int64_t heads, int64_t rows, int dim,
                                 int64_t stride_row, int64_t stride_head, int64_t stride_outer, int box_rows) {
  return make_map_typed(base, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, outer, heads,
                        rows, dim, stride_row, stride_head, stride_outer, box_rows);
}

// A [batch, heads, seq, dim] contiguous tensor of 16-bit elements, read in boxes of 64 × box_rows.
inline CUtensorMap make_map_bhsd(const void* base, bool bf16, int batch, int heads, int seq, int dim, int box_rows) {
  return make_map_rows(base, bf16, batch, heads, seq, dim, dim, int64_t{seq} * dim, int64_t{seq} * dim * heads, box_rows);
}

}  // namespace flashcheck::kernels::tma
