// Vectors of 10^8..10^9 elements (a production-size check holds ~10 GB of them) without paying
// a page fault per 4 KiB.
//
// Measured on the GPU machine (H100 VM, 2026-11-22): `check` of a 2.15 GB file spent most of its
// 10.8 s in phases that only allocate, fill and read back fresh memory: every first touch of a
// 4 KiB page traps to the kernel (and to the hypervisor). Asking for transparent huge pages on
// the buffer before it is filled cuts the faults 512-fold where the kernel allows THP
// ("madvise" or "always" in /sys/kernel/mm/transparent_hugepage/enabled); elsewhere the advice is
// ignored and nothing changes.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace flashcheck {

// Advise huge pages for the 2 MiB-aligned interior of [p, p + bytes). Errors are ignored: advice.
inline void advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (e > a) (void)madvise(reinterpret_cast<void*>(a), e - a, MADV_HUGEPAGE);
}

// n value-initialised elements; past 64 MiB the buffer is advised huge pages before it is zeroed.
template <typename T>
std::vector<T> big_vector(size_t n) {
  std::vector<T> v;
  if (n * sizeof(T) >= (size_t{64} << 20)) {
    v.reserve(n);
    advise_huge_pages(v.data(), n * sizeof(T));
  }
  v.resize(n);
  return v;
}

}  // namespace flashcheck
