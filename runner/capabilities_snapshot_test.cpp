// Every kernel this build registers, its declared Capabilities against the checked-in snapshot
// gpu/capabilities.json, so that a change of a declaration is a visible diff rather than a silent
// change of what the campaigns draw and how outputs are judged (tools/mutate/DETECTION.md, gap 4:
// a halved max_seq passes every output check). The file is keyed by kernel name and holds every
// built-in kernel: a CPU build compares the ones it registers (the replica), a CUDA build the GPU
// kernels too; entries for kernels this build lacks are left alone.
//
// A deliberate change: FLASHCHECK_UPDATE_CAPABILITIES=1 ctest -R CapabilitiesSnapshot (or run the
// binary) rewrites this build's entries, then review the diff. Run it in a CUDA build to cover
// the GPU kernels. FLASHCHECK_CAPABILITIES_FILE=PATH in the environment names another copy of the
// file (a binary carried to a GPU machine, where the source tree lives elsewhere).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runner/registry.h"

#ifndef FLASHCHECK_CAPABILITIES_FILE
#error "FLASHCHECK_CAPABILITIES_FILE: the path of gpu/capabilities.json"
#endif

namespace flashcheck {
namespace {

using nlohmann::json;

// Top-level fields of two declarations that differ, as "field: checked-in -> registered" lines.
std::vector<std::string> differences(const json& want, const json& got) {
  std::vector<std::string> out;
  std::set<std::string> keys;
  for (const auto& [k, v] : want.items()) keys.insert(k);
  for (const auto& [k, v] : got.items()) keys.insert(k);
  for (const std::string& k : keys) {
    const std::string w = want.contains(k) ? want[k].dump() : "(absent)";
    const std::string g = got.contains(k) ? got[k].dump() : "(absent)";
    if (w != g) out.push_back(k + ": " + w + " -> " + g);
  }
  return out;
}

json registered() {
  json out = json::object();
  for (const json& e : describe_variants(Registry::builtin().all())) out[e.at("name").get<std::string>()] = e.at("caps");
  return out;
}

std::string snapshot_path() {
  const char* p = std::getenv("FLASHCHECK_CAPABILITIES_FILE");
  return p && *p ? p : FLASHCHECK_CAPABILITIES_FILE;
}

// One field per line (a changed declaration is a one-line diff), kernels and fields sorted.
std::string format_snapshot(const json& snap) {
  std::string out = "{\n \"about\": " + snap["about"].dump() + ",\n \"kernels\": {";
  bool first_kernel = true;
  for (const auto& [name, caps] : snap["kernels"].items()) {
    out += std::string(first_kernel ? "" : ",") + "\n  " + json(name).dump() + ": {";
    bool first_field = true;
    for (const auto& [field, value] : caps.items()) {
      out += std::string(first_field ? "" : ",") + "\n   " + json(field).dump() + ": " + value.dump();
      first_field = false;
    }
    out += "\n  }";
    first_kernel = false;
  }
  return out + "\n }\n}\n";
}

json read_snapshot() {
  std::ifstream f(snapshot_path());
  if (!f) return json::object();
  return json::parse(f);
}

TEST(CapabilitiesSnapshot, EveryRegisteredKernelMatchesTheCheckedInDeclaration) {
  const json now = registered();
  ASSERT_FALSE(now.empty()) << "no kernel registered: the replica at least should be";
  if (const char* u = std::getenv("FLASHCHECK_UPDATE_CAPABILITIES"); u && std::string(u) == "1") {
    json snap = read_snapshot();
    snap["about"] =
        "Declared Capabilities of every built-in kernel (runner/capabilities_snapshot_test.cpp compares the "
        "kernels a build registers with this file). Enums are their values in gpu/kernel.h and reference/problem.h.";
    for (const auto& [name, caps] : now.items()) snap["kernels"][name] = caps;
    std::ofstream(snapshot_path()) << format_snapshot(snap);
    GTEST_SKIP() << "rewrote " << now.size() << " entries of " << snapshot_path() << ": review the diff";
  }
  const json snap = read_snapshot();
  const std::string path = snapshot_path();
  ASSERT_TRUE(snap.contains("kernels")) << path << " is missing or has no \"kernels\"";
  int compared = 0;
  for (const auto& [name, caps] : now.items()) {
    if (!snap["kernels"].contains(name)) {
      ADD_FAILURE() << "kernel '" << name << "' is registered but has no entry in " << path
                    << ": add it with FLASHCHECK_UPDATE_CAPABILITIES=1 (in a build that registers it)";
      continue;
    }
    const auto diff = differences(snap["kernels"][name], caps);
    std::ostringstream msg;
    for (const auto& d : diff) msg << "\n  " << d;
    EXPECT_TRUE(diff.empty()) << "kernel '" << name << "' declares other Capabilities than " << path
                              << " (checked-in -> registered):" << msg.str()
                              << "\nIf the change is deliberate, FLASHCHECK_UPDATE_CAPABILITIES=1 rewrites the entry.";
    ++compared;
  }
  std::vector<std::string> absent;
  for (const auto& [name, caps] : snap["kernels"].items())
    if (!now.contains(name)) absent.push_back(name);
  std::printf("compared %d registered kernels; not registered in this build (not compared):", compared);
  for (const auto& a : absent) std::printf(" %s", a.c_str());
  std::printf("\n");
}

// The comparison is not vacuous: a declaration changed in one field (max_seq halved, as the
// surviving SHIFT-register.cpp mutants do; a tile moved) is named, field by field.
TEST(CapabilitiesSnapshot, AChangedDeclarationIsNamed) {
  const json now = registered();
  ASSERT_FALSE(now.empty());
  const json caps = now.begin().value();
  EXPECT_TRUE(differences(caps, caps).empty());
  json halved = caps;
  halved["max_seq"] = caps["max_seq"].get<int64_t>() / 2;
  const auto d = differences(caps, halved);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rfind("max_seq: ", 0), 0u) << d[0];
  json moved = caps;
  moved["tiles"][0][2] = moved["tiles"][0][2].get<int64_t>() + 16;
  moved.erase("gqa");
  const auto d2 = differences(caps, moved);
  ASSERT_EQ(d2.size(), 2u);
  EXPECT_NE(d2[0].find("(absent)"), std::string::npos) << d2[0];  // "gqa" sorts before "tiles"
  EXPECT_EQ(d2[1].rfind("tiles: ", 0), 0u) << d2[1];
}

}  // namespace
}  // namespace flashcheck
