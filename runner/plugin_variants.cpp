#include "runner/plugin_variants.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace flashcheck {

namespace {

fc_dtype to_fc(DType d) {
  switch (d) {
    case DType::f32: return FC_DTYPE_F32;
    case DType::f16: return FC_DTYPE_F16;
    case DType::bf16: return FC_DTYPE_BF16;
    case DType::e4m3: return FC_DTYPE_E4M3;
    case DType::e5m2: return FC_DTYPE_E5M2;
  }
  return FC_DTYPE_F32;
}
fc_causal to_fc(Causal c) {
  return c == Causal::none ? FC_CAUSAL_NONE : c == Causal::top_left ? FC_CAUSAL_TOP_LEFT : FC_CAUSAL_BOTTOM_RIGHT;
}
fc_tensor to_fc(const TensorRef& t) { return {t.data, t.stride_outer, t.stride_seq, t.stride_head, t.numel}; }

// The forward's buffers as fc_forward_args: what forward() is handed, and backward() beside its gradients.
fc_forward_args forward_args(const KernelArgs& a) {
  fc_forward_args fa{};
  fa.struct_size = sizeof fa;
  fa.q = to_fc(a.q);
  fa.k = to_fc(a.k);
  fa.v = to_fc(a.v);
  fa.o = to_fc(a.o);
  fa.lse = to_fc(a.lse);
  fa.cu_seqlens_q = a.cu_seqlens_q;
  fa.cu_seqlens_kv = a.cu_seqlens_kv;
  fa.seqused_kv = a.seqused_kv;
  fa.block_table = a.block_table;
  fa.cache_seqlens = a.cache_seqlens;
  fa.alibi_slopes = a.alibi_slopes;
  fa.sinks = a.sinks;
  fa.descale_q = a.descale_q;
  fa.descale_k = a.descale_k;
  fa.descale_v = a.descale_v;
  fa.stream = a.stream;
  return fa;
}

// Fields fc_space (1.1) and fc_space2 share, as Capabilities, field for field, so the generators
// and declared() treat a plugin exactly like a built-in kernel with the same declaration.
template <class Space>
void apply_common(const Space& s, Capabilities& c, std::initializer_list<DType> dtypes) {
  if (s.dtype_mask) {
    c.dtypes.clear();
    for (DType d : dtypes)
      if (s.dtype_mask & (1u << to_fc(d))) c.dtypes.push_back(d);
  }
  if (s.causal_mask) {
    c.causals.clear();
    for (Causal m : {Causal::none, Causal::top_left, Causal::bottom_right})
      if (s.causal_mask & (1u << to_fc(m))) c.causals.push_back(m);
  }
  c.gqa = s.no_gqa == 0;
  c.dv_ne_dqk = s.dv_eq_dqk == 0;
  if (s.max_seq > 0) c.max_seq = s.max_seq;
  if (s.n_head_dims) c.head_dims.assign(s.head_dims, s.head_dims + s.n_head_dims);
  for (uint32_t i = 0; i < s.n_head_dim_pairs; ++i) c.head_dim_pairs.emplace_back(s.head_dim_pairs[2 * i], s.head_dim_pairs[2 * i + 1]);
  if (s.n_tiles) {
    c.tiles.clear();
    for (uint32_t i = 0; i < s.n_tiles; ++i) c.tiles.push_back({s.tiles[i].head_dim, s.tiles[i].block_q, s.tiles[i].block_kv, s.tiles[i].causal});
  }
}

Capabilities base_caps(fc_memory memory, fc_lse_base lse, fc_empty_lse empty) {
  Capabilities c;
  c.memory = memory == FC_MEMORY_DEVICE ? Memory::device : Memory::host;
  c.lse_base = lse == FC_LSE_BASE_2 ? LseBase::two : lse == FC_LSE_NONE ? LseBase::none : LseBase::e;
  c.empty_lse = empty == FC_EMPTY_LSE_POS_INF ? EmptyRowLse::pos_inf : EmptyRowLse::neg_inf;
  // No head dims listed: any (Capabilities::head_dims), so a campaign draws values off the
  // multiples of 8 too, where a kernel's vector loads and MMA k-steps go wrong; supports() decides.
  return c;
}

std::runtime_error returned(const std::string& name, int rc, const char* (*last_error)(void)) {
  const std::string why = last_error ? last_error() : "";
  return std::runtime_error("plugin kernel '" + name + "' returned " + std::to_string(rc) + (why.empty() ? "" : ": " + why));
}

// ---- ABI 1 -------------------------------------------------------------------------------------

// The kernel's declared space, or null: read only when the plugin's fc_kernel is large enough to
// hold the field (a 1.0 plugin's struct ends before it; reading past it would read its neighbour).
const fc_space* declared_space(const fc_kernel* k) {
  if (k->struct_size < offsetof(fc_kernel, space) + sizeof(k->space)) return nullptr;
  return k->space;
}

class PluginVariant final : public Variant {
 public:
  // The fields are read once, here, after the loader checked them: a plugin cannot change them later.
  PluginVariant(std::shared_ptr<void> lib, const fc_kernel* k)
      : lib_(std::move(lib)), k_(k), name_(k->name), caps_(base_caps(k->memory, k->lse_base, k->empty_lse)) {
    // The plugin's own predicate decides; the campaign draws from the full space unless the
    // plugin declares its own (ABI 1.1).
    if (const fc_space* s = declared_space(k)) apply_common(*s, caps_, {DType::f32, DType::f16, DType::bf16});
  }
  std::string name() const override { return name_; }
  const Capabilities& caps() const override { return caps_; }
  // ABI 1 describes plain attention on contiguous BHSD tensors and nothing else: a variant is
  // refused (skipped) before the plugin is asked, with the reason its capabilities give.
  std::optional<std::string> unsupported(const Problem& p) const override {
    if (!p.plain()) return caps_.refusal(p).value_or("not plain attention (an ABI 1 plugin is given plain problems only)");
    fc_problem fp = to_fc1(p);
    if (!k_->supports(&fp)) return "the plugin's supports() said no";
    return std::nullopt;
  }
  void forward(const Problem& p, const KernelArgs& a) const override {
    if (!p.plain()) throw std::logic_error("ABI 1 kernel '" + name_ + "' was handed a problem beyond plain attention");
    fc_problem fp = to_fc1(p);
    const int rc = k_->forward(&fp, a.q.data, a.k.data, a.v.data, a.o.data, static_cast<float*>(a.lse.data), a.stream);
    if (rc != 0) throw returned(name_, rc, k_->last_error);
  }

