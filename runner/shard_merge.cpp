#include "runner/shard_merge.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "reference/conventions.h"
#include "verify/untrusted_text.h"

namespace flashcheck {

namespace {

std::string shard_name(int64_t i, int64_t n) { return std::to_string(i) + "/" + std::to_string(n); }

// "'seed' is 1 in a.json and 2 in b.json": the first option two identities disagree on.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& an, const std::string& bn) {
  std::set<std::string> keys;
  for (const auto& [k, v] : a.items()) keys.insert(k);
  for (const auto& [k, v] : b.items()) keys.insert(k);
  for (const std::string& k : keys) {
    const std::string va = a.contains(k) ? a.at(k).dump() : "(absent)", vb = b.contains(k) ? b.at(k).dump() : "(absent)";
    if (va != vb) return "'" + k + "' is " + va + " in " + an + " and " + vb + " in " + bn;
  }
  return "they differ";
}

std::string names_of(const CampaignReport& r) {
  std::string s;
  for (const VariantSummary& v : r.variants) s += (s.empty() ? "" : ", ") + v.name;
  return "[" + s + "]";
}

CaseVerdict lost_verdict(int64_t index, const std::string& why) {
  CaseVerdict v;
  v.index = index;
  v.kind = CaseVerdict::Kind::failed;
  v.failed_by = {"worker_died"};
  v.abnormal = AbnormalEnd{"worker_died", why, false};
  v.lost = true;
  return v;
}

}  // namespace

ShardFile read_shard(const std::string& path) {
  std::string name = printable_line(path);
  name.insert(name.begin(), '\'');  // not "'" + s: GCC 12 warns falsely (-Wrestrict) on that concatenation
  name.push_back('\'');
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CannotTest("cannot read shard report " + name + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  if (s.find_first_not_of(" \t\r\n") == std::string::npos) throw CannotTest("shard report " + name + " is empty");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(s);
  } catch (const nlohmann::json::parse_error& e) {
    // A write cut short (a killed job, a full disk) ends before the document does.
    const bool cut = e.byte >= s.size();
    throw CannotTest("shard report " + name + (cut ? " is truncated: the JSON ends at byte " + std::to_string(s.size()) +
                                                        " before the document does"
                                                  : " is not JSON: " + std::string(e.what())));
  }
  if (j.is_object() && !j.contains("campaign") && j.contains("error"))
    throw CannotTest("shard report " + name + " is the report of a run that could not test: " + j.at("error").dump());
  ShardFile f;
  f.source = path;
  try {
    f.report = campaign_report_from_json(j);
  } catch (const std::exception& e) {
    throw CannotTest("shard report " + name + ": " + e.what());
  }
  return f;
}

