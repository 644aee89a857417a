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
#include "reference/replica.h"
#include "reference/replica_backward.h"

namespace flashcheck {

struct DeviceInputs;  // q, k, v already on the device (below)

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
// With `dev` (DeviceInputs below), q, k and v are read there and in's may be empty; its side
// inputs (slopes, sinks) are read as always.
OracleResult naive_attention_gpu(const Problem& p, const Inputs& in, const RowSet& rows,
                                 const DeviceInputs* dev = nullptr);
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

// A DeviceArray the device had no room for (the CUDA error cleared, so later calls on the thread
// do not see it): callers with another way round it catch this, and only this.
struct DeviceOutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Device memory of the current device handed to a caller: a result left where it was computed, so
// that what judges it can run beside it (verify/element_pass_device.h) instead of moving gigabytes
// to the host. Freed with the object. upload/download are synchronous (the copy has landed when
// they return); every call is checked and throws std::runtime_error naming it.
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t bytes);  // zero-filled; DeviceOutOfMemory where it does not fit
  ~DeviceArray();
  DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }
  // Ordered after every piece of work already on the device (it synchronizes the device). Both
  // uploads lock a host range of 64 MiB or more for the length of the copy (cudaHostRegister), so
  // that the copy engine reads it without a CPU copy through staging buffers; where the driver
  // refuses (memory already locked, no room), they copy it as pageable memory.
  void upload(const void* host, size_t bytes, size_t offset = 0);
  // On a stream of its own, ordered with nothing else: for an array no queued work touches (a fresh
  // one, read by a later step), filled beside other GPU work. A plain upload made while the oracle's
  // kernels ran waited for all of them, and the oracle's next copy waited for it (0.15 s of a
  // production-size check, PERF.md session 18).
  void upload_beside(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A problem's q, k and v on the device as 16-bit patterns of its dtype (bf16 or f16), in the
// logical layout (reference/sequences.h): a file's raw tensors, moved once. The oracle's and the
// baseline's calls given them gather each piece's rows on the device instead of packing and
// uploading fp32 Inputs from the host — at (4,64,8192,128) those host steps were a second of a
// four-second check, stretched further when checks share a host. The results are the
// host-packed calls' bit for bit: a packed element is narrow(widen(x)) either way, which quiets a
// signalling NaN and leaves every other pattern as it is.
struct DeviceInputs {
  DType dtype = DType::bf16;
  DeviceArray q, k, v;
};
// The raw patterns uploaded; std::invalid_argument unless dtype is bf16 or f16.
DeviceInputs upload_device_inputs(DType dtype, std::span<const uint16_t> q, std::span<const uint16_t> k,
                                  std::span<const uint16_t> v);
// From fp32 Inputs (logical layout), narrowed; std::invalid_argument naming the first value the
// dtype does not hold (NaN and ±Inf it holds).
DeviceInputs upload_device_inputs(const Problem& p, const Inputs& in);
// The index of the first NaN or ±Inf of n 16-bit elements of `dtype` on the device, or n.
int64_t first_nonfinite(const DeviceArray& x, DType dtype, int64_t n);
// Per row of a [rows][width] 16-bit array on the device: sqrt(Σ x²) in fp64 over the columns in
// order. Every product of two widened 16-bit values is exact in fp64, so each sum is the host
// loop's to the bit, fused or not (verify/expected.cpp's score bounds take these).
std::vector<double> row_norms(const DeviceArray& x, DType dtype, int64_t rows, int64_t width);

// naive_attention_gpu with the fp64 O left on the device ([rows.index(b, h, r, Hq)][Dv], rows no
// tile writes 0 as there): `host` holds the rows and the LSE, its o is empty.
struct ResidentOracle {
  OracleResult host;
  DeviceArray o;
};
ResidentOracle naive_attention_gpu_resident(const Problem& p, const Inputs& in, const RowSet& rows,
                                            const DeviceInputs* dev = nullptr);

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
std::vector<float> dtype_baseline_gpu(const Problem& p, const Inputs& in, const RowSet& rows,
                                      const DeviceInputs* dev = nullptr);
std::vector<float> dtype_baseline_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});
// dtype_baseline_gpu with its fp32 O left on the device, in the same layout.
DeviceArray dtype_baseline_gpu_resident(const Problem& p, const Inputs& in, const RowSet& rows,
                                        const DeviceInputs* dev = nullptr);

// The FlashAttention-2 replicas (reference/replica.h, replica_backward.h) on the GPU, for the
// backward verdict's same-dtype baselines (verify/backward_expected.h) at production sizes: the
// same algorithm and roundings, in fp32 on CUDA cores — the forward's online softmax over block_kv
// tiles (the −2^30 fill, exp2 or exp, P rounded to the input dtype before P·V, ℓ from the unrounded
// P, O·(1/ℓ) rounded to O's dtype, the LSE), D = rowsum(dO ∘ O) from the rounded O, P recomputed
// from the saved LSE, P and dS rounded to the input dtype before their GEMMs, fp32 accumulators,
// gradients rounded to gradient_dtype — every step the CPU's to the bit but for a GEMM's summation
// order (free: the CPU's is Eigen's; here each element's is fixed, so a call repeats bit for bit)
// and exp/exp2/log2, faithfully rounded on both sides but not always to the same fp32 neighbour
// (reference/gpu_oracle/replica_device.cuh). Every row is computed. Covered: dense (BHSD, BSHD)
// and variable-length or paged problems (the logical layout is the same), every causal alignment,
// sliding windows, GQA/MQA, Dqk ≠ Dv, f32/f16/bf16, head dims up to 256; forward tiles block_kv 64
// or 128 with any block_q (the tiles a row's q-tile visits are the CPU's), any backward tiles (they
// only order the backward's sums). Not covered (nullopt, the caller takes the CPU replicas): softcap,
// ALiBi, sinks, fp8, head dims above 256, truncating roundings, a P scale, planted faults.
// Non-finite inputs: a masked pair's exact zero meets its operands in a tile GEMM here as on the
// CPU, but in other tiles, so 0·Inf may reach other rows or keys than there. Work is split into
// pieces of whole (sequence, KV head) units that fit in device memory (OracleDoesNotFit when one
// does not). Throws as the CPU replicas do for invalid problems, inputs and tiles, and
// std::runtime_error when gpu_oracle_unavailable() says why.
struct ReplicaPipelineResult {
  ReplicaResult forward;       // every row; trace empty
  ReplicaGradients gradients;  // dsinks empty (sinks are not covered)
};
// Why the GPU replicas do not cover p (with these configurations), or nullopt.
std::optional<std::string> gpu_replicas_not_covered(const Problem& p, std::span<const ReplicaPipeline> configs = {});
// Per configuration, the forward replica and the backward replica fed by its O and LSE, as
// verify/backward_expected.cpp runs them on the CPU; d_out as replica_attention_backward takes it.
std::optional<std::vector<ReplicaPipelineResult>> backward_baselines_gpu(const Problem& p, const Inputs& in,
                                                                         std::span<const float> d_out,
                                                                         std::span<const ReplicaPipeline> configs);
// The two stages alone, over every row (replica_attention with no trace rows; replica_attention_backward).
std::optional<ReplicaResult> replica_attention_gpu(const Problem& p, const Inputs& in, const ReplicaConfig& cfg = {});
std::optional<ReplicaGradients> replica_attention_backward_gpu(const Problem& p, const Inputs& in,
                                                               std::span<const float> o, std::span<const float> lse,
                                                               std::span<const float> d_out,
                                                               const BackwardReplicaConfig& cfg = {});

}  // namespace flashcheck
