// The backward's part of a report page (verify/backward_report_html.h): a planted fault in one
// gradient is named on the page by gradient, failed criteria, worst element (sequence, head, row or
// key, column) and tiles, drawn in its heatmap, apart from the forward's verdict; text is escaped;
// the page loads in a real headless browser without script errors (skipped, saying so, where no
// chromium is installed) and never says "ok" past a limit.
#include "verify/backward_report_html.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "reference/mask.h"
#include "reference/replica.h"
#include "reference/replica_backward.h"
#include "testing/test_seed.h"
#include "verify/headless_chromium.h"
#include "verify/judge.h"
#include "verify/report_html.h"

namespace flashcheck {
namespace {

// GQA with sinks, causal bottom-right with Sq < Skv: row i sees keys 0..i+16. A correct kernel's
// gradients (a replica with tiles of its own) with one dK element (KV head 1) or one dQ element
// (query head 3) pushed far off; the report judged with 16-row, 8-key tiles.
struct Planted {
  Problem p = parse_problem("b=1 hq=4 hkv=2 sq=40 skv=56 d=32 causal=bottom_right dtype=bf16 sinks=1");
  uint64_t seed = flashcheck::testing::seed_for(801);
  Inputs in = make_inputs(p, seed);
  std::vector<float> dout = make_d_out(p, seed);
  ReplicaResult fwd = replica_attention(p, in, ReplicaConfig{});
  KernelGradients k;
  int64_t key, row, col;

