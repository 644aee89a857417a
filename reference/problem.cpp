#include "reference/problem.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <numeric>
#include <ostream>
#include <sstream>
#include <vector>

#include "reference/mask.h"

namespace flashcheck {

std::string_view to_string(Causal c) {
  switch (c) {
    case Causal::none: return "none";
    case Causal::top_left: return "top_left";
    case Causal::bottom_right: return "bottom_right";
  }
  return "?";
}

Causal parse_causal(std::string_view s) {
  if (s == "none" || s == "false" || s == "0") return Causal::none;
  if (s == "top_left") return Causal::top_left;
  if (s == "bottom_right") return Causal::bottom_right;
  throw std::invalid_argument("unknown causal alignment '" + std::string(s) +
                              "' (expected none, top_left or bottom_right)");
}

std::string_view to_string(Alibi a) {
  switch (a) {
    case Alibi::none: return "none";
    case Alibi::symmetric: return "symmetric";
    case Alibi::signed_: return "signed";
  }
  return "?";
}

Alibi parse_alibi(std::string_view s) {
  if (s == "none") return Alibi::none;
  if (s == "symmetric") return Alibi::symmetric;
  if (s == "signed") return Alibi::signed_;
  throw std::invalid_argument("unknown ALiBi form '" + std::string(s) + "' (expected none, symmetric or signed)");
}

std::string_view to_string(Layout l) {
  switch (l) {
    case Layout::bhsd: return "bhsd";
    case Layout::bshd: return "bshd";
    case Layout::thd: return "thd";
  }
  return "?";
}

Layout parse_layout(std::string_view s) {
  if (s == "bhsd") return Layout::bhsd;
  if (s == "bshd") return Layout::bshd;
  if (s == "thd") return Layout::thd;
  throw std::invalid_argument("unknown layout '" + std::string(s) + "' (expected bhsd, bshd or thd)");
}

std::string_view to_string(PageOrder o) {
  switch (o) {
    case PageOrder::identity: return "identity";
    case PageOrder::shuffled: return "shuffled";
    case PageOrder::shared: return "shared";
  }
  return "?";
}

PageOrder parse_page_order(std::string_view s) {
  if (s == "identity") return PageOrder::identity;
  if (s == "shuffled") return PageOrder::shuffled;
  if (s == "shared") return PageOrder::shared;
  throw std::invalid_argument("unknown page order '" + std::string(s) + "' (expected identity, shuffled or shared)");
}

std::string_view to_string(Descale d) {
  switch (d) {
    case Descale::none: return "none";
    case Descale::tensor: return "tensor";
    case Descale::head: return "head";
  }
  return "?";
}

Descale parse_descale(std::string_view s) {
  if (s == "none") return Descale::none;
  if (s == "tensor") return Descale::tensor;
  if (s == "head") return Descale::head;
  throw std::invalid_argument("unknown descale granularity '" + std::string(s) + "' (expected none, tensor or head)");
}

double Problem::softmax_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim_qk));
}

DType Problem::o_dtype() const { return is_fp8(dtype) ? out_dtype.value_or(DType::bf16) : dtype; }

int64_t Problem::skv(int64_t b) const {
  if (!seqused_kv.empty()) return seqused_kv[static_cast<size_t>(b)];
  return skv_stored(b);
}

int64_t Problem::skv_stored(int64_t b) const {
  return seqlens_kv.empty() ? seq_kv : seqlens_kv[static_cast<size_t>(b)];
}

bool Problem::plain() const {
  return window.none() && softcap == 0 && alibi == Alibi::none && !sinks && layout == Layout::bhsd && seqlens_q.empty() &&
         seqlens_kv.empty() && seqused_kv.empty() && page_size == 0 && !is_fp8(dtype);
}

int64_t Problem::total_q() const {
  if (seqlens_q.empty()) return batch * seq_q;
  return std::accumulate(seqlens_q.begin(), seqlens_q.end(), int64_t{0});
}

int64_t Problem::total_kv() const {
  if (seqlens_kv.empty() && seqused_kv.empty()) return batch * seq_kv;
  int64_t t = 0;
  for (int64_t b = 0; b < batch; ++b) t += skv(b);
  return t;
}

