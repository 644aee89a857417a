// Host side of the GPU replicas (gpu_oracle.h: replica_attention_gpu, replica_attention_backward_gpu,
// backward_baselines_gpu): what they cover, the work split into pieces of whole (sequence, KV head)
// units, the tiles each kernel runs over, uploads, the launches per configuration and the results in
// the CPU replicas' layouts. The kernels' layout contract is replica_kernels.h's.
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "reference/gpu_oracle/pieces.h"
#include "reference/gpu_oracle/replica_kernels.h"
#include "reference/replica_numerics.h"

namespace flashcheck {

namespace go = gpu_oracle;

namespace {

using namespace gpu_oracle_host;

constexpr int64_t kRows = go::kReplicaRows, kKeys = go::kReplicaBwdKeys;

std::optional<std::string> problem_not_covered(const Problem& p) {
  if (is_fp8(p.dtype)) return std::string("fp8 inputs");
  if (p.softcap > 0) return std::string("a softcap");
  if (p.alibi != Alibi::none) return std::string("ALiBi");
  if (p.sinks) return std::string("attention sinks");
  if (p.head_dim_qk > 256 || p.head_dim_v > 256) return std::string("head dims above 256");
  return std::nullopt;
}

std::optional<std::string> forward_not_covered(const ReplicaConfig& c) {
  if (c.block_kv != 64 && c.block_kv != 128)
    return "a forward block_kv of " + std::to_string(c.block_kv) + " (64 and 128 are compiled)";
  if (c.truncate) return std::string("truncating roundings");
  if (c.p_scale_log2 && *c.p_scale_log2 != 0) return std::string("a P scale");
  return std::nullopt;
}

std::optional<std::string> backward_not_covered(const BackwardReplicaConfig& c) {
  if (c.fault != BackwardFault::none) return std::string("a planted backward fault");
  return std::nullopt;
}

go::Round round_of(DType d) { return d == DType::bf16 ? go::Round::bf16 : d == DType::f16 ? go::Round::f16 : go::Round::f32; }

// What a call computes: per configuration a forward (or the given O and LSE) and, with dO, a backward.
struct Request {
  const Problem& p;
  const Inputs& in;
  std::vector<ReplicaPipeline> configs;
  bool forward = true;   // false: o_in and lse_in are the forward's results
  bool backward = true;  // with d_out
  std::span<const float> d_out, o_in, lse_in;
};

struct Out {
  std::vector<ReplicaResult> fwd;
  std::vector<ReplicaGradients> grads;
};

// Per sequence, the tiles every kernel runs over (the same for each head): t_begin/t_end of each
// 64-row tile for the forward (per configuration) and for dQ, rt_begin/rt_end of each 64-key tile.
struct SeqTiles {
  std::vector<std::vector<std::pair<int32_t, int32_t>>> fwd;  // [config][row tile]
  std::vector<std::pair<int32_t, int32_t>> dq, keys;
};

SeqTiles seq_tiles(const Problem& p, int64_t b, const std::vector<ReplicaPipeline>& configs) {
  const int64_t sq = p.sq(b), skv = p.skv(b), nrt = (sq + kRows - 1) / kRows, nkt = (skv + kKeys - 1) / kKeys;
  std::vector<KeyRange> vis(static_cast<size_t>(sq));
  for (int64_t i = 0; i < sq; ++i) vis[static_cast<size_t>(i)] = visible_range(p, b, i);
  // The keys a set of rows sees: from its first seeing row's first to its last's last (both ends of a
  // row's interval never decrease with the row: reference/mask.h).
  auto span = [&](int64_t r0, int64_t r1) {
    int64_t lo = skv, hi = 0;
    for (int64_t i = r0; i < r1; ++i)
      if (!vis[static_cast<size_t>(i)].empty()) lo = std::min(lo, vis[static_cast<size_t>(i)].lo), hi = std::max(hi, vis[static_cast<size_t>(i)].hi);
    return std::pair{lo, hi};
  };
  SeqTiles st;
  for (const ReplicaPipeline& c : configs) {
    const int64_t bq = c.forward.block_q, bc = c.forward.block_kv;
    // replica.cpp's q-tile range: tiles some row of the q-tile sees, or every tile.
    std::vector<std::pair<int64_t, int64_t>> chunk;
    for (int64_t r0 = 0; r0 < sq; r0 += bq) {
      const auto [lo, hi] = span(r0, std::min(sq, r0 + bq));
      if (!c.forward.skip_masked_tiles) chunk.emplace_back(0, (skv + bc - 1) / bc);
      else chunk.emplace_back(hi > lo ? lo / bc : 0, hi > lo ? (hi + bc - 1) / bc : 0);
    }
    auto& f = st.fwd.emplace_back();
    for (int64_t rt = 0; rt < nrt; ++rt) {
      // The union of the ranges of the q-tiles this row tile meets (exactly its own q-tile's when
      // block_q is a multiple of 64; otherwise a row may visit tiles it sees nothing of: no change).
      int64_t tb = std::numeric_limits<int64_t>::max(), te = 0;
      for (int64_t ch = rt * kRows / bq; ch <= (std::min(sq, (rt + 1) * kRows) - 1) / bq; ++ch) {
        const auto [b0, e0] = chunk[static_cast<size_t>(ch)];
        if (e0 > b0) tb = std::min(tb, b0), te = std::max(te, e0);
      }
      f.emplace_back(static_cast<int32_t>(te > 0 ? tb : 0), static_cast<int32_t>(te));
    }
  }
  for (int64_t rt = 0; rt < nrt; ++rt) {
    const auto [lo, hi] = span(rt * kRows, std::min(sq, (rt + 1) * kRows));
    st.dq.emplace_back(static_cast<int32_t>(hi > lo ? lo / kKeys : 0), static_cast<int32_t>(hi > lo ? (hi + kKeys - 1) / kKeys : 0));
  }
  for (int64_t kt = 0; kt < nkt; ++kt) {
    const int64_t k0 = kt * kKeys, k1 = std::min(skv, k0 + kKeys);
    // Rows that see a key of [k0, k1): hi > k0 from the first such row on, lo < k1 up to the last.
    const auto first = std::partition_point(vis.begin(), vis.end(), [&](const KeyRange& r) { return r.hi <= k0; });
    const auto last = std::partition_point(vis.begin(), vis.end(), [&](const KeyRange& r) { return r.lo < k1; });
    const int64_t r_first = first - vis.begin(), r_end = last - vis.begin();
    if (r_first < r_end) st.keys.emplace_back(static_cast<int32_t>(r_first / kRows), static_cast<int32_t>((r_end - 1) / kRows + 1));
    else st.keys.emplace_back(0, 0);
  }
  return st;
}

// A piece: (sequence, KV head) units [u0, u1) in (b, hk) order, whose query and key rows are
// contiguous logical rows [q_begin, q_end) and [kv_begin, kv_end).
struct Piece {
  int64_t u0 = 0, u1 = 0, q_begin = 0, q_end = 0, kv_begin = 0, kv_end = 0;
  int64_t row_tiles = 0, key_tiles = 0;  // the descriptors run() uploads for it
};

struct Sizes {
  int64_t dqk, dqk_pad, dv, dv_pad;
  // Device bytes of `qr` query rows and `kvr` key rows (inputs and results) and of the row- and
  // key-tile descriptors, counted: a tile of one short sequence's rows takes a whole descriptor,
  // and a per-row share of one undercounted batches of many short heads until the arena overflowed
  // (cudaErrorInvalidValue on an upload past its end, mma_f16's backward campaign on the device).
  int64_t bytes(int64_t qr, int64_t kvr, int64_t row_tiles, int64_t key_tiles) const {
    const int64_t per_q = (dqk_pad + dv_pad + dv + dqk + 2) * 4, per_kv = (dqk_pad + dv_pad + dqk + dv + 1) * 4;
    return qr * per_q + kvr * per_kv + row_tiles * static_cast<int64_t>(sizeof(go::RowTile)) +
           key_tiles * static_cast<int64_t>(sizeof(go::KeyTile)) + (int64_t{64} << 10);  // + each buffer's alignment
  }
  int64_t bytes(const Piece& pc) const { return bytes(pc.q_end - pc.q_begin, pc.kv_end - pc.kv_begin, pc.row_tiles, pc.key_tiles); }
};

std::vector<Piece> plan(const Problem& p, const Sequences& s, const Sizes& z, int64_t budget, int64_t* most) {
  std::vector<Piece> pieces;
  *most = 0;
  const int64_t units = p.batch * p.heads_kv, g = p.group();
  Piece cur;
  for (int64_t u = 0; u < units; ++u) {
    const int64_t b = u / p.heads_kv, qr = g * s.sq(b), kvr = s.skv(b);
    // run()'s descriptors of this unit: a row tile per kRows rows of each query head (one array at
    // a time), a key tile per kKeys keys.
    const int64_t rt = g * ((s.sq(b) + kRows - 1) / kRows), kt = (s.skv(b) + kKeys - 1) / kKeys;
    if (z.bytes(qr, kvr, rt, kt) > budget)
      throw OracleDoesNotFit("GPU replicas: one (sequence, KV head) of this problem (" + std::to_string(qr) +
                             " query rows, " + std::to_string(kvr) + " keys) needs " +
                             std::to_string(z.bytes(qr, kvr, rt, kt)) + " bytes of device memory; " + std::to_string(budget) +
                             " are available");
    if (cur.u1 > cur.u0 &&
        z.bytes(cur.q_end - cur.q_begin + qr, cur.kv_end - cur.kv_begin + kvr, cur.row_tiles + rt, cur.key_tiles + kt) > budget) {
      *most = std::max(*most, z.bytes(cur));
      pieces.push_back(cur);
      cur = {u, u, cur.q_end, cur.q_end, cur.kv_end, cur.kv_end, 0, 0};
    }
    cur.u1 = u + 1;
    cur.q_end += qr;
    cur.kv_end += kvr;
    cur.row_tiles += rt;
    cur.key_tiles += kt;
  }
  if (cur.u1 > cur.u0) {
    *most = std::max(*most, z.bytes(cur));
    pieces.push_back(cur);
  }
  return pieces;
}

// Rows [r0, r0 + n) of a logical fp32 tensor of width d into device rows of width pad (zero-padded).
void upload_rows(float* dst, const float* src, int64_t n, int64_t d, int64_t pad, cudaStream_t st) {
  if (n == 0) return;
  if (d == pad) return upload(dst, src, static_cast<size_t>(n * d) * 4, st);
  FCO_CUDA(cudaMemsetAsync(dst, 0, static_cast<size_t>(n * pad) * 4, st));
  FCO_CUDA(cudaMemcpy2DAsync(dst, static_cast<size_t>(pad) * 4, src, static_cast<size_t>(d) * 4, static_cast<size_t>(d) * 4,
                             static_cast<size_t>(n), cudaMemcpyHostToDevice, st));
}

template <typename T>
void download(T* dst, const T* src, int64_t n, cudaStream_t st) {
  if (n > 0) FCO_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(T), cudaMemcpyDeviceToHost, st));
}

