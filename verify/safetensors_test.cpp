#include "verify/safetensors.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "testing/test_seed.h"

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

TEST(Safetensors, ReadsTensorsOfManyPiecesByteForByte) {
  // The payload is read in 64 MiB pieces spread over threads: tensors that span several pieces,
  // end mid-piece and follow one another must come back exactly, each in its own buffer.
  const uint64_t seed = testing::seed_for(1707);
  std::mt19937_64 g(seed);
  SafetensorsFile f;
  for (auto [name, n] : {std::pair{"first", (int64_t{70} << 20) + 3}, {"second", int64_t{5}}, {"third", (int64_t{33} << 20) + 1}}) {
    StTensor t;
    t.dtype = StDType::U8;
    t.shape = {n};
    t.data.resize(static_cast<size_t>(n));
    for (size_t i = 0; i < t.data.size(); i += 8) {
      const uint64_t r = g();
      std::memcpy(t.data.data() + i, &r, std::min<size_t>(8, t.data.size() - i));
    }
    f.tensors[name] = std::move(t);
  }
  const auto path = std::filesystem::temp_directory_path() / ("fc_st_pieces_" + std::to_string(seed) + ".safetensors");
  write_safetensors(path, f);
  const SafetensorsFile back = read_safetensors(path);
  std::filesystem::remove(path);
  for (const auto& [name, t] : f.tensors) EXPECT_TRUE(back.tensors.at(name).data == t.data) << name << ", seed " << seed;
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

// fp8 inputs (problem model 2) travel as F8_E4M3 / F8_E5M2: every value representable in the
// format comes back exactly, through the bytes a writer in any language would produce.
TEST(Safetensors, Fp8TensorsRoundTripExactly) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(571));
  std::normal_distribution<float> normal(0.f, 30.f);
  for (DType d : {DType::e4m3, DType::e5m2}) {
    std::vector<float> x(257);
    for (float& v : x) v = round_to(d, std::clamp(normal(gen), -440.f, 440.f));
    const StTensor t = make_tensor(d, {257}, x);
    EXPECT_EQ(t.dtype, d == DType::e4m3 ? StDType::F8_E4M3 : StDType::F8_E5M2);
    EXPECT_EQ(t.data.size(), x.size());  // one byte per element
    SafetensorsFile f;
    f.tensors["x"] = t;
    const SafetensorsFile g = parse_safetensors(serialize_safetensors(f));
    EXPECT_EQ(g.tensors.at("x").to_f32("x"), x) << to_string(d);
    EXPECT_EQ(from_st(g.tensors.at("x").dtype), d);
  }
  EXPECT_EQ(from_st(StDType::I32), std::nullopt);
  EXPECT_EQ(from_st(StDType::F64), std::nullopt);
}

// Index tensors (cu_seqlens, block tables, cache lengths) are I32 or I64, read back as int64.
TEST(Safetensors, IntegerTensorsRoundTrip) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(572));
  for (StDType d : {StDType::I32, StDType::I64}) {
    const int64_t lim = d == StDType::I32 ? INT32_MAX : INT64_MAX;
    std::uniform_int_distribution<int64_t> pick(-lim, lim);
    std::vector<int64_t> x(37);
    for (auto& v : x) v = pick(gen);
    x[0] = d == StDType::I32 ? INT32_MIN : INT64_MIN;
    SafetensorsFile f;
    f.tensors["t"] = make_int_tensor(d, {37}, x);
    const SafetensorsFile g = parse_safetensors(serialize_safetensors(f));
    EXPECT_EQ(g.tensors.at("t").dtype, d);
    EXPECT_EQ(g.tensors.at("t").to_i64("t"), x);
    EXPECT_THROW(g.tensors.at("t").to_f32("t"), SafetensorsError);
  }
  EXPECT_THROW(make_int_tensor(StDType::I32, {1}, {int64_t{1} << 31}), SafetensorsError);
  EXPECT_THROW(make_int_tensor(StDType::F32, {1}, {1}), SafetensorsError);
  try {
    make_f32_tensor({1}, {1.f}).to_i64("cu_seqlens_q");
    ADD_FAILURE() << "an F32 tensor was read as integers";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("'cu_seqlens_q' has dtype F32; expected I32 or I64"), std::string::npos) << e.what();
  }
}

