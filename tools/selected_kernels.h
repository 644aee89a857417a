// The kernels a command works on: built-ins and plugins' (described by an isolated worker, or
// loaded here), chosen by name; shared by run, list, bench and determinism.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runner/isolation.h"
#include "runner/registry.h"

namespace flashcheck::cli {

// The directory of the running binary (the example plugin sits beside it).
std::filesystem::path self_dir();

// A kernel a command works on, with the library it came from ("" for a built-in): the worker
// loads that library, and a reproduce line names it.
struct Selected {
  std::shared_ptr<Variant> v;
  std::string plugin;
};

// The variants a command works on: built-ins plus plugins; `which` is a name or "all". With
// `isolation`, each plugin is loaded only in a worker process that describes its kernels (its
// constructors and flashcheck_get_kernel never run here); without, it is loaded in this process.
std::vector<Selected> select(const std::string& which, const std::vector<std::string>& plugins, bool default_plugin,
                             const IsolationOptions* isolation);

// The isolation a command's options ask for; `--timeout` without isolation cannot be enforced.
IsolationOptions isolation_from(bool no_isolation, double timeout, double load_timeout, const char* command);

}  // namespace flashcheck::cli
