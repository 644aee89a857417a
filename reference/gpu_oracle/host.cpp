// Host side of the GPU oracle: validation, planning the pieces that fit in device memory, packing
// inputs (rows gathered, padded, narrowed to their dtype), transfers and launches.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "reference/big_vector.h"
#include "reference/dtype.h"
#include "reference/gpu_oracle.h"
#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/detail.h"
#include "reference/gpu_oracle/kernels.h"

namespace flashcheck {

namespace go = gpu_oracle;
namespace god = gpu_oracle_detail;

namespace {

thread_local god::Timing t_last;
std::atomic<int64_t> g_budget{0};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Inputs not exactly representable in the problem's dtype (the Inputs contract broken): packing
// them narrow would change them, so the call restarts with fp32 packing.
struct NotRepresentable {};

class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) {
    if (bytes) FCO_CUDA(cudaMalloc(&p_, bytes));
  }
  ~DeviceMemory() {
    if (p_) (void)cudaFree(p_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
};

struct StreamAndEvents {
  cudaStream_t stream{};
  cudaEvent_t start{}, stop{};
  StreamAndEvents() {
    FCO_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    FCO_CUDA(cudaEventCreate(&start));
    FCO_CUDA(cudaEventCreate(&stop));
  }
  ~StreamAndEvents() {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    (void)cudaStreamDestroy(stream);
  }
  StreamAndEvents(const StreamAndEvents&) = delete;
  StreamAndEvents& operator=(const StreamAndEvents&) = delete;
};

enum class Pipeline { oracle, baseline };

// Everything about a call that does not depend on the piece.
struct Job {
  const Problem& p;
  const Inputs& in;
  Pipeline pipeline;
  std::vector<int64_t> rows;  // the query rows evaluated (all of them when the caller gave none)
  go::Elem elem = go::Elem::f32;
  int64_t elem_bytes = 4;
  int64_t skv_pad = 0, dqk_pad = 0, dv_pad = 0;
};

struct Piece {
  int64_t bh0 = 0, nbh = 0, r0 = 0, nr = 0;
};

int64_t kv_index(const Problem& p, int64_t bh) {
  return (bh / p.heads_q) * p.heads_kv + (bh % p.heads_q) / p.group();
}

// The most kv heads any nbh consecutive (batch, head) pairs read: ⌈(nbh − 1) / group⌉ + 1.
int64_t kv_heads_spanned(const Problem& p, int64_t nbh) {
  return std::min<int64_t>(p.batch * p.heads_kv, (nbh - 1 + p.group() - 1) / p.group() + 1);
}

// Device bytes of a piece of nbh heads (nkv kv heads) × nr rows, in double so that absurd problems
// compare as "too large" instead of overflowing.
double piece_bytes(const Job& j, double nbh, double nkv, double nr) {
  const double nr_pad = static_cast<double>(round_up(static_cast<int64_t>(nr), 128));
  const double skv = static_cast<double>(j.skv_pad), es = static_cast<double>(j.elem_bytes);
  const double dv = static_cast<double>(j.p.head_dim_v);
  double b = nbh * nr_pad * static_cast<double>(j.dqk_pad) * es                         // q
             + nkv * skv * static_cast<double>(j.dqk_pad + j.dv_pad) * es              // k, v
             + nr_pad * 8;                                                             // rows
  if (j.pipeline == Pipeline::oracle)
    b += nbh * nr_pad * skv * 8 + nbh * nr_pad * (skv / 64) * 8 + nbh * nr * (dv + 1) * 8;  // s, pmax, o, lse
  else
    b += nbh * nr_pad * skv * 4 + nbh * nr_pad * (skv / 128) * 4 + 2 * nbh * nr_pad * 4 + nbh * nr * dv * 4;
  return b + 16 * 256;  // allocation granularity
}

// The most blocks any launch of a piece may have (1-D grids of at most 2^31 − 1 blocks).
double piece_blocks(const Job& j, double nbh, double nr) {
  const double nr_pad = static_cast<double>(round_up(static_cast<int64_t>(nr), 128));
  return nbh * (nr_pad / 64) * (static_cast<double>(j.skv_pad) / 64) * std::max(1.0, j.dv_pad / 256.0);
}

int64_t memory_budget() {
  if (const int64_t b = g_budget.load()) return b;
  size_t free_b = 0, total_b = 0;
  FCO_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const int64_t margin = std::max<int64_t>(int64_t{256} << 20, static_cast<int64_t>(total_b / 20));
  return std::min<int64_t>(static_cast<int64_t>(free_b) - margin, int64_t{16} << 30);
}

struct Plan {
  int64_t nbh = 0, nr = 0;  // largest piece
  std::vector<Piece> pieces;
};

// All heads and rows at once if they fit; else all rows of as many heads as fit; else one head and
// as many rows (a multiple of 128) as fit; else the problem does not fit.
Plan plan_pieces(const Job& j, int64_t budget) {
  const Problem& p = j.p;
  const int64_t total_bh = p.batch * p.heads_q;
  const int64_t nrows = static_cast<int64_t>(j.rows.size());
  const double kLimitBlocks = 2147483647.0;
  auto kv_worst = [&](int64_t nbh) { return kv_heads_spanned(p, nbh); };
  auto fits = [&](int64_t nbh, int64_t nr) {
    return piece_bytes(j, static_cast<double>(nbh), static_cast<double>(kv_worst(nbh)), static_cast<double>(nr)) <=
               static_cast<double>(budget) &&
           piece_blocks(j, static_cast<double>(nbh), static_cast<double>(nr)) <= kLimitBlocks;
  };
  Plan plan;
  if (fits(1, nrows)) {
    int64_t lo = 1, hi = total_bh;  // largest nbh that fits: fits(lo) holds
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid, nrows)) lo = mid; else hi = mid - 1;
    }
    plan.nbh = lo;
    plan.nr = nrows;
  } else if (fits(1, std::min<int64_t>(nrows, 128))) {
    int64_t lo = 1, hi = (nrows + 127) / 128;  // in units of 128 rows
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(1, mid * 128)) lo = mid; else hi = mid - 1;
    }
    plan.nbh = 1;
    plan.nr = std::min<int64_t>(nrows, lo * 128);
  } else {
    const double need = piece_bytes(j, 1, 1, static_cast<double>(std::min<int64_t>(nrows, 128)));
    throw OracleDoesNotFit("GPU oracle: one piece of this problem (one head, " +
                           std::to_string(std::min<int64_t>(nrows, 128)) + " query rows, seq_kv " +
                           std::to_string(p.seq_kv) + ") needs " + std::to_string(static_cast<int64_t>(need)) +
                           " bytes of device memory; " + std::to_string(budget) + " are available");
  }
  for (int64_t bh0 = 0; bh0 < total_bh; bh0 += plan.nbh)
    for (int64_t r0 = 0; r0 < nrows; r0 += plan.nr)
      plan.pieces.push_back({bh0, std::min(plan.nbh, total_bh - bh0), r0, std::min(plan.nr, nrows - r0)});
  return plan;
}

