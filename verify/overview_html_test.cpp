// The campaign overview: the coverage record counts what the campaign reached of its declared
// space, the page shows per kernel its counts, coverage and failures (reproduce lines, links to
// their pages) in a real headless chromium, and `flashcheck run --html DIR` writes it as
// DIR/index.html with every link resolving to a page whose verdict is honest.
#include "verify/overview_html.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "testing/test_seed.h"
#include "verify/headless_chromium.h"
#include "verify/judge.h"
#include "verify/metrics.h"
#include "verify/report_html.h"

namespace flashcheck {
namespace {

namespace fs = std::filesystem;
using flashcheck::testing::DomRow;
using flashcheck::testing::rows_with;

Coverage::Point point(const std::string& dtype, const std::string& d, const std::string& causal) {
  return {{"dtype", dtype}, {"head_dim", d}, {"causal", causal}};
}

Coverage small_space() {
  Coverage c;
  c.axes = {"dtype", "head_dim", "causal"};
  c.declared = {{"dtype", {"f16", "bf16"}}, {"head_dim", {"64", "128"}}, {"causal", {"none", "bottom_right"}}};
  return c;
}

TEST(Coverage, CountsPerAxisAndReachedCombinations) {
  Coverage c = small_space();
  c.count(point("f16", "64", "none"), Coverage::Outcome::passed);
  c.count(point("f16", "64", "none"), Coverage::Outcome::failed);
  c.count(point("bf16", "128", "none"), Coverage::Outcome::skipped);  // declined: reaches nothing
  c.count(point("bf16", "64", "bottom_right"), Coverage::Outcome::passed);
  EXPECT_EQ(c.declared_combinations().size(), 8u);
  int reached = 0;
  for (const auto& p : c.declared_combinations()) reached += c.reached(p);
  EXPECT_EQ(reached, 2);
  EXPECT_FALSE(c.reached(point("bf16", "128", "none")));
  const auto by_dim = c.by_value("head_dim");
  ASSERT_EQ(by_dim.size(), 2u);
  EXPECT_EQ(by_dim[0].first, "64");
  EXPECT_EQ(by_dim[0].second.cases, 3);
  EXPECT_EQ(by_dim[0].second.failed, 1);
  EXPECT_EQ(by_dim[1].first, "128");
  EXPECT_EQ(by_dim[1].second.judged(), 0);
  EXPECT_EQ(by_dim[1].second.skipped, 1);
}

// A new axis (an attention variant) is one more key: counted, shown and multiplied into the
// declared combinations with no change to the code that reads the record.
TEST(Coverage, ANewAxisIsOneMoreKey) {
  Coverage c = small_space();
  c.declared["window"] = {"off", "left=128"};
  Coverage::Point p = point("f16", "64", "none");
  p["window"] = "left=128";
  c.count(p, Coverage::Outcome::passed);
  EXPECT_EQ(c.declared_combinations().size(), 16u);
  EXPECT_EQ(c.all_axes().back(), "window");
  EXPECT_EQ(c.by_value("window")[1].second.passed, 1);
  const std::string page = overview_html({"variants", {KernelOverview{"k", std::nullopt, 1, 1, 0, 0, 0, "", {}, {}, c, {}}}});
  EXPECT_NE(page.find("data-axis=\"window\""), std::string::npos);
  EXPECT_NE(page.find("1 of 16 declared combinations"), std::string::npos);
}

std::optional<std::string> render(const fs::path& file) { return flashcheck::testing::dump_dom(file); }

fs::path temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("fc_overview_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(OverviewHtml, ShowsCountsCoverageAndFailuresInHeadlessChromium) {
  // A real failing verdict (one element unwritten) for the failure row.
  Problem p{1, 2, 1, 30, 40, 32, 32, Causal::none, {}, DType::f16};
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(601));
  const Expected ref = make_expected(p, in);
  std::vector<float> o(ref.oracle.o.size());
  for (size_t e = 0; e < o.size(); ++e) o[e] = round_nearest_even(p.dtype, ref.oracle.o[e]);
  o[5] = poison_value(p.dtype);
  const Report failing = judge(p, in, KernelOutput{o, std::nullopt, std::nullopt}, Declared{});
  ASSERT_FALSE(failing.pass());

