// The tile a launcher actually used, for the test that holds it to the declared one
// (runner/launched_tile_test.cpp): a kernel's Capabilities::tiles tell the campaign which tile
// boundaries to aim at and the replica which blocking to mirror, so a dispatch that launches
// another configuration (wgmma_f16's causal D = 128 launched with the non-causal N = 176, say) is a
// wrong declaration that no output check sees (tools/mutate/DETECTION.md, gap 4).
//
// Host code only, no CUDA: launchers in .cu files (C++17) and tests (C++20) include it. One
// record per host thread (the launch and the test's read happen on the same thread); `inline`
// variables give one record per program (in a plugin module, the module's own).
#pragma once

namespace flashcheck::kernels {

struct LaunchedTile {
  const char* kernel = nullptr;  // null: nothing launched since the last clear
  int block_q = 0;               // query rows per CTA
  int block_kv = 0;              // keys per KV tile; 0: this launcher does not say
};

inline thread_local LaunchedTile g_launched_tile;

// Called by a launcher right after a successful launch, with the tile of the configuration it launched.
inline void note_launched_tile(const char* kernel, int block_q, int block_kv) { g_launched_tile = {kernel, block_q, block_kv}; }
inline LaunchedTile last_launched_tile() { return g_launched_tile; }
inline void clear_launched_tile() { g_launched_tile = {}; }

}  // namespace flashcheck::kernels
