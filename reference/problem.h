// The attention problem every oracle, kernel and verdict in flashcheck is about.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "reference/conventions.h"
#include "reference/dtype.h"

namespace flashcheck {

// top_left:     key j is visible to query i iff j <= i.
// bottom_right: key j is visible to query i iff j <= i + seq_kv - seq_q (the last query sees every
//               key; with seq_q > seq_kv the first seq_q - seq_kv queries see no key at all).
enum class Causal { none, top_left, bottom_right };

std::string_view to_string(Causal c);
Causal parse_causal(std::string_view s);

// Thrown for any problem that cannot be computed; the message names the offending field.
struct InvalidProblem : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Tensors are contiguous BHSD: q [B,Hq,Sq,Dqk], k [B,Hkv,Skv,Dqk], v [B,Hkv,Skv,Dv], o [B,Hq,Sq,Dv],
// lse [B,Hq,Sq]. Query head h reads KV head h / (Hq / Hkv) (GQA; MQA when Hkv = 1).
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
  DType dtype = DType::bf16;

  double softmax_scale() const;
  int64_t group() const { return heads_q / heads_kv; }
  int64_t kv_head(int64_t hq) const { return hq / group(); }
  int64_t q_elems() const { return batch * heads_q * seq_q * head_dim_qk; }
  int64_t k_elems() const { return batch * heads_kv * seq_kv * head_dim_qk; }
  int64_t v_elems() const { return batch * heads_kv * seq_kv * head_dim_v; }
  int64_t o_elems() const { return batch * heads_q * seq_q * head_dim_v; }
  int64_t lse_elems() const { return batch * heads_q * seq_q; }
  // Multiply-adds of both GEMMs, counted the usual way (4·Sq·Skv·D per head, D = mean of Dqk, Dv),
  // halved-ish for causal by counting only visible pairs.
  double flops() const;

  bool operator==(const Problem&) const = default;
};

// Throws InvalidProblem naming the field: non-positive sizes, heads_q not a multiple of heads_kv,
// element counts or byte sizes that overflow int64, non-finite or zero scale.
void validate(const Problem& p);

// One line that the CLI accepts back (`--problem "..."`), e.g.
// "b=1 hq=8 hkv=2 sq=97 skv=113 dqk=128 dv=128 causal=bottom_right dtype=bf16".
std::string to_string(const Problem& p);
Problem parse_problem(std::string_view s);
std::ostream& operator<<(std::ostream& os, const Problem& p);

}  // namespace flashcheck
