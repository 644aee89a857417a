// The error maps name the tile, row and column a kernel went wrong in, the default path is untouched
// by them, and the HTML page built from them loads in a real headless browser without script
// errors and draws its heatmaps (skipped, saying so, where no chromium is installed).
#include "verify/report_html.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "reference/replica.h"
#include "testing/test_seed.h"
#include "verify/judge.h"
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

// Runs chromium headless on `page` and returns the attributes of the serialized <html> element.
std::optional<std::map<std::string, std::string>> render(const std::string& page, const std::string& tag) {
  const char* candidates[] = {"chromium", "chromium-browser", "google-chrome"};
  std::string browser;
  for (const char* c : candidates)
    if (std::system(("command -v " + std::string(c) + " >/dev/null 2>&1").c_str()) == 0) {
      browser = c;
      break;
    }
  if (browser.empty()) return std::nullopt;
  const auto dir = std::filesystem::temp_directory_path() / ("fc_html_" + tag + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "report.html";
  std::ofstream(file) << page;
  // --no-sandbox: CI runs as root, where chromium refuses its sandbox; the page is our own.
  const std::string cmd = "timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --user-data-dir=" +
                          (dir / "profile").string() + " --virtual-time-budget=10000 --dump-dom file://" + file.string() +
                          " 2>/dev/null";
  std::string dom;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) dom.append(buf, n);
    pclose(f);
  }
  std::filesystem::remove_all(dir);
  std::map<std::string, std::string> attrs;
  std::smatch tag_m;
  if (!std::regex_search(dom, tag_m, std::regex("<html([^>]*)>"))) {
    attrs["(no html element in the dump)"] = dom.substr(0, 200);
    return attrs;
  }
  const std::string s = tag_m[1];
  const std::regex attr(R"re(([a-z-]+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), attr); it != std::sregex_iterator(); ++it)
    attrs[(*it)[1]] = (*it)[2];
  return attrs;
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

TEST(ReportHtml, WithoutMapsThePageSaysSo) {
  Broken b;
  const std::string page = to_html(b.judge_it(false));
  EXPECT_NE(page.find("No error maps"), std::string::npos);
  EXPECT_NE(page.find("baseline_relative"), std::string::npos);
}

}  // namespace
}  // namespace flashcheck
