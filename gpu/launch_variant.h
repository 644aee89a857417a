// A built-in kernel as a variant: its declared capabilities plus one launch function. Every CUDA
// variant is one of these; its folder supplies the capabilities and the launch.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "gpu/registry.h"

namespace flashcheck {

class LaunchVariant final : public Variant {
 public:
  using Launch = std::function<void(const Problem&, const void* q, const void* k, const void* v, void* o, float* lse,
                                    void* stream)>;
  LaunchVariant(std::string name, Capabilities caps, Launch launch)
      : name_(std::move(name)), caps_(std::move(caps)), launch_(std::move(launch)) {}
  std::string name() const override { return name_; }
  const Capabilities& caps() const override { return caps_; }
  void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
               void* stream) const override {
    launch_(p, q, k, v, o, lse, stream);
  }

 private:
  std::string name_;
  Capabilities caps_;
  Launch launch_;
};

}  // namespace flashcheck
