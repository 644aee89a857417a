#include "verify/report_html.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reference/conventions.h"
#include "verify/backward_report_html.h"
#include "verify/report_html_detail.h"

namespace flashcheck {

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace html_detail {

std::string base64(const void* data, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < n ? k[(v >> 6) & 63] : '=';
    out += i + 2 < n ? k[v & 63] : '=';
  }
  return out;
}

std::string num(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os.precision(6);
  os << x;
  return os.str();
}

std::vector<uint8_t> flag_bytes(const std::vector<MapFlag>& f) {
  std::vector<uint8_t> u(f.size());
  std::memcpy(u.data(), f.data(), f.size());
  return u;
}

std::string script_json(std::string json) {
  // "</" would end the script element early; "<\/" is the same JSON string.
  for (size_t at = 0; (at = json.find("</", at)) != std::string::npos; at += 3) json.replace(at, 2, "<\\/");
  return json;
}

// How much of its limit a criterion used (1 is the edge of failing), or "-" where it has none.
std::string used(const Criterion& c) {
  const double u = limit_used(c);
  return std::isnan(u) ? "-" : num(u);
}

// The status cell's class: green only for "ok", red for a failure, amber past a limit that does
// not judge, grey for reported only and not computed.
const char* status_class(CriterionStatus s) {
  switch (s) {
    case CriterionStatus::ok: return "pass";
    case CriterionStatus::fail: return "fail";
    case CriterionStatus::over_limit:
    case CriterionStatus::over_limit_reported_only: return "warn";
    case CriterionStatus::reported_only:
    case CriterionStatus::not_computed: break;
  }
  return "na";
}

// The verdict table, one row per criterion through report.h's status helpers.
void verdict_table(std::ostream& h, const std::string& table_attrs, const std::vector<Criterion>& criteria, bool measured) {
  h << "<table " << table_attrs << "><tr><th>status</th><th>criterion</th><th>value against its limit</th>"
       "<th>share of limit</th><th>what</th></tr>\n";
  for (const Criterion& c : criteria) {
    const CriterionStatus st = status_of(c);
    h << "<tr data-criterion=\"" << html_escape(c.name) << "\" data-status=\"" << status_text(st) << "\""
      << (st == CriterionStatus::fail ? " class=\"bad\"" : "") << "><td class=\"" << status_class(st) << "\">"
      << status_text(st) << "</td><td>" << html_escape(c.name) << "</td><td class=\"n\">"
      << html_escape(measured ? comparison_text(c) : std::string("-")) << "</td><td class=\"n\">"
      << (measured ? used(c) : "-") << "</td><td>" << html_escape(c.detail) << "</td></tr>\n";
  }
  h << "</table>\n";
}

const char* const kLegend =
    "<p class=\"legend\">error/tolerance (1 = fails on its own):<span style=\"background:rgb(48,18,59)\"></span>&le;1e-4"
    "<span style=\"background:rgb(40,120,142)\"></span>1e-3<span style=\"background:rgb(53,183,121)\"></span>1e-2"
    "<span style=\"background:rgb(253,231,37)\"></span>1<span style=\"background:rgb(235,50,40)\"></span>&gt;1"
    "<span style=\"background:rgb(125,0,0)\"></span>&ge;100<span style=\"background:#f0f\"></span>unwritten"
    "<span style=\"background:#000\"></span>NaN/Inf mismatch<span style=\"background:rgb(255,140,0)\"></span>empty row wrong"
    "<span style=\"background:rgb(215,215,215)\"></span>empty row / non-finite as expected</p>\n";

// The heatmap drawing both parts of a page share (report_html_detail.h).
const char* const kHeatmapScript = R"JS(
window.fcHeat = (function () {
  function dec(s, Type) {
    const bin = atob(s), u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    return new Type(u8.buffer);
  }
  const FLAG_RGB = [null, [255, 0, 255], [0, 0, 0], [255, 140, 0], [190, 190, 190], [215, 215, 215], [120, 0, 160], [200, 225, 240]];
  // Flagged elements (1-3, 6) outrank the ones with nothing to measure (4-5, 7), which outrank measured ones.
  const rank = f => (f >= 1 && f <= 3) || f === 6 ? 2 : (f ? 1 : 0);
  const STOPS = [[48, 18, 59], [40, 120, 142], [53, 183, 121], [253, 231, 37]];
  // Ratio 1e-4..1 runs dark blue to yellow (log scale); past 1 (fails on its own) red, darker to 100.
  function colour(r) {
    if (!(r >= 0)) return [245, 245, 245];
    if (r > 1) { const t = Math.min(Math.log10(r), 2) / 2; return [Math.round(235 - 110 * t), Math.round(50 * (1 - t)), Math.round(40 * (1 - t))]; }
    const t = Math.max(0, (Math.log10(Math.max(r, 1e-4)) + 4) / 4), x = t * (STOPS.length - 1);
    const i = Math.min(Math.floor(x), STOPS.length - 2), f = x - i;
    return STOPS[i].map((c, k) => Math.round(c + (STOPS[i + 1][k] - c) * f));
  }
  // An n×m grid binned to at most maxH×maxW cells: a bin shows its largest ratio, and its
  // highest-ranked flag wins over any ratio, so one unwritten element is never averaged away.
  function heatmap(canvas, n, m2, ratio, flag, maxH, maxW) {
    const bh = Math.ceil(n / maxH), bw = Math.ceil(m2 / maxW), H = Math.ceil(n / bh), W = Math.ceil(m2 / bw);
    const agg = new Float32Array(H * W).fill(NaN), af = new Uint8Array(H * W);
    for (let i = 0; i < n; i++) for (let j = 0; j < m2; j++) {
      const k = Math.floor(i / bh) * W + Math.floor(j / bw), r = ratio[i * m2 + j], f = flag[i * m2 + j];
      if (r >= 0 && !(agg[k] >= r)) agg[k] = r;
      if (rank(f) > rank(af[k])) af[k] = f;
    }
    // Cells stretch on each axis apart (up to 40 px), so a tall, narrow head still fills the width.
    const cw = Math.max(1, Math.min(Math.floor(720 / W), 40)), ch = Math.max(1, Math.min(Math.floor(420 / H), 40));
    canvas.width = W * cw; canvas.height = H * ch;
    const ctx = canvas.getContext('2d'), img = ctx.createImageData(W * cw, H * ch);
    for (let y = 0; y < H * ch; y++) for (let x = 0; x < W * cw; x++) {
      const k = Math.floor(y / ch) * W + Math.floor(x / cw), c = af[k] ? FLAG_RGB[af[k]] : colour(agg[k]), o = 4 * (y * W * cw + x);
      img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    return { bh, bw, H, W, cw, ch, agg, af };
  }
  function hover(canvas, g, text) {
    const tip = document.getElementById('tip');
    canvas.addEventListener('mousemove', e => {
      const b = canvas.getBoundingClientRect(), x = Math.floor((e.clientX - b.left) / g.cw), y = Math.floor((e.clientY - b.top) / g.ch);
      if (x < 0 || y < 0 || x >= g.W || y >= g.H) { tip.style.display = 'none'; return; }
      tip.textContent = text(y, x, g.agg[y * g.W + x], g.af[y * g.W + x]);
      tip.style.left = (e.clientX + 12) + 'px'; tip.style.top = (e.clientY + 12) + 'px'; tip.style.display = 'block';
    });
    canvas.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
  }
  const fmt = r => (r >= 0) ? r.toPrecision(3) : 'none measured';
  const span = (i, b, n) => (b === 1 ? String(i) : (i * b) + '-' + (Math.min((i + 1) * b, n) - 1));
  // Marks <html> with what canvas `id` holds: painted pixels and distinct colours (up to 64).
  function measure(id) {
    const root = document.documentElement, cv = document.getElementById(id);
    const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
    let painted = 0;
    const colours = new Set();
    for (let i = 0; i < px.length; i += 4) if (px[i + 3]) { painted++; if (colours.size < 64) colours.add(px[i] << 16 | px[i + 1] << 8 | px[i + 2]); }
    root.setAttribute('data-painted-' + id, String(painted));
    root.setAttribute('data-colours-' + id, String(colours.size));
  }
  return { dec, FLAG_RGB, rank, colour, heatmap, hover, fmt, span, measure };
})();
)JS";

}  // namespace html_detail

