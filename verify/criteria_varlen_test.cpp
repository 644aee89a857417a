// The criteria on batches whose sequences differ (varlen, seqused_k): every row is judged against
// its own sequence's keys and alignment, empty rows come from that sequence, and the report says
// which sequence failed.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "reference/mask.h"
#include "reference/replica.h"
#include "reference/sequences.h"
#include "testing/test_seed.h"
#include "verify/criteria.h"
#include "verify/judge.h"

namespace flashcheck {
namespace {

// A varlen batch with an empty sequence, a one-token one, one without keys and a long one, in a
// random order, so no sequence's place in the batch is special.
Problem random_varlen(std::mt19937_64& g, DType dt) {
  std::vector<std::pair<int64_t, int64_t>> lens = {{0, 7}, {1, 1}, {5, 0}, {40, 33}, {13, 20}};
  std::shuffle(lens.begin(), lens.end(), g);
  std::string sq, skv;
  for (auto [a, b] : lens) {
    sq += (sq.empty() ? "" : ",") + std::to_string(a);
    skv += (skv.empty() ? "" : ",") + std::to_string(b);
  }
  const char* causal = std::uniform_int_distribution<int>(0, 1)(g) ? "bottom_right" : "top_left";
  return parse_problem("b=5 hq=4 hkv=2 sq=" + sq + " skv=" + skv + " d=64 causal=" + causal + " layout=thd dtype=" +
                       std::string(to_string(dt)));
}

// A sequence with a row that sees at least one key, and that row.
std::pair<int64_t, int64_t> a_visible_row(const Problem& p, std::mt19937_64& g) {
  std::vector<std::pair<int64_t, int64_t>> rows;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.sq(b); ++i)
      if (!visible_range(p, b, i).empty()) rows.emplace_back(b, i);
  return rows[std::uniform_int_distribution<size_t>(0, rows.size() - 1)(g)];
}

struct Judged {
  Problem p;
  Inputs in;
  ReplicaResult good;
};

Judged make(std::mt19937_64& g, DType dt) {
  Judged j{random_varlen(g, dt), {}, {}};
  j.in = make_inputs(j.p, g(), Dist::normal);
  j.good = replica_attention(j.p, j.in);
  return j;
}

Report judge_of(const Judged& j, const std::vector<float>& o, const std::vector<float>& lse, const JudgeOptions& opt = {}) {
  return judge(j.p, j.in, KernelOutput{o, std::span<const float>(lse)}, Declared{}, opt);
}

TEST(VarlenVerdict, ACorrectKernelPassesAndSoDoesEverySequence) {
  std::mt19937_64 g(testing::seed_for(1201));
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Judged j = make(g, dt);
    const Report r = judge_of(j, j.good.o, j.good.lse);
    EXPECT_TRUE(r.pass()) << to_text(r);
    ASSERT_EQ(r.sequences.size(), 5u) << to_text(r);
    for (const SequenceVerdict& v : r.sequences) {
      EXPECT_TRUE(v.pass) << "sequence " << v.b << "\n" << to_text(r);
      EXPECT_EQ(v.sq, j.p.sq(v.b));
      EXPECT_EQ(v.skv, j.p.skv(v.b));
    }
    EXPECT_NE(to_text(r).find("sequences: all 5 pass"), std::string::npos) << to_text(r);
  }
}

