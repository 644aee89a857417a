// Host side of the GPU oracle: validation, the row tiles and the pieces of them that fit in device
// memory, packing inputs (rows gathered per tile, keys per tile span, padded, narrowed to their
// dtype), transfers and launches. The layout the kernels rely on is kernels.h's.
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
#include "reference/mask.h"
#include "reference/sequences.h"

namespace flashcheck {

namespace go = gpu_oracle;
namespace god = gpu_oracle_detail;

namespace {

thread_local god::Timing t_last;
std::atomic<int64_t> g_budget{0};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t round_down(int64_t x, int64_t m) { return x / m * m; }

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

// A tile of the plan: entries [e0, e0 + n) of (sequence b, KV head hk)'s rows. Those run over the
// group's query heads, each over the sequence's evaluated rows: entry e is query head
// hk·group + e / count(b), evaluated row e % count(b). In this order entries are the result's own
// order (RowSet::index), so the tiles of a piece fill one contiguous range of result rows.
struct HostTile {
  int64_t b = 0, hk = 0, e0 = 0, n = 0;
  int64_t key0 = 0, ncols = 0;  // key span (multiples of the key tile); ncols 0: no row sees a key
  int64_t out0 = 0;             // result row of entry e0
};

// Everything about a call that does not depend on the piece.
struct Job {
  const Problem& p;
  const Inputs& in;
  Pipeline pipeline;
  const RowSet& rows;
  Sequences seqs;
  int64_t tm = 0;  // rows per tile = keys per key tile
  go::Elem elem = go::Elem::f32;
  int64_t elem_bytes = 4;
  int64_t dqk_pad = 0, dv_pad = 0;
  std::vector<HostTile> tiles;

  Job(const Problem& p_, const Inputs& in_, Pipeline pl, const RowSet& r)
      : p(p_), in(in_), pipeline(pl), rows(r), seqs(p_),
        tm(pl == Pipeline::oracle ? go::kOracleTile : go::kBaselineTile) {}
  bool oracle() const { return pipeline == Pipeline::oracle; }
  // Entry e of (b, hk): its query head and query row.
  int64_t head_of(const HostTile& t, int64_t e) const { return t.hk * p.group() + e / rows.count(t.b); }
  int64_t row_of(const HostTile& t, int64_t e) const { return rows.row(t.b, e % rows.count(t.b)); }
};

// The tiles: per (sequence, KV head), up to tm consecutive entries each. A tile also ends where its
// key span would pass span_cap keys, so that sampled rows far apart under a window do not make one
// tile span the whole sequence (dense rows never reach the cap: a window slides by tm per tile).
void plan_tiles(Job& j) {
  const Problem& p = j.p;
  int64_t skv_max = 1;
  for (int64_t b = 0; b < p.batch; ++b) skv_max = std::max(skv_max, j.seqs.skv(b));
  const bool narrow = p.window.left >= 0 && (p.window.right >= 0 || p.causal != Causal::none);
  const int64_t width = narrow ? p.window.left + (p.causal != Causal::none ? 0 : p.window.right) + 1 : skv_max;
  const int64_t span_cap = std::max(4 * std::min(width, skv_max) + j.tm, int64_t{1024});
  const int64_t group = p.group();
  int64_t out = 0;
  j.tiles.clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t count = j.rows.count(b);
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      const int64_t total = group * count;
      for (int64_t e = 0; e < total;) {
        HostTile t{b, hk, e, 0, 0, 0, out};
        int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
        while (t.n < j.tm && e + t.n < total) {
          const KeyRange kr = visible_range(p, b, j.row_of(t, e + t.n));
          if (!kr.empty()) {
            const int64_t nlo = std::min(lo, kr.lo), nhi = std::max(hi, kr.hi);
            if (t.n > 0 && hi > 0 && round_up(nhi, j.tm) - round_down(nlo, j.tm) > span_cap) break;
            lo = nlo, hi = nhi;
          }
          ++t.n;
        }
        if (hi > 0) {
          t.key0 = round_down(lo, j.tm);
          t.ncols = round_up(hi, j.tm) - t.key0;
        }
        j.tiles.push_back(t);
        e += t.n;
        out += t.n;
      }
    }
  }
}