namespace {

using namespace html_detail;

std::string escape(const std::string& s) { return html_escape(s); }

const char* flag_name(MapFlag f) {
  switch (f) {
    case MapFlag::unwritten: return "unwritten (poison)";
    case MapFlag::nan_mismatch: return "NaN/Inf where the oracle differs";
    case MapFlag::empty_row_nonzero: return "empty row not as the convention says";
    case MapFlag::nonfinite_match: return "NaN/Inf as the oracle";
    case MapFlag::empty_row_ok: return "empty row, as the convention says";
    case MapFlag::outside_contenders: return "outside the values of the keys fp32 cannot tell apart";
    case MapFlag::unresolved_ok: return "row fp32 cannot resolve, within its contenders' values";
    case MapFlag::ok: break;
  }
  return "ok";
}

nlohmann::json page_data(const Report& r) {
  nlohmann::json j;
  j["pass"] = r.pass();
  j["problem"] = to_string(r.problem);
  j["dv"] = r.problem.head_dim_v;
  if (!r.maps) {
    j["maps"] = nullptr;
    return j;
  }
  const ErrorMaps& m = *r.maps;
  std::vector<uint32_t> tile_flagged(m.tile_flagged.size());
  for (size_t i = 0; i < m.tile_flagged.size(); ++i)
    tile_flagged[i] = static_cast<uint32_t>(std::min<int64_t>(m.tile_flagged[i], UINT32_MAX));
  j["maps"] = {{"unit", num(m.unit)},
               {"tile_q", m.tile_q},
               {"tile_kv", m.tile_kv},
               {"q_tiles", m.q_tiles},
               {"kv_tiles", m.kv_tiles},
               {"tile_ratio", b64(m.tile_ratio)},
               {"tile_flagged", b64(tile_flagged)},
               {"head_b", m.head_b},
               {"head_h", m.head_h},
               {"rows", m.rows},
               {"head_ratio", b64(m.head_ratio)},
               {"head_flag", b64(flag_bytes(m.head_flag))},
               {"has_lse", !m.lse_ratio.empty()},
               {"lse_ratio", b64(m.lse_ratio)},
               {"lse_ratio_max", b64(m.lse_ratio_max)},
               {"lse_flag", b64(flag_bytes(m.lse_flag))}};
  return j;
}

const char* kStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 1.6em; }
.pass { color: #1a7f37; } .fail { color: #cf222e; } .warn { color: #9a6700; } .na { color: #666; }
table { border-collapse: collapse; } td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
tr.bad td { background: #fff0f0; } td.n { font-family: ui-monospace, monospace; text-align: right; }
pre { background: #f6f8fa; padding: 8px; white-space: pre-wrap; word-break: break-all; }
canvas { border: 1px solid #ccc; image-rendering: pixelated; display: block; margin: 4px 0; }
.legend span { display: inline-block; width: 12px; height: 12px; vertical-align: middle; margin: 0 4px 0 12px; border: 1px solid #999; }
#tip { position: fixed; pointer-events: none; background: #222; color: #fff; padding: 3px 6px; font-size: 12px; display: none; }
.note { color: #666; }
)CSS";

// Draws the heatmaps and the LSE chart from the embedded data, then marks <html> with what it drew
// (data-drawn, painted-pixel and colour counts, the hottest tile), so a headless browser can check it.
const char* kScript = R"JS(
(function () {
  const root = document.documentElement;
  const data = JSON.parse(document.getElementById('fc-data').textContent);
  const m = data.maps;
  if (!m) { root.setAttribute('data-drawn', 'no-maps'); return; }
  const FLAG_NAMES = ['ok', 'unwritten (poison)', 'NaN/Inf where the oracle differs', 'empty row not as the convention says',
                      'NaN/Inf as the oracle', 'empty row, as the convention says',
                      'outside the values of the keys fp32 cannot tell apart', 'row fp32 cannot resolve, within its contenders\' values'];
  const { dec, FLAG_RGB, rank, heatmap, hover, fmt, span, measure } = window.fcHeat;

  // 1. Tiles: y = q-tile, x = KV tile of the row's last visible key.
  const tr = dec(m.tile_ratio, Float32Array), tf = dec(m.tile_flagged, Uint32Array);
  const tflag = new Uint8Array(tf.length);
  const flaggedTiles = [];
  let hot = -1;
  for (let i = 0; i < tf.length; i++) {
    if (tf[i] > 0) { tflag[i] = 1; if (flaggedTiles.length < 20) flaggedTiles.push(Math.floor(i / m.kv_tiles) + ',' + (i % m.kv_tiles)); }
    if (tr[i] >= 0 && (hot < 0 || tr[i] > tr[hot])) hot = i;
  }
  const tiles = document.getElementById('tiles');
  const gt = heatmap(tiles, m.q_tiles, m.kv_tiles, tr, tflag, 420, 720);
  hover(tiles, gt, (y, x, r, f) => 'q-tile ' + span(y, gt.bh, m.q_tiles) + ', kv-tile ' + span(x, gt.bw, m.kv_tiles) +
        ': max error/tolerance ' + fmt(r) + (f ? ' (holds flagged elements)' : ''));

  // 2. The worst head, row by column.
  const hr = dec(m.head_ratio, Float32Array), hf = dec(m.head_flag, Uint8Array), nr = m.rows.length;
  const head = document.getElementById('head');
  const gh = heatmap(head, nr, data.dv, hr, hf, 420, 720);
  hover(head, gh, (y, x, r, f) => 'rows ' + (gh.bh === 1 ? m.rows[y] : m.rows[y * gh.bh] + '-' + m.rows[Math.min((y + 1) * gh.bh, nr) - 1]) +
        ', cols ' + span(x, gh.bw, data.dv) + ': max error/tolerance ' + fmt(r) + (f ? ' (' + FLAG_NAMES[f] + ')' : ''));

  // 3. LSE per checked row: log10(error/tolerance), the line at 0 is the limit.
  const drawn = ['tiles', 'head'];
  if (m.has_lse) {
    const lr = dec(m.lse_ratio, Float32Array), lm = dec(m.lse_ratio_max, Float32Array), lf = dec(m.lse_flag, Uint8Array);
    const c = document.getElementById('lse'), ctx = c.getContext('2d'), Wd = c.width, Hd = c.height;
    const y = r => Hd - 10 - (Math.min(Math.max(Math.log10(Math.max(r, 1e-6)), -6), 2) + 6) / 8 * (Hd - 20);
    const x = i => 30 + (nr > 1 ? i / (nr - 1) : 0.5) * (Wd - 40);
    ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, Wd, Hd);
    ctx.strokeStyle = '#cf222e'; ctx.beginPath(); ctx.moveTo(30, y(1)); ctx.lineTo(Wd - 10, y(1)); ctx.stroke();
    ctx.fillStyle = '#666'; ctx.font = '10px sans-serif';
    [1e-6, 1e-4, 1e-2, 1, 100].forEach(v => ctx.fillText(String(v), 0, y(v) + 3));
    for (const [series, style] of [[lm, '#9ecae1'], [lr, '#08519c']]) {
      ctx.fillStyle = style;
      for (let i = 0; i < nr; i++) if (series[i] >= 0) ctx.fillRect(x(i) - 1, y(series[i]) - 1, 3, 3);
    }
    for (let i = 0; i < nr; i++) if (rank(lf[i]) === 2) { ctx.fillStyle = 'rgb(' + FLAG_RGB[lf[i]].join(',') + ')'; ctx.fillRect(x(i) - 1, 2, 3, Hd - 4); }
    drawn.push('lse');
  }
  for (const id of drawn) measure(id);
  root.setAttribute('data-hot-tile', hot < 0 ? '' : Math.floor(hot / m.kv_tiles) + ',' + (hot % m.kv_tiles));
  root.setAttribute('data-flagged-tiles', flaggedTiles.join(';'));
  root.setAttribute('data-drawn', drawn.join(','));
})();
)JS";

// The page's head, up to its <h1> (the verdict and the problem).
void page_head(std::ostream& h, bool pass, const Problem& p) {
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    // Before anything else: any script error lands on <html>, where a headless check can read it.
    << "<script>window.onerror = function (msg, src, line) { document.documentElement.setAttribute('data-script-error', "
       "String(msg) + ' (line ' + line + ')'); };</script>\n"
    << "<title>flashcheck " << (pass ? "PASS" : "FAIL") << ": " << escape(to_string(p)) << "</title>\n"
    << "<style>" << kStyle << "</style></head><body>\n";
  h << "<h1><span class=\"" << (pass ? "pass\">PASS" : "fail\">FAIL") << "</span> " << escape(to_string(p)) << "</h1>\n";
}

void reproduce_section(std::ostream& h, const std::string& repro) {
  h << "<h2>Reproduce</h2>\n<pre>" << (repro.empty() ? "(no reproducing command was given)" : escape(repro)) << "</pre>\n";
}

}  // namespace

std::string to_html(const Report& r, const BackwardReport* backward) {
  std::ostringstream h;
  const bool pass = r.pass() && (!backward || backward->pass());
  page_head(h, pass, r.problem);
  h << "<p>Rows checked per (b,h): " << r.rows_checked << (r.sampled ? " (sampled)" : "") << ", elements: " << r.elements
    << ".</p>\n";
  if (backward)
    h << "<p id=\"verdicts\">forward <span class=\"" << (r.pass() ? "pass\">PASS" : "fail\">FAIL") << "</span>, backward "
      << backward_verdict_html(*backward) << ": each judged apart, the page's verdict is both. <a href=\"#backward\">The "
      << "gradients</a> follow the forward output's sections.</p>\n";

  h << "<h2>" << (backward ? "Forward verdict (o, lse)" : "Verdict") << "</h2>\n";
  verdict_table(h, "id=\"verdict\"", r.criteria, r.elements != 0);
  h << "<p class=\"note\">share of limit: how much of its limit a criterion used (1 = the edge of failing; for "
       "cosine, (1 &minus; value)/(1 &minus; limit)). ok: judged and within its limit; reported only: measured, not "
       "judged; n/a: nothing could be measured.</p>\n";
  if (r.compared == 0) {
    h << "<p>Metrics: n/a (no element could be compared).</p>\n";
  } else {
    h << "<p>Metrics: cos=" << num(r.cosine) << " rel_l2=" << num(r.rel_l2) << " max_abs=" << num(r.max_abs)
      << " baseline_max_abs=" << num(r.baseline_max_abs) << " ulp_mean=" << num(r.ulp_mean)
      << " rounding_bias=" << num(r.rounding_bias);
    if (r.lse_max_abs) h << " lse_max_abs=" << num(*r.lse_max_abs);
    h << "</p>\n";
  }
  if (r.worst) {
    const Location& w = *r.worst;
    h << "<p>Worst element: (b=" << w.b << ", h=" << w.h << ", row=" << w.row << ", col=" << w.col
      << ") kernel=" << num(w.kernel) << " oracle=" << num(w.oracle) << " in q-tile " << w.q_tile << ", kv-tile " << w.kv_tile
      << " (the row's last visible key).</p>\n";
  }
  reproduce_section(h, r.repro);

  if (r.maps) {
    const ErrorMaps& m = *r.maps;
    h << "<p class=\"note\">Error/tolerance is |o &minus; oracle| / " << num(m.unit)
      << " (the baseline_relative limit): one element past 1 fails that criterion by itself.</p>\n";
    h << "<h2>Error by tile</h2>\n<p>Rows: q-tile (" << m.tile_q << " rows each, " << m.q_tiles << " tiles); columns: the KV tile ("
      << m.tile_kv << " keys each, " << m.kv_tiles
      << " tiles) holding the row's last visible key (0 for a row that sees none). Each cell: the largest error over its "
         "elements in every (b, h); magenta: it holds unwritten, NaN-mismatched or wrong empty-row elements.</p>\n"
      << kLegend << "<canvas id=\"tiles\"></canvas>\n";
    h << "<h2>Worst head, row by column</h2>\n<p>(b=" << m.head_b << ", h=" << m.head_h << "): " << m.rows.size()
      << " checked rows (top to bottom) by " << r.problem.head_dim_v << " columns.</p>\n"
      << "<canvas id=\"head\"></canvas>\n";
    h << "<h2>LSE error per row</h2>\n";
    if (m.lse_ratio.empty()) {
      h << "<p class=\"note\">The kernel wrote no LSE.</p>\n";
    } else {
      h << "<p>log<sub>10</sub>(|lse &minus; oracle| / the row's tolerance) per checked row: dark, head (b=" << m.head_b
        << ", h=" << m.head_h << "); light, the largest over every head; red line: the limit; full-height marks: "
           "unwritten/NaN/wrong empty-row LSE in that head.</p>\n<canvas id=\"lse\" width=\"720\" height=\"200\"></canvas>\n";
    }
    h << "<h2>Unwritten and NaN positions</h2>\n";
    if (m.flagged_total == 0) {
      h << "<p>None: every element was written, and NaN/Inf appear exactly where the oracle has them.</p>\n";
    } else {
      h << "<p>" << m.flagged_total << " flagged element(s)"
        << (static_cast<size_t>(m.flagged_total) > m.flagged.size() ? ", the first " + std::to_string(m.flagged.size()) + " listed"
                                                                     : std::string())
        << ".</p>\n<table><tr><th>b</th><th>h</th><th>row</th><th>col</th><th>what</th></tr>\n";
      for (const FlaggedElement& f : m.flagged)
        h << "<tr><td class=\"n\">" << f.b << "</td><td class=\"n\">" << f.h << "</td><td class=\"n\">" << f.row
          << "</td><td class=\"n\">" << (f.col < 0 ? std::string("lse") : std::to_string(f.col)) << "</td><td>"
          << flag_name(f.flag) << "</td></tr>\n";
      h << "</table>\n";
    }
  } else {
    h << "<p class=\"note\">No error maps in this report: they are computed when asked for (flashcheck check --html, run "
         "--html, or JudgeOptions::error_maps).</p>\n";
  }
  const std::string json = script_json(page_data(r).dump());
  const BackwardHtml b = backward ? backward_html(*backward) : BackwardHtml{};
  h << b.body << "<div id=\"tip\"></div>\n<script type=\"application/json\" id=\"fc-data\">" << json << "</script>\n<script>"
    << kHeatmapScript << "</script>\n<script>" << kScript << "</script>\n" << b.script << "</body></html>\n";
  return h.str();
}

std::string to_html(const BackwardReport& backward) {
  std::ostringstream h;
  page_head(h, backward.pass(), backward.problem);
  h << "<p id=\"verdicts\">forward <span class=\"na\">not judged</span> (no output was given with the gradients), "
       "backward " << backward_verdict_html(backward) << ".</p>\n";
  reproduce_section(h, backward.repro);
  const BackwardHtml b = backward_html(backward);
  h << b.body << "<div id=\"tip\"></div>\n<script>" << kHeatmapScript << "</script>\n" << b.script << "</body></html>\n";
  return h.str();
}

void write_html(const Report& r, const std::filesystem::path& path, const BackwardReport* backward) {
  std::ofstream os(path, std::ios::binary);
  os << to_html(r, backward);
  os.close();
  if (!os) throw CannotTest("cannot write the HTML report to " + path.string());
}

}  // namespace flashcheck
