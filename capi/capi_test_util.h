// What the C API's tests of problem model 2 share (capi2_test, capi_backward_test): a view of a
// buffer, and a problem's inputs staged as a kernel holds them, through the storage layer.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "capi/flashcheck.h"
#include "reference/dtype.h"
#include "reference/inputs.h"
#include "reference/mask.h"
#include "reference/problem.h"
#include "reference/storage.h"

namespace flashcheck {

inline constexpr float kStagedNaN = std::numeric_limits<float>::quiet_NaN();

inline fc_tensor_view view(void* data, int32_t dtype, const std::vector<int64_t>& shape) {
  fc_tensor_view v{};
  v.data = data;
  v.dtype = dtype;
  v.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[static_cast<size_t>(i)];
    v.strides[i] = stride;
    stride *= std::max<int64_t>(shape[static_cast<size_t>(i)], 1);
  }
  return v;
}

inline int32_t c_dtype(DType d) { return static_cast<int32_t>(d); }  // FC_F32.. follow DType's order

// A problem with its inputs staged as a kernel holds them: storage in the problem's layout (THD
// with `pad` padding tokens, pages with NaN in the slots no sequence uses), every side tensor, the
// C problem struct parsed from the problem's line.
struct Staged {
  Problem p;
  Inputs in;
  std::unique_ptr<Storage> st;
  std::vector<int32_t> lengths = std::vector<int32_t>(512);
  fc_attention2 a{};
  std::vector<uint8_t> q, k, v;
  fc_tensors t{};

  Staged(const Problem& problem, uint64_t seed, int64_t pad) : p(problem) {
    in = make_inputs(p, seed);
    st = std::make_unique<Storage>(p, in, pad);
    fc_attention2_init(&a);
    size_t needed = 0;
    EXPECT_EQ(fc_attention2_parse(to_string(p).c_str(), &a, lengths.data(), lengths.size(), &needed), FC_OK) << fc_last_error();
    fc_tensors_init(&t);
    t.q = stage(Tensor::q, in.q, q);
    t.k = stage(Tensor::k, in.k, k);
    t.v = stage(Tensor::v, in.v, v);
    if (!in.alibi_slopes.empty())
      t.alibi_slopes = view(in.alibi_slopes.data(), FC_F32,
                            p.alibi_per_batch ? std::vector<int64_t>{p.batch, p.heads_q} : std::vector<int64_t>{p.heads_q});
    if (!in.sinks.empty()) t.sinks = view(in.sinks.data(), FC_F32, {p.heads_q});
    const std::vector<int64_t> ds = p.descale == Descale::head ? std::vector<int64_t>{p.batch, p.heads_kv} : std::vector<int64_t>{1};
    if (!in.descale_q.empty()) t.descale_q = view(in.descale_q.data(), FC_F32, ds);
    if (!in.descale_k.empty()) t.descale_k = view(in.descale_k.data(), FC_F32, ds);
    if (!in.descale_v.empty()) t.descale_v = view(in.descale_v.data(), FC_F32, ds);
    if (p.paged()) t.block_table = view(in.block_table.data(), FC_I32, {p.batch, in.max_pages(p.batch)});
  }
  fc_tensor_view stage(Tensor which, const std::vector<float>& logical, std::vector<uint8_t>& bytes) {
    return stage_in(which, logical, p.dtype, bytes);
  }
  // Logical rows of tensor `which` (or a tensor placed as it: dO as o, dQ as q) in dtype d, in the
  // problem's storage; elements no row maps to hold NaN.
  fc_tensor_view stage_in(Tensor which, const std::vector<float>& logical, DType d, std::vector<uint8_t>& bytes) {
    std::vector<float> s(static_cast<size_t>(st->elems(which)), kStagedNaN);
    st->scatter(which, logical.data(), s.data());
    bytes.resize(s.size() * static_cast<size_t>(dtype_bytes(d)));
    encode(d, s.data(), static_cast<int64_t>(s.size()), bytes.data());
    return view(bytes.data(), c_dtype(d), st->shape(which));
  }
};

}  // namespace flashcheck
