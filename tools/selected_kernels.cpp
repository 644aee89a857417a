#include "tools/selected_kernels.h"

#include <cstdio>

#include "reference/conventions.h"
#include "runner/plugin_variants.h"

namespace flashcheck::cli {

std::filesystem::path self_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : p.parent_path();
}

std::vector<Selected> select(const std::string& which, const std::vector<std::string>& plugins, bool default_plugin,
                             const IsolationOptions* isolation) {
  std::vector<Selected> pool;
  for (auto& v : Registry::builtin().all()) pool.push_back({v, ""});
  if (which != "all" && plugins.empty())
    if (auto v = Registry::builtin().find(which)) return {{v, ""}};  // built in: no plugin to load
  std::vector<std::string> libs = plugins;
  // With no --plugin, the example CPU plugin built beside the binary joins the pool, so a machine
  // without a GPU still validates an out-of-tree kernel by default.
  if (libs.empty() && default_plugin && std::filesystem::exists(self_dir() / "example_cpu_plugin.so"))
    libs.push_back((self_dir() / "example_cpu_plugin.so").string());
  for (const auto& lib : libs)
    for (auto& v : isolation ? describe_plugin(lib, *isolation) : load_plugin(lib)) {
      // Names are how kernels are chosen and reproduced: two libraries may not share one.
      for (const Selected& s : pool)
        if (s.v->name() == v->name())
          throw CannotTest("kernel '" + v->name() + "' of plugin '" + lib + "' has the same name as one of " +
                           (s.plugin.empty() ? std::string("the built-in kernels") : "plugin '" + s.plugin + "'"));
      pool.push_back({v, lib});
    }
  if (which == "all") return pool;
  for (auto& s : pool)
    if (s.v->name() == which) return {s};
  std::string names;
  for (auto& s : pool) names += " " + s.v->name();
  throw CannotTest("no kernel named '" + which + "' (known:" + names + ")");
}

IsolationOptions isolation_from(bool no_isolation, double timeout, double load_timeout, const char* command) {
  IsolationOptions iso;
  iso.enabled = !no_isolation;
  if (timeout > 0) iso.timeout_s = timeout;
  if (load_timeout > 0) iso.load_timeout_s = load_timeout;
  if (no_isolation && timeout > 0)
    std::fprintf(stderr, "flashcheck %s: warning: --timeout cannot apply with --no-isolation (a kernel runs in this process, "
                 "and a hang hangs flashcheck)\n", command);
  return iso;
}

}  // namespace flashcheck::cli
