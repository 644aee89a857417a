// Writing a `check` file (verify/check_file_format.h) as a kernel's harness would: every tensor in
// the problem's storage layout (reference/storage.h), with padding and unused pages filled.
#include <cstdio>

#include "reference/storage.h"
#include "verify/check_file_format.h"
#include "verify/metrics.h"

namespace flashcheck {

namespace {
// The logical rows of tensor t placed in a storage buffer of `fill`, as a tensor of dtype d.
StTensor stored(const Storage& st, Tensor t, DType d, std::span<const float> logical, float fill) {
  std::vector<float> buf(static_cast<size_t>(st.elems(t)), fill);
  st.scatter(t, logical.data(), buf.data());
  return make_tensor(d, st.shape(t), buf);
}

std::string number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}
}  // namespace

SafetensorsFile make_check_file(const Problem& p, const Inputs& in, std::span<const float> o, const std::vector<float>* lse,
                                const CheckFileWriteOptions& opt) {
  validate(p);
  validate_side_inputs(p, in);
  if (static_cast<int64_t>(o.size()) != p.o_elems() || (lse && static_cast<int64_t>(lse->size()) != p.lse_elems()))
    throw std::invalid_argument("make_check_file: o or lse does not have the problem's logical size");
  const Storage sq(p, in, opt.pad_q), skv(p, in, opt.pad_kv);
  const DType od = p.o_dtype();
  SafetensorsFile f;
  f.tensors["q"] = stored(sq, Tensor::q, p.dtype, in.q, opt.input_fill);
  f.tensors["k"] = stored(skv, Tensor::k, p.dtype, in.k, opt.input_fill);
  f.tensors["v"] = stored(skv, Tensor::v, p.dtype, in.v, opt.input_fill);
  f.tensors["o"] = stored(sq, Tensor::o, od, o, opt.poison_padding ? poison_value(od) : 0.0f);
  if (opt.o_f32) f.tensors["o_f32"] = stored(sq, Tensor::o, DType::f32, o, opt.poison_padding ? poison_value(DType::f32) : 0.0f);
  if (lse) f.tensors["lse"] = stored(sq, Tensor::lse, DType::f32, *lse, opt.poison_padding ? poison_value(DType::f32) : 0.0f);

  const int64_t B = p.batch;
  if (p.layout == Layout::thd) {
    f.tensors["cu_seqlens_q"] = make_int_tensor(opt.index_dtype, {B + 1}, sq.cu_q());
    if (!p.paged()) f.tensors["cu_seqlens_k"] = make_int_tensor(opt.index_dtype, {B + 1}, skv.cu_kv());
  }
  if (!p.seqused_kv.empty()) f.tensors["seqused_k"] = make_int_tensor(opt.index_dtype, {B}, p.seqused_kv);
  if (p.paged()) {
    const std::vector<int64_t> table(in.block_table.begin(), in.block_table.end());
    f.tensors["block_table"] = make_int_tensor(StDType::I32, {B, in.max_pages(B)}, table);
    f.tensors["cache_seqlens"] = make_int_tensor(opt.index_dtype, {B}, p.seqlens_kv);
  }
  if (p.alibi != Alibi::none)
    f.tensors["alibi_slopes"] =
        make_f32_tensor(p.alibi_per_batch ? std::vector<int64_t>{B, p.heads_q} : std::vector<int64_t>{p.heads_q}, in.alibi_slopes);
  if (p.sinks) f.tensors["sinks"] = make_f32_tensor({p.heads_q}, in.sinks);
  if (p.descale != Descale::none) {
    const std::vector<int64_t> shape = p.descale == Descale::tensor ? std::vector<int64_t>{1} : std::vector<int64_t>{B, p.heads_kv};
    f.tensors["q_descale"] = make_f32_tensor(shape, in.descale_q);
    f.tensors["k_descale"] = make_f32_tensor(shape, in.descale_k);
    f.tensors["v_descale"] = make_f32_tensor(shape, in.descale_v);
  }

  f.metadata["causal"] = std::string(to_string(p.causal));
  if (p.scale) f.metadata["scale"] = number(*p.scale);
  if (p.layout != Layout::bhsd) f.metadata["layout"] = std::string(to_string(p.layout));
  if (!p.window.none()) f.metadata["window"] = std::to_string(p.window.left) + "," + std::to_string(p.window.right);
  if (p.softcap != 0) f.metadata["softcap"] = number(p.softcap);
  if (p.alibi != Alibi::none) f.metadata["alibi"] = std::string(to_string(p.alibi));
  return f;
}

}  // namespace flashcheck
