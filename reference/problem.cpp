#include "reference/problem.h"

#include <charconv>
#include <cmath>
#include <map>
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

double Problem::softmax_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim_qk));
}

double Problem::flops() const {
  double pairs = 0;
  if (causal == Causal::none) {
    pairs = static_cast<double>(seq_q) * static_cast<double>(seq_kv);
  } else {
    for (int64_t i = 0; i < seq_q; ++i) pairs += static_cast<double>(visible_keys(*this, i));
  }
  return 2.0 * pairs * static_cast<double>(head_dim_qk + head_dim_v) * static_cast<double>(batch * heads_q);
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
}  // namespace

void validate(const Problem& p) {
  require_positive(p.batch, "batch");
  require_positive(p.heads_q, "heads_q");
  require_positive(p.heads_kv, "heads_kv");
  require_positive(p.seq_q, "seq_q");
  require_positive(p.seq_kv, "seq_kv");
  require_positive(p.head_dim_qk, "head_dim_qk");
  require_positive(p.head_dim_v, "head_dim_v");
  if (p.heads_q % p.heads_kv != 0)
    throw InvalidProblem("heads_q (" + std::to_string(p.heads_q) + ") must be a multiple of heads_kv (" +
                         std::to_string(p.heads_kv) + ")");
  checked_product({p.batch, p.heads_q, p.seq_q, p.head_dim_qk}, "q");
  checked_product({p.batch, p.heads_kv, p.seq_kv, p.head_dim_qk}, "k");
  checked_product({p.batch, p.heads_kv, p.seq_kv, p.head_dim_v}, "v");
  checked_product({p.batch, p.heads_q, p.seq_q, p.head_dim_v}, "o");
  checked_product({p.seq_q, p.seq_kv}, "seq_q*seq_kv");
  // bottom_right needs seq_kv - seq_q, and kernels index with i + seq_kv - seq_q.
  int64_t tmp;
  if (__builtin_add_overflow(p.seq_q, p.seq_kv, &tmp)) throw InvalidProblem("seq_q + seq_kv overflows int64");
  if (p.scale && (!std::isfinite(*p.scale) || *p.scale == 0.0))
    throw InvalidProblem("scale must be finite and non-zero, got " + std::to_string(*p.scale));
}

std::string to_string(const Problem& p) {
  std::ostringstream os;
  os << "b=" << p.batch << " hq=" << p.heads_q << " hkv=" << p.heads_kv << " sq=" << p.seq_q << " skv=" << p.seq_kv
     << " dqk=" << p.head_dim_qk << " dv=" << p.head_dim_v << " causal=" << to_string(p.causal)
     << " dtype=" << to_string(p.dtype);
  if (p.scale) {
    os.precision(17);
    os << " scale=" << *p.scale;
  }
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
      else if (key == "s") set(key, {"sq", "skv"}), p.seq_q = p.seq_kv = as_int(key, val);
      else if (key == "sq") set(key, {"sq"}), p.seq_q = as_int(key, val);
      else if (key == "skv") set(key, {"skv"}), p.seq_kv = as_int(key, val);
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
      else throw InvalidProblem("unknown problem field " + quoted(key) +
                                " (known: b h hq hkv s sq skv d dqk dv causal dtype scale)");
    } catch (const InvalidProblem&) {
      throw;
    } catch (const std::exception& e) {
      throw InvalidProblem("problem field '" + key + "': " + e.what());
    }
  }
  validate(p);
  return p;
}

}  // namespace flashcheck
