// The C API (capi/flashcheck.h) over the one judge and the runner's campaign: no judging of its own.
// fc_check decodes the caller's buffers and calls verify/judge.h; fc_fuzz wraps the callback as a
// host-memory runner Variant (as runner/plugin_loader.cpp wraps a plugin) and runs the very
// campaign `flashcheck run` runs, so the same seed draws the same problems and failures shrink alike.
// This file: the API 1-2 entries, reports, campaigns and the options both generations read.
// Problem model 2's entries: capi/problem2.cpp (the problem struct), capi/tensors2.cpp (views,
// fc_check2, fc_reference, fc_make_inputs2), capi/fuzz2.cpp (fc_fuzz2).
#include "capi/flashcheck.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "runner/campaign.h"
#include "runner/registry.h"
#include "verify/judge.h"
#include "verify/report_html.h"
#include "verify/untrusted_text.h"

namespace flashcheck::capi {

DType to_dtype(int32_t d) {
  switch (d) {
    case FC_F32: return DType::f32;
    case FC_F16: return DType::f16;
    case FC_BF16: return DType::bf16;
    case FC_E4M3: return DType::e4m3;
    case FC_E5M2: return DType::e5m2;
  }
  throw InvalidArgument("dtype " + std::to_string(d) + " is not FC_F32, FC_F16, FC_BF16, FC_E4M3 or FC_E5M2");
}

int32_t from_dtype(DType d) {
  switch (d) {
    case DType::f32: return FC_F32;
    case DType::f16: return FC_F16;
    case DType::bf16: return FC_BF16;
    case DType::e4m3: return FC_E4M3;
    case DType::e5m2: return FC_E5M2;
  }
  return FC_F32;
}

Causal to_causal(int32_t c) {
  switch (c) {
    case FC_MASK_NONE: return Causal::none;
    case FC_MASK_TOP_LEFT: return Causal::top_left;
    case FC_MASK_BOTTOM_RIGHT: return Causal::bottom_right;
  }
  throw InvalidArgument("causal " + std::to_string(c) + " is not FC_MASK_NONE, FC_MASK_TOP_LEFT or FC_MASK_BOTTOM_RIGHT");
}

int32_t from_causal(Causal c) {
  return c == Causal::none ? FC_MASK_NONE : c == Causal::top_left ? FC_MASK_TOP_LEFT : FC_MASK_BOTTOM_RIGHT;
}

// FC_DIST_* in order: kAllDists' (the finite ones), then FC_DIST_NONFINITE.
constexpr Dist kCDists[] = {Dist::normal,        Dist::uniform,      Dist::large,    Dist::outlier_keys,
                            Dist::constant_rows, Dist::equal_scores, Dist::nonfinite};
static_assert(std::size(kCDists) == FC_DIST_NONFINITE + 1 && std::size(kAllDists) == FC_DIST_NONFINITE);

Dist to_dist(int32_t d) {
  if (d < 0 || d >= static_cast<int32_t>(std::size(kCDists))) throw InvalidArgument("dist " + std::to_string(d) + " is not an FC_DIST_*");
  return kCDists[d];
}

int32_t from_dist(Dist d) {
  for (size_t i = 0; i < std::size(kCDists); ++i)
    if (kCDists[i] == d) return static_cast<int32_t>(i);
  throw std::logic_error("a distribution without an FC_DIST_* value: " + std::string(to_string(d)));
}

EmptyRowLse to_empty(int32_t e) {
  if (e == FC_EMPTY_NEG_INF) return EmptyRowLse::neg_inf;
  if (e == FC_EMPTY_POS_INF) return EmptyRowLse::pos_inf;
  throw InvalidArgument("empty_row_lse " + std::to_string(e) + " is not FC_EMPTY_NEG_INF or FC_EMPTY_POS_INF");
}

AlibiLse to_alibi_lse(int32_t a) {
  if (a == FC_LSE_ALIBI_EXACT) return AlibiLse::exact;
  if (a == FC_LSE_ALIBI_KEY_OFFSET) return AlibiLse::key_offset;
  throw InvalidArgument("alibi_lse " + std::to_string(a) + " is not FC_LSE_ALIBI_EXACT or FC_LSE_ALIBI_KEY_OFFSET");
}

// API 2's option structs end where API 3's fields begin (their tail padding became a reserved
// field): what a binary built against API 2 sets struct_size to, and all its init functions write.
constexpr size_t kCheckOptionsApi2 = offsetof(fc_check_options, alibi_lse);
constexpr size_t kFuzzOptionsApi2 = offsetof(fc_fuzz_options, windows);
static_assert(kCheckOptionsApi2 == 48 && kFuzzOptionsApi2 == 136, "API 2's layouts are frozen");
// API 3's fc_fuzz_options ended at alibi_lse and its tail padding (now a reserved field): what a
// binary built against API 3 sets struct_size to, and what fc_fuzz_options_init2 writes.
constexpr size_t kFuzzOptionsApi3 = offsetof(fc_fuzz_options, equal_lengths);
static_assert(kFuzzOptionsApi3 == 200, "API 3's layout is frozen");
// API 4 and 5's fc_fuzz_options ended at seq_multiple (no tail padding): what their binaries set
// struct_size to, and what fc_fuzz_options_init3 writes.
constexpr size_t kFuzzOptionsApi4 = offsetof(fc_fuzz_options, backward);
static_assert(kFuzzOptionsApi4 == 216, "API 4's layout is frozen");

fc_check_options check_defaults() {
  fc_check_options o{};
  o.struct_size = sizeof(fc_check_options);
  o.lse_base = FC_LSE_LOG_E;
  o.empty_row_lse = FC_EMPTY_NEG_INF;
  o.max_rows = kDefaultMaxRows;
  o.tile_q = o.tile_kv = 128;
  o.alibi_lse = FC_LSE_ALIBI_EXACT;
  return o;
}

fc_check_options read_check_options(const fc_check_options* opt) {
  return read_struct(opt, check_defaults(), kCheckOptionsApi2, "fc_check_options");
}

fc_fuzz_options fuzz_defaults() {
  const CampaignOptions c;
  fc_fuzz_options o{};
  o.struct_size = sizeof(fc_fuzz_options);
  o.name = "kernel";
  o.cases = c.cases;
  o.seed = c.seed;
  o.max_seq = c.max_seq;
  o.max_work = c.max_work;
  o.max_rows = c.max_rows;
  o.dtypes = (1u << FC_F32) | (1u << FC_F16) | (1u << FC_BF16);
  o.causals = (1u << FC_MASK_NONE) | (1u << FC_MASK_TOP_LEFT) | (1u << FC_MASK_BOTTOM_RIGHT);
  o.dv_ne_dqk = 1;
  o.gqa = 1;
  o.lse_base = FC_LSE_LOG_E;
  o.empty_row_lse = FC_EMPTY_NEG_INF;
  o.tile_q = o.tile_kv = 128;
  o.shrink = 1;
  o.fail_fast = 0;
  o.max_failures = c.max_failures_kept;
  o.progress = 0;
  o.layouts = 1u << FC_BHSD;
  o.alibi_lse = FC_LSE_ALIBI_EXACT;
  o.equal_lengths = 0;
  o.nonfinite = 1;
  o.seq_multiple = 1;
  o.backward = 0;
  return o;
}

fc_fuzz_options read_fuzz_options(const fc_fuzz_options* opt) {
  need(opt, "options");
  return read_struct(opt, fuzz_defaults(), kFuzzOptionsApi2, "fc_fuzz_options");
}

namespace {

// A mask of `bits` allowed values (bit i: constant i), as the values; `none_ok`: 0 is allowed.
std::vector<int32_t> mask_values(uint32_t mask, int32_t bits, const char* what) {
  if (mask >> bits) throw InvalidArgument(std::string(what) + " mask " + std::to_string(mask) + " names an unknown value");
  std::vector<int32_t> out;
  for (int32_t i = 0; i < bits; ++i)
    if (mask & (1u << i)) out.push_back(i);
  return out;
}

}  // namespace

Capabilities caps_from(const fc_fuzz_options& o) {
  Capabilities c;
  c.memory = Memory::host;
  if (o.dtypes == 0) throw InvalidArgument("dtypes mask 0 names no dtype");
  if (o.causals == 0) throw InvalidArgument("causals mask 0 names no mask");
  // Bit order is FC_F32, FC_F16, FC_BF16 (then fp8) and FC_MASK_NONE, _TOP_LEFT, _BOTTOM_RIGHT: the
  // order of Capabilities' defaults, which the generators draw from by position.
  c.dtypes.clear();
  for (int32_t d : mask_values(o.dtypes, 5, "dtypes")) c.dtypes.push_back(to_dtype(d));
  c.causals.clear();
  for (int32_t m : mask_values(o.causals, 3, "causals")) c.causals.push_back(to_causal(m));
  if (o.head_dims) {
    if (o.num_head_dims < 1) throw InvalidArgument("head_dims is given with num_head_dims < 1");
    c.head_dims.assign(o.head_dims, o.head_dims + o.num_head_dims);
    for (int64_t d : c.head_dims)
      if (d < 1) throw InvalidArgument("head dim " + std::to_string(d) + " is not positive");
  }
  c.dv_ne_dqk = o.dv_ne_dqk != 0;
  c.gqa = o.gqa != 0;
  if (o.lse_base == FC_LSE_LOG_E) c.lse_base = LseBase::e;
  else if (o.lse_base == FC_LSE_LOG_2) c.lse_base = LseBase::two;
  else if (o.lse_base == FC_LSE_ABSENT) c.lse_base = LseBase::none;
  else throw InvalidArgument("lse_base " + std::to_string(o.lse_base) + " is not an FC_LSE_*");
  c.empty_lse = to_empty(o.empty_row_lse);
  if (o.tile_q < 1 || o.tile_kv < 1) throw InvalidArgument("tile_q and tile_kv must be positive");
  c.tiles = {{0, o.tile_q, o.tile_kv}};
  // Problem model 2 (API 3 fields; an API 2 struct has the defaults: none).
  c.windows = o.windows != 0;
  c.softcap = o.softcap != 0;
  for (int32_t a : mask_values(o.alibi, 3, "alibi")) {
    if (a == FC_BIAS_NONE) throw InvalidArgument("alibi mask names FC_BIAS_NONE; name the forms computed (0: no ALiBi)");
    c.alibi.push_back(a == FC_BIAS_ALIBI_SYMMETRIC ? Alibi::symmetric : Alibi::signed_);
  }
  c.alibi_per_batch = o.alibi_per_batch != 0;
  if (c.alibi_per_batch && c.alibi.empty()) throw InvalidArgument("alibi_per_batch without an ALiBi form in alibi");
  c.sinks = o.sinks != 0;
  if (o.layouts != 0) {
    c.layouts.clear();
    for (int32_t l : mask_values(o.layouts, 3, "layouts")) c.layouts.push_back(static_cast<Layout>(l));  // FC_BHSD.. = Layout's order
  }
  c.seqused = o.seqused != 0;
  c.paged = o.paged != 0;
  if (o.page_sizes) {
    if (!c.paged) throw InvalidArgument("page_sizes given without paged");
    if (o.num_page_sizes < 1) throw InvalidArgument("page_sizes is given with num_page_sizes < 1");
    c.page_sizes.assign(o.page_sizes, o.page_sizes + o.num_page_sizes);
    for (int64_t s : c.page_sizes)
      if (s < 1) throw InvalidArgument("page size " + std::to_string(s) + " is not positive");
  }
  if (o.out_dtypes != 0) {
    c.out_dtypes.clear();
    for (int32_t d : mask_values(o.out_dtypes, 3, "out_dtypes")) {
      if (d != FC_BF16 && d != FC_F16) throw InvalidArgument("out_dtypes may name FC_BF16 and FC_F16 only (fp8 outputs)");
      c.out_dtypes.push_back(to_dtype(d));
    }
  }
  for (int32_t d : mask_values(o.descales, 3, "descales")) {
    if (d == FC_NO_DESCALE) continue;  // always taken
    c.descales.push_back(d == FC_DESCALE_PER_TENSOR ? Descale::tensor : Descale::head);
  }
  c.alibi_lse = to_alibi_lse(o.alibi_lse);
  // API 4's declared limits (an older struct has the defaults: none, and non-finite inputs drawn).
  if (o.seq_multiple < 1) throw InvalidArgument("seq_multiple must be at least 1, got " + std::to_string(o.seq_multiple));
  c.equal_lengths = o.equal_lengths != 0;
  c.seq_multiple = o.seq_multiple;
  c.propagates_nonfinite = o.nonfinite != 0;
  return c;
}

CampaignOptions campaign_from(const fc_fuzz_options& o) {
  if (o.cases < 1) throw InvalidArgument("cases must be at least 1");
  if (o.max_seq < 1) throw InvalidArgument("max_seq must be at least 1");
  if (o.max_rows < 1) throw InvalidArgument("max_rows must be at least 1");
  if (!(o.max_work > 0)) throw InvalidArgument("max_work must be positive");
  CampaignOptions c;
  c.cases = o.cases;
  c.seed = o.seed;
  c.max_seq = o.max_seq;
  c.max_work = o.max_work;
  c.max_rows = o.max_rows;
  c.shrink = o.shrink != 0;
  c.fail_fast = o.fail_fast != 0;
  c.progress = o.progress != 0;
  c.max_failures_kept = std::max<int64_t>(o.max_failures, 0);
  return c;
}

// The campaign's own reproduce lines name `flashcheck run --kernel`, which cannot run a callback:
// a failure's report names its case instead, which fc_make_inputs rebuilds.
std::string case_repro(const Case& c) {
  return "problem \"" + to_string(c.problem) + "\" with inputs dist=" + std::string(to_string(c.dist)) +
         " seed=" + std::to_string(c.seed) + " (fc_make_inputs / flashcheck.make_inputs rebuild them)";
}

std::unique_ptr<fc_campaign> run_callback_campaign(const Variant& variant, const fc_fuzz_options& o, const CaseRunner* runner) {
  const CampaignOptions copt = campaign_from(o);
  auto c = std::make_unique<fc_campaign>();
  c->name = variant.name();
  c->seed = o.seed;
  std::ostringstream log;
  c->summary = runner ? run_campaign(variant, *runner, copt, log) : run_campaign(variant, copt, log);
  c->log = printable_block(log.str());  // the log quotes the callback's error messages
  if (c->summary.unavailable) throw CannotTest("nothing to fuzz: " + *c->summary.unavailable);
  for (CaseOutcome& f : c->summary.failures) {
    auto r = std::make_unique<fc_report>();
    f.report.repro = case_repro(f.c);
    r->report = f.report;
    c->failures.push_back(std::move(r));
  }
  return c;
}

namespace {

// Problem model 1's struct: plain problems only (the variants have no field in it).
Problem unchecked_problem(const fc_attention& a) {
  Problem p;
  p.batch = a.batch;
  p.heads_q = a.heads_q;
  p.heads_kv = a.heads_kv;
  p.seq_q = a.seq_q;
  p.seq_kv = a.seq_kv;
  p.head_dim_qk = a.head_dim_qk;
  p.head_dim_v = a.head_dim_v;
  p.dtype = to_dtype(a.dtype);
  if (is_fp8(p.dtype))
    throw InvalidArgument("dtype " + std::to_string(a.dtype) + " is fp8: fc_attention holds plain problems (FC_F32, FC_F16, "
                          "FC_BF16); fp8 problems are fc_attention2's");
  p.causal = to_causal(a.causal);
  if (!std::isnan(a.scale)) p.scale = a.scale;
  return p;
}

Problem to_problem(const fc_attention* a) {
  need(a, "problem");
  Problem p = unchecked_problem(*a);
  validate(p);
  return p;
}

fc_attention to_c(const Problem& p, bool resolve_scale) {
  if (!p.plain())
    throw InvalidArgument("the problem \"" + to_string(p) + "\" has variants, which fc_attention cannot hold: use the "
                          "API 3 entries (fc_attention2)");
  fc_attention a{};
  a.batch = p.batch;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.seq_q = p.seq_q;
  a.seq_kv = p.seq_kv;
  a.head_dim_qk = p.head_dim_qk;
  a.head_dim_v = p.head_dim_v;
  a.dtype = from_dtype(p.dtype);
  a.causal = from_causal(p.causal);
  a.scale = resolve_scale ? p.softmax_scale() : p.scale.value_or(std::numeric_limits<double>::quiet_NaN());
  return a;
}

std::vector<float> widen(DType d, const void* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  decode(d, src, n, out.data());
  return out;
}

// NaN/Inf in q, k or v are refused unless asked for, as `flashcheck check` does: such inputs test
// NaN propagation, which the caller should mean.
void refuse_nonfinite(const char* name, const std::vector<float>& x, int64_t h, int64_t s, int64_t d) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i])) continue;
    const int64_t e = static_cast<int64_t>(i);
    throw CannotTest(std::string("input '") + name + "' holds " + (std::isnan(x[i]) ? "NaN" : "Inf") + " at [" +
                     std::to_string(e / (h * s * d)) + "," + std::to_string(e / (s * d) % h) + "," + std::to_string(e / d % s) +
                     "," + std::to_string(e % d) + "]; set allow_nonfinite_inputs to check NaN/Inf propagation instead");
  }
}

