// A kernel registered in the kernels layer, as a variant: its declared capabilities plus its launch.
#pragma once
#include <stdexcept>
#include <string>

#include "gpu/kernel.h"
#include "runner/registry.h"

namespace flashcheck {

class KernelVariant final : public Variant {
 public:
  explicit KernelVariant(KernelDef def) : def_(std::move(def)) {}
  std::string name() const override { return def_.name; }
  const Capabilities& caps() const override { return def_.caps; }
  // A kernel of problem model 1 (a `launch`, no `launch2`) takes contiguous BHSD pointers: only
  // plain problems can be handed to it, whatever its capabilities say.
  std::optional<std::string> unsupported(const Problem& p) const override {
    if (!def_.launch2 && !p.plain()) {
      if (auto why = Variant::unsupported(p)) return why;
      return "not plain attention (the kernel has no launch2 for problem model 2)";
    }
    return Variant::unsupported(p);
  }
  void forward(const Problem& p, const KernelArgs& a) const override {
    if (def_.launch2) {
      Problem handed = p;
      handed.window = window_in(p.window, def_.caps.window_convention);
      def_.launch2(handed, a);
      return;
    }
    // The staging is contiguous BHSD for a plain problem: exactly what `launch` indexes.
    if (!p.plain()) throw std::logic_error("kernel '" + def_.name + "' was handed a problem beyond plain attention");
    def_.launch(p, a.q.data, a.k.data, a.v.data, a.o.data, static_cast<float*>(a.lse.data), a.stream);
  }
  const BackwardCaps* backward_caps() const override { return def_.backward ? &def_.backward_caps : nullptr; }
  void backward(const Problem& p, const KernelArgs& a, const BackwardArgs& g) const override {
    if (!def_.backward) return Variant::backward(p, a, g);
    Problem handed = p;  // the window in the kernel's convention, as its forward is handed it
    handed.window = window_in(p.window, def_.caps.window_convention);
    def_.backward(handed, a, g);
  }

 private:
  KernelDef def_;
};

}  // namespace flashcheck
