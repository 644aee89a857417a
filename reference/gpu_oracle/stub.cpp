// The GPU oracle in a build without CUDA: it says why it cannot run, and runs nothing.
#include <stdexcept>
#include <utility>

#include "reference/gpu_oracle.h"
#include "reference/gpu_oracle/detail.h"

namespace flashcheck {

std::optional<std::string> gpu_oracle_unavailable() {
  return std::string("flashcheck was built without CUDA (no nvcc found at configure time, or FLASHCHECK_CUDA=OFF)");
}

OracleResult naive_attention_gpu(const Problem&, const Inputs&, const RowSet&, const DeviceInputs*) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

OracleResult naive_attention_gpu(const Problem&, const Inputs&, std::span<const int64_t>) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

std::vector<float> dtype_baseline_gpu(const Problem&, const Inputs&, const RowSet&, const DeviceInputs*) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

std::vector<float> dtype_baseline_gpu(const Problem&, const Inputs&, std::span<const int64_t>) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

DeviceArray::DeviceArray(size_t) { throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable()); }
DeviceArray::~DeviceArray() = default;
DeviceArray& DeviceArray::operator=(DeviceArray&& o) noexcept {
  std::swap(p_, o.p_);
  std::swap(bytes_, o.bytes_);
  return *this;
}
void DeviceArray::upload(const void*, size_t, size_t) { throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable()); }
void DeviceArray::upload_beside(const void*, size_t, size_t) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}
void DeviceArray::download(void*, size_t, size_t) const {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

ResidentOracle naive_attention_gpu_resident(const Problem&, const Inputs&, const RowSet&, const DeviceInputs*) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

DeviceArray dtype_baseline_gpu_resident(const Problem&, const Inputs&, const RowSet&, const DeviceInputs*) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

DeviceInputs upload_device_inputs(DType, std::span<const uint16_t>, std::span<const uint16_t>, std::span<const uint16_t>) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}
DeviceInputs upload_device_inputs(const Problem&, const Inputs&) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}
int64_t first_nonfinite(const DeviceArray&, DType, int64_t) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}
std::vector<double> row_norms(const DeviceArray&, DType, int64_t, int64_t) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

BackwardResult naive_attention_backward_gpu(const Problem&, const Inputs&, std::span<const float>) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

std::optional<std::string> gpu_replicas_not_covered(const Problem&, std::span<const ReplicaPipeline>) {
  return std::string("flashcheck was built without CUDA");
}

std::optional<std::vector<ReplicaPipelineResult>> backward_baselines_gpu(const Problem&, const Inputs&,
                                                                         std::span<const float>,
                                                                         std::span<const ReplicaPipeline>) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

std::optional<ReplicaResult> replica_attention_gpu(const Problem&, const Inputs&, const ReplicaConfig&) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

std::optional<ReplicaGradients> replica_attention_backward_gpu(const Problem&, const Inputs&, std::span<const float>,
                                                               std::span<const float>, std::span<const float>,
                                                               const BackwardReplicaConfig&) {
  throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable());
}

namespace gpu_oracle_detail {
Timing last_timing() { return {}; }
void set_memory_budget(int64_t) {}
int64_t free_device_bytes() { return 0; }
Ceilings measure_ceilings() { throw std::runtime_error("GPU oracle unavailable: " + *gpu_oracle_unavailable()); }
}  // namespace gpu_oracle_detail

}  // namespace flashcheck