  explicit Planted(const char* which) {
    std::mt19937_64 g(seed);
    BackwardReplicaConfig bc;
    bc.block_q = 8, bc.block_kv = 4;
    const ReplicaGradients r = replica_attention_backward(p, in, fwd.o, fwd.lse, dout, bc);
    k = {r.dq, r.dk, r.dv, r.dsinks};
    key = static_cast<int64_t>(g() % 40), row = static_cast<int64_t>(g() % 40), col = static_cast<int64_t>(g() % 32);
    if (std::string(which) == "dk") k.dk[static_cast<size_t>((1 * p.seq_kv + key) * 32 + col)] += 50.0f;
    else k.dq[static_cast<size_t>((3 * p.seq_q + row) * 32 + col)] += 50.0f;
  }
  BackwardReport judged() const {
    BackwardOptions o;
    o.error_maps = true;
    o.tile_q = 16, o.tile_kv = 8;
    BackwardReport r = verify_backward(p, make_backward_expected(p, in, dout), k, o);
    r.notes.push_back("a note with <script>alert('x')</script> & \"quotes\"");
    return r;
  }
  Report forward() const { return judge(p, in, KernelOutput{fwd.o, fwd.lse, std::nullopt}, Declared{}, JudgeOptions{}); }
};

const GradientVerdict& gradient(const BackwardReport& r, const std::string& name) {
  for (const GradientVerdict& g : r.gradients)
    if (g.name == name) return g;
  throw std::logic_error("no gradient " + name);
}

// The page's part between two markers (one gradient's heading to the next's).
std::string part(const std::string& page, const std::string& from, const std::string& to) {
  const size_t a = page.find(from), b = page.find(to, a);
  return a == std::string::npos ? std::string() : page.substr(a, b == std::string::npos ? std::string::npos : b - a);
}

TEST(BackwardHtml, NamesTheGradientItsFailedCriteriaItsWorstElementAndTiles) {
  const Planted c("dk");
  const BackwardReport r = c.judged();
  SCOPED_TRACE(to_string(c.p) + " key " + std::to_string(c.key) + " col " + std::to_string(c.col));
  const GradientVerdict& dk = gradient(r, "dk");
  ASSERT_FALSE(dk.pass());
  ASSERT_TRUE(gradient(r, "dq").pass() && gradient(r, "dv").pass() && gradient(r, "dsinks").pass());
  // The worst element and its tiles: its key's kv-tile; q-tiles of the rows that see it (i >= key-16).
  ASSERT_TRUE(dk.worst);
  EXPECT_EQ(dk.worst->h, 1);
  EXPECT_EQ(dk.worst->row, c.key);
  EXPECT_EQ(dk.worst->col, c.col);
  EXPECT_EQ(dk.worst->kv_tile_lo, c.key / 8);
  EXPECT_EQ(dk.worst->kv_tile_hi, c.key / 8);
  EXPECT_EQ(dk.worst->q_tile_lo, std::max<int64_t>(0, c.key - 16) / 16);
  EXPECT_EQ(dk.worst->q_tile_hi, 39 / 16);
  // Its map: the worst element's KV head, every key, the planted element alone past 1.
  ASSERT_TRUE(dk.map);
  EXPECT_EQ(dk.map->h, 1);
  ASSERT_EQ(dk.map->rows.size(), 56u);
  for (size_t i = 0; i < dk.map->ratio.size(); ++i) {
    const bool planted = static_cast<int64_t>(i) == c.key * 32 + c.col;
    EXPECT_EQ(dk.map->ratio[i] > 1, planted) << "element " << i << " ratio " << dk.map->ratio[i];
  }
  EXPECT_FALSE(gradient(r, "dsinks").map) << "one scalar per head has no head map";

  const Report fwd = c.forward();
  ASSERT_TRUE(fwd.pass()) << to_text(fwd);
  const std::string page = to_html(fwd, &r);
  EXPECT_NE(page.find("<title>flashcheck FAIL"), std::string::npos);
  EXPECT_LT(page.find("<h2>Forward verdict (o, lse)</h2>"), page.find("<h2 id=\"backward\">"));
  for (const char* g : {"dq", "dv", "dsinks"})
    EXPECT_NE(page.find(std::string("data-gradient=\"") + g + "\" data-pass=\"true\""), std::string::npos) << g;
  const std::string dk_part = part(page, "id=\"grad-dk\"", "id=\"grad-dv\"");
  EXPECT_NE(dk_part.find("data-pass=\"false\""), std::string::npos);
  for (const std::string& f : r.failed())
    EXPECT_NE(dk_part.find("data-criterion=\"" + f.substr(4) + "\" data-status=\"FAIL\""), std::string::npos) << f;
  EXPECT_NE(dk_part.find("data-b=\"0\" data-h=\"1\" data-row=\"" + std::to_string(c.key) + "\" data-col=\"" + std::to_string(c.col) + "\""),
            std::string::npos) << dk_part;
  EXPECT_NE(dk_part.find("KV head h=1, key=" + std::to_string(c.key)), std::string::npos);
  EXPECT_NE(dk_part.find("in kv-tile " + std::to_string(c.key / 8) + " (its key)"), std::string::npos);
  EXPECT_NE(dk_part.find("<canvas id=\"grad-map-dk\">"), std::string::npos);
  EXPECT_NE(page.find("a note with &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quotes&quot;"), std::string::npos);
  EXPECT_EQ(page.find("<script>alert("), std::string::npos);
  EXPECT_EQ(to_html(fwd).find("id=\"backward\""), std::string::npos) << "a forward-only page has no backward part";
}

TEST(BackwardHtml, ADqFaultIsNamedByQueryHeadRowAndTiles) {
  const Planted c("dq");
  const BackwardReport r = c.judged();
  const GradientVerdict& dq = gradient(r, "dq");
  SCOPED_TRACE("row " + std::to_string(c.row) + " col " + std::to_string(c.col));
  ASSERT_FALSE(dq.pass());
  ASSERT_TRUE(dq.worst);
  EXPECT_EQ(dq.worst->h, 3);
  EXPECT_EQ(dq.worst->row, c.row);
  const KeyRange v = visible_range(c.p, 0, c.row);
  EXPECT_EQ(dq.worst->q_tile_lo, c.row / 16);
  EXPECT_EQ(dq.worst->kv_tile_lo, v.lo / 8);
  EXPECT_EQ(dq.worst->kv_tile_hi, (v.hi - 1) / 8);
  const std::string page = to_html(c.forward(), &r);
  const std::string dq_part = part(page, "id=\"grad-dq\"", "id=\"grad-dk\"");
  EXPECT_NE(dq_part.find("query head h=3, row=" + std::to_string(c.row)), std::string::npos) << dq_part;
  EXPECT_NE(dq_part.find("in q-tile " + std::to_string(c.row / 16) + " (its row)"), std::string::npos) << dq_part;
}

// Chromium renders it: no script error, every gradient map drawn in more than one colour, and no
// verdict row of any table on the page says "ok" past its limit (the failed ones say FAIL).
TEST(BackwardHtml, LoadsInHeadlessChromiumAndNeverSaysOkPastALimit) {
  const Planted c("dk");
  const BackwardReport r = c.judged();
  JudgeOptions jo;
  jo.error_maps = true;
  const Report fwd = judge(c.p, c.in, KernelOutput{c.fwd.o, c.fwd.lse, std::nullopt}, Declared{}, jo);
  const auto dir = std::filesystem::temp_directory_path() / ("fc_bwd_html_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "page.html") << to_html(fwd, &r);
  const auto dom = flashcheck::testing::dump_dom(dir / "page.html");
  std::filesystem::remove_all(dir);
  if (!dom) GTEST_SKIP() << "chromium is not installed (apt-get install chromium; .ci/run installs it): page not rendered";
  const auto attrs = flashcheck::testing::html_attributes(*dom);
  auto get = [&](const std::string& k) { return attrs.count(k) ? attrs.at(k) : std::string("(absent)"); };
  EXPECT_EQ(get("data-script-error"), "(absent)");
  EXPECT_EQ(get("data-drawn"), "tiles,head,lse");
  EXPECT_EQ(get("data-drawn-backward"), "dq,dk,dv");
  for (const char* g : {"dq", "dk", "dv"}) {
    EXPECT_GT(std::atoll(get(std::string("data-painted-grad-map-") + g).c_str()), 0) << g;
    EXPECT_GE(std::atoll(get(std::string("data-colours-grad-map-") + g).c_str()), 2) << g;
  }
  size_t fails = 0;
  const auto rows = flashcheck::testing::rows_with(*dom, "data-criterion");
  EXPECT_GT(rows.size(), 4 * 5u);
  for (const auto& row : rows) {
    ASSERT_EQ(row.cells.size(), 5u);
    fails += row.attrs.at("data-status") == "FAIL";
    if (row.cells[0] == "ok") {  // comparison_text states the relation that holds: "a > b" or "a < b" is past the limit
      EXPECT_TRUE(row.cells[2].find(" > ") == std::string::npos && row.cells[2].find(" < ") == std::string::npos)
          << row.attrs.at("data-criterion") << ": " << row.cells[2];
    }
  }
  EXPECT_EQ(fails, r.failed().size());
}

// Gradients judged without a forward output: the page holds their part alone, says the forward was
// not judged (never PASS), and renders in Chromium without a script error, every map drawn.
TEST(BackwardHtml, APageWithoutAForwardSaysSoAndLoads) {
  const Planted c("dq");
  BackwardReport r = c.judged();
  r.repro = "flashcheck.replay(fn, 'b=1 ...', backward='gradients')";
  const std::string page = to_html(r);
  EXPECT_NE(page.find("<title>flashcheck FAIL"), std::string::npos);
  EXPECT_NE(page.find("forward <span class=\"na\">not judged</span>"), std::string::npos);
  EXPECT_EQ(page.find("Forward verdict"), std::string::npos);
  EXPECT_EQ(page.find("forward <span class=\"pass\">"), std::string::npos);
  EXPECT_NE(page.find("flashcheck.replay(fn, &#39;b=1 ...&#39;, backward=&#39;gradients&#39;)"), std::string::npos);
  EXPECT_NE(part(page, "id=\"grad-dq\"", "id=\"grad-dk\"").find("data-pass=\"false\""), std::string::npos);
  const auto dir = std::filesystem::temp_directory_path() / ("fc_bwd_only_html_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "page.html") << page;
  const auto dom = flashcheck::testing::dump_dom(dir / "page.html");
  std::filesystem::remove_all(dir);
  if (!dom) GTEST_SKIP() << "chromium is not installed (apt-get install chromium; .ci/run installs it): page not rendered";
  const auto attrs = flashcheck::testing::html_attributes(*dom);
  EXPECT_EQ(attrs.count("data-script-error"), 0u) << attrs.at("data-script-error");
  ASSERT_EQ(attrs.count("data-drawn-backward"), 1u);
  EXPECT_EQ(attrs.at("data-drawn-backward"), "dq,dk,dv");
  EXPECT_GE(std::atoll(attrs.at("data-colours-grad-map-dq").c_str()), 2);
}

}  // namespace
}  // namespace flashcheck
