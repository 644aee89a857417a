#include "verify/safetensors.h"

#include "reference/big_vector.h"
#include "verify/untrusted_text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

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
  std::vector<float> out = big_vector<float>(static_cast<size_t>(n));
  switch (dtype) {
    case StDType::F32: decode(DType::f32, data.data(), n, out.data()); break;
    case StDType::F16: decode(DType::f16, data.data(), n, out.data()); break;
    case StDType::BF16: decode(DType::bf16, data.data(), n, out.data()); break;
    case StDType::F8_E4M3: decode(DType::e4m3, data.data(), n, out.data()); break;
    case StDType::F8_E5M2: decode(DType::e5m2, data.data(), n, out.data()); break;
    default:
      throw SafetensorsError("tensor '" + name + "' has dtype " + to_string(dtype) +
                             "; expected F32, F16, BF16, F8_E4M3 or F8_E5M2");
  }
  return out;
}

std::vector<int64_t> StTensor::to_i64(const std::string& name) const {
  const size_t n = static_cast<size_t>(numel());
  std::vector<int64_t> out(n);
  if (dtype == StDType::I32) {
    for (size_t i = 0; i < n; ++i) {
      int32_t x;
      std::memcpy(&x, data.data() + 4 * i, 4);
      out[i] = x;
    }
  } else if (dtype == StDType::I64) {
    std::memcpy(out.data(), data.data(), 8 * n);
  } else {
    throw SafetensorsError("tensor '" + name + "' has dtype " + to_string(dtype) + "; expected I32 or I64");
  }
  return out;
}

namespace {
// One tensor's header entry, checked on its own (dtype, shape, offsets agree); where it sits in the
// buffer is checked by check_layout once the buffer's size is known.
struct Entry {
  std::string name;
  const DTypeInfo* info = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};
struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
  uint64_t extent = 0;  // the data buffer's size the header declares: the largest end offset
};

// A safetensors header is at most three levels deep (header -> tensor entry -> shape array);
// refusing deeper nesting while parsing keeps a hostile "[[[[..." from costing memory.
constexpr size_t kMaxDepth = 3;

