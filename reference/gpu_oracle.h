// Oracle 1 on the GPU: the same fp64 softmax(Q Kᵀ · scale) V as naive_attention, computed step by
// step on the device, and the same-dtype eager baseline of the verdict, for production-size shapes.
// Independence rule: nothing here (or under reference/gpu_oracle/) includes or copies code from
// gpu/, whose kernels this oracle judges; it has its own numerics and CUDA error checks, and takes
// which keys a row sees from the oracles' own mask (reference/mask.h), never from a kernel's.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "reference/naive.h"
#include "reference/naive_backward.h"
#include "reference/problem.h"

namespace flashcheck {

// Why the GPU oracle cannot run here (built without CUDA, no device, driver too old), or empty.
std::optional<std::string> gpu_oracle_unavailable();

// A problem whose per-launch working set cannot fit in device memory.
struct OracleDoesNotFit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Same contract and result as naive_attention (reference/naive.h), every variant included,
// computed on the GPU in fp64. Steps, as the CPU oracle takes them: S = (Q Kᵀ)·scale in fp64 (FP64
// tensor cores, mma.sync m8n8k4; fp8 inputs times their descale, exact), softcap and ALiBi bias on
// visible keys in fp64 with the CPU's roundings, the row max over visible keys and the sink,
// exp(s − m), their sum ℓ plus exp(sink − m), P·V (V times its descale), a divide by ℓ and
// LSE = m + log ℓ. A row seeing no key gets O = 0, LSE = −inf (sink or not); NaN in a row's
// visible scores (or a ±inf max) makes the row NaN; NaN/Inf in V reaches exactly the rows that see
// it. Rows are tiled per (sequence, KV head) and each tile computes only the keys its rows see, so
// a window costs O(rows × window) and a varlen batch the sum of its sequences. Tiles are grouped
// into pieces that fit in free device memory; OracleDoesNotFit when one tile (64 rows and the keys
// they see) does not. Throws std::runtime_error when gpu_oracle_unavailable() says why.
OracleResult naive_attention_gpu(const Problem& p, const Inputs& in, const RowSet& rows);
// Every row, or the same rows in every sequence (RowSet::same, as naive_attention takes them).
OracleResult naive_attention_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});

// Same contract and result as naive_attention_backward (reference/naive_backward.h), every variant
// and convention included, computed on the GPU in fp64 over every row: per tile of the forward's,
// S (and with a softcap the scaled scores), dP = dO·Vᵀ on FP64 tensor cores; per row its softmax
// P = exp(t − m)/ℓ from the exact max (the sink in the max and ℓ), D = Σ P·dP and
// dS = P (dP − D) · 1/cosh²(s/c); dQ = scale · dS·K; per key tile dV = Pᵀ·dO and
// dK = scale · dSᵀ·Q over every row of its KV head's group that sees it; dsink = −Σ P_sink·D.
// Masked pairs are exact zeros and add nothing (no 0·Inf: a stage with a non-finite operand is
// summed pair by pair). Summation orders are fixed, so a call repeats bit for bit; they differ from
// the CPU's, so the two agree to fp64 rounding (gpu_oracle_backward_test's bound). Memory: the
// forward's tiles with two (three with a softcap) score matrices; OracleDoesNotFit when one tile
// does not fit. Throws InvalidProblem / std::invalid_argument as the CPU oracle does, and
// std::runtime_error when gpu_oracle_unavailable() says why.
BackwardResult naive_attention_backward_gpu(const Problem& p, const Inputs& in, std::span<const float> d_out);

// The same-dtype eager baseline (verify/baseline.h) over a RowSet: O [rows.index(b, h, r, Hq)][Dv].
// Every operation runs in the CPU baseline's order with the same roundings (no fused multiply-add),
// so results are bitwise equal except where the exp (and softcap's tanh) implementations, both
// faithfully rounded, differ by an fp32 ulp; reference/gpu_oracle_test.cpp states the resulting
// bound. Variants, per score (baseline_kernels.cu's baseline_score): s = rd(Σ q·k in fp32) (fp8:
// Σ of raw fp8 products × (q_descale·k_descale), not rounded), s = rd(s·scale) (fp8: rd to the
// output dtype), softcap cap·tanh(s/cap) in fp32, mask, + ALiBi bias in fp32; softmax in fp32 with
// the sink in the max and in ℓ (added after the keys); P rounded to the dtype (fp8: the output
// dtype); P·V accumulated in fp32 (fp8: over the raw fp8 values, the sum times v_descale in
// fp32); O rounded to the output dtype — verify/baseline.cpp's steps.
std::vector<float> dtype_baseline_gpu(const Problem& p, const Inputs& in, const RowSet& rows);
std::vector<float> dtype_baseline_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});

}  // namespace flashcheck
