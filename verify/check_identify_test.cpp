// `flashcheck check --identify`: a third-party kernel's file, judged under each reading of its
// problem, tells which convention the kernel follows.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "reference/naive.h"
#include "testing/test_seed.h"
#include "verify/check_file.h"
#include "verify/check_file_format.h"
#include "verify/safetensors.h"

namespace flashcheck {
namespace {

namespace fs = std::filesystem;

// The file of a kernel that computed `computed` while the file states `stated`.
fs::path file_of(const Problem& stated, const Problem& computed, const Inputs& in, const std::string& name) {
  const OracleResult r = naive_attention(computed, in);
  const std::vector<float> o(r.o.begin(), r.o.end()), lse(r.lse.begin(), r.lse.end());
  const fs::path path = fs::temp_directory_path() / ("fc_identify_" + std::to_string(::getpid()) + "_" + name + ".safetensors");
  write_safetensors(path, make_check_file(stated, in, o, &lse));
  return path;
}

// A kernel reading the stated left bound as exclusive (cuDNN's, xformers' convention) sees one key
// fewer on the left: the stated reading fails, the "left exclusive" one passes, and it says so.
TEST(CheckIdentify, TellsAnExclusiveLeftWindowBound) {
  std::mt19937_64 g(testing::seed_for(1401));
  const int64_t left = std::uniform_int_distribution<int64_t>(3, 20)(g);
  const int64_t sq = std::uniform_int_distribution<int64_t>(30, 90)(g);
  const Problem stated = parse_problem("b=1 hq=2 hkv=1 sq=" + std::to_string(sq) + " skv=" + std::to_string(sq + 7) +
                                       " d=32 dtype=bf16 window=" + std::to_string(left) + ",0");
  Problem computed = stated;
  computed.window.left = left - 1;
  const Inputs in = make_inputs(stated, g(), Dist::normal);
  const fs::path path = file_of(stated, computed, in, "window");
  const std::vector<ReadingVerdict> v = identify_file(path, CheckFileOptions{});
  ASSERT_GE(v.size(), 2u);
  EXPECT_EQ(v.front().reading.name, "as stated");
  EXPECT_FALSE(v.front().pass) << to_text(v);
  int passing = 0;
  for (const ReadingVerdict& r : v) {
    passing += r.pass;
    if (r.pass) {
      EXPECT_NE(r.reading.name.find("window left exclusive"), std::string::npos) << to_text(v);
    }
  }
  EXPECT_EQ(passing, 1) << to_text(v);
  EXPECT_NE(identification_summary(v).find("window left exclusive"), std::string::npos) << identification_summary(v);

  // The command line: the table on stdout, the JSON with every reading, exit 1 (not as stated).
  const std::string cmd = std::string("'") + FLASHCHECK_CLI + "' check --identify --json - '" + path.string() + "' 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_FALSE(j.at("pass").get<bool>());
  EXPECT_EQ(j.at("readings").size(), v.size());
  EXPECT_NE(j.at("summary").get<std::string>().find("window left exclusive"), std::string::npos) << out;
  fs::remove(path);
}

// A kernel that follows the stated conventions passes as stated; no reading one convention away
// may pass as well where the convention changes the output (here: the causal alignment on Sq < Skv).
TEST(CheckIdentify, AKernelAsStatedPassesOnlyAsStated) {
  std::mt19937_64 g(testing::seed_for(1402));
  const int64_t sq = std::uniform_int_distribution<int64_t>(20, 60)(g);
  const Problem p = parse_problem("b=2 hq=4 hkv=2 sq=" + std::to_string(sq) + " skv=" + std::to_string(sq + 33) +
                                  " d=64 dtype=f16 causal=bottom_right");
  const Inputs in = make_inputs(p, g(), Dist::normal);
  const fs::path path = file_of(p, p, in, "stated");
  const std::vector<ReadingVerdict> v = identify_file(path, CheckFileOptions{});
  ASSERT_FALSE(v.empty());
  EXPECT_TRUE(v.front().pass) << to_text(v);
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i].reading.name.find("causal") != std::string::npos) {
      EXPECT_FALSE(v[i].pass) << to_text(v);
    }
  fs::remove(path);
}

}  // namespace
}  // namespace flashcheck
