// Reading a `check` file (verify/check_file_format.h): its problem from shapes, index tensors and
// metadata, its side inputs, then every tensor gathered from its storage layout (reference/storage.h)
// into the logical one. Every refusal names the tensor or key at fault.
#include <charconv>
#include <cmath>
#include <string_view>

#include "reference/storage.h"
#include "verify/check_file_detail.h"
#include "verify/check_file_format.h"
#include "verify/metrics.h"

namespace flashcheck {

namespace check_file_detail {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

const StTensor* find(const SafetensorsFile& f, const std::string& name) {
  auto it = f.tensors.find(name);
  return it == f.tensors.end() ? nullptr : &it->second;
}
void expect_shape(const std::string& name, const StTensor& t, const std::vector<int64_t>& want, const std::string& what) {
  if (t.shape != want)
    throw CannotTest("tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(want) + " (" + what + ")");
}
}  // namespace check_file_detail

using namespace check_file_detail;

namespace {

StTensor& need(SafetensorsFile& f, const std::string& name, const std::string& why = "") {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) throw CannotTest("missing tensor '" + name + "'" + why);
  return it->second;
}

// A metadata number: the whole string, nothing after it (NaN and Inf parse; validate() refuses them).
double parse_number(const std::string& key, const std::string& s) {
  try {
    size_t pos = 0;
    const double x = std::stod(s, &pos);
    if (pos != s.size()) throw std::invalid_argument("trailing characters");
    return x;
  } catch (const std::exception&) {
    throw CannotTest("metadata " + key + " must be a number, got '" + s + "'");
  }
}

// "left,right" (spaces allowed around each number).
Window parse_window(const std::string& s) {
  auto bad = [&] { return CannotTest("metadata window must be \"left,right\" (whole numbers, -1 unbounded), got '" + s + "'"); };
  const size_t comma = s.find(',');
  if (comma == std::string::npos || s.find(',', comma + 1) != std::string::npos) throw bad();
  auto num = [&](std::string_view v) {
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
    int64_t x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size()) throw bad();
    return x;
  };
  return {num(std::string_view(s).substr(0, comma)), num(std::string_view(s).substr(comma + 1))};
}

// A 1-D index tensor of n entries (I32 or I64).
std::vector<int64_t> index_list(const StTensor& t, const std::string& name, int64_t n, const std::string& what) {
  expect_shape(name, t, {n}, what);
  try {
    return t.to_i64(name);
  } catch (const SafetensorsError& e) {
    throw CannotTest(e.what());
  }
}

// Per-sequence lengths from cu_seqlens (B+1 entries from 0, non-decreasing, ending within `rows`).
std::vector<int64_t> lengths_of(const std::vector<int64_t>& cu, const std::string& name, const std::string& tensor,
                                int64_t rows) {
  if (cu.front() != 0) throw CannotTest("tensor '" + name + "' starts at " + std::to_string(cu.front()) + "; it must start at 0");
  std::vector<int64_t> len;
  for (size_t b = 1; b < cu.size(); ++b) {
    if (cu[b] < cu[b - 1])
      throw CannotTest("tensor '" + name + "' decreases at [" + std::to_string(b) + "] (" + std::to_string(cu[b]) + " after " +
                       std::to_string(cu[b - 1]) + ")");
    len.push_back(cu[b] - cu[b - 1]);
  }
  if (cu.back() > rows)
    throw CannotTest("tensor '" + name + "' ends at " + std::to_string(cu.back()) + ", past the " + std::to_string(rows) +
                     " rows of '" + tensor + "'");
  return len;
}

// An F32 side tensor whose shape is one of `shapes`; returns the index of the shape it has.
size_t f32_side(const StTensor& t, const std::string& name, const std::vector<std::vector<int64_t>>& shapes,
                const std::string& expected, std::vector<float>& out) {
  if (t.dtype != StDType::F32) throw CannotTest("tensor '" + name + "' has dtype " + to_string(t.dtype) + "; expected F32");
  for (size_t i = 0; i < shapes.size(); ++i)
    if (t.shape == shapes[i]) {
      out = t.to_f32(name);
      return i;
    }
  throw CannotTest("tensor '" + name + "' has shape " + shape_str(t.shape) + "; expected " + expected);
}

}  // namespace

