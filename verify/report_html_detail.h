// What the report pages' parts share (verify/report_html.cpp: the forward's page; verify/
// backward_report_html.cpp: the gradients' part of it): numbers as the page prints them, a verdict
// table row by row through verify/report.h's status helpers (never "ok" past a limit), typed arrays
// as base64, and the heatmap script both parts draw with.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "verify/report.h"

namespace flashcheck::html_detail {

// 6 significant digits; "nan", "inf", "-inf".
std::string num(double x);
// Typed arrays travel as base64 of their little-endian bytes: compact, and NaN/Inf survive (JSON has
// neither). The page decodes them into Float32Array / Uint8Array / Uint32Array.
std::string base64(const void* data, size_t n);
template <class T>
std::string b64(const std::vector<T>& v) {
  return base64(v.data(), v.size() * sizeof(T));
}
std::vector<uint8_t> flag_bytes(const std::vector<MapFlag>& f);
// A verdict table (<table id=...>, one <tr data-criterion data-status> per criterion): status,
// name, value against its limit, share of its limit, what. `measured` false: the values are "-".
void verdict_table(std::ostream& h, const std::string& table_attrs, const std::vector<Criterion>& criteria, bool measured);
// The error/tolerance colour legend of the heatmaps.
extern const char* const kLegend;
// A JSON text safe inside <script type="application/json"> ("</" would end the element early).
std::string script_json(std::string json);
// Defines window.fcHeat: dec (base64 to a typed array), FLAG_RGB, rank, colour, heatmap(canvas, n,
// m, ratio, flag, maxH, maxW), hover(canvas, grid, text), fmt, span, and measure(id), which marks
// <html> with a canvas's painted pixels and colours (data-painted-ID, data-colours-ID) for a
// headless browser's check. Loaded before the scripts that draw.
extern const char* const kHeatmapScript;

}  // namespace flashcheck::html_detail