// What nlohmann does not check, checked in a SAX pass before the DOM is built: no key twice in
// one object (nlohmann keeps the last of duplicate keys silently; a file whose two "causal" entries
// disagree must not be judged by whichever came last) and no nesting past kMaxDepth (a hostile
// "[[[[..." costs no memory here). A separate pass, not nlohmann's parser callback: that callback
// parser rescans the enclosing object each time a nested one closes, which made a header of 40k
// tensors take seconds (quadratic in the number of tensors).
class HeaderShapeCheck final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    f.key = k;
    if (!f.keys.insert(k).second) {
      std::string where;
      for (size_t i = 0; i + 1 < stack_.size(); ++i) where += stack_[i].object ? (where.empty() ? "" : ".") + stack_[i].key : "[]";
      throw SafetensorsError("duplicate JSON key '" + k + "' " +
                             (where.empty() ? std::string("at the top level of the header") : "in '" + where + "'"));
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw SafetensorsError(std::string("header is not valid JSON: ") + e.what());
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;  // the key being read in this object (names the place of a nested duplicate)
  };
  bool open(bool object) {
    if (stack_.size() >= kMaxDepth)
      throw SafetensorsError("header nests deeper than " + std::to_string(kMaxDepth) +
                             " levels (header, tensor entry, shape array)");
    stack_.push_back({object, {}, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  std::vector<Frame> stack_;
};

nlohmann::json parse_header_json(std::string_view header) {
  if (header.empty() || header[0] != '{') throw SafetensorsError("header does not start with '{'");
  // nlohmann's lexer takes a NUL as the end of input, so "{...}\0garbage" would parse; JSON text
  // never holds a raw NUL (not even inside strings), so any NUL is refused here.
  if (size_t z = header.find('\0'); z != std::string_view::npos)
    throw SafetensorsError("header holds a NUL byte at offset " + std::to_string(z) +
                           " (only space padding, 0x20, may follow the JSON object)");
  HeaderShapeCheck shape;
  nlohmann::json::sax_parse(header.begin(), header.end(), &shape);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header.begin(), header.end());
  } catch (const nlohmann::json::exception& e) {
    throw SafetensorsError(std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw SafetensorsError("header is not a JSON object");
  // The parse accepted the whole text, so only JSON whitespace follows the object's closing brace
  // (the last '}'); of that, the format allows spaces only.
  const size_t close = header.find_last_of('}');
  const std::string_view tail = header.substr(close + 1);
  if (tail.find_first_not_of(' ') != std::string_view::npos)
    throw SafetensorsError("header has " + std::to_string(tail.size()) +
                           " byte(s) after its JSON object that are not space (0x20) padding");
  return j;
}

Header parse_header(std::string_view text) {
  const nlohmann::json j = parse_header_json(text);
  Header h;
  for (auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw SafetensorsError("__metadata__ is not an object");
      for (auto& [k, s] : v.items()) {
        if (!s.is_string()) throw SafetensorsError("__metadata__ value for '" + k + "' is not a string");
        h.metadata[k] = s.get<std::string>();
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
    Entry t;
    t.name = name;
    const std::string dt = v["dtype"].get<std::string>();
    for (auto& i : kDTypes)
      if (dt == i.name) t.info = &i;
    if (!t.info) throw bad("unknown dtype '" + dt + "'");
    uint64_t n = 1;
    for (auto& s : v["shape"]) {
      if (!s.is_number_unsigned()) throw bad("shape entries must be non-negative integers");
      uint64_t d = s.get<uint64_t>();
      if (d > (uint64_t{1} << 62) || __builtin_mul_overflow(n, d, &n)) throw bad("shape overflows");
      t.shape.push_back(static_cast<int64_t>(d));
    }
    auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) throw bad("data_offsets must be non-negative integers");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.begin > t.end) throw bad("data_offsets begin > end");
    uint64_t want;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(t.info->bytes), &want) || want != t.end - t.begin)
      throw bad("byte size " + std::to_string(t.end - t.begin) + " does not match shape × dtype size");
    h.extent = std::max(h.extent, t.end);
    h.entries.push_back(std::move(t));
  }
  return h;
}

// The buffer must be covered exactly: sorted ranges abut, start at 0 and end at the file's end.
void check_layout(const Header& h, uint64_t buf_size) {
  for (const Entry& t : h.entries)
    if (t.end > buf_size)
      throw SafetensorsError("tensor '" + t.name + "': data_offsets end " + std::to_string(t.end) +
                             " is past the data buffer (" + std::to_string(buf_size) + " bytes): truncated file?");
  std::vector<const Entry*> order;
  for (const Entry& t : h.entries) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const Entry* a, const Entry* b) { return std::pair(a->begin, a->end) < std::pair(b->begin, b->end); });
  uint64_t pos = 0;
  for (const Entry* t : order) {
    if (t->begin < pos) throw SafetensorsError("tensor '" + t->name + "' overlaps another tensor's bytes");
    if (t->begin > pos) throw SafetensorsError("hole in the data buffer before tensor '" + t->name + "'");
    pos = t->end;
  }
  if (pos != buf_size) throw SafetensorsError(std::to_string(buf_size - pos) + " trailing bytes after the last tensor");
}

// The file's tensors in header-entry order; bytes(e) returns entry e's payload.
template <typename Bytes>
SafetensorsFile assemble(Header&& h, Bytes bytes) {
  SafetensorsFile f;
  f.metadata = std::move(h.metadata);
  for (Entry& e : h.entries) {
    StTensor t;
    t.dtype = e.info->d;
    t.shape = std::move(e.shape);
    t.data = bytes(e);
    f.tensors.emplace(e.name, std::move(t));
  }
  return f;
}

uint64_t header_length(const uint8_t* first8, uint64_t total) {
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | first8[i];
  if (hlen > kMaxHeader) throw SafetensorsError("header length " + std::to_string(hlen) + " exceeds the 100 MB limit");
  if (hlen > total - 8)
    throw SafetensorsError("truncated file: header claims " + std::to_string(hlen) + " bytes, only " +
                           std::to_string(total - 8) + " follow");
  return hlen;
}

