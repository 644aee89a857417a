// What the reliability tests share: isolation options pointing at the built flashcheck binary, the
// hostile kernels, and fresh random cases from the run's seed.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "runner/campaign.h"
#include "runner/isolation.h"
#include "runner/registry.h"

namespace flashcheck {

inline IsolationOptions isolated(double timeout_s = 20) {
  IsolationOptions o;
  o.enabled = true;
  o.worker_exe = FLASHCHECK_BINARY;
  o.timeout_s = timeout_s;
  return o;
}

// Loaded in this process (only for kernels whose library behaves while loading).
inline std::shared_ptr<Variant> kernel_of(const std::string& lib, const std::string& name) {
  for (auto& v : load_plugin(lib))
    if (v->name() == name) return v;
  ADD_FAILURE() << "no kernel " << name << " in " << lib;
  return nullptr;
}

inline std::shared_ptr<Variant> hostile(const std::string& name) { return kernel_of(FLASHCHECK_HOSTILE_PLUGINS, name); }

// A fresh random case the example kernel supports (f32 or bf16, small), from this run's seed and
// the salt (defined in reliability_test.cpp, beside the seed it draws from).
Case random_case(uint64_t salt);

}  // namespace flashcheck