double Problem::flops() const {
  double pairs = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t sqb = sq(b), skvb = skv(b);
    if (causal == Causal::none && window.none()) {
      pairs += static_cast<double>(sqb) * static_cast<double>(skvb);
      continue;
    }
    for (int64_t i = 0; i < sqb; ++i) pairs += static_cast<double>(visible_range(*this, b, i).count());
  }
  return 2.0 * pairs * static_cast<double>(head_dim_qk + head_dim_v) * static_cast<double>(heads_q);
}

void normalize(Problem& p) {
  if (p.layout == Layout::thd && p.seqlens_q.empty() && p.batch > 0 && p.batch <= (int64_t{1} << 24))
    p.seqlens_q.assign(static_cast<size_t>(p.batch), p.seq_q);
  if ((p.layout == Layout::thd || p.page_size > 0) && p.seqlens_kv.empty() && p.batch > 0 && p.batch <= (int64_t{1} << 24))
    p.seqlens_kv.assign(static_cast<size_t>(p.batch), p.seq_kv);
  if (!p.seqlens_q.empty()) p.seq_q = *std::max_element(p.seqlens_q.begin(), p.seqlens_q.end());
  if (!p.seqlens_kv.empty()) p.seq_kv = *std::max_element(p.seqlens_kv.begin(), p.seqlens_kv.end());
}

namespace {
void require_positive(int64_t v, const char* name) {
  if (v <= 0) throw InvalidProblem(std::string(name) + " must be positive, got " + std::to_string(v));
}
int64_t checked_product(std::initializer_list<int64_t> f, const char* what) {
  int64_t r = 1;
  for (int64_t x : f) {
    if (__builtin_mul_overflow(r, x, &r)) throw InvalidProblem(std::string(what) + " element count overflows int64");
  }
  // The byte size (≤ 8 bytes per element in any buffer we allocate) must fit too.
  int64_t bytes;
  if (__builtin_mul_overflow(r, int64_t{8}, &bytes)) throw InvalidProblem(std::string(what) + " byte size overflows int64");
  return r;
}
// A per-sequence list: B entries, none negative; returns their sum (checked).
int64_t check_list(const std::vector<int64_t>& v, int64_t batch, const char* name) {
  if (static_cast<int64_t>(v.size()) != batch)
    throw InvalidProblem(std::string(name) + " lists " + std::to_string(v.size()) + " sequences, batch is " +
                         std::to_string(batch));
  int64_t sum = 0;
  for (size_t b = 0; b < v.size(); ++b) {
    if (v[b] < 0)
      throw InvalidProblem(std::string(name) + "[" + std::to_string(b) + "] is negative (" + std::to_string(v[b]) + ")");
    if (__builtin_add_overflow(sum, v[b], &sum)) throw InvalidProblem(std::string(name) + " total overflows int64");
  }
  return sum;
}
}  // namespace

