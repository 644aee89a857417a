// Shared memory keeps whatever the previous kernel on an SM left in it. A kernel that reads a tile
// it never loaded (a stage past the last tile, an unguarded tail) then computes with leftovers that
// are usually finite, and its bug hides: the mutant that runs one extra, fully masked main-loop
// iteration multiplies P = 0 by a never-loaded V stage and passes while that stage holds finite
// bits (tools/mutate/DETECTION.md, gap 1). Before every checked launch the harness fills the shared
// memory of every SM with all-ones words: 0xFFFF is a NaN in bf16 and f16 and 0xFFFFFFFF in f32,
// so 0 · leftover is NaN and lands in nan_inf_positions.
#pragma once
#include <cstdint>

namespace flashcheck::kernels {

// Enqueues the fill on `stream` (a cudaStream_t), checked. Every SM gets at least one block that
// holds the largest dynamic shared memory a block may opt into.
void poison_shared_memory(void* stream);

// For the test of the above: launches the same geometry, each block ANDs every word of its
// (uninitialised) shared memory, and returns the AND over all blocks: 0xFFFFFFFF after a poisoning.
uint32_t probe_shared_memory(void* stream);

}  // namespace flashcheck::kernels