// Narrows one fp32 value to the packed element type, refusing values the dtype cannot hold.
template <typename U>
U narrow(float x, DType d);
template <>
float narrow<float>(float x, DType) {
  return x;
}
template <>
uint16_t narrow<uint16_t>(float x, DType d) {
  const uint16_t h = d == DType::bf16 ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
  const float back = d == DType::bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);
  if (back != x && !(x != x)) throw NotRepresentable{};
  return h;
}

// dst [nrows_dst][dim_dst] from source rows src_row(r) (nullptr: a zero row) of dim_src elements.
template <typename U, typename SrcRow>
void pack(std::vector<U>& dst, int64_t nrows_dst, int64_t dim_dst, int64_t dim_src, DType d, SrcRow src_row) {
  dst.resize(static_cast<size_t>(nrows_dst * dim_dst));
  bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad)
  for (int64_t r = 0; r < nrows_dst; ++r) {
    U* out = dst.data() + r * dim_dst;
    const float* src = src_row(r);
    int64_t c = 0;
    if (src) {
      try {
        for (; c < dim_src; ++c) out[c] = narrow<U>(src[c], d);
      } catch (const NotRepresentable&) {
        bad = true;
      }
    }
    for (; c < dim_dst; ++c) out[c] = U{};
  }
  if (bad) throw NotRepresentable{};
}

