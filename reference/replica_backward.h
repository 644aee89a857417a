// The FlashAttention-2 backward algorithm replayed on the CPU with a kernel's tiles and numerics
// (issue 23, item 2), so a backward kernel can be judged against its own algorithm and the judge
// has a same-dtype baseline for its gradients (verify/backward_criteria.h). It takes what a
// backward kernel takes — q, k, v, the forward's O (in the output dtype) and LSE, and dO — and
// computes, per KV tile of Bc keys and query tile of Br rows that see it, in fp32:
//   S  = Q Kᵀ, the score modifiers as the forward replica applies them (softcap's tanh, mask, ALiBi)
//   P  = exp(S − LSE) recomputed from the saved LSE (exp2 with log2 e folded in, by default)
//   D  = rowsum(dO ∘ O) once per row, from the O the forward wrote (rounded to the output dtype)
//   dP = dO Vᵀ,  dS = P ∘ (dP − D) (× 1 − tanh² with a softcap)
//   P and dS rounded to the input dtype, then dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K (fp32 accumulators)
// and at the end dQ and dK times the softmax scale, every gradient rounded to the gradient dtype.
// f32 inputs round nothing. Deterministic: dK and dV of a KV tile sum its group's query heads in
// ascending order, then their query tiles ascending; each dQ row sums its KV tiles ascending
// (what FlashAttention 2's deterministic mode fixes); the result is the same bits on any number
// of threads.
//
// Conventions, as the backward oracle's (reference/naive_backward.h): gradients in the logical
// layouts of Inputs::q, k, v; GQA sums dK and dV over each KV head's query group; a row that sees
// no key contributes nothing (its dQ is 0); keys no row sees get dK = dV = 0; masked (row, key)
// pairs take P = dS = 0 exactly. The sinks' gradient is −Σ P_sink·D per query head, in fp32.
// fp8 inputs: Q·Kᵀ and dO·Vᵀ run on the raw fp8 values with the descales folded into the scale
// (as the forward replica), and the backward computes in the output dtype (bf16/f16): P and dS are
// rounded to it, and the gradients (with respect to the dequantized values, as the oracle's) are
// written in it. Inputs are expected finite: a non-finite q, k, v or dO reaches the pairs of its
// tile through 0·Inf in the tile GEMMs, as in a kernel, where the oracle keeps it to what it sees.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "reference/conventions.h"
#include "reference/inputs.h"
#include "reference/problem.h"
#include "reference/replica.h"

namespace flashcheck {

// The dtype a backward kernel writes dQ, dK, dV in: the input dtype, or the output dtype (bf16,
// f16) for fp8 inputs (no fp8 gradients: training keeps them in 16 bits).
DType gradient_dtype(const Problem& p);

// Deliberate mistakes a backward kernel makes, for the judge's tests: never a correct setting.
enum class BackwardFault {
  none,
  dk_not_summed,              // the last KV head's dK takes only its group's first query head (dV is right)
  dq_unscaled,                // dQ without the softmax scale
  softcap_derivative_dropped, // dS not multiplied by the cap's derivative 1 − tanh²
  dq_row_one_key_short,       // one row's dQ (sequence 0, the last query head, row Sq/2) misses its last
                              // visible key's term; dK, dV right (a dQ pass whose last tile stops one key short)
};

struct BackwardReplicaConfig {
  int64_t block_q = 128;   // Br: query rows per tile (tiles start at each sequence's first row)
  int64_t block_kv = 128;  // Bc: keys per tile (tiles start at each sequence's first used key)
  bool use_exp2 = true;    // P = exp2(S·scale·log2 e − LSE·log2 e), as FlashAttention 2's kernels
  bool round_p = true;     // P rounded to the compute dtype before dV = Pᵀ dO
  bool round_ds = true;    // dS rounded to the compute dtype before dK = dSᵀ Q and dQ = dS K
  // dQ, dK, dV rounded to the gradient dtype at the end, as every kernel writes them. Off, they stay
  // fp32: for comparing two implementations of this replica below that rounding
  // (reference/gpu_replica_test.cpp), never a kernel's configuration.
  bool round_gradients = true;
  AlibiLse alibi_lse = AlibiLse::exact;  // as the forward that wrote the LSE (reference/replica.h)
  BackwardFault fault = BackwardFault::none;
};

// A forward replica's settings and those of the backward replica fed by its O and LSE: one
// same-dtype baseline of the backward verdict (verify/backward_expected.h).
struct ReplicaPipeline {
  ReplicaConfig forward;
  BackwardReplicaConfig backward;
};

// The backward verdict's two same-dtype baselines (verify/backward_expected.h), in its order; the
// CPU replicas and the GPU ones (reference/gpu_oracle.h backward_baselines_gpu) both run these.
std::vector<ReplicaPipeline> backward_baseline_configs();

struct ReplicaGradients {
  std::vector<float> dq, dk, dv;  // logical layouts of Inputs::q, k, v; values in gradient_dtype(p)
  std::vector<float> dsinks;      // [Hq] fp32 when the problem has sinks, else empty
  // Per logical key row (Sequences::k_row / Dqk): Σ P over every row of the key's query group that
  // sees it (the unrounded fp32 P): how much attention the key receives, which scales the fp32
  // noise its dK sums (verify/backward_expected.h).
  std::vector<float> p_colsum;
};

// o and d_out: the logical layout of the forward's output over every row (p.o_elems()); lse: one
// natural-log value per row (p.lse_elems(); −inf for rows that see no key). Throws InvalidProblem
// as the forward does, std::invalid_argument naming a tensor whose size does not match or a
// non-positive tile.
ReplicaGradients replica_attention_backward(const Problem& p, const Inputs& in, std::span<const float> o,
                                            std::span<const float> lse, std::span<const float> d_out,
                                            const BackwardReplicaConfig& cfg = {});

}  // namespace flashcheck
