#include "verify/check_file.h"

#include "verify/check_file_format.h"
#include "verify/judge.h"
#include "verify/names.h"
#include "verify/safetensors.h"
#include "verify/untrusted_text.h"

namespace flashcheck {

Report check_file(const std::filesystem::path& path, const CheckFileOptions& opt) {
  std::vector<std::pair<std::string, double>> timings;
  PhaseTimer clock(timings);
  auto lap = [&](const char* phase) { clock.lap(phase); };
  SafetensorsFile f;
  try {
    f = read_safetensors(path);
  } catch (const SafetensorsError& e) {
    throw CannotTest(e.what());
  }
  lap("read file");
  // A misspelt name (`casual`, `LSE`) would otherwise be judged as absent: the default causal mode,
  // or no LSE check at all. Near misses are refused; other unknown names are read past and said.
  const NameAudit names = audit_names(f);
  if (names.refused()) throw CannotTest(names.refusal());
  CheckFileCase c = read_check_case(f, opt.allow_nonfinite_inputs, lap);
  const Problem& p = c.problem;
  KernelOutput out{c.o, std::nullopt, std::nullopt, c.padding_written};
  if (c.lse) out.lse = *c.lse;
  Declared declared = c.declared;
  declared.tile_q = opt.tile_q;
  declared.tile_kv = opt.tile_kv;
  Report r = judge(p, c.inputs, out, declared, JudgeOptions{opt.max_rows, opt.error_maps, opt.oracle, opt.timings});
  if (opt.timings) r.timings.insert(r.timings.begin(), timings.begin(), timings.end());
  r.repro = "flashcheck check " + shell_word(path.string());  // runs as printed, whatever the path holds
  if (!out.lse) r.notes.push_back("lse: not checked (the file has no 'lse' tensor)");
  for (auto& line : c.notes) r.notes.push_back(line);
  for (auto& line : names.ignored_lines()) r.notes.push_back(line);
  return r;
}

}  // namespace flashcheck
