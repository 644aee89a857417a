// safetensors reading and writing, implemented once for the whole project and strict about the
// format: https://github.com/huggingface/safetensors (8-byte little-endian header length, JSON
// header, then a byte buffer every tensor indexes without holes or overlaps).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/dtype.h"

namespace flashcheck {

// Any malformed or unreadable file: the message names the problem (and the tensor, if any).
// Reading is strict (https://github.com/huggingface/safetensors, "Format"): the header is one JSON
// object with no duplicate key at any level and nothing after it but 0x20 padding; the data buffer
// is covered exactly by the tensors; only regular files are opened, and the file's size is checked
// against the header before the payload is read.
struct SafetensorsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, U16, U32, U64, F8_E4M3, F8_E5M2 };
std::string to_string(StDType d);
int st_dtype_bytes(StDType d);

struct StTensor {
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // raw little-endian bytes

  int64_t numel() const;
  // Widen F32/F16/BF16 and the fp8 formats F8_E4M3/F8_E5M2 (exactly) to fp32; throws
  // SafetensorsError for other dtypes.
  std::vector<float> to_f32(const std::string& name) const;
  // The values of an I32 or I64 tensor (index tensors: cu_seqlens, block tables); throws
  // SafetensorsError naming the tensor for any other dtype.
  std::vector<int64_t> to_i64(const std::string& name) const;
};

struct SafetensorsFile {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// A file that changes while it is read (rewritten in place, replaced by a rename, resized) is
// refused naming what changed, never returned half old and half new. `after_header`, for tests,
// runs once the header is read and before the payload is: where a concurrent rewrite lands.
SafetensorsFile read_safetensors(const std::filesystem::path& path, const std::function<void()>& after_header = {});
// The whole of a regular file (stat first: a FIFO, directory or device is refused, never opened for
// a blocking read), as long as it is at most `max_bytes`. Throws SafetensorsError.
std::vector<uint8_t> read_regular_file(const std::filesystem::path& path, uint64_t max_bytes = UINT64_MAX);
SafetensorsFile parse_safetensors(const std::vector<uint8_t>& bytes);
std::vector<uint8_t> serialize_safetensors(const SafetensorsFile& f);
// Atomic: writes a temporary file beside `path`, flushes it, then renames it into place.
void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& f);
void write_file_atomic(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);

// Helpers: a tensor of `dtype` from fp32 values (rounded to nearest even), and DType mapping.
StTensor make_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<float>& values);
StTensor make_f32_tensor(std::vector<int64_t> shape, const std::vector<float>& values);
// An I32 or I64 tensor; throws SafetensorsError for another dtype or a value that does not fit it.
StTensor make_int_tensor(StDType dtype, std::vector<int64_t> shape, const std::vector<int64_t>& values);
StDType to_st(DType d);
// The element type flashcheck computes with for a float dtype of a file (F32, F16, BF16, F8_E4M3,
// F8_E5M2); nullopt for any other (integers, F64, BOOL).
std::optional<DType> from_st(StDType d);

}  // namespace flashcheck
