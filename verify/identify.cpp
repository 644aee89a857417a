#include "verify/identify.h"

#include <sstream>

namespace flashcheck {

namespace {

// Adds `r` unless it is invalid or already listed (two conventions may read the same).
void add(std::vector<Reading>& out, Reading r) {
  try {
    validate(r.problem);
  } catch (const InvalidProblem&) {
    return;
  }
  for (const Reading& x : out)
    if (x.problem == r.problem && x.declared.lse_base == r.declared.lse_base &&
        x.declared.empty_lse == r.declared.empty_lse && x.declared.alibi_lse == r.declared.alibi_lse)
      return;
  out.push_back(std::move(r));
}

}  // namespace

std::vector<Reading> readings_of(const Problem& stated, const Declared& declared) {
  std::vector<Reading> out;
  add(out, {"as stated", stated, declared});
  auto with = [&](std::string name, auto change) {
    Reading r{std::move(name), stated, declared};
    change(r.problem, r.declared);
    add(out, std::move(r));
  };
  // The causal alignment (the same only where every sequence has Sq = Skv), or no mask at all.
  if (stated.causal != Causal::none) {
    for (Causal c : {Causal::top_left, Causal::bottom_right})
      if (c != stated.causal) with("causal " + std::string(to_string(c)), [&](Problem& p, Declared&) { p.causal = c; });
    with("causal mask ignored", [](Problem& p, Declared&) { p.causal = Causal::none; });
  }
  // Window bounds one key off on either side: an exclusive bound handed flashcheck's inclusive
  // number sees one key less (cuDNN's left_bound, xformers), a kernel counting the window's
  // size instead of its reach one more; and a window ignored.
  if (!stated.window.none()) {
    const Window w = stated.window;
    if (w.left >= 1)
      with("window left exclusive (left " + std::to_string(w.left - 1) + ")", [&](Problem& p, Declared&) { p.window.left = w.left - 1; });
    if (w.left >= 0)
      with("window left one wider (left " + std::to_string(w.left + 1) + ")", [&](Problem& p, Declared&) { p.window.left = w.left + 1; });
    if (w.right >= 1 && stated.causal == Causal::none)
      with("window right exclusive (right " + std::to_string(w.right - 1) + ")", [&](Problem& p, Declared&) { p.window.right = w.right - 1; });
    if (w.right >= 0 && stated.causal == Causal::none)
      with("window right one wider (right " + std::to_string(w.right + 1) + ")", [&](Problem& p, Declared&) { p.window.right = w.right + 1; });
    with("window ignored", [](Problem& p, Declared&) { p.window = {}; });
  }
  if (stated.softcap > 0) with("softcap ignored", [](Problem& p, Declared&) { p.softcap = 0; });
  if (stated.alibi != Alibi::none) {
    const Alibi other = stated.alibi == Alibi::symmetric ? Alibi::signed_ : Alibi::symmetric;
    with("ALiBi " + std::string(to_string(other)), [&](Problem& p, Declared&) { p.alibi = other; });
    if (stated.causal != Causal::none) {
      const AlibiLse lse = declared.alibi_lse == AlibiLse::exact ? AlibiLse::key_offset : AlibiLse::exact;
      with(lse == AlibiLse::key_offset ? "ALiBi LSE with slope·j (FlashAttention 2)" : "ALiBi LSE exact",
           [&](Problem&, Declared& d) { d.alibi_lse = lse; });
    }
  }
  if (stated.sinks) with("sinks ignored", [](Problem& p, Declared&) { p.sinks = false; });
  // Conventions of the LSE alone.
  if (declared.lse_base != LseBase::none) {
    const LseBase base = declared.lse_base == LseBase::e ? LseBase::two : LseBase::e;
    with(base == LseBase::two ? "LSE base 2" : "LSE natural log", [&](Problem&, Declared& d) { d.lse_base = base; });
    const EmptyRowLse empty = declared.empty_lse == EmptyRowLse::neg_inf ? EmptyRowLse::pos_inf : EmptyRowLse::neg_inf;
    with(empty == EmptyRowLse::pos_inf ? "empty rows' LSE +inf (FlashAttention 2)" : "empty rows' LSE -inf",
         [&](Problem&, Declared& d) { d.empty_lse = empty; });
  }
  return out;
}

std::vector<ReadingVerdict> identify(const Problem& stated, const Inputs& in, const KernelOutput& out,
                                     const Declared& declared, const JudgeOptions& opt) {
  std::vector<ReadingVerdict> verdicts;
  for (Reading& r : readings_of(stated, declared)) {
    Inputs reading_in;
    const Inputs* use = &in;
    if (stated.sinks && !r.problem.sinks) {  // the same inputs without the sink logits
      reading_in = in;
      reading_in.sinks.clear();
      use = &reading_in;
    }
    ReadingVerdict v;
    const Report rep = judge(r.problem, *use, out, r.declared, opt);
    v.pass = rep.pass();
    v.failed = rep.failed();
    v.rows_checked = rep.rows_checked;
    v.reading = std::move(r);
    verdicts.push_back(std::move(v));
  }
  return verdicts;
}

std::string identification_summary(const std::vector<ReadingVerdict>& v) {
  std::vector<std::string> pass;
  for (const ReadingVerdict& x : v)
    if (x.pass) pass.push_back(x.reading.name);
  if (pass.empty()) return "no reading passes: a defect, not a convention";
  std::string s = pass[0] == "as stated" ? "the output follows the stated conventions" : "the output follows: " + pass[0];
  if (pass.size() > 1) {
    s += "; indistinguishable on this input from:";
    for (size_t i = 1; i < pass.size(); ++i) s += (i > 1 ? ", " : " ") + pass[i];
  }
  return s;
}

std::string to_text(const std::vector<ReadingVerdict>& v) {
  std::ostringstream os;
  for (const ReadingVerdict& x : v) {
    os << (x.pass ? "  pass  " : "  FAIL  ") << x.reading.name;
    if (!x.pass) {
      os << "  (";
      for (size_t i = 0; i < x.failed.size(); ++i) os << (i ? ", " : "") << x.failed[i];
      os << ")";
    }
    os << "\n";
  }
  os << identification_summary(v) << "\n";
  return os.str();
}

}  // namespace flashcheck