// The callback as a campaign variant with host memory: the harness fences and poisons its buffers
// as it does for any kernel.
class CallbackVariant final : public Variant {
 public:
  CallbackVariant(std::string name, Capabilities caps, fc_kernel_callback fn, void* user)
      : name_(std::move(name)), caps_(std::move(caps)), fn_(fn), user_(user) {}
  std::string name() const override { return name_; }
  const Capabilities& caps() const override { return caps_; }
  // Its capabilities declare no variant: the buffers are the plain problem's contiguous BHSD ones.
  void forward(const Problem& p, const KernelArgs& args) const override {
    const fc_attention a = to_c(p, true);
    g_callback_error.clear();
    raise_callback_status(fn_(user_, &a, args.q.data, args.k.data, args.v.data, args.o.data, static_cast<float*>(args.lse.data)),
                          name_);
  }

 private:
  std::string name_;
  Capabilities caps_;
  fc_kernel_callback fn_;
  void* user_;
};

// fc_fuzz's callback takes fc_attention: plain problems in f32/f16/bf16 only.
void refuse_model2(const Capabilities& c) {
  for (DType d : c.dtypes)
    if (is_fp8(d)) throw InvalidArgument("fc_fuzz's callback takes plain problems: fp8 dtypes need fc_fuzz2");
  if (c.windows || c.softcap || !c.alibi.empty() || c.sinks || c.layouts != std::vector<Layout>{Layout::bhsd} || c.seqused ||
      c.paged || !c.descales.empty())
    throw InvalidArgument("fc_fuzz's callback takes plain problems: the variants the options allow need fc_fuzz2");
}

