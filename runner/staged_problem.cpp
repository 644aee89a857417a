#include "runner/staged_problem.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <string>

#include "runner/device.h"
#include "reference/replica_backward.h"
#include "verify/metrics.h"

namespace flashcheck {

namespace {

constexpr Tensor kTensors[] = {Tensor::q, Tensor::k, Tensor::v, Tensor::o, Tensor::lse};
constexpr const char* kNames[kStagedBuffers] = {"q",          "k",           "v",           "o",         "lse",
                                                "cu_seqlens_q", "cu_seqlens_kv", "seqused_kv", "block_table",
                                                "cache_seqlens", "alibi_slopes", "sinks",    "descale_q", "descale_k",
                                                "descale_v",  "dout",        "dq",          "dk",          "dv",
                                                "dsinks"};

size_t as_size(int64_t n) { return static_cast<size_t>(n); }

// One element's bits repeated over n elements of dtype d.
void fill_pattern(uint8_t* dst, const void* one, int bytes, int64_t n) {
  if (bytes == 1) {
    std::memset(dst, *static_cast<const uint8_t*>(one), as_size(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * bytes, one, static_cast<size_t>(bytes));
}

// Kernels take lengths as int32 (FlashAttention's cu_seqlens, seqused_k, cache_seqlens): a length
// past that cannot be handed to one, so the problem cannot be tested as stated.
std::vector<int32_t> as_int32(const std::vector<int64_t>& v, const char* field, const char* what) {
  std::vector<int32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] > INT32_MAX)
      throw InvalidProblem(std::string(field) + "[" + std::to_string(i) + "] = " + std::to_string(v[i]) + " " + what +
                           " overflows the int32 entries kernels take (at most 2147483647)");
    out[i] = static_cast<int32_t>(v[i]);
  }
  return out;
}

void require_values(const std::vector<float>& x, int64_t n, const char* name) {
  if (static_cast<int64_t>(x.size()) != n)
    throw InvalidProblem(std::string(name) + " has " + std::to_string(x.size()) + " values; the problem needs " + std::to_string(n));
}

}  // namespace

const char* staged_buffer_name(int buffer) { return buffer >= 0 && buffer < kStagedBuffers ? kNames[buffer] : "?"; }

KernelArgs kernel_args(const LaunchShape& s, const std::array<void*, kStagedBuffers>& ptr, bool with_lse, void* stream) {
  KernelArgs a;
  TensorRef* t[5] = {&a.q, &a.k, &a.v, &a.o, &a.lse};
  for (int i = 0; i < 5; ++i) *t[i] = {ptr[static_cast<size_t>(i)], s.strides[i][0], s.strides[i][1], s.strides[i][2], s.numel[i]};
  if (!with_lse) a.lse.data = nullptr;
  auto i32 = [&](int b) { return static_cast<const int32_t*>(ptr[static_cast<size_t>(b)]); };
  auto f32 = [&](int b) { return static_cast<const float*>(ptr[static_cast<size_t>(b)]); };
  a.cu_seqlens_q = i32(kBufCuSeqlensQ);
  a.cu_seqlens_kv = i32(kBufCuSeqlensKv);
  a.seqused_kv = i32(kBufSequsedKv);
  a.block_table = i32(kBufBlockTable);
  a.cache_seqlens = i32(kBufCacheSeqlens);
  a.alibi_slopes = f32(kBufAlibiSlopes);
  a.sinks = f32(kBufSinks);
  a.descale_q = f32(kBufDescaleQ);
  a.descale_k = f32(kBufDescaleK);
  a.descale_v = f32(kBufDescaleV);
  a.num_pages = s.num_pages;
  a.max_pages_per_seq = s.max_pages_per_seq;
  a.stream = stream;
  return a;
}

BackwardArgs backward_args(const LaunchShape& s, const std::array<void*, kStagedBuffers>& ptr, bool deterministic) {
  BackwardArgs g;
  // Each gradient shares its forward tensor's storage (strides and span): dO o's, dq q's, ...
  auto ref = [&](int b, int as) {
    return TensorRef{ptr[static_cast<size_t>(b)], s.strides[as][0], s.strides[as][1], s.strides[as][2], s.numel[as]};
  };
  g.dout = ref(kBufDout, kBufO);
  g.dq = ref(kBufDq, kBufQ);
  g.dk = ref(kBufDk, kBufK);
  g.dv = ref(kBufDv, kBufV);
  g.dsinks = static_cast<float*>(ptr[kBufDsinks]);
  g.deterministic = deterministic;
  return g;
}

