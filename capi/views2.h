// Problem model 2's tensor views at the C boundary (capi/tensors2.cpp), shared by the forward's
// entries (fc_check2, fc_reference) and the backward's (capi/backward2.cpp): a view placed
// against the problem (its shape, dtype and strides checked, naming the caller's tensor), the
// storage layer built from the views' strides, and the logical rows gathered from them. Not
// installed: callers see flashcheck.h only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi/flashcheck.h"
#include "reference/inputs.h"
#include "reference/problem.h"
#include "reference/storage.h"
#include "verify/report.h"

namespace flashcheck::capi {

const char* dtype_name(int32_t dtype);  // "FC_BF16", ...

// Absent: data NULL and no dimensions. A view of zero elements may have data NULL (torch's does).
bool present(const fc_tensor_view& v);

// The view's dtype, number of dimensions and the dims the problem fixes (-1: free), or an error
// naming the tensor and the shape it needs (`form`: the layout's names for the dims).
void check_view(const fc_tensor_view& v, const char* name, int32_t dtype, const std::vector<int64_t>& want, const std::string& form);

// Every element of a view, row-major, as (flat index, element offset).
template <class F>
void for_each_element(const fc_tensor_view& v, F&& f) {
  int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= v.shape[i];
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, off = 0;
    for (int i = v.ndim - 1; i >= 0; --i) {
      off += (rest % v.shape[i]) * v.strides[i];
      rest /= v.shape[i];
    }
    f(flat, off);
  }
}

// Where a q/k/v/o/lse view's rows are (the storage layer's (outer, seq, head) strides), and its
// free leading extent: tokens (thd) or pages (a paged cache).
struct Placed {
  RowStrides strides;
  int64_t rows = 0;
};
// A view shaped as tensor t of the problem's layout (q's shape for dq, o's for dO, ...), in dtype;
// `name` is the caller's name for it.
Placed place(const Problem& p, Tensor t, const fc_tensor_view& v, const char* name, int32_t dtype);

// The storage of q, o and lse (or of k and v), with the caller's views' strides for the tensors
// given. The constructor refuses strides that overlap or are negative, naming the tensor.
std::unique_ptr<Storage> storage_with(const Problem& p, const Inputs& in, int64_t pad,
                                      const std::vector<std::pair<Tensor, RowStrides>>& given);

// The views of one call, placed against the problem: the two storages and their extents.
struct Placement {
  std::unique_ptr<Storage> qside, kvside;
  int64_t tokens_q = 0;        // thd: rows of q (and o, lse)
  int64_t pad_q = 0, pad_kv = 0;  // thd: padding rows past the last sequence
  int64_t rows_kv = 0;         // thd: rows of k (and v); paged: pages
};

// q, k, v (and `o`, `lse` when present, in dtypes o_dtype / lse_dtype), with the side tensors read
// into `in` first (a paged storage needs the block table).
Placement place_all(const Problem& p, const fc_tensors& t, const fc_tensor_view* o, int32_t o_dtype, const fc_tensor_view* lse,
                    int32_t lse_dtype, Inputs& in);
void gather_inputs(const Problem& p, const fc_tensors& t, const Placement& pl, Inputs& in);

// The view's logical rows (tensor t of storage st) widened to fp32 (exact for every input dtype).
std::vector<float> gather(const Problem& p, const Storage& st, Tensor t, const fc_tensor_view& v, DType d);

// NaN/Inf in a gathered q, k or v (or dO, as t = o) is refused unless asked for, as `flashcheck
// check` does, naming `name` (default: t's) and the position (sequence, head, row, column).
void refuse_nonfinite(const Problem& p, Tensor t, const std::vector<float>& x, const char* name = nullptr);

// fc_check_options' values the forward judge reads (lse_base, max_rows, tiles), or an error naming one.
void check_options(const fc_check_options& opt);

// The one judge on t->o and t->lse as placed (fc_check2, and the forward verdict beside a backward's).
Report judge_views(const Problem& p, const fc_tensors& t, const Placement& pl, const Inputs& in, const fc_check_options& opt);

fc_tensor_view contiguous_view(void* data, int32_t dtype, std::vector<int64_t> shape);

// Tensor t's logical rows (values exact in d) encoded into `bytes` as storage st lays t out (its
// elems(t) elements), NaN wherever no row maps (THD padding, a paged cache's unused slots).
void encode_stored(const Storage& st, Tensor t, DType d, const std::vector<float>& logical, std::vector<uint8_t>& bytes);

}  // namespace flashcheck::capi
