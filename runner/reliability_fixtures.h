// What the reliability tests share: isolation options pointing at the built flashcheck binary, the
// hostile kernels, and fresh random cases from the run's seed.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "runner/campaign.h"
#include "runner/isolation.h"
#include "runner/registry.h"
#include "testing/test_seed.h"

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

// A fresh random case the example kernel supports (f32 or bf16, small), from this run's seed.
inline Case random_case(uint64_t salt) {
  std::mt19937_64 g(flashcheck::testing::seed_for(salt));
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); };
  Problem p;
  p.batch = pick(1, 2);
  p.heads_kv = pick(1, 2);
  p.heads_q = p.heads_kv * pick(1, 2);
  p.seq_q = pick(1, 70);
  p.seq_kv = pick(1, 70);
  p.head_dim_qk = p.head_dim_v = 8 * pick(1, 8);
  p.causal = static_cast<Causal>(pick(0, 2));
  p.dtype = pick(0, 1) ? DType::f32 : DType::bf16;
  return Case{p, Dist::normal, g()};
}

}  // namespace flashcheck
