// The criteria's element pass where the GPU oracle left its results (make_expected's `resident`):
// the oracle's fp64 O (2 GB at (4,64,8192,128)) and the baselines are read in device memory instead
// of being downloaded, gathered and read again by the host, which is what bound two production-size
// checks at once on one host (PERF.md, session 13). The summary is host_element_pass's, bit for bit.
#pragma once
#include <cstdint>
#include <optional>
#include <span>

#include "reference/gpu_oracle.h"
#include "verify/criteria.h"

namespace flashcheck {

struct ResidentExpected {
  DeviceArray oracle_o;        // fp64 [rows][Dv], Expected::oracle's rows
  DeviceArray baseline;        // fp32, the eager baseline
  DeviceArray flash_baseline;  // fp32, or empty when Expected::flash_baseline is
};

// Why the element pass cannot run on the device for this problem and these options, or null: it
// takes dense batches only (every sequence alike: no per-sequence verdicts) and neither unresolved
// rows nor error maps, which read the oracle's O element by element on the host.
const char* device_element_pass_unsupported(const Problem& p, bool error_maps);
// Whether every sequence of a RowSet has the same rows (RowSet::all and RowSet::same do): the
// device pass indexes a flat row's sequence-0 twin.
bool same_rows_everywhere(const RowSet& rows);

// host_element_pass over ref.resident's arrays and the kernel's O (uploaded here). The device
// runs one thread per chunk of rows, in the host's order; max|r| and the rounding criteria's
// distinct pairs (the least hashes, gathered by a threshold that widens until the sketch is
// decided) come back, never the outputs. nullopt where deciding the sketches would gather more
// than 2^24 pairs of a set (few distinct pairs among very many elements): the caller then judges
// a home_copy on the host. Throws std::invalid_argument where unsupported.
// kernel_o_on_device: kernel_o's bytes already on the device (a caller that uploaded them beside
// the oracle's work), read instead of an upload when its size is kernel_o's.
std::optional<ElementSummary> device_element_pass(const Problem& p, const Expected& ref, std::span<const float> kernel_o,
                                                  uint64_t ulp_n, const DeviceArray* kernel_o_on_device = nullptr);
// Tests: the candidates a set may gather before device_element_pass gives up (default 2^24).
void set_max_candidates_for_tests(int64_t n);
// The resident arrays downloaded into oracle.o and baseline, resident cleared (in place, or a copy).
void bring_home(Expected& e);
Expected home_copy(const Expected& ref);

}  // namespace flashcheck
