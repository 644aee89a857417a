// A backward verdict (verify/backward_criteria.h) as text for people and JSON for scripts, each
// gradient apart, every criterion through verify/report.h's helpers (status_of, comparison_text):
// "ok" only within the limit, "n/a" with nothing to measure, the worst element of each gradient
// named by sequence, head, row (or key) and column.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "verify/backward_criteria.h"
#include "verify/report.h"

namespace flashcheck {

std::string to_text(const BackwardReport& r);
nlohmann::json to_json(const BackwardReport& r);
// What to_json wrote, back (a shard's kept failure, `flashcheck merge`): every field but the error
// maps, which to_json does not write. Throws std::runtime_error naming a missing or malformed field,
// or a "pass" that its criteria contradict.
BackwardReport backward_report_from_json(const nlohmann::json& j);

}  // namespace flashcheck
