// `flashcheck list`: the kernels this build registered (and plugins'), with what each declares —
// its forward's space (dtypes, head dims, variants, conventions) and its backward, if it has one.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "runner/registry.h"
#include "tools/commands.h"
#include "tools/output.h"
#include "tools/selected_kernels.h"
#include "tools/strict_options.h"
#include "verify/untrusted_text.h"

namespace flashcheck::cli {

namespace {

// What a kernel declares of problem model 2, for `list`: the variants, layouts, page sizes, fp8
// outputs and descales it computes, and the conventions it reads and writes them in.
template <class T, class F>
std::vector<std::string> names_of(const std::vector<T>& xs, F&& name) {
  std::vector<std::string> out;
  for (const T& x : xs) out.emplace_back(name(x));
  return out;
}

nlohmann::json declared_variants_json(const Capabilities& c) {
  auto str = [](auto x) { return std::string(to_string(x)); };
  // The names `run --variants` and `run --require` take (runner/variant_selection.h), so a script
  // can pass what `list --json` says a kernel declares straight back to a campaign.
  nlohmann::json variants = nlohmann::json::array();
  for (VariantName v : kAllVariantNames)
    if (declares_variant(c, v)) variants.push_back(std::string(to_string(v)));
  return {{"variants", variants},
          {"alibi_per_batch", c.alibi_per_batch},
          {"layouts", names_of(c.layouts, str)},
          {"alibi", names_of(c.alibi, str)},
          {"page_sizes", c.page_sizes},  // with "paged": empty means any page size
          {"out_dtypes", names_of(c.out_dtypes, str)},
          {"descales", names_of(c.descales, str)},
          {"window_convention", c.window_convention == WindowConvention::left_exclusive ? "left_exclusive" : "inclusive"},
          {"alibi_lse", c.alibi_lse == AlibiLse::key_offset ? "key_offset" : "exact"},
          {"empty_lse", c.empty_lse == EmptyRowLse::pos_inf ? "+inf" : "-inf"}};
}

std::string declared_variants_text(const Capabilities& c) {
  auto join = [](const std::vector<std::string>& xs, const char* sep = ",") {
    std::string s;
    for (const auto& x : xs) s += (s.empty() ? "" : sep) + x;
    return s;
  };
  auto str = [](auto x) { return std::string(to_string(x)); };
  std::vector<std::string> v;
  if (c.windows) v.push_back(c.window_convention == WindowConvention::left_exclusive ? "window(left exclusive)" : "window");
  if (c.softcap) v.push_back("softcap");
  if (!c.alibi.empty())
    v.push_back("alibi(" + join(names_of(c.alibi, str)) + (c.alibi_per_batch ? "; slopes per batch" : "") +
                (c.alibi_lse == AlibiLse::key_offset ? "; LSE key_offset" : "") + ")");
  if (c.sinks) v.push_back("sinks");
  if (c.seqused) v.push_back("seqused");
  if (c.paged)
    v.push_back("paged(" + (c.page_sizes.empty() ? std::string("any page size") : "pages " + join(names_of(c.page_sizes, [](int64_t x) {
                                                                                        return std::to_string(x);
                                                                                      }))) + ")");
  std::string t = "variants: " + (v.empty() ? std::string("none (plain attention)") : join(v, " "));
  t += "; layouts " + join(names_of(c.layouts, str)) + "; dtypes " + join(names_of(c.dtypes, str));
  if (std::any_of(c.dtypes.begin(), c.dtypes.end(), is_fp8)) {
    t += " (fp8 out " + join(names_of(c.out_dtypes, str));
    if (!c.descales.empty()) t += "; descale " + join(names_of(c.descales, str));
    t += ")";
  }
  return t;
}

}  // namespace

void add_list(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("list", "the kernels this build registered (and plugins'), with what each declares");
  struct Opts {
    std::vector<std::string> plugins;
    std::string json;
    double load_timeout = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--plugin", o->plugins, "also list the kernels of these plugin libraries")->check(printable_path());
  cmd->add_option("--json", o->json, "write the list as JSON to PATH, or - for stdout");
  cmd->add_option("--load-timeout", o->load_timeout, "seconds a plugin may take to load (default 60)")->check(positive_number(1e6));
  cmd->callback([o, &action] {
    action = [o] {
      CommandOutputs outputs("list", o->json);
      return outputs.run([&] {
        outputs.require_writable();
        nlohmann::json j = nlohmann::json::array();
        // Plugins are described by a worker process: a constructor's printf goes to stderr marked
        // [plugin ...], never into the list (`--json -` stays JSON), and its crash is a refusal.
        const IsolationOptions iso = isolation_from(false, 0, o->load_timeout, "list");
        for (auto& [v, plugin] : select("all", o->plugins, false, &iso)) {
          const Capabilities& c = v->caps();
          const auto why = v->unavailable();
          nlohmann::json e{{"name", v->name()},
                           {"memory", c.memory == Memory::device ? "device" : "host"},
                           {"min_sm", c.min_sm},
                           {"available", !why},
                           {"head_dims", c.head_dims},
                           {"dv_ne_dqk", c.dv_ne_dqk},
                           {"gqa", c.gqa},
                           {"lse_base", c.lse_base == LseBase::e ? "e" : c.lse_base == LseBase::two ? "2" : "none"}};
          if (why) e["unavailable"] = *why;
          // The backward pass, when the kernel has one (`run --backward`): null otherwise.
          const BackwardCaps* bc = v->backward_caps();
          std::string backward_line = "backward: none";
          if (bc) {
            const std::vector<DType>& bd = bc->dtypes.empty() ? c.dtypes : bc->dtypes;
            const std::vector<int64_t>& bh = bc->head_dims.empty() ? c.head_dims : bc->head_dims;
            nlohmann::json b{{"head_dims", bh}, {"deterministic", bc->deterministic}, {"variants", bc->variants}};
            backward_line = "backward:";
            for (DType d : bd) {
              b["dtypes"].push_back(std::string(to_string(d)));
              backward_line += " " + std::string(to_string(d));
            }
            backward_line += std::string(bc->deterministic ? ", deterministic" : ", not deterministic") +
                             (bc->variants ? ", the forward's variants" : ", plain problems only");
            e["backward"] = b;
          } else {
            e["backward"] = nullptr;
          }
          for (DType d : c.dtypes) e["dtypes"].push_back(std::string(to_string(d)));
          for (Causal k : c.causals) e["causals"].push_back(std::string(to_string(k)));
          for (const TileShape& t : c.tiles) e["tiles"].push_back({{"head_dim", t.head_dim}, {"block_q", t.block_q}, {"block_kv", t.block_kv}});
          e.update(declared_variants_json(c));
          j.push_back(e);
          if (o->json != "-") {
            std::printf("%-22s %-6s %s\n", v->name().c_str(), c.memory == Memory::device ? "device" : "host",
                        why ? ("unavailable: " + printable_line(*why)).c_str() : "available");
            std::printf("%-22s %s\n", "", declared_variants_text(c).c_str());
            std::printf("%-22s %s\n", "", backward_line.c_str());
          }
        }
        if (outputs.json_wanted()) outputs.write_json(j);
        return int{kPass};
      });
    };
  });
}

}  // namespace flashcheck::cli