namespace check_file_detail {
// Where logical element `e` of tensor t lies in the file's tensor, as an index list of its shape.
std::string file_position(const Problem& p, const Storage& st, Tensor t, int64_t e, const std::vector<int64_t>& shape) {
  const bool kv = t == Tensor::k || t == Tensor::v;
  const int64_t w = st.width(t), heads = kv ? p.heads_kv : p.heads_q;
  int64_t r = e / w;
  int64_t offset = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = kv ? p.skv(b) : p.sq(b);
    if (r < heads * n) {
      offset = st.row(t, b, r / n, r % n) + e % w;
      break;
    }
    r -= heads * n;
  }
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? offset % shape[d] : 0;
    offset = shape[d] ? offset / shape[d] : 0;
  }
  return shape_str(idx);
}

void refuse_nonfinite(const Problem& p, const Storage& st, Tensor t, const std::vector<float>& x,
                      const std::vector<int64_t>& shape, const std::string& name) {
  // The first non-finite element, found over all threads (inputs reach 10^9 elements).
  int64_t first = static_cast<int64_t>(x.size());
  const int64_t n = first;
#pragma omp parallel for reduction(min : first) schedule(static)
  for (int64_t j = 0; j < n; ++j)
    if (!std::isfinite(x[static_cast<size_t>(j)]) && j < first) first = j;
  if (first == n) return;
  refuse_nonfinite_at(p, st, t, first, std::isnan(x[static_cast<size_t>(first)]), shape, name);
}

void refuse_nonfinite_at(const Problem& p, const Storage& st, Tensor t, int64_t at, bool nan,
                         const std::vector<int64_t>& shape, const std::string& name) {
  throw CannotTest((name.empty() ? "input '" + std::string(to_string(t)) : "tensor '" + name) + "' holds " +
                   (nan ? "NaN" : "Inf") + " at " + file_position(p, st, t, at, shape) +
                   "; pass --allow-nonfinite-inputs to check NaN/Inf propagation instead");
}
}  // namespace check_file_detail

namespace {

// fp8 descale factors: each of q_descale, k_descale, v_descale per tensor ([1] or a scalar) or per
// (batch, KV head); a missing one is 1. Mixed granularities are brought to per (batch, KV head).
void read_descales(SafetensorsFile& f, Problem& p, Inputs& in) {
  const char* names[3] = {"q_descale", "k_descale", "v_descale"};
  std::vector<float>* dst[3] = {&in.descale_q, &in.descale_k, &in.descale_v};
  bool any = false, per_head = false;
  std::vector<float> raw[3];
  bool given[3] = {};
  for (int i = 0; i < 3; ++i) {
    const StTensor* t = find(f, names[i]);
    if (!t) continue;
    if (!is_fp8(p.dtype))
      throw CannotTest(std::string("tensor '") + names[i] + "' is for fp8 inputs; q is " + to_string(to_st(p.dtype)));
    const size_t which = f32_side(*t, names[i], {{1}, {}, {p.batch, p.heads_kv}},
                                  "[1] (per tensor) or [B, Hkv] = " + shape_str({p.batch, p.heads_kv}) + " (per batch and KV head)",
                                  raw[i]);
    for (size_t j = 0; j < raw[i].size(); ++j)
      if (!std::isfinite(raw[i][j]) || raw[i][j] <= 0)
        throw CannotTest(std::string("tensor '") + names[i] + "' holds " + std::to_string(raw[i][j]) + " at [" + std::to_string(j) +
                         "]; descale factors must be finite and positive");
    any = given[i] = true;
    per_head = per_head || which == 2;
  }
  if (!any) return;
  p.descale = per_head ? Descale::head : Descale::tensor;
  const size_t n = per_head ? static_cast<size_t>(p.batch * p.heads_kv) : 1;
  for (int i = 0; i < 3; ++i) {
    if (!given[i]) dst[i]->assign(n, 1.0f);
    else if (raw[i].size() == n) *dst[i] = raw[i];
    else dst[i]->assign(n, raw[i][0]);  // one factor for every (batch, KV head): the same products
  }
}

struct Sizes {
  int64_t rows_q = 0, rows_kv = 0;  // thd: rows of q and of k/v (padding included)
  int64_t dense_sq = 0, dense_skv = 0;
};
}  // namespace

