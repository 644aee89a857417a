// `flashcheck check`: judge a kernel's output file written by any language.
//
// The file's contract (tensors q, k, v, o, lse in bhsd, bshd or thd layout, paged caches, the side
// tensors and metadata of every variant) is verify/check_file_format.h. Anything else is reported,
// never guessed.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include "reference/conventions.h"
#include "verify/backward_criteria.h"
#include "verify/expected.h"
#include "verify/identify.h"
#include "verify/report.h"

namespace flashcheck {

struct CheckFileOptions {
  int64_t max_rows = kDefaultMaxRows;  // per (b, h): above this, rows are sampled (first/last 64 + spread)
  int64_t tile_q = 128, tile_kv = 128;
  OracleChoice oracle = OracleChoice::automatic;  // --oracle: cpu, gpu, or auto (the GPU for large problems)
  bool allow_nonfinite_inputs = false;  // NaN/Inf in q/k/v are refused unless asked for
  bool error_maps = false;              // fill Report::maps and the gradients' maps (for `check --html`)
  bool timings = false;                 // fill Report::timings: where a large check spends its time
};

// A file's verdict: its forward output's report and, when the file holds gradients (do, dq, dk,
// dv), the backward's (verify_backward), each judged apart; the file passes when both do.
struct CheckFileVerdict {
  Report forward;
  std::optional<BackwardReport> backward;
  bool pass() const { return forward.pass() && (!backward || backward->pass()); }
};

CheckFileVerdict check_file(const std::filesystem::path& path, const CheckFileOptions& opt);

// `check --identify`: the file's output judged under every reading of its problem that differs in
// one convention (verify/identify.h), the stated one first: which convention the kernel follows.
std::vector<ReadingVerdict> identify_file(const std::filesystem::path& path, const CheckFileOptions& opt);

}  // namespace flashcheck
