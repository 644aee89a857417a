// The one judge: a kernel's output for a problem → the report. Every way in (`flashcheck check` on
// a file, a campaign case run through the harness, the C API and Python) calls this, so each gets
// the same row sampling, the same oracle, the same declared-convention handling and the same
// criteria.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "reference/conventions.h"
#include "reference/inputs.h"
#include "reference/problem.h"
#include "reference/score_mod.h"
#include "verify/expected.h"
#include "verify/report.h"

namespace flashcheck {

// What the kernel declares about its outputs. These are read as declared and never guessed: a
// base-2 LSE is converted only because the kernel says it is base 2.
struct Declared {
  LseBase lse_base = LseBase::e;
  EmptyRowLse empty_lse = EmptyRowLse::neg_inf;
  int64_t tile_q = 128, tile_kv = 128;  // the kernel's tiles, to name the tile of the worst element
  // FlashAttention 2's causal ALiBi adds slope·j: its LSE is the true one plus slope·(i + d)
  // (reference/score_mod.h). Declared, so converted; O is judged the same either way.
  AlibiLse alibi_lse = AlibiLse::exact;
};

// A kernel's output over every row, in the logical layout (reference/sequences.h; BHSD for dense
// problems): o widened to fp32 (poison included), lse in the declared base when the kernel writes
// one. The staging layer gathers both from the kernel's own layout.
struct KernelOutput {
  std::span<const float> o;
  std::optional<std::span<const float>> lse;
  // Canary bytes around the kernel's buffers that changed, when the caller fenced them (the harness);
  // absent when nobody could look (an output file).
  std::optional<int64_t> oob_writes;
  // Elements of o and lse outside every logical row (THD padding past cu_seqlens_q[-1]) that a
  // kernel wrote: they held the poison before it ran and no longer do. Absent when nobody could
  // tell (the padding was never poisoned, or there is none).
  std::optional<int64_t> padding_written;
  // Set when o is still being filled (a check file's o widened beside the oracle's GPU work): the
  // judge calls it once, before it first reads o, and reads what it returns instead: o, and where
  // the filler also uploaded it, its fp32 copy in device memory (for the device element pass).
  struct Ready {
    std::span<const float> o;
    const DeviceArray* on_device = nullptr;
  };
  std::function<Ready()> o_when_ready;
};

struct JudgeOptions {
  int64_t max_rows = kDefaultMaxRows;  // per (b, h): above this, rows are sampled
  bool error_maps = false;             // also fill Report::maps, for the HTML page (verify/report_html.h)
  OracleChoice oracle = OracleChoice::automatic;  // CPU, GPU, or the GPU for large problems when present
  bool timings = false;                           // fill Report::timings
  InputsOnDevice inputs_on_device;  // q, k, v already on the device, `in`'s widened on demand (expected.h)
};

// Samples rows per sequence (all when Sq ≤ max_rows), builds what is expected of them, restricts the
// kernel's output to them, brings LSE to natural log (and to the true ALiBi convention) and applies
// every criterion. The caller sets repro.
Report judge(const Problem& p, const Inputs& in, const KernelOutput& out, const Declared& declared,
             const JudgeOptions& opt = {});

}  // namespace flashcheck