// One wrong element: the verdict fails, and it is that element's sequence the report names, its
// worst element included; every other sequence passes.
TEST(VarlenVerdict, OneWrongElementNamesItsSequence) {
  std::mt19937_64 g(testing::seed_for(1202));
  for (int trial = 0; trial < 6; ++trial) {
    const Judged j = make(g, trial % 2 ? DType::bf16 : DType::f16);
    const auto [b, i] = a_visible_row(j.p, g);
    const int64_t h = std::uniform_int_distribution<int64_t>(0, j.p.heads_q - 1)(g);
    const int64_t c = std::uniform_int_distribution<int64_t>(0, j.p.head_dim_v - 1)(g);
    std::vector<float> o = j.good.o;
    const Sequences seqs(j.p);
    float& x = o[static_cast<size_t>(seqs.o_row(b, h, i) + c)];
    x = round_to(j.p.dtype, x + 0.75f);
    const Report r = judge_of(j, o, j.good.lse);
    SCOPED_TRACE("sequence " + std::to_string(b) + " h " + std::to_string(h) + " row " + std::to_string(i) + "\n" + to_text(r));
    EXPECT_FALSE(r.pass());
    ASSERT_TRUE(r.worst.has_value());
    EXPECT_EQ(r.worst->b, b);
    EXPECT_EQ(r.worst->h, h);
    EXPECT_EQ(r.worst->row, i);
    EXPECT_EQ(r.worst->col, c);
    for (const SequenceVerdict& v : r.sequences) EXPECT_EQ(v.pass, v.b != b) << "sequence " << v.b;
    EXPECT_NE(to_text(r).find("FAIL sequence " + std::to_string(b) + " "), std::string::npos);
  }
}

// A sequence without keys: its rows are empty, so O must be exactly 0 there (and LSE -inf). NaN in
// them (the 0/0 of an unguarded kernel) fails empty_rows, and that sequence.
TEST(VarlenVerdict, RowsOfASequenceWithoutKeysMustBeZero) {
  std::mt19937_64 g(testing::seed_for(1203));
  const Judged j = make(g, DType::bf16);
  int64_t keyless = -1;
  for (int64_t b = 0; b < j.p.batch; ++b)
    if (j.p.skv(b) == 0 && j.p.sq(b) > 0) keyless = b;
  ASSERT_GE(keyless, 0);
  const Sequences seqs(j.p);
  std::vector<float> o = j.good.o, lse = j.good.lse;
  const int64_t i = std::uniform_int_distribution<int64_t>(0, j.p.sq(keyless) - 1)(g);
  for (int64_t c = 0; c < j.p.head_dim_v; ++c) o[static_cast<size_t>(seqs.o_row(keyless, 1, i) + c)] = NAN;
  Report r = judge_of(j, o, j.good.lse);
  EXPECT_FALSE(r.pass()) << to_text(r);
  EXPECT_EQ(r.empty_row_violations, j.p.head_dim_v) << to_text(r);
  for (const SequenceVerdict& v : r.sequences) EXPECT_EQ(v.pass, v.b != keyless) << "sequence " << v.b << "\n" << to_text(r);
  // Its LSE: -inf is the convention; a finite value (a kernel that summed nothing as exp(0)) fails.
  lse[static_cast<size_t>(seqs.lse_at(keyless, 2, i))] = 0.0f;
  r = judge_of(j, j.good.o, lse);
  EXPECT_FALSE(r.pass()) << to_text(r);
  for (const SequenceVerdict& v : r.sequences) EXPECT_EQ(v.pass, v.b != keyless) << "sequence " << v.b << "\n" << to_text(r);
}

// Each sequence has its own alignment: an output computed with another sequence's lengths (as a
// kernel that used the batch's max lengths for every sequence would) fails, in that sequence.
TEST(VarlenVerdict, AnOutputAlignedWithTheWrongLengthsFails) {
  std::mt19937_64 g(testing::seed_for(1204));
  Problem p = parse_problem("b=3 hq=2 hkv=2 sq=6,30,9 skv=17,30,40 d=32 causal=bottom_right layout=thd dtype=f16");
  const Inputs in = make_inputs(p, g(), Dist::normal);
  const ReplicaResult good = replica_attention(p, in);
  // Sequence 2 computed top-left (d = 0 instead of skv - sq = 31): its rows see too few keys.
  Problem tl = p;
  tl.causal = Causal::top_left;
  const ReplicaResult wrong = replica_attention(tl, in);
  const Sequences seqs(p);
  std::vector<float> o = good.o, lse = good.lse;
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < p.sq(2); ++i) {
      for (int64_t c = 0; c < p.head_dim_v; ++c) {
        const size_t e = static_cast<size_t>(seqs.o_row(2, h, i) + c);
        o[e] = wrong.o[e];
      }
      lse[static_cast<size_t>(seqs.lse_at(2, h, i))] = wrong.lse[static_cast<size_t>(seqs.lse_at(2, h, i))];
    }
  const Report r = judge(p, in, KernelOutput{o, std::span<const float>(lse)}, Declared{});
  EXPECT_FALSE(r.pass()) << to_text(r);
  ASSERT_EQ(r.sequences.size(), 3u);
  EXPECT_TRUE(r.sequences[0].pass && r.sequences[1].pass) << to_text(r);
  EXPECT_FALSE(r.sequences[2].pass) << to_text(r);
}

