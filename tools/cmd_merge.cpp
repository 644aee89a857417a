// `flashcheck merge SHARD.json...`: the shards of one campaign (`run --shard i/N --json`, from
// machines, Slurm array tasks or GPUs) as the one report the unsharded run gives
// (runner/shard_merge.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "reference/conventions.h"
#include "runner/shard_merge.h"
#include "tools/campaign_end.h"
#include "tools/commands.h"
#include "tools/output.h"

namespace flashcheck::cli {

void add_merge(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("merge", "merge the --json reports of one campaign's shards (run --shard i/N) into one report");
  struct Opts {
    std::vector<std::string> files;
    std::string json, html, junit;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("shards", o->files, "the shards' run --json reports, every shard i/N of one campaign once")->required();
  cmd->add_option("--json", o->json, "write the merged report as JSON to PATH, or - for stdout (the text then goes to stderr)");
  cmd->add_option("--html", o->html,
                  "copy the HTML page of each kept failure into directory DIR (the shards must have run with --html)");
  cmd->add_option("--junit", o->junit, "write the merged report as JUnit XML to PATH (what the unsharded run's --junit writes)");
  cmd->callback([o, &action] {
    action = [o] {
      CommandOutputs outputs("merge", o->json, {}, o->junit);
      return outputs.run([&] {
        outputs.require_writable();
        if (!o->html.empty()) require_writable_dir("--html", o->html);
        std::vector<ShardFile> shards;
        for (const std::string& f : o->files) shards.push_back(read_shard(f));
        const int64_t n = shards.front().report.shard_count;
        CampaignReport merged = merge_shards(shards, n);
        std::printf("merged %zu shards of one campaign (seed %s, %s cases):", shards.size(),
                    merged.campaign.at("seed").dump().c_str(), merged.campaign.at("cases").dump().c_str());
        nlohmann::json provenance = nlohmann::json::array();
        for (const ShardFile& s : shards) {
          std::printf(" %s", printable_line(s.source).c_str());
          provenance.push_back({{"shard", std::to_string(s.report.shard_index) + "/" + std::to_string(n)}, {"file", s.source}});
        }
        std::printf("\n");
        std::function<void()> pages;
        if (!o->html.empty()) pages = [&] { copy_failure_pages(merged, o->html); };
        return end_campaign("merge", outputs, merged, std::nullopt, pages, {{"shards", provenance}});
      });
    };
  });
}

}  // namespace flashcheck::cli
