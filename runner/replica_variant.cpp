// The blocked replica as a variant: the CPU stand-in that lets campaigns run on machines without a
// GPU, and the kernel-numerics reference the GPU variants are compared with. It computes every
// variant of problem model 2, reading its buffers where the staging put them — through the strides
// and side tensors it is handed, as any kernel does — and writing only the rows of its outputs.
#include <cstring>
#include <optional>
#include <string>

#include "reference/replica.h"
#include "reference/storage.h"
#include "runner/registry.h"
#include "runner/staged_problem.h"

namespace flashcheck {

namespace {

std::vector<float> side(const float* p, int64_t n, const char* name) {
  if (!p) throw std::runtime_error(std::string("replica: the problem needs ") + name + ", and none was handed over");
  return std::vector<float>(p, p + n);
}

// A length the kernel is handed in an int32 side tensor must be the problem's: the two are two
// statements of one batch, and a kernel reads the side tensor.
void same_length(const int32_t* given, int64_t at, int64_t want, const char* name) {
  if (!given) throw std::runtime_error(std::string("replica: the problem needs ") + name + ", and none was handed over");
  if (given[at] != want)
    throw InvalidProblem(std::string(name) + "[" + std::to_string(at) + "] = " + std::to_string(given[at]) +
                         ", but the problem's sequences make it " + std::to_string(want));
}

class ReplicaVariant final : public Variant {
 public:
  explicit ReplicaVariant(bool declare_e5m2) {
    caps_.memory = Memory::host;
    caps_.tiles = {{0, cfg_.block_q, cfg_.block_kv}};
    caps_.numerics = {.use_exp2 = cfg_.use_exp2, .round_p = cfg_.round_p};
    cfg_.finite_neg_inf = false;  // -2^30 loses rows whose scores are all below it (see replica_test)
    // fp8 under the calibrated fp8 tolerances (verify/TOLERANCE.md). e5m2 only on request: with
    // scores near 1e8 this algorithm's P·2^8 passes e5m2's largest value and the output holds
    // ±Inf where the truth is finite (rightly failed), so campaigns of the registry's replica would
    // fail such draws.
    caps_.dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3};
    if (declare_e5m2) caps_.dtypes.push_back(DType::e5m2);
    caps_.windows = caps_.softcap = caps_.alibi_per_batch = caps_.sinks = caps_.seqused = caps_.paged = true;
    caps_.alibi = {Alibi::symmetric, Alibi::signed_};
    caps_.layouts = {Layout::bhsd, Layout::bshd, Layout::thd};
    caps_.out_dtypes = {DType::bf16, DType::f16};
    caps_.descales = {Descale::tensor, Descale::head};
  }
  std::string name() const override { return "replica"; }
  const Capabilities& caps() const override { return caps_; }
  void forward(const Problem& p, const KernelArgs& a) const override {
    Inputs in = side_inputs(p, a);
    const TensorRef* t[5] = {&a.q, &a.k, &a.v, &a.o, &a.lse};
    RowStrides strides[5];
    for (int i = 0; i < 5; ++i) strides[i] = {t[i]->stride_outer, t[i]->stride_seq, t[i]->stride_head};
    const Storage st(p, in, 0, strides);
    for (int i = 0; i < 5; ++i) {
      const Tensor which = static_cast<Tensor>(i);
      if (t[i]->data && t[i]->numel < st.elems(which))
        throw InvalidProblem("tensor " + std::string(to_string(which)) + " spans " + std::to_string(t[i]->numel) +
                             " elements, its rows reach " + std::to_string(st.elems(which)));
    }
    if (p.layout == Layout::thd)
      for (int64_t b = 0; b <= p.batch; ++b) {
        same_length(a.cu_seqlens_q, b, st.cu_q()[static_cast<size_t>(b)], "cu_seqlens_q");
        if (!p.paged()) same_length(a.cu_seqlens_kv, b, st.cu_kv()[static_cast<size_t>(b)], "cu_seqlens_kv");
      }
    for (int64_t b = 0; b < p.batch; ++b) {
      if (!p.seqused_kv.empty()) same_length(a.seqused_kv, b, p.skv(b), "seqused_kv");
      if (p.paged()) same_length(a.cache_seqlens, b, p.skv(b), "cache_seqlens");
    }
    in.q = gather(p, st, Tensor::q, a.q.data, p.q_elems());
    in.k = gather(p, st, Tensor::k, a.k.data, p.k_elems());
    in.v = gather(p, st, Tensor::v, a.v.data, p.v_elems());
    // Every row of every sequence: the result is in the logical layout.
    const ReplicaResult r = replica_attention(p, in, cfg_);
    const DType od = p.o_dtype();
    const int64_t eb = dtype_bytes(od);
    auto* o = static_cast<uint8_t*>(a.o.data);
    for_each_row(p, st, Tensor::o, [&](int64_t l, int64_t s, int64_t w) { encode(od, r.o.data() + l, w, o + s * eb); });
    if (auto* lse = static_cast<float*>(a.lse.data))
      for_each_row(p, st, Tensor::lse, [&](int64_t l, int64_t s, int64_t) { lse[s] = r.lse[static_cast<size_t>(l)]; });
  }

 private:
  // The side tensors the problem uses, from the arguments (never regenerated).
  static Inputs side_inputs(const Problem& p, const KernelArgs& a) {
    Inputs in;
    if (p.alibi != Alibi::none)
      in.alibi_slopes = side(a.alibi_slopes, p.alibi_per_batch ? p.batch * p.heads_q : p.heads_q, "alibi_slopes");
    if (p.sinks) in.sinks = side(a.sinks, p.heads_q, "sinks");
    if (p.descale != Descale::none) {
      const int64_t n = p.descale == Descale::tensor ? 1 : p.batch * p.heads_kv;
      in.descale_q = side(a.descale_q, n, "descale_q");
      in.descale_k = side(a.descale_k, n, "descale_k");
      in.descale_v = side(a.descale_v, n, "descale_v");
    }
    if (p.paged()) {
      if (!a.block_table || a.max_pages_per_seq < 1 || a.num_pages < 1)
        throw std::runtime_error("replica: a paged problem without a block table");
      in.block_table.assign(a.block_table, a.block_table + p.batch * a.max_pages_per_seq);
      in.num_pages = a.num_pages;
    }
    validate_side_inputs(p, in);  // a block table entry out of range names itself (InvalidProblem)
    return in;
  }
  // The logical rows of one input tensor, widened to fp32 from the kernel's dtype.
  static std::vector<float> gather(const Problem& p, const Storage& st, Tensor t, const void* data, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    const auto* src = static_cast<const uint8_t*>(data);
    const int64_t eb = dtype_bytes(p.dtype);
    for_each_row(p, st, t, [&](int64_t l, int64_t s, int64_t w) { decode(p.dtype, src + s * eb, w, out.data() + l); });
    return out;
  }
  Capabilities caps_;
  ReplicaConfig cfg_;
};

}  // namespace

std::shared_ptr<Variant> make_replica_variant(bool declare_e5m2) { return std::make_shared<ReplicaVariant>(declare_e5m2); }

}  // namespace flashcheck