CampaignReport merge_shards(const std::vector<ShardFile>& shards, int64_t n, const std::vector<LostShard>& lost) {
  if (n < 1) throw CannotTest("merge: no shard count");
  // Which shard each index is: every one of 0..N-1 exactly once, given or lost.
  std::vector<const ShardFile*> given(static_cast<size_t>(n), nullptr);
  std::vector<const LostShard*> gone(static_cast<size_t>(n), nullptr);
  for (const ShardFile& f : shards) {
    const CampaignReport& r = f.report;
    if (r.shard_count != n)
      throw CannotTest(f.source + " is shard " + shard_name(r.shard_index, r.shard_count) + ", not one of " + std::to_string(n) +
                       " shards like " + shards.front().source);
    if (const ShardFile* other = given[static_cast<size_t>(r.shard_index)])
      throw CannotTest("shard " + shard_name(r.shard_index, n) + " is given twice: " + other->source + " and " + f.source);
    given[static_cast<size_t>(r.shard_index)] = &f;
  }
  for (const LostShard& l : lost) {
    if (l.index < 0 || l.index >= n || given[static_cast<size_t>(l.index)] || gone[static_cast<size_t>(l.index)])
      throw CannotTest("shard " + shard_name(l.index, n) + " is both lost and given, or out of range");
    gone[static_cast<size_t>(l.index)] = &l;
  }
  std::string missing;
  for (int64_t i = 0; i < n; ++i)
    if (!given[static_cast<size_t>(i)] && !gone[static_cast<size_t>(i)]) missing += (missing.empty() ? "" : ", ") + shard_name(i, n);
  if (!missing.empty()) throw CannotTest("shard " + missing + " missing: a merge needs every shard of the campaign");
  if (shards.empty()) {
    std::string why;
    for (const LostShard& l : lost) why += (why.empty() ? "" : "; ") + l.why;
    throw CannotTest("no shard's report to merge: every one was lost (" + why + ")");
  }

  // One campaign: the same identity, every shard run to its end, the same kernels.
  const ShardFile& first = shards.front();
  for (const ShardFile& f : shards) {
    if (f.report.campaign != first.report.campaign)
      throw CannotTest("shards of different campaigns: " + first_difference(first.report.campaign, f.report.campaign, first.source, f.source));
    if (!f.report.finished)
      throw CannotTest("shard " + shard_name(f.report.shard_index, n) + " (" + f.source + ") did not finish: " +
                       f.report.error.value_or("no reason given"));
    if (names_of(f.report) != names_of(first.report))
      throw CannotTest("shards of different campaigns: the kernels are " + names_of(first.report) + " in " + first.source + " and " +
                       names_of(f.report) + " in " + f.source);
  }
  const CampaignRules rules = campaign_rules(first.report.campaign);

  CampaignReport out;
  out.campaign = first.report.campaign;
  for (size_t vi = 0; vi < first.report.variants.size(); ++vi) {
    VariantSummary m;
    m.name = first.report.variants[vi].name;
    std::vector<std::string> pages;
    // Available in every shard or in none: a kernel that ran on some machines only tested part of
    // the campaign, and the merge would pass it off as the whole.
    const ShardFile* ran = nullptr;
    const ShardFile* unavailable = nullptr;
    for (const ShardFile& f : shards) (f.report.variants[vi].unavailable ? unavailable : ran) = &f;
    if (ran && unavailable)
      throw CannotTest("kernel '" + m.name + "' was unavailable in " + unavailable->source + " (" +
                       *unavailable->report.variants[vi].unavailable + ") but ran in " + ran->source +
                       ": the shards ran on machines that differ; run every shard where the kernel can run");
    if (unavailable) {
      m.unavailable = unavailable->report.variants[vi].unavailable;
      out.variants.push_back(std::move(m));
      out.pages.push_back({});
      continue;
    }
    m.coverage.axes = first.report.variants[vi].coverage.axes;  // the space drawn from: the same in every shard
    m.coverage.declared = first.report.variants[vi].coverage.declared;
    // Every verdict at its case, each in the shard that owns it; the kept failures by case.
    std::vector<const CaseVerdict*> verdict(static_cast<size_t>(rules.cases), nullptr);
    struct Kept {
      const ShardFile* shard;
      size_t k;
    };
    std::map<int64_t, Kept> kept_by_case;
    for (const ShardFile& f : shards) {
      const VariantSummary& s = f.report.variants[vi];
      for (const CaseVerdict& v : s.verdicts) {
        if (v.index < 0 || v.index >= rules.cases || v.index % n != f.report.shard_index)
          throw CannotTest(f.source + " holds a verdict for case " + std::to_string(v.index) + " of kernel '" + m.name +
                           "', which is not a case of shard " + shard_name(f.report.shard_index, n));
        if (verdict[static_cast<size_t>(v.index)])
          throw CannotTest(f.source + " holds case " + std::to_string(v.index) + " of kernel '" + m.name + "' twice");
        verdict[static_cast<size_t>(v.index)] = &v;
      }
      for (size_t k = 0; k < s.failures.size(); ++k) kept_by_case[s.failure_cases[k]] = Kept{&f, k};
      if (s.unload_failure && !m.unload_failure) m.unload_failure = s.unload_failure;
    }
    // Counted again in case order, with the run's own rules: its stop after max_timeouts hangs,
    // --fail-fast, and which failures it keeps.
    bool kept_hang = false;
    for (int64_t i = 0; i < rules.cases; ++i) {
      if (m.timed_out >= rules.max_timeouts) {
        ++m.not_run;
        continue;
      }
      const int64_t k = i % n;
      CaseVerdict v;
      if (const LostShard* l = gone[static_cast<size_t>(k)]) {
        v = lost_verdict(i, l->why);
      } else if (const CaseVerdict* got = verdict[static_cast<size_t>(i)]) {
        v = *got;
      } else {
        // A shard stops a kernel only after its own hangs or its first failure (--fail-fast), which
        // come no earlier in the whole campaign than here: a gap is a damaged or cut file.
        throw CannotTest(given[static_cast<size_t>(k)]->source + " has no verdict for case " + std::to_string(i) + " of kernel '" +
                         m.name + "', which shard " + shard_name(k, n) + " runs: the file was cut short or edited");
      }
      count_case(m, v);
      if (v.kind != CaseVerdict::Kind::failed) continue;
      if (keep_failure_rule(v, static_cast<int64_t>(m.failures.size()), kept_hang, rules.max_failures_kept) == Keep::yes) {
        const auto it = kept_by_case.find(i);
        if (it == kept_by_case.end())
          throw CannotTest(given[static_cast<size_t>(k)]->source + " does not hold the failure of case " + std::to_string(i) +
                           " of kernel '" + m.name + "', which the whole campaign keeps: the file was edited");
        const VariantSummary& from = it->second.shard->report.variants[vi];
        const size_t fk = it->second.k;
        kept_hang |= v.abnormal && v.abnormal->timed_out;
        m.failures.push_back(from.failures[fk]);
        m.repro.push_back(from.repro[fk]);
        m.failure_cases.push_back(i);
        const auto& src_pages = it->second.shard->report.pages[vi];
        pages.push_back(fk < src_pages.size() ? src_pages[fk] : "");
      }
      if (rules.fail_fast) break;
    }
    finish_counts(m);
    out.variants.push_back(std::move(m));
    out.pages.push_back(std::move(pages));
  }
  return out;
}

}  // namespace flashcheck
