#include "tools/gpus.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "reference/conventions.h"
#include "runner/device.h"
#include "runner/shard_merge.h"
#include "tools/campaign_end.h"
#include "tools/strict_options.h"

extern char** environ;

namespace flashcheck::cli {

namespace fs = std::filesystem;

namespace {

std::vector<std::string>& command_line_store() {
  static std::vector<std::string> args;
  return args;
}

// A test hook, never a user's setting: FLASHCHECK_TEST_FAKE_GPUS=N makes N CPU workers stand in for
// GPUs, so the split, the merge and a dying worker are tested on machines without one (CI). The
// workers run whatever kernels the machine has (the replica, plugins); it is said on stderr.
std::optional<int> fake_gpus() {
  const char* v = std::getenv("FLASHCHECK_TEST_FAKE_GPUS");
  if (!v || !*v) return std::nullopt;
  uint64_t n = 0;
  if (!parse_whole(v, 64, n) || n < 1) throw CannotTest("FLASHCHECK_TEST_FAKE_GPUS expects 1 to 64, got " + quote_value(v));
  return static_cast<int>(n);
}

std::string signal_text(int sig) {
  if (const char* a = sigabbrev_np(sig)) return std::string("SIG") + a;
  return "signal " + std::to_string(sig);
}

struct Worker {
  int gpu = 0;              // index among the visible GPUs
  std::string device;       // its CUDA_VISIBLE_DEVICES
  int64_t shard = 0;
  fs::path json, log, html;
  pid_t pid = -1;
  bool done = false;
  int status = 0;           // waitpid's
  std::optional<std::string> killed;  // why flashcheck killed it (a hang)
  double seconds = 0;
};

// Workers share the host's cores, each judging its cases with OpenMP and BLAS threads: idle ones
// must sleep, not spin, or N workers' spinning starves the others (an OMP_WAIT_POLICY of the user's
// is kept). Their number is not cut down: the fp64 oracle's row blocks follow the thread count, and
// a different count would change the reports' last bits against the one-GPU run.
std::optional<std::string> wait_policy(int64_t workers) {
  if (workers < 2 || std::getenv("OMP_WAIT_POLICY")) return std::nullopt;
  return "passive";
}

// Starts `flashcheck run ... --shard k/N --json F` with its GPU pinned; its output goes to its log.
void spawn(Worker& w, const std::vector<std::string>& args, const std::optional<std::string>& policy) {
  const int log = open(w.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) throw CannotTest("cannot create the worker log " + w.log.string() + ": " + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log, 1);
  posix_spawn_file_actions_adddup2(&fa, log, 2);
  std::vector<char*> argv{const_cast<char*>("/proc/self/exe")};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // Our environment with the GPU pinned, and our pid: the worker dies with us (tools/main.cpp), so
  // a run killed by its scheduler leaves no worker behind on the GPUs.
  const std::string pin = "CUDA_VISIBLE_DEVICES=" + w.device, parent = "FLASHCHECK_GPU_PARENT=" + std::to_string(getpid()),
                    omp = "OMP_WAIT_POLICY=" + policy.value_or("");
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0 && std::strncmp(*e, "FLASHCHECK_GPU_PARENT=", 22) != 0) env.push_back(*e);
  env.push_back(const_cast<char*>(pin.c_str()));
  env.push_back(const_cast<char*>(parent.c_str()));
  if (policy) env.push_back(const_cast<char*>(omp.c_str()));
  env.push_back(nullptr);
  const int rc = posix_spawn(&w.pid, "/proc/self/exe", &fa, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  close(log);
  if (rc != 0) throw CannotTest(std::string("cannot start a GPU worker: ") + std::strerror(rc));
}

// Why a worker's report cannot stand for its cases, or nothing: it was killed, crashed, exited
// with a code outside the contract, or left no readable report.
std::optional<std::string> death_of(const Worker& w, std::optional<ShardFile>& read, std::optional<std::string>& cannot_test) {
  const std::string who = "worker on GPU " + std::to_string(w.gpu) + " (CUDA_VISIBLE_DEVICES=" + w.device + ")";
  if (w.killed) return who + " hung: " + *w.killed;
  if (WIFSIGNALED(w.status)) return who + " died: killed by " + signal_text(WTERMSIG(w.status));
  const int code = WIFEXITED(w.status) ? WEXITSTATUS(w.status) : -1;
  if (code != kPass && code != kMismatch && code != kCannotTest) return who + " died: exited " + std::to_string(code);
  try {
    read = read_shard(w.json.string());
  } catch (const std::exception& e) {
    if (code == kCannotTest) {  // it refused to test (a bad plugin, no usable GPU): flashcheck's 125
      cannot_test = who + " could not test: " + std::string(e.what());
      return std::nullopt;
    }
    return who + " died: exited " + std::to_string(code) + " leaving no readable report (" + e.what() + ")";
  }
  if (!read->report.finished) {
    cannot_test = who + " could not test: " + read->report.error.value_or("its campaign did not finish");
    read.reset();
  }
  return std::nullopt;
}

std::string exit_text(const Worker& w) {
  if (w.killed) return "killed: " + *w.killed;
  if (WIFSIGNALED(w.status)) return "killed by " + signal_text(WTERMSIG(w.status));
  return "exit " + std::to_string(WIFEXITED(w.status) ? WEXITSTATUS(w.status) : -1);
}

}  // namespace

void remember_command_line(int argc, char** argv) {
  command_line_store().assign(argv + std::min(argc, 1), argv + argc);
}

std::vector<int> parse_gpu_selection(const std::string& value, int visible) {
  const std::string shown = "--gpus " + quote_value(value);
  std::vector<int> out;
  if (value == "all") {
    for (int i = 0; i < visible; ++i) out.push_back(i);
    return out;
  }
  uint64_t n = 0;
  if (value.find(',') == std::string::npos) {
    if (!parse_whole(value, 1u << 16, n) || n < 1)
      throw CannotTest(shown + ": expects all, a count N >= 1 (the first N GPUs), or a list of GPU indices such as 0,1 (one GPU: 2,)");
    if (static_cast<int>(n) > visible)
      throw CannotTest(shown + ": " + std::to_string(n) + " GPUs asked for, " + std::to_string(visible) + " visible here");
    for (int i = 0; i < static_cast<int>(n); ++i) out.push_back(i);
    return out;
  }
  std::set<int> seen;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string item = value.substr(start, comma - start);
    start = comma + 1;
    if (item.empty() && comma == value.size() && !out.empty()) break;  // "2,": one GPU, by index
    if (!parse_whole(item, 1u << 16, n))
      throw CannotTest(shown + ": " + quote_value(item) + " is not a GPU index (a list is indices such as 0,1)");
    if (static_cast<int>(n) >= visible)
      throw CannotTest(shown + ": there is no GPU " + std::to_string(n) + " here (" + std::to_string(visible) + " visible: 0 to " +
                       std::to_string(visible - 1) + ")");
    if (!seen.insert(static_cast<int>(n)).second) throw CannotTest(shown + ": GPU " + std::to_string(n) + " is listed twice");
    out.push_back(static_cast<int>(n));
  }
  return out;
}

