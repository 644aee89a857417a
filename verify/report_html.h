// A report as one self-contained HTML page (no network: style, script and data are inline): the
// verdict table, heatmaps of error/tolerance over (q-tile × KV tile of the row's last visible key)
// and over (row × column) of the worst head, the per-row LSE error, the unwritten and NaN positions,
// and the reproducing command. The heatmaps need Report::maps (JudgeOptions::error_maps); without
// them the page says so and shows the rest. A file's gradients get their own part of the page.
#pragma once
#include <filesystem>
#include <string>

#include "verify/backward_criteria.h"
#include "verify/report.h"

namespace flashcheck {

// With `backward` (a file with gradients, verify/check_file.h), the page also holds the backward
// verdict apart from the forward's (verify/backward_report_html.h), and its headline is the file's.
std::string to_html(const Report& r, const BackwardReport* backward = nullptr);
// The page of gradients judged without a forward output (the C API's and Python's check_backward
// with o absent): the backward's part alone, and a line saying the forward was not judged.
std::string to_html(const BackwardReport& backward);
// Text made safe for HTML element content and attribute values (& < > " ').
std::string html_escape(const std::string& s);
// Writes to_html(r) to path; throws CannotTest naming the path when it cannot be written.
void write_html(const Report& r, const std::filesystem::path& path, const BackwardReport* backward = nullptr);

}  // namespace flashcheck