// Sampled rows are drawn per sequence; a wrong sampled row is still placed in its own sequence.
TEST(VarlenVerdict, SampledRowsAreJudgedInTheirOwnSequence) {
  std::mt19937_64 g(testing::seed_for(1205));
  Problem p = parse_problem("b=3 hq=2 hkv=1 sq=300,0,150 skv=280,5,200 d=32 causal=bottom_right layout=thd dtype=bf16");
  const Inputs in = make_inputs(p, g(), Dist::normal);
  const ReplicaResult good = replica_attention(p, in);
  JudgeOptions opt;
  opt.max_rows = 16;
  Report r = judge(p, in, KernelOutput{good.o, std::span<const float>(good.lse)}, Declared{}, opt);
  EXPECT_TRUE(r.pass()) << to_text(r);
  EXPECT_TRUE(r.sampled);
  // Row 0 and the last row of a sequence are always sampled (a tile's edge rows).
  const Sequences seqs(p);
  std::vector<float> o = good.o;
  const int64_t b = std::uniform_int_distribution<int>(0, 1)(g) ? 2 : 0, i = p.sq(b) - 1;
  o[static_cast<size_t>(seqs.o_row(b, 1, i) + 3)] += 1.0f;
  r = judge(p, in, KernelOutput{o, std::span<const float>(good.lse)}, Declared{}, opt);
  EXPECT_FALSE(r.pass()) << to_text(r);
  ASSERT_TRUE(r.worst.has_value());
  EXPECT_EQ(r.worst->b, b) << to_text(r);
  EXPECT_EQ(r.worst->row, i) << to_text(r);
  EXPECT_FALSE(r.sequences[static_cast<size_t>(b)].pass) << to_text(r);
}

// The error maps behind the HTML page show the worst element's sequence, with that sequence's rows.
TEST(VarlenVerdict, ErrorMapsShowTheFailingSequencesRows) {
  std::mt19937_64 g(testing::seed_for(1206));
  const Judged j = make(g, DType::f16);
  const auto [b, i] = a_visible_row(j.p, g);
  std::vector<float> o = j.good.o;
  const Sequences seqs(j.p);
  o[static_cast<size_t>(seqs.o_row(b, 0, i))] = NAN;
  JudgeOptions opt;
  opt.error_maps = true;
  const Report r = judge_of(j, o, j.good.lse, opt);
  ASSERT_TRUE(r.maps.has_value());
  EXPECT_EQ(r.maps->head_b, b);
  EXPECT_EQ(static_cast<int64_t>(r.maps->rows.size()), j.p.sq(b));
  EXPECT_EQ(r.maps->head_flag.size(), static_cast<size_t>(j.p.sq(b) * j.p.head_dim_v));
  EXPECT_EQ(r.maps->head_flag[static_cast<size_t>(i * j.p.head_dim_v)], MapFlag::nan_mismatch);
  ASSERT_EQ(r.maps->flagged_total, 1);
  EXPECT_EQ(r.maps->flagged[0].b, b);
  EXPECT_EQ(r.maps->flagged[0].row, i);
}

}  // namespace
}  // namespace flashcheck
