// Oracle 1 on the GPU: the same fp64 softmax(Q Kᵀ · scale) V as naive_attention, computed step by
// step on the device, and the same-dtype eager baseline of the verdict, for production-size shapes.
// Independence rule: nothing here (or under reference/gpu_oracle/) includes or copies code from
// gpu/, whose kernels this oracle judges; it has its own mask, numerics and CUDA error checks.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "reference/naive.h"
#include "reference/problem.h"

namespace flashcheck {

// Why the GPU oracle cannot run here (built without CUDA, no device, driver too old), or empty.
std::optional<std::string> gpu_oracle_unavailable();

// A problem whose per-launch working set cannot fit in device memory.
struct OracleDoesNotFit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Same contract and result as naive_attention (reference/naive.h), computed on the GPU in fp64.
// Steps, as the CPU oracle takes them: S = (Q Kᵀ)·scale in fp64 (FP64 tensor cores, mma.sync
// m8n8k4), the row max over visible keys, exp(s − m), their sum ℓ, P·V, a divide by ℓ and
// LSE = m + log ℓ. A row seeing no key gets O = 0, LSE = −inf; NaN in a row's visible scores (or a
// ±inf max) makes the row NaN; NaN/Inf in V reaches exactly the rows that see it. Work is split
// into pieces of (batch·head, rows) that fit in free device memory; OracleDoesNotFit when even one
// head and 128 rows do not. Throws std::runtime_error when gpu_oracle_unavailable() says why.
OracleResult naive_attention_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});

// Same contract and result as dtype_baseline (verify/baseline.h): the same-dtype eager baseline
// (S rounded to the dtype, ×scale rounded, softmax in fp32, P rounded, P·V fp32 accumulate, rounded).
// Every operation runs in the CPU baseline's order with the same roundings (no fused multiply-add),
// so results are bitwise equal except where the two exp implementations (both faithfully rounded)
// differ by one fp32 ulp; reference/gpu_oracle_test.cpp states the resulting bound.
std::vector<float> dtype_baseline_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});

}  // namespace flashcheck
