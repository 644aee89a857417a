// A report as one self-contained HTML page (no network: style, script and data are inline): the
// verdict table, heatmaps of error/tolerance over (q-tile × KV tile of the row's last visible key)
// and over (row × column) of the worst head, the per-row LSE error, the unwritten and NaN positions,
// and the reproducing command. The heatmaps need Report::maps (JudgeOptions::error_maps); without
// them the page says so and shows the rest.
#pragma once
#include <filesystem>
#include <string>

#include "verify/report.h"

namespace flashcheck {

std::string to_html(const Report& r);
// Text made safe for HTML element content and attribute values (& < > " ').
std::string html_escape(const std::string& s);
// Writes to_html(r) to path; throws CannotTest naming the path when it cannot be written.
void write_html(const Report& r, const std::filesystem::path& path);

}  // namespace flashcheck
