// Which convention does a kernel's output follow? Libraries differ in exactly the places problem
// model 2 pins down — the causal alignment, whether a window's bounds are inclusive, the ALiBi form
// and its LSE, the empty-row LSE, the LSE's base, whether a sink counts — and a third-party kernel
// rarely says. identify() judges one output under each reading of the problem that differs from
// the stated one in one such convention, and says which readings pass: the convention the kernel
// follows is the one whose reading passes (torch's flash backend was found bottom-right this way).
#pragma once
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"
#include "verify/judge.h"

namespace flashcheck {

// One reading of the problem: what it changes from the stated one, in words a person reads
// ("window left exclusive (left 31)", "causal top_left", "ALiBi signed", "LSE base 2"), and the
// problem and declarations judged under it. The stated reading comes first ("as stated").
struct Reading {
  std::string name;
  Problem problem;
  Declared declared;
  bool operator==(const Reading&) const = default;
};

// The readings worth trying for this problem: each convention it touches, one at a time.
// Inputs that a reading needs (ALiBi slopes for another form, sinks) are the stated ones.
std::vector<Reading> readings_of(const Problem& stated, const Declared& declared);

struct ReadingVerdict {
  Reading reading;
  bool pass = false;
  std::vector<std::string> failed;  // the criteria it fails (empty when it passes)
  int64_t rows_checked = 0;
};

// Judges `out` under every reading (each is one judge() call: one oracle evaluation). The stated
// reading is always judged first. A reading whose problem the inputs do not fit (a slope vector of
// the wrong length) is left out.
std::vector<ReadingVerdict> identify(const Problem& stated, const Inputs& in, const KernelOutput& out,
                                     const Declared& declared, const JudgeOptions& opt = {});

// "the output follows: window left exclusive (left 31)" or "no reading passes" / "as stated", for
// reports; and the table as text.
std::string identification_summary(const std::vector<ReadingVerdict>& v);
std::string to_text(const std::vector<ReadingVerdict>& v);

}  // namespace flashcheck
