#include "verify/judge.h"

#include <stdexcept>
#include <vector>

#include "verify/criteria.h"
#include "verify/expected.h"
#include "verify/tolerance.h"

namespace flashcheck {

Report judge(const Problem& p, const Inputs& in, const KernelOutput& out, const Declared& declared,
             const JudgeOptions& opt) {
  if (out.o.size() != static_cast<size_t>(p.o_elems())) throw std::invalid_argument("judge: o has the wrong size");
  if (out.lse && out.lse->size() != static_cast<size_t>(p.lse_elems()))
    throw std::invalid_argument("judge: lse has the wrong size");
  RowSet rows = sample_row_set(p, opt.max_rows, 64, declared.tile_q);
  // Rows whose output gives itself away are judged wherever they lie, not only if sampled.
  if (!rows.is_all()) {
    const auto lse = declared.lse_base != LseBase::none ? out.lse : std::nullopt;  // an LSE not declared is not read
    rows = with_rows(p, rows, suspect_rows(p, out.o, lse, opt.max_rows));
  }
  Expected expected = make_expected(p, in, rows, opt.oracle);
  std::vector<std::pair<std::string, double>> criteria_time;
  PhaseTimer clock(criteria_time);
  KernelResult kr;
  kr.o = select_rows(p, out.o, p.head_dim_v, expected.oracle);
  if (out.lse && declared.lse_base != LseBase::none) {
    std::vector<float> lse(out.lse->begin(), out.lse->end());
    if (declared.lse_base == LseBase::two) lse_base2_to_natural(lse);  // declared, so converted; never guessed
    if (declared.alibi_lse != AlibiLse::exact) alibi_lse_to_exact(p, in, declared.alibi_lse, lse);
    kr.lse = select_rows(p, lse, 1, expected.oracle);
  }
  Report r = verify_output(p, expected, kr,
                           CheckOptions{tolerance_for(p.dtype), declared.tile_q, declared.tile_kv, declared.empty_lse,
                                        opt.error_maps});
  if (opt.timings) {
    clock.lap("criteria");
    r.timings = std::move(expected.timings);
    r.timings.insert(r.timings.end(), criteria_time.begin(), criteria_time.end());
  }
  if (out.oob_writes)
    r.criteria.push_back({"out_of_bounds", *out.oob_writes == 0, static_cast<double>(*out.oob_writes), 0,
                          "canary bytes around the kernel's buffers overwritten (writes past them)"});
  if (out.padding_written)
    r.criteria.push_back({"padding_written", *out.padding_written == 0, static_cast<double>(*out.padding_written), 0,
                          "elements of o and lse in padding rows (past the last sequence) that the kernel wrote"});
  return r;
}

}  // namespace flashcheck
