// The file contract of `flashcheck check`, both ways: a safetensors file a kernel's harness wrote
// (in any language) read into a problem, its inputs and the kernel's output in the logical layout
// (reference/sequences.h), and the same file written from them (goldens, tests).
//
// Tensors (shapes follow metadata `layout`; B batch, S sequence, H heads, D head dim, T tokens):
//   q  bhsd [B,Hq,Sq,Dqk] | bshd [B,Sq,Hq,Dqk] | thd [Tq(+padding),Hq,Dqk]
//   k  as q with Hkv and Skv (Tk), or a paged cache [num_pages, page_size, Hkv, Dqk] with block_table
//   v  as k with Dv;   o as q with Dv;   lse (F32) [B,Hq,Sq], thd [Hq, Tq(+padding)]
//   q, k, v share one dtype (F32, F16, BF16, F8_E4M3, F8_E5M2); o is that dtype, or BF16/F16 for fp8.
//   cu_seqlens_q, cu_seqlens_k (I32/I64, B+1, from 0, non-decreasing): thd sequences; rows past the
//     last entry are padding (never read into the inputs, never judged in o, checked untouched).
//   seqused_k (B): keys each sequence uses (≤ stored). cache_seqlens (B): with block_table the
//     cache length of each sequence, without it the same as seqused_k (a dense KV cache).
//   block_table (I32/I64 [B, max_pages]): pages of each sequence in k/v; entries past a sequence's
//     last page are not read.
//   alibi_slopes (F32 [Hq] or [B,Hq]), sinks (F32 [Hq]), q_descale/k_descale/v_descale (F32 [1] or
//     [B,Hkv]; fp8 only; one missing counts as 1).
// Metadata (strings): causal (none|top_left|bottom_right), scale, layout (bhsd|bshd|thd; thd implied
//   by cu_seqlens_q), window ("left,right", −1 unbounded) in window_convention (inclusive, the
//   default, or left_exclusive: cuDNN's and xformers' left bound, converted), softcap, alibi
//   (symmetric|signed: required with alibi_slopes, never guessed), alibi_lse (exact|key_offset),
//   lse_base (e|2), empty_row_lse (-inf|+inf).
// Gradients (optional, all four or none; the backward pass of the same problem, verify_backward):
//   do  (dO, the loss's gradient with respect to o) as o: o's shape, layout and dtype
//   dq, dk, dv as q, k, v (a paged cache's dk/dv are caches of k's and v's shape), in the inputs'
//     dtype (fp8 inputs: o's); with respect to the values the forward computes with (fp8: x·descale)
//   dsinks (F32 [Hq], optional, with sinks): the sinks' gradient
#pragma once
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "reference/naive_backward.h"
#include "reference/problem.h"
#include "reference/storage.h"
#include "verify/backward_criteria.h"
#include "verify/judge.h"
#include "verify/safetensors.h"

