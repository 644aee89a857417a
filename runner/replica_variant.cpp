// The blocked replica as a variant: the CPU stand-in that lets campaigns run on machines without a
// GPU, and the kernel-numerics reference the GPU variants are compared with.
#include <cstring>
#include <optional>
#include <string>

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
  // The replica computes every variant from the logical layout (reference/sequences.h), but
  // forward() is handed q, k and v only: ALiBi slopes, sinks and fp8 descales do not reach it yet,
  // so problems that need them are refused (skipped, never failed) rather than computed without.
  std::optional<std::string> unsupported(const Problem& p) const override {
    if (auto why = Variant::unsupported(p)) return why;
    if (p.alibi != Alibi::none || p.sinks || p.descale != Descale::none)
      return "ALiBi slopes, sinks and fp8 descales are not passed to forward() yet";
    return std::nullopt;
  }
  void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
               void*) const override {
    Inputs in{widen(p, q, p.q_elems()), widen(p, k, p.k_elems()), widen(p, v, p.v_elems())};
    // Every row of every sequence: the result is in the logical layout (BHSD for dense problems).
    ReplicaResult r = replica_attention(logical(p), in, cfg_);
    encode(p.o_dtype(), r.o.data(), static_cast<int64_t>(r.o.size()), o);
    std::memcpy(lse, r.lse.data(), r.lse.size() * sizeof(float));
  }

 private:
  // The buffers forward() is handed are in the logical layout (reference/sequences.h): a paged
  // cache arrives already gathered, with no block table, so the replica computes the same keys as
  // the contiguous cache they are (bitwise the same result: ReplicaVariants.PagedWithAnIdentity...).
  static Problem logical(Problem p) {
    if (!p.paged()) return p;
    if (p.seqlens_q.empty()) p.seqlens_q.assign(static_cast<size_t>(p.batch), p.seq_q);
    p.layout = Layout::thd;
    p.page_size = 0;
    p.page_order = PageOrder::identity;
    return p;
  }
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
