#include "verify/backward_report_html.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "verify/report_html.h"
#include "verify/report_html_detail.h"

namespace flashcheck {

namespace {

using namespace html_detail;

std::string esc(const std::string& s) { return html_escape(s); }

std::string span_text(const char* one, const char* many, int64_t lo, int64_t hi) {
  if (lo < 0) return std::string("no ") + many;
  if (lo == hi) return std::string(one) + " " + std::to_string(lo);
  return std::string(many) + " " + std::to_string(lo) + "&ndash;" + std::to_string(hi);
}

// Which tiles of a kernel hold the element, as the forward's page names them (q-tile, kv-tile).
std::string tiles_text(const GradientVerdict& g, const GradientLocation& w) {
  if (g.name == "dq")
    return "in q-tile " + std::to_string(w.q_tile_lo) + " (its row), with terms from " +
           span_text("kv-tile", "kv-tiles", w.kv_tile_lo, w.kv_tile_hi) +
           " (the keys the row sees; the forward's page names the last)";
  return "in kv-tile " + std::to_string(w.kv_tile_lo) + " (its key), with terms from " +
         span_text("q-tile", "q-tiles", w.q_tile_lo, w.q_tile_hi) + " (the rows that see the key)";
}

// (b or sequence, query head or KV head, row or key, column), as the text report names it.
std::string location_text(const GradientVerdict& g, const GradientLocation& w, bool varlen) {
  if (g.name == "dsinks") return "(query head h=" + std::to_string(w.h) + ")";
  const bool dq = g.name == "dq";
  return std::string("(") + (varlen ? "sequence " : "b=") + std::to_string(w.b) + (dq ? ", query head h=" : ", KV head h=") +
         std::to_string(w.h) + (dq ? ", row=" : ", key=") + std::to_string(w.row) + ", col=" + std::to_string(w.col) + ")";
}

const char* pass_span(bool pass) { return pass ? "<span class=\"pass\">PASS</span>" : "<span class=\"fail\">FAIL</span>"; }

// Draws each gradient's map with the page's shared heatmap (window.fcHeat), then marks <html> with
// what it drew (data-drawn-backward, data-painted-grad-map-NAME), for a headless browser's check.
const char* kBackwardScript = R"JS(
(function () {
  const root = document.documentElement;
  const data = JSON.parse(document.getElementById('fc-backward-data').textContent);
  const { dec, heatmap, hover, fmt, span, measure } = window.fcHeat;
  const NAMES = ['ok', 'unwritten (poison)', 'NaN/Inf where the oracle differs',
                 'must be exactly 0 (a row that sees no key, a key no row sees) and is not', 'NaN/Inf as the oracle',
                 'exactly 0, as it must be', '', 'in a row fp32 cannot resolve: not measured'];
  const drawn = [];
  for (const g of data.maps) {
    const id = 'grad-map-' + g.name, cv = document.getElementById(id), nr = g.rows.length;
    const grid = heatmap(cv, nr, g.cols, dec(g.ratio, Float32Array), dec(g.flag, Uint8Array), 420, 720);
    const what = g.name === 'dq' ? 'rows ' : 'keys ';
    hover(cv, grid, (y, x, r, f) => what + (grid.bh === 1 ? g.rows[y] : g.rows[y * grid.bh] + '-' + g.rows[Math.min((y + 1) * grid.bh, nr) - 1]) +
          ', cols ' + span(x, grid.bw, g.cols) + ': max error/tolerance ' + fmt(r) + (f ? ' (' + NAMES[f] + ')' : ''));
    measure(id);
    drawn.push(g.name);
  }
  root.setAttribute('data-drawn-backward', drawn.join(','));
})();
)JS";

}  // namespace

std::string backward_verdict_html(const BackwardReport& r) {
  std::string failing;
  for (const GradientVerdict& g : r.gradients)
    if (!g.pass()) failing += (failing.empty() ? " (" : ", ") + esc(g.name);
  return pass_span(r.pass()) + (failing.empty() ? std::string() : failing + ")");
}