Staging::Staging(const Problem& p, const Inputs& in, const std::vector<float>& d_out) : Staging(p, in) {
  require_values(d_out, p.o_elems(), "dout");
  d_out_ = &d_out;
  const size_t gb = static_cast<size_t>(dtype_bytes(gradient_dtype(p)));
  bytes_[kBufDout] = as_size(st_.elems(Tensor::o)) * static_cast<size_t>(dtype_bytes(p.o_dtype()));
  bytes_[kBufDq] = as_size(st_.elems(Tensor::q)) * gb;
  bytes_[kBufDk] = as_size(st_.elems(Tensor::k)) * gb;
  bytes_[kBufDv] = as_size(st_.elems(Tensor::v)) * gb;
  bytes_[kBufDsinks] = p.sinks ? as_size(p.heads_q) * 4 : 0;
}

Staging::Staging(const Problem& p, const Inputs& in) : p_(p), in_(in), st_(p, in, kPadTokens) {
  // Storage validated the problem (and, for a paged cache, the block table). The lengths must fit
  // the side tensors' int32, and the inputs the problem: they are copied into buffers sized by it.
  const int64_t B = p.batch;
  if (p.layout == Layout::thd) {
    cu_q_ = as_int32(st_.cu_q(), "cu_seqlens_q", "(queries before it)");
    if (!p.paged()) cu_kv_ = as_int32(st_.cu_kv(), "cu_seqlens_kv", "(keys before it)");
  }
  if (!p.seqused_kv.empty()) used_ = as_int32(p.seqused_kv, "seqused_kv", "(keys used)");
  if (p.paged()) cache_ = as_int32(p.seqlens_kv, "cache_seqlens", "(keys cached)");
  validate_side_inputs(p, in);
  require_values(in.q, p.q_elems(), "q");
  require_values(in.k, p.k_elems(), "k");
  require_values(in.v, p.v_elems(), "v");

  for (int i = 0; i < 5; ++i) {
    const RowStrides& r = st_.strides(kTensors[i]);
    shape_.strides[i][0] = r.outer;
    shape_.strides[i][1] = r.seq;
    shape_.strides[i][2] = r.head;
    shape_.numel[i] = st_.elems(kTensors[i]);
  }
  if (p.paged()) {
    shape_.num_pages = in.num_pages;
    shape_.max_pages_per_seq = in.max_pages(B);
  }
  const size_t db = static_cast<size_t>(dtype_bytes(p.dtype));
  bytes_[kBufQ] = as_size(st_.elems(Tensor::q)) * db;
  bytes_[kBufK] = as_size(st_.elems(Tensor::k)) * db;
  bytes_[kBufV] = as_size(st_.elems(Tensor::v)) * db;
  bytes_[kBufO] = as_size(st_.elems(Tensor::o)) * static_cast<size_t>(dtype_bytes(p.o_dtype()));
  bytes_[kBufLse] = as_size(st_.elems(Tensor::lse)) * 4;
  bytes_[kBufCuSeqlensQ] = cu_q_.size() * 4;
  bytes_[kBufCuSeqlensKv] = cu_kv_.size() * 4;
  bytes_[kBufSequsedKv] = used_.size() * 4;
  bytes_[kBufBlockTable] = p.paged() ? in.block_table.size() * 4 : 0;
  bytes_[kBufCacheSeqlens] = cache_.size() * 4;
  bytes_[kBufAlibiSlopes] = in.alibi_slopes.size() * 4;
  bytes_[kBufSinks] = in.sinks.size() * 4;
  bytes_[kBufDescaleQ] = in.descale_q.size() * 4;
  bytes_[kBufDescaleK] = in.descale_k.size() * 4;
  bytes_[kBufDescaleV] = in.descale_v.size() * 4;
}