namespace flashcheck {

// A file's backward tensors, in the logical layout (padding, unused pages and slots gone).
struct CheckFileGradients {
  std::vector<float> d_out;  // dO over every row of o, values in o's dtype
  KernelGradients kernel;    // dq, dk, dv in the gradient dtype (poison kept), dsinks when given
};

// A dense BHSD file's 16-bit q, k and v as read: their storage is the logical layout, so they go to
// the device as they are (reference/gpu_oracle.h's DeviceInputs) and are widened to fp32 on the
// host only if a step there reads them (widen_raw_inputs).
struct RawInputs {
  StTensor q, k, v;
  std::optional<StTensor> o;  // the kernel's o as read, for the caller to widen (CheckFileCase::o empty)
  bool nonfinite_unchecked = false;  // the NaN/Inf refusal is still to make (refuse_nonfinite_raw)
};

// A file read: everything the judge needs, in the logical layout.
struct CheckFileCase {
  Problem problem;
  Inputs inputs;                          // queries and used keys only: padding and unused pages gone
  std::vector<float> o;                   // the kernel's o, widened (poison kept)
  std::optional<std::vector<float>> lse;  // the kernel's lse as written (in its declared base)
  Declared declared;                      // lse base, empty-row LSE, ALiBi LSE (tiles: the caller's)
  std::optional<int64_t> padding_written; // poisoned padding of o/lse the kernel overwrote (KernelOutput)
  std::vector<std::string> notes;         // what was converted or not judged, for the report
  std::optional<CheckFileGradients> gradients;  // when the file holds do, dq, dk, dv
  std::optional<RawInputs> raw;           // read with keep_raw: q, k, v here, inputs' q, k, v empty
};

// The gradient tensors of a file whose problem, inputs and storages (queries: q, o; keys: k, v)
// read_check_case has read: none (nullopt) or all of do, dq, dk, dv, each of its forward tensor's
// shape, in its dtype. Throws CannotTest naming the tensor: one missing while others are present,
// a wrong shape or dtype, dsinks without sinks, NaN/Inf in do unless allowed, a paged cache whose
// sequences share a slot (its gradient is their sum, which the per-sequence criteria cannot judge).
std::optional<CheckFileGradients> read_check_gradients(SafetensorsFile& f, const Problem& p, const Storage& st_q,
                                                       const Storage& st_kv, bool allow_nonfinite_inputs);


// Reads the file's problem, inputs and outputs. Tensor payloads are released from `f` as they are
// widened (files reach gigabytes). Throws CannotTest naming the tensor or metadata key at fault;
// NaN/Inf in any input a row can see is refused unless `allow_nonfinite_inputs` (padding rows and
// unused pages never count). `lap` (optional) is called after each phase, for --timings.
// keep_raw: a dense BHSD file of bf16/f16 inputs whose keys are all used keeps q, k, v and o raw
// (CheckFileCase::raw) and leaves their NaN/Inf refusal to refuse_nonfinite_raw, o's widening to
// the caller (widen_raw_output); other files are read as without it.
CheckFileCase read_check_case(SafetensorsFile& f, bool allow_nonfinite_inputs,
                              const std::function<void(const char*)>& lap = {}, bool keep_raw = false);
// c.inputs' q, k, v widened from c.raw (exactly), if they are not yet; the raw bytes are released
// (refuse_nonfinite_raw comes before).
void widen_raw_inputs(CheckFileCase& c);
// c.o widened from c.raw's o (exactly, poison kept), if it is not yet.
void widen_raw_output(CheckFileCase& c);
// read_check_case's refusal of the first NaN/Inf in c.raw's q, k, v, if one is there and it is
// still to make. `first(t, n)` gives the index of tensor t's first non-finite element among its n
// (n when none) — on the device where the tensors were uploaded; without it, a scan of the raw
// patterns here.
// std::logic_error once the raw bytes are widened and gone.
void refuse_nonfinite_raw(const CheckFileCase& c, const std::function<int64_t(Tensor, int64_t)>& first = {});

struct CheckFileWriteOptions {
  int64_t pad_q = 0, pad_kv = 0;  // thd: padding tokens after the last sequence of q/o/lse and of k/v
  bool poison_padding = true;     // padding of o and lse holds flashcheck's poison (else zeros)
  float input_fill = NAN;         // padding rows, unused pages and unused keys of q, k, v
  StDType index_dtype = StDType::I32;
  bool o_f32 = false;             // also `o_f32`: o before rounding to its dtype (goldens)
  // add_check_gradients: names its tensors `<gradient_prefix>do`, ... (goldens: "golden_", so that
  // `check` does not read the oracle's gradients as a kernel's), and with `gradients_f32` also
  // `<prefix>dq_f32`, `<prefix>dk_f32`, `<prefix>dv_f32`: the gradients before rounding to their dtype.
  std::string gradient_prefix;
  bool gradients_f32 = false;
};

// The file a kernel's harness would write for this problem: inputs and outputs (logical layout) in
// the problem's storage layout, the side tensors of its variants and the metadata above (causal,
// scale, layout, window, softcap, alibi; the caller adds lse_base and the rest). A paged cache's
// pages are laid out by in.block_table.
SafetensorsFile make_check_file(const Problem& p, const Inputs& in, std::span<const float> o,
                                const std::vector<float>* lse, const CheckFileWriteOptions& opt = {});

// Adds a backward's tensors to a file make_check_file wrote for the same problem, inputs and options:
// do in o's storage, dq, dk, dv in q's, k's and v's (gradients of logical rows that read the same
// slot add; elements nothing reads are 0), dsinks when g.dsinks is set.
void add_check_gradients(SafetensorsFile& f, const Problem& p, const Inputs& in, std::span<const float> d_out,
                         const KernelGradients& g, const CheckFileWriteOptions& opt);
// The same from the fp64 oracle's gradients (reference/naive_backward.h): each stored value is the
// sum in fp64 of the logical rows that read its slot, rounded once to f32 (then to the dtype, as o).
void add_check_gradients(SafetensorsFile& f, const Problem& p, const Inputs& in, std::span<const float> d_out,
                         const BackwardResult& g, const CheckFileWriteOptions& opt);

}  // namespace flashcheck