fc_case case_to_c(const Case& c) {
  fc_case out{};
  out.problem = to_c(c.problem, false);
  out.dist = from_dist(c.dist);
  out.input_seed = c.seed;
  return out;
}

const char* campaign_json(const fc_campaign* c) {
  const VariantSummary& s = c->summary;
  nlohmann::json j{{"name", c->name}, {"seed", c->seed},     {"cases", s.cases},
                   {"passed", s.passed}, {"failed", s.failed}, {"skipped", s.skipped},
                   {"worst_cos", s.worst_cos}};
  j["failures"] = nlohmann::json::array();
  for (size_t i = 0; i < s.failures.size(); ++i) {
    const Case& k = s.failures[i].c;
    j["failures"].push_back({{"problem", to_string(k.problem)},
                             {"dist", std::string(to_string(k.dist))},
                             {"input_seed", k.seed},
                             {"report", to_json(c->failures[i]->report)}});
  }
  auto* m = const_cast<fc_campaign*>(c);
  m->json = json_text(j);
  return m->json.c_str();
}

}  // namespace
}  // namespace flashcheck::capi

using namespace flashcheck;
using namespace flashcheck::capi;

// Every entry below keeps C++ exceptions on this side: those that can fail run their bodies in
// guarded() (an fc_status) or caught() (a fallback value); the others neither allocate nor throw.
extern "C" {

uint32_t fc_api_version(void) { return FLASHCHECK_API_VERSION; }

const char* fc_last_error(void) { return g_error.c_str(); }

size_t fc_attention_to_string(const fc_attention* p, char* buf, size_t cap) {
  std::string s;
  if (guarded([&] {
        need(p, "problem");
        s = to_string(unchecked_problem(*p));
      }) != FC_OK)
    s.clear();
  if (buf && cap) {
    const size_t n = std::min(s.size(), cap - 1);
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size();
}

fc_status fc_attention_parse(const char* line, fc_attention* out) {
  return guarded([&] {
    need(line, "line");
    need(out, "out");
    Problem p = parse_problem(line);
    validate(p);
    *out = to_c(p, false);
  });
}

fc_status fc_make_inputs(const fc_attention* pa, int32_t dist, uint64_t seed, void* q, void* k, void* v) {
  return guarded([&] {
    const Problem p = to_problem(pa);
    need(q, "q");
    need(k, "k");
    need(v, "v");
    const Inputs in = make_inputs(p, seed, to_dist(dist));
    encode(p.dtype, in.q.data(), p.q_elems(), q);
    encode(p.dtype, in.k.data(), p.k_elems(), k);
    encode(p.dtype, in.v.data(), p.v_elems(), v);
  });
}

const char* fc_dist_name(int32_t dist) {
  if (dist < 0 || dist >= static_cast<int32_t>(std::size(kCDists))) return nullptr;
  return to_string(kCDists[dist]).data();  // string_views of literals: NUL-terminated
}

// A binary built against API 2 passes a struct of API 2's size: this writes that much and no more.
void fc_check_options_init(fc_check_options* o) {
  if (!o) return;  // nothing in here allocates or throws
  fc_check_options d = check_defaults();
  d.struct_size = static_cast<uint32_t>(kCheckOptionsApi2);
  std::memcpy(o, &d, kCheckOptionsApi2);
}

void fc_check_options_init2(fc_check_options* o) {
  if (o) *o = check_defaults();
}

fc_status fc_check(const fc_attention* pa, const void* q, const void* k, const void* v, const void* o, const float* lse,
                   const fc_check_options* opt_in, fc_report** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    const fc_check_options opt = read_check_options(opt_in);
    const Problem p = to_problem(pa);
    need(q, "q");
    need(k, "k");
    need(v, "v");
    need(o, "o");
    if (opt.lse_base != FC_LSE_LOG_E && opt.lse_base != FC_LSE_LOG_2)
      throw InvalidArgument("lse_base must be FC_LSE_LOG_E or FC_LSE_LOG_2 (pass lse = NULL for a kernel without one)");
    if (opt.max_rows < 1 || opt.tile_q < 1 || opt.tile_kv < 1) throw InvalidArgument("max_rows, tile_q and tile_kv must be positive");
    Inputs in{widen(p.dtype, q, p.q_elems()), widen(p.dtype, k, p.k_elems()), widen(p.dtype, v, p.v_elems())};
    if (!opt.allow_nonfinite_inputs) {
      refuse_nonfinite("q", in.q, p.heads_q, p.seq_q, p.head_dim_qk);
      refuse_nonfinite("k", in.k, p.heads_kv, p.seq_kv, p.head_dim_qk);
      refuse_nonfinite("v", in.v, p.heads_kv, p.seq_kv, p.head_dim_v);
    }
    const std::vector<float> o32 = widen(p.dtype, o, p.o_elems());
    std::vector<float> lse32;
    KernelOutput ko{o32, std::nullopt, std::nullopt};
    if (lse) {
      lse32.assign(lse, lse + p.lse_elems());
      ko.lse = lse32;
    }
    const Declared declared{opt.lse_base == FC_LSE_LOG_2 ? LseBase::two : LseBase::e, to_empty(opt.empty_row_lse), opt.tile_q,
                            opt.tile_kv};
    auto r = std::make_unique<fc_report>();
    r->report = judge(p, in, ko, declared, JudgeOptions{opt.max_rows, opt.error_maps != 0});
    *out = r.release();
  });
}