bool Staging::logical_layout(Tensor t) const {
  if (p_.layout != Layout::bhsd) return false;
  if (t == Tensor::k || t == Tensor::v) return !p_.paged() && p_.seqused_kv.empty();
  return true;
}

void Staging::fill(int buffer, uint8_t* dst) const {
  if (bytes(buffer) == 0) return;  // not used by this launch (a forward's backward buffers, a side tensor)
  auto copy = [&](const auto& v) { std::memcpy(dst, v.data(), v.size() * sizeof(v[0])); };
  switch (buffer) {
    case kBufQ:
    case kBufK:
    case kBufV:
    case kBufDout: {
      const Tensor t = buffer == kBufDout ? Tensor::o : kTensors[buffer];
      const std::vector<float>& x = buffer == kBufDout ? *d_out_ : t == Tensor::q ? in_.q : t == Tensor::k ? in_.k : in_.v;
      const DType d = buffer == kBufDout ? p_.o_dtype() : p_.dtype;
      const int64_t eb = dtype_bytes(d);
      if (logical_layout(t)) {
        encode(d, x.data(), static_cast<int64_t>(x.size()), dst);
        return;
      }
      // NaN first, then the rows: whatever no row covers stays NaN in the kernel's own dtype.
      const float nan = std::numeric_limits<float>::quiet_NaN();
      uint8_t one[4];
      encode(d, &nan, 1, one);
      fill_pattern(dst, one, static_cast<int>(eb), st_.elems(t));
      each_row(t, [&](int64_t l, int64_t s, int64_t w) { encode(d, x.data() + l, w, dst + s * eb); });
      return;
    }
    case kBufDq:
    case kBufDk:
    case kBufDv:
    case kBufDsinks: {  // the gradients: poisoned everywhere, like o
      const DType d = buffer == kBufDsinks ? DType::f32 : gradient_dtype(p_);
      const uint32_t bits = poison_bits(d);
      fill_pattern(dst, &bits, dtype_bytes(d), static_cast<int64_t>(bytes(buffer)) / dtype_bytes(d));
      return;
    }
    case kBufO:
    case kBufLse: {
      const DType d = buffer == kBufO ? p_.o_dtype() : DType::f32;
      const uint32_t bits = poison_bits(d);  // little-endian: the low bytes are the dtype's bits
      fill_pattern(dst, &bits, dtype_bytes(d), st_.elems(kTensors[buffer]));
      return;
    }
    case kBufCuSeqlensQ: return copy(cu_q_);
    case kBufCuSeqlensKv: return copy(cu_kv_);
    case kBufSequsedKv: return copy(used_);
    case kBufBlockTable: return copy(in_.block_table);
    case kBufCacheSeqlens: return copy(cache_);
    case kBufAlibiSlopes: return copy(in_.alibi_slopes);
    case kBufSinks: return copy(in_.sinks);
    case kBufDescaleQ: return copy(in_.descale_q);
    case kBufDescaleK: return copy(in_.descale_k);
    case kBufDescaleV: return copy(in_.descale_v);
    default: return;
  }
}

HarnessResult Staging::collect(const uint8_t* o, const uint8_t* lse, bool with_lse) const {
  HarnessResult r;
  const DType od = p_.o_dtype();
  const int64_t eb = dtype_bytes(od);
  if (logical_layout(Tensor::o)) {
    r.o.resize(as_size(p_.o_elems()));
    decode(od, o, p_.o_elems(), r.o.data());
  } else {
    r.o = st_.decode(Tensor::o, o, od);
  }
  if (with_lse) {
    std::vector<float> l(as_size(p_.lse_elems()));
    each_row(Tensor::lse, [&](int64_t li, int64_t s, int64_t) { std::memcpy(&l[as_size(li)], lse + s * 4, 4); });
    r.lse = std::move(l);
  }
  // Elements no row maps to (THD padding rows) must still hold the poison: a kernel that writes
  // rows past cu_seqlens[-1] corrupts whatever a real caller keeps there.
  const bool o_pad = st_.elems(Tensor::o) > p_.o_elems(), lse_pad = with_lse && st_.elems(Tensor::lse) > p_.lse_elems();
  if (o_pad || lse_pad) {
    int64_t written = 0;
    std::vector<char> covered;
    auto count = [&](Tensor t, const uint8_t* buf, DType d) {
      st_.mark_covered(t, covered);
      const uint32_t bits = poison_bits(d);
      const int n = dtype_bytes(d);
      for (size_t i = 0; i < covered.size(); ++i)
        written += !covered[i] && std::memcmp(buf + i * static_cast<size_t>(n), &bits, static_cast<size_t>(n)) != 0;
    };
    if (o_pad) count(Tensor::o, o, od);
    if (lse_pad) count(Tensor::lse, lse, DType::f32);
    r.padding_written = written;
  }
  return r;
}

