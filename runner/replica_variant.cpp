// The blocked replica as a variant: the CPU stand-in that lets campaigns run on machines without a
// GPU, and the kernel-numerics reference the GPU variants are compared with.
#include <cstring>

#include "reference/replica.h"
#include "runner/registry.h"

namespace flashcheck {

namespace {
class ReplicaVariant final : public Variant {
 public:
  ReplicaVariant() {
    caps_.memory = Memory::host;
    caps_.tiles = {{0, cfg_.block_q, cfg_.block_kv}};
    caps_.numerics = {.use_exp2 = cfg_.use_exp2, .round_p = cfg_.round_p};
    cfg_.finite_neg_inf = false;  // -2^30 loses rows whose scores are all below it (see replica_test)
  }
  std::string name() const override { return "replica"; }
  const Capabilities& caps() const override { return caps_; }
  void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
               void*) const override {
    Inputs in{widen(p, q, p.q_elems()), widen(p, k, p.k_elems()), widen(p, v, p.v_elems())};
    ReplicaResult r = replica_attention(p, in, cfg_);
    encode(p.dtype, r.o.data(), static_cast<int64_t>(r.o.size()), o);
    std::memcpy(lse, r.lse.data(), r.lse.size() * sizeof(float));
  }

 private:
  static std::vector<float> widen(const Problem& p, const void* src, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    decode(p.dtype, src, n, out.data());
    return out;
  }
  Capabilities caps_;
  ReplicaConfig cfg_;
};
}  // namespace

std::shared_ptr<Variant> make_replica_variant() { return std::make_shared<ReplicaVariant>(); }

}  // namespace flashcheck
