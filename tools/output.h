// What the commands write besides their text: JSON (on a stdout of its own, or in a file), HTML
// reports, and the exit-code contract on every path that writes them.
//
// The guarantees (README, "Reliability"): every report path is checked writable before any work;
// report files are replaced atomically (a reader sees the old report or the new one, whole); an
// output that cannot be written never stops the others from being written; a run that ends in
// cannot-test (125) still writes its JSON, stating the error ({"exit_code":125,"error":"..."}),
// and leaves no report of an earlier run at any of its paths; `--json -` puts exactly one JSON
// document on stdout whatever happens.
#pragma once
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "runner/campaign.h"
#include "verify/untrusted_text.h"

namespace flashcheck::cli {

// `--json -`: stdout carries the JSON and nothing else, so `| python3 -m json.tool` works. While
// active, file descriptor 1 points at stderr, so everything printed meanwhile — the text report, a
// campaign's log and table, a plugin's own printf — goes there; write() puts stdout back and
// writes the JSON to it.
class JsonStdout {
 public:
  JsonStdout();
  ~JsonStdout();
  JsonStdout(const JsonStdout&) = delete;
  JsonStdout& operator=(const JsonStdout&) = delete;
  void write(const std::string& json);

 private:
  void restore();
  int saved_ = -1;
};

// Refuses, before any work, a report file that could not be written: its folder is missing or
// not writable (tried by creating a file there, which also catches read-only file systems when
// running as root), or the path is a folder. `option` names the flag in the message.
void require_writable_file(const std::string& option, const std::string& path);
// The same for a folder of reports (created if missing).
void require_writable_dir(const std::string& option, const std::filesystem::path& dir);
// Writes a whole report file: atomically (a temporary beside it, renamed into place) for a regular
// file, directly for a device or pipe (`--json /dev/stderr`). Throws CannotTest naming the path.
void write_report_file(const std::filesystem::path& path, const std::string& text);

// The report files of one command: `--json PATH|-`, `--junit PATH` and any others (`check --html PATH`).
class CommandOutputs {
 public:
  // json: "" for none, "-" for stdout (set aside from now on), else a path. files: other report
  // files this command may write. junit: "" for none, else the path of the JUnit XML report.
  CommandOutputs(std::string command, std::string json, std::vector<std::string> files = {}, std::string junit = {});
  ~CommandOutputs();

  void require_writable() const;  // every path, before any work
  bool json_wanted() const { return !json_.empty(); }
  bool junit_wanted() const { return !junit_.empty(); }
  // The command's JSON document, once. Throws CannotTest if the file cannot be written.
  void write_json(const nlohmann::json& j);
  // The command's JUnit XML document (verify/junit_xml.h), once. Throws CannotTest if the file
  // cannot be written.
  void write_junit(const std::string& xml);
  // One of `files`: written now; an older one is no longer stale.
  void write_file(const std::string& path, const std::string& text);

  // Runs the command's work under the exit-code contract: whatever it throws (CannotTest, a
  // plugin that cannot be loaded, flashcheck's own failure) ends as 125 with one printable line on
  // stderr, a JSON document and a JUnit document stating the error unless the work already wrote
  // them, and no earlier report left at any of this command's paths.
  int run(const std::function<int()>& work);

 private:
  std::string command_, json_, junit_;
  std::vector<std::string> files_;
  std::set<std::string> fresh_;  // written by this run
  std::unique_ptr<JsonStdout> stdout_;
  bool json_written_ = false, junit_written_ = false;
};

// Whether `path` may be replaced by an error report: it holds nothing, or what starts with one of
// `starts` (a report of an earlier run), or is a device. A 125 never overwrites anything else (an
// input file named as the report path by mistake).
bool holds_report(const std::filesystem::path& path, std::initializer_list<std::string_view> starts);

// The JSON a cannot-test exit writes: {"exit_code":125,"error":"..."}.
nlohmann::json error_json(const std::string& message);

// For a command line refused before any command ran (CLI11's parse errors): the `--json` value
// the arguments give to run, check, list or merge, if any ("-" or a path).
std::optional<std::string> json_target_of(int argc, char** argv);
// The same for `--junit` (run, check, merge).
std::optional<std::string> junit_target_of(int argc, char** argv);

// The JUnit document of a command that cannot test: one <error> saying why (verify/junit_xml.h).
std::string error_junit(const std::string& command, const std::string& why);
// What a JUnit report of flashcheck's starts with (a 125 replaces only such a file, see holds_report).
inline constexpr std::string_view kJunitStart = "<?xml";

// A stream buffer that passes what is written through a TerminalFilter to another buffer: the
// campaign's log, which quotes kernels' error texts, reaches the terminal without their escape
// sequences and carriage returns.
class FilteredOutput : public std::streambuf {
 public:
  explicit FilteredOutput(std::streambuf* to) : to_(to) {}
  ~FilteredOutput() override;

 protected:
  int overflow(int c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  std::streambuf* to_;
  TerminalFilter filter_;
  std::string out_;
};

// One HTML page for a failing case of `run`. The campaign judged its kept failures with error maps
// (CampaignOptions::error_maps) in the kernel's worker; a kernel that threw, crashed or hung has
// only its report. Nothing runs here: a page never re-runs a kernel outside its isolation. Returns
// the page's path.
std::filesystem::path write_case_html(const CaseOutcome& failed, const std::filesystem::path& path);

// `run --html DIR`: a page per kept (shrunk) failure, DIR/<kernel>_<i>.html, and DIR/index.html,
// the campaign's overview (per kernel: counts, coverage of the drawn space, failures with their
// reproduce lines and links to their pages). Every page is tried; the first failure is thrown
// after the others were written. `copy_from` (a merge of shards): per kernel, per kept failure, the
// page its shard wrote, copied instead of written from the report (which, read back from JSON, has
// no error maps); an empty one fails that page, naming the kernel and case.
void write_failure_pages(const std::vector<VariantSummary>& all, const std::filesystem::path& dir,
                         const std::string& title, const std::vector<std::vector<std::string>>* copy_from = nullptr);

}  // namespace flashcheck::cli
