// A plugin's kernels as data: what a describing worker process (runner/isolation.h) sends back
// after loading the plugin, and the variants flashcheck's own process builds from it without ever
// loading the plugin's code.
#include <optional>
#include <stdexcept>

#include "runner/registry.h"

namespace flashcheck {

namespace {

// Every field of Capabilities crosses the process boundary: one left out would silently become
// its default in the parent. Its size changes when a field is added; then describe it here and in
// the round trip of runner/reliability_test.cpp (Description.RoundTripsEveryField).
static_assert(sizeof(Capabilities) == 352, "Capabilities changed: describe the new field in runner/described_variant.cpp");
static_assert(sizeof(BackwardCaps) == 56, "BackwardCaps changed: describe the new field in runner/described_variant.cpp");

template <class E>
E enum_from(const nlohmann::json& j, int count, const char* field) {
  const int v = j.get<int>();
  if (v < 0 || v >= count) throw std::runtime_error(std::string("plugin description: ") + field + " out of range");
  return static_cast<E>(v);
}

nlohmann::json to_json(const Capabilities& c) {
  nlohmann::json j;
  for (DType d : c.dtypes) j["dtypes"].push_back(static_cast<int>(d));
  j["head_dims"] = c.head_dims;
  j["dv_ne_dqk"] = c.dv_ne_dqk;
  j["head_dim_pairs"] = nlohmann::json::array();
  for (auto [a, b] : c.head_dim_pairs) j["head_dim_pairs"].push_back({a, b});
  j["causals"] = nlohmann::json::array();
  for (Causal k : c.causals) j["causals"].push_back(static_cast<int>(k));
  j["gqa"] = c.gqa;
  j["max_seq"] = c.max_seq;
  j["equal_lengths"] = c.equal_lengths;
  j["seq_multiple"] = c.seq_multiple;
  j["propagates_nonfinite"] = c.propagates_nonfinite;
  j["max_tensor_elements"] = c.max_tensor_elements;
  j["lse_base"] = static_cast<int>(c.lse_base);
  j["empty_lse"] = static_cast<int>(c.empty_lse);
  j["memory"] = static_cast<int>(c.memory);
  j["min_sm"] = c.min_sm;
  j["exact_sm"] = c.exact_sm;
  j["tiles"] = nlohmann::json::array();
  for (const TileShape& t : c.tiles) j["tiles"].push_back({t.head_dim, t.block_q, t.block_kv, t.causal});
  j["use_exp2"] = c.numerics.use_exp2;
  j["round_p"] = c.numerics.round_p;
  // Problem model 2.
  j["windows"] = c.windows;
  j["softcap"] = c.softcap;
  j["alibi"] = nlohmann::json::array();
  for (Alibi a : c.alibi) j["alibi"].push_back(static_cast<int>(a));
  j["alibi_per_batch"] = c.alibi_per_batch;
  j["sinks"] = c.sinks;
  j["layouts"] = nlohmann::json::array();
  for (Layout l : c.layouts) j["layouts"].push_back(static_cast<int>(l));
  j["seqused"] = c.seqused;
  j["paged"] = c.paged;
  j["page_sizes"] = c.page_sizes;
  j["out_dtypes"] = nlohmann::json::array();
  for (DType d : c.out_dtypes) j["out_dtypes"].push_back(static_cast<int>(d));
  j["descales"] = nlohmann::json::array();
  for (Descale d : c.descales) j["descales"].push_back(static_cast<int>(d));
  j["window_convention"] = static_cast<int>(c.window_convention);
  j["alibi_lse"] = static_cast<int>(c.alibi_lse);
  return j;
}

Capabilities caps_from_json(const nlohmann::json& j) {
  Capabilities c;
  c.dtypes.clear();
  for (const auto& d : j.at("dtypes")) c.dtypes.push_back(enum_from<DType>(d, 5, "dtype"));
  c.head_dims = j.at("head_dims").get<std::vector<int64_t>>();
  c.dv_ne_dqk = j.at("dv_ne_dqk").get<bool>();
  for (const auto& p : j.at("head_dim_pairs")) c.head_dim_pairs.emplace_back(p.at(0).get<int64_t>(), p.at(1).get<int64_t>());
  c.causals.clear();
  for (const auto& k : j.at("causals")) c.causals.push_back(enum_from<Causal>(k, 3, "causal"));
  c.gqa = j.at("gqa").get<bool>();
  c.max_seq = j.at("max_seq").get<int64_t>();
  c.equal_lengths = j.at("equal_lengths").get<bool>();
  c.seq_multiple = j.at("seq_multiple").get<int64_t>();
  c.propagates_nonfinite = j.at("propagates_nonfinite").get<bool>();
  c.max_tensor_elements = j.at("max_tensor_elements").get<int64_t>();
  c.lse_base = enum_from<LseBase>(j.at("lse_base"), 3, "lse_base");
  c.empty_lse = enum_from<EmptyRowLse>(j.at("empty_lse"), 2, "empty_lse");
  c.memory = enum_from<Memory>(j.at("memory"), 2, "memory");
  c.min_sm = j.at("min_sm").get<int>();
  c.exact_sm = j.at("exact_sm").get<bool>();
  c.tiles.clear();
  for (const auto& t : j.at("tiles"))
    c.tiles.push_back({t.at(0).get<int64_t>(), t.at(1).get<int64_t>(), t.at(2).get<int64_t>(), t.at(3).get<int>()});
  c.numerics.use_exp2 = j.at("use_exp2").get<bool>();
  c.numerics.round_p = j.at("round_p").get<bool>();
  c.windows = j.at("windows").get<bool>();
  c.softcap = j.at("softcap").get<bool>();
  for (const auto& a : j.at("alibi")) c.alibi.push_back(enum_from<Alibi>(a, 3, "alibi"));
  c.alibi_per_batch = j.at("alibi_per_batch").get<bool>();
  c.sinks = j.at("sinks").get<bool>();
  c.layouts.clear();
  for (const auto& l : j.at("layouts")) c.layouts.push_back(enum_from<Layout>(l, 3, "layout"));
  c.seqused = j.at("seqused").get<bool>();
  c.paged = j.at("paged").get<bool>();
  c.page_sizes = j.at("page_sizes").get<std::vector<int64_t>>();
  c.out_dtypes.clear();
  for (const auto& d : j.at("out_dtypes")) c.out_dtypes.push_back(enum_from<DType>(d, 5, "out_dtype"));
  for (const auto& d : j.at("descales")) c.descales.push_back(enum_from<Descale>(d, 3, "descale"));
  c.window_convention = enum_from<WindowConvention>(j.at("window_convention"), 2, "window_convention");
  c.alibi_lse = enum_from<AlibiLse>(j.at("alibi_lse"), 2, "alibi_lse");
  return c;
}

// The parent's view of a kernel whose code is loaded only in worker processes. Its supports()
// and forward() are asked of its KernelWorker; asking them here is a bug of flashcheck's.
// A backward's declaration (null: none), for the same trip.
nlohmann::json to_json(const BackwardCaps* b) {
  if (!b) return nullptr;
  nlohmann::json j{{"head_dims", b->head_dims}, {"deterministic", b->deterministic}, {"variants", b->variants}};
  j["dtypes"] = nlohmann::json::array();
  for (DType d : b->dtypes) j["dtypes"].push_back(static_cast<int>(d));
  return j;
}

std::optional<BackwardCaps> backward_from_json(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  BackwardCaps b;
  for (const auto& d : j.at("dtypes")) b.dtypes.push_back(enum_from<DType>(d, 5, "backward dtype"));
  b.head_dims = j.at("head_dims").get<std::vector<int64_t>>();
  b.deterministic = j.at("deterministic").get<bool>();
  b.variants = j.at("variants").get<bool>();
  return b;
}

class DescribedVariant final : public Variant {
 public:
  DescribedVariant(std::string name, Capabilities caps, std::optional<BackwardCaps> backward)
      : name_(std::move(name)), caps_(std::move(caps)), backward_(std::move(backward)) {}
  std::string name() const override { return name_; }
  const Capabilities& caps() const override { return caps_; }
  std::optional<std::string> unsupported(const Problem&) const override {
    throw std::logic_error("kernel '" + name_ + "' is loaded only in its worker process: ask its KernelWorker::supports()");
  }
  void forward(const Problem&, const KernelArgs&) const override {
    throw std::logic_error("kernel '" + name_ + "' is loaded only in its worker process: run it through its KernelWorker");
  }
  const BackwardCaps* backward_caps() const override { return backward_ ? &*backward_ : nullptr; }
  void backward(const Problem&, const KernelArgs&, const BackwardArgs&) const override {
    throw std::logic_error("kernel '" + name_ + "' is loaded only in its worker process: run its backward through its KernelWorker");
  }

 private:
  std::string name_;
  Capabilities caps_;
  std::optional<BackwardCaps> backward_;
};

}  // namespace

nlohmann::json describe_variants(const std::vector<std::shared_ptr<Variant>>& variants) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& v : variants) j.push_back({{"name", v->name()}, {"caps", to_json(v->caps())}, {"backward", to_json(v->backward_caps())}});
  return j;
}

std::vector<std::shared_ptr<Variant>> described_variants(const nlohmann::json& j) {
  std::vector<std::shared_ptr<Variant>> out;
  try {
    for (const auto& e : j)
      out.push_back(std::make_shared<DescribedVariant>(e.at("name").get<std::string>(), caps_from_json(e.at("caps")),
                                                       backward_from_json(e.at("backward"))));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("malformed plugin description from the worker process: ") + e.what());
  }
  return out;
}

}  // namespace flashcheck