std::string cuda_device_for(int index, const char* ours) {
  if (!ours || !*ours) return std::to_string(index);
  std::vector<std::string> entries;
  std::string s = ours;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    entries.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  // The runtime numbers the visible devices 0.. in this list's order.
  return index < static_cast<int>(entries.size()) ? entries[static_cast<size_t>(index)] : std::to_string(index);
}

std::vector<std::string> worker_arguments(const std::vector<std::string>& ours) {
  static const char* const kDropped[] = {"--gpus", "--worker-timeout", "--json", "--html", "--junit"};
  std::vector<std::string> out;
  for (size_t i = 0; i < ours.size(); ++i) {
    const std::string& a = ours[i];
    bool dropped = false;
    for (const char* d : kDropped) {
      const std::string opt = d;
      if (a == opt) {
        ++i;  // and its value
        dropped = true;
      } else if (a.rfind(opt + "=", 0) == 0) {
        dropped = true;
      }
    }
    if (!dropped) out.push_back(a);
  }
  return out;
}

int run_on_gpus(const GpuRunOptions& opt, CommandOutputs& outputs) {
  if (opt.gpus.empty()) throw CannotTest("--worker-timeout applies to --gpus workers: give --gpus too");
  if (opt.shard_given) throw CannotTest("--gpus splits the campaign into shards itself: give no --shard with it");
  if (opt.problem_given) throw CannotTest("--gpus runs a campaign: --problem (one case) runs on one GPU; give no --gpus with it");
  int visible = 0;
  const std::optional<int> fake = fake_gpus();
  if (fake) {
    visible = *fake;
    std::fprintf(stderr, "flashcheck run --gpus: FLASHCHECK_TEST_FAKE_GPUS=%d: %d CPU workers stand in for GPUs (a test hook)\n",
                 visible, visible);
  } else {
    if (auto why = device::unavailable()) throw CannotTest("--gpus: no GPU can be used here: " + *why);
    visible = device::count();
  }
  const std::vector<int> chosen = parse_gpu_selection(opt.gpus, visible);
  const int64_t n = static_cast<int64_t>(chosen.size());

  // The workers' files live in a directory of their own, removed at the end unless a worker died
  // or could not test (its log then says why).
  std::string tmpl = (fs::temp_directory_path() / "flashcheck-gpus-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw CannotTest(std::string("cannot create a directory for the GPU workers: ") + std::strerror(errno));
  const fs::path dir = tmpl;
  bool keep_dir = false;
  struct Cleanup {
    const fs::path& dir;
    const bool& keep;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) fs::remove_all(dir, ec);
    }
  } cleanup{dir, keep_dir};

  const std::vector<std::string> base = worker_arguments(command_line_store());
  const char* ours = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<Worker> workers(static_cast<size_t>(n));
  const std::optional<std::string> policy = wait_policy(n);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < n; ++k) {
    Worker& w = workers[static_cast<size_t>(k)];
    w.gpu = chosen[static_cast<size_t>(k)];
    w.device = cuda_device_for(w.gpu, ours);
    w.shard = k;
    const std::string tag = "gpu" + std::to_string(w.gpu);
    w.json = dir / (tag + ".json");
    w.log = dir / (tag + ".log");
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--shard", std::to_string(k) + "/" + std::to_string(n), "--json", w.json.string()});
    if (!opt.html.empty()) {
      w.html = dir / (tag + "_html");
      args.insert(args.end(), {"--html", w.html.string()});
    }
    std::string shown;
    for (const std::string& a : args) shown += " " + a;
    std::fprintf(stderr, "gpu %d (CUDA_VISIBLE_DEVICES=%s): flashcheck%s\n", w.gpu, w.device.c_str(), printable_line(shown).c_str());
    spawn(w, args, policy);
  }

  // Wait for all. A worker past --worker-timeout is killed; so is one still running long after the
  // others ended (same-sized shards: 4x the slowest finished worker, and at least 5 more minutes),
  // which is how a hang in the driver, where no case time limit reaches, ends.
  Progress progress(true);
  double slowest_done = -1;
  for (int64_t running = n; running > 0;) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (Worker& w : workers) {
      if (w.done) continue;
      const pid_t got = waitpid(w.pid, &w.status, WNOHANG);
      if (got == w.pid) {
        w.done = true;
        w.seconds = el;
        slowest_done = std::max(slowest_done, el);
        --running;
        continue;
      }
      std::optional<std::string> kill_why;
      if (opt.worker_timeout_s > 0 && el > opt.worker_timeout_s) {
        char buf[120];
        std::snprintf(buf, sizeof buf, "still running after %.0f s (--worker-timeout)", opt.worker_timeout_s);
        kill_why = buf;
      } else if (slowest_done >= 0 && running < n && el > std::max(4 * slowest_done, slowest_done + 300)) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "still running after %.0f s, when the other workers ended by %.0f s", el, slowest_done);
        kill_why = buf;
      }
      if (kill_why) {
        kill(w.pid, SIGKILL);  // its kernel workers die with it (runner/isolation_worker.cpp)
        waitpid(w.pid, &w.status, 0);
        w.done = true;
        w.killed = kill_why;
        w.seconds = el;
        --running;
      }
    }
    if (running == 0) break;
    char line[120];
    std::snprintf(line, sizeof line, "run --gpus: %lld of %lld workers done (%.0f s)", static_cast<long long>(n - running),
                  static_cast<long long>(n), el);
    progress.update(line);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  progress.finish();

  // Each worker's report, or the reason its cases become verdicts.
  std::vector<ShardFile> shards;
  std::vector<LostShard> lost;
  std::optional<std::string> cannot_test;
  for (const Worker& w : workers) {
    std::optional<ShardFile> read;
    if (auto died = death_of(w, read, cannot_test)) {
      std::fprintf(stderr, "run --gpus: %s; its %s cases fail as worker_died (log: %s)\n", died->c_str(),
                   ("shard " + std::to_string(w.shard) + "/" + std::to_string(n)).c_str(), w.log.c_str());
      lost.push_back({w.shard, *died});
      keep_dir = true;
    } else if (read) {
      shards.push_back(std::move(*read));
    }
  }
  if (cannot_test) {
    keep_dir = true;
    throw CannotTest(*cannot_test + " (worker logs in " + dir.string() + ")");
  }
  CampaignReport merged = merge_shards(shards, n, lost);

  // The per-GPU table and JSON.
  nlohmann::json per_gpu = nlohmann::json::array();
  for (const Worker& w : workers) {
    nlohmann::json g{{"gpu", w.gpu}, {"cuda_visible_devices", w.device}, {"shard", std::to_string(w.shard) + "/" + std::to_string(n)},
                     {"seconds", w.seconds}, {"exit", exit_text(w)}};
    for (const ShardFile& s : shards)
      if (s.report.shard_index == w.shard) {
        int64_t cases = 0, failed = 0;
        for (const VariantSummary& v : s.report.variants) {
          cases += v.cases;
          failed += v.failed;
        }
        g["cases"] = cases;
        g["failed"] = failed;
      }
    for (const LostShard& l : lost)
      if (l.index == w.shard) g["lost"] = l.why;
    if (keep_dir) g["log"] = w.log.string();
    per_gpu.push_back(g);
  }
  const auto table = [&] {
    std::printf("\n%-4s %-22s %-7s %7s %7s %8s  %s\n", "gpu", "CUDA_VISIBLE_DEVICES", "shard", "cases", "failed", "seconds", "exit");
    for (const nlohmann::json& g : per_gpu)
      std::printf("%-4d %-22s %-7s %7s %7s %8.1f  %s\n", g.at("gpu").get<int>(),
                  printable_line(g.at("cuda_visible_devices").get<std::string>()).c_str(), g.at("shard").get<std::string>().c_str(),
                  g.contains("cases") ? g.at("cases").dump().c_str() : "-", g.contains("failed") ? g.at("failed").dump().c_str() : "-",
                  g.at("seconds").get<double>(),
                  printable_line(g.contains("lost") ? g.at("lost").get<std::string>() : g.at("exit").get<std::string>()).c_str());
    if (keep_dir) std::printf("worker logs: %s\n", printable_line(dir.string()).c_str());
  };
  std::function<void()> pages;
  if (!opt.html.empty()) pages = [&] { copy_failure_pages(merged, opt.html); };
  return end_campaign("run", outputs, merged, std::nullopt, pages, {{"gpus", per_gpu}}, table);
}

}  // namespace flashcheck::cli
