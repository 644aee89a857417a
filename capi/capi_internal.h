// What the C API's source files share: the handles' contents, the one way an entry keeps C++
// exceptions on its side of the boundary, and the conversions of flashcheck.h's constants. Not
// installed: callers see flashcheck.h only.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "capi/flashcheck.h"
#include "gpu/kernel.h"
#include "reference/conventions.h"
#include "reference/inputs.h"
#include "reference/problem.h"
#include "runner/campaign.h"
#include "verify/report.h"
#include "verify/untrusted_text.h"

struct fc_report {
  flashcheck::Report report;
  std::string text, json, html;  // rendered on demand; kept so the returned pointers stay valid
  std::vector<int32_t> lengths;  // fc_report_problem2's per-sequence lengths point here
};

struct fc_campaign {
  std::string name;
  uint64_t seed = 0;
  flashcheck::VariantSummary summary;
  std::vector<std::unique_ptr<fc_report>> failures;  // one per summary.failures entry
  std::vector<std::vector<int32_t>> failure_lengths;  // fc_campaign_failure2's, one per failure
  std::string log, json;
};

namespace flashcheck::capi {

inline thread_local std::string g_error;
inline thread_local std::string g_callback_error;

// What fc_last_error() returns: one printable line (a caller shows it; it may quote a path or a
// kernel's message). Never throws: it runs inside catch handlers at the C boundary.
inline void set_error(std::string_view what) noexcept {
  try {
    g_error = printable_line(what);
  } catch (...) {
    g_error.clear();  // no memory even for the message: an empty one beats an exception into C
  }
}

// A callback asked to stop. Deliberately no std::exception: the campaign's per-case handler counts
// std::exceptions as kernel errors, and this must pass through it (and through shrinking) to fc_fuzz.
struct CallbackAbort {
  std::string why;
};

// What a kernel callback's return code means to the runner: 0 done, FC_CALLBACK_DECLINE a decline
// (skipped), FC_CALLBACK_ABORT the campaign's end, anything else a kernel error. Its message
// (g_callback_error, cleared before the call) enters reports and the campaign's log here as one
// printable line: it may hold anything (bytes that are not UTF-8, escapes, a fake line).
inline void raise_callback_status(int32_t rc, const std::string& kernel) {
  if (rc == 0) return;
  const std::string said = printable_line(g_callback_error);
  if (rc == FC_CALLBACK_ABORT) throw CallbackAbort{said};
  if (rc == FC_CALLBACK_DECLINE) throw Declined(said.empty() ? "declined by the kernel" : "declined: " + said);
  throw std::runtime_error("kernel '" + kernel + "' returned " + std::to_string(rc) + (said.empty() ? std::string() : ": " + said));
}

struct InvalidArgument : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The entries that return a value rather than an fc_status: whatever is thrown inside stays
// inside, the error is kept for fc_last_error(), and the caller gets `fallback`.
template <class T, class F>
T caught(T fallback, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
  } catch (const std::exception& e) {
    set_error(e.what());
  } catch (...) {
    set_error("unknown error");
  }
  return fallback;
}

// Every entry returning an fc_status runs its body here: no exception crosses into C (where it
// would call std::terminate in the host process: a Python interpreter, a test runner).
template <class F>
fc_status guarded(F&& f) noexcept {
  try {
    f();
    return FC_OK;
  } catch (const CannotTest& e) {
    set_error(e.what());
    return FC_ERR_CANNOT_TEST;
  } catch (const std::invalid_argument& e) {  // InvalidArgument, InvalidProblem, parse errors
    set_error(e.what());
    return FC_ERR_INVALID;
  } catch (const CallbackAbort& e) {
    try {
      set_error("the kernel callback aborted the campaign" + (e.why.empty() ? std::string() : ": " + e.why));
    } catch (...) {
      set_error("the kernel callback aborted the campaign");
    }
    return FC_ERR_ABORTED;
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
    return FC_ERR_INTERNAL;
  } catch (const std::exception& e) {
    set_error(e.what());
    return FC_ERR_INTERNAL;
  } catch (...) {
    set_error("unknown error");
    return FC_ERR_INTERNAL;
  }
}

inline void need(const void* p, const char* what) {
  if (!p) throw InvalidArgument(std::string(what) + " is NULL");
}

// A struct from the caller must be at least as large as the oldest layout this library reads
// (`least`: API 2's for the option structs); fields past its struct_size take their defaults.
inline void check_struct_size(uint32_t got, size_t least, const char* what) {
  if (got < least)
    throw InvalidArgument(std::string(what) + ".struct_size is " + std::to_string(got) + ", this library needs at least " +
                          std::to_string(least) + " (initialise it with " + what + "_init)");
}

// Reads a caller's struct: the library's defaults, then as many bytes as both sides know.
template <class T>
T read_struct(const T* in, const T& defaults, size_t least, const char* what) {
  T out = defaults;
  if (!in) return out;
  check_struct_size(in->struct_size, least, what);
  std::memcpy(&out, in, std::min<size_t>(in->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

// Writes a struct back to a caller: as many bytes as both sides know.
template <class T>
void write_struct(T* out, const T& value, size_t least, const char* what) {
  check_struct_size(out->struct_size, least, what);
  const uint32_t theirs = out->struct_size;
  std::memcpy(out, &value, std::min<size_t>(theirs, sizeof(T)));
  out->struct_size = theirs;
}

DType to_dtype(int32_t d);        // FC_F32 .. FC_E5M2
int32_t from_dtype(DType d);
Causal to_causal(int32_t c);
int32_t from_causal(Causal c);
Dist to_dist(int32_t d);
int32_t from_dist(Dist d);
EmptyRowLse to_empty(int32_t e);
AlibiLse to_alibi_lse(int32_t a);

// The campaign's side of fc_fuzz_options (capi/capi.cpp): the options as this library reads them
// (API 2 callers' structs completed with defaults), the kernel's declared space, the campaign.
fc_fuzz_options read_fuzz_options(const fc_fuzz_options* opt);
fc_check_options read_check_options(const fc_check_options* opt);  // NULL: the defaults
Capabilities caps_from(const fc_fuzz_options& o);
CampaignOptions campaign_from(const fc_fuzz_options& o);
// What a kept failure's report names as its reproduction (the CLI cannot run a callback).
std::string case_repro(const Case& c);
// Runs the campaign of `variant` (through `runner`, else the forward's) and keeps its failures'
// reports, as fc_fuzz and fc_fuzz2 return it.
std::unique_ptr<fc_campaign> run_callback_campaign(const Variant& variant, const fc_fuzz_options& o,
                                                   const CaseRunner* runner = nullptr);

// Problem model 2 (capi/problem2.cpp): the C struct to the problem, validated (naming the field a
// caller passed: cu_seqlens_q, ...), and back, its lengths written to `lengths`.
Problem problem_from_c(const fc_attention2* a);
fc_attention2 problem_to_c(const Problem& p, bool resolve_scale, std::vector<int32_t>& lengths);

// Problem model 2's tensors (capi/tensors2.cpp): the side tensors of `in` as views, and the views
// of a kernel's buffers as the runner hands them (row strides, spans, side pointers), shaped as
// flashcheck.h describes them for the problem's layout.
void side_views(const Problem& p, const Inputs& in, fc_tensors& t);
fc_tensors views_of(const Problem& p, const KernelArgs& a);

}  // namespace flashcheck::capi
