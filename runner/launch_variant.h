// A kernel registered in the kernels layer, as a variant: its declared capabilities plus its launch.
#pragma once
#include <string>

#include "gpu/kernel.h"
#include "runner/registry.h"

namespace flashcheck {

class KernelVariant final : public Variant {
 public:
  explicit KernelVariant(KernelDef def) : def_(std::move(def)) {}
  std::string name() const override { return def_.name; }
  const Capabilities& caps() const override { return def_.caps; }
  void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
               void* stream) const override {
    def_.launch(p, q, k, v, o, lse, stream);
  }

 private:
  KernelDef def_;
};

}  // namespace flashcheck