void upload(void* dst, const void* src, size_t bytes, cudaStream_t st) {
  FCO_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st));
}

// Results of a piece: o (and lse) rows [bh0, bh0 + nbh) × [r0, r0 + nr) of [B·Hq][num_rows][width].
template <typename T>
void download(T* dst, const T* src, const Piece& pc, int64_t num_rows, int64_t width, cudaStream_t st) {
  const size_t row_bytes = static_cast<size_t>(pc.nr * width) * sizeof(T);
  T* first = dst + (pc.bh0 * num_rows + pc.r0) * width;
  if (pc.nr == num_rows)
    FCO_CUDA(cudaMemcpyAsync(first, src, row_bytes * static_cast<size_t>(pc.nbh), cudaMemcpyDeviceToHost, st));
  else
    FCO_CUDA(cudaMemcpy2DAsync(first, static_cast<size_t>(num_rows * width) * sizeof(T), src, row_bytes, row_bytes,
                               static_cast<size_t>(pc.nbh), cudaMemcpyDeviceToHost, st));
}

struct Outputs {
  std::vector<double>* o = nullptr;    // oracle
  std::vector<double>* lse = nullptr;  // oracle
  std::vector<float>* o32 = nullptr;   // baseline
};

template <typename U>
void run_pieces(Job& j, Outputs out) {
  const Problem& p = j.p;
  auto& timing = t_last;
  const Plan plan = plan_pieces(j, memory_budget());
  timing.pieces = static_cast<int>(plan.pieces.size());
  const int64_t nrows = static_cast<int64_t>(j.rows.size());
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  const int64_t es = j.elem_bytes;

  // Buffers for the largest piece, reused by every piece.
  const int64_t nr_pad_max = round_up(plan.nr, 128);
  const int64_t nkv_max = kv_heads_spanned(p, plan.nbh);
  auto t0 = Clock::now();
  const int64_t q_bytes = plan.nbh * nr_pad_max * j.dqk_pad * es;
  const int64_t k_bytes = nkv_max * j.skv_pad * j.dqk_pad * es, v_bytes = nkv_max * j.skv_pad * j.dv_pad * es;
  const int64_t cells = plan.nbh * nr_pad_max * j.skv_pad;
  const bool oracle = j.pipeline == Pipeline::oracle;
  const int64_t s_bytes = cells * (oracle ? 8 : 4);
  const int64_t pmax_bytes = plan.nbh * nr_pad_max * (j.skv_pad / (oracle ? 64 : 128)) * (oracle ? 8 : 4);
  const int64_t stats_bytes = oracle ? plan.nbh * plan.nr * 8 : 2 * plan.nbh * nr_pad_max * 4;  // lse | m, l
  const int64_t o_bytes = plan.nbh * plan.nr * dv * (oracle ? 8 : 4);
  DeviceMemory d_q(q_bytes), d_k(k_bytes), d_v(v_bytes), d_rows(nr_pad_max * 8), d_s(s_bytes), d_pmax(pmax_bytes),
      d_stats(stats_bytes), d_o(o_bytes);
  timing.device_bytes = q_bytes + k_bytes + v_bytes + nr_pad_max * 8 + s_bytes + pmax_bytes + stats_bytes + o_bytes;
  timing.alloc_ms += ms_since(t0);

  StreamAndEvents se;
  std::vector<U> hq, hk, hv;
  std::vector<int64_t> hrows;
  const DType dt = p.dtype;
  const go::Round rd = dt == DType::bf16 ? go::Round::bf16 : dt == DType::f16 ? go::Round::f16 : go::Round::f32;

  for (const Piece& pc : plan.pieces) {
    go::Geom g;
    g.nbh = pc.nbh;
    g.bh0 = pc.bh0;
    g.bkv0 = kv_index(p, pc.bh0);
    const int64_t nkv = kv_index(p, pc.bh0 + pc.nbh - 1) - g.bkv0 + 1;
    g.heads_q = p.heads_q;
    g.heads_kv = p.heads_kv;
    g.nr = pc.nr;
    g.nr_pad = round_up(pc.nr, 128);
    g.seq_q = p.seq_q;
    g.seq_kv = p.seq_kv;
    g.skv_pad = j.skv_pad;
    g.dqk = dqk;
    g.dqk_pad = j.dqk_pad;
    g.dv = dv;
    g.dv_pad = j.dv_pad;
    g.causal = p.causal == Causal::none ? 0 : p.causal == Causal::top_left ? 1 : 2;
    g.scale = p.softmax_scale();

    // Pack: gathered query rows (zero past nr), keys and values padded with zeros.
    t0 = Clock::now();
    const int64_t* rows = j.rows.data() + pc.r0;
    pack(hq, pc.nbh * g.nr_pad, j.dqk_pad, dqk, dt, [&](int64_t r) -> const float* {
      const int64_t lbh = r / g.nr_pad, lr = r % g.nr_pad;
      if (lr >= pc.nr) return nullptr;
      return j.in.q.data() + ((pc.bh0 + lbh) * p.seq_q + rows[lr]) * dqk;
    });
    auto kv_row = [&](const std::vector<float>& src, int64_t width) {
      return [&src, width, &g, &p](int64_t r) -> const float* {
        const int64_t lkv = r / g.skv_pad, key = r % g.skv_pad;
        if (key >= p.seq_kv) return nullptr;
        return src.data() + ((g.bkv0 + lkv) * p.seq_kv + key) * width;
      };
    };
    pack(hk, nkv * j.skv_pad, j.dqk_pad, dqk, dt, kv_row(j.in.k, dqk));
    pack(hv, nkv * j.skv_pad, j.dv_pad, dv, dt, kv_row(j.in.v, dv));
    hrows.resize(static_cast<size_t>(g.nr_pad));
    for (int64_t r = 0; r < g.nr_pad; ++r) hrows[static_cast<size_t>(r)] = rows[std::min(r, pc.nr - 1)];
    timing.pack_ms += ms_since(t0);

    t0 = Clock::now();
    upload(d_q.as<void>(), hq.data(), hq.size() * sizeof(U), se.stream);
    upload(d_k.as<void>(), hk.data(), hk.size() * sizeof(U), se.stream);
    upload(d_v.as<void>(), hv.data(), hv.size() * sizeof(U), se.stream);
    upload(d_rows.as<void>(), hrows.data(), hrows.size() * sizeof(int64_t), se.stream);
    // Poison the outputs (all-ones bytes are NaN in fp32 and fp64): an element no kernel writes
    // reads as NaN and fails every comparison instead of passing as a stale value.
    FCO_CUDA(cudaMemsetAsync(d_o.as<void>(), 0xff, static_cast<size_t>(pc.nbh * pc.nr * dv) * (oracle ? 8 : 4),
                             se.stream));
    FCO_CUDA(cudaMemsetAsync(d_stats.as<void>(), 0xff, static_cast<size_t>(stats_bytes), se.stream));
    FCO_CUDA(cudaStreamSynchronize(se.stream));
    timing.h2d_ms += ms_since(t0);

    FCO_CUDA(cudaEventRecord(se.start, se.stream));
    const int64_t* drows = d_rows.as<int64_t>();
    if (oracle) {
      go::launch_f64_scores(j.elem, d_q.as<void>(), d_k.as<void>(), drows, d_s.as<double>(), d_pmax.as<double>(), g,
                            se.stream);
      go::launch_f64_pv(j.elem, d_s.as<double>(), d_pmax.as<double>(), d_v.as<void>(), drows, d_o.as<double>(),
                        d_stats.as<double>(), g, se.stream);
    } else {
      float* m = d_stats.as<float>();
      float* l = m + pc.nbh * g.nr_pad;
      go::launch_baseline_scores(j.elem, rd, d_q.as<void>(), d_k.as<void>(), drows, d_s.as<float>(),
                                 d_pmax.as<float>(), g, se.stream);
      go::launch_baseline_stats(d_s.as<float>(), d_pmax.as<float>(), drows, m, l, g, se.stream);
      go::launch_baseline_pv(j.elem, rd, d_s.as<float>(), m, l, d_v.as<void>(), drows, d_o.as<float>(), g,
                             se.stream);
    }
    FCO_CUDA(cudaEventRecord(se.stop, se.stream));
    FCO_CUDA(cudaEventSynchronize(se.stop));
    float kms = 0;
    FCO_CUDA(cudaEventElapsedTime(&kms, se.start, se.stop));
    timing.kernel_ms += kms;

    t0 = Clock::now();
    if (oracle) {
      download(out.o->data(), d_o.as<double>(), pc, nrows, dv, se.stream);
      download(out.lse->data(), d_stats.as<double>(), pc, nrows, 1, se.stream);
    } else {
      download(out.o32->data(), d_o.as<float>(), pc, nrows, dv, se.stream);
    }
    FCO_CUDA(cudaStreamSynchronize(se.stream));
    timing.d2h_ms += ms_since(t0);
  }
}