// Heavier tiles first, so the grid's tail is short (causal rows see few or many keys).
template <typename T, typename W>
void heaviest_first(std::vector<T>& v, W work) {
  std::stable_sort(v.begin(), v.end(), [&](const T& a, const T& b) { return work(a) > work(b); });
}

void run(const Request& rq, Out& out) {
  const Problem& p = rq.p;
  const Sequences s(p);
  auto& timing = t_last;
  const Sizes z{p.head_dim_qk, round_up(p.head_dim_qk, 64), p.head_dim_v, round_up(p.head_dim_v, 64)};
  const int64_t g = p.group(), ncfg = static_cast<int64_t>(rq.configs.size());
  int64_t most = 0;
  const std::vector<Piece> pieces = plan(p, s, z, memory_budget(), &most);
  timing.pieces = static_cast<int>(pieces.size());

  auto t0 = Clock::now();
  std::vector<SeqTiles> tiles_of(static_cast<size_t>(p.batch));
  std::vector<int32_t> vis_lo(static_cast<size_t>(s.total_q())), vis_hi(vis_lo.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < p.batch; ++b) {
    tiles_of[static_cast<size_t>(b)] = seq_tiles(p, b, rq.configs);
    for (int64_t i = 0; i < s.sq(b); ++i) {
      const KeyRange r = visible_range(p, b, i);
      vis_lo[static_cast<size_t>(s.q0(b) + i)] = static_cast<int32_t>(r.lo);
      vis_hi[static_cast<size_t>(s.q0(b) + i)] = static_cast<int32_t>(r.empty() ? r.lo : r.hi);
    }
  }
  timing.pack_ms += ms_since(t0);

  t0 = Clock::now();
  DeviceMemory arena(static_cast<size_t>(most));
  DeviceMemory d_vis(vis_lo.size() * 8 + 16);
  timing.device_bytes = most + static_cast<int64_t>(vis_lo.size()) * 8;
  timing.alloc_ms += ms_since(t0);
  StreamAndEvents se;
  int32_t* vis_lo_d = d_vis.as<int32_t>();
  int32_t* vis_hi_d = vis_lo_d + vis_lo.size();
  upload(vis_lo_d, vis_lo.data(), vis_lo.size() * 4, se.stream);
  upload(vis_hi_d, vis_hi.data(), vis_hi.size() * 4, se.stream);

  go::ReplicaArgs base;
  base.dqk = z.dqk, base.dqk_pad = z.dqk_pad, base.dv = z.dv, base.dv_pad = z.dv_pad;
  base.negate = p.softmax_scale() < 0;
  base.grad_mul = static_cast<float>(p.softmax_scale());
  base.log2e = static_cast<float>(kLog2e);
  base.ln2 = static_cast<float>(kLn2);
  base.rd_p = round_of(p.dtype);
  base.rd_o = round_of(p.o_dtype());
  base.rd_g = round_of(gradient_dtype(p));
  base.vis_lo = vis_lo_d;
  base.vis_hi = vis_hi_d;

  std::vector<go::RowTile> ftiles, qtiles;
  std::vector<go::KeyTile> ktiles;
  for (const Piece& pc : pieces) {
    const int64_t qr = pc.q_end - pc.q_begin, kvr = pc.kv_end - pc.kv_begin;
    // The piece's tiles, in device rows.
    t0 = Clock::now();
    qtiles.clear();
    ktiles.clear();
    std::vector<std::vector<go::RowTile>> fwd_tiles(static_cast<size_t>(ncfg));
    for (int64_t u = pc.u0; u < pc.u1; ++u) {
      const int64_t b = u / p.heads_kv, hk = u % p.heads_kv, sq = s.sq(b), skv = s.skv(b);
      const SeqTiles& st = tiles_of[static_cast<size_t>(b)];
      const int64_t kv0 = s.k_row(b, hk, 0) / z.dqk - pc.kv_begin;
      for (int64_t h = hk * g; h < (hk + 1) * g; ++h) {
        const int64_t q0 = s.q_row(b, h, 0) / z.dqk - pc.q_begin;
        for (size_t rt = 0; rt < st.dq.size(); ++rt) {
          go::RowTile t{q0, kv0, s.q0(b), static_cast<int32_t>(rt * kRows), static_cast<int32_t>(sq), static_cast<int32_t>(skv), 0, 0};
          for (int64_t c = 0; c < ncfg; ++c) {
            std::tie(t.t_begin, t.t_end) = st.fwd[static_cast<size_t>(c)][rt];
            fwd_tiles[static_cast<size_t>(c)].push_back(t);
          }
          std::tie(t.t_begin, t.t_end) = st.dq[rt];
          qtiles.push_back(t);
        }
      }
      for (size_t kt = 0; kt < st.keys.size(); ++kt)
        ktiles.push_back({s.q_row(b, hk * g, 0) / z.dqk - pc.q_begin, kv0, s.q0(b), static_cast<int32_t>(kt * kKeys),
                          static_cast<int32_t>(sq), static_cast<int32_t>(skv), static_cast<int32_t>(g), st.keys[kt].first,
                          st.keys[kt].second});
    }
    for (auto& f : fwd_tiles) heaviest_first(f, [](const go::RowTile& t) { return t.t_end - t.t_begin; });
    heaviest_first(qtiles, [](const go::RowTile& t) { return t.t_end - t.t_begin; });
    heaviest_first(ktiles, [](const go::KeyTile& t) { return t.rt_end - t.rt_begin; });
    timing.pack_ms += ms_since(t0);

    Carve c{arena.as<char>()};
    float* d_q = c.take<float>(qr * z.dqk_pad * 4);
    float* d_do = c.take<float>(qr * z.dv_pad * 4);
    float* d_o = c.take<float>(qr * z.dv * 4);
    float* d_lse = c.take<float>(qr * 4);
    float* d_delta = c.take<float>(qr * 4);
    float* d_dq = c.take<float>(qr * z.dqk * 4);
    float* d_k = c.take<float>(kvr * z.dqk_pad * 4);
    float* d_v = c.take<float>(kvr * z.dv_pad * 4);
    float* d_dk = c.take<float>(kvr * z.dqk * 4);
    float* d_dv = c.take<float>(kvr * z.dv * 4);
    float* d_colsum = c.take<float>(kvr * 4);
    size_t most_rt = qtiles.size();
    go::RowTile* d_rt = c.take<go::RowTile>(static_cast<int64_t>(most_rt * sizeof(go::RowTile)));
    go::KeyTile* d_kt = c.take<go::KeyTile>(static_cast<int64_t>(ktiles.size() * sizeof(go::KeyTile)));

    t0 = Clock::now();
    upload_rows(d_q, rq.in.q.data() + pc.q_begin * z.dqk, qr, z.dqk, z.dqk_pad, se.stream);
    upload_rows(d_k, rq.in.k.data() + pc.kv_begin * z.dqk, kvr, z.dqk, z.dqk_pad, se.stream);
    upload_rows(d_v, rq.in.v.data() + pc.kv_begin * z.dv, kvr, z.dv, z.dv_pad, se.stream);
    if (rq.backward) upload_rows(d_do, rq.d_out.data() + pc.q_begin * z.dv, qr, z.dv, z.dv_pad, se.stream);
    upload(d_kt, ktiles.data(), ktiles.size() * sizeof(go::KeyTile), se.stream);
    FCO_CUDA(cudaStreamSynchronize(se.stream));
    timing.h2d_ms += ms_since(t0);

    for (int64_t ci = 0; ci < ncfg; ++ci) {
      const ReplicaPipeline& cfg = rq.configs[static_cast<size_t>(ci)];
      go::ReplicaArgs a = base;
      float kms = 0;
      t0 = Clock::now();
      if (rq.forward) {
        const auto& f = fwd_tiles[static_cast<size_t>(ci)];
        upload(d_rt, f.data(), f.size() * sizeof(go::RowTile), se.stream);
        a.sc = replica_detail::head_numerics(p, rq.in, cfg.forward.use_exp2, cfg.forward.alibi_lse, 0, 0).sc;
        a.use_exp2 = cfg.forward.use_exp2, a.round_p = cfg.forward.round_p, a.round_o = cfg.forward.round_o;
        a.finite_neg_inf = cfg.forward.finite_neg_inf;
        FCO_CUDA(cudaEventRecord(se.start, se.stream));
        go::launch_replica_forward(static_cast<int>(cfg.forward.block_kv), d_q, d_k, d_v, d_o, d_lse, d_rt,
                                   static_cast<int64_t>(f.size()), a, se.stream);
        FCO_CUDA(cudaEventRecord(se.stop, se.stream));
        FCO_CUDA(cudaEventSynchronize(se.stop));
        FCO_CUDA(cudaEventElapsedTime(&kms, se.start, se.stop));
        timing.kernel_ms += kms;
        ReplicaResult& r = out.fwd[static_cast<size_t>(ci)];
        download(r.o.data() + pc.q_begin * z.dv, d_o, qr * z.dv, se.stream);
        download(r.lse.data() + pc.q_begin, d_lse, qr, se.stream);
      } else {
        upload(d_o, rq.o_in.data() + pc.q_begin * z.dv, static_cast<size_t>(qr * z.dv) * 4, se.stream);
        upload(d_lse, rq.lse_in.data() + pc.q_begin, static_cast<size_t>(qr) * 4, se.stream);
      }
      if (!rq.backward) {
        FCO_CUDA(cudaStreamSynchronize(se.stream));
        timing.d2h_ms += ms_since(t0) - kms;
        continue;
      }
      upload(d_rt, qtiles.data(), qtiles.size() * sizeof(go::RowTile), se.stream);
      a.sc = replica_detail::head_numerics(p, rq.in, cfg.backward.use_exp2, cfg.backward.alibi_lse, 0, 0).sc;
      a.use_exp2 = cfg.backward.use_exp2, a.round_p = cfg.backward.round_p, a.round_ds = cfg.backward.round_ds;
      a.round_grads = cfg.backward.round_gradients;
      FCO_CUDA(cudaEventRecord(se.start, se.stream));
      go::launch_replica_delta(d_do, d_o, d_delta, qr, a, se.stream);
      go::launch_replica_dkdv(d_q, d_k, d_v, d_do, d_lse, d_delta, d_dk, d_dv, d_colsum, d_kt,
                              static_cast<int64_t>(ktiles.size()), a, se.stream);
      go::launch_replica_dq(d_q, d_k, d_v, d_do, d_lse, d_delta, d_dq, d_rt, static_cast<int64_t>(qtiles.size()), a,
                            se.stream);
      FCO_CUDA(cudaEventRecord(se.stop, se.stream));
      FCO_CUDA(cudaEventSynchronize(se.stop));
      float bms = 0;
      FCO_CUDA(cudaEventElapsedTime(&bms, se.start, se.stop));
      timing.kernel_ms += bms;
      ReplicaGradients& gr = out.grads[static_cast<size_t>(ci)];
      download(gr.dq.data() + pc.q_begin * z.dqk, d_dq, qr * z.dqk, se.stream);
      download(gr.dk.data() + pc.kv_begin * z.dqk, d_dk, kvr * z.dqk, se.stream);
      download(gr.dv.data() + pc.kv_begin * z.dv, d_dv, kvr * z.dv, se.stream);
      download(gr.p_colsum.data() + pc.kv_begin, d_colsum, kvr, se.stream);
      FCO_CUDA(cudaStreamSynchronize(se.stream));
      timing.d2h_ms += ms_since(t0) - kms - bms;
    }
  }
}

