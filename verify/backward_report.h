// A backward verdict (verify/backward_criteria.h) as text for people and JSON for scripts, each
// gradient apart, every criterion through verify/report.h's helpers (status_of, comparison_text):
// "ok" only within the limit, "n/a" with nothing to measure, the worst element of each gradient
// named by sequence, head, row (or key) and column.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "verify/backward_criteria.h"

namespace flashcheck {

std::string to_text(const BackwardReport& r);
nlohmann::json to_json(const BackwardReport& r);

}  // namespace flashcheck
