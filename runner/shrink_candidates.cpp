#include "runner/shrink_candidates.h"

#include <algorithm>
#include <cstdint>

namespace flashcheck {

namespace {

// Sequences [from, to) of p as a batch of their own, per-sequence lists cut alike.
Problem only_sequences(const Problem& p, int64_t from, int64_t to) {
  Problem q = p;
  q.batch = to - from;
  for (auto list : {&Problem::seqlens_q, &Problem::seqlens_kv, &Problem::seqused_kv}) {
    const std::vector<int64_t>& l = p.*list;
    if (!l.empty()) q.*list = std::vector<int64_t>(l.begin() + from, l.begin() + to);
  }
  return q;
}

bool has_lists(const Problem& p) { return !p.seqlens_q.empty() || !p.seqlens_kv.empty() || !p.seqused_kv.empty(); }

// A candidate brought inside the declared length limits: each length down to a multiple (never
// below one), and where Sq = Skv is declared the shortened side shortens the other too. Without
// this, shortening Sq alone would be declined at every step and the lengths would never shrink.
void fit_declared_lengths(Problem& q, const Capabilities& caps) {
  const int64_t n = std::max<int64_t>(1, caps.seq_multiple);
  auto fit = [&](int64_t& x) {
    if (n > 1 && x % n != 0) x = std::max(n, x / n * n);
  };
  if (caps.equal_lengths) {
    q.seq_q = q.seq_kv = std::min(q.seq_q, q.seq_kv);
    for (size_t b = 0; b < q.seqlens_q.size() && b < q.seqlens_kv.size(); ++b)
      q.seqlens_q[b] = q.seqlens_kv[b] = std::min(q.seqlens_q[b], q.seqlens_kv[b]);
    if (q.seqlens_q.empty())
      for (int64_t& x : q.seqlens_kv) x = q.seq_q;
  }
  fit(q.seq_q);
  fit(q.seq_kv);
  for (auto list : {&Problem::seqlens_q, &Problem::seqlens_kv, &Problem::seqused_kv})
    for (int64_t& x : q.*list)
      if (x > 0) fit(x);
}

}  // namespace

std::vector<Problem> smaller_problems(const Problem& p, const Capabilities& caps) {
  std::vector<Problem> out;
  auto push = [&](Problem q) {
    fit_declared_lengths(q, caps);
    try {
      normalize(q);
      validate(q);
    } catch (const InvalidProblem&) {
      return;  // e.g. a layout that no longer fits the sequences: not a candidate
    }
    // Outside the declaration (a (Dqk, Dv) pair not compiled, ...) it would only be declined.
    if (caps.refusal(q)) return;
    if (q != p && std::find(out.begin(), out.end(), q) == out.end()) out.push_back(q);
  };
  Problem q;

  // ---- The variants, each dropped alone: what the failure does not need leaves the reproduce line.
  if (p.paged()) {  // a contiguous cache: paging was not the cause
    q = p;
    q.page_size = 0;
    q.page_order = PageOrder::identity;
    if (q.seqlens_q.empty()) {  // dense queries: cache lengths become keys used of a dense cache
      q.seqused_kv = q.seqused_kv.empty() ? q.seqlens_kv : q.seqused_kv;
      q.seqlens_kv.clear();
    }
    push(q);
  }
  if (p.softcap > 0) {
    q = p;
    q.softcap = 0;
    push(q);
  }
  if (p.alibi != Alibi::none) {
    q = p;
    q.alibi = Alibi::none;
    q.alibi_per_batch = false;
    push(q);
    if (p.alibi_per_batch) {
      q = p;
      q.alibi_per_batch = false;
      push(q);
    }
  }
  if (p.sinks) {
    q = p;
    q.sinks = false;
    push(q);
  }
  if (!p.seqused_kv.empty()) {
    q = p;
    q.seqused_kv.clear();
    push(q);
  }
  if (p.layout == Layout::bshd) {
    q = p;
    q.layout = Layout::bhsd;
    push(q);
  }
  if (p.descale != Descale::none) {
    q = p;
    q.descale = p.descale == Descale::head ? Descale::tensor : Descale::none;
    push(q);
  }
  if (!p.window.none()) {
    q = p;
    q.window = Window{};
    push(q);
    // Narrower, toward the smallest window that still fails: each side halved, then to 0.
    for (auto side : {&Window::left, &Window::right}) {
      const int64_t w = p.window.*side;
      for (int64_t n : {w / 2, int64_t{0}}) {
        if (w <= 0 || n >= w) continue;
        q = p;
        q.window.*side = n;
        push(q);
      }
    }
  }

  // ---- Sequences: each alone (a failure in one sequence shrinks to it), then each half.
  if (p.batch > 1) {
    if (has_lists(p)) {
      for (int64_t b = 0; b < p.batch; ++b) push(only_sequences(p, b, b + 1));
      push(only_sequences(p, 0, p.batch / 2));
      push(only_sequences(p, p.batch / 2, p.batch));
    } else {
      q = p;
      q.batch = 1;
      push(q);
    }
  }

  // ---- Heads.
  if (p.group() > 1) {
    q = p;
    q.heads_q = p.heads_kv;  // plain MHA
    push(q);
    // Smaller groups too: a fault that shows in one query head of a group may not show in the
    // group's first head alone, and a group of 2 is still smaller than one of 4.
    for (int64_t g = p.group() / 2; g > 1; g /= 2) {
      q = p;
      q.heads_q = p.heads_kv * g;
      push(q);
    }
  }
  if (p.heads_kv > 1) {
    q = p;
    q.heads_q = p.group();
    q.heads_kv = 1;
    push(q);
  }

  // ---- Lengths. Halving, a quarter off and stepping by one, plus their even neighbours: a kernel
  // that declines odd lengths (or other residues) would otherwise strand the shrinker, e.g. at 10
  // when 5 and 9 are declined. A quarter off keeps the walk logarithmic where halving one length
  // hides the fault and only the other's size matters: a top-left causal tail bug at Sq 126, Skv 64
  // shows while Sq >= Skv, so halving Sq always passed, and one-by-one steps spent the whole step
  // budget on the way down to 64 (CApi test, FLASHCHECK_SEED=6392087453616338575). A batch of
  // listed lengths shrinks once it is down to one sequence.
  auto lengths = [](int64_t n) {
    std::vector<int64_t> l;
    for (int64_t len : {int64_t{1}, n / 2, n - n / 4, n - 1, n / 2 - 1, n - 2})
      if (len >= 1 && len < n && std::find(l.begin(), l.end(), len) == l.end()) l.push_back(len);
    return l;
  };
  if (!has_lists(p)) {
    // Both halved first: a fault that needs their relation (a causal edge, Sq >= Skv) keeps it.
    if (p.seq_q > 1 && p.seq_kv > 1) {
      q = p;
      q.seq_q = p.seq_q / 2;
      q.seq_kv = p.seq_kv / 2;
      push(q);
    }
    for (auto m : {&Problem::seq_q, &Problem::seq_kv})
      for (int64_t len : lengths(p.*m)) {
        q = p;
        q.*m = len;
        push(q);
      }
  } else if (p.batch == 1) {
    for (auto list : {&Problem::seqlens_q, &Problem::seqlens_kv, &Problem::seqused_kv}) {
      if ((p.*list).empty()) continue;
      for (int64_t len : lengths((p.*list)[0])) {
        q = p;
        (q.*list)[0] = len;
        // Keys used never exceed those stored: both shrink together when they would cross.
        if (!q.seqused_kv.empty() && !q.seqlens_kv.empty()) q.seqused_kv[0] = std::min(q.seqused_kv[0], q.seqlens_kv[0]);
        push(q);
      }
    }
    if (p.seqlens_q.empty()) {  // dense queries over listed keys
      for (int64_t len : lengths(p.seq_q)) {
        q = p;
        q.seq_q = len;
        push(q);
      }
    }
  }

  // ---- Head dims among those declared (any smaller one when none is: the grid's and a step down).
  std::vector<int64_t> dims = caps.head_dims;
  if (dims.empty()) dims = {1, 8, 16, 32, 64, 128, p.head_dim_qk / 2, p.head_dim_qk - 1};
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  for (int64_t d : dims) {
    if (d < 1) continue;
    if (d >= p.head_dim_qk) continue;
    q = p;
    q.head_dim_qk = d;
    q.head_dim_v = caps.dv_ne_dqk ? std::min(p.head_dim_v, d) : d;
    push(q);
  }
  if (p.head_dim_v != p.head_dim_qk) {
    q = p;
    q.head_dim_v = q.head_dim_qk;
    push(q);
  }
  return out;
}

}  // namespace flashcheck
