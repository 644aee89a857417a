// Where P's e4m3 A fragments come from, and the key order of the Vᵀ copy that makes them need no
// shuffle (transpose_v.cuh writes it, mainloop.cuh's e4m3_to_p packs by it, vt_layout_test.cpp
// holds the two together). Plain C++: constexpr, called from device code (--expt-relaxed-constexpr).
//
// The layouts (PTX ISA, wgmma): a thread (lane l of its warp, g = l / 4, t = l % 4) holds S's
// accumulator d[4j + e] at row g + 8·(e >> 1), key 8j + 2t + (e & 1): two adjacent keys per 8-key
// block. The e4m3 A fragment of one k32 step is four registers of four bytes, register r at row
// g + 8·(r & 1), k positions 16·(r >> 1) + 4t + {0..3}: four adjacent k positions.
#pragma once

namespace flashcheck::kernels {

// The key held at k position q of each aligned 16-key group of Vᵀ: positions 4t .. 4t + 3 hold keys
// 2t, 2t + 1, 8 + 2t, 9 + 2t, the four keys of one row a thread holds in two 8-key blocks.
constexpr int vt_key_of_position(int q) { return 8 * ((q >> 1) & 1) + 2 * (q >> 2) + (q & 1); }

// The accumulator index (of S, kBlockN/2 per thread) whose probability goes to byte b of A
// register r in k-step kk: the same row (r & 1 is the row half), the keys of the 16-key half r >> 1.
constexpr int p_accumulator(int kk, int r, int b) { return 16 * kk + 8 * (r >> 1) + 2 * (r & 1) + 4 * (b >> 1) + (b & 1); }

}  // namespace flashcheck::kernels