int32_t fc_report_pass(const fc_report* r) { return r && r->report.pass() ? 1 : 0; }

int32_t fc_report_failed_count(const fc_report* r) {
  if (!r) return 0;
  int32_t n = 0;
  for (const Criterion& c : r->report.criteria) n += c.pass ? 0 : 1;
  return n;
}

const char* fc_report_failed_name(const fc_report* r, int32_t i) {
  if (!r || i < 0) return nullptr;
  for (const Criterion& c : r->report.criteria)
    if (!c.pass && i-- == 0) return c.name.c_str();
  return nullptr;
}

int32_t fc_report_worst(const fc_report* r, fc_location* out) {
  if (!r || !out || !r->report.worst) return 0;
  const Location& w = *r->report.worst;
  *out = fc_location{w.b, w.h, w.row, w.col, w.q_tile, w.kv_tile, w.kernel, w.oracle};
  return 1;
}

// A problem with variants is refused by to_c: fc_report_problem2 gives it.
fc_status fc_report_problem(const fc_report* r, fc_attention* out) {
  return guarded([&] {
    need(r, "report");
    need(out, "out");
    *out = to_c(r->report.problem, false);
  });
}

// The renderings: a report's fields may quote a kernel's message or a caller's command, so the
// text and the page show them escaped and the JSON replaces bytes that are not UTF-8. On failure
// (out of memory) they return a fixed string and leave the reason in fc_last_error().
const char* fc_report_text(const fc_report* r) {
  if (!r) return "";
  return caught<const char*>("(flashcheck: the report could not be rendered; see fc_last_error)\n", [&] {
    auto* m = const_cast<fc_report*>(r);  // the cached rendering is not part of the report's value
    m->text = to_text(printable_report(r->report));
    return m->text.c_str();
  });
}