// A fresh folder per test (tests of one binary may run in parallel under ctest).
std::filesystem::path scratch(const std::string& what) {
  auto dir = std::filesystem::temp_directory_path() /
             ("fc_st_" + what + "_" + std::to_string(::getpid()) + "_" + std::to_string(flashcheck::testing::seed_for(0) % 100000));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void put(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream os(p, std::ios::binary | std::ios::trunc);
  os.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(os.good()) << p;
}

std::string read_error(const std::filesystem::path& p) {
  try {
    read_safetensors(p);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

// One hostile file and what the reader must say about it ("" = it is valid and must be accepted).
struct Hostile {
  std::string label;
  std::vector<uint8_t> bytes;
  std::string expect;
};

std::vector<Hostile> hostile_corpus() {
  const std::string a4 = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  std::vector<Hostile> c = {
      // The rules the reader always had.
      {"3 bytes", {1, 2, 3}, "too short"},
      {"empty file", {}, "too short"},
      {"header longer than the file", raw("{}", 0, 1000), "truncated"},
      {"header over 100 MB", raw("{}", 0, uint64_t{1} << 40), "100 MB"},
      {"header length 2^64-1", raw("{}", 0, ~uint64_t{0}), "100 MB"},
      {"empty header", raw("", 0), "does not start with '{'"},
      {"array header", raw("[1]", 0), "does not start with '{'"},
      {"UTF-8 BOM before the header", raw("\xEF\xBB\xBF{}", 0), "does not start with '{'"},
      {"unterminated JSON", raw("{\"a\": ", 0), "not valid JSON"},
      {"JSON comment", raw("{/* c */}", 0), "not valid JSON"},
      {"invalid UTF-8 key", raw("{\"\xff\":1}", 0), "not valid JSON"},
      {"raw control character in a string", raw("{\"__metadata__\":{\"a\":\"x\x01y\"}}", 0), "not valid JSON"},
      {"data past the buffer", raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "past the data buffer"},
      {"4 GB tensor over 16 bytes", raw(R"({"a":{"dtype":"F32","shape":[1073741824],"data_offsets":[0,4294967296]}})", 16),
       "past the data buffer"},
      {"size disagrees with shape", raw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "does not match shape"},
      {"overlap", raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "overlaps"},
      {"hole", raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "hole"},
      {"trailing payload", raw("{" + a4 + "}", 8), "trailing"},
      {"bytes but no tensors", raw("{}", 1), "trailing"},
      {"unknown dtype", raw(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4), "unknown dtype"},
      {"lower-case dtype", raw(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4), "unknown dtype"},
      {"negative dim", raw(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative"},
      {"fractional dim", raw(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4), "non-negative"},
      {"string dim", raw(R"({"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4), "non-negative"},
      {"begin > end", raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8), "begin > end"},
      {"shape overflow", raw(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}})", 4), "overflow"},
      {"offset beyond 2^64", raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551620]}})", 4),
       "non-negative integers"},
      {"three offsets", raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4), "two integers"},
      {"no offsets", raw(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "data_offsets"},
      {"no dtype", raw(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "dtype"},
      {"shape not an array", raw(R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4), "shape"},
      {"extra tensor field", raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"stride":[1]}})", 4), "unknown field 'stride'"},
      {"entry not an object", raw(R"({"a":[1]})", 0), "not an object"},
      {"metadata value not a string", raw(R"({"__metadata__":{"x":1}})", 0), "not a string"},
      {"metadata not an object", raw(R"({"__metadata__":"x"})", 0), "__metadata__ is not an object"},
      // Nothing after the JSON object but space padding.
      {"NUL then garbage", raw("{" + a4 + "}" + std::string("\0garbage", 8), 4), "NUL byte at offset"},
      {"NUL padding", raw("{" + a4 + "}" + std::string(6, '\0'), 4), "NUL byte"},
      {"NUL inside the object", raw(std::string("{\"a\"\0:1}", 8), 0), "NUL byte at offset 4"},
      {"trailing garbage", raw("{" + a4 + "}xyz", 4), "not valid JSON"},
      {"a second object", raw("{" + a4 + "}{}", 4), "not valid JSON"},
      {"trailing newline", raw("{" + a4 + "}\n", 4), "not space (0x20) padding"},
      {"trailing tab and spaces", raw("{" + a4 + "}  \t  ", 4), "not space (0x20) padding"},
      // Duplicate keys at every level: nlohmann would keep the last silently.
      {"duplicate tensor", raw("{" + a4 + "," + a4 + "}", 4), "duplicate JSON key 'a' at the top level"},
      {"duplicate metadata key", raw(R"({"__metadata__":{"causal":"none","causal":"top_left"}})", 0),
       "duplicate JSON key 'causal' in '__metadata__'"},
      {"duplicate escaped metadata key", raw(R"({"__metadata__":{"causal":"none","\u0063ausal":"top_left"}})", 0),
       "duplicate JSON key 'causal' in '__metadata__'"},
      {"duplicate __metadata__", raw(R"({"__metadata__":{"a":"1"},"__metadata__":{"b":"2"}})", 0),
       "duplicate JSON key '__metadata__'"},
      {"duplicate dtype", raw(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4),
       "duplicate JSON key 'dtype' in 'a'"},
      {"duplicate key in an object inside an array", raw(R"({"a":[{"x":1,"x":2}]})", 0), "duplicate JSON key 'x' in 'a[]'"},
      // Nesting no safetensors header has.
      {"nested metadata", raw(R"({"__metadata__":{"x":{"y":{"z":"w"}}}})", 0), "nests deeper"},
      {"100000 nested arrays", raw("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", 0), "nests deeper"},
      // Valid files, which must stay readable.
      {"no tensors", raw("{}", 0), ""},
      {"space padding", raw("{" + a4 + "}" + std::string(7, ' '), 4), ""},
      {"pretty-printed header", raw("{\n  \"__metadata__\": {\"format\": \"pt\"},\n  " + a4 + "\n}  ", 4), ""},
      {"zero-element tensor", raw(R"({"a":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}})", 0), ""},
      {"same key in two objects", raw(R"({"__metadata__":{"dtype":"x"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4), ""},
  };
  return c;
}

