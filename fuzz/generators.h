// RapidCheck generators for attention problems and their inputs. The property tests and the
// `flashcheck run` campaigns draw from these same generators.
#pragma once
#include <rapidcheck.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

// The kernel's tiles at a head dim (Dqk): TileShape, from reference/conventions.h.

// What a campaign or property may draw. Defaults keep one case cheap enough for a 2-core CI.
struct ProblemSpace {
  int64_t max_seq = 300;
  std::vector<int64_t> head_dims{16, 32, 40, 64, 80, 96, 128, 192, 256};
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  std::vector<Causal> causals{Causal::none, Causal::top_left, Causal::bottom_right};
  int64_t max_batch = 2;
  int64_t max_heads_kv = 2;
  int64_t max_group = 4;        // heads_q / heads_kv
  // A kernel's declared limits on the lengths (Capabilities): every sequence with Sq = Skv (keys
  // used), every length a multiple of seq_multiple (rounded up from the boundary draw, so "a tile
  // + 1" becomes the next multiple past the tile; an empty sequence stays 0).
  bool equal_lengths = false;
  int64_t seq_multiple = 1;
  bool allow_dv_ne_dqk = true;  // e.g. 192/128
  // When non-empty, the only (Dqk, Dv) pairs drawn: a kernel's compiled pairs (Capabilities::
  // head_dim_pairs), within head_dims and allow_dv_ne_dqk. Each drawable Dqk is as likely as in the
  // list, and Dv is one of its pairs'.
  std::vector<std::pair<int64_t, int64_t>> head_dim_pairs;
  bool allow_custom_scale = true;
  // Cap on B·Hq·Sq·Skv·(Dqk+Dv): long sequences trade batch and heads for length, never the tail.
  double max_work = 3e7;
  // The kernel's declared tiles per head dim. A head dim not listed (or an empty list: no kernel
  // tiles known) is aimed at the generic moduli 128 and 64 (kGenericTile).
  std::vector<TileShape> tiles;
  // true: most cases put Sq, Skv and Skv − Sq at tile-boundary residues and draw the hostile value
  // classes often (issue #14). false: the draw of earlier releases, kept to compare against.
  bool boundary_aware = true;
  // One case in ten has a NaN or Inf in q, k or v (Dist::nonfinite; never fp8), for a kernel that
  // propagates them (Capabilities::propagates_nonfinite). Drawn last, so a space without it draws
  // the cases of before; boundary-aware draws only.
  bool nonfinite = false;
  // Every wide_every-th case of a campaign (campaign_case's index) is made wide (fuzz/wide_grid.h:
  // a launch grid past any GPU's resident CTAs), where the space can hold one; 0: none.
  int64_t wide_every = 0;

  // An empty head_dims list means the kernel declares none: Dqk and Dv are then drawn from the
  // grid above half the time and from anything in 1..max_head_dim the other half, mostly values
  // that are not multiples of 8 (which the grid never reaches).
  int64_t max_head_dim = 256;

  // ---- Problem model 2: the variants a kernel may declare (reference/problem.h). Every default is
  // "none", and a space that leaves all of them alone draws exactly the problems of before, case
  // for case: the variant draws follow every draw of the plain problem and happen only when
  // allowed. fp8 inputs are declared in `dtypes` (e4m3, e5m2). When variants are allowed, each is
  // on in about half the cases, aimed at its boundaries (generators.cpp says which), and the work
  // budget counts the visible (query, key) pairs only.
  bool windows = false;                       // sliding windows (left, right), any causal mode of `causals`
  bool softcap = false;                       // caps small enough to bind and large ones
  std::vector<Alibi> alibi;                   // ALiBi forms drawn (symmetric, signed_); empty: none
  bool alibi_per_batch = false;               // slopes [B, Hq] as well as [Hq] (needs alibi)
  bool sinks = false;                         // one sink logit per query head
  std::vector<Layout> layouts{Layout::bhsd};  // storage layouts; thd: variable-length (packed) batches
  bool seqused = false;                       // seqused_kv below the stored keys (dense caches and thd)
  bool paged = false;                         // K/V in a paged cache (any q layout of `layouts`)
  std::vector<int64_t> page_sizes;            // page sizes allowed; empty (with paged): any size >= 1
  std::vector<DType> out_dtypes;              // fp8 inputs' output dtypes (bf16, f16); empty: unset (bf16)
  std::vector<Descale> descales;              // fp8 descale granularities drawn; empty: none
  int64_t max_varlen_batch = 5;               // sequences of a thd or paged batch (dense: max_batch)

  // Any variant allowed (head dims aside): the draw and the work budget of problem model 2 apply.
  // out_dtypes and descales count only with an fp8 dtype listed, so a space that fills them in for
  // every kernel still draws plain problems, case for case as before, where no fp8 is declared.
  bool variants() const {
    bool fp8 = false;
    for (DType d : dtypes) fp8 |= is_fp8(d);
    return windows || softcap || !alibi.empty() || sinks || layouts != std::vector<Layout>{Layout::bhsd} || seqused ||
           paged || fp8;
  }
};

// The moduli aimed at when a head dim has no declared tile: 128 rows × 64 keys covers 64 too.
inline constexpr TileShape kGenericTile{0, 128, 64};
// The tile the generator aims at for head dim `d` (head_dim of the result is d).
TileShape tile_for(const ProblemSpace& s, int64_t d);

// A problem, the distribution of its inputs and the seed that draws them: everything needed to
// rebuild a failing case exactly.
struct Case {
  Problem problem;
  Dist dist = Dist::normal;
  uint64_t seed = 0;
};

rc::Gen<int64_t> gen_seq_len(int64_t max_seq);
rc::Gen<Problem> gen_problem(const ProblemSpace& space = {});
rc::Gen<Dist> gen_dist();
rc::Gen<Case> gen_case(const ProblemSpace& space = {});

// The generator's own statistics: how many of `cases` fall in each boundary class. Sequence
// classes (`Sq%BM=BM-1`, `(Skv-Sq)%BN=2`, `Skv=1`, `Sq=tile±1`, ...) count over every case, with BM
// and BN the case's own tile (tile_for its Dqk); value classes (`bf16 large scale>=1`,
// `f16 outlier_keys`, `f32 constant_rows`) count over the cases of their dtype (`of`). Every class
// the space can produce is listed, hit or not. For dense problems Sq and Skv are the lengths; for
// listed ones (varlen, paged) those of sequence 0, the one the lengths are aimed with.
// Spaces with variants add a class per variant the space allows, over every case (`window`,
// `softcap<=5`, `alibi signed`, `layout thd`, `paged`, `Dqk%8!=0`, ...), and their boundary
// classes over the cases that have the variant (`window edge at tile±1`, `window empty row`,
// `varlen empty sequence`, `varlen max_seqlen_q=1`, `paged last page partial`, `e4m3 descale=head`, ...).
struct ClassCount {
  std::string name;
  int64_t hits = 0;
  int64_t of = 0;
  double fraction() const { return of ? static_cast<double>(hits) / static_cast<double>(of) : 0.0; }
};
std::vector<ClassCount> boundary_statistics(const ProblemSpace& space, const std::vector<Case>& cases);

// Counterexamples print as the problem line the CLI accepts, not as a blob.
void showValue(const Problem& p, std::ostream& os);
void showValue(Dist d, std::ostream& os);
void showValue(const Case& c, std::ostream& os);

}  // namespace flashcheck
