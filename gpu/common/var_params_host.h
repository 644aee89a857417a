// The host half of a variant launch, shared by the kernels that take VarParams (mma_f16,
// wgmma_f16): whether a problem can take the plain launch, the VarParams of any other, and the
// q-tiles of its grid. Every assumption a kernel makes of the buffers is checked here, so a view it
// cannot address is an error naming the tensor (std::invalid_argument), never a wrong read.
#pragma once
#include <string>

#include "gpu/common/var_params.h"
#include "gpu/kernel.h"

namespace flashcheck::kernels {

// A tensor's row strides (elements), checked: non-null, non-negative, the row stride within an int;
// `chunked` (copied and stored in whole 16-byte chunks): pointer and strides multiples of 8
// elements; `packed`: the outer stride is unused (0). Errors name `kernel` and `name`.
RowStrides3 row_strides(const TensorRef& t, const char* name, bool chunked, bool packed, const std::string& kernel);

// Contiguous BHSD q, k, v, o (and lse [B, Hq, Sq]), as a plain launch (FwdParams) indexes them.
bool contiguous_bhsd(const Problem& p, const KernelArgs& a);

// The VarParams of problem `p` on buffers `a`, for kernel `kernel` (named in every message). Rows
// of q, k, v and o must start 16-byte aligned (both kernels copy and store whole 16-byte chunks:
// cp.async, TMA, uint4), row strides must fit an int; the window is clamped to what the masks take.
VarParams variant_params(const Problem& p, const KernelArgs& a, const char* kernel);

// q-tiles of the grid's x dimension: per sequence (dense), or of every sequence together (packed:
// the kernel maps its index to a sequence through cu_seqlens_q, tiles of empty sequences none).
int grid_tiles(const Problem& p, int block_m, const char* kernel);

// What a kernel launching through VarParams computes, declared once for both: sliding windows in
// flashcheck's inclusive convention, softcap (tanh in fp32), symmetric ALiBi with slopes [Hq] or
// [B, Hq] and its exact LSE, attention sinks, BSHD and packed (THD) batches with seqused_kv.
void declare_variant_capabilities(Capabilities& c);

}  // namespace flashcheck::kernels