const char* fc_report_json(const fc_report* r) {
  if (!r) return "";
  return caught<const char*>("{\"error\": \"the report could not be rendered; see fc_last_error\"}", [&] {
    auto* m = const_cast<fc_report*>(r);
    m->json = json_text(to_json(r->report));
    return m->json.c_str();
  });
}

const char* fc_report_html(const fc_report* r) {
  if (!r) return "";
  return caught<const char*>("", [&] {
    auto* m = const_cast<fc_report*>(r);
    m->html = to_html(printable_report(r->report));
    return m->html.c_str();
  });
}

fc_status fc_report_set_repro(fc_report* r, const char* command) {
  return guarded([&] {
    need(r, "report");
    need(command, "command");
    r->report.repro = command;
  });
}

void fc_report_free(fc_report* r) { delete r; }

void fc_set_callback_error(const char* message) {
  caught(0, [&] {
    g_callback_error = message ? message : "";
    return 0;
  });
}

// As fc_check_options_init: API 2's part only.
void fc_fuzz_options_init(fc_fuzz_options* o) {
  if (!o) return;
  caught(0, [&] {
    fc_fuzz_options d = fuzz_defaults();
    d.struct_size = static_cast<uint32_t>(kFuzzOptionsApi2);
    std::memcpy(o, &d, kFuzzOptionsApi2);
    return 0;
  });
}