BackwardHtml backward_html(const BackwardReport& r) {
  std::ostringstream h;
  h << "<h2 id=\"backward\">Backward verdict (gradients): " << backward_verdict_html(r) << "</h2>\n"
    << "<p>Each gradient of the loss &Sigma; dO&middot;O judged on its own against the fp64 backward oracle for the "
       "dO it was given, over every row (the backward oracle does not sample); the baseline is the worse of two same-dtype "
       "FlashAttention-2 backward replicas.</p>\n";
  bool any_map = false;
  for (const GradientVerdict& g : r.gradients) any_map = any_map || g.map;
  if (any_map)
    h << "<p class=\"note\">Maps: error/tolerance is |g &minus; oracle| / the gradient's baseline_relative limit: one "
         "element past 1 fails that criterion by itself. Rows are query rows for dq, keys for dk and dv.</p>\n"
      << kLegend;
  nlohmann::json maps = nlohmann::json::array();
  for (const GradientVerdict& g : r.gradients) {
    const std::string name = esc(g.name);
    h << "<h3 id=\"grad-" << name << "\" data-gradient=\"" << name << "\" data-pass=\"" << (g.pass() ? "true" : "false")
      << "\">" << name << " " << pass_span(g.pass()) << "</h3>\n<p>" << g.elements << " elements, " << g.compared << " compared";
    if (g.unresolved) h << ", " << g.unresolved << " in rows fp32 cannot resolve (not measured)";
    h << ".</p>\n";
    verdict_table(h, "class=\"gradient\" data-gradient=\"" + name + "\"", g.criteria, g.elements != 0);
    if (g.compared == 0)
      h << "<p>Metrics: n/a (no element could be compared).</p>\n";
    else
      h << "<p>Metrics: cos=" << num(g.cosine) << " rel_l2=" << num(g.rel_l2) << " max_abs=" << num(g.max_abs)
        << " baseline_max_abs=" << num(g.baseline_max_abs) << " max|r|=" << num(g.max_ref) << "</p>\n";
    if (g.worst) {
      const GradientLocation& w = *g.worst;
      h << "<p class=\"worst\" data-gradient=\"" << name << "\" data-b=\"" << w.b << "\" data-h=\"" << w.h << "\" data-row=\""
        << w.row << "\" data-col=\"" << w.col << "\">Worst element: " << location_text(g, w, r.problem.varlen())
        << " kernel=" << num(w.kernel) << " oracle=" << num(w.oracle);
      if (g.name != "dsinks") h << ", " << tiles_text(g, w);
      h << ".</p>\n";
    }
    if (g.map) {
      const GradientMap& m = *g.map;
      h << "<p>" << (r.problem.varlen() ? "(sequence " : "(b=") << m.b << (g.name == "dq" ? ", query head h=" : ", KV head h=")
        << m.h << "), the worst element's: " << m.rows.size() << (g.name == "dq" ? " query rows" : " keys")
        << " (top to bottom) by " << m.cols << " columns.</p>\n<canvas id=\"grad-map-" << name << "\"></canvas>\n";
      maps.push_back({{"name", g.name}, {"cols", m.cols}, {"rows", m.rows}, {"ratio", b64(m.ratio)}, {"flag", b64(flag_bytes(m.flag))}});
    }
  }
  if (!r.notes.empty()) {
    h << "<ul class=\"notes\">\n";
    for (const std::string& n : r.notes) h << "<li>" << esc(n) << "</li>\n";
    h << "</ul>\n";
  }
  BackwardHtml out;
  out.body = h.str();
  out.script = "<script type=\"application/json\" id=\"fc-backward-data\">" + script_json(nlohmann::json{{"maps", maps}}.dump()) +
               "</script>\n<script>" + kBackwardScript + "</script>\n";
  return out;
}

}  // namespace flashcheck