void validate(const Problem& p) {
  require_positive(p.batch, "batch");
  require_positive(p.heads_q, "heads_q");
  require_positive(p.heads_kv, "heads_kv");
  require_positive(p.head_dim_qk, "head_dim_qk");
  require_positive(p.head_dim_v, "head_dim_v");
  if (p.heads_q % p.heads_kv != 0)
    throw InvalidProblem("heads_q (" + std::to_string(p.heads_q) + ") must be a multiple of heads_kv (" +
                         std::to_string(p.heads_kv) + ")");
  // Sequences: dense problems have positive lengths; listed ones may hold empty sequences.
  const bool thd = p.layout == Layout::thd;
  if (!p.seqlens_q.empty() && !thd)
    throw InvalidProblem("seqlens_q (per-sequence query lengths) needs layout=thd, got layout=" + std::string(to_string(p.layout)));
  if (thd && p.seqlens_q.empty()) throw InvalidProblem("layout=thd needs seqlens_q (per-sequence query lengths)");
  if (!p.seqlens_kv.empty() && !thd && p.page_size == 0)
    throw InvalidProblem("seqlens_kv (per-sequence key lengths) needs layout=thd or a paged cache; a dense cache's "
                         "per-sequence lengths are seqused_kv");
  if ((thd || p.page_size > 0) && p.seqlens_kv.empty())
    throw InvalidProblem(std::string(p.page_size > 0 ? "a paged cache needs seqlens_kv (cache_seqlens)"
                                                     : "layout=thd needs seqlens_kv (per-sequence key lengths)"));
  if (p.page_size < 0) throw InvalidProblem("page_size must be positive (or 0: no paged cache), got " + std::to_string(p.page_size));
  if (p.page_size > 0 && !p.seqused_kv.empty())
    throw InvalidProblem("seqused_kv with a paged cache: the cache lengths (seqlens_kv) already say how many keys are used");
  int64_t total_q = 0, total_kv_stored = 0;
  if (!p.seqlens_q.empty()) total_q = check_list(p.seqlens_q, p.batch, "seqlens_q");
  else {
    require_positive(p.seq_q, "seq_q");
    total_q = checked_product({p.batch, p.seq_q}, "batch*seq_q");
  }
  if (!p.seqlens_kv.empty()) total_kv_stored = check_list(p.seqlens_kv, p.batch, "seqlens_kv");
  else {
    require_positive(p.seq_kv, "seq_kv");
    total_kv_stored = checked_product({p.batch, p.seq_kv}, "batch*seq_kv");
  }
  if (!p.seqlens_q.empty() && p.seq_q != *std::max_element(p.seqlens_q.begin(), p.seqlens_q.end()))
    throw InvalidProblem("seq_q must be the largest of seqlens_q (normalize the problem)");
  if (!p.seqlens_kv.empty() && p.seq_kv != *std::max_element(p.seqlens_kv.begin(), p.seqlens_kv.end()))
    throw InvalidProblem("seq_kv must be the largest of seqlens_kv (normalize the problem)");
  if (!p.seqused_kv.empty()) {
    check_list(p.seqused_kv, p.batch, "seqused_kv");
    for (int64_t b = 0; b < p.batch; ++b)
      if (p.seqused_kv[static_cast<size_t>(b)] > p.skv_stored(b))
        throw InvalidProblem("seqused_kv[" + std::to_string(b) + "] = " + std::to_string(p.seqused_kv[static_cast<size_t>(b)]) +
                             " exceeds the " + std::to_string(p.skv_stored(b)) + " keys stored for that sequence");
  }
  checked_product({total_q, p.heads_q, p.head_dim_qk}, "q");
  checked_product({total_kv_stored, p.heads_kv, p.head_dim_qk}, "k");
  checked_product({total_kv_stored, p.heads_kv, p.head_dim_v}, "v");
  checked_product({total_q, p.heads_q, p.head_dim_v}, "o");
  checked_product({p.seq_q, p.seq_kv}, "seq_q*seq_kv");
  // bottom_right needs seq_kv - seq_q, and kernels index with i + seq_kv - seq_q.
  int64_t tmp;
  if (__builtin_add_overflow(p.seq_q, p.seq_kv, &tmp)) throw InvalidProblem("seq_q + seq_kv overflows int64");
  if (p.scale && (!std::isfinite(*p.scale) || *p.scale == 0.0))
    throw InvalidProblem("scale must be finite and non-zero, got " + std::to_string(*p.scale));
  // Variants.
  if (p.window.left < -1 || p.window.right < -1)
    throw InvalidProblem("window bounds must be >= -1 (-1: unbounded), got (" + std::to_string(p.window.left) + ", " +
                         std::to_string(p.window.right) + ")");
  if (!std::isfinite(p.softcap) || p.softcap < 0)
    throw InvalidProblem("softcap must be finite and >= 0 (0: no cap), got " + std::to_string(p.softcap));
  if (p.alibi_per_batch && p.alibi == Alibi::none) throw InvalidProblem("alibi_per_batch without ALiBi (alibi=none)");
  if (is_fp8(p.dtype)) {
    if (p.out_dtype && *p.out_dtype != DType::bf16 && *p.out_dtype != DType::f16)
      throw InvalidProblem("out_dtype of an fp8 problem must be bf16 or f16, got " + std::string(to_string(*p.out_dtype)));
  } else {
    if (p.out_dtype && *p.out_dtype != p.dtype)
      throw InvalidProblem("out_dtype is for fp8 inputs only (dtype is " + std::string(to_string(p.dtype)) + ")");
    if (p.descale != Descale::none) throw InvalidProblem("descale factors are for fp8 inputs only (dtype is " +
                                                         std::string(to_string(p.dtype)) + ")");
  }
  if (p.page_size > 0) {
    // Pages of the largest cache, and the block table: both must fit int32 indices, as kernels hold them.
    const int64_t max_pages = (p.seq_kv + p.page_size - 1) / p.page_size;
    checked_product({p.batch, std::max<int64_t>(max_pages, 1)}, "block_table");
    if (checked_product({p.batch, std::max<int64_t>(max_pages, 1)}, "block_table") > (int64_t{1} << 31) - 2)
      throw InvalidProblem("the paged cache needs more pages than int32 block-table entries can address");
  }
}

