// How a campaign ends, the same for `run`, `merge` and `run --gpus`: the summary table, the skip
// reasons and the reproduce lines on stdout, the HTML pages, the JSON, and the exit code. One
// function, so a merged report reads exactly as the unsharded run's.
#pragma once
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runner/campaign_json.h"
#include "tools/output.h"

namespace flashcheck::cli {

// Prints the summary and writes the reports. `error`: flashcheck's own failure (exit 125 after
// everything is written). `write_pages`: writes the HTML pages (and may set report.pages to where
// they are), or empty for none. `extra`: keys added to the JSON (a merge's shards, run --gpus's
// GPUs). `after_table`: printed after the summary's table (a per-GPU table).
int end_campaign(const char* command, CommandOutputs& outputs, CampaignReport& report, std::optional<std::string> error,
                 const std::function<void()>& write_pages, const nlohmann::json& extra = {},
                 const std::function<void()>& after_table = {});

// `run --html DIR`: where the page of each kept failure goes, DIR/<kernel>_<k>.html, absolute (the
// JSON names them, so a merge can find them).
std::vector<std::vector<std::string>> failure_page_paths(const std::vector<VariantSummary>& all, const std::filesystem::path& dir);

// The title of a campaign's pages: "flashcheck run --seed S --cases N [--shard i/N] [--kernel K]".
std::string campaign_title(const CampaignReport& report);

// A merged campaign's pages (`merge --html`, `run --gpus --html`): each kept failure's page, written
// by the shard that ran it (with the error maps of the failing output), copied from report.pages[v][k]
// to DIR/<kernel>_<k>.html, where the unsharded run writes it, report.pages pointed there, and the
// overview DIR/index.html. Nothing is re-run: a page made from the JSON alone would lack the maps.
// Every page is tried; then throws CannotTest naming the first that could not be written (a shard
// run without --html, a page not readable from here).
void copy_failure_pages(CampaignReport& report, const std::filesystem::path& dir);

}  // namespace flashcheck::cli