void require_available() {
  if (auto why = gpu_oracle_unavailable()) throw std::runtime_error("GPU oracle unavailable: " + *why);
}

// The checks naive_attention makes, with the same messages.
std::vector<int64_t> checked_rows(const Problem& p, const Inputs& in, std::span<const int64_t> rows,
                                  const char* who) {
  validate(p);
  if (static_cast<int64_t>(in.q.size()) != p.q_elems() || static_cast<int64_t>(in.k.size()) != p.k_elems() ||
      static_cast<int64_t>(in.v.size()) != p.v_elems())
    throw std::invalid_argument(std::string(who) + ": input sizes do not match the problem");
  std::vector<int64_t> out(rows.begin(), rows.end());
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= p.seq_q) throw std::out_of_range(std::string(who) + ": row out of range");
    if (i && out[i] <= out[i - 1]) throw std::invalid_argument(std::string(who) + ": rows must be ascending");
  }
  if (out.empty()) {
    out.resize(static_cast<size_t>(p.seq_q));
    for (int64_t i = 0; i < p.seq_q; ++i) out[static_cast<size_t>(i)] = i;
  }
  return out;
}

// Runs the pipeline narrow (inputs in their dtype: half the upload of fp32 for bf16/f16) and falls
// back to fp32 packing only for inputs that break the representability contract.
void run(Job& j, Outputs out, Clock::time_point t0) {
  j.skv_pad = round_up(j.p.seq_kv, 128);
  j.dqk_pad = round_up(j.p.head_dim_qk, 16);
  const int64_t dv = j.p.head_dim_v;
  if (j.pipeline == Pipeline::oracle) {
    int64_t w = 32;
    while (w < dv && w < 256) w *= 2;
    j.dv_pad = dv <= 256 ? w : round_up(dv, 256);
  } else {
    j.dv_pad = dv <= 32 ? 32 : dv <= 64 ? 64 : round_up(dv, 128);
  }
  bool narrow16 = j.p.dtype != DType::f32;
  for (;;) {
    try {
      if (narrow16) {
        j.elem = j.p.dtype == DType::bf16 ? go::Elem::bf16 : go::Elem::f16;
        j.elem_bytes = 2;
        run_pieces<uint16_t>(j, out);
      } else {
        j.elem = go::Elem::f32;
        j.elem_bytes = 4;
        run_pieces<float>(j, out);
      }
      break;
    } catch (const NotRepresentable&) {
      narrow16 = false;
      const double kept = t_last.result_alloc_ms;
      t_last = {};
      t_last.result_alloc_ms = kept;
    }
  }
  t_last.total_ms = ms_since(t0);
}

}  // namespace

