// fc_fuzz2: a problem model 2 kernel, handed over as a C callback, through the campaign `flashcheck
// run` runs. The callback is a runner Variant with host memory whose caps are the variants the
// options allow; its arguments are the problem struct and a view of every buffer.
//
// The runner stages every problem in its storage layout (runner/staged_problem.h) and hands the
// callback the strided views and side tensors a kernel would get. Should the campaign never draw a
// variant the options allow, or draw it only where the callback is refused, fc_fuzz2 refuses the
// options (unserved_variants), never pretending to test it.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "capi/flashcheck.h"
#include "runner/campaign.h"
#include "runner/registry.h"

namespace flashcheck::capi {
namespace {

class CallbackVariant2 final : public Variant {
 public:
  CallbackVariant2(std::string name, Capabilities caps, fc_kernel_callback2 fn, void* user)
      : name_(std::move(name)), caps_(std::move(caps)), fn_(fn), user_(user) {}
  std::string name() const override { return name_; }
  const Capabilities& caps() const override { return caps_; }

  // One call of the callback on the runner's arguments: the problem struct and a view of every buffer.
  void forward(const Problem& p, const KernelArgs& args) const override {
    std::vector<int32_t> lengths;
    const fc_attention2 c = problem_to_c(p, true, lengths);
    const fc_tensors t = views_of(p, args);
    g_callback_error.clear();
    raise_callback_status(fn_(user_, &c, &t), name_);
  }

 private:
  std::string name_;
  Capabilities caps_;
  fc_kernel_callback2 fn_;
  void* user_;
};

// The variants a campaign allows (the variant's caps) that it would never hand the callback: not
// drawn in its first cases (a generator that does not know a variant yet, or options that exclude
// it), or drawn only in problems the variant refuses, which the campaign would count as declined. Either would leave the variant out of every
// case without a word. About half the cases carry each allowed variant, so 512 draws miss one by
// chance with probability far below 2^-100. Each entry is "name" or "name (why it is refused)".
std::vector<std::string> unserved_variants(const CallbackVariant2& variant, const fc_fuzz_options& o) {
  const Capabilities& caps = variant.caps();
  struct Want {
    std::string name;
    std::function<bool(const Problem&)> drawn;
    std::optional<std::string> refused;  // why a problem of it that was drawn is not handed over
  };
  std::vector<Want> want;
  if (caps.windows) want.push_back({"windows", [](const Problem& p) { return !p.window.none(); }, {}});
  if (caps.softcap) want.push_back({"softcap", [](const Problem& p) { return p.softcap != 0; }, {}});
  for (Alibi a : caps.alibi)
    want.push_back({"alibi " + std::string(to_string(a)), [a](const Problem& p) { return p.alibi == a; }, {}});
  if (caps.alibi_per_batch) want.push_back({"alibi_per_batch", [](const Problem& p) { return p.alibi_per_batch; }, {}});
  if (caps.sinks) want.push_back({"sinks", [](const Problem& p) { return p.sinks; }, {}});
  for (Layout l : caps.layouts)
    if (l != Layout::bhsd)
      want.push_back({"layout " + std::string(to_string(l)), [l](const Problem& p) { return p.layout == l; }, {}});
  if (caps.seqused) want.push_back({"seqused", [](const Problem& p) { return !p.seqused_kv.empty(); }, {}});
  if (caps.paged) want.push_back({"paged", [](const Problem& p) { return p.paged(); }, {}});
  for (DType d : caps.dtypes)
    if (is_fp8(d)) want.push_back({"dtype " + std::string(to_string(d)), [d](const Problem& p) { return p.dtype == d; }, {}});
  for (DType d : caps.out_dtypes)
    if (d != DType::bf16)
      want.push_back({"out_dtype " + std::string(to_string(d)),
                       [d](const Problem& p) { return is_fp8(p.dtype) && p.o_dtype() == d; }, {}});
  for (Descale d : caps.descales)
    want.push_back({"descale " + std::string(to_string(d)), [d](const Problem& p) { return p.descale == d; }, {}});
  if (want.empty()) return {};
  const ProblemSpace space = space_for(caps, campaign_from(o));
  for (int64_t i = 0; i < 512 && !want.empty(); ++i) {
    const Problem p = campaign_case(space, o.seed, i).problem;
    const std::optional<std::string> refused = variant.unsupported(p);
    std::erase_if(want, [&](Want& w) {
      if (!w.drawn(p)) return false;
      if (!refused) return true;  // drawn and handed over
      w.refused = *refused;
      return false;
    });
  }
  std::vector<std::string> names;
  for (const Want& w : want) names.push_back(w.refused ? w.name + " (drawn, but " + *w.refused + ")" : w.name);
  return names;
}

fc_case2 case2_to_c(const Case& c, std::vector<int32_t>& lengths) {
  fc_case2 out{};
  out.dist = from_dist(c.dist);
  out.input_seed = c.seed;
  out.problem = problem_to_c(c.problem, false, lengths);
  return out;
}

// Writes a case to the caller's fc_case2, its problem within the caller's problem.struct_size.
void write_case(fc_case2* out, const fc_case2& c) {
  out->dist = c.dist;
  out->input_seed = c.input_seed;
  write_struct(&out->problem, c.problem, sizeof(fc_attention2), "fc_case2.problem");
}

}  // namespace
}  // namespace flashcheck::capi