 private:
  static fc_problem to_fc1(const Problem& p) {
    fc_problem f{};
    f.batch = p.batch;
    f.heads_q = p.heads_q;
    f.heads_kv = p.heads_kv;
    f.seq_q = p.seq_q;
    f.seq_kv = p.seq_kv;
    f.head_dim_qk = p.head_dim_qk;
    f.head_dim_v = p.head_dim_v;
    f.causal = to_fc(p.causal);
    f.scale = p.softmax_scale();
    f.dtype = to_fc(p.dtype);
    return f;
  }
  std::shared_ptr<void> lib_;
  const fc_kernel* k_;
  std::string name_;
  Capabilities caps_;
};

// ---- ABI 2 -------------------------------------------------------------------------------------

const fc_space2* declared_space(const fc_kernel2* k) { return k->space; }

class Plugin2Variant final : public Variant {
 public:
  Plugin2Variant(std::shared_ptr<void> lib, const fc_kernel2* k)
      : lib_(std::move(lib)), k_(k), name_(k->name), caps_(base_caps(k->memory, k->lse_base, k->empty_lse)) {
    if (const fc_space2* s = declared_space(k)) apply_space(*s);
    // fc_kernel2 declares no space of the backward's own: it takes the forward's (every variant
    // the forward declares; supports() still decides), deterministic when the flag says so.
    backward_caps_.variants = true;
    backward_caps_.deterministic = (k->flags & FC_KERNEL_DETERMINISTIC_BACKWARD) != 0;
  }
  std::string name() const override { return name_; }
  const Capabilities& caps() const override { return caps_; }
  // Plain problems are the plugin's supports() to decide (as in ABI 1); a variant must also lie
  // inside the declared space: a kernel is never handed a layout or variant it did not declare.
  std::optional<std::string> unsupported(const Problem& p) const override {
    if (!p.plain())
      if (auto why = caps_.refusal(p)) return why;
    fc_problem2 fp = to_fc2(p, nullptr, caps_.window_convention);
    if (!k_->supports(&fp)) return "the plugin's supports() said no";
    return std::nullopt;
  }
  void forward(const Problem& p, const KernelArgs& a) const override {
    fc_problem2 fp = to_fc2(p, &a, caps_.window_convention);
    const fc_forward_args fa = forward_args(a);
    const int rc = k_->forward(&fp, &fa);
    if (rc != 0) throw returned(name_, rc, k_->last_error);
  }
  const BackwardCaps* backward_caps() const override { return k_->backward ? &backward_caps_ : nullptr; }
  void backward(const Problem& p, const KernelArgs& a, const BackwardArgs& g) const override {
    if (!k_->backward) return Variant::backward(p, a, g);
    fc_problem2 fp = to_fc2(p, &a, caps_.window_convention);
    const fc_forward_args fa = forward_args(a);
    fc_backward_args ga{};
    ga.struct_size = sizeof ga;  // a plugin reads only the fields its own struct_size covers
    ga.dout = to_fc(g.dout);
    ga.dq = to_fc(g.dq);
    ga.dk = to_fc(g.dk);
    ga.dv = to_fc(g.dv);
    ga.dsinks = g.dsinks;
    ga.deterministic = g.deterministic ? 1 : 0;
    const int rc = k_->backward(&fp, &fa, &ga);
    if (rc != 0) throw returned(name_, rc, k_->last_error);
  }

