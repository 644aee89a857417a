// The attention problem every oracle, kernel and verdict in flashcheck is about (problem model 2:
// plain attention plus the variants kernels ship — sliding windows, softcap, ALiBi, sinks,
// variable-length batches, paged KV caches, storage layouts and fp8 inputs).
//
// The semantics are stated once, here and in reference/mask.h and reference/score_mod.h; the README
// repeats them. Per query row i and key j of sequence b, with Sq = sq(b), Skv = skv(b) (keys used):
//   s = scale · q_i · k_j                      (fp8: q, k, v dequantized first: x · descale)
//   s = c · tanh(s / c)                        softcap c > 0 (0: none)
//   key j invisible (mask.h)                   → excluded (−inf)
//   s += bias(i, j)                            ALiBi (score_mod.h)
//   O_i = Σ_j softmax(s)_j v_j, with each sink logit joining the denominator (not the values)
//   a row that sees no key: O = 0, LSE per the kernel's declared empty-row convention
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "reference/conventions.h"
#include "reference/dtype.h"

namespace flashcheck {

// top_left:     key j is visible to query i iff j <= i.
// bottom_right: key j is visible to query i iff j <= i + seq_kv - seq_q (the last query sees every
//               key; with seq_q > seq_kv the first seq_q - seq_kv queries see no key at all).
enum class Causal { none, top_left, bottom_right };

std::string_view to_string(Causal c);
Causal parse_causal(std::string_view s);

// A sliding window, inclusive on both sides (FlashAttention's convention): key j is visible to
// query i iff i + d − left ≤ j ≤ i + d + right, d the alignment offset (reference/mask.h); −1 means
// unbounded on that side. (−1, −1) is no window. With a causal mode the right bound becomes
// min(right, 0), −1 counting as +∞. cuDNN's and xformers' left bounds are exclusive (theirs =
// left + 1): a kernel declares which it takes (WindowConvention) and flashcheck converts.
struct Window {
  int64_t left = -1, right = -1;
  bool none() const { return left == -1 && right == -1; }
  bool operator==(const Window&) const = default;
};

// The ALiBi bias a problem adds after masking (reference/score_mod.h):
//   symmetric: −slope · |i + d − j|  (FlashAttention; d the alignment offset)
//   signed:     slope · (j − i)      (FlashInfer, cuDNN; top-left, whatever the causal alignment)
enum class Alibi { none, symmetric, signed_ };
std::string_view to_string(Alibi a);
Alibi parse_alibi(std::string_view s);

// Where the kernel's q, k, v, o live (reference/storage.h gives every offset):
//   bhsd: [B, H, S, D]; bshd: [B, S, H, D] (FlashAttention's native); thd: packed sequences
//   [total, H, D] addressed by cu_seqlens. LSE is [B, Hq, Sq] (bhsd, bshd) or [Hq, total_q] (thd).
enum class Layout { bhsd, bshd, thd };
std::string_view to_string(Layout l);
Layout parse_layout(std::string_view s);

// How a generated paged cache arranges its pages (the block table itself is input data,
// Inputs::block_table): in sequence order, shuffled, or shuffled with later sequences sharing the
// full pages of sequence 0's prefix (as prefix caching does).
enum class PageOrder { identity, shuffled, shared };
std::string_view to_string(PageOrder o);
PageOrder parse_page_order(std::string_view s);

// fp8 descale factors: none (1), one per tensor, or one per (batch, KV head) (FlashAttention 3).
enum class Descale { none, tensor, head };
std::string_view to_string(Descale d);
Descale parse_descale(std::string_view s);

// Thrown for any problem that cannot be computed; the message names the offending field.
struct InvalidProblem : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Query head h reads KV head h / (Hq / Hkv) (GQA; MQA when Hkv = 1).
//
// Sequences. Dense problems (no seqlens lists) have B sequences of seq_q queries and seq_kv keys.
// Variable-length ones (layout thd) list each sequence's lengths: seqlens_q[b] queries and
// seqlens_kv[b] stored keys (the differences of cu_seqlens_q / cu_seqlens_k); zero is allowed.
// seqused_kv[b] (optional) is the number of keys sequence b actually uses, ≤ those stored
// (FlashAttention's seqused_k, or per-batch cache lengths of a dense cache). With a paged cache
// (page_size > 0) seqlens_kv[b] is the cache length of sequence b (cache_seqlens) and the keys
// are read through a block table. seq_q and seq_kv are then the largest lengths (kept so by
// normalize()). Everything semantic (masks, alignment, the oracle) uses sq(b) and skv(b).
struct Problem {
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t seq_q = 1;
  int64_t seq_kv = 1;
  int64_t head_dim_qk = 64;
  int64_t head_dim_v = 64;
  Causal causal = Causal::none;
  std::optional<double> scale;  // default 1/sqrt(head_dim_qk)
  DType dtype = DType::bf16;    // of q, k, v (and of o, except for fp8 inputs: out_dtype)