using namespace flashcheck;
using namespace flashcheck::capi;

extern "C" {

fc_status fc_draw_case2(const fc_fuzz_options* opt, int64_t index, fc_case2* out, int32_t* lengths, size_t cap, size_t* needed) {
  return guarded([&] {
    const fc_fuzz_options o = read_fuzz_options(opt);
    need(out, "out");
    if (needed) *needed = 0;
    if (index < 0) throw InvalidArgument("case index must not be negative");
    const ProblemSpace space = space_for(caps_from(o), campaign_from(o));
    std::vector<int32_t> lens;
    fc_case2 c = case2_to_c(campaign_case(space, o.seed, index), lens);
    if (needed) *needed = lens.size();
    if (lens.size() > cap || (!lengths && !lens.empty()))
      throw InvalidArgument("the case's lengths need " + std::to_string(lens.size()) + " entries; the lengths buffer holds " +
                            std::to_string(lengths ? cap : 0) + " (retry with a larger one)");
    if (!lens.empty()) std::memcpy(lengths, lens.data(), lens.size() * sizeof(int32_t));
    for (const int32_t** ptr : {&c.problem.cu_seqlens_q, &c.problem.cu_seqlens_k, &c.problem.seqused_k, &c.problem.cache_seqlens})
      if (*ptr) *ptr = lengths + (*ptr - lens.data());
    write_case(out, c);
  });
}

fc_status fc_fuzz2(fc_kernel_callback2 kernel, void* user, const fc_fuzz_options* opt, fc_campaign** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(reinterpret_cast<const void*>(kernel), "kernel");
    const fc_fuzz_options o = read_fuzz_options(opt);
    const std::string name = printable_line(o.name && *o.name ? o.name : "kernel");
    const CallbackVariant2 variant(name, caps_from(o), kernel, user);
    const std::vector<std::string> missing = unserved_variants(variant, o);
    if (!missing.empty()) {
      std::string list;
      for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
      throw CannotTest("the options allow " + list + ", which this build's campaign did not hand the callback in 512 cases "
                       "(its generators do not draw them yet, the other options exclude them, or its runner cannot stage "
                       "them): refusing rather than fuzzing without them");
    }
    auto c = run_callback_campaign(variant, o);
    c->failure_lengths.resize(c->failures.size());
    *out = c.release();
  });
}

fc_status fc_campaign_failure2(fc_campaign* c, int64_t i, fc_case2* out_case, fc_report** out_report) {
  return guarded([&] {
    need(c, "campaign");
    if (i < 0 || i >= static_cast<int64_t>(c->failures.size()))
      throw InvalidArgument("failure " + std::to_string(i) + " out of range (" + std::to_string(c->failures.size()) + " kept)");
    if (c->failure_lengths.size() != c->failures.size()) c->failure_lengths.resize(c->failures.size());
    if (out_case) write_case(out_case, case2_to_c(c->summary.failures[static_cast<size_t>(i)].c, c->failure_lengths[static_cast<size_t>(i)]));
    if (out_report) *out_report = c->failures[static_cast<size_t>(i)].get();
  });
}

}  // extern "C"