void check_inputs(const Problem& p, const Inputs& in, const char* who) {
  validate(p);
  validate_side_inputs(p, in);
  auto need = [&](const char* name, size_t have, int64_t n) {
    if (static_cast<int64_t>(have) != n)
      throw std::invalid_argument(std::string(who) + ": " + name + " has " + std::to_string(have) +
                                  " values; the problem needs " + std::to_string(n));
  };
  need("q", in.q.size(), p.q_elems());
  need("k", in.k.size(), p.k_elems());
  need("v", in.v.size(), p.v_elems());
}

void check_tiles(const ReplicaPipeline& c, const char* who) {
  if (c.forward.block_q <= 0 || c.forward.block_kv <= 0 || c.backward.block_q <= 0 || c.backward.block_kv <= 0)
    throw std::invalid_argument(std::string(who) + ": tile sizes must be positive");
}

// Runs a request whose checks have passed; nullopt when something is not covered.
std::optional<Out> run_request(const Request& rq) {
  if (gpu_replicas_not_covered(rq.p, rq.configs)) return std::nullopt;
  require_available();
  const auto t0 = Clock::now();
  t_last = {};
  const Problem& p = rq.p;
  Out out;
  for (size_t c = 0; c < rq.configs.size(); ++c) {
    if (rq.forward) {
      ReplicaResult& r = out.fwd.emplace_back();
      r.rows = RowSet::all(p);
      r.o = big_vector<float>(static_cast<size_t>(p.o_elems()));
      r.lse = big_vector<float>(static_cast<size_t>(p.lse_elems()));
    }
    if (rq.backward) {
      ReplicaGradients& g = out.grads.emplace_back();
      g.dq = big_vector<float>(static_cast<size_t>(p.q_elems()));
      g.dk = big_vector<float>(static_cast<size_t>(p.k_elems()));
      g.dv = big_vector<float>(static_cast<size_t>(p.v_elems()));
      g.p_colsum = big_vector<float>(static_cast<size_t>(p.total_kv() * p.heads_kv));
    }
  }
  t_last.result_alloc_ms = ms_since(t0);
  if (p.total_q() > 0 || p.total_kv() > 0) run(rq, out);
  t_last.total_ms = ms_since(t0);
  return out;
}

}  // namespace

