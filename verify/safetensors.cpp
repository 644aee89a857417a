#include "verify/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <bit>
static_assert(std::endian::native == std::endian::little, "safetensors bytes are little-endian; this host is not");

namespace flashcheck {

namespace {
struct DTypeInfo {
  StDType d;
  const char* name;
  int bytes;
};
constexpr DTypeInfo kDTypes[] = {{StDType::F64, "F64", 8},  {StDType::F32, "F32", 4},   {StDType::F16, "F16", 2},
                                 {StDType::BF16, "BF16", 2}, {StDType::I64, "I64", 8},   {StDType::I32, "I32", 4},
                                 {StDType::I16, "I16", 2},   {StDType::I8, "I8", 1},     {StDType::U8, "U8", 1},
                                 {StDType::BOOL, "BOOL", 1}, {StDType::U16, "U16", 2},   {StDType::U32, "U32", 4},
                                 {StDType::U64, "U64", 8},   {StDType::F8_E4M3, "F8_E4M3", 1},
                                 {StDType::F8_E5M2, "F8_E5M2", 1}};
// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeader = 100'000'000;
}  // namespace

std::string to_string(StDType d) {
  for (auto& i : kDTypes)
    if (i.d == d) return i.name;
  return "?";
}
int st_dtype_bytes(StDType d) {
  for (auto& i : kDTypes)
    if (i.d == d) return i.bytes;
  return 0;
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<float> StTensor::to_f32(const std::string& name) const {
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  switch (dtype) {
    case StDType::F32: decode(DType::f32, data.data(), n, out.data()); break;
    case StDType::F16: decode(DType::f16, data.data(), n, out.data()); break;
    case StDType::BF16: decode(DType::bf16, data.data(), n, out.data()); break;
    default:
      throw SafetensorsError("tensor '" + name + "' has dtype " + to_string(dtype) + "; expected F32, F16 or BF16");
  }
  return out;
}

SafetensorsFile parse_safetensors(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 8) throw SafetensorsError("file is " + std::to_string(bytes.size()) + " bytes: too short for the 8-byte header length");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | bytes[static_cast<size_t>(i)];
  if (hlen > kMaxHeader) throw SafetensorsError("header length " + std::to_string(hlen) + " exceeds the 100 MB limit");
  if (hlen > bytes.size() - 8)
    throw SafetensorsError("truncated file: header claims " + std::to_string(hlen) + " bytes, only " +
                           std::to_string(bytes.size() - 8) + " follow");
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<size_t>(hlen));
  if (header.empty() || header[0] != '{') throw SafetensorsError("header does not start with '{'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::parse_error& e) {
    throw SafetensorsError(std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw SafetensorsError("header is not a JSON object");
  const uint64_t buf_size = bytes.size() - 8 - hlen;
  const uint8_t* buf = bytes.data() + 8 + hlen;

  SafetensorsFile f;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::string> names;
  for (auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw SafetensorsError("__metadata__ is not an object");
      for (auto& [k, s] : v.items()) {
        if (!s.is_string()) throw SafetensorsError("__metadata__ value for '" + k + "' is not a string");
        f.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) { return SafetensorsError("tensor '" + name + "': " + why); };
    if (!v.is_object()) throw bad("entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw bad("missing or non-string dtype");
    if (!v.contains("shape") || !v["shape"].is_array()) throw bad("missing or non-array shape");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw bad("data_offsets must be an array of two integers");
    for (auto& [k, _] : v.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets") throw bad("unknown field '" + k + "'");
    StTensor t;
    const std::string dt = v["dtype"].get<std::string>();
    const DTypeInfo* info = nullptr;
    for (auto& i : kDTypes)
      if (dt == i.name) info = &i;
    if (!info) throw bad("unknown dtype '" + dt + "'");
    t.dtype = info->d;
    uint64_t n = 1;
    for (auto& s : v["shape"]) {
      if (!s.is_number_unsigned()) throw bad("shape entries must be non-negative integers");
      uint64_t d = s.get<uint64_t>();
      if (d > (uint64_t{1} << 62) || __builtin_mul_overflow(n, d, &n)) throw bad("shape overflows");
      t.shape.push_back(static_cast<int64_t>(d));
    }
    auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) throw bad("data_offsets must be non-negative integers");
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) throw bad("data_offsets begin > end");
    if (e > buf_size)
      throw bad("data_offsets end " + std::to_string(e) + " is past the data buffer (" + std::to_string(buf_size) +
                " bytes): truncated file?");
    uint64_t want;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(info->bytes), &want) || want != e - b)
      throw bad("byte size " + std::to_string(e - b) + " does not match shape × dtype size");
    t.data.assign(buf + b, buf + e);
    ranges.emplace_back(b, e);
    names.push_back(name);
    f.tensors.emplace(name, std::move(t));
  }
  // The buffer must be covered exactly: sorted ranges abut, start at 0 and end at the file's end.
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  uint64_t pos = 0;
  for (size_t i : order) {
    if (ranges[i].first < pos) throw SafetensorsError("tensor '" + names[i] + "' overlaps another tensor's bytes");
    if (ranges[i].first > pos) throw SafetensorsError("hole in the data buffer before tensor '" + names[i] + "'");
    pos = ranges[i].second;
  }
  if (pos != buf_size)
    throw SafetensorsError(std::to_string(buf_size - pos) + " trailing bytes after the last tensor");
  return f;
}

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  std::ifstream is(path, std::ios::binary);
  if (!is) throw SafetensorsError("cannot open '" + path.string() + "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
  if (is.bad()) throw SafetensorsError("cannot read '" + path.string() + "'");
  try {
    return parse_safetensors(bytes);
  } catch (const SafetensorsError& e) {
    throw SafetensorsError(path.string() + ": " + e.what());
  }
}

std::vector<uint8_t> serialize_safetensors(const SafetensorsFile& f) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!f.metadata.empty()) h["__metadata__"] = f.metadata;
  uint64_t off = 0;
  for (auto& [name, t] : f.tensors) {  // std::map: sorted names, so the bytes are reproducible
    if (static_cast<int64_t>(t.data.size()) != t.numel() * st_dtype_bytes(t.dtype))
      throw SafetensorsError("tensor '" + name + "': data size does not match its shape");
    h[name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
    off += t.data.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // pad so the buffer starts 8-byte aligned
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (auto& [_, t] : f.tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

void write_file_atomic(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) throw SafetensorsError("cannot create '" + tmp.string() + "'");
    os.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    os.flush();
    if (!os) {
      std::filesystem::remove(tmp);
      throw SafetensorsError("cannot write '" + tmp.string() + "'");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    throw SafetensorsError("cannot rename into '" + path.string() + "': " + ec.message());
  }
}

void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& f) {
  write_file_atomic(path, serialize_safetensors(f));
}

StDType to_st(DType d) {
  switch (d) {
    case DType::f32: return StDType::F32;
    case DType::f16: return StDType::F16;
    case DType::bf16: return StDType::BF16;
  }
  return StDType::F32;
}

StTensor make_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<float>& values) {
  StTensor t;
  t.dtype = to_st(dtype);
  t.shape = std::move(shape);
  if (t.numel() != static_cast<int64_t>(values.size())) throw SafetensorsError("make_tensor: shape does not match values");
  t.data.resize(values.size() * static_cast<size_t>(dtype_bytes(dtype)));
  encode(dtype, values.data(), static_cast<int64_t>(values.size()), t.data.data());
  return t;
}

StTensor make_f32_tensor(std::vector<int64_t> shape, const std::vector<float>& values) {
  return make_tensor(DType::f32, std::move(shape), values);
}

}  // namespace flashcheck
