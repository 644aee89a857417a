// wgmma_e4m3's P·V data path on paper: for every lane, k-step and fragment byte, the probability
// e4m3_to_p packs (p_accumulator) is the one of the key the Vᵀ copy holds at that k position
// (vt_key_of_position), in the same row. A wrong index in either shows here, on the CPU, as the
// key that gets another key's weight.
#include <gtest/gtest.h>

#include <set>

#include "gpu/wgmma_e4m3/vt_layout.h"

namespace flashcheck::kernels {
namespace {

TEST(VtLayout, EachGroupOf16HoldsEveryKeyOnce) {
  std::set<int> keys;
  for (int q = 0; q < 16; ++q) keys.insert(vt_key_of_position(q));
  EXPECT_EQ(keys.size(), 16u);
  EXPECT_EQ(*keys.begin(), 0);
  EXPECT_EQ(*keys.rbegin(), 15);
}

TEST(VtLayout, EveryFragmentByteCarriesTheKeyVtHoldsThere) {
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int kk = 0; kk < 8; ++kk)  // up to kBlockN = 256: eight k32 steps (192: six)
      for (int r = 0; r < 4; ++r)
        for (int b = 0; b < 4; ++b) {
          // The accumulator packed into this byte: its row and key (wgmma's accumulator layout).
          const int acc = p_accumulator(kk, r, b), j = acc / 4, e = acc % 4;
          const int acc_row = g + 8 * (e >> 1), acc_key = 8 * j + 2 * t + (e & 1);
          // The byte's place in the A fragment, and the key Vᵀ holds at that k position.
          const int a_row = g + 8 * (r & 1), k = 32 * kk + 16 * (r >> 1) + 4 * t + b;
          const int vt_key = 16 * (k / 16) + vt_key_of_position(k % 16);
          ASSERT_EQ(acc_row, a_row) << "lane " << lane << " step " << kk << " register " << r << " byte " << b;
          ASSERT_EQ(acc_key, vt_key) << "lane " << lane << " step " << kk << " register " << r << " byte " << b
                                     << ": P of key " << acc_key << " meets V of key " << vt_key;
        }
  }
}

}  // namespace
}  // namespace flashcheck::kernels
