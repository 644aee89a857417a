#include "tools/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <iostream>

#include "reference/conventions.h"
#include "verify/junit_xml.h"
#include "verify/overview_html.h"
#include "verify/report_html.h"
#include "verify/safetensors.h"

namespace flashcheck::cli {

namespace fs = std::filesystem;

JsonStdout::JsonStdout() {
  std::cout.flush();
  std::fflush(stdout);
  saved_ = dup(STDOUT_FILENO);
  if (saved_ < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
    throw CannotTest(std::string("cannot set stdout aside for --json -: ") + std::strerror(errno));
}

JsonStdout::~JsonStdout() { restore(); }

void JsonStdout::write(const std::string& json) {
  restore();
  std::cout << json << std::flush;
}

void JsonStdout::restore() {
  if (saved_ < 0) return;
  std::cout.flush();
  std::fflush(stdout);
  dup2(saved_, STDOUT_FILENO);
  close(saved_);
  saved_ = -1;
}

namespace {

// Creates and removes a file in `dir`: the one test of "can a report be written here" that also
// holds for root (whom access() always answers yes) on a read-only file system.
std::optional<std::string> cannot_create_in(const fs::path& dir) {
  const fs::path probe = dir / (".flashcheck-write-test." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::string(std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return std::nullopt;
}

}  // namespace

void require_writable_file(const std::string& option, const std::string& path) {
  const std::string what = option + " " + path + ": ";
  if (path.empty()) throw CannotTest(option + ": an empty path");
  std::error_code ec;
  const fs::path p(path);
  const fs::file_status st = fs::status(p, ec);  // follows a symlink
  if (fs::is_directory(st)) throw CannotTest(what + "is a directory");
  if (fs::exists(st)) {
    if (::access(p.c_str(), W_OK) != 0) throw CannotTest(what + "cannot write it: " + std::strerror(errno));
    if (!fs::is_regular_file(st)) return;  // a device or pipe is written in place
  }
  const fs::path real = fs::is_symlink(fs::symlink_status(p, ec)) ? fs::weakly_canonical(p, ec) : p;
  const fs::path dir = real.has_parent_path() ? real.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw CannotTest(what + "no directory " + dir.string());
  if (auto why = cannot_create_in(dir)) throw CannotTest(what + "cannot write in " + dir.string() + ": " + *why);
}

void require_writable_dir(const std::string& option, const fs::path& dir) {
  const std::string what = option + " " + dir.string() + ": ";
  std::error_code ec;
  fs::path existing = dir.empty() ? fs::path(".") : dir;
  // The folder itself, or the nearest folder above it that exists (where it will be created).
  while (!fs::exists(existing, ec) && existing.has_parent_path() && existing.parent_path() != existing)
    existing = existing.parent_path();
  if (!fs::exists(existing, ec)) existing = ".";
  if (!fs::is_directory(existing, ec))
    throw CannotTest(what + (existing == dir ? std::string("is not a directory") : existing.string() + " is not a directory"));
  if (auto why = cannot_create_in(existing)) throw CannotTest(what + "cannot write in " + existing.string() + ": " + *why);
}

void write_report_file(const fs::path& path, const std::string& text) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    if (fs::is_directory(st)) throw CannotTest("cannot write " + path.string() + ": it is a directory");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw CannotTest("cannot write " + path.string() + ": " + std::strerror(errno));
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        throw CannotTest("cannot write " + path.string() + ": " + why);
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return;
  }
  // A symlink keeps pointing where it did: its target is replaced, not the link.
  const fs::path target = fs::is_symlink(fs::symlink_status(path, ec)) ? fs::weakly_canonical(path, ec) : path;
  try {
    write_file_atomic(target, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const SafetensorsError& e) {
    throw CannotTest("cannot write " + path.string() + ": " + e.what());
  }
}

bool holds_report(const fs::path& path, std::initializer_list<std::string_view> starts) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return true;  // nothing there, or a device or pipe written in place
  std::ifstream in(path, std::ios::binary);
  std::string head(64, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  const size_t text = head.find_first_not_of(" \t\r\n");
  if (text == std::string::npos) return true;  // empty
  for (std::string_view s : starts)
    if (head.compare(text, s.size(), s) == 0) return true;
  return false;
}

nlohmann::json error_json(const std::string& message) { return {{"exit_code", kCannotTest}, {"error", message}}; }

CommandOutputs::CommandOutputs(std::string command, std::string json, std::vector<std::string> files, std::string junit)
    : command_(std::move(command)), json_(std::move(json)), junit_(std::move(junit)) {
  for (auto& f : files)
    if (!f.empty()) files_.push_back(std::move(f));
  if (json_ == "-") stdout_ = std::make_unique<JsonStdout>();
}

CommandOutputs::~CommandOutputs() = default;

void CommandOutputs::require_writable() const {
  if (!json_.empty() && json_ != "-") require_writable_file("--json", json_);
  for (const auto& f : files_) require_writable_file("--html", f);
  // stdout is the JSON's or the text's: a JUnit report is always a file.
  if (junit_ == "-") throw CannotTest("--junit writes a file: give a path (--json - is the report on stdout)");
  if (!junit_.empty()) require_writable_file("--junit", junit_);
}

void CommandOutputs::write_json(const nlohmann::json& j) {
  json_written_ = true;  // one document: a failed write is not followed by an error document
  const std::string text = json_text(j) + "\n";
  if (json_ == "-") {
    stdout_->write(text);
  } else if (!json_.empty()) {
    write_report_file(json_, text);
  }
}

void CommandOutputs::write_junit(const std::string& xml) {
  junit_written_ = true;  // as the JSON: a failed write is not followed by an error document
  write_report_file(junit_, xml);
}

void CommandOutputs::write_file(const std::string& path, const std::string& text) {
  write_report_file(path, text);
  fresh_.insert(path);
}

int CommandOutputs::run(const std::function<int()>& work) {
  std::string error;
  try {
    return work();
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown error";
  }
  std::cout.flush();
  std::fflush(stdout);
  std::fprintf(stderr, "flashcheck %s: cannot test: %s\n", command_.c_str(), printable_line(error).c_str());
  if (!json_.empty() && !json_written_) {
    try {
      if (json_ != "-" && !holds_report(json_, {"{", "["}))
        throw CannotTest("not replacing " + json_ + " with the error report: it holds something else than a JSON report");
      write_json(error_json(error));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flashcheck %s: %s\n", command_.c_str(), printable_line(e.what()).c_str());
    }
  }
  if (!junit_.empty() && junit_ != "-" && !junit_written_) {
    try {
      if (!holds_report(junit_, {kJunitStart}))
        throw CannotTest("not replacing " + junit_ + " with the error report: it holds something else than a JUnit report");
      write_junit(error_junit(command_, error));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flashcheck %s: %s\n", command_.c_str(), printable_line(e.what()).c_str());
    }
  }
  // A report page this run did not write would be an earlier run's, read as this one's.
  for (const auto& f : files_) {
    std::error_code ec;
    if (!fresh_.count(f) && fs::is_regular_file(f, ec) && holds_report(f, {"<!DOCTYPE html>"})) fs::remove(f, ec);
  }
  return kCannotTest;
}

namespace {

// The value of `option` on a command line of one of `commands`, in either form (`--json F`, `--json=F`).
std::optional<std::string> option_value(int argc, char** argv, const std::string& option,
                                        std::initializer_list<std::string_view> commands) {
  if (argc < 2) return std::nullopt;
  const std::string command = argv[1];
  if (std::find(commands.begin(), commands.end(), command) == commands.end()) return std::nullopt;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == option && i + 1 < argc) return std::string(argv[i + 1]);
    if (a.rfind(option + "=", 0) == 0) return a.substr(option.size() + 1);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> json_target_of(int argc, char** argv) {
  return option_value(argc, argv, "--json", {"run", "check", "list", "merge"});
}

std::optional<std::string> junit_target_of(int argc, char** argv) {
  return option_value(argc, argv, "--junit", {"run", "check", "merge"});
}

std::string error_junit(const std::string& command, const std::string& why) {
  return junit_xml("flashcheck " + command, {cannot_test_suite(command, why)});
}

FilteredOutput::~FilteredOutput() {
  out_.clear();
  filter_.finish(out_);
  to_->sputn(out_.data(), static_cast<std::streamsize>(out_.size()));
  to_->pubsync();
}

int FilteredOutput::overflow(int c) {
  if (c == traits_type::eof()) return traits_type::not_eof(c);
  const char ch = static_cast<char>(c);
  xsputn(&ch, 1);
  return c;
}

std::streamsize FilteredOutput::xsputn(const char* s, std::streamsize n) {
  out_.clear();
  filter_.feed(std::string_view(s, static_cast<size_t>(n)), out_);
  if (!out_.empty()) to_->sputn(out_.data(), static_cast<std::streamsize>(out_.size()));
  return n;
}

int FilteredOutput::sync() { return to_->pubsync(); }

fs::path write_case_html(const CaseOutcome& failed, const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path().empty() ? "." : path.parent_path(), ec);
  write_report_file(path, to_html(printable_report(failed.report), failed.backward ? &*failed.backward : nullptr));
  std::cerr << "html report: " << printable_line(path.string()) << "\n";
  return path;
}

namespace {

// A shard's page of a failure, copied as it was written (merge --html).
void copy_page(const std::string& from, const fs::path& to, const VariantSummary& s, size_t k) {
  if (from.empty())
    throw CannotTest("the failure of case " + std::to_string(k < s.failure_cases.size() ? s.failure_cases[k] : -1) +
                     " of kernel '" + s.name + "' has no HTML page: its shard ran without --html");
  std::ifstream in(from, std::ios::binary);
  if (!in) throw CannotTest("cannot read the HTML page " + from + " of kernel '" + s.name + "': " + std::strerror(errno));
  std::ostringstream page;
  page << in.rdbuf();
  std::error_code ec;
  fs::create_directories(to.parent_path().empty() ? "." : to.parent_path(), ec);
  write_report_file(to, page.str());
  std::cerr << "html report: " << printable_line(to.string()) << "\n";
}

}  // namespace

void write_failure_pages(const std::vector<VariantSummary>& all, const fs::path& dir, const std::string& title,
                         const std::vector<std::vector<std::string>>* copy_from) {
  std::optional<std::string> first_error;
  CampaignOverview overview;
  overview.title = title;
  for (const VariantSummary& s : all) {
    KernelOverview k;
    k.name = s.name;
    k.unavailable = s.unavailable;
    k.cases = s.cases;
    k.passed = s.passed;
    k.failed = s.failed;
    k.skipped = s.skipped;
    k.not_run = s.not_run;
    k.closest = s.tightest ? to_text(*s.tightest) : s.judged ? "-" : "";
    k.failed_by = s.failed_by;
    k.skipped_by = s.skipped_by;
    k.coverage = s.coverage;
    for (size_t i = 0; i < s.failures.size(); ++i) {
      const CaseOutcome& f = s.failures[i];
      const std::string page = s.name + "_" + std::to_string(i) + ".html";
      try {
        if (copy_from) {
          const size_t v = static_cast<size_t>(&s - all.data());
          copy_page(v < copy_from->size() && i < (*copy_from)[v].size() ? (*copy_from)[v][i] : "", dir / page, s, i);
        } else {
          write_case_html(f, dir / page);
        }
      } catch (const std::exception& e) {
        if (!first_error) first_error = e.what();
      }
      KernelOverview::Failure kf;
      kf.problem = to_string(f.c.problem) + " dist=" + std::string(to_string(f.c.dist));
      for (const Criterion& c : f.report.criteria)
        if (!c.pass) kf.failed.push_back(c);
      if (f.backward) {  // the gradients' failures, named as the text names them ("dk: baseline_relative")
        for (const GradientVerdict& g : f.backward->gradients)
          for (Criterion c : g.criteria)
            if (!c.pass) {
              c.name = g.name + ": " + c.name;
              kf.failed.push_back(std::move(c));
            }
        for (const Criterion& c : f.backward->checks)
          if (!c.pass) kf.failed.push_back(c);
      }
      kf.reproduce = i < s.repro.size() ? s.repro[i] : std::string();
      kf.page = page;
      kf.output_judged = f.judged();
      k.failures.push_back(std::move(kf));
    }
    k.unload_failure = s.unload_failure;
    overview.kernels.push_back(std::move(k));
  }
  try {
    std::filesystem::create_directories(dir);
    write_overview_html(overview, dir / "index.html");
    std::cerr << "html overview: " << (dir / "index.html").string() << "\n";
  } catch (const std::exception& e) {
    if (!first_error) first_error = e.what();
  }
  if (first_error) throw CannotTest(*first_error);
}

}  // namespace flashcheck::cli
