// flashcheck's shared vocabulary, in one small header every layer may include: the conventions a
// kernel declares about its outputs, the exit-code contract, and the constants of the exp2 trick.
#pragma once
#include <cstdint>
#include <stdexcept>

namespace flashcheck {

// The base a kernel writes its LSE in. Kernels that work in exp2 often keep log2; flashcheck judges
// LSE in natural log and converts a declared base-2 LSE (ln x = log2 x · ln 2), never guesses one.
enum class LseBase { e, two, none };

// What an empty row's LSE must be. O must be exactly 0 either way. FlashAttention-2 writes +inf
// (so its backward pass gives zero gradients); flashcheck's own convention is -inf (log of 0).
enum class EmptyRowLse { neg_inf, pos_inf };

// Where a kernel's buffers live.
enum class Memory { host, device };

// How a kernel's LSE relates to ALiBi (reference/score_mod.h): exact, or FlashAttention 2's causal
// convention of adding slope·j (LSE + slope·(i + d), the same O). Declared, so converted.
enum class AlibiLse { exact, key_offset };

// How a kernel counts a sliding window's left bound: inclusive (flashcheck's and FlashAttention's:
// i + d − left ≤ j) or exclusive (cuDNN's left_bound, xformers: handed left + 1). The harness hands
// a kernel its window in its own convention; the problem always states flashcheck's.
enum class WindowConvention { inclusive, left_exclusive };

// The exit-code contract, for `git bisect run`: 0 every criterion passes, 1 numerical mismatch,
// 125 cannot test (bisect skips the commit instead of blaming it). Kept in this one place.
enum ExitCode : int { kPass = 0, kMismatch = 1, kCannotTest = 125 };

// Input that cannot be tested (malformed, unsupported, inconsistent, does not fit): exit code 125.
struct CannotTest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// exp(x) = exp2(x · log2 e): kernels fold log2 e into the softmax scale so that one MUFU.EX2 serves
// each score; ln 2 brings a base-2 LSE back to natural log.
inline constexpr double kLog2e = 1.4426950408889634074;
inline constexpr double kLn2 = 0.69314718055994530942;

// One row of a kernel's tile table: the (query, key) tile it uses at a head dim. The generators aim
// sequence lengths at these tiles' boundaries; the judge names the tile of a failing element.
struct TileShape {
  int64_t head_dim = 0;  // Dqk
  int64_t block_q = 128, block_kv = 128;
  int causal = -1;       // -1 any mode; 0 only non-causal; 1 only causal (kernels that tile them apart)
  bool operator==(const TileShape&) const = default;
};

// Rows per (batch, head) checked exactly before the CPU oracle samples (first/last 64 + a spread).
inline constexpr int64_t kDefaultMaxRows = 4096;

}  // namespace flashcheck