 private:
  void apply_space(const fc_space2& s) {
    apply_common(s, caps_, {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2});
    if (s.layout_mask) {
      caps_.layouts.clear();
      for (Layout l : {Layout::bhsd, Layout::bshd, Layout::thd})
        if (s.layout_mask & (1u << static_cast<int>(l))) caps_.layouts.push_back(l);
    }
    caps_.windows = s.variant_mask & FC_VARIANT_WINDOW;
    caps_.softcap = s.variant_mask & FC_VARIANT_SOFTCAP;
    caps_.alibi_per_batch = s.variant_mask & FC_VARIANT_ALIBI_PER_BATCH;
    caps_.sinks = s.variant_mask & FC_VARIANT_SINKS;
    caps_.seqused = s.variant_mask & FC_VARIANT_SEQUSED;
    caps_.paged = s.variant_mask & FC_VARIANT_PAGED;
    if (s.alibi_mask & (1u << FC_ALIBI_SYMMETRIC)) caps_.alibi.push_back(Alibi::symmetric);
    if (s.alibi_mask & (1u << FC_ALIBI_SIGNED)) caps_.alibi.push_back(Alibi::signed_);
    if (s.out_dtype_mask) {
      caps_.out_dtypes.clear();
      for (DType d : {DType::f16, DType::bf16})  // ascending bits, as every other mask is read
        if (s.out_dtype_mask & (1u << to_fc(d))) caps_.out_dtypes.push_back(d);
    }
    if (s.descale_mask & (1u << FC_DESCALE_TENSOR)) caps_.descales.push_back(Descale::tensor);
    if (s.descale_mask & (1u << FC_DESCALE_HEAD)) caps_.descales.push_back(Descale::head);
    if (s.n_page_sizes) caps_.page_sizes.assign(s.page_sizes, s.page_sizes + s.n_page_sizes);
    caps_.window_convention = s.window_convention == FC_WINDOW_LEFT_EXCLUSIVE ? WindowConvention::left_exclusive
                                                                               : WindowConvention::inclusive;
    caps_.alibi_lse = s.alibi_lse == FC_ALIBI_LSE_KEY_OFFSET ? AlibiLse::key_offset : AlibiLse::exact;
    if (s.struct_size >= offsetof(fc_space2, seq_multiple) + sizeof(s.seq_multiple)) {  // 2.1
      caps_.equal_lengths = s.limit_mask & FC_LIMIT_EQUAL_LENGTHS;
      caps_.propagates_nonfinite = !(s.limit_mask & FC_LIMIT_FINITE_INPUTS);
      caps_.seq_multiple = std::max<int64_t>(1, s.seq_multiple);
    }
  }
  std::shared_ptr<void> lib_;
  const fc_kernel2* k_;
  std::string name_;
  Capabilities caps_;
  BackwardCaps backward_caps_;
};

}  // namespace

fc_problem2 to_fc2(const Problem& p, const KernelArgs* a, WindowConvention conv) {
  fc_problem2 f{};
  f.struct_size = sizeof f;
  f.batch = p.batch;
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim_qk = p.head_dim_qk;
  f.head_dim_v = p.head_dim_v;
  f.max_seqlen_q = p.seq_q;  // normalized: the longest sequence's
  f.max_seqlen_kv = p.seq_kv;
  f.total_q = p.total_q();
  for (int64_t b = 0; b < p.batch; ++b) f.total_kv += p.skv_stored(b);
  f.dtype = to_fc(p.dtype);
  f.out_dtype = to_fc(p.o_dtype());
  f.causal = to_fc(p.causal);
  f.scale = p.softmax_scale();
  const Window w = window_in(p.window, conv);
  f.window_left = w.left;
  f.window_right = w.right;
  f.softcap = p.softcap;
  f.alibi = p.alibi == Alibi::symmetric ? FC_ALIBI_SYMMETRIC : p.alibi == Alibi::signed_ ? FC_ALIBI_SIGNED : FC_ALIBI_NONE;
  f.alibi_per_batch = p.alibi_per_batch;
  f.has_sinks = p.sinks;
  f.layout = p.layout == Layout::bshd ? FC_LAYOUT_BSHD : p.layout == Layout::thd ? FC_LAYOUT_THD : FC_LAYOUT_BHSD;
  f.varlen = p.layout == Layout::thd;
  f.has_seqused_kv = !p.seqused_kv.empty();
  f.page_size = p.page_size;
  if (p.paged()) {
    // The block table's width follows from the longest cache; the pages exist once staged.
    f.max_pages_per_seq = a ? a->max_pages_per_seq : std::max<int64_t>(1, (p.seq_kv + p.page_size - 1) / p.page_size);
    f.num_pages = a ? a->num_pages : 0;
  }
  f.descale = p.descale == Descale::tensor ? FC_DESCALE_TENSOR : p.descale == Descale::head ? FC_DESCALE_HEAD : FC_DESCALE_NONE;
  return f;
}

std::shared_ptr<Variant> make_plugin_variant(std::shared_ptr<void> lib, const fc_kernel* k) {
  return std::make_shared<PluginVariant>(std::move(lib), k);
}
std::shared_ptr<Variant> make_plugin2_variant(std::shared_ptr<void> lib, const fc_kernel2* k) {
  return std::make_shared<Plugin2Variant>(std::move(lib), k);
}

}  // namespace flashcheck
