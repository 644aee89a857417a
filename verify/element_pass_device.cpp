#include "verify/element_pass_device.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "reference/big_vector.h"
#include "reference/mask.h"
#include "verify/element_pass_kernels.h"

namespace flashcheck {

namespace epg = element_pass_gpu;

const char* device_element_pass_unsupported(const Problem& p, bool error_maps) {
  // The device asks sequence 0 which rows see no key, for every sequence: only a batch whose
  // sequences all have its lengths may go (a paged cache's lengths differ per sequence too).
  if (p.varlen() || !p.seqused_kv.empty()) return "sequences differ (per-sequence verdicts are counted on the host)";
  for (int64_t b = 1; b < p.batch; ++b)
    if (p.sq(b) != p.sq(0) || p.skv(b) != p.skv(0)) return "sequences differ in length (rows that see no key differ)";
  if (error_maps) return "error maps read every element on the host";
  return nullptr;
}

bool same_rows_everywhere(const RowSet& rows) {
  for (int64_t b = 1; b < rows.batch(); ++b) {
    if (rows.count(b) != rows.count(0)) return false;
    for (int64_t r = 0; r < rows.count(0); ++r)
      if (rows.row(b, r) != rows.row(0, r)) return false;
  }
  return true;
}

namespace {

template <typename T>
std::vector<T> download_all(const DeviceArray& a, size_t n) {
  std::vector<T> v(n);
  a.download(v.data(), n * sizeof(T));
  return v;
}

int64_t max_candidates = int64_t{1} << 24;  // 256 MiB of Candidates per set (tests lower it)

// The candidates' threshold for a set of `significant` pairs: about 4·kCapacity of them expected
// below it, so the sketch usually overflows (and is then decided) on the first gathering.
uint64_t first_threshold(int64_t significant) {
  const double want = 4.0 * static_cast<double>(DistinctPairs::kCapacity);
  if (static_cast<double>(significant) <= want) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(want / static_cast<double>(significant) * 0x1p64);
}

}  // namespace

void set_max_candidates_for_tests(int64_t n) { max_candidates = n; }

void bring_home(Expected& e) {
  if (!e.resident) return;
  const ResidentExpected& d = *e.resident;
  e.oracle.o = uninit_big_vector<double>(d.oracle_o.bytes() / sizeof(double));
  d.oracle_o.download(e.oracle.o.data(), d.oracle_o.bytes());
  e.baseline = big_vector<float>(d.baseline.bytes() / sizeof(float));
  d.baseline.download(e.baseline.data(), d.baseline.bytes());
  e.resident = nullptr;  // flash_baseline never left the host (it was uploaded from there)
}

Expected home_copy(const Expected& ref) {
  Expected h = ref;
  bring_home(h);
  return h;
}

std::optional<ElementSummary> device_element_pass(const Problem& p, const Expected& ref, std::span<const float> kernel_o,
                                                  uint64_t ulp_n, const DeviceArray* kernel_o_on_device) {
  if (!ref.resident) throw std::invalid_argument("device_element_pass: the Expected is not device-resident");
  if (const char* why = device_element_pass_unsupported(p, false)) throw std::invalid_argument(std::string("device_element_pass: ") + why);
  if (!ref.unresolved.empty()) throw std::invalid_argument("device_element_pass: unresolved rows are judged on the host");
  if (!same_rows_everywhere(ref.oracle.rows)) throw std::invalid_argument("device_element_pass: sequences are checked on different rows");
  const ResidentExpected& d = *ref.resident;
  const RowSet& rows = ref.oracle.rows;
  const int64_t dv = p.head_dim_v, all_rows = rows.total() * p.heads_q;
  const size_t n_o = static_cast<size_t>(all_rows * dv);
  if (kernel_o.size() != n_o || d.oracle_o.bytes() != n_o * 8 || d.baseline.bytes() != n_o * 4 ||
      (d.flash_baseline.bytes() != 0 && d.flash_baseline.bytes() != n_o * 4))
    throw std::invalid_argument("verify_output: kernel, baseline and oracle outputs differ in size");
  ElementSummary s;
  if (n_o == 0) return s;
  const int64_t per_head = rows.count(0);

  PhaseTimer clock(s.timings);
  // Dense: every (sequence, head) has the same rows, so whether a flat row sees a key is its row's.
  std::vector<uint8_t> empty(static_cast<size_t>(per_head));
  for (int64_t ri = 0; ri < per_head; ++ri) empty[static_cast<size_t>(ri)] = visible_range(p, 0, rows.row(0, ri)).empty();
  DeviceArray d_empty(empty.size());
  d_empty.upload(empty.data(), empty.size());
  DeviceArray uploaded;
  const bool placed = kernel_o_on_device && kernel_o_on_device->bytes() == n_o * sizeof(float);
  if (!placed) {
    uploaded = DeviceArray(n_o * sizeof(float));
    uploaded.upload(kernel_o.data(), n_o * sizeof(float));
  }
  const DeviceArray& d_kernel = placed ? *kernel_o_on_device : uploaded;
  clock.lap(placed ? "kernel O (placed beside the oracle)" : "kernel O uploaded");

  DeviceArray d_partial(epg::kMaxRefThreads * sizeof(double));
  epg::launch_max_ref(static_cast<const double*>(d.oracle_o.data()), static_cast<int64_t>(n_o),
                      static_cast<double*>(d_partial.data()));
  for (double m : download_all<double>(d_partial, epg::kMaxRefThreads)) s.max_ref = std::max(s.max_ref, m);

  epg::PassArgs a;
  a.kernel_o = static_cast<const float*>(d_kernel.data());
  a.oracle_o = static_cast<const double*>(d.oracle_o.data());
  a.baseline = static_cast<const float*>(d.baseline.data());
  a.flash = d.flash_baseline.bytes() ? static_cast<const float*>(d.flash_baseline.data()) : nullptr;
  a.empty_row = static_cast<const uint8_t*>(d_empty.data());
  a.rows_per_head = per_head;
  a.all_rows = all_rows;
  a.dv = dv;
  a.od = p.o_dtype();
  a.max_ref = s.max_ref;
  a.ulp_n = ulp_n;
  const int64_t chunks = (all_rows + kElementChunkRows - 1) / kElementChunkRows;
  {
    DeviceArray d_parts(static_cast<size_t>(chunks) * sizeof(ElementTotals));
    epg::launch_chunks(a, epg::Mode::totals, static_cast<ElementTotals*>(d_parts.data()));
    for (const ElementTotals& t : download_all<ElementTotals>(d_parts, static_cast<size_t>(chunks))) merge_totals(s.totals, t);
  }
  clock.lap("max|r| and chunk totals (device)");

  // The rounding criteria's sketches keep the kCapacity least hashes of distinct pairs. Every pair
  // hashing at or below a threshold is gathered; once those hold more than kCapacity distinct pairs
  // (the sketch dropped one) the least of them are the least of all, as the host would keep; until
  // then the threshold widens, up to every pair.
  DistinctPairs* sketch[epg::kSets] = {&s.evidence, &s.eager_evidence, &s.flash_evidence};
  bool decided[epg::kSets] = {false, false, a.flash == nullptr};
  for (int set = 0; set < epg::kSets; ++set) a.threshold[set] = first_threshold(s.totals.significant);
  DeviceArray d_counts(static_cast<size_t>(epg::kSets * chunks) * sizeof(int64_t));
  while (!(decided[0] && decided[1] && decided[2])) {
    for (int set = 0; set < epg::kSets; ++set)
      if (decided[set]) a.threshold[set] = 0;  // nothing more to gather for it
    a.counts = static_cast<int64_t*>(d_counts.data());
    epg::launch_chunks(a, epg::Mode::count, nullptr);
    std::vector<int64_t> offsets = download_all<int64_t>(d_counts, static_cast<size_t>(epg::kSets * chunks));
    int64_t total[epg::kSets] = {0, 0, 0};
    for (int set = 0; set < epg::kSets; ++set)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t n = offsets[static_cast<size_t>(set * chunks + c)];
        offsets[static_cast<size_t>(set * chunks + c)] = total[set];
        total[set] += n;
      }
    // Few distinct pairs among very many elements (constant rows, a few values at production size)
    // widen the threshold to every pair: gathering them all would hold gigabytes on both sides,
    // where the host's sketch needs kCapacity pairs. Past max_candidates the host pass takes over.
    for (int set = 0; set < epg::kSets; ++set)
      if (total[set] > max_candidates) return std::nullopt;
    DeviceArray d_offsets(offsets.size() * sizeof(int64_t));
    d_offsets.upload(offsets.data(), offsets.size() * sizeof(int64_t));
    DeviceArray d_out[epg::kSets];
    for (int set = 0; set < epg::kSets; ++set) {
      d_out[set] = DeviceArray(static_cast<size_t>(total[set]) * sizeof(epg::Candidate));
      a.out[set] = static_cast<epg::Candidate*>(d_out[set].data());
    }
    a.offsets = static_cast<const int64_t*>(d_offsets.data());
    epg::launch_chunks(a, epg::Mode::write, nullptr);
    for (int set = 0; set < epg::kSets; ++set) {
      if (decided[set]) continue;
      for (const epg::Candidate& c : download_all<epg::Candidate>(d_out[set], static_cast<size_t>(total[set])))
        sketch[set]->add(c.value, c.oracle);
      if (a.threshold[set] == std::numeric_limits<uint64_t>::max() || !sketch[set]->exact()) {
        decided[set] = true;
      } else {  // too few distinct pairs below it to tell: 16 times the range, or everything
        *sketch[set] = DistinctPairs{};
        a.threshold[set] = a.threshold[set] > std::numeric_limits<uint64_t>::max() / 16 ? std::numeric_limits<uint64_t>::max()
                                                                                        : a.threshold[set] * 16;
      }
    }
  }
  clock.lap("distinct pairs gathered");
  return s;
}

}  // namespace flashcheck
