// Golden datasets: fixed cases covering the property space, written as safetensors (inputs, the
// fp64 oracle's O rounded to the case dtype and in f32, LSE) with a manifest of SHA-256 hashes.
// Variant cases are files as a kernel's harness writes them (verify/check_file_format.h): thd with
// padding for varlen, a paged cache with its block table, side tensors and metadata.
//
// Gradients (issue 23): a case that carries_gradients also holds a dO drawn from its seed (make_d_out) as
// `golden_do` and the fp64 backward oracle's gradients for it, laid where a kernel writes them
// (add_check_gradients), as `golden_dq`, `golden_dk`, `golden_dv` in the gradient dtype and
// `golden_dq_f32`, ... before that rounding (as o and o_f32), plus `golden_dsinks` (F32) with sinks.
// The prefix keeps `check` from reading them as a kernel's gradients (it reads do, dq, dk, dv): it
// judges a golden's forward output, as before; without the prefix they make a check file whose
// kernel is the rounded oracle.
#pragma once
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

struct GoldenCase {
  std::string name;
  Problem problem;
  Dist dist;
  uint64_t seed;
  int64_t pad = 0;  // thd: padding tokens after the last sequence (NaN in q, k, v; poison in o, lse)
};

const std::vector<GoldenCase>& golden_cases();
// Whether a case carries dO and the oracle's gradients: those whose q, k and v hold at most
// kGoldenGradientElements elements together. Gradients in the dtype and in f32 add about 2.5 times
// a 16-bit case's file, so the five largest cases (0.7 to 5 MB more each) stay forward-only and
// data/ stays small; the rest cover every variant (GQA, windows, softcap, ALiBi, sinks, varlen,
// paged, seqused, fp8).
inline constexpr int64_t kGoldenGradientElements = 100000;
bool carries_gradients(const GoldenCase& c);
std::vector<uint8_t> golden_bytes(const GoldenCase& c);
std::string sha256_hex(const std::vector<uint8_t>& bytes);

struct GoldenStatus {
  int written = 0, unchanged = 0, refused = 0;
};
// Writes every case and manifest.json into `dir`, each file atomically, the manifest last. A case
// file that exists with other bytes than this build generates is overwritten only with `force`;
// without it the regen is refused as a whole and NOTHING on disk changes (no case file, no
// manifest): the manifest's hash is the one record that would expose a corrupted golden, so a
// refused regen must not rewrite it (then `written` is 0 and `refused` counts the differing files).
GoldenStatus golden_regen(const std::filesystem::path& dir, bool force, std::ostream& log);

// What golden verify found for one case. A hash mismatch alone does not say what changed, so every
// case is recomputed and compared whatever its hash says.
struct GoldenCaseResult {
  std::string name;
  bool unreadable = false;     // not listed, missing, not a regular file, or not valid safetensors
  bool hash_mismatch = false;  // file's SHA-256 differs from manifest.json's
  bool input_bits = false;     // q, k or v differ in any bit from the regenerated inputs
  bool layout = false;         // metadata, tensor names, dtypes or shapes differ from the regenerated file
  // An output (o, o_f32, lse, the golden_ gradients) is beyond tolerance of the recomputed oracle.
  bool values = false;
  std::vector<std::string> details;  // one line per finding, naming tensors and elements
  bool ok() const { return !unreadable && !hash_mismatch && !input_bits && !layout && !values; }
  // "ok", "unreadable", "input bits", "metadata/layout", "hash and values", "values (hash matches)",
  // or "hash only" (the bytes differ but every value is within tolerance).
  std::string verdict() const;
};
struct GoldenReport {
  std::vector<GoldenCaseResult> cases;  // one per case this build knows, in golden_cases() order
  std::vector<std::string> manifest_problems;  // entries for unknown cases, duplicated names, bad fields
  int failures() const;
};
// Recomputes every case: inputs (golden_do included) bit for bit, metadata and layout exactly (a
// gradient tensor missing is a layout finding), oracle outputs to within 1 fp32 ulp (2 unit
// roundoffs of a narrower dtype: fp64 GEMM summation order differs between BLAS kernels), gradients
// also within 2^-30 of the case's largest gradient element (a gradient that cancels to fp64 noise,
// as dQ with equal keys, is that noise, which another BLAS sums otherwise), file hash against the
// manifest. Throws CannotTest for a missing or malformed manifest.
GoldenReport golden_check(const std::filesystem::path& dir);
// golden_check, each case named in `log` with its verdict; returns the number of failures.
int golden_verify(const std::filesystem::path& dir, std::ostream& log);

}  // namespace flashcheck
