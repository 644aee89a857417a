// The error maps name the tile, row and column a kernel went wrong in, the default path is untouched
// by them, and the HTML page built from them loads in a real headless browser without script
// errors and draws its heatmaps (skipped, saying so, where no chromium is installed).
#include "verify/report_html.h"

#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "reference/replica.h"
#include "testing/test_seed.h"
#include "verify/headless_chromium.h"
#include "verify/judge.h"
#include "verify/expected.h"
#include "verify/metrics.h"

namespace flashcheck {
namespace {

// Bottom-right causal with Sq = Skv and 64-row tiles: row r's last visible key is r, so the
// broken rows 130..140 sit in cell (q-tile 2, kv-tile 2) and row 299 in cell (4, 4).
struct Broken {
  Problem p{1, 2, 1, 300, 300, 64, 64, Causal::bottom_right, {}, DType::f16};
  Inputs in;
  std::vector<float> o, lse;
  Declared declared{LseBase::e, EmptyRowLse::neg_inf, 64, 64};

  Broken() {
    in = make_inputs(p, flashcheck::testing::seed_for(301));
    ReplicaResult good = replica_attention(p, in, ReplicaConfig{});
    o = good.o;
    lse = good.lse;
    const int64_t dv = p.head_dim_v;
    auto at = [&](int64_t h, int64_t row, int64_t col) -> float& { return o[static_cast<size_t>((h * p.seq_q + row) * dv + col)]; };
    for (int64_t row = 130; row <= 140; ++row)
      for (int64_t c = 0; c < dv; ++c) at(1, row, c) = round_to(p.dtype, at(1, row, c) + 0.5f);
    at(0, 299, 3) = poison_value(p.dtype);
    lse[static_cast<size_t>(1 * p.seq_q + 135)] += 1.0f;
  }
  Report judge_it(bool maps) const {
    return judge(p, in, KernelOutput{o, lse, std::nullopt}, declared, JudgeOptions{kDefaultMaxRows, maps});
  }
};

TEST(ErrorMaps, NameTheBrokenTilesRowsAndColumns) {
  Broken b;
  const Report r = b.judge_it(true);
  ASSERT_FALSE(r.pass());
  ASSERT_TRUE(r.maps);
  const ErrorMaps& m = *r.maps;
  EXPECT_EQ(m.q_tiles, 5);
  EXPECT_EQ(m.kv_tiles, 5);
  // The hottest measured cell is the perturbed one, far past the limit; a clean cell stays under it.
  size_t hot = 0;
  for (size_t i = 0; i < m.tile_ratio.size(); ++i)
    if (m.tile_ratio[i] > m.tile_ratio[hot]) hot = i;
  EXPECT_EQ(hot, size_t{2 * 5 + 2});
  EXPECT_GT(m.tile_ratio[hot], 10.0f);
  EXPECT_LT(m.tile_ratio[1 * 5 + 1], 1.0f);
  // Bottom-right with Sq = Skv: a row's last visible key is in its own tile, so off-diagonal cells hold no row.
  EXPECT_TRUE(std::isnan(m.tile_ratio[0 * 5 + 3]));
  EXPECT_EQ(m.tile_flagged[4 * 5 + 4], 1);
  EXPECT_EQ(m.flagged_total, 1);
  ASSERT_EQ(m.flagged.size(), 1u);
  EXPECT_EQ(m.flagged[0].h, 0);
  EXPECT_EQ(m.flagged[0].row, 299);
  EXPECT_EQ(m.flagged[0].col, 3);
  EXPECT_EQ(m.flagged[0].flag, MapFlag::unwritten);
  // The worst element is the unwritten one (flagged elements come first), so its head is shown.
  EXPECT_EQ(m.head_h, 0);
  EXPECT_EQ(m.head_flag[static_cast<size_t>(299 * 64 + 3)], MapFlag::unwritten);
  EXPECT_TRUE(std::isnan(m.head_ratio[static_cast<size_t>(299 * 64 + 3)]));
  // LSE: row 135 of head 1 is off by 1, far past its tolerance; its neighbours are not.
  ASSERT_EQ(m.lse_ratio_max.size(), 300u);
  EXPECT_GT(m.lse_ratio_max[135], 10.0f);
  EXPECT_LT(m.lse_ratio_max[134], 1.0f);
}

TEST(ErrorMaps, AreNotComputedUnlessAskedAndChangeNothingElse) {
  Broken b;
  const Report plain = b.judge_it(false), mapped = b.judge_it(true);
  EXPECT_FALSE(plain.maps);
  EXPECT_EQ(to_text(plain), to_text(mapped));
  EXPECT_EQ(to_json(plain), to_json(mapped));
}

// Writes `page` to a temporary file and returns chromium's DOM of it (nullopt: no chromium).
std::optional<std::string> render_dom(const std::string& page, const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() / ("fc_html_" + tag + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "report.html";
  std::ofstream(file) << page;
  auto dom = flashcheck::testing::dump_dom(file);
  std::filesystem::remove_all(dir);
  return dom;
}

// The attributes of the serialized <html> element of `page` as chromium rendered it.
std::optional<std::map<std::string, std::string>> render(const std::string& page, const std::string& tag) {
  const auto dom = render_dom(page, tag);
  if (!dom) return std::nullopt;
  return flashcheck::testing::html_attributes(*dom);
}

TEST(ReportHtml, LoadsInHeadlessChromiumAndDrawsTheHeatmaps) {
  Broken b;
  Report r = b.judge_it(true);
  r.repro = "flashcheck check broken.safetensors";
  const std::string page = to_html(r);
  EXPECT_EQ(page.find("http"), std::string::npos) << "the page must load nothing from the network";
  EXPECT_NE(page.find("flashcheck check broken.safetensors"), std::string::npos);
  const auto attrs = render(page, "ok");
  if (!attrs) GTEST_SKIP() << "chromium is not installed (apt-get install chromium; .ci/run installs it): page not rendered";
  auto get = [&](const std::string& k) {
    auto it = attrs->find(k);
    return it == attrs->end() ? std::string("(absent)") : it->second;
  };
  EXPECT_EQ(get("data-script-error"), "(absent)");
  EXPECT_EQ(get("data-drawn"), "tiles,head,lse");
  // The page decoded the maps itself: its hottest tile and its flagged tile are the broken ones.
  EXPECT_EQ(get("data-hot-tile"), "2,2");
  EXPECT_EQ(get("data-flagged-tiles"), "4,4");
  for (const char* id : {"tiles", "head", "lse"}) {
    EXPECT_GT(std::atoll(get(std::string("data-painted-") + id).c_str()), 0) << id;
    EXPECT_GE(std::atoll(get(std::string("data-colours-") + id).c_str()), 2) << id << " is drawn in one colour";
  }
}

TEST(ReportHtml, AScriptErrorIsCaughtByTheBrowserCheck) {
  // The check above would pass vacuously if errors never reached the page: break the script on
  // purpose and the marker must appear.
  Broken b;
  std::string page = to_html(b.judge_it(true));
  const std::string anchor = "const m = data.maps;";
  const size_t at = page.find(anchor);
  ASSERT_NE(at, std::string::npos);
  page.replace(at, anchor.size(), "const m = data.maps.missing.field;");
  const auto attrs = render(page, "broken");
  if (!attrs) GTEST_SKIP() << "chromium is not installed (apt-get install chromium; .ci/run installs it): page not rendered";
  EXPECT_TRUE(attrs->count("data-script-error")) << "no script error reported for a broken script";
  EXPECT_FALSE(attrs->count("data-drawn"));
}

const flashcheck::testing::DomRow* row_of(const std::vector<flashcheck::testing::DomRow>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.attrs.at("data-criterion") == name) return &r;
  return nullptr;
}

// Pages of three real verdicts, read back from chromium's DOM: an all-unwritten output (every value
// criterion n/a, no "cos=1"), a few-distinct-values output rounded the wrong way (rounding_bias over
// its limit, reported only) and a correct kernel on huge scores (LSE far past the flat atol, shown
// against its row's own limit). Before: `ok cosine 1` and `ok lse 16 / 1e-05`.
TEST(ReportHtml, TheRenderedVerdictNeverSaysOkPastALimit) {
  struct Page {
    std::string tag;
    Report r;
  };
  std::vector<Page> pages;
  {
    Problem p{1, 2, 1, 40, 50, 32, 32, Causal::none, {}, DType::bf16};
    const Inputs in = make_inputs(p, flashcheck::testing::seed_for(311));
    const std::vector<float> o(static_cast<size_t>(p.o_elems()), poison_value(p.dtype));
    pages.push_back({"unwritten", judge(p, in, KernelOutput{o, std::nullopt, std::nullopt}, Declared{}, JudgeOptions{kDefaultMaxRows, true})});
  }
  {
    Problem p{1, 4, 2, 1, 63, 256, 256, Causal::none, {}, DType::f16};
    const Inputs in = make_inputs(p, flashcheck::testing::seed_for(312), Dist::constant_rows);
    const Expected ref = make_expected(p, in);
    std::vector<float> o(ref.oracle.o.size());
    for (size_t e = 0; e < o.size(); ++e)
      o[e] = f16_bits_to_f32(static_cast<uint16_t>(f32_to_f16_bits(round_nearest_even(p.dtype, ref.oracle.o[e])) + 1));
    pages.push_back({"wrong_way", judge(p, in, KernelOutput{o, std::nullopt, std::nullopt}, Declared{}, JudgeOptions{kDefaultMaxRows, true})});
  }
  {
    Problem p{1, 2, 2, 50, 70, 64, 64, Causal::bottom_right, 1.0, DType::bf16};
    const Inputs in = make_inputs(p, flashcheck::testing::seed_for(313), Dist::large);
    ReplicaConfig cfg;
    cfg.finite_neg_inf = false;
    const ReplicaResult good = replica_attention(p, in, cfg);
    pages.push_back({"large_lse", judge(p, in, KernelOutput{good.o, good.lse, std::nullopt}, Declared{}, JudgeOptions{kDefaultMaxRows, true})});
  }
  {
    Broken b;
    pages.push_back({"broken", b.judge_it(true)});
  }
  for (const Page& pg : pages) {
    SCOPED_TRACE(pg.tag);
    const auto dom = render_dom(to_html(pg.r), "honest_" + pg.tag);
    if (!dom) GTEST_SKIP() << "chromium is not installed (apt-get install chromium; .ci/run installs it): page not rendered";
    EXPECT_EQ(flashcheck::testing::html_attributes(*dom).count("data-script-error"), 0u);
    const auto rows = flashcheck::testing::rows_with(*dom, "data-criterion");
    ASSERT_EQ(rows.size(), pg.r.criteria.size());
    for (const auto& row : rows) flashcheck::testing::expect_honest_row(row);
    if (pg.tag == "unwritten") {
      for (const char* name : {"cosine", "rel_l2", "baseline_relative", "ulp", "rounding_bias"}) {
        ASSERT_TRUE(row_of(rows, name)) << name;
        EXPECT_EQ(row_of(rows, name)->cells[0], "n/a") << name;
      }
      EXPECT_NE(dom->find("Metrics: n/a"), std::string::npos);
      EXPECT_EQ(dom->find("cos=1"), std::string::npos);
    }
    if (pg.tag == "wrong_way") {
      ASSERT_TRUE(row_of(rows, "rounding_bias"));
      EXPECT_EQ(row_of(rows, "rounding_bias")->cells[0], "over limit (reported only)");
    }
    if (pg.tag == "large_lse") {
      ASSERT_TRUE(row_of(rows, "lse"));
      EXPECT_EQ(row_of(rows, "lse")->cells[0], "ok");
      EXPECT_GT(std::strtod(row_of(rows, "lse")->cells[2].c_str(), nullptr), 1e-5) << "the LSE error is past the flat atol";
    }
  }
}

// The check above must be able to fail: a page that says "ok" beside a value past its limit, as
// the old pages did, is caught by the same reading of the DOM.
TEST(ReportHtml, TheDomCheckCatchesAnOkPastItsLimit) {
  Broken b;
  std::string page = to_html(b.judge_it(true));
  // The first failing row (unwritten 1 > 0), relabelled "ok" in its attribute and its cell alike.
  const std::string fail_cell = "data-status=\"FAIL\" class=\"bad\"><td class=\"fail\">FAIL</td>";
  const size_t at = page.find(fail_cell);
  ASSERT_NE(at, std::string::npos);
  page.replace(at, fail_cell.size(), "data-status=\"ok\"><td class=\"pass\">ok</td>");
  const auto dom = render_dom(page, "forged");
  if (!dom) GTEST_SKIP() << "chromium is not installed (apt-get install chromium; .ci/run installs it): page not rendered";
  const auto rows = flashcheck::testing::rows_with(*dom, "data-criterion");
  bool caught = false;
  for (const auto& row : rows) {
    ::testing::TestPartResultArray failures;
    {
      ::testing::ScopedFakeTestPartResultReporter reporter(::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      flashcheck::testing::expect_honest_row(row);
    }
    caught |= failures.size() > 0;
  }
  EXPECT_TRUE(caught) << "a forged ok beside a failing value went unnoticed";
}

TEST(ReportHtml, WithoutMapsThePageSaysSo) {
  Broken b;
  const std::string page = to_html(b.judge_it(false));
  EXPECT_NE(page.find("No error maps"), std::string::npos);
  EXPECT_NE(page.find("baseline_relative"), std::string::npos);
}

}  // namespace
}  // namespace flashcheck
