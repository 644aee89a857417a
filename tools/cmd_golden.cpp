// `flashcheck golden regen|verify`: the golden datasets in data/.
#include <iostream>

#include "tools/commands.h"
#include "verify/check_file.h"
#include "verify/golden.h"

namespace flashcheck::cli {

void add_golden(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("golden", "regenerate or verify the golden datasets");
  cmd->require_subcommand(1);
  auto dir = std::make_shared<std::string>("data");
  auto force = std::make_shared<bool>(false);
  auto* regen = cmd->add_subcommand("regen", "write every case and manifest.json (atomically)");
  regen->add_flag("--force", *force, "overwrite goldens that differ from what this build generates");
  auto* verify = cmd->add_subcommand("verify", "recompute every case; fail naming any case whose hash or values differ");
  for (auto* sub : {regen, verify}) sub->add_option("--dir", *dir, "dataset folder (default: data)");
  regen->callback([=, &action] {
    action = [=] {
      GoldenStatus st = golden_regen(*dir, *force, std::cout);
      std::cout << st.written << " written, " << st.unchanged << " unchanged, " << st.refused << " refused\n";
      return st.refused ? int{kMismatch} : int{kPass};
    };
  });
  verify->callback([=, &action] {
    action = [=] {
      try {
        int failures = golden_verify(*dir, std::cout);
        std::cout << (failures ? "golden verify: " + std::to_string(failures) + " case(s) FAILED\n" : "golden verify: all cases ok\n");
        return failures ? int{kMismatch} : int{kPass};
      } catch (const CannotTest& e) {
        std::cerr << "flashcheck golden verify: cannot test: " << e.what() << "\n";
        return int{kCannotTest};
      }
    };
  });
}

}  // namespace flashcheck::cli