void fc_fuzz_options_init2(fc_fuzz_options* o) {
  if (!o) return;
  caught(0, [&] {
    fc_fuzz_options d = fuzz_defaults();
    d.struct_size = static_cast<uint32_t>(kFuzzOptionsApi3);
    std::memcpy(o, &d, kFuzzOptionsApi3);
    return 0;
  });
}

void fc_fuzz_options_init3(fc_fuzz_options* o) {
  if (!o) return;
  caught(0, [&] {
    fc_fuzz_options d = fuzz_defaults();
    d.struct_size = static_cast<uint32_t>(kFuzzOptionsApi4);
    std::memcpy(o, &d, kFuzzOptionsApi4);
    return 0;
  });
}

void fc_fuzz_options_init4(fc_fuzz_options* o) {
  if (!o) return;
  caught(0, [&] {
    *o = fuzz_defaults();
    return 0;
  });
}

fc_status fc_draw_case(const fc_fuzz_options* opt, int64_t index, fc_case* out) {
  return guarded([&] {
    const fc_fuzz_options o = read_fuzz_options(opt);
    need(out, "out");
    if (index < 0) throw InvalidArgument("case index must not be negative");
    const Capabilities caps = caps_from(o);
    refuse_model2(caps);
    const ProblemSpace space = space_for(caps, campaign_from(o));
    *out = case_to_c(campaign_case(space, o.seed, index));
  });
}