KernelGradients Staging::collect_gradients(const uint8_t* dq, const uint8_t* dk, const uint8_t* dv, const uint8_t* dsinks) const {
  const DType gd = gradient_dtype(p_);
  KernelGradients g{st_.decode(Tensor::q, dq, gd), st_.decode(Tensor::k, dk, gd), st_.decode(Tensor::v, dv, gd), std::nullopt,
                    std::nullopt};
  if (p_.sinks && dsinks) {
    std::vector<float> s(as_size(p_.heads_q));
    std::memcpy(s.data(), dsinks, s.size() * 4);
    g.dsinks = std::move(s);
  }
  // The gradients' elements no row maps to (THD pad tokens, unread slots of a paged cache) must
  // still hold the poison they were staged with, as o's must (collect).
  const std::pair<Tensor, const uint8_t*> grads[] = {{Tensor::q, dq}, {Tensor::k, dk}, {Tensor::v, dv}};
  std::vector<char> covered;
  const uint32_t bits = poison_bits(gd);
  const size_t n = static_cast<size_t>(dtype_bytes(gd));
  for (const auto& [t, buf] : grads) {
    if (!buf) continue;
    st_.mark_covered(t, covered);
    if (std::find(covered.begin(), covered.end(), char{0}) == covered.end()) continue;  // no such element
    int64_t written = 0;
    for (size_t i = 0; i < covered.size(); ++i) written += !covered[i] && std::memcmp(buf + i * n, &bits, n) != 0;
    g.padding_written = g.padding_written.value_or(0) + written;
  }
  return g;
}

int64_t Staging::changed_byte(int buffer, const uint8_t* now) const {
  std::vector<uint8_t> staged(bytes(buffer));
  fill(buffer, staged.data());
  const auto [a, b] = std::mismatch(staged.begin(), staged.end(), now);
  return a == staged.end() ? -1 : a - staged.begin();
}

namespace {
// Every buffer the staging uses, in `mem`, filled and uploaded: the five tensors always (and the
// backward's four with it), side tensors where the problem has them.
void stage(Memory mem, const Staging& staging, StagedBuffers& buf) {
  for (int b = 0; b < kStagedBuffers; ++b) {
    const size_t n = staging.bytes(b);
    const bool always = b <= kBufLse || (staging.backward() && b >= kBufDout && b <= kBufDv);
    if (!n && !always) continue;
    buf[static_cast<size_t>(b)] = std::make_unique<GuardedBuffer>(mem, n);
    staging.fill(b, buf[static_cast<size_t>(b)]->payload_host());
    buf[static_cast<size_t>(b)]->upload();
  }
}
}  // namespace

StagedProblem::StagedProblem(Memory mem, const Problem& p, const Inputs& in) : staging(p, in) { stage(mem, staging, buf); }

StagedProblem::StagedProblem(Memory mem, const Problem& p, const Inputs& in, const std::vector<float>& d_out) : staging(p, in, d_out) {
  stage(mem, staging, buf);
}

std::array<void*, kStagedBuffers> StagedProblem::kernel_ptrs() {
  std::array<void*, kStagedBuffers> ptr{};
  for (size_t b = 0; b < ptr.size(); ++b) ptr[b] = buf[b] ? buf[b]->kernel_ptr() : nullptr;
  return ptr;
}

void StagedProblem::launch(const Variant& var) {
  const bool dev = var.caps().memory == Memory::device;
  const KernelArgs a = kernel_args(staging.shape(), kernel_ptrs(), var.caps().lse_base != LseBase::none, dev ? device::stream() : nullptr);
  var.forward(staging.problem(), a);
}

}  // namespace flashcheck
