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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace flashcheck {

// Advise huge pages for the 2 MiB-aligned interior of [p, p + bytes). Errors are ignored: advice.
inline void advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (e > a) (void)madvise(reinterpret_cast<void*>(a), e - a, MADV_HUGEPAGE);
}

// n value-initialised elements; from 4 MiB (two huge pages) the buffer is advised huge pages before
// it is zeroed (the oracle's 32 MiB output at 1×32×1024×128 spent ~15 ms in 4 KiB faults).
template <typename T>
std::vector<T> big_vector(size_t n) {
  std::vector<T> v;
  if (n * sizeof(T) >= (size_t{4} << 20)) {
    v.reserve(n);
    advise_huge_pages(v.data(), n * sizeof(T));
  }
  v.resize(n);
  return v;
}

// An allocator whose value-less construct() leaves a trivial element uninitialised, so a vector of
// it can be sized without a zero pass, and each page is first touched (faulted in, zeroed by the
// kernel) by the thread that writes it. Measured: the oracle's 537 MB output at (1,16,32768,128)
// cost ~80 ms of one thread in faults and the zero pass, 10% of a (1024, 0) window's whole call on
// 16 threads (session 7, PERF.md). Whoever sizes such a vector writes every element.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-, not value-initialised
  }
  template <typename U, typename... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
template <typename T>
using UninitVector = std::vector<T, UninitAllocator<T>>;

// Tests set this so uninit_big_vector fills what it hands out with 0xff bytes (NaN for floating
// types): fresh pages come zeroed from the kernel, so an element nobody writes would otherwise
// read as a plausible 0 in every test.
inline std::atomic<bool>& poison_uninit_for_tests() {
  static std::atomic<bool> on{false};
  return on;
}

// n uninitialised elements, advised huge pages from 4 MiB: for buffers every element of which is
// written before it is read, by as many threads as write them.
template <typename T>
UninitVector<T> uninit_big_vector(size_t n) {
  UninitVector<T> v;
  if (n * sizeof(T) >= (size_t{4} << 20)) {
    v.reserve(n);
    advise_huge_pages(v.data(), n * sizeof(T));
  }
  v.resize(n);
  if (poison_uninit_for_tests().load(std::memory_order_relaxed) && n > 0) std::memset(static_cast<void*>(v.data()), 0xff, n * sizeof(T));
  return v;
}

// Scratch that is written before it is read: `fit(n)` returns room for n elements, uninitialised
// (no zero pass), 2 MiB aligned and advised huge pages, so the first touch, by whichever thread
// writes it first, costs one fault per 2 MiB. It grows only, and is kept until destroyed.
template <typename T>
class HugeBuffer {
 public:
  T* fit(size_t n) {
    if (n > n_) {
      constexpr size_t kHuge = size_t{2} << 20;
      const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
      p_.reset(static_cast<T*>(std::aligned_alloc(kHuge, bytes)));
      if (!p_) throw std::bad_alloc();
      advise_huge_pages(p_.get(), bytes);
      n_ = bytes / sizeof(T);
    }
    return p_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> p_;
  size_t n_ = 0;
};

}  // namespace flashcheck
