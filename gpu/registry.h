// Every kernel flashcheck can validate, built in or loaded from a plugin, behind one interface.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reference/problem.h"
#include "verify/verdict.h"

namespace flashcheck {

enum class Memory { host, device };
enum class LseBase { e, two, none };

// What a variant declares it can do. `supports` answers from this (plus any extra limit a variant
// adds); the campaign draws problems from the declared space so few cases are wasted.
struct Capabilities {
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  std::vector<int64_t> head_dims{16, 32, 40, 64, 80, 96, 128, 192, 256};  // Dqk (and Dv) values accepted
  bool dv_ne_dqk = true;  // Dv may differ from Dqk (Dv ≤ Dqk)
  std::vector<Causal> causals{Causal::none, Causal::top_left, Causal::bottom_right};
  bool gqa = true;
  int64_t max_seq = int64_t{1} << 31;
  LseBase lse_base = LseBase::e;
  EmptyRowLse empty_lse = EmptyRowLse::neg_inf;
  Memory memory = Memory::host;
  // The variant's tiles, for naming the tile of a failing element.
  int64_t tile_q = 128, tile_kv = 128;
};

class Variant {
 public:
  virtual ~Variant() = default;
  virtual std::string name() const = 0;
  virtual const Capabilities& caps() const = 0;
  // Empty if supported, else why not (counted as skipped, never failed).
  virtual std::optional<std::string> unsupported(const Problem& p) const;
  // Why the variant cannot run on this machine at all (device variants without a GPU), or empty.
  virtual std::optional<std::string> unavailable() const;
  // Computes o (and lse if the variant has one) from buffers in the declared memory and dtype.
  // Throws std::runtime_error on any kernel or CUDA error.
  virtual void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                       void* stream) const = 0;
};

class Registry {
 public:
  static Registry& builtin();  // every built-in variant, registered in gpu/variants.cpp
  void add(std::shared_ptr<Variant> v);
  const std::vector<std::shared_ptr<Variant>>& all() const { return variants_; }
  std::shared_ptr<Variant> find(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<Variant>> variants_;
};

// Loads every kernel a plugin library exports; throws std::runtime_error naming what is wrong.
std::vector<std::shared_ptr<Variant>> load_plugin(const std::string& path);

}  // namespace flashcheck