CheckFileCase read_check_case(SafetensorsFile& f, bool allow_nonfinite_inputs, const std::function<void(const char*)>& lap,
                              bool keep_raw) {
  auto phase = [&](const char* name) {
    if (lap) lap(name);
  };
  CheckFileCase c;
  Problem& p = c.problem;
  Inputs& in = c.inputs;
  auto meta = [&](const std::string& key, const std::string& dflt) {
    auto it = f.metadata.find(key);
    return it == f.metadata.end() ? dflt : it->second;
  };
  for (const char* alias : {"descale_q", "descale_k", "descale_v"})
    if (find(f, alias))
      throw CannotTest(std::string("tensor '") + alias + "' is not one flashcheck reads: fp8 descale factors are 'q_descale', "
                       "'k_descale' and 'v_descale' (FlashAttention 3's names)");

  // Dtypes: q, k, v one type; o the same, or bf16/f16 for fp8 inputs.
  StTensor &q = need(f, "q"), &k = need(f, "k"), &v = need(f, "v"), &o = need(f, "o");
  const auto qd = from_st(q.dtype);
  if (!qd) throw CannotTest("tensor 'q' has dtype " + to_string(q.dtype) + "; expected BF16, F16, F32, F8_E4M3 or F8_E5M2");
  for (auto [name, t] : {std::pair{"k", &k}, {"v", &v}})
    if (t->dtype != q.dtype)
      throw CannotTest(std::string("tensor '") + name + "' is " + to_string(t->dtype) + " but q is " + to_string(q.dtype) +
                       ": q, k and v must share one dtype");
  p.dtype = *qd;
  if (is_fp8(p.dtype)) {
    if (o.dtype != StDType::BF16 && o.dtype != StDType::F16)
      throw CannotTest("tensor 'o' has dtype " + to_string(o.dtype) + "; with fp8 inputs o must be BF16 or F16");
    p.out_dtype = *from_st(o.dtype);
  } else if (o.dtype != q.dtype) {
    throw CannotTest("tensor 'o' is " + to_string(o.dtype) + " but q is " + to_string(q.dtype) +
                     ": q, k, v and o must share one dtype (o differs only for fp8 inputs)");
  }

  // Layout, and the shapes' ranks.
  const StTensor* cu_q = find(f, "cu_seqlens_q");
  const StTensor* cu_k = find(f, "cu_seqlens_k");
  const StTensor* table = find(f, "block_table");
  const bool paged = table != nullptr;
  try {
    p.layout = parse_layout(meta("layout", cu_q ? "thd" : "bhsd"));
  } catch (const std::invalid_argument&) {
    throw CannotTest("metadata layout must be bhsd, bshd or thd, got '" + meta("layout", "") + "'");
  }
  const bool thd = p.layout == Layout::thd;
  if (cu_q && !thd)
    throw CannotTest("tensor 'cu_seqlens_q' makes a varlen (thd) file, but metadata layout is '" + meta("layout", "") + "'");
  if (thd && !cu_q) throw CannotTest("layout thd needs tensor 'cu_seqlens_q' (B+1 sequence starts)");
  if (cu_k && !thd) throw CannotTest("tensor 'cu_seqlens_k' needs layout thd (with cu_seqlens_q)");
  const std::string lay(to_string(p.layout));
  const std::string q_form = thd ? "[T,H,D]" : p.layout == Layout::bshd ? "[B,S,H,D]" : "[B,H,S,D]";
  for (auto [name, t] : {std::pair{"q", &q}, {"o", &o}, {"k", &k}, {"v", &v}}) {
    const bool kv = *name == 'k' || *name == 'v';
    const size_t rank = kv && paged ? 4 : thd ? 3 : 4;
    if (t->shape.size() != rank)
      throw CannotTest(std::string("tensor '") + name + "' must have " + std::to_string(rank) + " dimensions " +
                       (kv && paged ? "[num_pages,page_size,H,D] (a paged cache)" : q_form + " for layout " + lay) +
                       ", has " + shape_str(t->shape));
  }
  // Sizes from q and k; every tensor's full shape is compared with the storage's below.
  Sizes z;
  if (thd) {
    z.rows_q = q.shape[0];
    p.heads_q = q.shape[1];
    p.head_dim_qk = q.shape[2];
    if (cu_q->shape.size() != 1 || cu_q->shape[0] < 2)
      throw CannotTest("tensor 'cu_seqlens_q' has shape " + shape_str(cu_q->shape) + "; expected [B+1] with B >= 1");
    p.batch = cu_q->shape[0] - 1;
  } else {
    p.batch = q.shape[0];
    p.heads_q = q.shape[p.layout == Layout::bshd ? 2 : 1];
    z.dense_sq = q.shape[p.layout == Layout::bshd ? 1 : 2];
    p.head_dim_qk = q.shape[3];
  }
  p.head_dim_v = v.shape.back();
  int64_t pad_q = 0, pad_kv = 0;
  if (paged) {
    in.num_pages = k.shape[0];
    p.page_size = k.shape[1];
    p.heads_kv = k.shape[2];
    if (p.page_size == 0) throw CannotTest("page_size (dimension 1 of the paged caches k and v) is 0");
  } else if (thd) {
    z.rows_kv = k.shape[0];
    p.heads_kv = k.shape[1];
  } else {
    p.heads_kv = k.shape[p.layout == Layout::bshd ? 2 : 1];
    z.dense_skv = k.shape[p.layout == Layout::bshd ? 1 : 2];
  }
  if (p.batch <= 0 || p.heads_q <= 0 || p.heads_kv <= 0)
    throw CannotTest("tensors q and k hold no batch or no heads (q " + shape_str(q.shape) + ", k " + shape_str(k.shape) + ")");

  // Sequences.
  if (thd) {
    p.seqlens_q = lengths_of(index_list(*cu_q, "cu_seqlens_q", p.batch + 1, "B+1 sequence starts"), "cu_seqlens_q", "q", z.rows_q);
    int64_t total = 0;
    for (int64_t n : p.seqlens_q) total += n;
    pad_q = z.rows_q - total;
    if (!paged) {
      if (!cu_k) throw CannotTest("layout thd needs tensor 'cu_seqlens_k' (B+1 key sequence starts) unless k and v are a paged cache");
      p.seqlens_kv = lengths_of(index_list(*cu_k, "cu_seqlens_k", p.batch + 1, "B+1 sequence starts, as cu_seqlens_q"),
                                "cu_seqlens_k", "k", z.rows_kv);
      total = 0;
      for (int64_t n : p.seqlens_kv) total += n;
      pad_kv = z.rows_kv - total;
    }
  } else {
    p.seq_q = z.dense_sq;
    if (!paged) p.seq_kv = z.dense_skv;
  }
  const StTensor* used = find(f, "seqused_k");
  const StTensor* cache = find(f, "cache_seqlens");
  if (paged) {
    if (!cache) throw CannotTest("a paged cache (block_table) needs tensor 'cache_seqlens' (B cache lengths)");
    if (used) throw CannotTest("tensor 'seqused_k' with a paged cache: cache_seqlens already says how many keys each sequence uses");
    p.seqlens_kv = index_list(*cache, "cache_seqlens", p.batch, "one cache length per sequence");
    for (size_t b = 0; b < p.seqlens_kv.size(); ++b)
      if (p.seqlens_kv[b] < 0) throw CannotTest("cache_seqlens[" + std::to_string(b) + "] is negative (" + std::to_string(p.seqlens_kv[b]) + ")");
    if (cu_k) {
      const auto lens = lengths_of(index_list(*cu_k, "cu_seqlens_k", p.batch + 1, "B+1 entries"), "cu_seqlens_k", "cache_seqlens",
                                   INT64_MAX);
      if (lens != p.seqlens_kv) throw CannotTest("tensor 'cu_seqlens_k' disagrees with 'cache_seqlens' (the key lengths of a paged cache)");
    }
  } else if (used || cache) {
    if (used && cache) throw CannotTest("tensors 'seqused_k' and 'cache_seqlens' both give the keys used; give one");
    const std::string name = used ? "seqused_k" : "cache_seqlens";
    p.seqused_kv = index_list(used ? *used : *cache, name, p.batch, "keys used per sequence");
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t u = p.seqused_kv[static_cast<size_t>(b)];
      const int64_t stored = thd ? p.seqlens_kv[static_cast<size_t>(b)] : p.seq_kv;
      if (u < 0) throw CannotTest(name + "[" + std::to_string(b) + "] is negative (" + std::to_string(u) + ")");
      if (u > stored)
        throw CannotTest(name + "[" + std::to_string(b) + "] = " + std::to_string(u) + " exceeds the " + std::to_string(stored) +
                         " keys stored for sequence " + std::to_string(b));
    }
  }

  // Metadata.
  try {
    p.causal = parse_causal(meta("causal", "none"));
  } catch (const std::invalid_argument& e) {
    throw CannotTest(std::string("metadata causal: ") + e.what());
  }
  if (f.metadata.count("scale")) p.scale = parse_number("scale", f.metadata.at("scale"));
  if (f.metadata.count("softcap")) p.softcap = parse_number("softcap", f.metadata.at("softcap"));
  if (f.metadata.count("window")) p.window = parse_window(f.metadata.at("window"));
  const std::string conv = meta("window_convention", "inclusive");
  if (conv != "inclusive" && conv != "left_exclusive")
    throw CannotTest("metadata window_convention must be 'inclusive' or 'left_exclusive', got '" + conv + "'");
  if (conv == "left_exclusive" && p.window.left >= 0) {
    // cuDNN / xformers: key j visible iff j > i + d − left', i.e. left' = left + 1. A left' of 0
    // sees no key at or before the diagonal, which no inclusive bound states.
    if (p.window.left == 0)
      throw CannotTest("metadata window: a left bound of 0 in the left_exclusive convention leaves no key at or left of the "
                       "diagonal visible; flashcheck's windows cannot state that");
    c.notes.push_back("window: (" + std::to_string(p.window.left) + ", " + std::to_string(p.window.right) +
                      ") in the file's left_exclusive convention is (" + std::to_string(p.window.left - 1) + ", " +
                      std::to_string(p.window.right) + ") in flashcheck's (inclusive)");
    p.window.left -= 1;
  }
  const StTensor* slopes = find(f, "alibi_slopes");
  if (f.metadata.count("alibi")) {
    const std::string a = f.metadata.at("alibi");
    if (a != "symmetric" && a != "signed")
      throw CannotTest("metadata alibi must be 'symmetric' (FlashAttention) or 'signed' (FlashInfer, cuDNN), got '" + a + "'");
    if (!slopes) throw CannotTest("metadata alibi is '" + a + "' but the file has no tensor 'alibi_slopes'");
    p.alibi = parse_alibi(a);
  } else if (slopes) {
    throw CannotTest("tensor 'alibi_slopes' needs metadata alibi = 'symmetric' (FlashAttention: -slope*|i+d-j|) or 'signed' "
                     "(FlashInfer, cuDNN: slope*(j-i)); the form is never guessed");
  }
  const std::string alibi_lse = meta("alibi_lse", "exact");
  if (alibi_lse != "exact" && alibi_lse != "key_offset")
    throw CannotTest("metadata alibi_lse must be 'exact' or 'key_offset' (FlashAttention 2's causal slope*j), got '" + alibi_lse + "'");
  const std::string base = meta("lse_base", "e");
  if (base != "e" && base != "2") throw CannotTest("metadata lse_base must be 'e' or '2', got '" + base + "'");
  const std::string empty = meta("empty_row_lse", "-inf");
  if (empty != "-inf" && empty != "+inf") throw CannotTest("metadata empty_row_lse must be '-inf' or '+inf', got '" + empty + "'");
  c.declared.lse_base = base == "2" ? LseBase::two : LseBase::e;
  c.declared.empty_lse = empty == "-inf" ? EmptyRowLse::neg_inf : EmptyRowLse::pos_inf;
  c.declared.alibi_lse = alibi_lse == "exact" ? AlibiLse::exact : AlibiLse::key_offset;

  // Side inputs.
  if (slopes)
    p.alibi_per_batch = f32_side(*slopes, "alibi_slopes", {{p.heads_q}, {p.batch, p.heads_q}},
                                 "[Hq] = " + shape_str({p.heads_q}) + " or [B, Hq] = " + shape_str({p.batch, p.heads_q}),
                                 in.alibi_slopes) == 1;
  if (const StTensor* s = find(f, "sinks")) {
    f32_side(*s, "sinks", {{p.heads_q}}, "[Hq] = " + shape_str({p.heads_q}), in.sinks);
    p.sinks = true;
  }
  read_descales(f, p, in);
  if (paged) {
    if (table->shape.size() != 2 || table->shape[0] != p.batch)
      throw CannotTest("tensor 'block_table' has shape " + shape_str(table->shape) + "; expected [B, max_pages] with B = " +
                       std::to_string(p.batch));
    std::vector<int64_t> entries;
    try {
      entries = table->to_i64("block_table");
    } catch (const SafetensorsError& e) {
      throw CannotTest(e.what());
    }
    // Entries a sequence reads must name a page of k and v; those past its last page are never
    // read (vLLM pads them with -1 or 0) and are not judged.
    const int64_t max_pages = table->shape[1];
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t need = (p.seqlens_kv[static_cast<size_t>(b)] + p.page_size - 1) / p.page_size;
      if (need > max_pages)
        throw CannotTest("tensor 'block_table' rows hold " + std::to_string(max_pages) + " pages; sequence " + std::to_string(b) +
                         " needs " + std::to_string(need) + " for its " + std::to_string(p.seqlens_kv[static_cast<size_t>(b)]) +
                         " cached keys (cache_seqlens) in pages of " + std::to_string(p.page_size));
      for (int64_t j = 0; j < need; ++j) {
        const int64_t e = entries[static_cast<size_t>(b * max_pages + j)];
        if (e < 0 || e >= in.num_pages)
          throw CannotTest("block_table[" + std::to_string(b) + "][" + std::to_string(j) + "] = " + std::to_string(e) +
                           (e < 0 ? " is negative" : " is past the cache's " + std::to_string(in.num_pages) +
                                                         " pages (k and v dimension 0)"));
      }
    }
    in.block_table.resize(entries.size());
    for (size_t i = 0; i < entries.size(); ++i)
      in.block_table[i] = static_cast<int32_t>(std::clamp<int64_t>(entries[i], INT32_MIN, INT32_MAX));
  }
  normalize(p);
  try {
    validate(p);
    validate_side_inputs(p, in);
  } catch (const InvalidProblem& e) {
    throw CannotTest(std::string("bad problem in file metadata or shapes: ") + e.what());
  }
  if (p.total_q() == 0) throw CannotTest("the file holds no query rows (every sequence of cu_seqlens_q is empty)");

  // Storage: one per padding (q, o, lse share the query tokens; k, v the key tokens).
  const Storage st_q(p, in, pad_q), st_kv(p, in, pad_kv);
  const std::string where = paged ? "a paged cache" : "layout " + lay;
  expect_shape("q", q, st_q.shape(Tensor::q), "layout " + lay);
  expect_shape("o", o, st_q.shape(Tensor::o), "layout " + lay + ", as q with Dv");
  expect_shape("k", k, st_kv.shape(Tensor::k), where + ", as q with Hkv");
  expect_shape("v", v, st_kv.shape(Tensor::v), where + ", as k with Dv");
  StTensor* lse = f.tensors.count("lse") ? &f.tensors.at("lse") : nullptr;
  if (lse) {
    if (lse->dtype != StDType::F32) throw CannotTest("tensor 'lse' has dtype " + to_string(lse->dtype) + "; expected F32");
    expect_shape("lse", *lse, st_q.shape(Tensor::lse), thd ? "[Hq, T] for layout thd" : "[B, Hq, Sq]");
  }

  // Widen and gather into the logical layout; the raw bytes go as soon as they are widened. Dense
  // BHSD storage is the logical layout itself: no second copy of a multi-GB tensor.
  auto logical = [&](const Storage& st, Tensor t, StTensor& raw, int64_t elems, bool same) {
    std::vector<float> wide = raw.to_f32(std::string(to_string(t)));
    raw.data = {};
    raw.data.shrink_to_fit();
    if (same) return wide;
    std::vector<float> out(static_cast<size_t>(elems));
    st.gather(t, wide.data(), out.data());
    return out;
  };
  const bool bhsd = p.layout == Layout::bhsd;
  const bool kv_same = bhsd && !paged && p.seqused_kv.empty();
  const auto q_shape = q.shape, k_shape = k.shape, v_shape = v.shape;
  // Not a file with gradients: the backward's oracles read fp32 inputs here anyway, and its tensors'
  // refusals keep their order after the inputs' NaN/Inf refusal.
  const bool gradients = find(f, "do") || find(f, "dq") || find(f, "dk") || find(f, "dv") || find(f, "dsinks");
  if (keep_raw && kv_same && !gradients && (p.dtype == DType::bf16 || p.dtype == DType::f16)) {
    c.raw.emplace();
    c.raw->q = std::move(q);
    c.raw->k = std::move(k);
    c.raw->v = std::move(v);
    c.raw->nonfinite_unchecked = !allow_nonfinite_inputs;
  } else {
    in.q = logical(st_q, Tensor::q, q, p.q_elems(), bhsd);
    in.k = logical(st_kv, Tensor::k, k, p.k_elems(), kv_same);
    in.v = logical(st_kv, Tensor::v, v, p.v_elems(), kv_same);
    phase("widen to fp32");
  }
  if (!allow_nonfinite_inputs && !c.raw) {
    // Only what some row can read: padding rows, unused pages and keys past seqused were left out.
    refuse_nonfinite(p, st_q, Tensor::q, in.q, q_shape, "");
    refuse_nonfinite(p, st_kv, Tensor::k, in.k, k_shape, "");
    refuse_nonfinite(p, st_kv, Tensor::v, in.v, v_shape, "");
    phase("scan inputs for NaN/Inf");
  }

  // Outputs. THD padding rows (tokens past cu_seqlens_q[-1]) are not judged; whether a kernel wrote
  // them can be told only when the writer poisoned them first.
  const DType od = p.o_dtype();
  int64_t written = 0;
  bool any_poisoned = false;
  auto padding = [&](const char* name, const std::vector<float>& full, DType d, int64_t first, int64_t stride, int64_t count,
                     int64_t width) {
    // `count` runs of `width` elements, the first at `first`, one every `stride`.
    int64_t poison = 0, total = count * width;
    for (int64_t r = 0; r < count; ++r)
      for (int64_t j = 0; j < width; ++j) poison += is_poison(d, full[static_cast<size_t>(first + r * stride + j)]);
    if (total == 0) return;
    const std::string rows = std::to_string(pad_q) + " padding row(s) past cu_seqlens_q[-1]";
    if (poison == total) {
      c.notes.push_back(std::string(name) + ": the " + rows + " still hold flashcheck's poison (not written, as they must not be)");
      any_poisoned = true;
    } else if (poison > 0) {
      c.notes.push_back(std::string(name) + ": " + std::to_string(total - poison) + " of " + std::to_string(total) + " elements in the " +
                        rows + " were written over the poison the file's writer put there");
      written += total - poison;
      any_poisoned = true;
    } else {
      c.notes.push_back(std::string(name) + ": the " + rows + " are not judged (they do not hold flashcheck's poison, so whether "
                        "the kernel wrote them cannot be told)");
    }
  };
  if (c.raw && bhsd) {  // dense BHSD has no padding rows to look at: o goes as read
    c.raw->o = std::move(o);
  } else {
    std::vector<float> wide = o.to_f32("o");
    o.data = {};
    o.data.shrink_to_fit();
    if (thd && pad_q > 0) {
      const int64_t row = p.heads_q * p.head_dim_v;  // [T, Hq, Dv]: the padding is the trailing tokens
      padding("o", wide, od, (z.rows_q - pad_q) * row, row, pad_q, row);
    }
    if (bhsd) {
      c.o = std::move(wide);
    } else {
      c.o.resize(static_cast<size_t>(p.o_elems()));
      st_q.gather(Tensor::o, wide.data(), c.o.data());
    }
  }
  if (lse) {
    std::vector<float> wide = lse->to_f32("lse");
    if (thd && pad_q > 0) padding("lse", wide, DType::f32, z.rows_q - pad_q, z.rows_q, p.heads_q, pad_q);  // [Hq, T]
    if (bhsd) {
      c.lse = std::move(wide);
    } else {
      c.lse.emplace(static_cast<size_t>(p.lse_elems()));
      st_q.gather(Tensor::lse, wide.data(), c.lse->data());
    }
  }
  if (any_poisoned) c.padding_written = written;
  phase("gather outputs");
  c.gradients = read_check_gradients(f, p, st_q, st_kv, allow_nonfinite_inputs);
  if (c.gradients) phase("gather gradients");
  return c;
}