std::optional<std::string> gpu_replicas_not_covered(const Problem& p, std::span<const ReplicaPipeline> configs) {
  if (auto why = problem_not_covered(p)) return why;
  for (const ReplicaPipeline& c : configs) {
    if (auto why = forward_not_covered(c.forward)) return why;
    if (auto why = backward_not_covered(c.backward)) return why;
  }
  return std::nullopt;
}

std::optional<std::vector<ReplicaPipelineResult>> backward_baselines_gpu(const Problem& p, const Inputs& in,
                                                                         std::span<const float> d_out,
                                                                         std::span<const ReplicaPipeline> configs) {
  const char* who = "backward_baselines_gpu";
  check_inputs(p, in, who);
  if (static_cast<int64_t>(d_out.size()) != p.o_elems())
    throw std::invalid_argument(std::string(who) + ": dO has " + std::to_string(d_out.size()) +
                                " values; the problem needs " + std::to_string(p.o_elems()));
  for (const ReplicaPipeline& c : configs) check_tiles(c, who);
  std::optional<Out> out = run_request({p, in, {configs.begin(), configs.end()}, true, true, d_out, {}, {}});
  if (!out) return std::nullopt;
  std::vector<ReplicaPipelineResult> r;
  for (size_t c = 0; c < configs.size(); ++c)
    r.push_back({std::move(out->fwd[c]), std::move(out->grads[c])});
  return r;
}

