// Host side of the GPU backward oracle (naive_attention_backward_gpu): every row of the problem in
// the forward oracle's tiles (pieces.h), the six launches per piece (kernels.h), and the results laid
// into naive_attention_backward's layouts. dK, dV and the sinks' gradient of a KV head whose tiles
// fall into several pieces are summed here, piece after piece in tile order: a fixed order, so a
// call gives the same bits every time.
#include <cuda_runtime.h>

#include "reference/gpu_oracle/pieces.h"

namespace flashcheck {

namespace go = gpu_oracle;

namespace {

using namespace gpu_oracle_host;

struct Result {
  BackwardResult* r;
  std::span<const float> d_out;
};

template <typename U>
void run_backward_pieces(Job& j, Result res) {
  const Problem& p = j.p;
  auto& timing = t_last;
  double most_bytes = 0;
  const std::vector<Piece> pieces = plan_pieces(j, memory_budget(), &most_bytes);
  timing.pieces = static_cast<int>(pieces.size());
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  BackwardResult& r = *res.r;

  auto t0 = Clock::now();
  CallDevice dev(j, most_bytes);
  StreamAndEvents& se = dev.se;
  const go::Params& prm = dev.prm;
  timing.alloc_ms += ms_since(t0);

  Packed<U> h;
  std::vector<int64_t> dorow;
  UninitVector<float> h_do;
  std::vector<double> h_dk, h_dv, h_sink;
  for (const Piece& pc : pieces) {
    t0 = Clock::now();
    pack_piece(j, pc, h);
    dorow.assign(h.rows.size(), -1);
    for (size_t x = 0; x < h.rows.size(); ++x)
      if (h.rows[x].out >= 0) dorow[x] = pc.out0 + h.rows[x].out;
    pack(h_do, dorow, res.d_out.data(), j.dv_pad, dv, DType::f32);  // dO exactly as given: fp32 rows
    timing.pack_ms += ms_since(t0);

    const std::vector<int64_t> sz = piece_buffers(j, pc);
    Carve c{dev.arena.as<char>()};
    t0 = Clock::now();
    const PieceInputs in = upload_inputs(c, sz, h, se.stream);
    double* d_s = c.take<double>(sz[6]);
    double* d_pmax = c.take<double>(sz[7]);
    float* d_do = c.take<float>(sz[8]);
    double* d_dp = c.take<double>(sz[9]);
    double* d_z = sz[10] ? c.take<double>(sz[10]) : nullptr;
    double* d_dq = c.take<double>(sz[11]);
    double* d_dk = c.take<double>(sz[12]);
    double* d_dv = c.take<double>(sz[13]);
    double* d_sink = c.take<double>(sz[14]);
    go::Region* d_regions = c.take<go::Region>(sz[15]);
    upload(d_do, h_do.data(), h_do.size() * sizeof(float), se.stream);
    upload(d_regions, h.regions.data(), h.regions.size() * sizeof(go::Region), se.stream);
    poison(d_dq, sz[11], se.stream);
    poison(d_dk, sz[12], se.stream);
    poison(d_dv, sz[13], se.stream);
    poison(d_sink, sz[14], se.stream);
    FCO_CUDA(cudaStreamSynchronize(se.stream));
    timing.h2d_ms += ms_since(t0);

    const go::Geom g = piece_geom(prm, in, pc);
    go::Geom gq = g;  // dQ is a P·V whose "V" is K: Dqk's width
    gq.p.dv = dqk;
    gq.p.dv_pad = j.dqk_pad;
    const int64_t nregions = static_cast<int64_t>(h.regions.size());
    dev.timed([&] {
      go::launch_f64_scores(j.elem, in.q, in.k, d_s, d_pmax, g, se.stream, d_z);
      go::launch_f64_dp(j.elem, d_do, in.v, d_dp, g, se.stream);
      go::launch_f64_ds(d_s, d_dp, d_pmax, d_z, d_sink, g, se.stream);
      go::launch_f64_dq(j.elem, d_dp, in.k, d_dq, gq, se.stream);
      go::launch_f64_keys(j.elem, false, d_s, d_do, d_dv, d_regions, nregions, h.key_blocks, 1.0, g, se.stream);
      go::launch_f64_keys(j.elem, true, d_dp, in.q, d_dk, d_regions, nregions, h.key_blocks, prm.scale, g, se.stream);
    });

    // dQ rows are the piece's result rows, contiguous in the logical layout (every row, RowSet
    // order); dK, dV and the sinks' parts are added where they belong.
    t0 = Clock::now();
    const int64_t kv_rows = static_cast<int64_t>(h.kvrow.size());
    h_dk.resize(static_cast<size_t>(kv_rows * dqk));
    h_dv.resize(static_cast<size_t>(kv_rows * dv));
    h_sink.resize(static_cast<size_t>(pc.out_rows));
    FCO_CUDA(cudaMemcpyAsync(r.dq.data() + pc.out0 * dqk, d_dq, static_cast<size_t>(pc.out_rows * dqk) * 8,
                             cudaMemcpyDeviceToHost, se.stream));
    FCO_CUDA(cudaMemcpyAsync(h_dk.data(), d_dk, h_dk.size() * 8, cudaMemcpyDeviceToHost, se.stream));
    FCO_CUDA(cudaMemcpyAsync(h_dv.data(), d_dv, h_dv.size() * 8, cudaMemcpyDeviceToHost, se.stream));
    FCO_CUDA(cudaMemcpyAsync(h_sink.data(), d_sink, h_sink.size() * 8, cudaMemcpyDeviceToHost, se.stream));
    FCO_CUDA(cudaStreamSynchronize(se.stream));
    // A packed key row past the sequence's keys has no source (and its gradient is 0 by
    // construction); every real one is its (sequence, KV head, key)'s own row of Inputs::k / v.
#pragma omp parallel for schedule(static)
    for (int64_t x = 0; x < kv_rows; ++x) {
      const int64_t row = h.kvrow[static_cast<size_t>(x)];
      if (row < 0) continue;
      double* to_k = r.dk.data() + row * dqk;
      for (int64_t col = 0; col < dqk; ++col) to_k[col] += h_dk[static_cast<size_t>(x * dqk + col)];
      double* to_v = r.dv.data() + row * dv;
      for (int64_t col = 0; col < dv; ++col) to_v[col] += h_dv[static_cast<size_t>(x * dv + col)];
    }
    if (p.sinks)
      for (const go::Row& row : h.rows)
        if (row.out >= 0) r.dsinks[static_cast<size_t>(row.h)] += h_sink[static_cast<size_t>(row.out)];
    timing.d2h_ms += ms_since(t0);  // downloads and the host's sums
  }
}

}  // namespace

BackwardResult naive_attention_backward_gpu(const Problem& p, const Inputs& in, std::span<const float> d_out) {
  const auto t0 = Clock::now();
  t_last = {};
  const RowSet rows = RowSet::all(p);
  check_call(p, in, rows, "naive_attention_backward_gpu");
  if (static_cast<int64_t>(d_out.size()) != p.o_elems())
    throw std::invalid_argument("naive_attention_backward_gpu: dO has " + std::to_string(d_out.size()) +
                                " values; the problem needs " + std::to_string(p.o_elems()));
  require_available();
  BackwardResult r;
  // dQ: every row is a result row, written by its piece. dK, dV: sums, from 0 (keys no row sees
  // stay 0); zeroed by all threads, each first touching its own pages.
  r.dq = uninit_big_vector<double>(static_cast<size_t>(p.q_elems()));
  r.dk = uninit_big_vector<double>(static_cast<size_t>(p.k_elems()));
  r.dv = uninit_big_vector<double>(static_cast<size_t>(p.v_elems()));
  // Also before a second attempt (run_packed's fp32 fallback), over the first one's partial sums.
  auto zero_sums = [&] {
    for (UninitVector<double>* v : {&r.dk, &r.dv}) {
      const int64_t n = static_cast<int64_t>(v->size()), kChunk = int64_t{1} << 20;
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < n; c += kChunk) std::fill(v->begin() + c, v->begin() + std::min(n, c + kChunk), 0.0);
    }
    if (p.sinks) r.dsinks.assign(static_cast<size_t>(p.heads_q), 0.0);
  };
  zero_sums();
  t_last.result_alloc_ms = ms_since(t0);
  if (rows.total() == 0) return r;
  Job j(p, in, Pipeline::backward, rows);
  j.dqk_pad = oracle_pad(p.head_dim_qk);
  j.dv_pad = oracle_pad(p.head_dim_v);
  plan_tiles(j);
  bool first = true;
  run_packed(j, [&](auto elem) {
    if (!first) zero_sums();
    first = false;
    run_backward_pieces<decltype(elem)>(j, {&r, d_out});
  });
  t_last.total_ms = ms_since(t0);
  return r;
}

}  // namespace flashcheck