// Every hostile file, from memory and from disk, gets its own message (the disk path additionally
// checks the file's size before reading the payload, and must agree).
TEST(SafetensorsHostile, EveryFileGetsItsVerdict) {
  const auto dir = scratch("hostile");
  int i = 0;
  for (const Hostile& h : hostile_corpus()) {
    SCOPED_TRACE(h.label);
    const auto path = dir / ("h" + std::to_string(i++) + ".safetensors");
    put(path, h.bytes);
    if (h.expect.empty()) {
      EXPECT_NO_THROW(parse_safetensors(h.bytes));
      EXPECT_EQ(read_error(path), "");
      continue;
    }
    expect_error(h.bytes, h.expect);
    const std::string disk = read_error(path);
    EXPECT_NE(disk.find(h.expect), std::string::npos) << "from disk: '" << disk << "'";
    EXPECT_EQ(disk.rfind(path.string() + ": ", 0), 0u) << "the message names the file: " << disk;
  }
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsHostile, DuplicatesAreRefusedWhereverTheyAre) {
  // A random file made hostile by repeating one of its keys, at a random level.
  std::mt19937_64 gen(flashcheck::testing::seed_for(501));
  SafetensorsFile f;
  std::normal_distribution<float> normal;
  for (const char* n : {"q", "k", "v", "o"}) {
    std::vector<float> x(6);
    for (float& e : x) e = normal(gen);
    f.tensors[n] = make_f32_tensor({2, 3}, x);
  }
  f.metadata = {{"causal", "top_left"}, {"scale", "0.125"}};
  const auto good = serialize_safetensors(f);
  uint64_t hlen;
  std::memcpy(&hlen, good.data(), 8);
  const std::string header(good.begin() + 8, good.begin() + 8 + static_cast<ptrdiff_t>(hlen));
  for (const std::string key : {"\"causal\":", "\"scale\":", "\"q\":", "\"dtype\":", "\"shape\":", "\"data_offsets\":"}) {
    // Repeat the first `"key":value` pair right after itself.
    const size_t at = header.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    size_t end = at + key.size(), depth = 0;
    for (bool in_str = false; end < header.size(); ++end) {
      const char c = header[end];
      if (c == '"') in_str = !in_str;
      if (in_str) continue;
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (depth == 0) break;
        --depth;
      }
      if (c == ',' && depth == 0) break;
    }
    std::string bad = header.substr(0, end) + "," + header.substr(at, end - at) + header.substr(end);
    bad.erase(bad.find_last_not_of(' ') + 1);
    std::vector<uint8_t> bytes(8);
    const uint64_t n = bad.size();
    std::memcpy(bytes.data(), &n, 8);
    bytes.insert(bytes.end(), bad.begin(), bad.end());
    bytes.insert(bytes.end(), good.begin() + 8 + static_cast<ptrdiff_t>(hlen), good.end());
    expect_error(bytes, "duplicate JSON key '" + key.substr(1, key.size() - 3) + "'");
  }
}