std::optional<std::string> gpu_oracle_unavailable() {
  static const std::optional<std::string> why = []() -> std::optional<std::string> {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      int runtime = 0, driver = 0;
      (void)cudaRuntimeGetVersion(&runtime);
      (void)cudaDriverGetVersion(&driver);
      auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
      // Without the driver the static runtime reports "insufficient driver", which reads as "too
      // old" and sends a user to update a driver that is not there: say that there is none.
      if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
        dlclose(h);
      } else {
        return std::string("no NVIDIA driver found (libcuda.so.1 not loadable)");
      }
      if (e == cudaErrorInsufficientDriver && driver == 0)
        return std::string("no NVIDIA driver found (libcuda.so.1 loads but reports no driver version)");
      if (e == cudaErrorInsufficientDriver)
        return "the CUDA driver (" + version(driver) + ") is older than the runtime the GPU oracle was built with (" +
               version(runtime) + ")";
      if (e == cudaErrorNoDevice) return std::string("no CUDA device");
      return std::string("CUDA is not usable here: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    }
    if (count == 0) return std::string("no CUDA device");
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string("cannot query the CUDA device");
    }
    if (major < 8)
      return "the GPU oracle needs FP64 mma.sync (compute capability 8.0 or newer); device " + std::to_string(dev) +
             " is " + std::to_string(major) + "." + std::to_string(minor);
    cudaError_t load_error = cudaSuccess;
    if (!go::kernels_loadable(&load_error))
      return std::string("the GPU oracle's kernels cannot load on this device: ") + cudaGetErrorName(load_error);
    return std::nullopt;
  }();
  return why;
}

