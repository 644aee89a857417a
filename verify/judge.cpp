#include "verify/judge.h"

#include <stdexcept>
#include <vector>

#include "verify/criteria.h"
#include "verify/element_pass_device.h"
#include "verify/expected.h"
#include "verify/tolerance.h"

namespace flashcheck {

Report judge(const Problem& p, const Inputs& in, const KernelOutput& out, const Declared& declared,
             const JudgeOptions& opt) {
  std::span<const float> o = out.o;
  const DeviceArray* o_on_device = nullptr;
  bool o_ready = !out.o_when_ready;
  auto kernel_o_all = [&] {  // the kernel's O, waited for where it is still being filled
    if (!o_ready) {
      const KernelOutput::Ready r = out.o_when_ready();
      o = r.o, o_on_device = r.on_device, o_ready = true;
    }
    if (o.size() != static_cast<size_t>(p.o_elems())) throw std::invalid_argument("judge: o has the wrong size");
    return o;
  };
  if (o_ready) (void)kernel_o_all();
  if (out.lse && out.lse->size() != static_cast<size_t>(p.lse_elems()))
    throw std::invalid_argument("judge: lse has the wrong size");
  RowSet rows = sample_row_set(p, opt.max_rows, 64, declared.tile_q);
  // Rows whose output gives itself away are judged wherever they lie, not only if sampled.
  if (!rows.is_all()) {
    const auto lse = declared.lse_base != LseBase::none ? out.lse : std::nullopt;  // an LSE not declared is not read
    rows = with_rows(p, rows, suspect_rows(p, kernel_o_all(), lse, opt.max_rows));
  }
  // Where the oracle runs on the GPU its O stays there and is judged there (element_pass_device.h):
  // a production-size check then moves no fp64 output to the host.
  const bool keep_on_device = !device_element_pass_unsupported(p, opt.error_maps);
  Expected expected = make_expected(p, in, rows, opt.oracle, keep_on_device, opt.inputs_on_device);
  std::vector<std::pair<std::string, double>> criteria_time;
  PhaseTimer clock(criteria_time);
  // Every row: the kernel's O in the logical layout is already the oracle's row order, so it is
  // judged where it lies (a production-size output is 10^8..10^9 elements: no copy).
  std::vector<float> selected;
  if (!expected.oracle.rows.is_all()) selected = select_rows(p, kernel_o_all(), p.head_dim_v, expected.oracle);
  const std::span<const float> kernel_o = expected.oracle.rows.is_all() ? kernel_o_all() : std::span<const float>(selected);
  std::optional<std::vector<float>> kernel_lse;
  if (out.lse && declared.lse_base != LseBase::none) {
    std::vector<float> lse(out.lse->begin(), out.lse->end());
    if (declared.lse_base == LseBase::two) lse_base2_to_natural(lse);  // declared, so converted; never guessed
    if (declared.alibi_lse != AlibiLse::exact) alibi_lse_to_exact(p, in, declared.alibi_lse, lse);
    kernel_lse = select_rows(p, lse, 1, expected.oracle);
  }
  // The device copy is of every row, in the logical layout: the oracle's order only when it has them all.
  Report r = verify_output(p, expected, kernel_o, kernel_lse,
                           CheckOptions{tolerance_for(p.dtype), declared.tile_q, declared.tile_kv, declared.empty_lse,
                                        opt.error_maps, opt.timings,
                                        expected.oracle.rows.is_all() ? o_on_device : nullptr});
  if (opt.timings) {
    clock.lap("criteria");
    auto parts = std::move(r.timings);  // verify_output's own steps, indented under "criteria"
    r.timings = std::move(expected.timings);
    r.timings.insert(r.timings.end(), criteria_time.begin(), criteria_time.end());
    r.timings.insert(r.timings.end(), parts.begin(), parts.end());
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
