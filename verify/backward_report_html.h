// The backward verdict's part of a report page (verify/report_html.h: `check --html` on a file with
// gradients), apart from the forward's: per gradient (dq, dk, dv, dsinks) its criteria with value,
// limit and status through verify/report.h's helpers (never "ok" past a limit), its metrics, its
// worst element named by sequence, head (query head for dQ, KV head for dK/dV), row or key, column
// and tiles (GradientLocation), and, with GradientVerdict::map, a heatmap of error/tolerance over the
// worst head's rows and columns drawn by the page's shared heatmap script.
#pragma once
#include <string>

#include "verify/backward_criteria.h"

namespace flashcheck {

struct BackwardHtml {
  std::string body;    // the section, <h2 id="backward"> on (element ids grad-NAME, grad-map-NAME)
  std::string script;  // its data and drawing, after the page's heatmap script (window.fcHeat)
};
BackwardHtml backward_html(const BackwardReport& r);

// "<span class=...>PASS</span>" or "<span class=...>FAIL</span> (dk, dv)", for the page's headline.
std::string backward_verdict_html(const BackwardReport& r);

}  // namespace flashcheck
