// fc_fuzz2: a problem model 2 kernel, handed over as a C callback, through the campaign `flashcheck
// run` runs. The callback is a runner Variant with host memory whose caps are the variants the
// options allow; its arguments are the problem struct and a view of every buffer.
//
// The runner stages every problem in its storage layout (runner/staged_problem.h) and hands the
// callback the strided views and side tensors a kernel would get. Should the campaign never draw a
// variant the options allow, or draw it only where the callback is refused, fc_fuzz2 refuses the
// options (unserved_variants), never pretending to test it.
//
// A backward campaign (fc_fuzz_options.backward) runs the forward's cases with the backward's
// planting of non-finite inputs, and lends each callback its case's dO (fc_callback_d_out): the
// runner's Variant sees a problem, not a case, so the campaign's runner tells the variant which case
// it runs, and the variant draws dO from that case's seed with make_d_out, as `run --backward` does.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "capi/flashcheck.h"
#include "capi/views2.h"
#include "runner/campaign.h"
#include "runner/registry.h"

namespace flashcheck::capi {
namespace {

// What fc_callback_d_out hands out during a backward campaign's callback (null otherwise).
thread_local const fc_tensor_view* g_callback_d_out = nullptr;

class CallbackVariant2 final : public Variant {
 public:
  CallbackVariant2(std::string name, Capabilities caps, fc_kernel_callback2 fn, void* user, bool backward)
      : name_(std::move(name)), caps_(std::move(caps)), fn_(fn), user_(user), backward_(backward) {}
  std::string name() const override { return name_; }
  const Capabilities& caps() const override { return caps_; }

  // One call of the callback on the runner's arguments: the problem struct and a view of every
  // buffer (and, in a backward campaign, the case's dO for fc_callback_d_out).
  void forward(const Problem& p, const KernelArgs& args) const override {
    std::vector<int32_t> lengths;
    const fc_attention2 c = problem_to_c(p, true, lengths);
    const fc_tensors t = views_of(p, args);
    std::vector<uint8_t> d_out_bytes;
    fc_tensor_view d_out{};
    if (backward_) {
      if (!running_ || !(running_->problem == p))
        throw std::logic_error("a backward campaign ran a problem that is not its case's: no seed for its dO");
      d_out = d_out_view(p, t, make_d_out(p, running_->seed), d_out_bytes);
    }
    struct Lent {  // the view is the callback's alone, and only while it runs
      explicit Lent(const fc_tensor_view* v) { g_callback_d_out = v; }
      ~Lent() { g_callback_d_out = nullptr; }
    } lent(backward_ ? &d_out : nullptr);
    g_callback_error.clear();
    raise_callback_status(fn_(user_, &c, &t), name_);
  }

  // The runner of a backward campaign: the forward's cases, non-finite inputs planted for a
  // backward, each case made known to forward() while it runs (shrinking's and re-runs' too).
  CaseRunner backward_runner(const CampaignOptions& opt) const {
    CaseRunner r = forward_runner(*this, opt, /*backward_inputs=*/true);
    r.run = [this, run = r.run](const Case& c, KernelWorker* worker, const WaitingFn& waiting, bool maps) {
      struct Running {
        const CallbackVariant2& v;
        Running(const CallbackVariant2& v, const Case& c) : v(v) { v.running_ = &c; }
        ~Running() { v.running_ = nullptr; }
      } running(*this, c);
      return run(c, worker, waiting, maps);
    };
    return r;
  }

 private:
  // dO (logical rows) laid out as the runner staged o, in o's dtype: the storage of the callback's
  // own o view, NaN where no row maps (THD padding).
  static fc_tensor_view d_out_view(const Problem& p, const fc_tensors& t, const std::vector<float>& d_out,
                                   std::vector<uint8_t>& bytes) {
    Inputs in;
    const Placement pl = place_all(p, t, &t.o, from_dtype(p.o_dtype()), nullptr, FC_F32, in);
    encode_stored(*pl.qside, Tensor::o, p.o_dtype(), d_out, bytes);
    fc_tensor_view v = t.o;
    v.data = bytes.data();
    return v;
  }

  std::string name_;
  Capabilities caps_;
  fc_kernel_callback2 fn_;
  void* user_;
  bool backward_;
  mutable const Case* running_ = nullptr;  // the case a backward campaign runs now
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
    const CallbackVariant2 variant(name, caps_from(o), kernel, user, o.backward != 0);
    const std::vector<std::string> missing = unserved_variants(variant, o);
    if (!missing.empty()) {
      std::string list;
      for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
      throw CannotTest("the options allow " + list + ", which this build's campaign did not hand the callback in 512 cases "
                       "(its generators do not draw them yet, the other options exclude them, or its runner cannot stage "
                       "them): refusing rather than fuzzing without them");
    }
    const CaseRunner backward = variant.backward_runner(campaign_from(o));
    auto c = run_callback_campaign(variant, o, o.backward ? &backward : nullptr);
    c->failure_lengths.resize(c->failures.size());
    *out = c.release();
  });
}

fc_status fc_callback_d_out(fc_tensor_view* out) {
  return guarded([&] {
    need(out, "out");
    if (!g_callback_d_out)
      throw InvalidArgument("fc_callback_d_out is called from inside the callback of a backward campaign "
                            "(fc_fuzz2 with fc_fuzz_options.backward = 1) only");
    *out = *g_callback_d_out;
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