  KernelOverview good{"good_kernel", std::nullopt, 3, 3, 0, 0, 0, "rel_l2 0.002 \u2264 0.018 (11%)", {}, {}, small_space(), {}};
  good.coverage.count(point("f16", "64", "none"), Coverage::Outcome::passed);
  good.coverage.count(point("bf16", "128", "bottom_right"), Coverage::Outcome::passed);
  good.coverage.count(point("bf16", "128", "none"), Coverage::Outcome::passed);
  KernelOverview bad{"bad<kernel>", std::nullopt, 2, 0, 1, 1, 0, "unwritten 1 > 0", {{"unwritten", 1}}, {{"declined: D=128", 1}},
                     small_space(), {}};
  bad.coverage.count(point("f16", "64", "none"), Coverage::Outcome::failed);
  bad.coverage.count(point("f16", "128", "none"), Coverage::Outcome::skipped);
  KernelOverview::Failure f;
  f.problem = to_string(p) + " dist=normal";
  for (const Criterion& c : failing.criteria)
    if (!c.pass) f.failed.push_back(c);
  f.reproduce = "flashcheck run --kernel bad --problem \"" + to_string(p) + "\" --dist normal --input-seed 7";
  f.page = "bad_0.html";
  bad.failures.push_back(f);
  KernelOverview gone{"gpu_kernel", std::string("no CUDA device"), 0, 0, 0, 0, 0, "", {}, {}, {}, {}};
  const CampaignOverview ov{"flashcheck run --seed 1 --cases 3", {good, bad, gone}};