// A piece: tiles [t0, t1). Its K/V regions hold, per (sequence, KV head), the union of its tiles'
// key spans.
struct Piece {
  size_t t0 = 0, t1 = 0;
  int64_t out0 = 0, out_rows = 0;
  int64_t s_elems = 0, score_blocks = 0, kv_rows = 0;
};

// Device bytes and launch sizes of a piece, grown tile by tile.
struct PieceSize {
  const Job* job;
  Piece pc;
  int64_t run_b = -1, run_hk = -1, run_lo = 0, run_hi = 0;  // the K/V region being grown
  int64_t kv_done = 0;                                       // rows of the regions before it

  PieceSize(const Job& j, size_t t0) : job(&j) { pc.t0 = pc.t1 = t0; }
  int64_t tiles() const { return static_cast<int64_t>(pc.t1 - pc.t0); }
  int64_t kv_rows() const { return kv_done + (run_b >= 0 ? run_hi - run_lo : 0); }
  void add(const HostTile& t) {
    if (tiles() == 0) pc.out0 = t.out0;
    ++pc.t1;
    pc.out_rows += t.n;
    pc.s_elems += job->tm * t.ncols;
    pc.score_blocks += t.ncols / job->tm;
    if (t.ncols == 0) return;
    if (t.b != run_b || t.hk != run_hk) {
      kv_done = kv_rows();
      run_b = t.b, run_hk = t.hk, run_lo = t.key0, run_hi = t.key0 + t.ncols;
    } else {
      run_lo = std::min(run_lo, t.key0), run_hi = std::max(run_hi, t.key0 + t.ncols);
    }
  }
  // The arena's buffers, in the order host and kernels carve them (each 256-byte aligned).
  std::vector<int64_t> buffers() const {
    const Job& j = *job;
    const int64_t nt = tiles(), rows = nt * j.tm, es = j.elem_bytes, fs = j.oracle() ? 8 : 4;
    return {rows * j.dqk_pad * es,                           // q
            kv_rows() * j.dqk_pad * es,                      // k
            kv_rows() * j.dv_pad * es,                       // v
            rows * static_cast<int64_t>(sizeof(go::Row)),    // rows
            nt * static_cast<int64_t>(sizeof(go::Tile)),     // tiles
            (nt + 1) * 8,                                    // block0
            pc.s_elems * fs,                                 // s
            pc.s_elems / j.tm * fs,                          // pmax
            pc.out_rows * j.p.head_dim_v * fs,               // o
            j.oracle() ? pc.out_rows * 8 : 2 * rows * 4};    // lse | m, l
  }
  double bytes() const {
    double b = 0;
    for (int64_t x : buffers()) b += static_cast<double>(round_up(x, 256));
    return b;
  }
  // The most blocks any launch has (1-D grids of at most 2^31 − 1 blocks).
  double blocks() const {
    const double nt = static_cast<double>(tiles()), dvp = static_cast<double>(job->dv_pad);
    // P·V: the oracle's blocks are 64 rows × min(Dv_pad, 256) columns (32 rows from 256 on), the
    // baseline's 128 rows × min(Dv_pad, 128); the stats kernel has a thread per row.
    const double pv = job->oracle() ? nt * (job->dv_pad >= 256 ? 2.0 * dvp / 256 : 1.0) : nt * std::max(1.0, dvp / 128);
    return std::max({static_cast<double>(pc.score_blocks), pv, nt * static_cast<double>(job->tm) / 256});
  }
};

int64_t memory_budget() {
  if (const int64_t b = g_budget.load()) return b;
  size_t free_b = 0, total_b = 0;
  FCO_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const int64_t margin = std::max<int64_t>(int64_t{256} << 20, static_cast<int64_t>(total_b / 20));
  return std::min<int64_t>(static_cast<int64_t>(free_b) - margin, int64_t{16} << 30);
}