fc_status fc_fuzz(fc_kernel_callback kernel, void* user, const fc_fuzz_options* opt, fc_campaign** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(reinterpret_cast<const void*>(kernel), "kernel");
    const fc_fuzz_options o = read_fuzz_options(opt);
    const std::string name = printable_line(o.name && *o.name ? o.name : "kernel");
    Capabilities caps = caps_from(o);
    refuse_model2(caps);
    if (o.backward)
      throw InvalidArgument("backward: fc_fuzz's callback has no dO to read; a backward campaign is fc_fuzz2's "
                            "(fc_callback_d_out)");
    const CallbackVariant variant(name, std::move(caps), kernel, user);
    *out = run_callback_campaign(variant, o).release();
  });
}

void fc_campaign_get_summary(const fc_campaign* c, fc_campaign_summary* out) {
  if (!c || !out) return;
  const VariantSummary& s = c->summary;
  *out = fc_campaign_summary{s.cases, s.passed, s.failed, s.skipped, s.worst_cos};
}

int64_t fc_campaign_failure_count(const fc_campaign* c) { return c ? static_cast<int64_t>(c->failures.size()) : 0; }

fc_status fc_campaign_failure(fc_campaign* c, int64_t i, fc_case* out_case, fc_report** out_report) {
  return guarded([&] {
    need(c, "campaign");
    if (i < 0 || i >= static_cast<int64_t>(c->failures.size()))
      throw InvalidArgument("failure " + std::to_string(i) + " out of range (" + std::to_string(c->failures.size()) + " kept)");
    if (out_case) *out_case = case_to_c(c->summary.failures[static_cast<size_t>(i)].c);
    if (out_report) *out_report = c->failures[static_cast<size_t>(i)].get();
  });
}

const char* fc_campaign_json(const fc_campaign* c) {
  if (!c) return "";
  return caught<const char*>("{\"error\": \"the campaign could not be rendered; see fc_last_error\"}",
                             [&] { return campaign_json(c); });
}


const char* fc_campaign_log(const fc_campaign* c) { return c ? c->log.c_str() : ""; }

void fc_campaign_free(fc_campaign* c) { delete c; }

}  // extern "C"