OracleResult naive_attention_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  const auto t0 = Clock::now();
  t_last = {};
  std::vector<int64_t> all = checked_rows(p, in, rows, "naive_attention_gpu");
  require_available();
  OracleResult r;
  r.rows = RowSet::same(p, rows);
  r.o = big_vector<double>(static_cast<size_t>(p.batch * p.heads_q * r.num_rows() * p.head_dim_v));
  r.lse.resize(static_cast<size_t>(p.batch * p.heads_q * r.num_rows()));
  t_last.result_alloc_ms = ms_since(t0);
  Job j{p, in, Pipeline::oracle, std::move(all)};
  run(j, {&r.o, &r.lse, nullptr}, t0);
  return r;
}

std::vector<float> dtype_baseline_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  const auto t0 = Clock::now();
  t_last = {};
  std::vector<int64_t> all = checked_rows(p, in, rows, "dtype_baseline_gpu");
  require_available();
  std::vector<float> o = big_vector<float>(static_cast<size_t>(p.batch * p.heads_q * static_cast<int64_t>(all.size()) * p.head_dim_v));
  t_last.result_alloc_ms = ms_since(t0);
  Job j{p, in, Pipeline::baseline, std::move(all)};
  run(j, {nullptr, nullptr, &o}, t0);
  return o;
}

namespace gpu_oracle_detail {
Timing last_timing() { return t_last; }
void set_memory_budget(int64_t bytes) { g_budget.store(bytes); }
int64_t free_device_bytes() {
  if (gpu_oracle_unavailable()) return 0;
  size_t free_b = 0, total_b = 0;
  FCO_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(free_b);
}
}  // namespace gpu_oracle_detail

}  // namespace flashcheck