namespace {
// "3,0,17": a per-sequence list in a problem line.
std::string join(const std::vector<int64_t>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}
}  // namespace

std::string to_string(const Problem& p) {
  std::ostringstream os;
  os << "b=" << p.batch << " hq=" << p.heads_q << " hkv=" << p.heads_kv;
  os << " sq=" << (p.seqlens_q.empty() ? std::to_string(p.seq_q) : join(p.seqlens_q));
  os << " skv=" << (p.seqlens_kv.empty() ? std::to_string(p.seq_kv) : join(p.seqlens_kv));
  os << " dqk=" << p.head_dim_qk << " dv=" << p.head_dim_v << " causal=" << to_string(p.causal)
     << " dtype=" << to_string(p.dtype);
  if (p.scale) {
    os.precision(17);
    os << " scale=" << *p.scale;
  }
  // Variants, only when set: a plain problem prints exactly as in problem model 1.
  if (!p.window.none()) os << " window=" << p.window.left << "," << p.window.right;
  if (p.softcap != 0) {
    os.precision(17);
    os << " softcap=" << p.softcap;
  }
  if (p.alibi != Alibi::none) os << " alibi=" << to_string(p.alibi) << (p.alibi_per_batch ? " slopes=batch" : "");
  if (p.sinks) os << " sinks=1";
  if (p.layout != Layout::bhsd) os << " layout=" << to_string(p.layout);
  if (!p.seqused_kv.empty()) os << " used=" << join(p.seqused_kv);
  if (p.page_size > 0) os << " page=" << p.page_size << " pages=" << to_string(p.page_order);
  if (p.out_dtype) os << " odtype=" << to_string(*p.out_dtype);
  if (p.descale != Descale::none) os << " descale=" << to_string(p.descale);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Problem& p) { return os << to_string(p); }