void widen_raw_inputs(CheckFileCase& c) {
  if (!c.raw || !c.inputs.q.empty()) return;
  c.inputs.q = c.raw->q.to_f32("q");
  c.inputs.k = c.raw->k.to_f32("k");
  c.inputs.v = c.raw->v.to_f32("v");
  for (StTensor* t : {&c.raw->q, &c.raw->k, &c.raw->v}) t->data = {};  // nothing reads them after this
}

void widen_raw_output(CheckFileCase& c) {
  if (!c.raw || !c.raw->o) return;
  c.o = c.raw->o->to_f32("o");
  c.raw->o.reset();
}

void refuse_nonfinite_raw(const CheckFileCase& c, const std::function<int64_t(Tensor, int64_t)>& first) {
  if (!c.raw || !c.raw->nonfinite_unchecked) return;
  if (!c.inputs.q.empty()) throw std::logic_error("refuse_nonfinite_raw: the raw inputs were widened (and released) first");
  const Problem& p = c.problem;
  const bool bf16 = p.dtype == DType::bf16;
  const uint16_t exponent = bf16 ? 0x7f80 : 0x7c00;  // all ones: NaN or ±Inf
  auto bits = [](const StTensor& t) { return reinterpret_cast<const uint16_t*>(t.data.data()); };
  auto host_first = [&](const StTensor& t, int64_t n) {  // over all threads: 10^9 elements
    const uint16_t* x = bits(t);
    int64_t at = n;
#pragma omp parallel for reduction(min : at) schedule(static)
    for (int64_t j = 0; j < n; ++j)
      if ((x[j] & exponent) == exponent && j < at) at = j;
    return at;
  };
  const Storage st(p, c.inputs, 0);  // dense BHSD: the logical layout is the storage
  for (auto [t, raw] : {std::pair{Tensor::q, &c.raw->q}, {Tensor::k, &c.raw->k}, {Tensor::v, &c.raw->v}}) {
    const int64_t n = raw->numel();
    const int64_t at = first ? first(t, n) : host_first(*raw, n);
    if (at >= n) continue;
    const uint16_t h = bits(*raw)[at];
    refuse_nonfinite_at(p, st, t, at, (h & (bf16 ? 0x7f : 0x3ff)) != 0, raw->shape, "");
  }
}

}  // namespace flashcheck