std::optional<ReplicaResult> replica_attention_gpu(const Problem& p, const Inputs& in, const ReplicaConfig& cfg) {
  check_inputs(p, in, "replica_attention_gpu");
  const ReplicaPipeline c{cfg, {}};
  check_tiles(c, "replica_attention_gpu");
  std::optional<Out> out = run_request({p, in, {c}, true, false, {}, {}, {}});
  if (!out) return std::nullopt;
  return std::move(out->fwd.front());
}

std::optional<ReplicaGradients> replica_attention_backward_gpu(const Problem& p, const Inputs& in,
                                                               std::span<const float> o, std::span<const float> lse,
                                                               std::span<const float> d_out,
                                                               const BackwardReplicaConfig& cfg) {
  const char* who = "replica_attention_backward_gpu";
  check_inputs(p, in, who);
  auto need = [&](const char* name, size_t have, int64_t n) {
    if (static_cast<int64_t>(have) != n)
      throw std::invalid_argument(std::string(who) + ": " + name + " has " + std::to_string(have) +
                                  " values; the problem needs " + std::to_string(n));
  };
  need("o", o.size(), p.o_elems());
  need("lse", lse.size(), p.lse_elems());
  need("dO", d_out.size(), p.o_elems());
  ReplicaPipeline c{{}, cfg};
  check_tiles(c, who);
  std::optional<Out> out = run_request({p, in, {c}, false, true, d_out, o, lse});
  if (!out) return std::nullopt;
  return std::move(out->grads.front());
}

}  // namespace flashcheck
