// A gradient where a kernel writes it: the oracle's gradients are in the logical layout
// (reference/naive_backward.h), a kernel's in the storage of the tensor it differentiates
// (reference/storage.h: BHSD, BSHD, THD with padding, a paged cache, strided views).
#pragma once
#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/storage.h"

namespace flashcheck {

// The gradient of tensor t laid into its storage: each logical row added to the storage row it
// was read from. Rows read from the same storage row — the keys of a page that several sequences
// share — add, in logical order (sequence, head, position): the cache holds one value for all of
// them, so its gradient is the sum of theirs. Elements no logical row maps to (THD padding,
// unused pages and slots, stored keys past seqused) are 0: nothing read them.
inline std::vector<double> gradient_in_storage(const Storage& st, Tensor t, std::span<const double> logical) {
  std::vector<double> out(static_cast<size_t>(st.elems(t)), 0.0);
  int64_t rows_end = 0;
  st.for_each_row(t, [&](int64_t l, int64_t, int64_t w) { rows_end = std::max(rows_end, l + w); });
  if (static_cast<int64_t>(logical.size()) != rows_end)
    throw std::invalid_argument("gradient_in_storage: the logical " + std::string(to_string(t)) + " gradient has " +
                                std::to_string(logical.size()) + " values; the problem has " + std::to_string(rows_end));
  st.for_each_row(t, [&](int64_t l, int64_t s, int64_t w) {
    for (int64_t c = 0; c < w; ++c) out[static_cast<size_t>(s + c)] += logical[static_cast<size_t>(l + c)];
  });
  return out;
}

}  // namespace flashcheck
