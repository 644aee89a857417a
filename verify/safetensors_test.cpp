#include "verify/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

namespace flashcheck {
namespace {

SafetensorsFile sample() {
  SafetensorsFile f;
  f.tensors["a"] = make_tensor(DType::bf16, {2, 3}, {1, 2, 3, 4, 5, 6.5f});
  f.tensors["b"] = make_f32_tensor({4}, {0.1f, -2, 3e30f, -0.0f});
  f.metadata["causal"] = "bottom_right";
  return f;
}

// A file with a hand-written header, for the malformed cases.
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes, uint64_t claimed_len = 0) {
  std::vector<uint8_t> out(8);
  uint64_t n = claimed_len ? claimed_len : header.size();
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& fragment) {
  try {
    parse_safetensors(bytes);
    FAIL() << "accepted a malformed file (wanted: " << fragment << ")";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  auto bytes = serialize_safetensors(sample());
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data(), 8);
  EXPECT_EQ((8 + hlen) % 8, 0u);  // header padded so the data buffer is 8-byte aligned
  SafetensorsFile g = parse_safetensors(bytes);
  EXPECT_EQ(g.metadata.at("causal"), "bottom_right");
  EXPECT_EQ(g.tensors.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(g.tensors.at("a").to_f32("a"), (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  auto b = g.tensors.at("b").to_f32("b");
  EXPECT_EQ(b[2], 3e30f);
  EXPECT_TRUE(std::signbit(b[3]));
  EXPECT_EQ(serialize_safetensors(g), bytes);  // reproducible bytes
}

TEST(Safetensors, WritesAtomicallyAndReadsBack) {
  auto path = std::filesystem::temp_directory_path() / "fc_st_test.safetensors";
  write_safetensors(path, sample());
  EXPECT_EQ(read_safetensors(path).tensors.size(), 2u);
  for (auto& e : std::filesystem::directory_iterator(path.parent_path()))
    EXPECT_EQ(e.path().string().find("fc_st_test.safetensors.tmp"), std::string::npos);
  std::filesystem::remove(path);
  EXPECT_THROW(read_safetensors(path), SafetensorsError);
}

TEST(Safetensors, RejectsEveryMalformation) {
  expect_error({1, 2, 3}, "too short");
  expect_error(raw("{}", 0, 1000), "truncated");
  expect_error(raw("{}", 0, uint64_t{1} << 40), "100 MB");
  expect_error(raw("[1]", 0), "does not start with '{'");
  expect_error(raw("{\"a\": ", 0), "not valid JSON");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "past the data buffer");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "does not match shape");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
               "overlaps");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "hole");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), "trailing");
  expect_error(raw(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4), "unknown dtype");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8), "begin > end");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}})", 4), "overflow");
  expect_error(raw(R"({"__metadata__":{"x":1}})", 0), "not a string");
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "data_offsets");
}

TEST(Safetensors, WideningRefusesIntegerTensors) {
  StTensor t{StDType::I32, {1}, {0, 0, 0, 0}};
  EXPECT_THROW(t.to_f32("t"), SafetensorsError);
}

}  // namespace
}  // namespace flashcheck
