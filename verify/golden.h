// Golden datasets: fixed cases covering the property space, written as safetensors (inputs, the
// fp64 oracle's O rounded to the case dtype and in f32, LSE) with a manifest of SHA-256 hashes.
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
};

const std::vector<GoldenCase>& golden_cases();
std::vector<uint8_t> golden_bytes(const GoldenCase& c);
std::string sha256_hex(const std::vector<uint8_t>& bytes);

struct GoldenStatus {
  int written = 0, unchanged = 0, refused = 0;
};
// Writes every case and manifest.json into `dir` atomically. A file that exists with different
// bytes is overwritten only with `force`; otherwise it is reported and left alone.
GoldenStatus golden_regen(const std::filesystem::path& dir, bool force, std::ostream& log);
// Recomputes every case and compares: file hash against the manifest, inputs bit for bit, oracle
// outputs to within 1 fp32 ulp (fp64 GEMM summation order differs between BLAS kernels). Returns
// the number of failing cases, each named in `log`. Throws CannotTest for a missing/malformed manifest.
int golden_verify(const std::filesystem::path& dir, std::ostream& log);

}  // namespace flashcheck