Problem parse_problem(std::string_view s) {
  Problem p;
  std::istringstream is{std::string(s)};
  std::string tok;
  // A value as a message may quote it: a 300-digit number is cut.
  auto quoted = [](const std::string& v) {
    return v.size() <= 40 ? "'" + v + "'" : "'" + v.substr(0, 24) + "...' (" + std::to_string(v.size()) + " characters)";
  };
  auto as_int = [&](const std::string& key, const std::string& v) {
    int64_t x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      throw InvalidProblem("problem field '" + key + "' expects a whole number, got " + quoted(v));
    return x;
  };
  auto as_double = [&](const std::string& key, const std::string& v) {
    double x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      throw InvalidProblem("problem field '" + key + "' expects a number (e.g. 0.125), got " + quoted(v));
    return x;
  };
  // "17" or "3,0,17": a scalar, or a per-sequence list (varlen).
  auto as_list = [&](const std::string& key, const std::string& v) {
    std::vector<int64_t> out;
    size_t at = 0;
    while (true) {
      const size_t comma = v.find(',', at);
      out.push_back(as_int(key, v.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    return out;
  };
  auto as_bool = [&](const std::string& key, const std::string& v) {
    if (v == "1" || v == "true") return true;
    if (v == "0" || v == "false") return false;
    throw InvalidProblem("problem field '" + key + "' expects 0 or 1, got " + quoted(v));
  };
  // Each field may be given once, aliases included (h= sets hq and hkv, s= sq and skv, d= dqk): a
  // repeated one would otherwise be decided by its position, silently.
  std::map<std::string, std::string> given;  // field -> the key that set it
  auto set = [&](const std::string& key, std::initializer_list<const char*> fields) {
    for (const char* f : fields) {
      auto [at, fresh] = given.emplace(f, key);
      if (!fresh)
        throw InvalidProblem("problem field '" + std::string(f) + "' given twice (by '" + at->second + "=' and '" + key +
                             "='); give each field once");
    }
  };
  // Lengths: a list makes the problem variable-length (per sequence); a scalar is every sequence's.
  auto set_q = [&](const std::vector<int64_t>& v) {
    if (v.size() == 1) p.seq_q = v[0];
    else p.seqlens_q = v;
  };
  auto set_kv = [&](const std::vector<int64_t>& v) {
    if (v.size() == 1) p.seq_kv = v[0];
    else p.seqlens_kv = v;
  };
  bool dv_set = false;
  while (is >> tok) {
    auto eq = tok.find('=');
    if (eq == std::string::npos) throw InvalidProblem("problem token " + quoted(tok) + " is not key=value");
    std::string key = tok.substr(0, eq), val = tok.substr(eq + 1);
    try {
      if (key == "b") set(key, {"b"}), p.batch = as_int(key, val);
      else if (key == "h") set(key, {"hq", "hkv"}), p.heads_q = p.heads_kv = as_int(key, val);
      else if (key == "hq") set(key, {"hq"}), p.heads_q = as_int(key, val);
      else if (key == "hkv") set(key, {"hkv"}), p.heads_kv = as_int(key, val);
      else if (key == "s") {
        set(key, {"sq", "skv"});
        const auto v = as_list(key, val);
        set_q(v), set_kv(v);
      } else if (key == "sq") set(key, {"sq"}), set_q(as_list(key, val));
      else if (key == "skv") set(key, {"skv"}), set_kv(as_list(key, val));
      else if (key == "d" || key == "dqk") {
        set(key, {"dqk"});
        p.head_dim_qk = as_int(key, val);
        if (!dv_set) p.head_dim_v = p.head_dim_qk;
      } else if (key == "dv") {
        set(key, {"dv"});
        p.head_dim_v = as_int(key, val);
        dv_set = true;
      }
      else if (key == "causal") set(key, {"causal"}), p.causal = parse_causal(val);
      else if (key == "dtype") set(key, {"dtype"}), p.dtype = parse_dtype(val);
      else if (key == "scale") set(key, {"scale"}), p.scale = as_double(key, val);
      else if (key == "window") {
        set(key, {"window"});
        const auto v = as_list(key, val);
        if (v.size() != 2) throw InvalidProblem("problem field 'window' expects left,right (e.g. 128,0), got " + quoted(val));
        p.window = {v[0], v[1]};
      } else if (key == "softcap") set(key, {"softcap"}), p.softcap = as_double(key, val);
      else if (key == "alibi") set(key, {"alibi"}), p.alibi = parse_alibi(val);
      else if (key == "slopes") {
        set(key, {"slopes"});
        if (val != "head" && val != "batch") throw InvalidProblem("problem field 'slopes' expects head or batch, got " + quoted(val));
        p.alibi_per_batch = val == "batch";
      } else if (key == "sinks") set(key, {"sinks"}), p.sinks = as_bool(key, val);
      else if (key == "layout") set(key, {"layout"}), p.layout = parse_layout(val);
      else if (key == "used") set(key, {"used"}), p.seqused_kv = as_list(key, val);
      else if (key == "page") set(key, {"page"}), p.page_size = as_int(key, val);
      else if (key == "pages") set(key, {"pages"}), p.page_order = parse_page_order(val);
      else if (key == "odtype") set(key, {"odtype"}), p.out_dtype = parse_dtype(val);
      else if (key == "descale") set(key, {"descale"}), p.descale = parse_descale(val);
      else throw InvalidProblem("unknown problem field " + quoted(key) +
                                " (known: b h hq hkv s sq skv d dqk dv causal dtype scale window softcap alibi slopes sinks "
                                "layout used page pages odtype descale)");
    } catch (const InvalidProblem&) {
      throw;
    } catch (const std::exception& e) {
      throw InvalidProblem("problem field '" + key + "': " + e.what());
    }
  }
  // A list of lengths makes the problem variable-length: packed THD unless a paged cache holds the
  // keys of a dense query batch.
  if (!p.seqlens_q.empty() && !given.count("layout")) p.layout = Layout::thd;
  if (given.count("page") && p.page_size == 0) throw InvalidProblem("problem field 'page' must be positive");
  normalize(p);
  validate(p);
  return p;
}

}  // namespace flashcheck