// Consecutive tiles while they fit the budget (memory and grid sizes); OracleDoesNotFit when one
// tile alone does not.
std::vector<Piece> plan_pieces(const Job& j, int64_t budget, double* most_bytes) {
  const double kLimitBlocks = 2147483647.0;
  std::vector<Piece> pieces;
  *most_bytes = 0;
  for (size_t t = 0; t < j.tiles.size();) {
    PieceSize ps(j, t);
    ps.add(j.tiles[t]);
    if (ps.bytes() > static_cast<double>(budget) || ps.blocks() > kLimitBlocks) {
      const HostTile& h = j.tiles[t];
      throw OracleDoesNotFit("GPU oracle: one piece of this problem (one tile of " + std::to_string(j.tm) +
                             " query rows of sequence " + std::to_string(h.b) + ", " + std::to_string(h.ncols) +
                             " keys, seq_kv " + std::to_string(j.p.seq_kv) + ") needs " +
                             std::to_string(static_cast<int64_t>(ps.bytes())) + " bytes of device memory; " +
                             std::to_string(budget) + " are available");
    }
    for (++t; t < j.tiles.size(); ++t) {
      PieceSize more = ps;
      more.add(j.tiles[t]);
      if (more.bytes() > static_cast<double>(budget) || more.blocks() > kLimitBlocks) break;
      ps = more;
    }
    ps.pc.kv_rows = ps.kv_rows();
    *most_bytes = std::max(*most_bytes, ps.bytes());
    pieces.push_back(ps.pc);
  }
  return pieces;
}

// Narrows one fp32 value to the packed element type, refusing values the dtype cannot hold. fp8
// inputs travel as f16, which holds every e4m3 and e5m2 value exactly.
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

// dst [src.size()][dim_dst] from source rows src[r] (nullptr: a zero row) of dim_src elements.
// dst is sized without a zero pass (every element is written below, padding included), so its
// pages are first touched by the threads that fill them: a production-size check packs ~0.5 GB
// per tensor, and a serial zero pass plus 4 KiB faults was a third of the packing.
template <typename U>
void pack(UninitVector<U>& dst, const std::vector<const float*>& src, int64_t dim_dst, int64_t dim_src, DType d) {
  const int64_t nrows = static_cast<int64_t>(src.size());
  const size_t n = static_cast<size_t>(nrows * dim_dst);
  if (n > dst.capacity()) dst = uninit_big_vector<U>(n);
  dst.resize(n);
  bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad)
  for (int64_t r = 0; r < nrows; ++r) {
    U* out = dst.data() + r * dim_dst;
    const float* row = src[static_cast<size_t>(r)];
    int64_t c = 0;
    if (row) {
      try {
        for (; c < dim_src; ++c) out[c] = narrow<U>(row[c], d);
      } catch (const NotRepresentable&) {
        bad = true;
      }
    }
    for (; c < dim_dst; ++c) out[c] = U{};
  }
  if (bad) throw NotRepresentable{};
}

void upload(void* dst, const void* src, size_t bytes, cudaStream_t st) {
  if (bytes) FCO_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st));
}

struct Outputs {
  UninitVector<double>* o = nullptr;   // oracle
  std::vector<double>* lse = nullptr;  // oracle
  std::vector<float>* o32 = nullptr;   // baseline
};

// The host side of one piece: descriptors and packed inputs (kernels.h's layout).
template <typename U>
struct Packed {
  std::vector<go::Row> rows;
  std::vector<go::Tile> tiles;
  std::vector<int64_t> block0;
  std::vector<const float*> qsrc, ksrc, vsrc;  // source row of every packed row (nullptr: zeros)
  UninitVector<U> q, k, v;
};

template <typename U>
void pack_piece(const Job& j, const Piece& pc, Packed<U>& h) {
  const Problem& p = j.p;
  const int64_t nt = static_cast<int64_t>(pc.t1 - pc.t0), tm = j.tm;
  h.tiles.assign(static_cast<size_t>(nt), {});
  h.block0.assign(static_cast<size_t>(nt) + 1, 0);
  h.rows.assign(static_cast<size_t>(nt * tm), {});
  h.qsrc.assign(static_cast<size_t>(nt * tm), nullptr);
  h.ksrc.clear();
  h.vsrc.clear();
  const bool fp8 = is_fp8(p.dtype);
  // Tiles and K/V regions (serial: regions follow the tiles' order).
  int64_t s_off = 0, run_b = -1, run_hk = -1;
  size_t run_first = 0;  // first tile of the current region
  auto close_region = [&](size_t end) {
    if (run_b < 0) return;
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
    for (size_t x = run_first; x < end; ++x)
      if (h.tiles[x].ncols > 0) lo = std::min(lo, h.tiles[x].key0), hi = std::max(hi, h.tiles[x].key0 + h.tiles[x].ncols);
    const int64_t base = static_cast<int64_t>(h.ksrc.size());
    for (size_t x = run_first; x < end; ++x)
      if (h.tiles[x].ncols > 0) h.tiles[x].kv_row = base + h.tiles[x].key0 - lo;
    const int64_t skv = j.seqs.skv(run_b);
    for (int64_t key = lo; key < hi; ++key) {
      const bool real = key < skv;
      h.ksrc.push_back(real ? j.in.k.data() + j.seqs.k_row(run_b, run_hk, key) : nullptr);
      h.vsrc.push_back(real ? j.in.v.data() + j.seqs.v_row(run_b, run_hk, key) : nullptr);
    }
  };
  for (int64_t x = 0; x < nt; ++x) {
    const HostTile& ht = j.tiles[pc.t0 + static_cast<size_t>(x)];
    go::Tile& t = h.tiles[static_cast<size_t>(x)];
    t.s_off = s_off;
    t.key0 = ht.key0;
    t.ncols = ht.ncols;
    t.b = ht.b;
    t.d = alignment_offset(p, j.seqs.sq(ht.b), j.seqs.skv(ht.b));
    if (fp8) {
      t.q_descale = static_cast<float>(descale_of(p, j.in.descale_q, ht.b, ht.hk));
      t.k_descale = static_cast<float>(descale_of(p, j.in.descale_k, ht.b, ht.hk));
      t.v_descale = static_cast<float>(descale_of(p, j.in.descale_v, ht.b, ht.hk));
      t.qk_descale = t.q_descale * t.k_descale;  // rounded to fp32, as the baseline multiplies
    }
    s_off += tm * ht.ncols;
    h.block0[static_cast<size_t>(x) + 1] = h.block0[static_cast<size_t>(x)] + ht.ncols / tm;
    if (ht.ncols > 0 && (ht.b != run_b || ht.hk != run_hk)) {
      close_region(static_cast<size_t>(x));
      run_b = ht.b, run_hk = ht.hk, run_first = static_cast<size_t>(x);
    }
  }
  close_region(static_cast<size_t>(nt));
  // Rows: each entry's query row, visible keys and result row; padding rows see nothing.
#pragma omp parallel for schedule(static)
  for (int64_t x = 0; x < nt; ++x) {
    const HostTile& ht = j.tiles[pc.t0 + static_cast<size_t>(x)];
    for (int64_t r = 0; r < tm; ++r) {
      go::Row& row = h.rows[static_cast<size_t>(x * tm + r)];
      row.h = static_cast<int32_t>(j.head_of(ht, ht.e0));
      if (r >= ht.n) continue;
      const int64_t e = ht.e0 + r, head = j.head_of(ht, e), i = j.row_of(ht, e);
      const KeyRange kr = visible_range(p, ht.b, i);
      row.i = i;
      row.lo = kr.lo;
      row.hi = kr.empty() ? kr.lo : kr.hi;
      row.out = ht.out0 + r - pc.out0;
      row.h = static_cast<int32_t>(head);
      h.qsrc[static_cast<size_t>(x * tm + r)] = j.in.q.data() + j.seqs.q_row(ht.b, head, i);
    }
  }
  pack(h.q, h.qsrc, j.dqk_pad, p.head_dim_qk, p.dtype);
  pack(h.k, h.ksrc, j.dqk_pad, p.head_dim_qk, p.dtype);
  pack(h.v, h.vsrc, j.dv_pad, p.head_dim_v, p.dtype);
}

// One device allocation for the largest piece, carved into kernels.h's buffers per piece.
struct Carve {
  char* at;
  template <typename T>
  T* take(int64_t bytes) {
    T* r = reinterpret_cast<T*>(at);
    at += round_up(bytes, 256);
    return r;
  }
};

template <typename U>
void run_pieces(Job& j, Outputs out) {
  const Problem& p = j.p;
  auto& timing = t_last;
  double most_bytes = 0;
  const std::vector<Piece> pieces = plan_pieces(j, memory_budget(), &most_bytes);
  timing.pieces = static_cast<int>(pieces.size());
  const int64_t dv = p.head_dim_v;
  const bool oracle = j.oracle();

  auto t0 = Clock::now();
  DeviceMemory arena(static_cast<size_t>(most_bytes));
  // ALiBi slopes and sinks, the same for every piece.
  const size_t slope_bytes = j.in.alibi_slopes.size() * sizeof(float), sink_bytes = j.in.sinks.size() * sizeof(float);
  DeviceMemory d_side(slope_bytes + sink_bytes + 16);
  timing.device_bytes = static_cast<int64_t>(most_bytes + static_cast<double>(slope_bytes + sink_bytes));
  timing.alloc_ms += ms_since(t0);

  StreamAndEvents se;
  upload(d_side.as<char>(), j.in.alibi_slopes.data(), slope_bytes, se.stream);
  upload(d_side.as<char>() + slope_bytes, j.in.sinks.data(), sink_bytes, se.stream);
  go::Params prm;
  prm.heads_q = p.heads_q;
  prm.dqk = p.head_dim_qk;
  prm.dqk_pad = j.dqk_pad;
  prm.dv = dv;
  prm.dv_pad = j.dv_pad;
  prm.scale = p.softmax_scale();
  prm.softcap = p.softcap;
  prm.alibi = p.alibi == Alibi::none ? 0 : p.alibi == Alibi::symmetric ? 1 : 2;
  prm.alibi_per_batch = p.alibi_per_batch;
  prm.slopes = p.alibi != Alibi::none ? reinterpret_cast<const float*>(d_side.as<char>()) : nullptr;
  prm.sinks = p.sinks ? reinterpret_cast<const float*>(d_side.as<char>() + slope_bytes) : nullptr;
  prm.fp8 = is_fp8(p.dtype);
  const DType od = p.o_dtype();
  const go::Round rd = od == DType::bf16 ? go::Round::bf16 : od == DType::f16 ? go::Round::f16 : go::Round::f32;

  Packed<U> h;
  for (const Piece& pc : pieces) {
    t0 = Clock::now();
    pack_piece(j, pc, h);
    timing.pack_ms += ms_since(t0);

    PieceSize ps(j, pc.t0);
    for (size_t t = pc.t0; t < pc.t1; ++t) ps.add(j.tiles[t]);
    const std::vector<int64_t> sz = ps.buffers();
    Carve c{arena.as<char>()};
    void* d_q = c.take<void>(sz[0]);
    void* d_k = c.take<void>(sz[1]);
    void* d_v = c.take<void>(sz[2]);
    go::Row* d_rows = c.take<go::Row>(sz[3]);
    go::Tile* d_tiles = c.take<go::Tile>(sz[4]);
    int64_t* d_block0 = c.take<int64_t>(sz[5]);
    void* d_s = c.take<void>(sz[6]);
    void* d_pmax = c.take<void>(sz[7]);
    void* d_o = c.take<void>(sz[8]);
    void* d_stats = c.take<void>(sz[9]);

    t0 = Clock::now();
    upload(d_q, h.q.data(), h.q.size() * sizeof(U), se.stream);
    upload(d_k, h.k.data(), h.k.size() * sizeof(U), se.stream);
    upload(d_v, h.v.data(), h.v.size() * sizeof(U), se.stream);
    upload(d_rows, h.rows.data(), h.rows.size() * sizeof(go::Row), se.stream);
    upload(d_tiles, h.tiles.data(), h.tiles.size() * sizeof(go::Tile), se.stream);
    upload(d_block0, h.block0.data(), h.block0.size() * sizeof(int64_t), se.stream);
    // Poison the outputs (all-ones bytes are NaN in fp32 and fp64): an element no kernel writes
    // reads as NaN and fails every comparison instead of passing as a stale value.
    if (sz[8]) FCO_CUDA(cudaMemsetAsync(d_o, 0xff, static_cast<size_t>(sz[8]), se.stream));
    if (sz[9]) FCO_CUDA(cudaMemsetAsync(d_stats, 0xff, static_cast<size_t>(sz[9]), se.stream));
    FCO_CUDA(cudaStreamSynchronize(se.stream));
    timing.h2d_ms += ms_since(t0);

    go::Geom g;
    g.p = prm;
    g.tiles = d_tiles;
    g.rows = d_rows;
    g.block0 = d_block0;
    g.ntiles = static_cast<int64_t>(pc.t1 - pc.t0);
    g.score_blocks = pc.score_blocks;
    g.nout = pc.out_rows;
    timing.score_blocks += pc.score_blocks;

    FCO_CUDA(cudaEventRecord(se.start, se.stream));
    if (oracle) {
      go::launch_f64_scores(j.elem, d_q, d_k, static_cast<double*>(d_s), static_cast<double*>(d_pmax), g, se.stream);
      go::launch_f64_pv(j.elem, static_cast<double*>(d_s), static_cast<double*>(d_pmax), d_v, static_cast<double*>(d_o),
                        static_cast<double*>(d_stats), g, se.stream);
    } else {
      float* m = static_cast<float*>(d_stats);
      float* l = m + g.ntiles * j.tm;
      go::launch_baseline_scores(j.elem, rd, d_q, d_k, static_cast<float*>(d_s), static_cast<float*>(d_pmax), g,
                                 se.stream);
      go::launch_baseline_stats(static_cast<float*>(d_s), static_cast<float*>(d_pmax), m, l, g, se.stream);
      go::launch_baseline_pv(j.elem, rd, static_cast<float*>(d_s), m, l, d_v, static_cast<float*>(d_o), g, se.stream);
    }
    FCO_CUDA(cudaEventRecord(se.stop, se.stream));
    FCO_CUDA(cudaEventSynchronize(se.stop));
    float kms = 0;
    FCO_CUDA(cudaEventElapsedTime(&kms, se.start, se.stop));
    timing.kernel_ms += kms;

    // The piece's result rows are contiguous (HostTile): one copy each.
    t0 = Clock::now();
    const size_t n = static_cast<size_t>(pc.out_rows);
    if (oracle) {
      FCO_CUDA(cudaMemcpyAsync(out.o->data() + pc.out0 * dv, d_o, n * static_cast<size_t>(dv) * 8, cudaMemcpyDeviceToHost,
                               se.stream));
      FCO_CUDA(cudaMemcpyAsync(out.lse->data() + pc.out0, d_stats, n * 8, cudaMemcpyDeviceToHost, se.stream));
    } else {
      FCO_CUDA(cudaMemcpyAsync(out.o32->data() + pc.out0 * dv, d_o, n * static_cast<size_t>(dv) * 4,
                               cudaMemcpyDeviceToHost, se.stream));
    }
    FCO_CUDA(cudaStreamSynchronize(se.stream));
    timing.d2h_ms += ms_since(t0);
  }
}

