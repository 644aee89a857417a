// RapidCheck generators for attention problems and their inputs. The property tests and the
// `flashcheck run` campaigns draw from these same generators.
#pragma once
#include <rapidcheck.h>

#include <cstdint>
#include <ostream>
#include <string>
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
  bool allow_dv_ne_dqk = true;  // e.g. 192/128
  bool allow_custom_scale = true;
  // Cap on B·Hq·Sq·Skv·(Dqk+Dv): long sequences trade batch and heads for length, never the tail.
  double max_work = 3e7;
  // The kernel's declared tiles per head dim. A head dim not listed (or an empty list: no kernel
  // tiles known) is aimed at the generic moduli 128 and 64 (kGenericTile).
  std::vector<TileShape> tiles;
  // true: most cases put Sq, Skv and Skv − Sq at tile-boundary residues and draw the hostile value
  // classes often (issue #14). false: the draw of earlier releases, kept to compare against.
  bool boundary_aware = true;
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
// the space can produce is listed, hit or not.
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
