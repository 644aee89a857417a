// `flashcheck check` on files of every problem-model-2 variant, written as a kernel's harness
// writes them (verify/check_file_format.h): read back exactly, an output equal to the rounded oracle
// passes, the bugs kernels ship (a window off by one, a missing sink, a slope on the wrong head, a
// page no sequence owns) fail by the right criterion, and every malformed file is refused naming
// its field. Inputs are fresh from the test seed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstring>
#include <filesystem>
#include <random>

#include "reference/naive.h"
#include "reference/random_variant_test_util.h"
#include "reference/sequences.h"
#include "reference/storage.h"
#include "testing/test_seed.h"
#include "verify/check_file.h"
#include "verify/check_file_format.h"
#include "verify/metrics.h"

namespace flashcheck {
namespace {

namespace fs = std::filesystem;

struct Truth {
  std::vector<float> o, lse;  // logical layout, fp32 (o is rounded to its dtype when written)
};
Truth oracle(const Problem& p, const Inputs& in) {
  const OracleResult r = naive_attention(p, in);
  Truth t;
  t.o.assign(r.o.begin(), r.o.end());
  t.lse.assign(r.lse.begin(), r.lse.end());
  return t;
}

fs::path scratch_file(const std::string& name) {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("fc_variants_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir / (name + ".safetensors");
}

Report check(const SafetensorsFile& f, const std::string& name = "case") {
  const fs::path path = scratch_file(name);
  write_safetensors(path, f);
  Report r = check_file(path, CheckFileOptions{}).forward;
  fs::remove(path);
  return r;
}

// The file of `p` with the oracle's own output: what a correct kernel writes.
SafetensorsFile correct_file(const Problem& p, const Inputs& in, const CheckFileWriteOptions& w = {}) {
  const Truth t = oracle(p, in);
  return make_check_file(p, in, t.o, &t.lse, w);
}

bool failed(const Report& r, const std::string& criterion) {
  for (const auto& c : r.criteria)
    if (c.name == criterion) return !c.pass;
  return false;
}
std::string summary(const Report& r) { return to_text(r); }

Problem line(const std::string& s) { return parse_problem(s); }

// A problem as a file states it: its page table is data (how it was drawn is not in the file), and
// an fp8 problem's output dtype is o's, explicit.
Problem as_read(Problem p) {
  p.page_order = PageOrder::identity;
  if (is_fp8(p.dtype) && !p.out_dtype) p.out_dtype = DType::bf16;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Round trip: what is written is what is read, for random problems of every variant.

TEST(CheckFileVariants, ReadBackEqualsWhatWasWritten) {
  std::mt19937_64 g(testing::seed_for(801));
  int read = 0;
  for (int n = 0; n < 60; ++n) {
    Problem p = random_variant_problem(g);
    SCOPED_TRACE(to_string(p));
    const Inputs in = make_inputs(p, g(), Dist::normal);
    const Truth t = oracle(p, in);
    CheckFileWriteOptions w;
    w.pad_q = static_cast<int64_t>(g() % 4);
    w.pad_kv = static_cast<int64_t>(g() % 4);
    w.index_dtype = g() % 2 ? StDType::I32 : StDType::I64;
    SafetensorsFile f = parse_safetensors(serialize_safetensors(make_check_file(p, in, t.o, &t.lse, w)));
    if (p.total_q() == 0) {
      EXPECT_THROW(read_check_case(f, false), CannotTest);
      continue;
    }
    const CheckFileCase c = read_check_case(f, false);
    ASSERT_EQ(c.problem, as_read(p));
    EXPECT_EQ(c.inputs.q, in.q);
    EXPECT_EQ(c.inputs.k, in.k);
    EXPECT_EQ(c.inputs.v, in.v);
    EXPECT_EQ(c.inputs.alibi_slopes, in.alibi_slopes);
    EXPECT_EQ(c.inputs.sinks, in.sinks);
    EXPECT_EQ(c.inputs.descale_q, in.descale_q);
    EXPECT_EQ(c.inputs.descale_k, in.descale_k);
    EXPECT_EQ(c.inputs.descale_v, in.descale_v);
    EXPECT_EQ(c.inputs.block_table, in.block_table);
    EXPECT_EQ(c.inputs.num_pages, in.num_pages);
    std::vector<float> rounded = t.o;
    round_all(rounded, p.o_dtype());
    ASSERT_EQ(c.o.size(), rounded.size());
    EXPECT_EQ(std::memcmp(c.o.data(), rounded.data(), 4 * rounded.size()), 0);  // bit for bit
    ASSERT_TRUE(c.lse.has_value());
    EXPECT_EQ(std::memcmp(c.lse->data(), t.lse.data(), 4 * t.lse.size()), 0);
    // Padding was poisoned and left alone: said, and counted as zero writes.
    if (p.layout == Layout::thd && w.pad_q > 0) {
      ASSERT_TRUE(c.padding_written.has_value());
      EXPECT_EQ(*c.padding_written, 0);
    } else {
      EXPECT_FALSE(c.padding_written.has_value());
    }
    ++read;
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(read, 40);
}

// ---------------------------------------------------------------------------------------------
// A correct output passes, variant by variant, with sizes from the seed.

struct Shape {
  int64_t sq, skv;
};
Shape sizes(std::mt19937_64& g) {
  return {std::uniform_int_distribution<int64_t>(20, 70)(g), std::uniform_int_distribution<int64_t>(20, 90)(g)};
}

void expect_passes(const Problem& p, std::mt19937_64& g, const CheckFileWriteOptions& w = {}) {
  SCOPED_TRACE(to_string(p));
  const Inputs in = make_inputs(p, g(), Dist::normal);
  const Report r = check(correct_file(p, in, w));
  EXPECT_TRUE(r.pass()) << summary(r);
  EXPECT_EQ(r.problem, as_read(p));
}

TEST(CheckFileVariants, CorrectDenseVariantsPass) {
  std::mt19937_64 g(testing::seed_for(802));
  const std::string dims = " hq=4 hkv=2 d=32";
  auto sz = [&] {
    const Shape s = sizes(g);
    return " sq=" + std::to_string(s.sq) + " skv=" + std::to_string(s.skv);
  };
  for (const std::string variant :
       {"dtype=bf16 window=9,5", "dtype=f16 causal=bottom_right window=12,3", "dtype=f32 causal=top_left window=-1,4",
        "dtype=bf16 softcap=1.5", "dtype=f16 alibi=symmetric causal=bottom_right", "dtype=bf16 alibi=signed slopes=batch",
        "dtype=bf16 sinks=1 causal=top_left", "dtype=f16 layout=bshd", "dtype=bf16 layout=bshd used=7,0",
        "dtype=f16 layout=bshd page=5 pages=shuffled", "dtype=e4m3 descale=head", "dtype=e5m2 descale=tensor odtype=f16"}) {
    std::string text = "b=2" + dims + sz() + " " + variant;
    if (variant.find("page=") != std::string::npos) {
      const Shape s = sizes(g);  // paged: cache lengths per sequence
      text = "b=2" + dims + " sq=" + std::to_string(s.sq % 9 + 1) + " skv=" + std::to_string(s.skv) + "," +
             std::to_string(s.skv / 3) + " " + variant;
    }
    expect_passes(line(text), g);
    if (HasFatalFailure() || IsSkipped()) return;
  }
}

TEST(CheckFileVariants, CorrectVarlenFilesPass) {
  std::mt19937_64 g(testing::seed_for(803));
  CheckFileWriteOptions w;
  w.pad_q = 3;
  w.pad_kv = 5;
  // An empty query sequence, a one-token one, one without keys.
  expect_passes(line("b=4 hq=4 hkv=2 sq=17,0,1,30 skv=25,6,1,0 d=32 causal=bottom_right dtype=bf16 layout=thd"), g, w);
  if (IsSkipped()) return;
  expect_passes(line("b=2 hq=2 hkv=1 sq=9,20 skv=31,12 used=20,12 d=16 dtype=f16 layout=thd window=4,2"), g, w);
  expect_passes(line("b=3 hq=2 hkv=2 sq=3,1,6 skv=20,9,14 d=32 dtype=bf16 layout=thd page=4 pages=shared causal=bottom_right"), g, w);
}

// ---------------------------------------------------------------------------------------------
// The bugs kernels ship, each failing by the criterion that describes it.

// The output a buggy kernel computes: the oracle of `wrong` over inputs `win`; the file states `p`.
SafetensorsFile buggy_file(const Problem& p, const Inputs& in, const Problem& wrong, const Inputs& win) {
  const Truth t = oracle(wrong, win);
  return make_check_file(p, in, t.o, &t.lse);
}

TEST(CheckFileVariants, WindowOffByOneFails) {
  std::mt19937_64 g(testing::seed_for(804));
  const Shape s = sizes(g);
  const int64_t left = std::uniform_int_distribution<int64_t>(3, 12)(g);
  const int64_t right = std::uniform_int_distribution<int64_t>(0, 6)(g);
  Problem p = line("b=1 hq=2 hkv=2 d=32 dtype=bf16 sq=" + std::to_string(s.sq) + " skv=" + std::to_string(s.skv));
  p.window = {left, right};
  const Inputs in = make_inputs(p, g(), Dist::normal);
  for (const Window w : {Window{left + 1, right}, Window{left - 1, right}, Window{left, right + 1}}) {
    Problem wrong = p;
    wrong.window = w;
    SCOPED_TRACE(to_string(p) + " kernel window " + std::to_string(w.left) + "," + std::to_string(w.right));
    const Report r = check(buggy_file(p, in, wrong, in));
    EXPECT_FALSE(r.pass());
    EXPECT_TRUE(failed(r, "baseline_relative")) << summary(r);
    EXPECT_TRUE(failed(r, "lse")) << summary(r);
  }
  // A cuDNN-convention kernel states its own (exclusive) left bound: converted, it passes; the same
  // numbers read as inclusive are a window off by one, and fail.
  SafetensorsFile f = correct_file(p, in);
  f.metadata["window"] = std::to_string(left + 1) + "," + std::to_string(right);
  f.metadata["window_convention"] = "left_exclusive";
  const Report ok = check(f);
  EXPECT_TRUE(ok.pass()) << summary(ok);
  bool said = false;
  for (const auto& n : ok.notes) said = said || n.find("left_exclusive convention is (" + std::to_string(left) + ", ") != std::string::npos;
  EXPECT_TRUE(said) << summary(ok);
  f.metadata.erase("window_convention");
  EXPECT_TRUE(failed(check(f), "baseline_relative"));
}

TEST(CheckFileVariants, MissingSinkFails) {
  std::mt19937_64 g(testing::seed_for(805));
  const Shape s = sizes(g);
  const Problem p = line("b=1 hq=4 hkv=2 d=32 dtype=f16 sinks=1 causal=bottom_right sq=" + std::to_string(s.sq) +
                         " skv=" + std::to_string(s.skv + s.sq));
  Inputs in = make_inputs(p, g(), Dist::normal);
  // Sinks that take a real share of every row's weight (the drawn ones may be −inf).
  std::normal_distribution<float> n(2.f, 0.5f);
  for (float& x : in.sinks) x = n(g);
  Problem wrong = p;
  wrong.sinks = false;
  Inputs win = in;
  win.sinks.clear();
  const Report r = check(buggy_file(p, in, wrong, win));
  EXPECT_TRUE(failed(r, "baseline_relative")) << summary(r);
  EXPECT_TRUE(failed(r, "lse")) << summary(r);
  // The file without its sinks tensor states a problem without sinks: that output then passes.
  SafetensorsFile f = buggy_file(p, in, wrong, win);
  f.tensors.erase("sinks");
  EXPECT_TRUE(check(f).pass());
}

TEST(CheckFileVariants, SlopeOnTheWrongHeadFails) {
  std::mt19937_64 g(testing::seed_for(806));
  for (const char* form : {"symmetric", "signed"}) {
    const Shape s = sizes(g);
    const Problem p = line(std::string("b=1 hq=4 hkv=2 d=32 dtype=bf16 alibi=") + form + " sq=" + std::to_string(s.sq) +
                           " skv=" + std::to_string(s.skv));
    Inputs in = make_inputs(p, g(), Dist::normal);
    for (size_t h = 0; h < in.alibi_slopes.size(); ++h) in.alibi_slopes[h] = std::exp2(-1.0f - static_cast<float>(h));
    Inputs win = in;
    std::rotate(win.alibi_slopes.begin(), win.alibi_slopes.begin() + 1, win.alibi_slopes.end());  // head h takes h+1's
    SCOPED_TRACE(form);
    const Report r = check(buggy_file(p, in, p, win));
    EXPECT_TRUE(failed(r, "baseline_relative")) << summary(r);
    EXPECT_TRUE(failed(r, "lse")) << summary(r);
  }
}

// A kernel that reads one page too many, or a page no sequence owns, reads the harness's NaN.
TEST(CheckFileVariants, UnusedPageReadFails) {
  std::mt19937_64 g(testing::seed_for(807));
  const int64_t page = std::uniform_int_distribution<int64_t>(3, 8)(g);
  const Problem p = line("b=2 hq=2 hkv=1 d=32 dtype=bf16 layout=bshd sq=4 skv=" + std::to_string(4 * page) + "," +
                         std::to_string(2 * page + 1) + " page=" + std::to_string(page) + " pages=shuffled");
  const Inputs in = make_inputs(p, g(), Dist::normal);
  // The kernel's view: sequence 0's last page swapped for a spare one (NaN in the file).
  Inputs win = in;
  const Sequences seqs(p);
  for (int64_t j = 3 * page; j < 4 * page; ++j)
    for (int64_t c = 0; c < p.head_dim_qk; ++c) win.k[static_cast<size_t>(seqs.k_row(0, 0, j) + c)] = NAN;
  const Report r = check(buggy_file(p, in, p, win));
  EXPECT_TRUE(failed(r, "nan_inf_positions")) << summary(r);
  // The file itself holds NaN only in unused pages: not an input any row sees, so not refused.
  const SafetensorsFile f = correct_file(p, in);
  const auto k = f.tensors.at("k").to_f32("k");
  EXPECT_TRUE(std::any_of(k.begin(), k.end(), [](float x) { return std::isnan(x); }));
  EXPECT_TRUE(check(f).pass());
}

void expect_refused(SafetensorsFile f, const std::string& fragment, const std::string& what);

// ---------------------------------------------------------------------------------------------
// Padding and unused keys: never inputs, never judged as output rows, checked untouched.

TEST(CheckFileVariants, NaNInPaddingAndUnusedKeysIsNotRefused) {
  std::mt19937_64 g(testing::seed_for(808));
  {  // Dense cache, seqused: keys past the used ones are NaN; a NaN in a used key is refused where it is.
    const Problem p = line("b=2 hq=2 hkv=2 sq=9 skv=30 used=30,11 d=16 dtype=f16 layout=bshd");
    const Inputs in = make_inputs(p, g(), Dist::normal);
    SafetensorsFile f = correct_file(p, in);
    EXPECT_TRUE(check(f).pass());
    // A dense KV cache's cache_seqlens (FlashAttention's kvcache API) are the keys used: the same file.
    SafetensorsFile cache = f;
    cache.tensors["cache_seqlens"] = cache.tensors.at("seqused_k");
    cache.tensors.erase("seqused_k");
    SafetensorsFile read = cache;  // reading releases the payloads it widens
    EXPECT_EQ(read_check_case(read, false).problem, p);
    cache.tensors["seqused_k"] = cache.tensors.at("cache_seqlens");
    expect_refused(cache, "'seqused_k' and 'cache_seqlens' both", "both lengths");
    StTensor& k = f.tensors.at("k");  // [B, S, H, D]: batch 1, key 10 (used), head 1, column 3
    std::vector<float> x = k.to_f32("k");
    x[static_cast<size_t>(((1 * 30 + 10) * 2 + 1) * 16 + 3)] = NAN;
    k = make_tensor(DType::f16, k.shape, x);
    try {
      check(f);
      ADD_FAILURE() << "a NaN in a used key was not refused";
    } catch (const CannotTest& e) {
      EXPECT_NE(std::string(e.what()).find("input 'k' holds NaN at [1,10,1,3]"), std::string::npos) << e.what();
    }
  }
  {  // Varlen: NaN padding rows in q, k, v.
    CheckFileWriteOptions w;
    w.pad_q = 4;
    w.pad_kv = 2;
    const Problem p = line("b=2 hq=2 hkv=1 sq=5,8 skv=9,3 d=16 dtype=bf16 layout=thd");
    const Inputs in = make_inputs(p, g(), Dist::normal);
    SafetensorsFile f = correct_file(p, in, w);
    const CheckFileCase c = read_check_case(f, false);  // not refused
    EXPECT_EQ(c.inputs.q, in.q);
    SafetensorsFile again = correct_file(p, in, w);
    const Report r = check(again);
    EXPECT_TRUE(r.pass()) << summary(r);
  }
}

TEST(CheckFileVariants, PaddingRowsAreCheckedUntouched) {
  std::mt19937_64 g(testing::seed_for(809));
  const Problem p = line("b=3 hq=2 hkv=2 sq=6,0,11 skv=8,4,11 d=16 dtype=bf16 layout=thd causal=bottom_right");
  const Inputs in = make_inputs(p, g(), Dist::normal);
  CheckFileWriteOptions w;
  w.pad_q = 5;
  auto has_note = [](const CheckFileCase& c, const std::string& text) {
    for (const auto& n : c.notes)
      if (n.find(text) != std::string::npos) return true;
    return false;
  };
  {  // Poisoned and untouched.
    SafetensorsFile f = correct_file(p, in, w);
    const CheckFileCase c = read_check_case(f, false);
    EXPECT_EQ(c.padding_written, 0);
    EXPECT_TRUE(has_note(c, "o: the 5 padding row(s) past cu_seqlens_q[-1] still hold flashcheck's poison"));
    EXPECT_TRUE(has_note(c, "lse: the 5 padding row(s)"));
  }
  {  // Poisoned, and a kernel wrote some of it: counted, and a failing criterion.
    SafetensorsFile f = correct_file(p, in, w);
    StTensor& o = f.tensors.at("o");  // [T, Hq, Dv]: tokens 17.. are padding
    std::vector<float> x = o.to_f32("o");
    const int64_t row = p.heads_q * p.head_dim_v;
    const int64_t token = 17 + std::uniform_int_distribution<int64_t>(0, 4)(g);
    const int64_t n = std::uniform_int_distribution<int64_t>(1, row)(g);
    for (int64_t j = 0; j < n; ++j) x[static_cast<size_t>(token * row + j)] = 0.0f;
    o = make_tensor(DType::bf16, o.shape, x);
    SafetensorsFile copy = f;
    const CheckFileCase c = read_check_case(copy, false);
    EXPECT_EQ(c.padding_written, n);
    EXPECT_TRUE(has_note(c, std::to_string(n) + " of " + std::to_string(5 * row) + " elements")) << c.notes.front();
    const Report r = check(f);
    EXPECT_TRUE(failed(r, "padding_written")) << summary(r);
  }
  {  // Never poisoned: not judged, and said so.
    CheckFileWriteOptions plain = w;
    plain.poison_padding = false;
    SafetensorsFile f = correct_file(p, in, plain);
    const CheckFileCase c = read_check_case(f, false);
    EXPECT_FALSE(c.padding_written.has_value());
    EXPECT_TRUE(has_note(c, "are not judged"));
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input: 125 naming the field.

void expect_refused(SafetensorsFile f, const std::string& fragment, const std::string& what) {
  try {
    const Report r = check(f);
    ADD_FAILURE() << what << ": accepted\n" << summary(r);
  } catch (const CannotTest& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << what << ": " << e.what();
  }
}

void set_ints(SafetensorsFile& f, const std::string& name, std::vector<int64_t> values) {
  StTensor& t = f.tensors.at(name);
  t = make_int_tensor(t.dtype, t.shape, values);
}
void set_floats(SafetensorsFile& f, const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
  f.tensors[name] = make_f32_tensor(std::move(shape), values);
}

TEST(CheckFileVariants, BadInputIsRefusedNamingTheField) {
  std::mt19937_64 g(testing::seed_for(810));
  CheckFileWriteOptions w;
  w.pad_q = 2;
  w.pad_kv = 3;
  const Problem thd = line("b=3 hq=2 hkv=1 sq=4,7,5 skv=6,2,9 d=16 dtype=bf16 layout=thd");
  const SafetensorsFile varlen = correct_file(thd, make_inputs(thd, g(), Dist::normal), w);
  // cu_seqlens_q = 0,4,11,16 over 18 rows; cu_seqlens_k = 0,6,8,17 over 20.
  {
    auto f = varlen;
    set_ints(f, "cu_seqlens_q", {1, 4, 11, 16});
    expect_refused(f, "tensor 'cu_seqlens_q' starts at 1; it must start at 0", "cu_seqlens not from 0");
  }
  {
    auto f = varlen;
    set_ints(f, "cu_seqlens_k", {0, 6, 5, 17});
    expect_refused(f, "tensor 'cu_seqlens_k' decreases at [2] (5 after 6)", "decreasing cu_seqlens");
  }
  {
    auto f = varlen;
    set_ints(f, "cu_seqlens_q", {0, 4, 11, 19});
    expect_refused(f, "tensor 'cu_seqlens_q' ends at 19, past the 18 rows of 'q'", "cu_seqlens past the rows");
  }
  {
    auto f = varlen;
    f.tensors["seqused_k"] = make_int_tensor(StDType::I32, {3}, {6, 3, 9});
    expect_refused(f, "seqused_k[1] = 3 exceeds the 2 keys stored for sequence 1", "seqused above stored");
  }
  {
    auto f = varlen;
    f.tensors.erase("cu_seqlens_k");
    expect_refused(f, "cu_seqlens_k", "thd without key starts");
  }
  {
    auto f = varlen;
    f.metadata["layout"] = "bshd";
    expect_refused(f, "cu_seqlens_q", "cu_seqlens with another layout");
  }
  {
    auto f = varlen;
    f.tensors["cu_seqlens_q"] = make_f32_tensor({4}, {0, 4, 11, 16});
    expect_refused(f, "'cu_seqlens_q' has dtype F32; expected I32 or I64", "float cu_seqlens");
  }

  const Problem pg = line("b=2 hq=2 hkv=1 sq=3 skv=9,5 d=16 dtype=f16 layout=bshd page=4 pages=shuffled");
  const Inputs pin = make_inputs(pg, g(), Dist::normal);
  const SafetensorsFile paged = correct_file(pg, pin);
  const int64_t max_pages = pin.max_pages(2);  // 3: sequence 0 needs 3 pages, sequence 1 needs 2
  {
    auto f = paged;
    std::vector<int64_t> t(pin.block_table.begin(), pin.block_table.end());
    t[1] = -1;
    set_ints(f, "block_table", t);
    expect_refused(f, "block_table[0][1] = -1 is negative", "negative block_table entry");
    t[1] = pin.num_pages;
    set_ints(f, "block_table", t);
    expect_refused(f, "block_table[0][1] = " + std::to_string(pin.num_pages) + " is past the cache's", "block_table out of range");
    // Entries past a sequence's last page are never read: anything goes there.
    t = std::vector<int64_t>(pin.block_table.begin(), pin.block_table.end());
    t[static_cast<size_t>(max_pages + 2)] = -1;
    set_ints(f, "block_table", t);
    EXPECT_TRUE(check(f).pass());
  }
  {
    auto f = paged;
    for (const char* name : {"k", "v"}) {
      StTensor& t = f.tensors.at(name);
      t.shape[1] = 0;
      t.data.clear();
    }
    expect_refused(f, "page_size", "page_size 0");
  }
  {
    auto f = paged;
    f.tensors.erase("cache_seqlens");
    expect_refused(f, "cache_seqlens", "paged without cache lengths");
  }
  {
    auto f = paged;
    set_ints(f, "cache_seqlens", {13, 5});
    expect_refused(f, "sequence 0 needs 4", "cache longer than its table row");
  }

  const Problem fp8 = line("b=2 hq=2 hkv=2 sq=8 skv=8 d=16 dtype=e4m3 descale=head");
  const SafetensorsFile e4m3 = correct_file(fp8, make_inputs(fp8, g(), Dist::normal));
  for (float bad : {0.0f, NAN, INFINITY, -1.0f}) {
    auto f = e4m3;
    std::vector<float> d = f.tensors.at("k_descale").to_f32("k_descale");
    d[3] = bad;
    set_floats(f, "k_descale", {2, 2}, d);
    expect_refused(f, "tensor 'k_descale' holds", "descale " + std::to_string(bad));
  }
  {
    auto f = e4m3;
    set_floats(f, "q_descale", {3}, {1, 1, 1});
    expect_refused(f, "tensor 'q_descale' has shape [3]", "descale of the wrong shape");
  }
  {
    auto f = e4m3;
    f.tensors["o"] = make_tensor(DType::f32, f.tensors.at("o").shape, f.tensors.at("o").to_f32("o"));
    expect_refused(f, "with fp8 inputs o must be BF16 or F16", "fp8 with an f32 output");
  }

  const Problem dense = line("b=2 hq=4 hkv=2 sq=10 skv=12 d=16 dtype=bf16 alibi=symmetric sinks=1");
  const SafetensorsFile alibi = correct_file(dense, make_inputs(dense, g(), Dist::normal));
  {
    auto f = alibi;
    set_floats(f, "alibi_slopes", {3}, {0.5f, 0.25f, 0.125f});
    expect_refused(f, "tensor 'alibi_slopes' has shape [3]; expected [Hq] = [4] or [B, Hq] = [2,4]", "slopes of the wrong length");
  }
  {
    auto f = alibi;
    f.metadata.erase("alibi");
    expect_refused(f, "tensor 'alibi_slopes' needs metadata alibi", "slopes without their form");
    f.metadata["alibi"] = "linear";
    expect_refused(f, "metadata alibi must be 'symmetric'", "an unknown ALiBi form");
  }
  {
    auto f = alibi;
    f.tensors.erase("alibi_slopes");
    expect_refused(f, "no tensor 'alibi_slopes'", "ALiBi without slopes");
  }
  {
    auto f = alibi;
    set_floats(f, "sinks", {2}, {0.f, 1.f});
    expect_refused(f, "tensor 'sinks' has shape [2]", "sinks of the wrong length");
  }
  {
    auto f = alibi;
    set_floats(f, "q_descale", {1}, {1.f});
    expect_refused(f, "'q_descale' is for fp8 inputs", "descale on bf16");
  }
  {
    auto f = alibi;
    f.tensors["descale_q"] = make_f32_tensor({1}, {1.f});
    expect_refused(f, "fp8 descale factors are 'q_descale'", "the logical name of a descale");
  }
  for (const auto& [key, value, fragment] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"window", "5", "metadata window must be"},
                                                                      {"window", "3,x", "metadata window must be"},
                                                                      {"window", "-2,0", "window bounds must be >= -1"},
                                                                      {"softcap", "-1", "softcap must be finite"},
                                                                      {"softcap", "big", "metadata softcap must be a number"},
                                                                      {"layout", "hbsd", "metadata layout must be"},
                                                                      {"window_convention", "exclusive", "window_convention"},
                                                                      {"alibi_lse", "offset", "metadata alibi_lse"}}) {
    auto f = alibi;
    f.metadata[key] = value;
    expect_refused(f, fragment, key + "=" + value);
  }
  {
    auto f = alibi;
    f.metadata["window"] = "0,3";
    f.metadata["window_convention"] = "left_exclusive";
    expect_refused(f, "a left bound of 0 in the left_exclusive convention", "an exclusive left bound of 0");
  }
  {  // A layout whose shapes disagree: a BHSD file declared BSHD.
    auto f = alibi;
    f.metadata["layout"] = "bshd";
    expect_refused(f, "tensor '", "bhsd file declared bshd");
  }
  {  // v from another problem: its shape disagrees with k's.
    auto f = alibi;
    StTensor& v = f.tensors.at("v");
    v.shape[2] = 11;
    v.data.resize(v.data.size() / 12 * 11);
    expect_refused(f, "tensor 'v' has shape [2,2,11,16], expected [2,2,12,16]", "v shorter than k");
  }
  {  // A near miss of a new name is refused; an unknown key is a note.
    auto f = alibi;
    f.tensors["cu_seqlen_q"] = make_int_tensor(StDType::I32, {3}, {0, 10, 20});
    expect_refused(f, "did you mean 'cu_seqlens_q'", "a misspelt tensor");
    auto h = alibi;
    h.metadata["trained_on"] = "wikitext";
    const Report r = check(h);
    EXPECT_TRUE(r.pass());
    bool noted = false;
    for (const auto& n : r.notes) noted = noted || n.find("'trained_on'") != std::string::npos;
    EXPECT_TRUE(noted);
  }
}

// Never a crash, never another error: random damage to a valid file of any variant (an index entry
// moved, a dimension changed, a tensor or key dropped, a metadata value replaced) is judged or
// refused as CannotTest.
TEST(CheckFileVariants, RandomDamageIsJudgedOrRefused) {
  std::mt19937_64 g(testing::seed_for(812));
  auto pick = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(g); };
  const std::vector<std::string> values = {"", "-1", "0", "1", "2,1", "-1,-1", "nan", "inf", "1e400", "thd", "bshd",
                                           "bhsd", "signed", "symmetric", "left_exclusive", "top_left", "e", "+inf"};
  const std::vector<std::string> keys = {"layout", "window", "window_convention", "softcap", "alibi", "alibi_lse", "causal",
                                         "scale", "lse_base", "empty_row_lse"};
  int refused = 0, judged = 0;
  for (int n = 0; n < 150; ++n) {
    const Problem p = random_variant_problem(g);
    const Inputs in = make_inputs(p, g(), Dist::normal);
    const Truth t = oracle(p, in);
    CheckFileWriteOptions w;
    w.pad_q = pick(3);
    w.pad_kv = pick(3);
    SafetensorsFile f = make_check_file(p, in, t.o, &t.lse, w);
    std::vector<std::string> names;
    for (const auto& [name, _] : f.tensors) names.push_back(name);
    std::string what;
    for (int hits = 1 + static_cast<int>(pick(2)); hits-- > 0;) {
      const std::string name = names[static_cast<size_t>(pick(static_cast<int64_t>(names.size())))];
      StTensor& x = f.tensors.at(name);
      switch (pick(4)) {
        case 0:  // one element of an index tensor anywhere near its range
          if (x.dtype == StDType::I32 || x.dtype == StDType::I64) {
            std::vector<int64_t> v = x.to_i64(name);
            if (!v.empty()) v[static_cast<size_t>(pick(static_cast<int64_t>(v.size())))] = pick(80) - 5;
            x = make_int_tensor(x.dtype, x.shape, v);
            what += " " + name + " entry";
          }
          break;
        case 1:  // one dimension changed, the bytes kept consistent with it
          if (!x.shape.empty()) {
            const size_t d = static_cast<size_t>(pick(static_cast<int64_t>(x.shape.size())));
            x.shape[d] = pick(4);
            x.data.assign(static_cast<size_t>(x.numel() * st_dtype_bytes(x.dtype)), 0);
            what += " " + name + " dim " + std::to_string(d);
          }
          break;
        case 2:
          f.tensors.erase(name);
          names.erase(std::find(names.begin(), names.end(), name));
          what += " no " + name;
          break;
        case 3: {
          const std::string key = keys[static_cast<size_t>(pick(static_cast<int64_t>(keys.size())))];
          f.metadata[key] = values[static_cast<size_t>(pick(static_cast<int64_t>(values.size())))];
          what += " " + key + "=" + f.metadata[key];
          break;
        }
      }
      if (names.empty()) break;
    }
    SCOPED_TRACE(to_string(p) + " damaged:" + what);
    try {
      check(f);
      ++judged;
    } catch (const CannotTest&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL() << "neither judged nor refused: " << e.what();
    }
  }
  EXPECT_GT(refused, 30);
  EXPECT_GT(judged, 5);
}

// The command line: exit 0 for a correct paged file, 1 for a kernel that missed its sink, 125 for a
// malformed varlen file, as `git bisect run` sees them.
int cli(const fs::path& file) {
  const std::string cmd = std::string("'") + FLASHCHECK_CLI + "' check '" + file.string() + "' >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CheckFileVariants, CommandLineExitCodes) {
  std::mt19937_64 g(testing::seed_for(811));
  const Problem pg = line("b=2 hq=4 hkv=2 sq=3 skv=21,9 d=32 dtype=bf16 layout=bshd page=8 pages=shared causal=bottom_right");
  const fs::path good = scratch_file("cli_good");
  write_safetensors(good, correct_file(pg, make_inputs(pg, g(), Dist::normal)));
  EXPECT_EQ(cli(good), kPass);
  const Problem sk = line("b=1 hq=2 hkv=2 sq=20 skv=20 d=32 dtype=bf16 sinks=1");
  Inputs in = make_inputs(sk, g(), Dist::normal);
  in.sinks = {3.0f, 2.5f};
  Problem wrong = sk;
  wrong.sinks = false;
  Inputs win = in;
  win.sinks.clear();
  const fs::path bad = scratch_file("cli_bad");
  write_safetensors(bad, buggy_file(sk, in, wrong, win));
  EXPECT_EQ(cli(bad), kMismatch);
  const Problem thd = line("b=2 hq=2 hkv=2 sq=3,4 skv=5,6 d=16 dtype=f16 layout=thd");
  SafetensorsFile f = correct_file(thd, make_inputs(thd, g(), Dist::normal));
  set_ints(f, "cu_seqlens_q", {0, 5, 4});
  const fs::path malformed = scratch_file("cli_malformed");
  write_safetensors(malformed, f);
  EXPECT_EQ(cli(malformed), kCannotTest);
  for (const auto& p : {good, bad, malformed}) fs::remove(p);
}

}  // namespace
}  // namespace flashcheck