void need_header_length_bytes(uint64_t total) {
  if (total < 8) throw SafetensorsError("file is " + std::to_string(total) + " bytes: too short for the 8-byte header length");
}

// An open descriptor of a regular file. stat() comes first so a FIFO is never opened (opening one
// for reading blocks until a writer appears) and a device such as /dev/zero is never read; the
// descriptor is then checked to be the file that was stat'ed, in case the path changed in between.
struct RegularFile {
  int fd = -1;
  uint64_t size = 0;
  std::string name;
  struct stat opened {};  // the file as it was when opened: the identity every later check compares with
  explicit RegularFile(const std::filesystem::path& path) : name(path.string()) {
    struct stat st {};
    if (::stat(name.c_str(), &st) != 0) throw SafetensorsError("cannot open '" + name + "': " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) {
      const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                         : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                         : S_ISCHR(st.st_mode)  ? "a character device"
                         : S_ISBLK(st.st_mode)  ? "a block device"
                         : S_ISSOCK(st.st_mode) ? "a socket"
                                                : "a special file";
      throw SafetensorsError("'" + name + "' is " + kind + ", not a regular file; only regular files are read");
    }
    fd = ::open(name.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw SafetensorsError("cannot open '" + name + "': " + std::strerror(errno));
    struct stat now {};
    if (::fstat(fd, &now) != 0 || !S_ISREG(now.st_mode) || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
      ::close(fd);
      throw SafetensorsError("'" + name + "' changed between stat and open");
    }
    size = static_cast<uint64_t>(now.st_size);
    opened = now;
  }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile() { ::close(fd); }

  void read_exact(uint8_t* p, uint64_t n) const {
    while (n > 0) {
      const ssize_t got = ::read(fd, p, static_cast<size_t>(std::min<uint64_t>(n, 1 << 30)));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw SafetensorsError("cannot read '" + name + "': " + std::strerror(errno));
      if (got == 0) throw SafetensorsError("'" + name + "' shrank while being read");
      p += got;
      n -= static_cast<uint64_t>(got);
    }
  }
  // After the read: the bytes read are one version of one file, or the file is refused. The path
  // must still name this file (a rename over it means the user's file is now another one), its
  // size, modification and change times must be those it had when opened (a rewrite in place, by
  // another process, between or during our reads), and its first `head.size()` bytes — the
  // header, which says what everything else means — must read back the same (a rewrite within
  // the file system's timestamp granularity still shows there).
  void expect_unchanged(const std::string& head) const {
    const std::string what = "the file ";  // read_safetensors puts the path in front
    const std::string verdict = "; it is not judged (check it again once nothing writes it)";
    struct stat now {}, at_path {};
    if (::fstat(fd, &now) != 0) throw SafetensorsError(what + "cannot be checked after reading: " + std::strerror(errno));
    if (::stat(name.c_str(), &at_path) != 0 || at_path.st_dev != opened.st_dev || at_path.st_ino != opened.st_ino)
      throw SafetensorsError(what + "was replaced by another file while being read" + verdict);
    auto same_time = [](const timespec& a, const timespec& b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; };
    if (now.st_size != opened.st_size || !same_time(now.st_mtim, opened.st_mtim) || !same_time(now.st_ctim, opened.st_ctim))
      throw SafetensorsError(what + "was modified while being read (its size or modification time changed)" + verdict);
    std::string again(head.size(), '\0');
    for (size_t done = 0; done < again.size();) {
      const ssize_t got = ::pread(fd, again.data() + done, again.size() - done, static_cast<off_t>(done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) throw SafetensorsError(what + "cannot be read again after reading: " + (got < 0 ? std::strerror(errno) : "it shrank"));
      done += static_cast<size_t>(got);
    }
    if (again != head) throw SafetensorsError(what + "had its header rewritten while being read" + verdict);
  }
  // n bytes from `offset` on (pread: the file position stays), for reads spread over threads.
  void read_exact_at(uint8_t* p, uint64_t n, uint64_t offset) const {
    while (n > 0) {
      const ssize_t got = ::pread(fd, p, static_cast<size_t>(std::min<uint64_t>(n, 1 << 30)), static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw SafetensorsError("cannot read '" + name + "': " + std::strerror(errno));
      if (got == 0) throw SafetensorsError("'" + name + "' shrank while being read");
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
  }
  // Having read the file up to `end`, nothing may follow: a file that grew is not the file that was sized.
  void expect_end_at(uint64_t end) const {
    uint8_t extra;
    ssize_t got;
    do got = ::pread(fd, &extra, 1, static_cast<off_t>(end));
    while (got < 0 && errno == EINTR);
    if (got != 0) throw SafetensorsError("'" + name + "' changed size while being read");
  }
  // Having read `size` bytes, nothing may follow: a file that grew is not the file that was sized.
  void expect_end() const {
    uint8_t extra;
    ssize_t got;
    do got = ::read(fd, &extra, 1);
    while (got < 0 && errno == EINTR);
    if (got != 0) throw SafetensorsError("'" + name + "' changed size while being read");
  }
};

std::vector<uint8_t> allocate(uint64_t n, const std::string& name) {
  try {
    return big_vector<uint8_t>(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    throw SafetensorsError("'" + name + "': cannot hold its " + std::to_string(n) + " bytes in memory");
  }
}
}  // namespace

SafetensorsFile parse_safetensors(const std::vector<uint8_t>& bytes) {
  need_header_length_bytes(bytes.size());
  const uint64_t hlen = header_length(bytes.data(), bytes.size());
  Header h = parse_header(std::string_view(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<size_t>(hlen)));
  check_layout(h, bytes.size() - 8 - hlen);
  const uint8_t* buf = bytes.data() + 8 + hlen;
  return assemble(std::move(h), [buf](const Entry& e) { return std::vector<uint8_t>(buf + e.begin, buf + e.end); });
}

SafetensorsFile read_safetensors(const std::filesystem::path& path, const std::function<void()>& after_header) {
  const RegularFile file(path);
  try {
    need_header_length_bytes(file.size);
    uint8_t len[8];
    file.read_exact(len, 8);
    const uint64_t hlen = header_length(len, file.size);
    std::string text(static_cast<size_t>(hlen), '\0');
    file.read_exact(reinterpret_cast<uint8_t*>(text.data()), hlen);
    Header h = parse_header(text);
    if (after_header) after_header();
    // The size on disk must be what the header declares before any of the payload is read: a
    // header promising 4 GB over a 1 KB file, or a small header before gigabytes of junk, stops here.
    check_layout(h, file.size - 8 - hlen);
    // check_layout proved the tensors tile the payload in offset order, so each is read straight
    // into its own buffer: one pass over a multi-GB file instead of a read and a copy. The reads
    // are spread over the threads in 64 MiB pieces: one thread's copy out of the page cache took
    // ~1.1 s of a 5.5 s production-size check (2.1 GB; PERF.md, session 17), about the whole GPU
    // oracle's time.
    std::sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
    const uint64_t payload = 8 + hlen;
    struct Piece {
      uint8_t* to;
      uint64_t bytes, offset;
    };
    std::vector<Piece> pieces;
    constexpr uint64_t kPiece = uint64_t{64} << 20;
    SafetensorsFile f = assemble(std::move(h), [&](const Entry& e) {
      std::vector<uint8_t> d = allocate(e.end - e.begin, file.name);  // moved into the tensor: the buffer stays put
      for (uint64_t at = 0; at < d.size(); at += kPiece)
        pieces.push_back({d.data() + at, std::min<uint64_t>(kPiece, d.size() - at), payload + e.begin + at});
      return d;
    });
    std::string failed;
#pragma omp parallel for schedule(dynamic, 1) if (pieces.size() > 1)
    for (size_t i = 0; i < pieces.size(); ++i) {
      try {
        file.read_exact_at(pieces[i].to, pieces[i].bytes, pieces[i].offset);
      } catch (const SafetensorsError& e) {
#pragma omp critical(fc_safetensors_read)
        if (failed.empty()) failed = e.what();
      }
    }
    if (!failed.empty()) throw SafetensorsError(failed);
    file.expect_end_at(file.size);
    file.expect_unchanged(std::string(reinterpret_cast<const char*>(len), 8) + text);
    return f;
  } catch (const SafetensorsError& e) {
    throw SafetensorsError(file.name + ": " + e.what());
  }
}

std::vector<uint8_t> read_regular_file(const std::filesystem::path& path, uint64_t max_bytes) {
  const RegularFile file(path);
  if (file.size > max_bytes)
    throw SafetensorsError("'" + file.name + "' is " + std::to_string(file.size) + " bytes, more than the " +
                           std::to_string(max_bytes) + " accepted");
  std::vector<uint8_t> bytes = allocate(file.size, file.name);
  file.read_exact(bytes.data(), bytes.size());
  file.expect_end();
  return bytes;
}

std::vector<uint8_t> serialize_safetensors(const SafetensorsFile& f) {
  // A name or value that is not UTF-8 would be rewritten (U+FFFD) by the JSON writer: a file
  // whose tensor is silently renamed is worse than none.
  auto utf8 = [](const std::string& s, const char* what) {
    if (valid_utf8(s) != s) throw SafetensorsError(std::string(what) + " '" + printable_line(s) + "' is not valid UTF-8");
  };
  for (auto& [k, v] : f.metadata) utf8(k, "metadata key"), utf8(v, "metadata value");
  for (auto& [name, _] : f.tensors) utf8(name, "tensor name");
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!f.metadata.empty()) h["__metadata__"] = f.metadata;
  uint64_t off = 0;
  for (auto& [name, t] : f.tensors) {  // std::map: sorted names, so the bytes are reproducible
    if (static_cast<int64_t>(t.data.size()) != t.numel() * st_dtype_bytes(t.dtype))
      throw SafetensorsError("tensor '" + name + "': data size does not match its shape");
    h[name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
    off += t.data.size();
  }
  std::string header = json_text(h, -1);
  header.append((8 - header.size() % 8) % 8, ' ');  // pad so the buffer starts 8-byte aligned
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (auto& [_, t] : f.tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

void write_file_atomic(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  // A unique temporary beside `path` (same file system, so rename() is atomic), synced before the
  // rename and the directory synced after it: a crash leaves the old file or the new one, whole.
  static std::atomic<unsigned> counter{0};
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw SafetensorsError("cannot create '" + tmp.string() + "': " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return SafetensorsError("cannot " + what + " '" + tmp.string() + "': " + why);
  };
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, std::min<size_t>(bytes.size() - done, 1 << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail("write");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) throw fail("sync");
  if (::close(fd) != 0) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw SafetensorsError("cannot close '" + tmp.string() + "': " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw SafetensorsError("cannot rename into '" + path.string() + "': " + ec.message());
  }
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);  // best effort: the rename is done; this only makes it durable across power loss
    ::close(dfd);
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
    case DType::e4m3: return StDType::F8_E4M3;
    case DType::e5m2: return StDType::F8_E5M2;
  }
  return StDType::F32;
}

std::optional<DType> from_st(StDType d) {
  switch (d) {
    case StDType::F32: return DType::f32;
    case StDType::F16: return DType::f16;
    case StDType::BF16: return DType::bf16;
    case StDType::F8_E4M3: return DType::e4m3;
    case StDType::F8_E5M2: return DType::e5m2;
    default: return std::nullopt;
  }
}

StTensor make_int_tensor(StDType dtype, std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  if (dtype != StDType::I32 && dtype != StDType::I64) throw SafetensorsError("make_int_tensor: dtype must be I32 or I64");
  StTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  if (t.numel() != static_cast<int64_t>(values.size())) throw SafetensorsError("make_int_tensor: shape does not match values");
  const size_t bytes = static_cast<size_t>(st_dtype_bytes(dtype));
  t.data.resize(values.size() * bytes);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == StDType::I32) {
      if (values[i] < INT32_MIN || values[i] > INT32_MAX)
        throw SafetensorsError("make_int_tensor: " + std::to_string(values[i]) + " does not fit I32");
      const int32_t x = static_cast<int32_t>(values[i]);
      std::memcpy(t.data.data() + 4 * i, &x, 4);
    } else {
      std::memcpy(t.data.data() + 8 * i, &values[i], 8);
    }
  }
  return t;
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
