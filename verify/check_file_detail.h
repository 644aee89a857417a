// Helpers the readers of a `check` file share (verify/check_file_read.cpp for the forward's
// tensors, verify/check_file_gradients.cpp for the backward's): every refusal names the tensor, its
// shape and, for a non-finite value, where it lies in the file's own indexing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "reference/storage.h"
#include "verify/safetensors.h"

namespace flashcheck::check_file_detail {

std::string shape_str(const std::vector<int64_t>& s);
const StTensor* find(const SafetensorsFile& f, const std::string& name);
// Throws CannotTest: "tensor 'name' has shape [..], expected [..] (what)".
void expect_shape(const std::string& name, const StTensor& t, const std::vector<int64_t>& want, const std::string& what);
// Where logical element `e` of tensor t lies in the file's tensor, as an index list of its shape.
std::string file_position(const Problem& p, const Storage& st, Tensor t, int64_t e, const std::vector<int64_t>& shape);
// Throws CannotTest at the first NaN/Inf of x (logical layout of t), naming "input 't'" or, when
// `name` is given, "tensor 'name'", and its position in the file, unless there is none.
void refuse_nonfinite(const Problem& p, const Storage& st, Tensor t, const std::vector<float>& x,
                      const std::vector<int64_t>& shape, const std::string& name);
// That refusal for the element at `at` (NaN or Inf).
[[noreturn]] void refuse_nonfinite_at(const Problem& p, const Storage& st, Tensor t, int64_t at, bool nan,
                                      const std::vector<int64_t>& shape, const std::string& name);

}  // namespace flashcheck::check_file_detail