  // Problem model 2. Defaults are plain attention: every field below left alone changes nothing.
  Window window;
  double softcap = 0;                // c > 0: s → c·tanh(s/c), before masks and bias; 0: no cap
  Alibi alibi = Alibi::none;         // slopes are input data (Inputs::alibi_slopes)
  bool alibi_per_batch = false;      // slopes [B, Hq] instead of [Hq]
  bool sinks = false;                // one logit per query head (Inputs::sinks) joins each row's denominator
  Layout layout = Layout::bhsd;
  std::vector<int64_t> seqlens_q;    // varlen (layout thd): per-sequence query lengths, size B
  std::vector<int64_t> seqlens_kv;   // varlen: stored keys per sequence; paged: cache lengths; size B
  std::vector<int64_t> seqused_kv;   // keys used per sequence (≤ stored), size B; empty: all stored
  int64_t page_size = 0;             // > 0: K/V in a paged cache [pages, page_size, Hkv, D]
  PageOrder page_order = PageOrder::identity;
  std::optional<DType> out_dtype;    // fp8 inputs only: the output dtype (bf16 or f16; default bf16)
  Descale descale = Descale::none;   // fp8 inputs only

  double softmax_scale() const;
  int64_t group() const { return heads_q / heads_kv; }
  int64_t kv_head(int64_t hq) const { return hq / group(); }
  DType o_dtype() const;  // dtype, or out_dtype for fp8 inputs
  bool varlen() const { return !seqlens_q.empty(); }
  bool paged() const { return page_size > 0; }
  // Queries and keys (used) of sequence b.
  int64_t sq(int64_t b) const { return seqlens_q.empty() ? seq_q : seqlens_q[static_cast<size_t>(b)]; }
  int64_t skv(int64_t b) const;
  // Keys stored for sequence b (≥ skv(b)): the cu_seqlens_k difference, the dense capacity seq_kv, or
  // the cache length of a paged sequence.
  int64_t skv_stored(int64_t b) const;
  // Any variant beyond plain dense BHSD attention in f32/f16/bf16: what a plugin of ABI 1 cannot be given.
  bool plain() const;
  // Multiply-adds of both GEMMs over the visible (query, key) pairs, counted the usual way:
  // 2·pairs·(Dqk + Dv) per query head.
  double flops() const;
  // Logical element counts (Inputs' layout, reference/sequences.h): queries and used keys only.
  int64_t total_q() const;
  int64_t total_kv() const;
  int64_t q_elems() const { return total_q() * heads_q * head_dim_qk; }
  int64_t k_elems() const { return total_kv() * heads_kv * head_dim_qk; }
  int64_t v_elems() const { return total_kv() * heads_kv * head_dim_v; }
  int64_t o_elems() const { return total_q() * heads_q * head_dim_v; }
  int64_t lse_elems() const { return total_q() * heads_q; }

  bool operator==(const Problem&) const = default;
};

// Brings derived fields in line: seq_q / seq_kv become the largest listed lengths (for varlen and
// paged problems). Parsing and the generators call it; validate() refuses a problem that needs it.
void normalize(Problem& p);

// Throws InvalidProblem naming the field: non-positive sizes, heads_q not a multiple of heads_kv,
// element counts or byte sizes that overflow int64, non-finite or zero scale, a window bound below
// −1, a negative or non-finite softcap, lists of the wrong length or with negative entries, used
// keys past those stored, a layout that does not fit the sequences, fp8 fields on other dtypes.
void validate(const Problem& p);

// One line that the CLI accepts back (`--problem "..."`), e.g.
// "b=1 hq=8 hkv=2 sq=97 skv=113 dqk=128 dv=128 causal=bottom_right dtype=bf16"; variants add their
// fields ("window=128,0 softcap=30 alibi=symmetric sinks=1 layout=thd sq=3,0,17 skv=5,9,20 ...").
std::string to_string(const Problem& p);
Problem parse_problem(std::string_view s);
std::ostream& operator<<(std::ostream& os, const Problem& p);

}  // namespace flashcheck
