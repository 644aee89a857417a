// How one output element stands before any error is measured (verify/criteria.cpp classifies, the
// error maps and the element pass on either side count through it). Its own header: the device
// element pass (verify/element_pass.h) needs the flags and nothing else of the report.
#pragma once
#include <cstdint>

namespace flashcheck {

enum class MapFlag : uint8_t {
  ok = 0,
  unwritten = 1,         // still the poison
  nan_mismatch = 2,      // NaN/Inf where the oracle has none, or the reverse (or an Inf of the wrong sign)
  empty_row_nonzero = 3, // a row with no visible key whose O is not exactly 0 (or LSE not the declared ±inf)
  nonfinite_match = 4,   // NaN/Inf exactly where the oracle has it: no error to measure
  empty_row_ok = 5,      // a row with no visible key, written as the convention says
  // Rows whose top scores fp32 cannot order (Expected::unresolved): judged only against the values
  // of their contender keys.
  outside_contenders = 6,  // outside [lo, hi] of the contenders' values: no softmax weights give it
  unresolved_ok = 7,       // within them: no error to measure
};

}  // namespace flashcheck