TEST(SafetensorsFiles, OnlyRegularFilesAreRead) {
  const auto dir = scratch("kinds");
  EXPECT_NE(read_error(dir).find("is a directory, not a regular file"), std::string::npos) << read_error(dir);
  for (const char* dev : {"/dev/zero", "/dev/null", "/dev/urandom"}) {
    if (!std::filesystem::exists(dev)) continue;
    EXPECT_NE(read_error(dev).find("is a character device, not a regular file"), std::string::npos) << read_error(dev);
    std::error_code ec;
    std::filesystem::create_symlink(dev, dir / "link", ec);
    if (!ec) {
      EXPECT_NE(read_error(dir / "link").find("character device"), std::string::npos) << read_error(dir / "link");
    }
    std::filesystem::remove(dir / "link", ec);
    try {
      read_regular_file(dev);
      ADD_FAILURE() << "read " << dev;
    } catch (const SafetensorsError& e) {
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
  }
  EXPECT_NE(read_error(dir / "absent").find("No such file"), std::string::npos);
  // A symlink to a valid file is read like the file.
  write_safetensors(dir / "good.safetensors", sample());
  std::filesystem::create_symlink(dir / "good.safetensors", dir / "good_link");
  EXPECT_EQ(read_safetensors(dir / "good_link").tensors.size(), 2u);
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsFiles, AFifoIsRefusedWithoutBlocking) {
  const auto dir = scratch("fifo");
  const auto fifo = dir / "pipe.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // A reader that opened the FIFO would block until a writer came: run it on a thread, and if it
  // is still blocked after 10 s, fail and open the write end so the thread can finish.
  std::atomic<bool> done{false};
  std::string message;
  std::thread reader([&] {
    message = read_error(fifo);
    done = true;
  });
  for (int i = 0; i < 1000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!done) {
    ADD_FAILURE() << "read_safetensors blocked on a FIFO";
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  reader.join();
  EXPECT_NE(message.find("is a FIFO (named pipe), not a regular file"), std::string::npos) << message;
  try {
    read_regular_file(fifo);
    ADD_FAILURE() << "read a FIFO";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("FIFO"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsFiles, SizeIsCheckedBeforeThePayloadIsRead) {
  const auto dir = scratch("size");
  // A valid header followed by 64 GiB (a sparse file): reading the payload first would exhaust
  // memory; the size check must refuse it from the header alone.
  auto bytes = serialize_safetensors(sample());
  const auto big = dir / "big.safetensors";
  put(big, bytes);
  std::error_code ec;
  std::filesystem::resize_file(big, uint64_t{1} << 36, ec);
  if (ec) GTEST_SKIP() << "this file system cannot hold a sparse 64 GiB file: " << ec.message();
  const std::string msg = read_error(big);
  EXPECT_NE(msg.find("trailing bytes after the last tensor"), std::string::npos) << msg;
  // And a header promising more than the file holds is refused before any allocation for it.
  const auto small = dir / "small.safetensors";
  put(small, raw(R"({"a":{"dtype":"F32","shape":[17179869184],"data_offsets":[0,68719476736]}})", 64));
  EXPECT_NE(read_error(small).find("past the data buffer"), std::string::npos) << read_error(small);
  // read_regular_file's cap.
  try {
    read_regular_file(big, 1 << 20);
    ADD_FAILURE() << "read past the cap";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("more than the 1048576 accepted"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Byte mutations of a valid random file: every mutant is either refused with SafetensorsError or
// parses into a file that is consistent (sizes agree with shapes, and it round-trips through the
// writer); reading it from disk gives the same outcome as parsing it from memory. Anything else (a
// crash, another exception type, bad_alloc) fails.
TEST(SafetensorsHostile, ByteMutantsAreRefusedOrConsistent) {
  const uint64_t seed = flashcheck::testing::seed_for(502);
  std::mt19937_64 gen(seed);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(gen); };
  std::normal_distribution<float> normal;
  SafetensorsFile f;
  for (auto [name, dtype] : {std::pair{"q", DType::bf16}, {"k", DType::f16}, {"v", DType::f32}, {"lse", DType::f32}}) {
    std::vector<float> x(1 + pick(12));
    for (float& e : x) e = normal(gen);
    f.tensors[name] = make_tensor(dtype, {static_cast<int64_t>(x.size())}, x);
  }
  f.metadata = {{"causal", "bottom_right"}, {"format", "pt"}};
  const auto good = serialize_safetensors(f);
  uint64_t hlen;
  std::memcpy(&hlen, good.data(), 8);
  const std::string json_bytes = "{}[]\":,0123456789 -+.eE\\nulltruefalse\x00\x7f\xff";
  const auto dir = scratch("mutants");
  const auto path = dir / "m.safetensors";
  int accepted = 0, refused = 0;
  for (int i = 0; i < 6000; ++i) {
    std::vector<uint8_t> m = good;
    const int edits = 1 + static_cast<int>(pick(3));
    for (int e = 0; e < edits; ++e) {
      // Most edits land in the length prefix or the header, where the parser's decisions are.
      const uint64_t span = pick(4) ? std::min<uint64_t>(m.size(), 8 + hlen) : m.size();
      if (span == 0) break;
      const uint64_t at = pick(span);
      switch (pick(6)) {
        case 0: m[at] ^= static_cast<uint8_t>(1u << pick(8)); break;
        case 1: m[at] = static_cast<uint8_t>(json_bytes[pick(json_bytes.size())]); break;
        case 2: m.erase(m.begin() + static_cast<ptrdiff_t>(at), m.begin() + static_cast<ptrdiff_t>(std::min<uint64_t>(m.size(), at + 1 + pick(8)))); break;
        case 3: m.insert(m.begin() + static_cast<ptrdiff_t>(at), static_cast<uint8_t>(json_bytes[pick(json_bytes.size())])); break;
        case 4: {  // repeat a slice of the header: duplicated keys, entries, brackets
          const uint64_t len = 1 + pick(40), from = pick(std::min<uint64_t>(m.size(), 8 + hlen));
          std::vector<uint8_t> slice(m.begin() + static_cast<ptrdiff_t>(from),
                                     m.begin() + static_cast<ptrdiff_t>(std::min<uint64_t>(m.size(), from + len)));
          m.insert(m.begin() + static_cast<ptrdiff_t>(at), slice.begin(), slice.end());
          break;
        }
        case 5: m.resize(at); break;
      }
    }
    if (pick(3) == 0 && m.size() >= 8) {  // keep the length prefix consistent with an edited header
      const uint64_t n = hlen + m.size() - good.size();
      if (n < m.size()) std::memcpy(m.data(), &n, 8);
    }
    std::string outcome;
    try {
      SafetensorsFile g = parse_safetensors(m);
      for (const auto& [name, t] : g.tensors)
        ASSERT_EQ(static_cast<int64_t>(t.data.size()), t.numel() * st_dtype_bytes(t.dtype)) << "mutant " << i << " tensor " << name;
      SafetensorsFile h = parse_safetensors(serialize_safetensors(g));
      ASSERT_EQ(h.metadata, g.metadata) << "mutant " << i;
      ASSERT_EQ(h.tensors.size(), g.tensors.size()) << "mutant " << i;
      for (const auto& [name, t] : g.tensors) {
        ASSERT_EQ(h.tensors.at(name).data, t.data) << "mutant " << i;
        ASSERT_EQ(h.tensors.at(name).shape, t.shape) << "mutant " << i;
      }
      ++accepted;
    } catch (const SafetensorsError& e) {
      outcome = e.what();
      ASSERT_FALSE(outcome.empty());
      ++refused;
    } catch (const std::exception& e) {
      FAIL() << "mutant " << i << " (seed " << seed << ") threw " << typeid(e).name() << ": " << e.what();
    }
    if (i % 20 == 0) {  // the file path must agree with the memory path
      put(path, m);
      const std::string disk = read_error(path);
      if (outcome.empty()) {
        ASSERT_EQ(disk, "") << "mutant " << i;
      } else {
        ASSERT_EQ(disk, path.string() + ": " + outcome) << "mutant " << i;
      }
    }
  }
  std::printf("byte mutants: %d accepted, %d refused\n", accepted, refused);
  EXPECT_GT(accepted, 100);  // payload edits keep files valid: the fuzz reaches the accepting path
  EXPECT_GT(refused, 3000);
  std::filesystem::remove_all(dir);
}

// A header of many tensors parses in time linear in their number (give or take a log): nlohmann's
// parser callback, which the duplicate-key check once used, rescanned the header object each time
// a tensor entry closed, and 40k tensors took 17 s. At 100k tensors a quadratic parse takes minutes;
// no time is asserted, but ctest's time limit would be reached.
TEST(Safetensors, ManyTensorsParse) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(503));
  const int n = 100000;
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), gen);  // header order differs from offset order
  std::string header = "{\"__metadata__\":{\"causal\":\"none\"}";
  std::vector<uint16_t> values(static_cast<size_t>(n));
  for (int i : order) {
    header += ",\"t" + std::to_string(i) + "\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[" + std::to_string(2 * i) + "," +
              std::to_string(2 * i + 2) + "]}";
    values[static_cast<size_t>(i)] = static_cast<uint16_t>(gen());
  }
  header += "}";
  auto bytes = raw(header, 0);
  bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(values.data()), reinterpret_cast<const uint8_t*>(values.data() + n));
  const auto t0 = std::chrono::steady_clock::now();
  const SafetensorsFile f = parse_safetensors(bytes);
  std::printf("%d tensors parsed in %.3f s\n", n, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ASSERT_EQ(f.tensors.size(), static_cast<size_t>(n));
  for (int i : {0, n / 3, n - 1}) {
    const StTensor& t = f.tensors.at("t" + std::to_string(i));
    uint16_t got;
    std::memcpy(&got, t.data.data(), 2);
    EXPECT_EQ(got, values[static_cast<size_t>(i)]) << "tensor t" << i;
  }
  // A duplicate among them is still found, wherever it is.
  const std::string dup = "\"t" + std::to_string(order[static_cast<size_t>(n / 2)]) + "\":";
  std::string twice = header;
  twice.insert(twice.size() - 1, "," + dup + "{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[0,0]}");
  expect_error(raw(twice, 2 * static_cast<size_t>(n)), "duplicate JSON key '" + dup.substr(1, dup.size() - 3) + "'");
}

// A file that changes while it is read is refused, naming the change, never judged. The hook runs
// between the header's read and the payload's: where a concurrent writer would strike.
TEST(SafetensorsFiles, AFileChangedWhileBeingReadIsRefused) {
  const auto dir = scratch("race");
  const auto path = dir / "f.safetensors";
  std::mt19937_64 gen(flashcheck::testing::seed_for(504));
  const SafetensorsFile f = sample();
  const std::vector<uint8_t> good = serialize_safetensors(f);
  uint64_t hlen;
  std::memcpy(&hlen, good.data(), 8);
  // Each writer gets a file last modified well in the past: file times tick at the kernel's clock
  // granularity (a few ms), and a change within one tick only the header comparison could see.
  auto fresh = [&] {
    put(path, good);
    timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old, 0), 0);
  };
  auto rewrite = [&](uint64_t at, uint8_t byte) {  // in place, same size: same inode, same length
    const int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, &byte, 1, static_cast<off_t>(at)), 1);
    ::close(fd);
  };
  auto refused = [&](const std::function<void()>& writer, const std::string& says) {
    fresh();
    try {
      read_safetensors(path, writer);
      ADD_FAILURE() << "a file changed while being read was accepted (wanted: " << says << ")";
    } catch (const SafetensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not judged"), std::string::npos) << e.what();
    }
  };
  const uint64_t payload = 8 + hlen, payload_bytes = good.size() - payload;
  // One payload byte changed (a value the judge would read), at a random place.
  const uint64_t at = payload + gen() % payload_bytes;
  refused([&] { rewrite(at, static_cast<uint8_t>(good[at] ^ (1u << (gen() % 8)))); }, "modified while being read");
  // The same with its modification time put back: the change time still moves.
  refused(
      [&] {
        rewrite(at, static_cast<uint8_t>(good[at] ^ 1));
        timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
        ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old, 0), 0);
      },
      "modified while being read");
  // Replaced by a rename (a writer that writes atomically): the path now names another file.
  refused([&] { write_file_atomic(path, good); }, "replaced by another file while being read");
  // A header byte changed (the metadata's "bottom_right" spelled with another letter).
  const std::string text(good.begin(), good.end());
  const uint64_t letter = text.find("bottom_right") + 3;
  refused([&] { rewrite(letter, 'X'); }, "while being read");
  // Untouched during the read: accepted, with the values written.
  fresh();
  const SafetensorsFile g = read_safetensors(path, [] {});
  EXPECT_EQ(g.tensors.at("a").to_f32("a"), f.tensors.at("a").to_f32("a"));
  std::filesystem::remove_all(dir);
}

// The writer refuses names that JSON would have to rewrite, rather than renaming a tensor.
TEST(Safetensors, WriterRefusesInvalidUtf8Names) {
  SafetensorsFile f = sample();
  f.tensors["bad\xff"] = make_f32_tensor({1}, {1.5f});
  EXPECT_THROW(serialize_safetensors(f), SafetensorsError);
  f = sample();
  f.metadata["causal"] = "cut\xe2\x82";
  try {
    serialize_safetensors(f);
    ADD_FAILURE() << "wrote a metadata value that is not UTF-8";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("is not valid UTF-8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashcheck
