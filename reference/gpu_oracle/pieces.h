// The host side the GPU oracle's calls share (host.cpp: forward oracle and baseline;
// host_backward.cpp: the backward oracle): validation, the row tiles and the pieces of them that fit
// in device memory, packing inputs (rows gathered per tile, keys per tile span, padded, narrowed to
// their dtype), device memory and streams. The layout the kernels rely on is kernels.h's. Internal:
// included by those two files only, and by host_replica.cpp (the GPU replicas) for the device
// memory, stream, timing and budget helpers.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "reference/big_vector.h"
#include "reference/dtype.h"
#include "reference/gpu_oracle.h"
#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/detail.h"
#include "reference/gpu_oracle/kernels.h"
#include "reference/mask.h"
#include "reference/sequences.h"

namespace flashcheck::gpu_oracle_host {

namespace go = gpu_oracle;
namespace god = gpu_oracle_detail;

inline thread_local god::Timing t_last;
inline std::atomic<int64_t> g_budget{0};

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t round_down(int64_t x, int64_t m) { return x / m * m; }

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

enum class Pipeline { oracle, baseline, backward };

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
  // q, k, v already on the device (the forward pipelines only): each piece gathers its rows there
  // (gather_inputs) instead of packing in's on the host and uploading them.
  const DeviceInputs* dev = nullptr;

  Job(const Problem& p_, const Inputs& in_, Pipeline pl, const RowSet& r, const DeviceInputs* d = nullptr)
      : p(p_), in(in_), pipeline(pl), rows(r), seqs(p_),
        tm(pl == Pipeline::baseline ? go::kBaselineTile : go::kOracleTile), dev(d) {}
  bool oracle() const { return pipeline == Pipeline::oracle; }
  // Entry e of (b, hk): its query head and query row.
  int64_t head_of(const HostTile& t, int64_t e) const { return t.hk * p.group() + e / rows.count(t.b); }
  int64_t row_of(const HostTile& t, int64_t e) const { return rows.row(t.b, e % rows.count(t.b)); }
};

// The tiles: per (sequence, KV head), up to tm consecutive entries each. A tile also ends where its
// key span would pass span_cap keys, so that sampled rows far apart under a window do not make one
// tile span the whole sequence (dense rows never reach the cap: a window slides by tm per tile).
inline void plan_tiles(Job& j) {
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
    const int64_t nt = tiles(), rows = nt * j.tm, es = j.elem_bytes, fs = j.pipeline == Pipeline::baseline ? 4 : 8;
    std::vector<int64_t> b{rows * j.dqk_pad * es,            // q
            kv_rows() * j.dqk_pad * es,                      // k
            kv_rows() * j.dv_pad * es,                       // v
            rows * static_cast<int64_t>(sizeof(go::Row)),    // rows
            nt * static_cast<int64_t>(sizeof(go::Tile)),     // tiles
            (nt + 1) * 8,                                    // block0
            pc.s_elems * fs,                                 // s
            pc.s_elems / j.tm * fs};                         // pmax
    if (j.pipeline != Pipeline::backward) {
      b.push_back(pc.out_rows * j.p.head_dim_v * fs);           // o
      b.push_back(j.oracle() ? pc.out_rows * 8 : 2 * rows * 4);  // lse | m, l
      if (j.dev) b.insert(b.end(), {rows * 8, kv_rows() * 8});   // source rows of q, of k and v
      return b;
    }
    const int64_t dqk = j.p.head_dim_qk, dv = j.p.head_dim_v;
    b.insert(b.end(), {rows * j.dv_pad * 4,                                          // dO (fp32)
                       pc.s_elems * 8,                                               // dp → dS
                       j.p.softcap > 0 ? pc.s_elems * 8 : 0,                         // z
                       pc.out_rows * dqk * 8,                                        // dq
                       kv_rows() * dqk * 8,                                          // dk
                       kv_rows() * dv * 8,                                           // dv
                       pc.out_rows * 8,                                              // sinkpart
                       nt * static_cast<int64_t>(sizeof(go::Region))});              // regions
    return b;
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
    // The backward's dQ is a P·V over Dqk_pad, its key side 64 keys × min(pad, 128) columns.
    const auto oracle_pv = [nt](double pad) { return nt * (pad >= 256 ? 2.0 * pad / 256 : 1.0); };
    const double pv = job->pipeline == Pipeline::baseline ? nt * std::max(1.0, dvp / 128) : oracle_pv(dvp);
    double most = std::max({static_cast<double>(pc.score_blocks), pv, nt * static_cast<double>(job->tm) / 256});
    if (job->pipeline == Pipeline::backward) {
      const double dqp = static_cast<double>(job->dqk_pad), keys = static_cast<double>(kv_rows()) / 64;
      most = std::max({most, oracle_pv(dqp), keys * std::max(1.0, dqp / 128), keys * std::max(1.0, dvp / 128)});
    }
    return most;
  }
};

inline int64_t memory_budget() {
  if (const int64_t b = g_budget.load()) return b;
  size_t free_b = 0, total_b = 0;
  FCO_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const int64_t margin = std::max<int64_t>(int64_t{256} << 20, static_cast<int64_t>(total_b / 20));
  // Never below 0: a GPU fuller than the margin has nothing for the oracle (OracleDoesNotFit said
  // "-6981664768 bytes are available" on an H200 another process had filled, session 18).
  return std::clamp<int64_t>(static_cast<int64_t>(free_b) - margin, 0, int64_t{16} << 30);
}

// A piece's buffer sizes (PieceSize::buffers) from its tiles, as plan_pieces grew them.
inline std::vector<int64_t> piece_buffers(const Job& j, const Piece& pc) {
  PieceSize ps(j, pc.t0);
  for (size_t t = pc.t0; t < pc.t1; ++t) ps.add(j.tiles[t]);
  return ps.buffers();
}

// Consecutive tiles while they fit the budget (memory and grid sizes); OracleDoesNotFit when one
// tile alone does not.
inline std::vector<Piece> plan_pieces(const Job& j, int64_t budget, double* most_bytes) {
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
inline float narrow<float>(float x, DType) {
  return x;
}
template <>
inline uint16_t narrow<uint16_t>(float x, DType d) {
  const uint16_t h = d == DType::bf16 ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
  const float back = d == DType::bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);
  if (back != x && !(x != x)) throw NotRepresentable{};
  return h;
}

// dst [src_rows.size()][dim_dst] from rows src_rows[r] (−1: a zero row) of src [..][dim_src].
// dst is sized without a zero pass (every element is written below, padding included), so its
// pages are first touched by the threads that fill them: a production-size check packs ~0.5 GB
// per tensor, and a serial zero pass plus 4 KiB faults was a third of the packing.
template <typename U>
void pack(UninitVector<U>& dst, const std::vector<int64_t>& src_rows, const float* src, int64_t dim_dst, int64_t dim_src,
          DType d) {
  const int64_t nrows = static_cast<int64_t>(src_rows.size());
  const size_t n = static_cast<size_t>(nrows * dim_dst);
  if (n > dst.capacity()) dst = uninit_big_vector<U>(n);
  dst.resize(n);
  bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad)
  for (int64_t r = 0; r < nrows; ++r) {
    U* out = dst.data() + r * dim_dst;
    const int64_t from = src_rows[static_cast<size_t>(r)];
    const float* row = from >= 0 ? src + from * dim_src : nullptr;
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

inline void upload(void* dst, const void* src, size_t bytes, cudaStream_t st) {
  if (bytes) FCO_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st));
}

// The host side of one piece: descriptors and packed inputs (kernels.h's layout).
template <typename U>
struct Packed {
  std::vector<go::Row> rows;
  std::vector<go::Tile> tiles;
  std::vector<int64_t> block0;
  // The logical row (reference/sequences.h) of every packed q row and K/V row, −1 for zeros; a key's
  // row is its row of k and of v alike (k_row / Dqk == v_row / Dv).
  std::vector<int64_t> qrow, kvrow;
  UninitVector<U> q, k, v;
  std::vector<go::Region> regions;  // the K/V regions, for the backward's key side
  int64_t key_blocks = 0;           // their key tiles
};

template <typename U>
void pack_piece(const Job& j, const Piece& pc, Packed<U>& h) {
  const Problem& p = j.p;
  const int64_t nt = static_cast<int64_t>(pc.t1 - pc.t0), tm = j.tm;
  h.tiles.assign(static_cast<size_t>(nt), {});
  h.block0.assign(static_cast<size_t>(nt) + 1, 0);
  h.rows.assign(static_cast<size_t>(nt * tm), {});
  h.qrow.assign(static_cast<size_t>(nt * tm), -1);
  h.kvrow.clear();
  h.regions.clear();
  h.key_blocks = 0;
  const bool fp8 = is_fp8(p.dtype);
  // Tiles and K/V regions (serial: regions follow the tiles' order).
  int64_t s_off = 0, run_b = -1, run_hk = -1;
  size_t run_first = 0;  // first tile of the current region
  auto close_region = [&](size_t end) {
    if (run_b < 0) return;
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
    for (size_t x = run_first; x < end; ++x)
      if (h.tiles[x].ncols > 0) lo = std::min(lo, h.tiles[x].key0), hi = std::max(hi, h.tiles[x].key0 + h.tiles[x].ncols);
    const int64_t base = static_cast<int64_t>(h.kvrow.size());
    for (size_t x = run_first; x < end; ++x)
      if (h.tiles[x].ncols > 0) h.tiles[x].kv_row = base + h.tiles[x].key0 - lo;
    h.regions.push_back({static_cast<int64_t>(run_first), static_cast<int64_t>(end), base, lo, hi - lo, h.key_blocks});
    h.key_blocks += (hi - lo) / tm;
    const int64_t skv = j.seqs.skv(run_b);
    const int64_t row0 = j.seqs.k_row(run_b, run_hk, 0) / p.head_dim_qk;
    for (int64_t key = lo; key < hi; ++key) h.kvrow.push_back(key < skv ? row0 + key : -1);
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
      h.qrow[static_cast<size_t>(x * tm + r)] = j.seqs.q_row(ht.b, head, i) / p.head_dim_qk;
    }
  }
  if (j.dev) return;  // gathered on the device (gather_inputs)
  pack(h.q, h.qrow, j.in.q.data(), j.dqk_pad, p.head_dim_qk, p.dtype);
  pack(h.k, h.kvrow, j.in.k.data(), j.dqk_pad, p.head_dim_qk, p.dtype);
  pack(h.v, h.kvrow, j.in.v.data(), j.dv_pad, p.head_dim_v, p.dtype);
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

inline void require_available() {
  if (auto why = gpu_oracle_unavailable()) throw std::runtime_error("GPU oracle unavailable: " + *why);
}

// The checks naive_attention makes (q, k, v: dev's where given).
inline void check_call(const Problem& p, const Inputs& in, const RowSet& rows, const char* who,
                       const DeviceInputs* dev = nullptr) {
  validate(p);
  validate_side_inputs(p, in);
  if (dev) {
    if (dev->dtype != p.dtype)
      throw std::invalid_argument(std::string(who) + ": the device inputs are " + std::string(to_string(dev->dtype)) +
                                  ", the problem's dtype " + std::string(to_string(p.dtype)));
    if (dev->q.bytes() != static_cast<size_t>(p.q_elems()) * 2 || dev->k.bytes() != static_cast<size_t>(p.k_elems()) * 2 ||
        dev->v.bytes() != static_cast<size_t>(p.v_elems()) * 2)
      throw std::invalid_argument(std::string(who) + ": device input sizes do not match the problem");
  } else if (static_cast<int64_t>(in.q.size()) != p.q_elems() || static_cast<int64_t>(in.k.size()) != p.k_elems() ||
             static_cast<int64_t>(in.v.size()) != p.v_elems()) {
    throw std::invalid_argument(std::string(who) + ": input sizes do not match the problem");
  }
  if (rows.batch() != p.batch) throw std::invalid_argument(std::string(who) + ": the row set is for another batch size");
  for (int64_t b = 0; b < p.batch; ++b) {
    const auto r = rows.rows_of(b);
    if (!r.empty() && (r.front() < 0 || r.back() >= p.sq(b)))
      throw std::out_of_range(std::string(who) + ": a row of sequence " + std::to_string(b) + " is outside [0, " +
                              std::to_string(p.sq(b)) + ")");
  }
}


// What every piece of a call shares on the device: one arena sized for the largest piece, the
// ALiBi slopes and sinks (the same for every piece), a stream with timing events, and the kernels'
// Params over them.
struct CallDevice {
  DeviceMemory arena;
  DeviceMemory side;
  StreamAndEvents se;
  go::Params prm;

  CallDevice(const Job& j, double most_bytes)
      : arena(static_cast<size_t>(most_bytes)), side(side_bytes(j) + 16) {
    const Problem& p = j.p;
    const size_t slope_bytes = j.in.alibi_slopes.size() * sizeof(float);
    t_last.device_bytes = static_cast<int64_t>(most_bytes + static_cast<double>(side_bytes(j)));
    upload(side.as<char>(), j.in.alibi_slopes.data(), slope_bytes, se.stream);
    upload(side.as<char>() + slope_bytes, j.in.sinks.data(), j.in.sinks.size() * sizeof(float), se.stream);
    prm.heads_q = p.heads_q;
    prm.dqk = p.head_dim_qk;
    prm.dqk_pad = j.dqk_pad;
    prm.dv = p.head_dim_v;
    prm.dv_pad = j.dv_pad;
    prm.scale = p.softmax_scale();
    prm.softcap = p.softcap;
    prm.alibi = p.alibi == Alibi::none ? 0 : p.alibi == Alibi::symmetric ? 1 : 2;
    prm.alibi_per_batch = p.alibi_per_batch;
    prm.slopes = p.alibi != Alibi::none ? reinterpret_cast<const float*>(side.as<char>()) : nullptr;
    prm.sinks = p.sinks ? reinterpret_cast<const float*>(side.as<char>() + slope_bytes) : nullptr;
    prm.fp8 = is_fp8(p.dtype);
  }
  static size_t side_bytes(const Job& j) { return (j.in.alibi_slopes.size() + j.in.sinks.size()) * sizeof(float); }

  // The launches between the stream's events, their time added to the call's kernel time.
  template <typename F>
  void timed(F&& launches) {
    FCO_CUDA(cudaEventRecord(se.start, se.stream));
    launches();
    FCO_CUDA(cudaEventRecord(se.stop, se.stream));
    FCO_CUDA(cudaEventSynchronize(se.stop));
    float kms = 0;
    FCO_CUDA(cudaEventElapsedTime(&kms, se.start, se.stop));
    t_last.kernel_ms += kms;
  }
};

// The buffers every pipeline carves first (PieceSize::buffers' first six), uploaded.
struct PieceInputs {
  void *q = nullptr, *k = nullptr, *v = nullptr;
  go::Row* rows = nullptr;
  go::Tile* tiles = nullptr;
  int64_t* block0 = nullptr;
};

template <typename U>
PieceInputs upload_inputs(Carve& c, const std::vector<int64_t>& sz, const Packed<U>& h, cudaStream_t st) {
  PieceInputs in;
  in.q = c.take<void>(sz[0]);
  in.k = c.take<void>(sz[1]);
  in.v = c.take<void>(sz[2]);
  in.rows = c.take<go::Row>(sz[3]);
  in.tiles = c.take<go::Tile>(sz[4]);
  in.block0 = c.take<int64_t>(sz[5]);
  upload(in.q, h.q.data(), h.q.size() * sizeof(U), st);
  upload(in.k, h.k.data(), h.k.size() * sizeof(U), st);
  upload(in.v, h.v.data(), h.v.size() * sizeof(U), st);
  upload(in.rows, h.rows.data(), h.rows.size() * sizeof(go::Row), st);
  upload(in.tiles, h.tiles.data(), h.tiles.size() * sizeof(go::Tile), st);
  upload(in.block0, h.block0.data(), h.block0.size() * sizeof(int64_t), st);
  return in;
}

// A result buffer poisoned (all-ones bytes are NaN in fp32 and fp64): an element no kernel
// writes reads as NaN and fails every comparison instead of passing as a stale value.
inline void poison(void* at, int64_t bytes, cudaStream_t st) {
  if (bytes) FCO_CUDA(cudaMemsetAsync(at, 0xff, static_cast<size_t>(bytes), st));
}

inline go::Geom piece_geom(const go::Params& prm, const PieceInputs& in, const Piece& pc) {
  go::Geom g;
  g.p = prm;
  g.tiles = in.tiles;
  g.rows = in.rows;
  g.block0 = in.block0;
  g.ntiles = static_cast<int64_t>(pc.t1 - pc.t0);
  g.score_blocks = pc.score_blocks;
  g.nout = pc.out_rows;
  t_last.score_blocks += pc.score_blocks;
  return g;
}

// The fp64 kernels' padded width of a head dim: 32·2^k up to 256, then multiples of 256 (what
// f64_pv_kernel and the backward's key side take; a multiple of 16, as the scores kernel needs).
inline int64_t oracle_pad(int64_t d) {
  int64_t w = 32;
  while (w < d && w < 256) w *= 2;
  return d <= 256 ? w : round_up(d, 256);
}

// Runs a pipeline narrow (inputs in their dtype: half the upload of fp32 for bf16/f16, fp8 as f16;
// run_as(uint16_t{})) and falls back to fp32 packing (run_as(float{})) only for inputs that break
// the representability contract. The first attempt's timing is dropped but for the result's
// allocation.
template <typename F>
void run_packed(Job& j, F&& run_as) {
  bool narrow16 = j.p.dtype != DType::f32;
  for (;;) {
    try {
      if (narrow16) {
        j.elem = j.p.dtype == DType::bf16 ? go::Elem::bf16 : go::Elem::f16;
        j.elem_bytes = 2;
        run_as(uint16_t{});
      } else {
        j.elem = go::Elem::f32;
        j.elem_bytes = 4;
        run_as(float{});
      }
      return;
    } catch (const NotRepresentable&) {
      narrow16 = false;
      const double kept = t_last.result_alloc_ms;
      t_last = {};
      t_last.result_alloc_ms = kept;
    }
  }
}

}  // namespace flashcheck::gpu_oracle_host