  const fs::path dir = temp_dir("page");
  write_overview_html(ov, dir / "index.html");
  const auto dom = render(dir / "index.html");
  fs::remove_all(dir);
  if (!dom) GTEST_SKIP() << "chromium is not installed (apt-get install chromium; .ci/run installs it): page not rendered";
  const auto attrs = flashcheck::testing::html_attributes(*dom);
  EXPECT_EQ(attrs.count("data-script-error"), 0u);
  EXPECT_EQ(attrs.count("data-loaded"), 1u) << "the page's script did not run to its end";
  const auto kernels = rows_with(*dom, "data-kernel");
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(kernels[0].cells, (std::vector<std::string>{"good_kernel", "3", "3", "0", "0", "3 / 8", "rel_l2 0.002 \u2264 0.018 (11%)"}));
  EXPECT_EQ(kernels[1].attrs.at("data-kernel"), "bad<kernel>");  // escaped in the page, itself in the DOM
  EXPECT_EQ(kernels[1].cells[3], "1");
  EXPECT_EQ(kernels[1].cells[5], "1 / 8");
  EXPECT_NE(kernels[2].cells[1].find("unavailable: no CUDA device"), std::string::npos);
  // Coverage: the value never reached by a judged case is marked, per axis.
  const auto values = rows_with(*dom, "data-value");
  int gaps = 0;
  for (const DomRow& r : values) gaps += r.cells[0].find("(not reached)") != std::string::npos;
  EXPECT_EQ(gaps, 3) << "bad<kernel> judged no bf16, no head_dim 128 (only skipped there), no bottom_right";
  // The failure: its criteria as the report shows them, its reproduce line and its page's link.
  const std::vector<std::string> repro = flashcheck::testing::repro_blocks(*dom);
  ASSERT_FALSE(repro.empty());
  EXPECT_EQ(flashcheck::testing::inner_text(repro.front()), f.reproduce);
  EXPECT_NE(dom->find("<a href=\"bad_0.html\">"), std::string::npos);
  EXPECT_NE(dom->find("data-criterion=\"unwritten\" data-status=\"FAIL\""), std::string::npos);
  EXPECT_NE(flashcheck::testing::inner_text(*dom).find("FAIL unwritten 1 > 0"), std::string::npos);
  EXPECT_EQ(dom->find(">ok<"), std::string::npos) << "the overview shows no status but a failure's";
}

#if defined(FLASHCHECK_CLI) && defined(FLASHCHECK_BROKEN_PLUGINS)
// End to end: `flashcheck run --html DIR` on the replica and the deliberately broken plugins (an
// out-of-bounds writer that is killed, an unwritten row, a base-2 LSE) writes DIR/index.html;
// every page it links exists, and a linked page of each failing kernel reads honestly.
TEST(OverviewHtml, RunHtmlWritesAnIndexLinkingEveryFailurePage) {
  const fs::path dir = temp_dir("run");
  const std::string seed = std::to_string(flashcheck::testing::seed_for(602) % 1000000000);
  // 24 cases: the broken plugins support a narrow space, and with 3 some seeds drew none they take
  // (every case skipped, nothing failed: exit 0).
  const std::string cmd = std::string(FLASHCHECK_CLI) + " run --cases 24 --no-shrink --seed " + seed + " --plugin " +
                          FLASHCHECK_BROKEN_PLUGINS + " --html " + (dir / "html").string() + " > " + (dir / "log.txt").string() +
                          " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log_file(dir / "log.txt");
  const std::string log((std::istreambuf_iterator<char>(log_file)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(rc)) << log;
  EXPECT_EQ(WEXITSTATUS(rc), 1) << "the broken kernels fail: " << log;
  ASSERT_TRUE(fs::exists(dir / "html" / "index.html")) << log;
  const auto dom = render(dir / "html" / "index.html");
  if (!dom) {
    fs::remove_all(dir);
    GTEST_SKIP() << "chromium is not installed (apt-get install chromium; .ci/run installs it): page not rendered";
  }
  EXPECT_EQ(flashcheck::testing::html_attributes(*dom).count("data-script-error"), 0u);
  std::set<std::string> kernels;
  for (const DomRow& r : rows_with(*dom, "data-kernel")) {
    // A built-in device kernel on a machine without a GPU (a CUDA build run in CI) is listed as
    // unavailable in one cell: said, never counted.
    if (r.cells.size() < 4) {
      ASSERT_EQ(r.cells.size(), 2u) << r.attrs.at("data-kernel");
      EXPECT_NE(r.cells[1].find("unavailable"), std::string::npos) << r.attrs.at("data-kernel") << ": " << r.cells[1];
      continue;
    }
    kernels.insert(r.attrs.at("data-kernel"));
    if (r.attrs.at("data-kernel") == "replica") EXPECT_EQ(r.cells[3], "0") << "the replica is correct";
    else EXPECT_NE(r.cells[3], "0") << r.attrs.at("data-kernel") << " is broken";
  }
  EXPECT_EQ(kernels, (std::set<std::string>{"replica", "broken_oob_write", "broken_unwritten_row", "broken_lse_base"}));
  // Every link to a page resolves, and each failing kernel's first page reads honestly.
  std::set<std::string> pages;
  for (const std::string& target : flashcheck::testing::page_links(*dom)) pages.insert(target);
  EXPECT_GE(pages.size(), 3u);
  for (const std::string& page : pages) EXPECT_TRUE(fs::exists(dir / "html" / page)) << page;
  for (const char* first : {"broken_oob_write_0.html", "broken_unwritten_row_0.html", "broken_lse_base_0.html"}) {
    ASSERT_TRUE(pages.count(first)) << first;
    const auto page_dom = render(dir / "html" / first);
    ASSERT_TRUE(page_dom);
    const auto rows = rows_with(*page_dom, "data-criterion");
    EXPECT_FALSE(rows.empty()) << first;
    for (const DomRow& row : rows)
      if (row.cells.size() >= 3 && row.cells[2] != "-") flashcheck::testing::expect_honest_row(row);  // "-": no output judged
  }
  // The reproduce lines of the overview are the campaign's own.
  const std::vector<std::string> repro = flashcheck::testing::repro_blocks(*dom);
  ASSERT_FALSE(repro.empty());
  EXPECT_NE(log.find(flashcheck::testing::inner_text(repro.front())), std::string::npos);
  fs::remove_all(dir);
}
#endif

}  // namespace
}  // namespace flashcheck