void require_available() {
  if (auto why = gpu_oracle_unavailable()) throw std::runtime_error("GPU oracle unavailable: " + *why);
}

// The checks naive_attention makes.
void check_call(const Problem& p, const Inputs& in, const RowSet& rows, const char* who) {
  validate(p);
  validate_side_inputs(p, in);
  if (static_cast<int64_t>(in.q.size()) != p.q_elems() || static_cast<int64_t>(in.k.size()) != p.k_elems() ||
      static_cast<int64_t>(in.v.size()) != p.v_elems())
    throw std::invalid_argument(std::string(who) + ": input sizes do not match the problem");
  if (rows.batch() != p.batch) throw std::invalid_argument(std::string(who) + ": the row set is for another batch size");
  for (int64_t b = 0; b < p.batch; ++b) {
    const auto r = rows.rows_of(b);
    if (!r.empty() && (r.front() < 0 || r.back() >= p.sq(b)))
      throw std::out_of_range(std::string(who) + ": a row of sequence " + std::to_string(b) + " is outside [0, " +
                              std::to_string(p.sq(b)) + ")");
  }
}

// Runs the pipeline narrow (inputs in their dtype: half the upload of fp32 for bf16/f16, fp8 as
// f16) and falls back to fp32 packing only for inputs that break the representability contract.
void run(Job& j, Outputs out, Clock::time_point t0) {
  j.dqk_pad = round_up(j.p.head_dim_qk, 16);
  const int64_t dv = j.p.head_dim_v;
  if (j.oracle()) {
    int64_t w = 32;
    while (w < dv && w < 256) w *= 2;
    j.dv_pad = dv <= 256 ? w : round_up(dv, 256);
  } else {
    j.dv_pad = dv <= 32 ? 32 : dv <= 64 ? 64 : round_up(dv, 128);
  }
  plan_tiles(j);
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

OracleResult naive_attention_gpu(const Problem& p, const Inputs& in, const RowSet& rows) {
  const auto t0 = Clock::now();
  t_last = {};
  check_call(p, in, rows, "naive_attention_gpu");
  require_available();
  OracleResult r;
  r.rows = rows;
  r.o = uninit_big_vector<double>(static_cast<size_t>(rows.total() * p.heads_q * p.head_dim_v));
  // Rows no piece copies back stay 0. Zeroed by all threads, each first touching its own pages: a
  // production-size output is 2 GB of fp64, and one thread's fill of it took 0.35-1.7 s of a
  // 6 s check on the device host (PERF.md, session 8).
  const int64_t n_out = static_cast<int64_t>(r.o.size()), kChunk = int64_t{1} << 20;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n_out; c += kChunk) std::fill(r.o.begin() + c, r.o.begin() + std::min(n_out, c + kChunk), 0.0);
  r.lse.resize(static_cast<size_t>(rows.total() * p.heads_q));
  t_last.result_alloc_ms = ms_since(t0);
  if (rows.total() == 0) return r;
  Job j(p, in, Pipeline::oracle, rows);
  run(j, {&r.o, &r.lse, nullptr}, t0);
  return r;
}

OracleResult naive_attention_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  validate(p);
  return naive_attention_gpu(p, in, RowSet::same(p, rows));
}

std::vector<float> dtype_baseline_gpu(const Problem& p, const Inputs& in, const RowSet& rows) {
  const auto t0 = Clock::now();
  t_last = {};
  check_call(p, in, rows, "dtype_baseline_gpu");
  require_available();
  std::vector<float> o = big_vector<float>(static_cast<size_t>(rows.total() * p.heads_q * p.head_dim_v));
  t_last.result_alloc_ms = ms_since(t0);
  if (rows.total() == 0) return o;
  Job j(p, in, Pipeline::baseline, rows);
  run(j, {nullptr, nullptr, &o}, t0);
  return o;
}

std::vector<float> dtype_baseline_gpu(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  validate(p);
  return dtype_baseline_gpu(p, in, RowSet::same(p, rows));
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
